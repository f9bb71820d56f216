"""Seed 000 §11 row 1: a container workspace whose pod is lost comes back on the same home disk by itself.

Real JupyterHub + proxy + devcluster + real single-user servers. After the pod is deleted the test
makes no hub API call: it watches the pod come back with kubectl and reads a file through the hub's
proxy with the user's own token (the proxy route must follow the rebuilt pod's new IP). A stop is
never undone, and a server that crashes at every start stops after its back-off with a reason that
the user sees on the home page. The stack's hub polls every 5 s and gives up after 2 in-place
restarts (``harness.py``); the kubelet's CrashLoopBackOff starts at 10 s.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from .harness import HubStack, http, logged_in_page, wait_for
from .test_workspace_lifecycle import get_json, kubectl, start, write_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]

PROFILE = {"profile": "cpu-small"}


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("self-healing is this project's spawner's")


def _pod(stack: HubStack, name: str) -> dict[str, Any] | None:
    found = kubectl(stack, "get", "pod", name, "-o", "json", "--ignore-not-found").stdout
    return json.loads(found) if found.strip() else None


def _ready_pod(stack: HubStack, name: str, not_uid: str) -> dict[str, Any] | None:
    pod = _pod(stack, name)
    if pod is None or pod["metadata"]["uid"] == not_uid or pod["metadata"].get("deletionTimestamp"):
        return None
    conditions = pod["status"].get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return pod if ready else None


def _user_token(stack: HubStack, user: str) -> str:
    status, body = stack.hub.api("POST", f"/users/{user}/tokens", {"note": "e2e self-healing"})
    assert status in (200, 201), body
    return str(body["token"])


def _read_as_user(stack: HubStack, user: str, server: str, path: str, token: str) -> str | None:
    url = f"{stack.url}/user/{user}/{server}/api/contents/{path}"
    status, raw = http("GET", url, headers={"Authorization": f"token {token}"}, timeout=5)
    return str(json.loads(raw)["content"]) if status == 200 else None


def _events(stack: HubStack, name: str, reason: str) -> list[dict[str, Any]]:
    items = get_json(stack, "events")["items"]
    return [e for e in items if e["involvedObject"]["name"] == name and e["reason"] == reason]


def _metric(stack: HubStack, name: str, reason: str) -> float:
    status, raw = http(
        "GET", f"{stack.url}/hub/metrics", headers={"Authorization": f"token {stack.admin_token}"}
    )
    assert status == 200
    match = re.search(rf'^{name}\{{reason="{reason}"\}} (\S+)$', raw.decode(), re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def _claim_of(pod: dict[str, Any]) -> str:
    return next(
        v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if v["name"] == "home"
    )


def test_deleted_pod_comes_back_on_the_same_disk_without_the_user(stack: HubStack) -> None:
    user, server = "healer", "ws"
    assert stack.hub.api("POST", f"/users/{user}")[0] in (201, 409)
    start(stack, user, server, PROFILE)
    token = _user_token(stack, user)
    write_file(stack, user, server, "marker.txt", "written before the pod was lost")
    name = f"jupyter-{user}--{server}"
    old = get_json(stack, "pod", name)
    before = _metric(stack, "gpuworkspace_workspace_rebuilds_total", "deleted")

    lost = time.monotonic()
    kubectl(stack, "delete", "pod", name, "--wait=true")
    # From here on no hub API call: the hub's poll notices, the spawner rebuilds and moves the route.
    new = wait_for(lambda: _ready_pod(stack, name, old["metadata"]["uid"]), 90, "the pod to be rebuilt")
    text = wait_for(
        lambda: _read_as_user(stack, user, server, "marker.txt", token), 60, "the file through the proxy"
    )
    took = time.monotonic() - lost
    assert text == "written before the pod was lost"
    assert _claim_of(new) == _claim_of(old)  # the same home disk
    assert new["metadata"]["annotations"]["gpuworkspace.dev/rebuild-of"] == old["metadata"]["uid"]
    env = {e["name"]: e.get("value") for e in new["spec"]["containers"][0]["env"]}
    old_env = {e["name"]: e.get("value") for e in old["spec"]["containers"][0]["env"]}
    assert env["JUPYTERHUB_API_TOKEN"] == old_env["JUPYTERHUB_API_TOKEN"]  # the same server token
    rebuilt = _events(stack, name, "WorkspaceRebuilt")
    assert rebuilt and "deleted" in rebuilt[-1]["message"], rebuilt
    assert _metric(stack, "gpuworkspace_workspace_rebuilds_total", "deleted") == before + 1
    print(f"rebuilt and serving {took:.1f}s after the delete")

    # A second loss (an eviction, as a node drain makes) within the window backs off heal_backoff[1].
    evictions = _metric(stack, "gpuworkspace_workspace_rebuilds_total", "evicted")
    evicted = time.monotonic()
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": "gpu-workspaces"},
    }
    kubectl(
        stack,
        "create",
        "--raw",
        f"/api/v1/namespaces/gpu-workspaces/pods/{name}/eviction",
        "-f",
        "-",
        input_text=json.dumps(body),
    )
    again = wait_for(lambda: _ready_pod(stack, name, new["metadata"]["uid"]), 120, "the second rebuild")
    assert time.monotonic() - evicted >= 10  # the back-off's second step
    assert _claim_of(again) == _claim_of(old)
    # told apart from a delete by the DisruptionTarget condition the watch saw before the pod went
    assert _metric(stack, "gpuworkspace_workspace_rebuilds_total", "evicted") == evictions + 1
    assert wait_for(lambda: _read_as_user(stack, user, server, "marker.txt", token), 60, "the file again")
    stack.hub.stop_server(user, server)


def test_a_stop_is_never_undone(stack: HubStack) -> None:
    user, server = "stopper", "ws"
    assert stack.hub.api("POST", f"/users/{user}")[0] in (201, 409)
    start(stack, user, server, PROFILE)
    name = f"jupyter-{user}--{server}"
    stack.hub.stop_server(user, server)
    deadline = time.monotonic() + 20  # a rebuild takes a poll (5 s here) plus a pod start
    while time.monotonic() < deadline:
        assert _pod(stack, name) is None, "the stopped workspace's pod came back"
        time.sleep(1)
    assert stack.hub.server(user, server) is None
    assert _events(stack, name, "WorkspaceRebuilt") == []


def _volume_dir(stack: HubStack, claim: str) -> Path:
    pv = get_json(stack, "pvc", claim)["spec"]["volumeName"]
    handle = get_json(stack, "pv", pv)["spec"]["csi"]["volumeHandle"]
    return stack.devcluster.state_dir / "volumes" / handle


def test_a_server_that_crashes_at_every_start_stops_with_a_reason(stack: HubStack, browser: Any) -> None:
    user, server = "alice", "crashy"
    start(stack, user, server, PROFILE)
    name = f"jupyter-{user}--{server}"
    claim = _claim_of(get_json(stack, "pod", name))
    # The user breaks their own Jupyter configuration on the home disk: every start now exits with 3.
    config = _volume_dir(stack, claim) / ".jupyter" / "jupyter_server_config.py"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("import os\nos._exit(3)\n")
    try:
        kubectl(stack, "delete", "pod", name, "--wait=true")
        wait_for(lambda: stack.hub.server(user, server) is None, 150, "the hub to give up", interval_s=1)
        failed = _events(stack, name, "WorkspaceRebuildFailed")
        assert failed and "exit code 3" in failed[-1]["message"], failed
        assert _events(stack, name, "WorkspaceRebuilt")  # it was rebuilt once before it gave up
        wait_for(lambda: _pod(stack, name) is None, 30, "the hub's stop to remove the crash-looping pod")
        reason = _home_page_reason(stack, browser, user, server)
        assert (
            re.search(r"exited \d+ time\(s\)", reason)
            and "exit code 3" in reason
            and "disk is kept" in reason
        ), reason
    finally:
        config.unlink(missing_ok=True)
    start(stack, user, server, PROFILE)  # fixed: a new start runs, and the old reason is gone
    stack.hub.stop_server(user, server)


def _home_page_reason(stack: HubStack, browser: Any, user: str, server: str) -> str:
    with logged_in_page(browser, stack, user) as page:
        page.goto(f"{stack.url}/hub/home")
        row = page.locator(f'#gpuws-workspaces tr[data-server-name="{server}"]')
        assert row.locator(".gpuws-state").inner_text() == "Stopped"
        return str(row.locator("td").nth(2).inner_text())
