"""The jobs API (gpuworkspace-jobs) end to end: real hub tokens, a real workspace, Kueue on the devcluster.

alice's workspace holds a script; she submits it twice on the 1-GPU job profile with her own API token.
The first is admitted and runs (it sleeps, holding the queue's only GPU); the second stays queued and
its state carries Kueue's reason. bob can neither see nor cancel alice's jobs (403, nothing written); a
job profile outside alice's groups is refused exactly like an unknown one, with nothing written. When
alice cancels the first job, the second is admitted and runs to completion on its copy of her home disk
(the script's output is in its log).

What waits for the devcluster's mount work (pods seeing their volumes at their mountPaths): papermill
reading the notebook by its path and writing the executed notebook to the team directory; here the
script is found because the kubelet maps the working directory through the pod's mounts.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .harness import REPO, HubStack, Proc, free_port, http, wait_for
from .test_disk_admin import call, user_token
from .test_workspace_lifecycle import NS, get_json, kubectl, start, write_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
PREFIX = "/services/gpuworkspace-jobs/"
SERVER = "jb"
SCRIPT = """\
import sys, time
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
time.sleep(float(args.get("seconds", "0")))
print("done", args.get("tag"))
"""


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("the jobs service snapshots this project's workspace disks")


@pytest.fixture(scope="module")
def jobs(stack: HubStack) -> Iterator[str]:
    """The Kueue objects applied, and the service's base URL (started next to the hub, as the disk
    e2e starts its service, with the hub's admin token as its own for reading users' groups)."""
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("the jobs service snapshots this project's workspace disks")
    kubectl(stack, "apply", "-f", str(Path(__file__).parent / "kueue-objects.yaml"))
    port = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(stack.kubeconfig),
        "JUPYTERHUB_API_URL": f"{stack.url}/hub/api",
        "JUPYTERHUB_API_TOKEN": stack.admin_token,
        "JUPYTERHUB_SERVICE_NAME": "gpuworkspace-jobs",
        "JUPYTERHUB_SERVICE_PREFIX": PREFIX,
        "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("JUPYTERHUB_CLIENT_ID", None)
    argv = [sys.executable, "-m", "gpuworkspace_spawner.services.jobs.app", "--namespace", NS]
    argv += ["--catalog", str(stack.workdir / "catalog"), "--timeout", "60"]
    proc = Proc("gpuworkspace-jobs", argv, stack.log_dir / "jobs.log", env, cwd=REPO).start()
    base = f"http://127.0.0.1:{port}{PREFIX}api/v1"
    try:
        wait_for(lambda: http("GET", base + "/jobs")[0] == 403, 30, "the jobs service", proc)
        yield base
    finally:
        print(proc.tail(40))
        proc.stop()


def _objects(stack: HubStack) -> dict[str, set[str]]:
    kinds = ("jobs", "persistentvolumeclaims", "volumesnapshots")
    return {k: {o["metadata"]["name"] for o in get_json(stack, k)["items"]} for k in kinds}


def _state(
    base: str, token: str, name: str, want: str, timeout_s: float = 90, reason: str = ""
) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def reached() -> bool:
        status, view = call(base, token, "GET", f"/jobs/{name}")
        seen.update(view if status == 200 else {"status": status})
        return status == 200 and view["state"] == want and reason in view["reason"]

    wait_for(reached, timeout_s, f"job {name} {want} (last: {json.dumps(seen)})")
    return seen


def test_a_job_through_the_api_queues_runs_and_stays_private(stack: HubStack, jobs: str) -> None:
    start(stack, "alice", SERVER, {"profile": "cpu-small"})
    write_file(stack, "alice", SERVER, "train.py", SCRIPT)
    alice, bob = user_token(stack, "alice"), user_token(stack, "bob")
    body = {"profile": "e2e-job-1gpu", "script": "train.py", "server": SERVER}

    status, first = call(jobs, alice, "POST", "/jobs", {**body, "parameters": {"seconds": 600, "tag": "a"}})
    assert status == 201, first
    running = _state(jobs, alice, first["name"], "running")
    assert running["user"] == "alice" and running["queue"] == "e2e-training"
    job = get_json(stack, "job", first["name"])
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"gpuworkspace.dev/pool": "gpu"}  # Kueue's

    status, second = call(jobs, alice, "POST", "/jobs", {**body, "parameters": {"tag": "b"}})
    assert status == 201, second
    queued = _state(
        jobs, alice, second["name"], "queued", reason="insufficient unused quota for nvidia.com/gpu"
    )
    assert "1 more needed" in queued["reason"], queued

    before = _objects(stack)
    for method, path in (("GET", f"/jobs/{first['name']}"), ("DELETE", f"/jobs/{first['name']}")):
        status, answer = call(jobs, bob, method, path)
        assert status == 403, answer
    assert call(jobs, bob, "GET", "/jobs")[1] == {"items": []}
    refused = {}
    for profile in ("e2e-job-gpu-users", "no-such-profile"):
        status, answer = call(jobs, alice, "POST", "/jobs", {**body, "profile": profile})
        assert status == 400, answer
        refused[profile] = answer["message"].replace(profile, "X")
    assert refused["e2e-job-gpu-users"] == refused["no-such-profile"]
    assert _objects(stack) == before

    status, cancelled = call(jobs, alice, "DELETE", f"/jobs/{first['name']}")
    assert status == 200 and cancelled["was"] == "running", cancelled
    _state(jobs, alice, second["name"], "succeeded", timeout_s=120)
    status, log = call(jobs, alice, "GET", f"/jobs/{second['name']}/logs")
    assert status == 200 and "done b" in log, log
    wait_for(lambda: first["name"] not in _objects(stack)["jobs"], 30, "the cancelled Job gone")
