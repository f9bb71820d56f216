"""Labels and audit that say everything (seed 001 §18): team and image digest on the pod and its disk, a
start record that names image, mounts and GPU request, and what the default Events cost in API writes.

Real JupyterHub + devcluster; the records are read from the hub's log (``audit {...}`` lines), the writes
from the devcluster's request log.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import datetime
from typing import Any

import pytest

from .harness import HubStack

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NS = "gpu-workspaces"
USER = "audit-ana"
SERVER = "ws"
POD = f"jupyter-{USER}--{SERVER}"
PROFILE = "gpu-mig"  # hub_config/catalog/gpu.yaml: a MIG slice, image pinned by digest, no team
DIGEST = "sha256:07ada0bb13ec7286cdaaeab442f196959e1330993fa72ec0503e0bc429dbf29f"
GROUPS = ("team-vision", "team-audit", "researchers")  # the first team-* group, sorted: team-audit
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("labels and start records are this project's spawner's, not plain KubeSpawner's")


def get_json(stack: HubStack, *args: str) -> Any:
    env = {**os.environ, "KUBECONFIG": str(stack.kubeconfig)}
    argv = ["kubectl", "-n", NS, "get", *args, "-o", "json"]
    return json.loads(subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout)


def join_groups(stack: HubStack, user: str, groups: tuple[str, ...]) -> None:
    if stack.hub.api("GET", f"/users/{user}")[0] == 404:
        assert stack.hub.api("POST", f"/users/{user}")[0] in (200, 201)
    for group in groups:
        if stack.hub.api("GET", f"/groups/{group}")[0] == 404:
            assert stack.hub.api("POST", f"/groups/{group}")[0] in (200, 201)
        status, body = stack.hub.api("POST", f"/groups/{group}/users", {"users": [user]})
        assert status == 200, body


def audit_records(stack: HubStack, user: str, since: float) -> list[dict[str, Any]]:
    """The spawner's audit records of ``user`` in the hub's log, logged after ``since`` (epoch seconds)."""
    lines = stack.hub.proc.log_path.read_text(errors="replace").splitlines()
    records = [json.loads("{" + line.split(" audit {", 1)[1]) for line in lines if " audit {" in line]
    return [
        r for r in records if r.get("user") == user and datetime.fromisoformat(r["ts"]).timestamp() >= since
    ]


def start(stack: HubStack) -> None:
    stack.hub.start_server(USER, SERVER, {"profile": PROFILE})
    stack.hub.wait_ready(USER, SERVER)


def test_a_start_record_names_image_mounts_and_gpu_and_costs_two_events(stack: HubStack) -> None:
    join_groups(stack, USER, GROUPS)
    start(stack)  # the first start creates the home disk
    stack.hub.stop_server(USER, SERVER)

    since = time.time()  # the hub's log has microseconds, from the same machine's clock
    stack.requests_log(clear=True)
    start(stack)
    pod = get_json(stack, "pod", POD)
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels["gpuworkspace.dev/team"] == "audit"
    assert annotations["gpuworkspace.dev/team"] == "audit"
    assert labels["gpuworkspace.dev/image-digest-prefix"] == DIGEST.removeprefix("sha256:")[:16]
    assert annotations["gpuworkspace.dev/image-digest"] == DIGEST
    assert annotations["gpuworkspace.dev/image"].endswith("@" + DIGEST)
    claim_name = next(
        v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if v["name"] == "home"
    )
    claim = get_json(stack, "pvc", claim_name)["metadata"]
    assert claim["labels"]["gpuworkspace.dev/team"] == "audit"
    assert claim["annotations"]["gpuworkspace.dev/image-digest"] == DIGEST

    (started,) = [r for r in audit_records(stack, USER, since) if r["action"] == "workspace-started"]
    assert (started["profile"], started["catalog_version"]) == (PROFILE, "2026.12.1")
    details = started["details"]
    assert details["image_digest"] == DIGEST
    assert details["gpu"] == {"mode": "mig", "resources": {"nvidia.com/mig-1g.10gb": "1"}}
    assert (details["team"], details["team_source"]) == ("audit", "group team-audit")
    mounts = {m["mount_path"]: m for m in details["mounts"]}
    assert mounts["/home/jovyan"]["claim"] == claim_name and mounts["/home/jovyan"]["volume"] == "home"
    assert mounts["/workspace"]["claim"] == claim_name and mounts["/workspace"]["sub_path"] == "workspace"
    pod_mounts = {(m["name"], m["mountPath"]) for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert {(m["volume"], m["mount_path"]) for m in details["mounts"]} == pod_mounts

    stack.hub.stop_server(USER, SERVER)
    # the cost of the default audit_events = "all": every write of this start/stop cycle, by the hub
    log = stack.requests_log()
    (create_pod,) = [
        r for r in log if (r["verb"], r["resource"]) == ("create", "pods")
    ]  # the name is in the body
    hub_writes = [r for r in log if r["verb"] in WRITE_VERBS and r["user"] == create_pod["user"]]
    summary = sorted(f"{r['verb']} {r['resource']}" for r in hub_writes)
    print("hub writes of one start/stop cycle:", summary)
    assert summary.count("create events") == 2, summary
    assert [w for w in summary if w.endswith("pods")] == ["create pods", "delete pods"], summary
    reasons = [
        e["reason"]
        for e in get_json(stack, "events")["items"]
        if e["involvedObject"]["name"] == POD and e["reason"].startswith("Workspace")
    ]
    # the warm-up cycle wrote the same pair: two per cycle, nothing else on the pod
    assert reasons.count("WorkspaceStarted") == 2 and reasons.count("WorkspaceStopped") == 2, reasons
    assert len(reasons) == 4, reasons
