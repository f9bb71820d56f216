"""Kueue in the devcluster (sim/kueue.py) on a real DevCluster API, mostly without the Job controller (Jobs
are driven through ``spec.suspend`` and their Complete condition, no pods are needed): a queued Job is
created suspended, gets its Workload, is admitted and unsuspended with the flavor's node labels and
tolerations, waits with Kueue's message when the quota is used up, finishing releases the quota, and
kubectl shows the queues and workloads with their columns. Preemption runs with the Job controller
(sim/jobs.py): the preempted Job is stopped as Kueue's batch Job integration stops it (suspend, reset
``status.startTime``, restore the template: the Job API refuses the template change otherwise), its pod
goes, and it runs again once the preemptor finishes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.resources import find
from gpuworkspace_devcluster.sim.context import SimContext
from gpuworkspace_devcluster.sim.jobs import JobController
from gpuworkspace_devcluster.sim.kueue import KueueController
from gpuworkspace_devcluster.sim.kueueobjs import workload_name

K = "kueue.x-k8s.io"
JOBS = find("batch", "v1", "jobs")
FLAVORS, CQS = find(K, "v1beta2", "resourceflavors"), find(K, "v1beta2", "clusterqueues")
LQS, WPCS, WLS = (
    find(K, "v1beta2", "localqueues"),
    find(K, "v1beta2", "workloadpriorityclasses"),
    find(K, "v1beta2", "workloads"),
)
PODS = find("", "v1", "pods")
NS = "default"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture
async def kueue(tmp_path: Path) -> AsyncIterator[tuple[DevCluster, KueueController]]:
    async with DevCluster(tmp_path / "state") as cluster:
        ctx = SimContext(verbs=cluster.verbs, state_dir=cluster.state_dir, pod_runtime=cluster.pod_runtime)
        controller = KueueController(ctx)
        await controller.start()
        v = cluster.verbs
        v.create(
            FLAVORS,
            "",
            {
                "apiVersion": f"{K}/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": "h100"},
                "spec": {"nodeLabels": {"nvidia.com/gpu.product": "H100"}, "tolerations": [GPU_TOLERATION]},
            },
        )
        quota = {"name": "nvidia.com/gpu", "nominalQuota": 1}
        v.create(
            CQS,
            "",
            {
                "apiVersion": f"{K}/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": "training"},
                "spec": {
                    "namespaceSelector": {},
                    "preemption": {"withinClusterQueue": "LowerPriority"},
                    "resourceGroups": [
                        {
                            "coveredResources": ["nvidia.com/gpu"],
                            "flavors": [{"name": "h100", "resources": [quota]}],
                        }
                    ],
                },
            },
        )
        v.create(
            LQS,
            NS,
            {
                "apiVersion": f"{K}/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "jobs"},
                "spec": {"clusterQueue": "training"},
            },
        )
        for name, value in (("low", 10), ("high", 1000)):
            v.create(
                WPCS,
                "",
                {
                    "apiVersion": f"{K}/v1beta2",
                    "kind": "WorkloadPriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                },
            )
        yield cluster, controller
        await controller.stop()


def job(name: str, priority: str = "low") -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": "jobs", "kueue.x-k8s.io/priority-class": priority}
    container = {
        "name": "train",
        "image": "python:3.11",
        "command": ["python", "-c", "print(1)"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


async def until(check: Callable[[], Any], what: str, limit_s: float = 10) -> Any:
    deadline = asyncio.get_running_loop().time() + limit_s
    while True:
        value = check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def cond(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    return next(
        (c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), {}
    )


async def test_queued_job_is_admitted_then_the_next_waits_and_runs_after(
    kueue: tuple[DevCluster, KueueController],
) -> None:
    cluster, _ = kueue
    v, store = cluster.verbs, cluster.store
    first = v.create(JOBS, NS, job("first"))[0]
    assert first["spec"]["suspend"] is True  # the webhook suspends it at creation
    wl_name = workload_name("first", first["metadata"]["uid"])

    def wl(name: str = wl_name) -> dict[str, Any] | None:
        return store.get(WLS, NS, name)

    await until(lambda: cond(wl(), "Admitted").get("status") == "True", "first admitted")
    workload = wl()
    assert workload is not None
    assert workload["metadata"]["ownerReferences"][0]["uid"] == first["metadata"]["uid"]
    assert workload["spec"]["podSets"][0]["count"] == 1 and workload["spec"]["priority"] == 10
    assert workload["status"]["admission"] == {
        "clusterQueue": "training",
        "podSetAssignments": [
            {
                "name": "main",
                "count": 1,
                "flavors": {"nvidia.com/gpu": "h100"},
                "resourceUsage": {"nvidia.com/gpu": "1"},
            }
        ],
    }
    assert cond(workload, "QuotaReserved")["message"] == "Quota reserved in ClusterQueue training"
    running = await until(
        lambda: not store.get(JOBS, NS, "first")["spec"]["suspend"] and store.get(JOBS, NS, "first"),
        "unsuspended",
    )
    pod_spec = running["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}
    assert pod_spec["tolerations"] == [GPU_TOLERATION]

    second = v.create(JOBS, NS, job("second"))[0]
    second_wl = workload_name("second", second["metadata"]["uid"])
    await until(lambda: cond(wl(second_wl), "QuotaReserved").get("reason") == "Pending", "second pending")
    assert cond(wl(second_wl), "QuotaReserved")["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, "
        "1 more needed"
    )
    assert store.get(JOBS, NS, "second")["spec"]["suspend"] is True
    await until(
        lambda: (store.get(CQS, "", "training").get("status") or {}).get("pendingWorkloads") == 1, "cq counts"
    )
    cq_status = store.get(CQS, "", "training")["status"]
    assert (cq_status["reservingWorkloads"], cq_status["admittedWorkloads"]) == (1, 1)
    assert cq_status["flavorsUsage"] == [
        {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": "1", "borrowed": "0"}]}
    ]
    lq_status = store.get(LQS, NS, "jobs")["status"]
    assert (lq_status["pendingWorkloads"], lq_status["admittedWorkloads"]) == (1, 1)

    done = store.get(JOBS, NS, "first")
    v.update(
        JOBS,
        NS,
        "first",
        {
            **done,
            "status": {
                "conditions": [
                    {
                        "type": "Complete",
                        "status": "True",
                        "reason": "CompletionsReached",
                        "message": "Reached expected number of succeeded pods",
                    }
                ]
            },
        },
        subresource="status",
    )
    await until(lambda: cond(wl(), "Finished").get("status") == "True", "first finished")
    finished = cond(wl(), "Finished")
    assert (finished["reason"], finished["message"]) == (
        "Succeeded",
        "Reached expected number of succeeded pods",
    )
    await until(
        lambda: cond(wl(second_wl), "Admitted").get("status") == "True", "second admitted after the first"
    )
    await until(lambda: store.get(JOBS, NS, "second")["spec"]["suspend"] is False, "second unsuspended")


@pytest.fixture
async def job_controller(kueue: tuple[DevCluster, KueueController]) -> AsyncIterator[JobController]:
    cluster, _ = kueue
    ctx = SimContext(verbs=cluster.verbs, state_dir=cluster.state_dir, pod_runtime=cluster.pod_runtime)
    controller = JobController(ctx)
    await controller.start()
    yield controller
    await controller.stop()


def pods_of(store: Any, name: str) -> list[dict[str, Any]]:
    return [p for p in store.items(PODS, NS) if p["metadata"]["labels"].get("job-name") == name]


def complete(cluster: DevCluster, name: str) -> None:
    done = cluster.store.get(JOBS, NS, name)
    finished = {
        "type": "Complete",
        "status": "True",
        "reason": "CompletionsReached",
        "message": "Reached expected number of succeeded pods",
    }
    status = {**(done.get("status") or {}), "conditions": [finished]}
    cluster.verbs.update(JOBS, NS, name, {**done, "status": status}, subresource="status")


async def test_higher_priority_preempts_lower_which_is_resuspended_and_requeued(
    kueue: tuple[DevCluster, KueueController], job_controller: JobController
) -> None:
    cluster, _ = kueue
    v, store = cluster.verbs, cluster.store
    low = v.create(JOBS, NS, job("low", "low"))[0]
    low_wl = workload_name("low", low["metadata"]["uid"])
    await until(lambda: (store.get(JOBS, NS, "low").get("status") or {}).get("startTime"), "low started")
    first_pod = await until(lambda: pods_of(store, "low"), "low's pod")
    assert first_pod[0]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}
    high = v.create(JOBS, NS, job("high", "high"))[0]
    high_wl = workload_name("high", high["metadata"]["uid"])
    await until(
        lambda: cond(store.get(WLS, NS, high_wl), "Admitted").get("status") == "True", "high admitted"
    )
    evicted = store.get(WLS, NS, low_wl)
    assert cond(evicted, "Evicted")["reason"] == "Preempted"
    assert cond(evicted, "Evicted")["message"].startswith(
        f"Preempted to accommodate a workload (UID: {store.get(WLS, NS, high_wl)['metadata']['uid']}, "
        f"JobUID: {high['metadata']['uid']}) due to prioritization in the ClusterQueue"
    )
    assert "admission" not in evicted["status"]
    assert cond(evicted, "QuotaReserved")["reason"] == "Pending"  # requeued: waits again

    # Kueue's Stop: suspended, startTime reset, the flavor's injection undone, no stop left half-done
    low_job = await until(
        lambda: (
            cond(store.get(JOBS, NS, "low"), "Suspended").get("status") == "True"
            and store.get(JOBS, NS, "low")
        ),
        "low re-suspended by its Job controller",
    )
    assert low_job["spec"]["suspend"] is True
    assert "startTime" not in low_job["status"]
    template = low_job["spec"]["template"]
    assert "nodeSelector" not in template["spec"] and "tolerations" not in template["spec"]
    assert "kueue.x-k8s.io/stopping" not in (low_job["metadata"].get("annotations") or {})
    assert template["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "low"  # managed labels kept
    # the Job controller: its pod removed without counting it as a failure, Suspended as Kubernetes writes it
    assert cond(low_job, "Suspended")["reason"] == "JobSuspended"
    await until(lambda: not pods_of(store, "low"), "low's pod deleted")
    low_status = store.get(JOBS, NS, "low")["status"]
    assert (low_status.get("failed", 0), low_status.get("active", 0)) == (0, 0)
    await until(lambda: pods_of(store, "high"), "high's pod")
    assert "nodeSelector" not in store.get(WLS, NS, low_wl)["spec"]["podSets"][0]["template"]["spec"]

    # the preemptor finishes: the preempted Job is admitted again, placed again, resumed with a new clock
    complete(cluster, "high")
    await until(
        lambda: cond(store.get(WLS, NS, low_wl), "Admitted").get("status") == "True", "low readmitted"
    )
    resumed = await until(
        lambda: (
            cond(store.get(JOBS, NS, "low"), "Suspended").get("reason") == "JobResumed"
            and store.get(JOBS, NS, "low")
        ),
        "low resumed",
    )
    assert resumed["status"]["startTime"]
    assert resumed["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}
    assert cond(store.get(WLS, NS, low_wl), "Evicted")["message"].startswith("Previously: Preempted")
    second_pod = await until(lambda: pods_of(store, "low"), "low's new pod")
    assert second_pod[0]["metadata"]["name"] != first_pod[0]["metadata"]["name"]


async def test_kubectl_shows_queues_and_workloads_with_their_columns(
    kueue: tuple[DevCluster, KueueController],
) -> None:
    cluster, _ = kueue
    first = cluster.verbs.create(JOBS, NS, job("first"))[0]
    name = workload_name("first", first["metadata"]["uid"])
    await until(
        lambda: cond(cluster.store.get(WLS, NS, name), "Admitted").get("status") == "True", "admitted"
    )
    from tests.devcluster.conftest import Kubectl

    out = await asyncio.to_thread(
        Kubectl(cluster.kubeconfig), "get", "clusterqueues,localqueues,workloads", "-n", NS
    )
    text = out.stdout
    assert "COHORT" in text and "PENDING WORKLOADS" in text and "training" in text
    assert "CLUSTERQUEUE" in text and "ADMITTED WORKLOADS" in text
    assert "QUEUE" in text and "RESERVED IN" in text and "ADMITTED" in text and "FINISHED" in text
    row = next(line for line in text.splitlines() if line.startswith(f"workload.kueue.x-k8s.io/{name}"))
    assert row.split()[1:4] == ["jobs", "training", "True"]


async def test_missing_local_queue_is_inadmissible_and_unlabelled_jobs_are_left_alone(
    kueue: tuple[DevCluster, KueueController],
) -> None:
    cluster, _ = kueue
    v, store = cluster.verbs, cluster.store
    lost = job("lost")
    lost["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "nope"
    created = v.create(JOBS, NS, lost)[0]
    name = workload_name("lost", created["metadata"]["uid"])
    await until(
        lambda: cond(store.get(WLS, NS, name), "QuotaReserved").get("reason") == "Inadmissible",
        "inadmissible",
    )
    assert cond(store.get(WLS, NS, name), "QuotaReserved")["message"] == "LocalQueue nope doesn't exist"
    assert store.get(JOBS, NS, "lost")["spec"]["suspend"] is True
    plain = job("plain")
    plain["metadata"]["labels"] = {}
    assert not v.create(JOBS, NS, plain)[0]["spec"].get("suspend")
    await asyncio.sleep(0.3)
    assert not [w for w in store.items(WLS) if w["metadata"]["ownerReferences"][0]["name"] == "plain"]
