"""The attribution service's HTTP surface against a fake hub and a fixed Observation (no cluster).

Access rules (403 for another user's workspace, 404 for none, admin sees all), JSON shapes, the
dashboard's grid, and the service's own /metrics.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Any, ClassVar

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPResponse
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from gpuworkspace_spawner.services.attribution.app import make_app
from gpuworkspace_spawner.services.attribution.collector import Collector
from gpuworkspace_spawner.services.attribution.handlers import State
from gpuworkspace_spawner.services.attribution.model import DeviceSample, NodeInfo, Observation, WorkspacePod

NODE = "gpu-node-a"
NOW = 1_800_000_000.0
PREFIX = "/services/gpuworkspace-attribution/"
SERVICE = "gpuworkspace-attribution"
ACCESS = f"access:services!service={SERVICE}"


def ws(
    user: str, server: str = "", resources: Mapping[str, int] | None = None, runtime: str = "container"
) -> WorkspacePod:
    name = f"jupyter-{user}{'-' + server if server else ''}"
    res = dict(resources if resources is not None else {"nvidia.com/gpu": 1})
    mode = (
        "mig"
        if any("mig-" in r for r in res)
        else "time-sliced"
        if "nvidia.com/gpu.shared" in res
        else "exclusive"
    )
    return WorkspacePod(
        namespace="gpu-workspaces",
        pod=name,
        uid=f"uid-{name}",
        user=user,
        server=server,
        profile="gpu-profile",
        gpu_mode=mode if res else "none",
        runtime=runtime,
        node=NODE,
        cpu_request=2.0,
        memory_request=8 * 2**30,
        gpu_resources=res,
    )


def dev(gpu: str, *pods: WorkspacePod, util: float = 50.0, mig: str | None = None) -> DeviceSample:
    return DeviceSample(
        node=NODE,
        gpu=gpu,
        uuid=f"GPU-{gpu}",
        model="NVIDIA H100 80GB HBM3",
        util_percent=util,
        mem_used_mib=1000.0,
        mem_total_mib=81559.0,
        power_w=None if mig else 300.0,
        mig_profile="1g.10gb" if mig else None,
        mig_instance=mig,
        pods=tuple((p.namespace, p.pod) for p in pods),
    )


ALICE = ws("alice")
ALICE_NAMED = ws("alice", "train")
BOB = ws("bob", resources={"nvidia.com/gpu.shared": 1})
CAROL = ws("carol", resources={"nvidia.com/gpu.shared": 1})
DAVE = ws("dave", resources={"nvidia.com/mig-1g.10gb": 1})
ERIN = ws("erin", resources={"nvidia.com/GH100_H100_SXM5_80GB": 1}, runtime="vm")
# a pod of a job alice submitted from her default server: the same user and server annotations
ALICE_JOB = replace(
    ws("alice"),
    pod="alice-train-x7k2q-9fz2d",
    uid="uid-job",
    profile="train-1gpu",
    kind="job",
    job="alice-train-x7k2q",
)
OBS = Observation(
    now=NOW,
    nodes=(
        NodeInfo(
            NODE,
            ready=True,
            capacity={"cpu": 128, "memory": 2**40, "nvidia.com/gpu": 6},
            allocatable={"cpu": 127.5, "memory": 2**40, "nvidia.com/gpu": 6},
        ),
    ),
    workspaces=(ALICE, ALICE_NAMED, BOB, CAROL, DAVE, ERIN, ALICE_JOB),
    devices=(
        dev("0", ALICE, util=80.0),
        dev("3", ALICE_JOB, util=97.0),
        dev("1", ALICE_NAMED, util=1.0),
        dev("2", util=0.0),
        dev("6", CAROL, util=60.0),
        dev("7", DAVE, util=30.0, mig="9"),
    ),
    failed_sources=("agent gpu-node-b: connection refused",),
)

TOKENS: dict[str, dict[str, Any]] = {
    "alice": {"kind": "user", "name": "alice", "scopes": [ACCESS, "read:servers!user=alice"]},
    "bob": {"kind": "user", "name": "bob", "scopes": [ACCESS]},
    "admin": {"kind": "user", "name": "admin", "scopes": ["admin:servers", "read:metrics", ACCESS]},
    "nobody": {"kind": "user", "name": "zed", "scopes": []},
    # the idle culler's token: every user's servers readable, nothing admin
    "culler": {"kind": "service", "name": "gpuworkspace-culler", "scopes": ["read:servers", "list:users"]},
}


class FakeSource:
    async def start(self) -> None: ...

    async def observe(self, now: float) -> Observation:
        return Observation(**{**OBS.__dict__, "now": now})

    async def stop(self) -> None: ...


class FakeHubAuth:
    """HubAuth's get_user: the model of the token in the Authorization header."""

    async def _user(self, handler: Any) -> dict[str, Any] | None:
        header = handler.request.headers.get("Authorization", "")
        return TOKENS.get(header.removeprefix("token ").strip())

    def get_user(self, handler: Any, *, sync: bool = True) -> Any:
        return self._user(handler)


