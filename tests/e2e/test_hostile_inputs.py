"""Hostile input through the real hub: refused with a 4xx, nothing written to the cluster, nothing leaked.

test_workspace_lifecycle.py checks five refused option sets with the admin token. Here a user's own
token sends what a hostile client can: forged and oversized bodies, bodies JupyterHub itself refuses,
server names outside JupyterHub's rules (path traversal, unicode, too long), a catalog change that
is huge or a YAML bomb; and a second user tries the first user's server, disk, GPU attribution and
culler decisions. Every attempt is bracketed by the devcluster's request log (``writes_during``):
cleared before, read once the hub has settled, and it must hold no create/update/patch/delete.

What "4xx" means here: option validation runs at the start of ``GPUWorkspaceSpawner._start``, well
within the hub's ``slow_spawn_timeout``, so the refusal is synchronous: the POST itself answers
with the SpawnException's status (400; 403 only when the user may start no profile) and message, and the hub
drops the server (it is no longer listed). Nothing is asynchronous to wait for but that clean-up.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import test_disk_admin
from .harness import HubStack, http, wait_for
from .test_attribution import attr, user_token
from .test_culler import culler
from .test_disk_admin import call
from .test_spawn_feedback import metric

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
USER = "hostile"  # sends hostile options and names; in no group
INTRUDER, VICTIM, VICTIM_SERVER = "intruder", "victim", "own"
disks = test_disk_admin.disks  # the disk service's fixture (proxied, or started next to the hub)


@pytest.fixture(scope="module", autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("these are this project's spawner's and services' behaviours")


# ------------------------------------------------------------------------------------- helpers
@contextlib.contextmanager
def writes_during(stack: HubStack, user: str, settle_s: float = 0.5) -> Iterator[list[dict[str, Any]]]:
    """The cluster writes made while the block runs and the hub settles: ``user`` has no server
    pending or running, then ``settle_s`` more for anything the refusal might still trigger."""
    stack.requests_log(clear=True)
    found: list[dict[str, Any]] = []
    yield found
    wait_for(lambda: not _active(stack, user), 30, f"{user}'s refused servers to be dropped")
    time.sleep(settle_s)
    found.extend(r for r in stack.requests_log() if r["verb"] in WRITE_VERBS)


def _active(stack: HubStack, user: str) -> dict[str, Any]:
    status, model = stack.hub.api("GET", f"/users/{user}")
    return dict((model or {}).get("servers") or {}) if status == 200 else {}


def ensure_user(stack: HubStack, name: str) -> None:
    if stack.hub.api("GET", f"/users/{name}")[0] == 404:
        assert stack.hub.api("POST", f"/users/{name}")[0] == 201


def as_user(stack: HubStack, token: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """A hub REST call (``path`` below /hub/api, sent as is: no quoting) with a user's token."""
    return raw_call(stack, token, method, path, None if body is None else json.dumps(body).encode())


