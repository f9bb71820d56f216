"""The admission part of the jobs benchmark (``bench_jobs.py``, its part 3): Kueue's admission of many
pending workloads on the devcluster.

``--pending`` Jobs of one GPU each (``sleep 3600``) are created by 8 clients in the LocalQueue
``bench-admission``, whose ClusterQueue has no GPU quota, until the ClusterQueue's status counts them all
pending. Then its GPU quota is raised to Q, and the time is taken until its status counts Q admitted (the
quota is full) and until Q Jobs have pods (Kueue unsuspended them, the Job controller made the pods).
Kueue runs inside the devcluster process, so the request log sees none of its writes: they are counted
as resourceVersion bumps per resource (:func:`.jobs_cluster.writes_by_resource`). CPU time of the
devcluster process per phase, from ``/proc``.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tests.benchmarks import jobs_cluster as jc
from tests.e2e.harness import Devcluster, wait_for

NS = jc.NS
QUEUE = "bench-admission"
JOBS, WRITES = jc.JOBS, jc.WRITES


@dataclass
class Admission:
    pending: int
    quota: int
    create_s: float = 0.0  # the Jobs created (8 clients)
    queued_s: float = 0.0  # ... until the ClusterQueue counts them all pending
    queue_cpu_s: float = 0.0
    full_s: float = 0.0  # quota raised → Q admitted
    pods_s: float = 0.0  # quota raised → Q Jobs have pods
    admit_cpu_s: float = 0.0
    writes: Counter[str] = field(default_factory=Counter)  # store writes, quota raised → Q pods
    total_writes: int = 0  # the resourceVersion's rise in that window (every type)
    logged_writes: int = 0  # writes the request log saw in that window
    unsuspended: int = 0


def pending_job(i: int) -> dict[str, Any]:
    container = {
        "name": "job",
        "image": jc.IMAGE,
        "command": ["sleep", "3600"],
        "resources": {
            "requests": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": "1"},
            "limits": {"nvidia.com/gpu": "1"},
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"bench-pending-{i:04d}",
            "namespace": NS,
            "labels": {jc.QUEUE_LABEL: QUEUE},
        },
        "spec": {
            "suspend": True,
            "template": {
                "metadata": {"labels": {"bench": "admission"}},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }


def admission(dc: Devcluster, pending: int, quota: int) -> Admission:
    pid = dc.proc._popen.pid  # type: ignore[union-attr]  # the devcluster process: API server + controllers
    cq_path = f"{jc.KUEUE_API}/clusterqueues/{QUEUE}"
    status = lambda: jc.get_json(dc, cq_path).get("status") or {}  # noqa: E731
    result = Admission(pending, quota)
    cpu, started = jc.cpu_seconds(pid), time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: jc.write(dc, "POST", JOBS, pending_job(i)), range(pending)))
    result.create_s = time.perf_counter() - started
    all_pending = lambda: status().get("pendingWorkloads") == pending  # noqa: E731
    wait_for(all_pending, 600, f"{pending} workloads pending", dc.proc, interval_s=0.05)
    result.queued_s, result.queue_cpu_s = time.perf_counter() - started, jc.cpu_seconds(pid) - cpu

    rv0 = jc.store_rv(dc)
    dc.requests_log(clear=True)
    cpu, started = jc.raise_quota(dc, QUEUE, quota, pid)
    wait_for(
        lambda: status().get("admittedWorkloads", 0) >= quota,
        300,
        f"{quota} admitted",
        dc.proc,
        interval_s=0.02,
    )
    result.full_s = time.perf_counter() - started
    pods = f"/api/v1/namespaces/{NS}/pods?labelSelector=bench%3Dadmission"
    wait_for(
        lambda: len(jc.get_json(dc, pods)["items"]) >= quota, 300, f"{quota} pods", dc.proc, interval_s=0.05
    )
    result.pods_s, result.admit_cpu_s = time.perf_counter() - started, jc.cpu_seconds(pid) - cpu
    rv1 = jc.store_rv(dc)
    result.logged_writes = sum(1 for r in dc.requests_log() if r["verb"] in WRITES)
    result.writes, result.total_writes = jc.writes_by_resource(dc, rv0, rv1), rv1 - rv0
    listed = jc.get_json(dc, f"/apis/batch/v1/namespaces/{NS}/jobs?labelSelector={jc.QUEUE_LABEL}%3D{QUEUE}")
    result.unsuspended = sum(1 for j in listed["items"] if not j["spec"].get("suspend"))
    return result


def print_admission(a: Admission) -> None:
    print(f"\nadmission: {a.pending} queued Jobs of 1 GPU each, ClusterQueue quota 0 → {a.quota} GPUs")
    print(f"  {a.pending} Jobs created (8 clients)          {a.create_s:7.2f} s")
    print(
        f"  ... until all {a.pending} Workloads pending      {a.queued_s:7.2f} s   devcluster CPU {a.queue_cpu_s:.2f} s"
    )
    print(f"  quota raised → {a.quota} admitted (quota full)   {a.full_s:7.2f} s")
    print(
        f"  quota raised → {a.quota} Jobs have pods         {a.pods_s:7.2f} s   devcluster CPU {a.admit_cpu_s:.2f} s"
    )
    print(f"  Jobs unsuspended: {a.unsuspended} of {a.pending} (quota {a.quota})")
    total = a.total_writes
    print(
        f"  store writes (resourceVersion bumps) until the pods: {total}: "
        + ", ".join(f"{n} {k}" for k, n in a.writes.most_common())
        + f" (other types: {total - sum(a.writes.values())})"
    )
    print(
        f"  writes in the API request log in that window: {a.logged_writes} (Kueue and the Job controller run in-process)"
    )