class FakeGroups:
    groups_of_user: ClassVar[dict[str, tuple[str, ...]]] = {
        "alice": ("ml",),
        "bob": ("ml",),
        "carol": ("vision",),
    }
    error: str | None = None

    async def refresh(self, now: float) -> Mapping[str, tuple[str, ...]]:
        return self.groups_of_user


@pytest.fixture
async def base() -> AsyncIterator[str]:
    collector = Collector(FakeSource(), groups=FakeGroups())  # type: ignore[arg-type]
    await collector.cycle(NOW - 15)
    await collector.cycle(NOW)
    state = State(collector, FakeHubAuth(), prefix=PREFIX, service=SERVICE)
    sock, port = bind_unused_port()
    server = HTTPServer(make_app(state))
    server.add_sockets([sock])
    try:
        yield f"http://127.0.0.1:{port}{PREFIX}"
    finally:
        server.stop()


async def get(url: str, token: str | None) -> HTTPResponse:
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        return await AsyncHTTPClient().fetch(url, headers=headers)
    except HTTPClientError as exc:
        assert exc.response is not None
        return exc.response


async def get_json(url: str, token: str | None, status: int = 200) -> Any:
    response = await get(url, token)
    assert response.code == status, response.body
    assert response.headers["Content-Type"].startswith("application/json")
    return json.loads(response.body)


async def test_nodes_show_every_cell_with_owner_and_basis_to_any_user(base: str) -> None:
    body = await get_json(base + "api/v1/nodes", "bob")
    (node,) = body["items"]
    cells = {c["gpu"]: c for c in node["gpus"]}
    assert cells["0"]["owners"][0]["user"] == "alice" and cells["0"]["owners"][0]["basis"] == "measured"
    assert cells["2"]["free"] is True
    assert cells["7/mig-9"]["owners"][0]["user"] == "dave"
    shared = {o["user"]: o["basis"] for o in cells["6"]["owners"]}
    assert shared == {"bob": "shared", "carol": "shared"}
    passthrough = [c for c in node["gpus"] if c["kind"] == "passthrough"]
    assert [c["owners"][0]["user"] for c in passthrough] == ["erin"]
    assert passthrough[0]["util_percent"] is None and passthrough[0]["owners"][0]["basis"] == "allocation"


async def test_workspaces_are_own_for_users_and_all_for_admins(base: str) -> None:
    own = await get_json(base + "api/v1/workspaces", "alice")
    assert sorted(w["server"] for w in own["items"]) == ["", "train"]
    assert {w["user"] for w in own["items"]} == {"alice"}
    everyone = await get_json(base + "api/v1/workspaces", "admin")
    assert {w["user"] for w in everyone["items"]} == {"alice", "bob", "carol", "dave", "erin"}
    filtered = await get_json(base + "api/v1/workspaces?user=bob", "admin")
    assert [w["user"] for w in filtered["items"]] == ["bob"]
    denied = await get_json(base + "api/v1/workspaces?user=alice", "bob", 403)
    assert denied["status"] == 403 and "alice" in denied["message"]