def raw_call(stack: HubStack, token: str, method: str, path: str, data: bytes | None) -> tuple[int, Any]:
    """Like as_user with the body's bytes as given (invalid JSON, say)."""
    import urllib.error
    import urllib.request

    headers = {"Authorization": f"token {token}", "Content-Type": "application/json"}
    request = urllib.request.Request(stack.hub.api_url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            status, raw = answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


@pytest.fixture(scope="module")
def token(stack: HubStack) -> str:
    ensure_user(stack, USER)
    return user_token(stack, USER)


# ------------------------------------------------------------------- hostile options and bodies
HUGE = "x" * (2 * 1024 * 1024)
OPTION_CASES = [
    # (id, body, status, words the message must contain); refused by our load_user_options
    ("unknown-profile", {"profile": "gpu-huge"}, 400, "There is no profile 'gpu-huge'"),
    # refused like a profile that does not exist: users outside a group cannot list its profiles
    (
        "forbidden-profile",
        {"profile": "gpu-exclusive"},
        400,
        "There is no profile 'gpu-exclusive' you may use",
    ),
    ("forbidden-e2e-vm", {"profile": "e2e-vm-gpu"}, 400, "There is no profile 'e2e-vm-gpu' you may use"),
    ("forged-case", {"profile": "CPU-SMALL"}, 400, "'CPU-SMALL'"),
    ("forged-traversal", {"profile": "../cpu-small"}, 400, "'../cpu-small'"),
    ("forged-zero-width", {"profile": "cpu-small\u200b"}, 400, "There is no profile"),
    ("forged-cyrillic", {"profile": "\u0441pu-small"}, 400, "There is no profile"),
    ("forged-ide", {"profile": "cpu-small", "ide": "code-server; rm -rf /"}, 400, "is not available"),
    # base-notebook declares JupyterLab only: code-server is not offered with it (image-contract.md)
    ("undeclared-ide", {"profile": "cpu-small", "ide": "code-server"}, 400, "Choose one of: jupyterlab."),
    (
        "override",
        {"profile": "cpu-small", "kubespawner_override": {"image": "evil"}},
        400,
        "kubespawner_override",
    ),
    ("type-number", {"profile": 3}, 400, "'profile' must be a text value"),
    ("type-null", {"profile": None}, 400, "'profile' must be a text value"),
    ("type-object", {"profile": {"$ne": ""}}, 400, "'profile' must be a text value"),
    ("type-nested", {"profile": [["cpu-small"]]}, 400, "'profile' must be a text value"),
    ("type-bool-ide", {"profile": "cpu-small", "ide": True}, 400, "'ide' must be a text value"),
    ("too-many", {f"k{i}": "v" for i in range(50)}, 400, "Too many server options"),
    ("unicode-key", {"pr\u00f6file": "cpu-small"}, 400, "Unknown server option: pr\u00f6file"),
    ("2MB-value", {"profile": HUGE}, 400, "too long"),
    (
        "2MB-unknown",
        {"user_options": {"profile": "cpu-small", "pad": HUGE}},
        400,
        "Unknown server option: pad",
    ),
    # refused by JupyterHub itself before the spawner sees anything
    ("hub-options-list", {"user_options": ["cpu-small"]}, 400, "user_options must be an object"),
    ("hub-display-name", {"display_name": 7, "user_options": {}}, 400, "display_name must be a string"),
    ("hub-body-list", ["cpu-small"], 400, "Body must be a JSON object"),
]


@pytest.mark.parametrize(
    ("body", "status", "words"), [pytest.param(*case[1:], id=case[0]) for case in OPTION_CASES]
)
def test_hostile_options_are_refused_before_any_cluster_write(
    stack: HubStack, token: str, body: Any, status: int, words: str
) -> None:
    with writes_during(stack, USER) as writes:
        got, answer = as_user(stack, token, "POST", f"/users/{USER}/servers/opts", body)
    assert got == status, (got, answer)
    message = answer.get("message", "") if isinstance(answer, dict) else str(answer)
    assert words in message, message
    assert len(message) < 4096, "a huge value is echoed back"
    assert writes == [], writes


def test_invalid_json_and_a_2_mb_body_write_nothing(stack: HubStack, token: str) -> None:
    with writes_during(stack, USER) as writes:
        bad_json = raw_call(stack, token, "POST", f"/users/{USER}/servers/opts", b'{"profile": "cpu-sm')
        padded = json.dumps({"profile": "cpu-small", **{f"k{i}": "x" * 64 for i in range(40_000)}})
        huge = raw_call(stack, token, "POST", f"/users/{USER}/servers/opts", padded.encode())
    assert bad_json[0] == 400 and "Invalid JSON" in json.dumps(bad_json[1]), bad_json
    assert len(padded) > 2_000_000
    assert huge[0] == 400 and "Too many server options" in huge[1]["message"], huge[0]
    assert writes == [], writes


# ----------------------------------------------------------------------------------- names
# (server name as it appears in the URL path, raw), what JupyterHub answers
NAME_CASES = [
    ("../x", (404,)),  # no route has a '/' in a server name
    ("a/b", (404,)),
    # dot segments, even percent-encoded, are resolved by the proxy (WHATWG URL parsing): 404
    ("%2e%2e", (400, 404)),
    ("..%2fx", (400, 404)),
    ("%2e%2e%2f%2e%2e%2fadmin", (400, 404)),
    ("a%2Fb", (400,)),
    ("a%00b", (400,)),
    ("%C3%BCber", (400,)),  # 'über'
    ("%F0%9F%92%A3", (400,)),  # an emoji
    ("Upper", (400,)),
    ("a--b", (400,)),  # our pod names join user and server with '--'
    ("-a", (400,)),
    ("a.b", (400,)),
    ("a_b", (400,)),
    ("1abc", (400,)),
    ("x" * 31, (400,)),
    ("x" * 5000, (400, 414, 431)),
]


@pytest.mark.parametrize(("name", "statuses"), [pytest.param(n, s, id=n[:24]) for n, s in NAME_CASES])
def test_server_names_outside_jupyterhubs_rules_are_refused(
    stack: HubStack, token: str, name: str, statuses: tuple[int, ...]
) -> None:
    with writes_during(stack, USER) as writes:
        got, answer = as_user(stack, token, "POST", f"/users/{USER}/servers/{name}", {"profile": "cpu-small"})
    assert got in statuses, (got, answer)
    assert writes == [], writes
    status, model = stack.hub.api("GET", f"/users/{USER}")
    assert status == 200 and not model["servers"], model


@pytest.mark.parametrize("user", ["..%2fadmin", "%2e%2e", "admin%00", "VICTIM"], ids=lambda u: u)
def test_user_names_in_the_path_reach_no_one_else(stack: HubStack, token: str, user: str) -> None:
    with writes_during(stack, USER) as writes:
        got, answer = as_user(stack, token, "POST", f"/users/{user}/servers/x", {"profile": "cpu-small"})
    assert got in (403, 404), (got, answer)
    assert writes == [], writes


# ------------------------------------------------------------------- a hostile catalog change
def _you_may_use(stack: HubStack, token: str) -> str:
    got, answer = as_user(stack, token, "POST", f"/users/{USER}/servers/cat", {"profile": "no-such"})
    assert got == 400, answer
    return str(answer["message"]).split("Profiles you may use:")[1]


def test_a_huge_or_bombed_catalog_change_keeps_the_last_good_catalog(
    stack: HubStack, token: str, e2e_catalog: Path
) -> None:
    before = _you_may_use(stack, token)
    failures = metric(stack, "gpuworkspace_catalog_reload_failures_total")
    bomb = ["apiVersion: gpuworkspace.dev/v1alpha1", "kind: WorkspaceProfile", "metadata: {name: lol}"]
    bomb += ["spec:", "  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    bomb += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    changes = {
        "zz-huge.yaml": "# padding\n" + "#" * (5 * 1024 * 1024) + "\n",
        "zz-bomb.yaml": "\n".join(bomb) + "\n",
    }
    try:
        for name, text in changes.items():
            (e2e_catalog / name).write_text(text)
            with writes_during(stack, USER) as writes:
                assert _you_may_use(stack, token) == before  # served from the last good catalog
            assert writes == [], writes
            (e2e_catalog / name).unlink()
        assert metric(stack, "gpuworkspace_catalog_reload_failures_total") == failures + 2
    finally:
        for name in changes:
            (e2e_catalog / name).unlink(missing_ok=True)
    assert _you_may_use(stack, token) == before


# ---------------------------------------------------------------------------------- cross-user
STARTED: list[dict[str, Any]] = []  # the writes of the victim's start: the request log's control


@pytest.fixture(scope="module")
def victim(stack: HubStack) -> Iterator[str]:
    """The victim's running workspace; yields the intruder's token."""
    for name in (INTRUDER, VICTIM):
        ensure_user(stack, name)
    stack.requests_log(clear=True)
    stack.hub.start_server(VICTIM, VICTIM_SERVER, {"profile": "cpu-small"})
    stack.hub.wait_ready(VICTIM, VICTIM_SERVER)
    STARTED[:] = [r for r in stack.requests_log() if r["verb"] in WRITE_VERBS]
    try:
        yield user_token(stack, INTRUDER)
    finally:
        stack.hub.stop_server(VICTIM, VICTIM_SERVER)


def test_the_request_log_sees_the_hubs_writes(victim: str) -> None:
    """The control for every ``writes == []`` above and below: a real start is seen writing."""
    made = {(r["verb"], r["resource"]) for r in STARTED}
    assert {("create", "persistentvolumeclaims"), ("create", "pods")} <= made, made


def _no_victim(body: Any) -> bool:
    return VICTIM not in json.dumps(body)


def test_another_users_server_cannot_be_started_stopped_or_deleted(stack: HubStack, victim: str) -> None:
    path = f"/users/{VICTIM}/servers"
    attempts = [
        ("POST", f"{path}/{VICTIM_SERVER}", {"profile": "gpu-mig"}),
        ("POST", f"{path}/other", {"profile": "cpu-small"}),
        ("POST", f"/users/{VICTIM}/server", {"profile": "cpu-small"}),
        ("DELETE", f"{path}/{VICTIM_SERVER}", None),
        ("DELETE", f"{path}/{VICTIM_SERVER}", {"remove": True}),
        ("PATCH", f"{path}/{VICTIM_SERVER}", {"name": "stolen"}),
        ("POST", f"/users/{VICTIM}/tokens", {"note": "mine now"}),
        ("GET", f"/users/{VICTIM}", None),
    ]
    with writes_during(stack, INTRUDER) as writes:
        answers = [(m, p, *as_user(stack, victim, m, p, b)) for m, p, b in attempts]
    for method, path_, status, body in answers:
        assert status in (403, 404), (method, path_, status, body)
        assert set(body) <= {"status", "message"}, body  # an error, no model of the victim's
    assert writes == [], writes
    server = stack.hub.server(VICTIM, VICTIM_SERVER)
    assert server is not None and server["ready"], server
    url = f"{stack.url}/user/{VICTIM}/{VICTIM_SERVER}/api/status"
    status, _ = http("GET", url, headers={"Authorization": f"token {victim}"})
    assert status == 403, status  # the single-user server refuses the intruder's token too


def test_another_users_disk_cannot_be_read_or_changed(
    stack: HubStack, victim: str, disks: tuple[str, float]
) -> None:
    base, _ = disks
    claim = f"home-{VICTIM}--{VICTIM_SERVER}"
    status, own = call(base, stack.admin_token, "GET", f"api/v1/workspaces/{VICTIM}/{VICTIM_SERVER}")
    assert status == 200 and own["disk"]["claim"] == claim, own  # it exists
    with writes_during(stack, INTRUDER) as writes:
        reads = [
            call(base, victim, "GET", f"api/v1/workspaces/{VICTIM}/{VICTIM_SERVER}"),
            call(base, victim, "GET", f"api/v1/workspaces/{VICTIM}/~"),
            call(base, victim, "GET", f"api/v1/disks/{claim}/snapshots"),
        ]
        listed = call(base, victim, "GET", "api/v1/workspaces")
        changes = [
            call(base, victim, "POST", f"api/v1/disks/{claim}/{op}", body)
            for op, body in (
                ("resize", {"size": "20Gi"}),
                ("snapshots", {"name": "stolen"}),
                ("restore", {"snapshot": "x"}),
                ("reclaim", {}),
            )
        ]
    assert all(status == 403 for status, _ in reads + changes), reads + changes
    assert listed[0] == 200 and listed[1]["items"] == [], listed
    assert writes == [], writes


def test_another_users_gpu_attribution_is_403(stack: HubStack, victim: str) -> None:
    def attributed() -> bool:
        return attr(stack, f"workspaces/{VICTIM}/{VICTIM_SERVER}")[0] == 200

    wait_for(attributed, 30, "the attribution service to see the victim's workspace", interval_s=0.5)
    for path in (
        f"workspaces/{VICTIM}/{VICTIM_SERVER}",
        f"workspaces/{VICTIM}/~",
        f"workspaces?user={VICTIM}",
        f"trends?series=user:{VICTIM}:gpu_util",
    ):
        status, body = attr(stack, path, token=victim)
        assert status == 403, (path, status, body)
    for path in ("workspaces", "nodes", "top", "groups"):
        status, body = attr(stack, path, token=victim)
        assert status == 200 and _no_victim(body), (path, body)
    status, body = attr(stack, f"workspaces/..%2F{VICTIM}/{VICTIM_SERVER}", token=victim)
    assert status in (403, 404) and "shares" not in json.dumps(body), body


def test_another_users_culler_decisions_are_not_shown(stack: HubStack, victim: str) -> None:
    def decided() -> bool:
        status, body = culler(stack, "decisions")
        return status == 200 and any(d["user"] == VICTIM for d in body)

    wait_for(decided, 30, "a culler decision about the victim's server", interval_s=0.5)
    for path in ("decisions", "decisions?action=keep,warn,stop,exempt", "notices", "status"):
        status, body = culler(stack, path, token=victim)
        assert status == 200 and _no_victim(body), (path, body)
        if path.startswith("decisions"):
            assert all(d["user"] == INTRUDER for d in body), body
    status, body = culler(stack, f"decisions?user={VICTIM}", token=victim)
    assert status in (200, 400, 403) and _no_victim(re.sub(r"user=\w+", "", json.dumps(body))), body
