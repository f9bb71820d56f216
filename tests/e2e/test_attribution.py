"""GPU attribution end to end: scripted GPU load on real workspaces → the service's API and dashboard.

Workspaces are started through the hub's REST API (real single-user servers in devcluster pods, a
KubeVirt VM); their GPU load is scripted through the devcluster's control API, which drives the
simulated dcgm-exporter (and, for the agent, the fake NVML the real ``gpuworkspace-agent`` reads).
The service (``gpuworkspace-attribution``, managed by the hub) must report the scripted figures, each
with its basis: exclusive and MIG ``measured``, time-sliced ``shared`` without the agent and
``per-process`` with it, VM passthrough ``allocation`` with no utilisation.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .agents import start_agents
from .harness import REPO, HubStack, http, logged_in_page

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

NS = "gpu-workspaces"
SERVICE = "/services/gpuworkspace-attribution"
API = f"{SERVICE}/api/v1"
WORKLOAD = "/_devcluster/sim/workload"
ARTIFACTS = Path(os.environ.get("GPUWS_ARTIFACTS", REPO / ".artifacts"))
USERS = ("ana", "ben", "cai", "dee", "eve")


@pytest.fixture(scope="module", autouse=True)
def _our_spawner(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("the attribution service comes with this project's spawner configuration")


def kubectl(stack: HubStack, *args: str, stdin: str | None = None) -> str:
    env = {**os.environ, "KUBECONFIG": str(stack.kubeconfig)}
    done = subprocess.run(
        ["kubectl", *args], input=stdin, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr}")
    return done.stdout


def attr(stack: HubStack, path: str, token: str | None = None) -> tuple[int, Any]:
    """GET an attribution API path (below api/v1) through the proxy with a hub token."""
    headers = {"Authorization": f"token {token or stack.admin_token}"}
    status, raw = http("GET", f"{stack.url}{API}/{path}", headers=headers)
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def user_token(stack: HubStack, user: str) -> str:
    status, body = stack.hub.api("POST", f"/users/{user}/tokens", {"note": "attribution e2e"})
    assert status in (200, 201), body
    return str(body["token"])


def ensure_gpu_users(stack: HubStack, users: tuple[str, ...]) -> None:
    for user in users:
        if stack.hub.api("GET", f"/users/{user}")[0] == 404:
            assert stack.hub.api("POST", f"/users/{user}")[0] in (200, 201)
    if stack.hub.api("GET", "/groups/gpu-users")[0] == 404:
        stack.hub.api("POST", "/groups/gpu-users")
    status, body = stack.hub.api("POST", "/groups/gpu-users/users", {"users": list(users)})
    assert status == 200, body


def pod_of(stack: HubStack, user: str, server: str) -> dict[str, Any]:
    """The running pod (or virt-launcher pod) of a workspace, found by our labels."""
    selector = f"gpuworkspace.dev/user={user},gpuworkspace.dev/server={server or 'default'}"
    pods = json.loads(kubectl(stack, "-n", NS, "get", "pods", "-l", selector, "-o", "json"))["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert len(live) == 1, [p["metadata"]["name"] for p in live]
    return live[0]  # type: ignore[no-any-return]


def script(stack: HubStack, pod: dict[str, Any], pid: int | None = None, **load: float) -> None:
    body: dict[str, Any] = {"namespace": NS, "pod": pod["metadata"]["name"], **load}
    if pid is not None:
        body["pid"] = pid
    status, raw = stack.devcluster.control(WORKLOAD, body, method="PUT")
    assert status == 200, raw


def until(check: Callable[[], Any], what: str, timeout_s: float = 60) -> Any:
    """Poll ``check`` until it returns a truthy value (the service refreshes every few seconds)."""
    deadline, last = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except (AssertionError, KeyError, TypeError) as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def detail(stack: HubStack, user: str, server: str) -> dict[str, Any]:
    status, body = attr(stack, f"workspaces/{user}/{server or '~'}")
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def shares(body: dict[str, Any]) -> list[dict[str, Any]]:
    return list(body["shares"])


def close(a: float | None, b: float, tol: float = 0.6) -> bool:
    return a is not None and math.isclose(a, b, abs_tol=tol)


@pytest.fixture(scope="module")
def workspaces(stack: HubStack) -> Iterator[dict[str, dict[str, Any]]]:
    """ana: a whole card, ben: a MIG slice, cai + dee: one time-sliced card, eve: a VM with a GPU."""
    ensure_gpu_users(stack, USERS)
    plan = {
        "ana": "gpu-exclusive",
        "ben": "gpu-mig",
        "cai": "gpu-shared",
        "dee": "gpu-shared",
        "eve": "e2e-vm-gpu",
    }
    # both time-sliced workspaces on one card: only gpu-node-a takes new pods while they are placed
    kubectl(stack, "cordon", "gpu-node-b")
    try:
        for user, profile in plan.items():
            stack.hub.start_server(user, "w", {"profile": profile})
        for user in plan:
            stack.hub.wait_ready(user, "w", timeout_s=240)
    finally:
        kubectl(stack, "uncordon", "gpu-node-b")
    pods = {user: pod_of(stack, user, "w") for user in plan}
    try:
        yield pods
    finally:
        stack.devcluster.control(WORKLOAD, None, method="DELETE")
        for user in plan:
            if stack.hub.server(user, "w") is not None:
                stack.hub.stop_server(user, "w", timeout_s=180)


def test_api_figures_match_the_scripted_gpu_load(stack: HubStack, workspaces: dict[str, Any]) -> None:
    script(stack, workspaces["ana"], gpu_util=73, mem_used_mib=20_000, power_w=350)
    script(stack, workspaces["ben"], gpu_util=41, mem_used_mib=3_000)
    script(stack, workspaces["cai"], pid=4101, gpu_util=30, mem_used_mib=5_000)
    script(stack, workspaces["dee"], pid=4202, gpu_util=20, mem_used_mib=3_000)
    script(stack, workspaces["eve"], gpu_util=90, mem_used_mib=40_000)  # inside the guest: invisible

    # exclusive: the card's own counters, one owner
    ana = until(lambda: (d := detail(stack, "ana", "w")) and close(d["gpu"]["util_percent"], 73) and d, "ana")
    assert ana["gpu"]["basis"] == "measured" and ana["gpu"]["allocated"] == 1
    assert close(ana["gpu"]["mem_used_mib"], 20_000, 1) and close(ana["gpu"]["power_w"], 350, 1)
    # MIG: per instance, from DCGM_FI_PROF_GR_ENGINE_ACTIVE (DCGM_FI_DEV_GPU_UTIL reads 0 there)
    ben = until(lambda: (d := detail(stack, "ben", "w")) and close(d["gpu"]["util_percent"], 41) and d, "ben")
    assert ben["gpu"]["basis"] == "measured" and [s["basis"] for s in shares(ben)] == ["measured"]
    assert close(ben["gpu"]["mem_used_mib"], 3_000, 1)
    # time-sliced without the agent: the device value for both, labelled as shared, no split invented
    for user in ("cai", "dee"):
        body = until(
            lambda u=user: (d := detail(stack, u, "w")) and close(d["gpu"]["util_percent"], 50) and d, user
        )
        assert body["gpu"]["basis"] == "shared", body["gpu"]
        assert re.search(r"shared", body["gpu"]["caveat"]) and body["gpu"]["mem_used_mib"] is None
    # VM passthrough: who holds which card, by allocation; the host cannot see its use
    eve = until(
        lambda: detail(stack, "eve", "w")["gpu"]["basis"] == "allocation" and detail(stack, "eve", "w"), "eve"
    )
    assert eve["gpu"]["util_percent"] is None and eve["gpu"]["allocated"] == 1 and eve["gpu"]["caveat"]

    # the node grid: each cell labelled with its owner and the figure's basis
    status, nodes = attr(stack, "nodes")
    assert status == 200
    cells = [c for n in nodes["items"] for c in n["gpus"]]
    owned = {(o["user"], c["kind"], o["basis"]) for c in cells for o in c["owners"]}
    assert {
        ("ana", "whole", "measured"),
        ("ben", "mig", "measured"),
        ("eve", "passthrough", "allocation"),
    } <= owned
    assert {("cai", "time-sliced", "shared"), ("dee", "time-sliced", "shared")} <= owned

    # time-sliced with the node agent: NVML's per-process figures split the card
    dc = stack.devcluster
    with start_agents(dc.state_dir, dc.url, dc.kubeconfig, log_dir=stack.log_dir):
        for user, util, mem in (("cai", 30, 5_000), ("dee", 20, 3_000)):
            # the first per-process reading can be an idle one (no NVML sample since the agent's previous
            # read, e.g. two scrapes close together on a loaded machine): wait for the figures, as above
            body = until(
                lambda u=user, want=util: (
                    (d := detail(stack, u, "w"))["gpu"]["basis"] == "per-process"
                    and close(d["gpu"]["util_percent"], want)
                    and d
                ),
                f"{user}'s per-process figures",
                timeout_s=90,
            )
            assert close(body["gpu"]["mem_used_mib"], mem, 1), body["gpu"]
    # the agent gone: back to the honest "shared" figure
    until(lambda: detail(stack, "cai", "w")["gpu"]["basis"] == "shared", "the shared basis again", 90)


def test_users_see_their_own_workspaces_only(stack: HubStack, workspaces: dict[str, Any]) -> None:
    ana = user_token(stack, "ana")
    status, own = attr(stack, "workspaces/ana/w", token=ana)
    assert status == 200 and own["user"] == "ana"
    status, other = attr(stack, "workspaces/ben/w", token=ana)
    assert status == 403, other
    assert "ben" in other["message"]
    status, listed = attr(stack, "workspaces", token=ana)
    assert status == 200 and {w["user"] for w in listed["items"]} == {"ana"}
    status, listed = attr(stack, "workspaces")  # the admin token sees everyone
    assert status == 200 and set(USERS) <= {w["user"] for w in listed["items"]}
    assert attr(stack, "workspaces/nobody/w")[0] == 404
    assert attr(stack, "workspaces/ana/w", token="not-a-token")[0] == 403


def test_dashboard_renders_the_node_grid_and_charts(
    stack: HubStack, workspaces: dict[str, Any], browser: Any
) -> None:
    script(stack, workspaces["ana"], gpu_util=73, mem_used_mib=20_000, power_w=350)
    with logged_in_page(browser, stack, "bob", viewport={"width": 1400, "height": 1200}) as page:
        page.goto(f"{stack.url}/hub/home")
        page.locator(
            "#gpuws-gpu-usage-nav"
        ).click()  # the navbar link on every hub page (and a button on home)
        page.wait_for_url(re.compile(rf".*{SERVICE}/.*"))
        page.locator("#node-grid").wait_for()
        cell = page.locator('.gpu-cell[data-node][data-gpu]:has-text("ana")')
        cell.first.wait_for()
        assert page.locator(".gpu-cell").count() >= 16  # 2 nodes x 8 cards (MIG instances apart)
        page.locator("svg.chart").first.wait_for()
        # the page's own auto-refresh (a fetch of ?fragment=1 with the login cookie) gets the content,
        # not a detour through the hub's OAuth login
        status, redirected, body = page.evaluate(
            "fetch(document.getElementById('dashboard').dataset.refreshUrl, {credentials: 'same-origin'})"
            ".then(async r => [r.status, r.redirected, await r.text()])"
        )
        assert (status, redirected) == (200, False) and 'id="node-grid"' in body, (status, redirected)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "attribution-dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000


def test_a_full_shared_gpu_names_its_holders(stack: HubStack, workspaces: dict[str, Any]) -> None:
    """Seed 000 §11 "shared GPU fully occupied": the API names every workspace on the card."""
    node = workspaces["cai"]["spec"]["nodeName"]
    fillers = [f"attr-fill-{i}" for i in range(2)]  # cai + dee + two more = the card's 4 replicas
    for i, name in enumerate(fillers):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {"component": "singleuser-server", "gpuworkspace.dev/user": f"fill{i}"},
                "annotations": {
                    "gpuworkspace.dev/username": f"fill{i}",
                    "gpuworkspace.dev/servername": "",
                    "gpuworkspace.dev/profile": "gpu-shared",
                },
            },
            "spec": {
                "nodeName": node,
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [
                    {
                        "name": "notebook",
                        "image": "gpuworkspace.dev/lite-singleuser:latest",
                        "resources": {"limits": {"nvidia.com/gpu.shared": "1"}},
                    }
                ],
            },
        }
        kubectl(stack, "apply", "-f", "-", stdin=json.dumps(pod))
    try:

        def full_card() -> dict[str, Any] | None:
            nodes = attr(stack, "nodes")[1]["items"]
            cells = [c for n in nodes if n["name"] == node for c in n["gpus"] if c["kind"] == "time-sliced"]
            return next((c for c in cells if len(c["owners"]) == 4), None)

        cell = until(full_card, "the shared card to list its four holders")
        holders = {(o["user"], o["server"]) for o in cell["owners"]}
        assert holders == {("cai", "w"), ("dee", "w"), ("fill0", ""), ("fill1", "")}
        _, summary = attr(stack, "nodes")
        node_summary = next(n for n in summary["items"] if n["name"] == node)
        assert node_summary["gpu_totals"]["free_by_resource"].get("nvidia.com/gpu.shared", 0) == 0, (
            node_summary
        )
    finally:
        kubectl(stack, "-n", NS, "delete", "pod", *fillers, "--wait=false")
