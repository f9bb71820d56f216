"""The devcluster's Kueue admission cycle (sim/kueueadmit.py) as decision tables: quota, flavors in order,
cohort borrowing with borrowingLimit, priority order and preemption within the ClusterQueue, Kueue's messages."""

from __future__ import annotations

import hashlib
from decimal import Decimal

import pytest

from gpuworkspace_devcluster.sim.kueueadmit import (
    Assignment,
    FlavorQuota,
    PodSet,
    QueueSpec,
    ResourceGroup,
    WorkloadView,
    decide_admissions,
)
from gpuworkspace_devcluster.sim.kueueobjs import (
    job_suspended,
    pod_set_template,
    restore_template,
    workload_name,
)

GPU = "nvidia.com/gpu"


def cq(
    name: str, *flavors: tuple[str, int, int | None], cohort: str = "", preempt: bool = False
) -> QueueSpec:
    quotas = tuple(
        FlavorQuota(f, {GPU: Decimal(n)}, {GPU: None if b is None else Decimal(b)}) for f, n, b in flavors
    )
    return QueueSpec(name, (ResourceGroup((GPU,), quotas),), cohort, preempt)


def wl(
    name: str,
    gpus: int,
    *,
    queue: str = "train",
    prio: int = 0,
    at: str = "t1",
    on: str | None = None,
    pods: int = 1,
) -> WorkloadView:
    admitted = None
    if on is not None:
        admitted = (Assignment("main", pods, {GPU: on}, {GPU: Decimal(gpus * pods)}),)
    pod_sets = (PodSet("main", pods, {GPU: Decimal(gpus), "cpu": Decimal(0)}),)
    return WorkloadView(("ns", name), f"uid-{name}", queue, prio, at, pod_sets, admitted, f"job-uid-{name}")


def summary(queues: list[QueueSpec], workloads: list[WorkloadView]) -> dict[str, object]:
    plan = decide_admissions({q.name: q for q in queues}, workloads)
    return {
        "admit": {a.key[1]: (a.cluster_queue, a.assignments[0].flavors[GPU]) for a in plan.admit},
        "pending": {p.key[1]: p.message for p in plan.pending},
        "preempt": sorted(p.key[1] for p in plan.preempt),
    }


NEED_1 = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 1 more needed"

CASES = [
    pytest.param(
        [cq("train", ("h100", 1, None))],
        [wl("a", 1, at="t1"), wl("b", 1, at="t2")],
        {"admit": {"a": ("train", "h100")}, "pending": {"b": NEED_1}, "preempt": []},
        id="quota-full-second-waits-with-kueue-message",
    ),
    pytest.param(
        [cq("train", ("h100", 1, None))],
        [wl("a", 1, on="h100"), wl("b", 1, at="t2")],
        {"admit": {}, "pending": {"b": NEED_1}, "preempt": []},
        id="admitted-workload-holds-quota",
    ),
    pytest.param(
        [cq("train", ("h100", 1, None), ("a100", 2, None))],
        [wl("a", 1, on="h100"), wl("b", 2)],
        {"admit": {"b": ("train", "a100")}, "pending": {}, "preempt": []},
        id="next-flavor-in-order",
    ),
    pytest.param(
        [cq("train", ("h100", 2, None))],
        [wl("big", 3)],
        {
            "admit": {},
            "pending": {
                "big": "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor "
                "h100, request > maximum capacity (3 > 2)"
            },
            "preempt": [],
        },
        id="request-over-maximum-capacity",
    ),
    pytest.param(
        [cq("train", ("h100", 1, None)), cq("idle", ("h100", 2, None))],
        [wl("a", 1, on="h100"), wl("b", 1)],
        {"admit": {}, "pending": {"b": NEED_1}, "preempt": []},
        id="no-cohort-no-borrowing",
    ),
    pytest.param(
        [cq("train", ("h100", 1, None), cohort="co"), cq("idle", ("h100", 2, None), cohort="co")],
        [wl("a", 1, on="h100"), wl("b", 2)],
        {"admit": {"b": ("train", "h100")}, "pending": {}, "preempt": []},
        id="borrows-unused-quota-in-cohort",
    ),
    pytest.param(
        [cq("train", ("h100", 1, 1), cohort="co"), cq("idle", ("h100", 2, None), cohort="co")],
        [wl("a", 1, on="h100"), wl("b", 2)],
        {
            "admit": {},
            "pending": {
                "b": "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
                "flavor h100, 1 more needed"
            },
            "preempt": [],
        },
        id="borrowing-limit-caps-borrowing",
    ),
    pytest.param(
        [cq("train", ("h100", 1, None))],
        [wl("low", 1, prio=10, at="t1"), wl("high", 1, prio=100, at="t2")],
        {"admit": {"high": ("train", "h100")}, "pending": {"low": NEED_1}, "preempt": []},
        id="higher-priority-first-among-pending",
    ),
    pytest.param(
        [cq("train", ("h100", 1, None))],
        [wl("low", 1, prio=10, on="h100"), wl("high", 1, prio=100, at="t2")],
        {"admit": {}, "pending": {"high": NEED_1}, "preempt": []},
        id="no-preemption-without-policy",
    ),
    pytest.param(
        [cq("train", ("h100", 2, None), preempt=True)],
        [
            wl("low-old", 1, prio=10, at="t1", on="h100"),
            wl("low-new", 1, prio=10, at="t2", on="h100"),
            wl("high", 1, prio=100, at="t3"),
        ],
        {
            "admit": {},
            "pending": {
                "high": "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
                "flavor h100, 1 more needed"
            },
            "preempt": ["low-new"],
        },
        id="preempts-the-fewest-newest-lower-priority",
    ),
    pytest.param(
        [cq("train", ("h100", 1, None), preempt=True)],
        [wl("same", 1, prio=100, on="h100"), wl("high", 1, prio=100, at="t3")],
        {"admit": {}, "pending": {"high": NEED_1}, "preempt": []},
        id="equal-priority-is-not-preempted",
    ),
    pytest.param(
        [cq("train", ("h100", 4, None))],
        [wl("pair", 2, pods=2)],
        {"admit": {"pair": ("train", "h100")}, "pending": {}, "preempt": []},
        id="count-times-per-pod",
    ),
]


