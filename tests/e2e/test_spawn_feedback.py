"""What users and admins see while a workspace starts, fails, or the catalog changes.

Real JupyterHub + proxy + devcluster; the e2e catalog (``conftest.py``) adds two profiles that cannot
start (an image the registry lacks, more GPUs than a node has) and lives in a copy the tests may edit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from .harness import BIN, HUB_CONFIG, HubStack, http, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NS = "gpu-workspaces"


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("these are this project's spawner's behaviours, not plain KubeSpawner's")


def ensure_user(stack: HubStack, name: str) -> None:
    if stack.hub.api("GET", f"/users/{name}")[0] == 404:
        assert stack.hub.api("POST", f"/users/{name}")[0] == 201


def metric(stack: HubStack, name: str, **labels: str) -> float:
    """One sample from the hub's /metrics (0 when absent)."""
    status, raw = http(
        "GET", f"{stack.url}/hub/metrics", headers={"Authorization": f"token {stack.admin_token}"}
    )
    assert status == 200, raw[:200]
    total = 0.0
    for line in raw.decode().splitlines():
        match = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if match and all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            total += float(match.group(2))
        elif not labels and line.startswith(f"{name} "):
            total += float(line.split()[1])
    return total


def failed_start(stack: HubStack, user: str, server: str, profile: str) -> str:
    """Start a server that must fail; the failure message the hub keeps for it."""
    ensure_user(stack, user)
    status, body = stack.hub.api("POST", f"/users/{user}/servers/{server}", {"profile": profile})
    if status >= 400:  # failed within the hub's slow_spawn_timeout: the API answers with it
        return str(body["message"])
    progress = progress_events(stack, user, server)
    assert progress[-1].get("failed"), progress
    return str(progress[-1]["message"])


def progress_events(stack: HubStack, user: str, server: str) -> list[dict[str, Any]]:
    url = f"{stack.hub.api_url}/users/{user}/servers/{server}/progress"
    status, raw = http("GET", url, headers={"Authorization": f"token {stack.admin_token}"}, timeout=180)
    assert status == 200, raw[:300]
    return [json.loads(line[5:]) for line in raw.decode().splitlines() if line.startswith("data:")]


def test_progress_shows_the_real_phases(stack: HubStack) -> None:
    ensure_user(stack, "phases")
    seen: list[dict[str, Any]] = []
    post = threading.Thread(target=stack.hub.start_server, args=("phases", "p", {"profile": "cpu-small"}))
    post.start()
    wait_for(lambda: stack.hub.server("phases", "p") is not None, 30, "the spawn to be pending")
    seen = progress_events(stack, "phases", "p")
    post.join(60)
    messages = [e["message"] for e in seen]
    assert seen[-1].get("ready"), messages
    text = " | ".join(messages)
    assert "home disk" in text.lower() or "Starting your workspace" in text, text
    assert [e["progress"] for e in seen] == sorted(e["progress"] for e in seen)
    stack.hub.stop_server("phases", "p")


def test_an_image_that_does_not_exist_fails_with_reason_image(stack: HubStack) -> None:
    before = metric(stack, "jupyterhub_server_spawn_duration_seconds_count", status="failure", reason="image")
    message = failed_start(stack, "imgfail", "x", "e2e-broken-image")
    assert "could not be pulled" in message and "not found" in message
    wait_for(
        lambda: (
            metric(stack, "jupyterhub_server_spawn_duration_seconds_count", status="failure", reason="image")
            > before
        ),
        30,
        "the spawn-duration metric to count the image failure",
    )
    wait_for(lambda: stack.hub.server("imgfail", "x") is None, 60, "the failed server to be cleaned up")


def test_more_gpus_than_a_node_has_fails_with_reason_unschedulable(stack: HubStack) -> None:
    message = failed_start(stack, "gpufail", "x", "e2e-too-many-gpus")
    assert "Insufficient nvidia.com/gpu" in message, message
    assert "no free capacity" in message
    assert (
        metric(
            stack, "jupyterhub_server_spawn_duration_seconds_count", status="failure", reason="unschedulable"
        )
        >= 1
    )
    wait_for(lambda: stack.hub.server("gpufail", "x") is None, 60, "the failed server to be cleaned up")