async def test_a_jobs_pods_are_listed_apart_and_never_as_the_workspace_it_came_from(base: str) -> None:
    """alice's job runs on a GPU at 97 % while her default workspace idles at 80 %... on another card: the
    workspace's row, detail (what the culler and her JupyterLab read) and metrics stay the workspace's."""
    own = await get_json(base + "api/v1/workspaces", "alice")
    assert sorted((w["server"], w["kind"]) for w in own["items"]) == [
        ("", "workspace"),
        ("train", "workspace"),
    ]
    detail = await get_json(base + "api/v1/workspaces/alice/~", "alice")
    assert detail["pod"] == "jupyter-alice" and detail["gpu"]["util_percent"] == 80.0, detail
    jobs = await get_json(base + "api/v1/jobs", "alice")
    (job,) = jobs["items"]
    assert (job["kind"], job["job"], job["pod"]) == ("job", "alice-train-x7k2q", "alice-train-x7k2q-9fz2d")
    assert job["gpu"]["util_percent"] == 97.0 and job["profile"] == "train-1gpu"
    assert (await get_json(base + "api/v1/jobs", "bob"))["items"] == []
    assert (await get_json(base + "api/v1/jobs?user=alice", "bob", 403))["message"] == (
        "bob may not see the jobs of alice"
    )
    assert [j["job"] for j in (await get_json(base + "api/v1/jobs", "admin"))["items"]] == [
        "alice-train-x7k2q"
    ]
    nodes = await get_json(base + "api/v1/nodes", "alice")
    (card,) = [c for n in nodes["items"] for c in n["gpus"] if c["gpu"] == "3"]
    assert [(o["user"], o.get("job")) for o in card["owners"]] == [("alice", "alice-train-x7k2q")]
    html = (await get(base, "alice")).body.decode()
    assert 'data-job="alice-train-x7k2q"' in html.split('id="jobs-table"')[1].split("</table>")[0]
    assert "alice-train-x7k2q" not in html.split('id="workspaces-table"')[1].split("</table>")[0]


async def test_a_token_reading_all_servers_lists_every_workspace(base: str) -> None:
    """The idle culler reads every workspace's GPU figures with unfiltered read:servers, not admin."""
    everyone = await get_json(base + "api/v1/workspaces", "culler")
    assert {w["user"] for w in everyone["items"]} == {"alice", "bob", "carol", "dave", "erin"}
    assert all(w["cull_exempt"] is False for w in everyone["items"])


@pytest.mark.parametrize(
    ("path", "token", "status"),
    [
        pytest.param("alice/~", "alice", 200, id="own-default-tilde"),
        pytest.param("alice/default", "alice", 200, id="own-default-word"),
        pytest.param("alice/train", "alice", 200, id="own-named"),
        pytest.param("alice/~", "bob", 403, id="other-user"),
        pytest.param("alice/~", "admin", 200, id="admin"),
        pytest.param("alice/nope", "alice", 404, id="no-such-server"),
        pytest.param("ghost/~", "admin", 404, id="no-such-user"),
        pytest.param("alice/~", None, 403, id="no-token"),
        pytest.param("alice/~", "nobody", 403, id="no-scopes"),
    ],
)
async def test_workspace_detail_access(base: str, path: str, token: str | None, status: int) -> None:
    body = await get_json(base + f"api/v1/workspaces/{path}", token, status)
    if status == 200:
        assert body["user"] == "alice" and body["gpu"]["basis"] == "measured"
        assert body["gpu"]["allocated"] == 1 and "accounting" in body
    else:
        assert body["status"] == status and body["message"]


async def test_top_and_groups_are_limited_to_the_callers_groups(base: str) -> None:
    top = await get_json(base + "api/v1/top?by=gpu&limit=10", "bob")
    assert {row["user"] for row in top["items"]} <= {"alice", "bob"}
    assert top["items"][0]["rank"] == 1
    everyone = await get_json(base + "api/v1/top?by=gpu", "admin")
    assert {row["user"] for row in everyone["items"]} >= {"alice", "dave", "erin"}
    assert (await get_json(base + "api/v1/top?by=nonsense", "admin", 400))["status"] == 400
    groups = await get_json(base + "api/v1/groups", "bob")
    assert [g["group"] for g in groups["items"]] == ["ml"]
    assert sorted(g["group"] for g in (await get_json(base + "api/v1/groups", "admin"))["items"]) == [
        "ml",
        "vision",
    ]


