"""The workspace lifecycle through the hub REST API: the home disk survives everything until reclaimed.

Real JupyterHub + proxy + devcluster + real single-user servers; cluster state is checked with kubectl.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .harness import BIN, HubStack, http, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NS = "gpu-workspaces"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("lifecycle guarantees are this project's spawner's, not plain KubeSpawner's")


def kubectl(
    stack: HubStack, *args: str, check: bool = True, input_text: str | None = None, timeout_s: float = 180
) -> subprocess.CompletedProcess[str]:
    """kubectl against the stack's devcluster; past ``timeout_s`` a ``subprocess.TimeoutExpired`` that
    names the command (a wait of kubectl's own, ``--wait``, has no deadline otherwise)."""
    env = {**os.environ, "KUBECONFIG": str(stack.kubeconfig)}
    argv = ["kubectl", "-n", NS, *args]
    return subprocess.run(
        argv, env=env, capture_output=True, text=True, check=check, input=input_text, timeout=timeout_s
    )


def get_json(stack: HubStack, *args: str) -> Any:
    return json.loads(kubectl(stack, "get", *args, "-o", "json").stdout)


def contents(stack: HubStack, user: str, server: str, path: str, body: Any = None) -> tuple[int, Any]:
    """The Jupyter contents API of a running server, through the proxy, with the admin token."""
    url = f"{stack.url}/user/{user}/{server}/api/contents/{path}"
    headers = {"Authorization": f"token {stack.admin_token}"}
    status, raw = http("PUT" if body is not None else "GET", url, body, headers=headers)
    return status, json.loads(raw) if raw else None


def write_file(stack: HubStack, user: str, server: str, name: str, text: str) -> None:
    status, _ = contents(stack, user, server, name, {"type": "file", "format": "text", "content": text})
    assert status in (200, 201)


def read_file(stack: HubStack, user: str, server: str, name: str) -> str:
    status, model = contents(stack, user, server, name)
    assert status == 200, model
    return str(model["content"])


def start(stack: HubStack, user: str, server: str, options: dict[str, Any]) -> None:
    stack.hub.start_server(user, server, options)
    stack.hub.wait_ready(user, server)


@pytest.fixture
def user(stack: HubStack, request: pytest.FixtureRequest) -> Iterator[str]:
    name = request.node.name.split("[")[0].removeprefix("test_").replace("_", "-")[:20]
    yield name
    status, model = stack.hub.api("GET", f"/users/{name}")
    for server in (model or {}).get("servers", {}) if status == 200 else ():
        stack.hub.stop_server(name, server)


def test_rejected_options_are_4xx_and_write_nothing(stack: HubStack, user: str) -> None:
    assert stack.hub.api("POST", f"/users/{user}")[0] == 201
    cases = [
        ({"profile": "no-such-profile"}, 400, "no profile"),
        # gpu-users only: refused like a profile that does not exist (restricted names stay private)
        ({"profile": "gpu-exclusive"}, 400, "no profile 'gpu-exclusive' you may use"),
        ({"profile": "cpu-small", "ide": "emacs"}, 400, "emacs"),
        ({"profile": ["cpu-small", "gpu-shared"]}, 400, "profile"),
        ({"profile": "cpu-small", "image": "evil/miner:latest"}, 400, "image"),
    ]
    stack.requests_log(clear=True)
    for options, status, words in cases:
        got, body = stack.hub.api("POST", f"/users/{user}/servers/x", options)
        assert (got, words in json.dumps(body).lower()) == (status, True), (options, got, body)
        wait_for(lambda: stack.hub.server(user, "x") is None, 30, "the refused server to be cleaned up")
    writes = [r for r in stack.requests_log() if r["verb"] in WRITE_VERBS]
    assert writes == []


def test_file_survives_stop_start_pod_deletion_and_hub_restart(stack: HubStack, user: str) -> None:
    start(stack, user, "ws", {"profile": "cpu-small"})
    write_file(stack, user, "ws", "keep.txt", "precious")
    pod = get_json(stack, "pod", f"jupyter-{user}--ws")
    claim = next(
        v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if v["name"] == "home"
    )
    labels = pod["metadata"]["labels"]
    assert labels["component"] == "singleuser-server"
    assert labels["gpuworkspace.dev/profile"] == "cpu-small"
    assert labels["gpuworkspace.dev/catalog-version"] == "2026.12.1"
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}

    stack.hub.stop_server(user, "ws")
    assert get_json(stack, "pvc", claim)["status"]["phase"] == "Bound"
    start(stack, user, "ws", {"profile": "cpu-small"})
    assert read_file(stack, user, "ws", "keep.txt") == "precious"

    kubectl(stack, "delete", "pod", f"jupyter-{user}--ws", "--wait=true")  # rebuilt by the spawner
    wait_for(lambda: contents(stack, user, "ws", "keep.txt")[0] == 200, 90, "the rebuilt pod to serve")
    assert read_file(stack, user, "ws", "keep.txt") == "precious"

    stack.restart_hub()
    stack.hub.wait_ready(user, "ws")
    assert read_file(stack, user, "ws", "keep.txt") == "precious"
    pods = get_json(stack, "pods", "-l", f"gpuworkspace.dev/user={user}")["items"]
    assert [p["metadata"]["name"] for p in pods] == [f"jupyter-{user}--ws"]