def test_catalog_changes_are_picked_up_and_a_broken_change_keeps_the_last_good(
    stack: HubStack, e2e_catalog: Path
) -> None:
    ensure_user(stack, "reload")
    extra = e2e_catalog / "zz-reload.yaml"
    first = (e2e_catalog / "cpu.yaml").read_text().split("\n---\n")[0]  # cpu-small only: not cpu-team twice
    text = first.replace("name: cpu-small", "name: cpu-reloaded", 1)
    text = re.sub(r"\n\s*default: true", "", text)
    extra.write_text(text)
    try:
        stack.hub.start_server("reload", "a", {"profile": "cpu-reloaded"})  # the new profile exists now
        stack.hub.wait_ready("reload", "a")
        stack.hub.stop_server("reload", "a")
        before = metric(stack, "gpuworkspace_catalog_reload_failures_total")
        extra.write_text(text.replace("displayName:", "displayNam:", 1))  # invalid: unknown field
        time.sleep(0.05)
        stack.hub.start_server("reload", "a", {"profile": "cpu-reloaded"})  # last good catalog still served
        stack.hub.wait_ready("reload", "a")
        assert metric(stack, "gpuworkspace_catalog_reload_failures_total") == before + 1
        stack.hub.stop_server("reload", "a")
    finally:
        extra.unlink(missing_ok=True)


def test_hub_refuses_to_start_on_an_invalid_catalog(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    shutil.copytree(HUB_CONFIG.parent / "catalog", catalog)
    gpu = catalog / "gpu.yaml"
    gpu.write_text(gpu.read_text().replace("gpuMode: mig", "gpuMode: fast", 1))
    env = {**os.environ, "GPUWS_CATALOG": str(catalog), "GPUWS_DATA_DIR": str(tmp_path / "hub")}
    done = subprocess.run(
        [str(BIN / "jupyterhub"), "-f", str(HUB_CONFIG)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert re.search(r"gpu\.yaml: profile \"gpu-mig\": spec\.placement\.gpuMode", done.stderr + done.stdout)


def test_full_shared_gpus_name_who_holds_them(stack: HubStack) -> None:
    """Seed 000 §11 "shared GPU fully occupied": the refused user learns who holds the cards."""
    env = {**os.environ, "KUBECONFIG": str(stack.kubeconfig)}
    fillers = []
    for i in range(8):  # 2 GPU nodes x 1 time-sliced card x 4 replicas
        name = f"held-{i}"
        fillers.append(name)
        holder = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {"component": "singleuser-server", "gpuworkspace.dev/user": f"holder{i}"},
                "annotations": {
                    "gpuworkspace.dev/username": f"holder{i}",
                    "gpuworkspace.dev/servername": "",
                    "gpuworkspace.dev/profile": "gpu-shared",
                },
            },
            "spec": {
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
        subprocess.run(
            ["kubectl", "apply", "-f", "-"], input=json.dumps(holder), env=env, text=True, check=True
        )
    try:
        scheduled = lambda: all(  # noqa: E731
            json.loads(
                subprocess.run(
                    ["kubectl", "-n", NS, "get", "pod", n, "-o", "json"],
                    check=True,
                    env=env,
                    capture_output=True,
                    text=True,
                ).stdout
            )["spec"].get("nodeName")
            for n in fillers
        )
        try:
            wait_for(scheduled, 60, "the eight shared-GPU holders to be scheduled")
        except TimeoutError:
            described = subprocess.run(
                ["kubectl", "-n", NS, "describe", "pod", *fillers],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            raise AssertionError(described.stdout[-3000:]) from None
        message = failed_start(stack, "latecomer", "x", "gpu-shared")
        assert "Insufficient nvidia.com/gpu.shared" in message, message
        assert "Currently held by:" in message and "holder0/default (gpu-shared)" in message, message
    finally:
        subprocess.run(["kubectl", "-n", NS, "delete", "pod", *fillers, "--wait=false"], env=env, check=False)
        if stack.hub.api("GET", "/users/latecomer")[0] == 200:
            wait_for(
                lambda: stack.hub.server("latecomer", "x") is None, 60, "the failed server to be cleaned up"
            )


def _fault(stack: HubStack, rules: list[dict[str, Any]]) -> None:
    status, body = stack.devcluster.control("/_devcluster/faults", {"seed": 8, "rules": rules}, "PUT")
    assert status == 200, body


def test_api_errors_are_retried_and_a_persistent_one_is_named(stack: HubStack) -> None:
    """A few 500/429 answers cost a start a moment, not the start; an API that keeps failing gives the
    user a reason (503, "the Kubernetes API failed ... nothing was lost"), not "Unhandled error"."""
    user = "flaky-api"
    ensure_user(stack, user)
    rule = {"verb": "create", "resource": "persistentvolumeclaims", "error_rate": 1.0}
    rule |= {"status_codes": [500, 429], "user_agent": "OpenAPI-Generator*"}
    try:
        _fault(stack, [rule | {"count": 3}])
        assert stack.hub.start_server(user, "ok", {"profile": "cpu-small"}) in (201, 202)
        stack.hub.wait_ready(user, "ok")
        stack.hub.stop_server(user, "ok")

        _fault(stack, [rule | {"count": 50}])
        message = failed_start(stack, user, "down", "cpu-small")
    finally:
        stack.devcluster.control("/_devcluster/faults", None, "DELETE")
    assert "The Kubernetes API failed while starting your workspace" in message, message
    assert "nothing was lost" in message