async def test_trends_own_and_cluster_series_only(base: str) -> None:
    body = await get_json(base + "api/v1/trends?series=cluster:gpu_util,user:alice:gpus&window=1h", "alice")
    assert set(body["series"]) == {"cluster:gpu_util", "user:alice:gpus"}
    assert body["series"]["user:alice:gpus"][-1][1] == 3  # her two workspaces' GPUs and her job's
    await get_json(base + "api/v1/trends?series=user:alice:gpus", "bob", 403)
    await get_json(base + "api/v1/trends?window=soon", "bob", 400)


async def test_status_shows_failed_sources_to_admins_only(base: str) -> None:
    admin = await get_json(base + "api/v1/status", "admin")
    assert admin["failed_sources"] == ["agent gpu-node-b: connection refused"]
    assert "failed_sources" not in await get_json(base + "api/v1/status", "bob")


async def test_metrics_need_read_metrics(base: str) -> None:
    assert (await get(base + "metrics", "alice")).code == 403
    response = await get(base + "metrics", "admin")
    assert response.code == 200
    text = response.body.decode()
    assert (
        'gpuworkspace_workspace_gpu_utilization_percent{gpu_mode="exclusive",kind="workspace",node="gpu-node-a",profile="gpu-profile",server="",user="alice"} 80.0'
        in text
    )
    assert "gpuworkspace_gpu_allocated_seconds_total{" in text
    assert "gpuworkspace_attribution_cycle_duration_seconds" in text
    assert 'gpuworkspace_attribution_source_failures{source="agent"} 1.0' in text


async def test_dashboard_renders_the_grid_table_top_and_charts(base: str) -> None:
    response = await get(base, "alice")
    assert response.code == 200
    html = response.body.decode()
    for marker in (
        'id="node-grid"',
        'id="workspaces-table"',
        'id="top-consumers"',
        '<svg class="chart"',
        'id="legend"',
    ):
        assert marker in html
    assert 'class="gpu-cell' in html and 'data-node="gpu-node-a" data-gpu="7/mig-9"' in html
    assert "static/css/style.min.css" in html
    assert 'data-user="bob"' not in html.split('id="workspaces-table"')[1].split("</table>")[0]
    assert "connection refused" not in html  # failed sources: admins only
    assert "connection refused" in (await get(base, "admin")).body.decode()
    fragment = (await get(base + "?fragment=1", "alice")).body.decode()
    assert 'id="node-grid"' in fragment and "<html" not in fragment


async def test_dashboard_needs_a_login(base: str) -> None:
    assert (await get(base, None)).code == 403
    assert (await get(base, "nobody")).code == 403  # no access:services for this service


async def test_availability_counts_free_gpus_without_naming_holders(base: str) -> None:
    body = await get_json(base + "api/v1/availability?resource=nvidia.com/gpu&count=1", "bob")
    assert (body["free"], body["total"], body["startable"], body["text"]) == (3, 6, True, "3 of 6 GPU free")
    assert not {"alice", "owners", "user"} & set(json.dumps(body).replace('"', " ").split())
    four = await get_json(base + "api/v1/availability?resource=nvidia.com/gpu&count=4", "bob")
    assert (four["startable"], four["reason"]) == (False, "no-node-fits")
    other_pool = await get_json(
        base + "api/v1/availability?resource=nvidia.com/gpu&selector=gpuworkspace.dev/pool=gpu", "bob"
    )
    assert other_pool["reason"] == "no-nodes" and other_pool["why"]


@pytest.mark.parametrize(
    ("query", "token", "status", "message"),
    [
        pytest.param("resource=cpu", "bob", 400, "not a GPU resource", id="not-gpu"),
        pytest.param("resource=nvidia.com/gpu&count=-1", "bob", 400, "between 1 and 64", id="bad-count"),
        pytest.param("resource=nvidia.com/gpu&selector=x", "bob", 400, "key=value", id="bad-selector"),
        pytest.param("resource=nvidia.com/gpu", None, 403, "missing or invalid credentials", id="anonymous"),
        pytest.param("resource=nvidia.com/gpu&login=1", None, 403, "credentials", id="login-needs-oauth"),
        pytest.param("resource=nvidia.com/gpu", "nobody", 403, SERVICE, id="no-access"),
    ],
)
async def test_availability_errors_are_json(
    base: str, query: str, token: str | None, status: int, message: str
) -> None:
    body = await get_json(base + "api/v1/availability?" + query, token, status)
    assert body["status"] == status and message in body["message"]
