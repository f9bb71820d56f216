"""A kubectl walk through Kueue on the simulated cluster (``BackgroundCluster(simulate=True)`` registers the
Kueue controller with the other components): an admin applies a flavor, a ClusterQueue, a LocalQueue; a user
creates two one-GPU Jobs with kubectl; the first is admitted and unsuspended onto the flavor's nodes, the
second waits with Kueue's message; ``kubectl get clusterqueues,localqueues,workloads`` shows it all.
No Job controller exists on this branch, so no pod is expected to run."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_devcluster.testing import BackgroundCluster

from ..conftest import Kubectl

pytestmark = pytest.mark.kubectl
NS = "gpu-workspaces"
K = "kueue.x-k8s.io/v1beta2"


@pytest.fixture
def kubectl(tmp_path: Path) -> Iterator[Kubectl]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed on this machine")
    with BackgroundCluster(tmp_path / "state", simulate=True) as bg:
        yield Kubectl(bg.kubeconfig)


def eventually(check: Callable[[], Any], what: str, limit_s: float = 20.0) -> Any:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {limit_s}s waiting for {what}")


QUEUES = [
    {"apiVersion": K, "kind": "ResourceFlavor", "metadata": {"name": "h100"},
     "spec": {"nodeLabels": {"gpuworkspace.dev/pool": "gpu"},
              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}},
    {"apiVersion": K, "kind": "ClusterQueue", "metadata": {"name": "training"},
     "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
         {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 1}]}]}]}},
    {"apiVersion": K, "kind": "LocalQueue", "metadata": {"name": "jobs", "namespace": NS},
     "spec": {"clusterQueue": "training"}},
]  # fmt: skip


def job(name: str, code: str = "print(1)") -> dict[str, Any]:
    container = {
        "name": "train",
        "image": "python:3.11",
        "command": ["python", "-c", code],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "jobs"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}  # fmt: skip


def workload_of(kubectl: Kubectl, job_name: str) -> dict[str, Any] | None:
    items = json.loads(kubectl("get", "workloads", "-n", NS, "-o", "json").stdout)["items"]
    return next((w for w in items if w["metadata"]["ownerReferences"][0]["name"] == job_name), None)


def condition(wl: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    return next(
        (c for c in ((wl or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), {}
    )


def test_kubectl_walk_two_jobs_one_gpu(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in QUEUES))
    # the first runs long enough for the second to be seen waiting, then finishes and frees the GPU
    kubectl(
        "create", "-f", "-", input=json.dumps(job("first", "import time; time.sleep(25); print('first')"))
    )
    eventually(
        lambda: condition(workload_of(kubectl, "first"), "Admitted").get("status") == "True", "first admitted"
    )
    first = json.loads(kubectl("get", "job", "first", "-n", NS, "-o", "json").stdout)
    assert first["spec"]["suspend"] is False
    assert first["spec"]["template"]["spec"]["nodeSelector"] == {"gpuworkspace.dev/pool": "gpu"}

    kubectl("create", "-f", "-", input=json.dumps(job("second")))
    eventually(
        lambda: condition(workload_of(kubectl, "second"), "QuotaReserved").get("reason") == "Pending",
        "pending",
    )
    assert condition(workload_of(kubectl, "second"), "QuotaReserved")["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, "
        "1 more needed"
    )
    assert (
        json.loads(kubectl("get", "job", "second", "-n", NS, "-o", "json").stdout)["spec"]["suspend"] is True
    )

    def table() -> str:
        return kubectl("get", "clusterqueues,localqueues,workloads", "-n", NS).stdout

    text = eventually(lambda: (t := table()) and "training   " in t and t, "tables")
    lines = text.splitlines()
    cq_header = next(i for i, line in enumerate(lines) if line.startswith("NAME") and "COHORT" in line)
    assert lines[cq_header].split() == ["NAME", "COHORT", "PENDING", "WORKLOADS"]
    assert lines[cq_header + 1].split() == ["clusterqueue.kueue.x-k8s.io/training", "1"]  # no cohort: blank
    lq_header = next(i for i, line in enumerate(lines) if "CLUSTERQUEUE" in line)
    assert lines[lq_header].split() == [
        "NAME",
        "CLUSTERQUEUE",
        "PENDING",
        "WORKLOADS",
        "ADMITTED",
        "WORKLOADS",
    ]
    assert lines[lq_header + 1].split() == ["localqueue.kueue.x-k8s.io/jobs", "training", "1", "1"]
    rows = {
        line.split()[0].split("/")[-1].split("-")[1]: line.split()[1:]
        for line in lines
        if "workload." in line
    }
    assert rows["first"][:3] == ["jobs", "training", "True"]
    assert rows["second"][0] == "jobs" and len(rows["second"]) == 2  # RESERVED IN, ADMITTED, FINISHED blank

    # the Job controller runs the admitted Job's pod on the flavor's nodes; when it completes, its Workload
    # finishes, the quota is released, and the second is admitted and runs to completion
    def job_condition(name: str, kind: str) -> bool:
        status = json.loads(kubectl("get", "job", name, "-n", NS, "-o", "json").stdout).get("status") or {}
        return any(c["type"] == kind and c["status"] == "True" for c in status.get("conditions") or [])

    eventually(lambda: job_condition("first", "Complete"), "the first Job to complete", 90)
    eventually(
        lambda: condition(workload_of(kubectl, "first"), "Finished").get("status") == "True", "finished"
    )
    eventually(
        lambda: condition(workload_of(kubectl, "second"), "Admitted").get("status") == "True",
        "second admitted",
    )
    eventually(lambda: job_condition("second", "Complete"), "the second Job to complete", 90)
    assert kubectl("logs", "job/second", "-n", NS).stdout.strip() == "1"
    pods = json.loads(kubectl("get", "pods", "-n", NS, "-l", "job-name=first", "-o", "json").stdout)["items"]
    assert pods and pods[0]["spec"]["nodeSelector"] == {"gpuworkspace.dev/pool": "gpu"}
