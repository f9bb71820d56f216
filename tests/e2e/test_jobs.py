"""The jobs API (gpuworkspace-jobs) end to end: real hub tokens, a real workspace, Kueue on the devcluster.

- A script job: alice's workspace holds a script; she submits it twice on the 1-GPU job profile with her
  own API token. The first is admitted and runs (it sleeps, holding the queue's only GPU); the second
  stays queued and its state carries Kueue's reason. bob can neither see nor cancel alice's jobs (403,
  nothing written); a job profile outside alice's groups is refused exactly like an unknown one, with
  nothing written. When alice cancels the first job, the second is admitted and runs to completion on
  its copy of her home disk (the script's output is in its log).
- A notebook job: alice's notebook runs with papermill (for real: the image contract's job image) with
  her parameters; her workspace is stopped while it runs and the job goes on; the executed notebook,
  the parameters' effect in its outputs, appears in her workspace's team directory.
- The queue: a second job waits while the first holds the GPU and runs when the first finishes; an
  urgent job (a higher Kueue priority) preempts it, its state says so, and it runs again afterwards.
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
from .test_workspace_lifecycle import NS, contents, get_json, kubectl, start, write_file

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
    for objects in ("kueue-objects.yaml", "team-claim.yaml"):
        kubectl(stack, "apply", "-f", str(Path(__file__).parent / objects))
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


def http_json(url: str, token: str) -> Any:
    status, raw = http("GET", url, headers={"Authorization": f"token {token}"})
    assert status == 200, (url, status, raw[:300])
    return json.loads(raw)


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


@pytest.fixture(scope="module")
def script(stack: HubStack, jobs: str) -> Iterator[str]:
    """alice's workspace with her script in it; the script's path. Stopped afterwards: the stack is the
    session's, and later tests count alice's pods."""
    start(stack, "alice", SERVER, {"profile": "cpu-small"})
    write_file(stack, "alice", SERVER, "train.py", SCRIPT)
    yield "train.py"
    stack.hub.stop_server("alice", SERVER)


def test_a_job_through_the_api_queues_runs_and_stays_private(stack: HubStack, jobs: str, script: str) -> None:
    alice, bob = user_token(stack, "alice"), user_token(stack, "bob")
    body = {"profile": "e2e-job-1gpu", "script": script, "server": SERVER}

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


def _cell(source: str, *tags: str) -> dict[str, Any]:
    meta = {"tags": list(tags)} if tags else {}
    return {"cell_type": "code", "execution_count": None, "metadata": meta, "outputs": [], "source": source}


# papermill injects the submitted parameters after the cell tagged `parameters`
NOTEBOOK = {
    "nbformat": 4,
    "nbformat_minor": 5,
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "cells": [
        _cell('epochs = 1\nseconds = 0\nwho = "nobody"', "parameters"),
        _cell("import time\ntime.sleep(seconds)"),
        _cell('print(f"{who} trained {epochs * 10} steps")'),
    ],
}


def _outputs(notebook: dict[str, Any]) -> str:
    return "".join(
        "".join(out.get("text", "")) for cell in notebook["cells"] for out in cell.get("outputs") or []
    )


def test_a_notebook_job_runs_papermill_outlives_the_workspace_and_its_result_appears_in_it(
    stack: HubStack, jobs: str
) -> None:
    start(stack, "alice", "nb", {"profile": "e2e-cull-team"})
    write_file(stack, "alice", "nb", "analysis.ipynb", json.dumps(NOTEBOOK))
    alice = user_token(stack, "alice")
    body = {
        "profile": "e2e-job-notebook",
        "notebook": "analysis.ipynb",
        "server": "nb",
        "parameters": {"epochs": 3, "seconds": 45, "who": "alice's run"},
    }
    status, job = call(jobs, alice, "POST", "/jobs", body)
    assert status == 201, job
    name = job["name"]
    assert job["output"] == f"/home/jovyan/team/jobs/alice/{name}/", job
    _state(jobs, alice, name, "running", reason="running")  # its pod is Ready: papermill started

    # the job's pod is alice's, apart from her workspace: the attribution service lists it as a job, and
    # the culler, which reads workspaces only, finds her idle workspace idle and stops it (20 s idle)
    attribution = f"{stack.url}/services/gpuworkspace-attribution/api/v1"
    listed = wait_for(
        lambda: [j for j in http_json(f"{attribution}/jobs", alice)["items"] if j["job"] == name],
        30,
        "the attribution service to list alice's job pod",
    )
    assert listed[0]["kind"] == "job" and listed[0]["gpu"]["allocated"] == 1, listed
    workspaces = http_json(f"{attribution}/workspaces", alice)["items"]
    assert all(w["kind"] == "workspace" and w["pod"] != listed[0]["pod"] for w in workspaces), workspaces
    wait_for(lambda: stack.hub.server("alice", "nb") is None, 90, "the culler to stop alice's idle workspace")
    selector = "gpuworkspace.dev/user=alice,gpuworkspace.dev/server=nb"
    pods = get_json(stack, "pods", "-l", selector)["items"]
    assert [p["metadata"]["labels"].get("gpuworkspace.dev/job") for p in pods] == [name], pods
    assert pods[0]["status"]["phase"] == "Running", pods[0]["status"]
    status, view = call(jobs, alice, "GET", f"/jobs/{name}")
    assert status == 200 and view["state"] == "running", view
    _state(jobs, alice, name, "succeeded", timeout_s=120)
    status, log = call(jobs, alice, "GET", f"/jobs/{name}/logs")
    assert status == 200 and "alice's run trained 30 steps" in log, log  # papermill's --log-output

    start(stack, "alice", "nb", {"profile": "e2e-cull-team"})
    status, model = contents(stack, "alice", "nb", f"team/jobs/alice/{name}/analysis.ipynb")
    assert status == 200 and model["type"] == "notebook", model
    executed = model["content"]
    assert "alice's run trained 30 steps" in _outputs(executed)
    injected = [c for c in executed["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(injected) == 1 and 'who = "alice\'s run"' in "".join(injected[0]["source"]), injected
    assert executed["metadata"]["papermill"]["parameters"] == body["parameters"]
    stack.hub.stop_server("alice", "nb")


def test_the_queue_runs_the_next_job_when_one_finishes_and_an_urgent_one_preempts(
    stack: HubStack, jobs: str, script: str
) -> None:
    alice = user_token(stack, "alice")

    def submit(profile: str, **parameters: Any) -> str:
        body = {"profile": profile, "script": script, "server": SERVER, "parameters": parameters}
        status, job = call(jobs, alice, "POST", "/jobs", body)
        assert status == 201, job
        return str(job["name"])

    short = submit("e2e-job-1gpu", seconds=8, tag="short")
    _state(jobs, alice, short, "running")
    long = submit("e2e-job-1gpu", seconds=600, tag="long")
    _state(jobs, alice, long, "queued", reason="insufficient unused quota for nvidia.com/gpu")
    _state(jobs, alice, short, "succeeded", timeout_s=60)
    _state(jobs, alice, long, "running", timeout_s=60)  # admitted once the first released the GPU

    urgent = submit("e2e-job-urgent", seconds=0, tag="urgent")
    preempted = _state(jobs, alice, long, "queued", reason="Preempted to accommodate a workload")
    uid = get_json(stack, "job", urgent)["metadata"]["uid"]
    assert preempted["reason"].startswith("put back in queue e2e-training: ") and uid in preempted["reason"]
    _state(jobs, alice, urgent, "succeeded", timeout_s=60)
    assert "done urgent" in call(jobs, alice, "GET", f"/jobs/{urgent}/logs")[1]
    _state(jobs, alice, long, "running", timeout_s=60)  # re-queued, then admitted again
    status, cancelled = call(jobs, alice, "DELETE", f"/jobs/{long}")
    assert status == 200 and cancelled["was"] == "running", cancelled
