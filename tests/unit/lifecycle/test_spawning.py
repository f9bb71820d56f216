"""Progress and failure classification of a container start, from claim, pod and events."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from gpuworkspace_spawner.lifecycle import spawning
from gpuworkspace_spawner.lifecycle.spawning import (
    PHASE_PERCENT,
    build_progress,
    classify_api_error,
    decide_spawn_failure,
)
from gpuworkspace_spawner.manifests.names import LABEL_GPU_MODE

SCHEDULER_GPU = (
    "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint "
    "{node-role.kubernetes.io/control-plane: }. preemption: 0/3 nodes are available: 3 No preemption victims found."
)
SCHEDULER_MIG = "0/2 nodes are available: 2 Insufficient nvidia.com/mig-1g.10gb."
MULTI_ATTACH = 'Multi-Attach error for volume "pvc-1234" Volume is already used by pod(s) jupyter-alice-old on node gpu-2'
PULLED = (
    'Successfully pulled image "registry.example.com/cuda:12.4" in 1m2.5s (1m2.5s including waiting). '
    "Image size: 12345678901 bytes."
)


def pvc(phase: str = "Bound", uid: str = "pvc-uid") -> dict[str, Any]:
    return {
        "metadata": {"name": "home-alice", "uid": uid},
        "spec": {"storageClassName": "ceph-rbd", "resources": {"requests": {"storage": "200Gi"}}},
        "status": {"phase": phase},
    }


def pod(
    node: str | None = None,
    *,
    ready: bool = False,
    waiting: tuple[str, str] | None = None,
    running: bool = False,
    gpu_mode: str | None = "exclusive",
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running" if running else "Pending"}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    state: dict[str, Any] = {}
    if waiting:
        state = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
    if running:
        state = {"running": {"startedAt": "2026-03-01T12:05:00Z"}}
    if state:
        status["containerStatuses"] = [
            {"name": "notebook", "image": "registry.example.com/cuda:12.4", "state": state}
        ]
    labels = {LABEL_GPU_MODE: gpu_mode} if gpu_mode else {}
    spec = {"nodeName": node} if node else {}
    return {
        "metadata": {"name": "jupyter-alice", "uid": "pod-uid", "labels": labels},
        "spec": spec,
        "status": status,
    }


def event(
    reason: str, message: str = "", at: str = "12:00:00", *, kind: str = "Pod", uid: str | None = None
) -> dict[str, Any]:
    name = "jupyter-alice" if kind == "Pod" else "home-alice"
    about = {"kind": kind, "name": name, **({"uid": uid} if uid else {})}
    return {
        "involvedObject": about,
        "reason": reason,
        "message": message,
        "type": "Warning" if reason.startswith("Failed") else "Normal",
        "count": 1,
        "lastTimestamp": f"2026-03-01T{at}Z",
    }


@pytest.mark.parametrize(
    ("claim", "workspace_pod", "events", "phase", "message"),
    [
        pytest.param(None, None, [], "disk", "Preparing your home disk", id="nothing-yet"),
        pytest.param(
            pvc("Pending"),
            None,
            [],
            "disk",
            "Provisioning your home disk (200Gi on ceph-rbd)",
            id="provisioning",
        ),
        pytest.param(pvc(), None, [], "disk", "Home disk ready", id="disk-ready"),
        pytest.param(pvc(), pod(), [], "scheduling", "Waiting for a node", id="waiting-for-node"),
        pytest.param(
            pvc("Pending"),
            pod(),
            [event("FailedScheduling", SCHEDULER_GPU)],
            "scheduling",
            f"Waiting for a node: {SCHEDULER_GPU}",
            id="wffc-claim-but-no-gpu",
        ),
        pytest.param(
            pvc("Pending"),
            pod(),
            [
                event(
                    "FailedScheduling",
                    "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
                )
            ],
            "disk",
            "Provisioning your home disk (200Gi on ceph-rbd)",
            id="immediate-claim-not-bound",
        ),
        pytest.param(
            pvc(),
            pod(),
            [
                event("FailedScheduling", "old news", "11:00:00"),
                event("FailedScheduling", SCHEDULER_MIG, "12:00:00"),
            ],
            "scheduling",
            f"Waiting for a node: {SCHEDULER_MIG}",
            id="latest-scheduler-message",
        ),
        pytest.param(
            pvc(),
            pod(),
            [
                event("FailedScheduling", SCHEDULER_MIG, "12:00:00"),
                event("FailedScheduling", "old news", "11:00:00"),
            ],
            "scheduling",
            f"Waiting for a node: {SCHEDULER_MIG}",
            id="events-sorted-by-time",
        ),
        pytest.param(
            pvc(), pod("gpu-1"), [], "attach", "Scheduled on gpu-1; attaching your home disk", id="scheduled"
        ),
        pytest.param(
            pvc(),
            pod("gpu-1"),
            [event("FailedAttachVolume", MULTI_ATTACH)],
            "attach",
            f"Attaching your home disk: {MULTI_ATTACH}",
            id="multi-attach",
        ),
        pytest.param(
            pvc(),
            pod("gpu-1"),
            [event("FailedMount", "MountVolume.MountDevice failed: rbd: map failed")],
            "attach",
            "Mounting your disks: MountVolume.MountDevice failed: rbd: map failed",
            id="mount-failed",
        ),
        pytest.param(
            pvc(),
            pod("gpu-1"),
            [event("SuccessfulAttachVolume", "ok")],
            "attach",
            "Home disk attached to gpu-1",
            id="attached",
        ),
        pytest.param(
            pvc(),
            pod("gpu-1"),
            [
                event("SuccessfulAttachVolume"),
                event("Pulling", 'Pulling image "registry.example.com/cuda:12.4"'),
            ],
            "image",
            "Pulling image registry.example.com/cuda:12.4",
            id="pulling",
        ),
        pytest.param(
            pvc(),
            pod("gpu-1"),
            [event("Pulling", 'Pulling image "x"', "12:00:00"), event("Pulled", PULLED, "12:01:00")],
            "image",
            "Pulled image registry.example.com/cuda:12.4 (12.3 GB in 1m2.5s)",
            id="pulled-with-size",
        ),
        pytest.param(
            pvc(),
            pod("gpu-1"),
            [event("Pulled", 'Container image "registry.example.com/cuda:12.4" already present on machine')],
            "image",
            "Image registry.example.com/cuda:12.4 already on the node",
            id="already-present",
        ),
        pytest.param(
            pvc(),
            pod("gpu-1"),
            [event("Pulled", PULLED), event("Started")],
            "starting",
            "Starting your workspace on gpu-1",
            id="started",
        ),
        pytest.param(
            pvc(),
            pod("gpu-1", running=True),
            [],
            "starting",
            "Starting your workspace on gpu-1",
            id="running",
        ),
        pytest.param(pvc(), pod("gpu-1", ready=True), [], "ready", "Your workspace is ready", id="ready"),
        pytest.param(
            pvc(),
            pod(),
            [event("FailedScheduling", SCHEDULER_GPU, uid="an-older-pod")],
            "scheduling",
            "Waiting for a node",
            id="events-of-an-older-pod-ignored",
        ),
    ],
)
def test_build_progress(
    claim: dict[str, Any] | None,
    workspace_pod: dict[str, Any] | None,
    events: list[dict[str, Any]],
    phase: str,
    message: str,
) -> None:
    step = build_progress(claim, workspace_pod, events)
    assert (step.phase, step.message) == (phase, message)
    assert PHASE_PERCENT[phase] <= step.percent < 100


def test_percent_grows_with_the_phase() -> None:
    order = ["disk", "scheduling", "attach", "image", "starting", "ready"]
    percents = [PHASE_PERCENT[p] for p in order]
    assert percents == sorted(percents)
    assert len(set(percents)) == len(percents)
    # the within-phase bonus never reaches the next phase
    assert all(PHASE_PERCENT[a] + 10 < PHASE_PERCENT[b] for a, b in itertools.pairwise(order))


TIMINGS = {"unschedulable_after_s": 60.0, "attach_failure_after_s": 120.0}


@pytest.mark.parametrize(
    ("claim", "workspace_pod", "events", "elapsed_s", "reason", "in_message"),
    [
        pytest.param(pvc(), pod("gpu-1"), [], 5.0, None, "", id="healthy"),
        pytest.param(
            pvc(),
            pod(
                "gpu-1",
                waiting=("ErrImagePull", 'failed to pull "registry.example.com/cuda:12.4": not found'),
            ),
            [],
            1.0,
            "image",
            "not found",
            id="err-image-pull-at-once",
        ),
        pytest.param(
            pvc(),
            pod("gpu-1", waiting=("ImagePullBackOff", "Back-off")),
            [],
            1.0,
            "image",
            "ImagePullBackOff",
            id="backoff",
        ),
        pytest.param(
            pvc(),
            pod("gpu-1", waiting=("InvalidImageName", "bad")),
            [],
            1.0,
            "image",
            "InvalidImageName",
            id="invalid",
        ),
        pytest.param(
            pvc(),
            pod("gpu-1", waiting=("ContainerCreating", "")),
            [],
            1.0,
            None,
            "",
            id="container-creating-is-fine",
        ),
        pytest.param(pvc("Lost"), pod(), [], 1.0, "disk", "Lost", id="claim-lost"),
        pytest.param(
            pvc("Pending"),
            pod(),
            [event("ProvisioningFailed", "rbd: pool not found", kind="PersistentVolumeClaim")],
            1.0,
            "disk",
            "rbd: pool not found",
            id="provisioning-failed",
        ),
        pytest.param(
            pvc("Bound"),
            pod(),
            [event("ProvisioningFailed", "transient", kind="PersistentVolumeClaim")],
            1.0,
            None,
            "",
            id="provisioning-failed-then-bound",
        ),
        pytest.param(
            pvc(),
            pod("gpu-1"),
            [event("FailedAttachVolume", MULTI_ATTACH)],
            60.0,
            None,
            "",
            id="attach-grace",
        ),
        pytest.param(
            pvc(),
            pod("gpu-1"),
            [event("FailedAttachVolume", MULTI_ATTACH)],
            120.0,
            "disk",
            "fenced",
            id="multi-attach-persists",
        ),
        pytest.param(
            pvc(),
            pod("gpu-1"),
            [event("FailedMount", "timed out waiting for the condition")],
            300.0,
            "disk",
            "timed out waiting",
            id="mount-persists",
        ),
        pytest.param(
            pvc(),
            pod("gpu-1"),
            [event("FailedMount", "x", "12:00:00"), event("Pulling", 'Pulling image "y"', "12:01:00")],
            300.0,
            None,
            "",
            id="mount-failed-then-recovered",
        ),
        pytest.param(
            pvc(), pod(), [event("FailedScheduling", SCHEDULER_GPU)], 30.0, None, "", id="unschedulable-grace"
        ),
        pytest.param(
            pvc(),
            pod(),
            [event("FailedScheduling", SCHEDULER_GPU)],
            60.0,
            "unschedulable",
            "Insufficient nvidia.com/gpu, 2 node(s)",
            id="unschedulable-gpu",
        ),
        pytest.param(
            pvc(),
            pod(gpu_mode="mig"),
            [event("FailedScheduling", SCHEDULER_MIG)],
            60.0,
            "unschedulable",
            "the GPU mode mig has no free capacity",
            id="unschedulable-mig",
        ),
        pytest.param(
            pvc(),
            pod(gpu_mode=None),
            [event("FailedScheduling", SCHEDULER_MIG)],
            60.0,
            "unschedulable",
            "the GPU mode nvidia.com/mig-1g.10gb has no free capacity",
            id="unschedulable-unlabelled-pod",
        ),
        pytest.param(
            pvc(),
            pod(),
            [event("FailedScheduling", "0/3 nodes are available: 3 Insufficient memory.")],
            600.0,
            "unschedulable",
            "Insufficient memory.",
            id="unschedulable-memory",
        ),
        pytest.param(
            pvc(),
            pod("gpu-1"),
            [event("FailedScheduling", SCHEDULER_GPU)],
            600.0,
            None,
            "",
            id="scheduled-after-all",
        ),
        pytest.param(
            pvc(),
            pod(),
            [
                event(
                    "FailedCreate",
                    'pods "x" is forbidden: exceeded quota: gpu-quota, requested: nvidia.com/gpu=1',
                )
            ],
            1.0,
            "quota",
            "exceeded quota: gpu-quota",
            id="quota-event",
        ),
    ],
)
def test_decide_spawn_failure(
    claim: dict[str, Any] | None,
    workspace_pod: dict[str, Any] | None,
    events: list[dict[str, Any]],
    elapsed_s: float,
    reason: str | None,
    in_message: str,
) -> None:
    failure = decide_spawn_failure(claim, workspace_pod, events, elapsed_s=elapsed_s, **TIMINGS)
    if reason is None:
        assert failure is None
    else:
        assert failure is not None
        assert failure.reason == reason
        assert in_message in failure.message


def test_unschedulable_message_is_the_scheduler_s() -> None:
    failure = decide_spawn_failure(
        pvc(), pod(), [event("FailedScheduling", SCHEDULER_GPU)], elapsed_s=61, **TIMINGS
    )
    assert failure is not None
    assert failure.message == f"{SCHEDULER_GPU}; the GPU mode exclusive has no free capacity"


def test_timeout_names_the_phase() -> None:
    events = [event("Pulling", 'Pulling image "registry.example.com/cuda:12.4"')]
    assert (
        decide_spawn_failure(pvc(), pod("gpu-1"), events, elapsed_s=599, timeout_after_s=600, **TIMINGS)
        is None
    )
    failure = decide_spawn_failure(pvc(), pod("gpu-1"), events, elapsed_s=600, timeout_after_s=600, **TIMINGS)
    assert failure is not None
    assert failure.reason == "timeout"
    assert "Pulling image registry.example.com/cuda:12.4" in failure.message


@pytest.mark.parametrize(
    ("status", "message", "reason"),
    [
        pytest.param(
            403,
            'persistentvolumeclaims "home-alice" is forbidden: exceeded quota: storage',
            "quota",
            id="quota",
        ),
        pytest.param(403, "User cannot create pods", None, id="rbac-is-not-quota"),
        pytest.param(422, 'Pod "x" is invalid: spec.volumes', None, id="invalid"),
        pytest.param(409, "already exists", None, id="conflict"),
    ],
)
def test_classify_api_error(status: int, message: str, reason: str | None) -> None:
    failure = classify_api_error(status, message)
    assert (failure.reason if failure else None) == reason
    if failure:
        assert message in failure.message


def test_inputs_are_not_mutated() -> None:
    claim, workspace_pod = pvc("Pending"), pod()
    events = [event("FailedScheduling", SCHEDULER_GPU, "12:01:00"), event("Scheduled", "x", "12:00:00")]
    before = copy.deepcopy((claim, workspace_pod, events))
    build_progress(claim, workspace_pod, events)
    decide_spawn_failure(claim, workspace_pod, events, elapsed_s=1000, timeout_after_s=1, **TIMINGS)
    assert (claim, workspace_pod, events) == before


def test_decide_extra_pods_is_reexported() -> None:
    assert spawning.decide_extra_pods.__module__ == "gpuworkspace_spawner.lifecycle.invariants"