def test_delete_forever_retains_readopts_and_reclaims(stack: HubStack, user: str) -> None:
    start(stack, user, "gone", {"profile": "cpu-small"})
    write_file(stack, user, "gone", "thesis.txt", "chapter 1")
    stack.hub.stop_server(user, "gone")
    claim = f"home-{user}--gone"
    assert stack.hub.api("DELETE", f"/users/{user}/servers/gone", {"remove": True})[0] in (202, 204)

    pvc = wait_for(lambda: _retained(stack, claim), 30, "the claim to be retained")
    until = pvc["metadata"]["annotations"]["gpuworkspace.dev/retain-until"]
    assert until > time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 29 * 86400))

    start(stack, user, "gone", {"profile": "cpu-small"})  # same name within retention: re-adopted
    assert read_file(stack, user, "gone", "thesis.txt") == "chapter 1"
    labels = get_json(stack, "pvc", claim)["metadata"]["labels"]
    assert labels["gpuworkspace.dev/disk-state"] == "active"

    stack.hub.stop_server(user, "gone")
    assert stack.hub.api("DELETE", f"/users/{user}/servers/gone", {"remove": True})[0] in (202, 204)
    wait_for(lambda: _retained(stack, claim), 30, "the claim to be retained again")
    reclaim = [str(BIN / "gpuworkspace-reclaimer"), "--namespace", NS, "--once"]
    env = {**os.environ, "KUBECONFIG": str(stack.kubeconfig)}
    subprocess.run(reclaim, env=env, check=True, capture_output=True)  # within retention: kept
    assert get_json(stack, "pvc", claim)["metadata"]["name"] == claim

    kubectl(
        stack, "annotate", "--overwrite", "pvc", claim, "gpuworkspace.dev/retain-until=2020-01-01T00:00:00Z"
    )
    # Retention over: the hub's managed gpuworkspace-reclaimer sees the change by watch and deletes it.
    gone = lambda: kubectl(stack, "get", "pvc", claim, check=False).returncode != 0  # noqa: E731
    wait_for(gone, 30, "the disk to be reclaimed")
    reasons = {
        e["reason"] for e in get_json(stack, "events")["items"] if e["involvedObject"]["name"] == claim
    }
    assert {
        "WorkspaceDiskCreated",
        "WorkspaceDiskRetained",
        "WorkspaceDiskAdopted",
        "WorkspaceDiskReclaimed",
    } <= reasons


def _retained(stack: HubStack, claim: str) -> dict[str, Any] | None:
    pvc: dict[str, Any] = get_json(stack, "pvc", claim)
    return pvc if pvc["metadata"]["labels"].get("gpuworkspace.dev/disk-state") == "retained" else None


def test_a_stray_pod_of_the_same_workspace_is_removed_before_start(stack: HubStack, user: str) -> None:
    """One active pod per user workspace, also for pods no hub knows about (e.g. from an old hub)."""
    stray = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"stray-{user}",
            "namespace": NS,
            "labels": {
                "component": "singleuser-server",
                "gpuworkspace.dev/user": user,
                "gpuworkspace.dev/server": "one",
            },
            # the exact names every workspace pod carries: labels alone never make a pod this workspace's
            "annotations": {"gpuworkspace.dev/username": user, "gpuworkspace.dev/servername": "one"},
        },
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "sleep 3600"]}]},
    }
    env = {**os.environ, "KUBECONFIG": str(stack.kubeconfig)}
    subprocess.run(["kubectl", "apply", "-f", "-"], input=json.dumps(stray), env=env, text=True, check=True)
    start(stack, user, "one", {"profile": "cpu-small"})
    pods = get_json(stack, "pods", "-l", f"gpuworkspace.dev/user={user}")["items"]
    assert [p["metadata"]["name"] for p in pods] == [f"jupyter-{user}--one"]
    reasons = {
        e["reason"]
        for e in get_json(stack, "events")["items"]
        if e["involvedObject"]["name"] == f"stray-{user}"
    }
    assert "WorkspaceDuplicateRemoved" in reasons