@pytest.mark.parametrize(("queues", "workloads", "expected"), CASES)
def test_admission_cycle(
    queues: list[QueueSpec], workloads: list[WorkloadView], expected: dict[str, object]
) -> None:
    assert summary(queues, workloads) == expected


def test_uncovered_resource_is_named() -> None:
    ps = (PodSet("main", 1, {"example.com/fpga": Decimal(1)}),)
    view = WorkloadView(("ns", "f"), "u", "train", 0, "t1", ps)
    plan = decide_admissions({"train": cq("train", ("h100", 1, None))}, [view])
    assert plan.pending[0].message == (
        "couldn't assign flavors to pod set main: resource example.com/fpga unavailable in ClusterQueue"
    )


def test_preemption_message_names_the_preemptor() -> None:
    queues = {"train": cq("train", ("h100", 1, None), preempt=True)}
    plan = decide_admissions(queues, [wl("low", 1, prio=1, on="h100"), wl("high", 1, prio=9)])
    assert plan.preempt[0].message == (
        "Preempted to accommodate a workload (UID: uid-high, JobUID: job-uid-high) due to prioritization in the "
        "ClusterQueue; preemptor path: /train; preemptee path: /train"
    )


def test_workload_name_as_kueue_derives_it() -> None:
    # Kueue: sha1 of kind, group, name and uid joined by newlines; 5 hex digits
    uid = "0f1c2d3e-0000-4000-8000-000000000001"
    expected = "job-train-" + hashlib.sha1(b"Job\nbatch\ntrain\n" + uid.encode()).hexdigest()[:5]
    assert workload_name("train", uid) == expected
    assert len(workload_name("x" * 300, uid)) == 253


def test_pod_set_drops_managed_labels_and_stop_restores_the_template_it_kept() -> None:
    """``PodSets``/``cleanManagedLabels`` then ``RestorePodSetsInfo``: the flavor's node selector,
    toleration and label go, the user's own template fields and the Job-managed labels stay."""
    managed = {"batch.kubernetes.io/job-name": "train", "job-name": "train", "controller-uid": "u"}
    job = {
        "metadata": {"name": "train"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "a", **managed}},
                "spec": {"nodeSelector": {"zone": "a"}, "containers": [{"name": "c"}]},
            }
        },
    }
    kept = pod_set_template(job)
    assert kept["metadata"]["labels"] == {"team": "a"}
    admitted = {
        "metadata": {"labels": {"team": "a", "flavor": "h100", **managed}},
        "spec": {
            "nodeSelector": {"zone": "a", "nvidia.com/gpu.product": "H100"},
            "tolerations": [{"key": GPU, "operator": "Exists"}],
            "containers": [{"name": "c"}],
        },
    }
    restored = restore_template(admitted, kept)
    assert restored["metadata"]["labels"] == {"team": "a", **managed}
    assert restored["spec"] == {"nodeSelector": {"zone": "a"}, "containers": [{"name": "c"}]}


@pytest.mark.parametrize(
    ("suspend", "annotations", "suspended"),
    [(True, {}, True), (False, {}, False), (True, {"kueue.x-k8s.io/stopping": "true"}, False)],
)
def test_a_stop_in_progress_is_not_suspended(
    suspend: bool, annotations: dict[str, str], suspended: bool
) -> None:
    assert (
        job_suspended({"metadata": {"annotations": annotations}, "spec": {"suspend": suspend}}) is suspended
    )
