"""Progress and failure classification of a VM start: DataVolume, VM, VMI, launcher pod, events."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.lifecycle.vmspawning import VM_PHASE_PERCENT, build_vm_progress, decide_vm_failure
from gpuworkspace_spawner.manifests.names import LABEL_GPU_MODE

SCHEDULER_GPU = "0/3 nodes are available: 3 Insufficient nvidia.com/GA100_A100_PCIE_40GB."
LAUNCHER = "virt-launcher-notebook-alice-x7k2p"


def dv(
    phase: str = "Succeeded", progress: str | None = "100.0%", *, message: str | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if progress is not None:
        status["progress"] = progress
    if message:
        status["conditions"] = [
            {"type": "Bound", "status": "True", "message": "PVC notebook-alice-root Bound"},
            {"type": "Running", "status": "False", "reason": "Error", "message": message},
        ]
    return {
        "metadata": {"name": "notebook-alice-root", "uid": "dv-uid"},
        "spec": {"sourceRef": {"kind": "DataSource", "name": "ubuntu-24-04-gpu", "namespace": "vm-images"}},
        "status": status,
    }


def vm(printable: str = "Starting", message: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"printableStatus": printable}
    if message:
        status["conditions"] = [{"type": "Failure", "status": "True", "message": message}]
    return {"metadata": {"name": "notebook-alice"}, "spec": {"runStrategy": "Always"}, "status": status}


def vmi(
    phase: str = "Running",
    *,
    ready: bool = False,
    agent: bool = False,
    node: str | None = "gpu-1",
    failure: str | None = None,
) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if agent:
        conditions.append({"type": "AgentConnected", "status": "True"})
    if failure:
        conditions.append({"type": "Synchronized", "status": "False", "message": failure})
    status: dict[str, Any] = {"phase": phase, "conditions": conditions}
    if node:
        status["nodeName"] = node
    return {"metadata": {"name": "notebook-alice", "uid": "vmi-uid"}, "status": status}


def launcher(node: str | None = None, *, waiting: tuple[str, str] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending"}
    if waiting:
        status["containerStatuses"] = [
            {
                "name": "compute",
                "image": "quay.io/kubevirt/virt-launcher:v1.4.1",
                "state": {"waiting": {"reason": waiting[0], "message": waiting[1]}},
            }
        ]
    return {
        "metadata": {"name": LAUNCHER, "uid": "pod-uid", "labels": {LABEL_GPU_MODE: "passthrough-a100"}},
        "spec": {"nodeName": node} if node else {},
        "status": status,
    }


def event(reason: str, message: str, *, kind: str = "Pod", at: str = "12:00:00") -> dict[str, Any]:
    name = {"Pod": LAUNCHER, "DataVolume": "notebook-alice-root"}.get(kind, "notebook-alice")
    return {
        "involvedObject": {"kind": kind, "name": name},
        "reason": reason,
        "message": message,
        "type": "Warning" if reason.startswith(("Failed", "Error")) else "Normal",
        "lastTimestamp": f"2026-03-01T{at}Z",
    }


@pytest.mark.parametrize(
    ("objects", "phase", "message"),
    [
        pytest.param({}, "disk", "Preparing your root disk", id="nothing-yet"),
        pytest.param(
            {"data_volume": dv("CloneScheduled", "N/A")},
            "disk",
            "Cloning your root disk from ubuntu-24-04-gpu (CloneScheduled)",
            id="clone-scheduled",
        ),
        pytest.param(
            {"data_volume": dv("CloneInProgress", "45.00%")},
            "disk",
            "Cloning your root disk from ubuntu-24-04-gpu: 45.00%",
            id="cloning",
        ),
        pytest.param(
            {"data_volume": dv("CSICloneInProgress", None)},
            "disk",
            "Cloning your root disk from ubuntu-24-04-gpu (CSICloneInProgress)",
            id="csi-clone",
        ),
        pytest.param(
            {"data_volume": dv("ImportInProgress", "10.5%")},
            "disk",
            "Importing your root disk from ubuntu-24-04-gpu: 10.5%",
            id="importing",
        ),
        pytest.param(
            {"data_volume": dv("WaitForFirstConsumer", "N/A"), "vm": vm(), "vmi": vmi("Pending", node=None)},
            "disk",
            "Your root disk will be cloned from ubuntu-24-04-gpu once the VM has a node (WaitForFirstConsumer)",
            id="wffc",
        ),
        pytest.param({"data_volume": dv(), "vm": vm("Stopped")}, "disk", "Root disk ready", id="disk-ready"),
        pytest.param(
            {"data_volume": dv(), "vm": vm(), "vmi": vmi("Pending", node=None)},
            "scheduling",
            "Waiting for a node",
            id="vmi-pending",
        ),
        pytest.param(
            {
                "data_volume": dv(),
                "vmi": vmi("Scheduling", node=None),
                "launcher_pod": launcher(),
                "events": [event("FailedScheduling", SCHEDULER_GPU)],
            },
            "scheduling",
            f"Waiting for a node: {SCHEDULER_GPU}",
            id="failed-scheduling-verbatim",
        ),
        pytest.param(
            {
                "data_volume": dv("CloneInProgress", "45.00%"),
                "launcher_pod": launcher(),
                "events": [
                    event("FailedScheduling", "0/3 nodes: pod has unbound immediate PersistentVolumeClaims.")
                ],
            },
            "disk",
            "Cloning your root disk from ubuntu-24-04-gpu: 45.00%",
            id="waiting-for-claim-is-the-disk",
        ),
        pytest.param(
            {"data_volume": dv(), "vmi": vmi("Scheduled"), "launcher_pod": launcher("gpu-1")},
            "booting",
            "Booting your VM on gpu-1",
            id="scheduled",
        ),
        pytest.param(
            {"data_volume": dv(), "vmi": vmi()}, "booting", "Booting your VM on gpu-1", id="booting"
        ),
        pytest.param(
            {"data_volume": dv(), "vmi": vmi(agent=True)},
            "agent",
            "Guest agent connected; waiting for your workspace to answer",
            id="agent",
        ),
        pytest.param(
            {"data_volume": dv(), "vmi": vmi(agent=True, ready=True)}, "ready", "Your VM is ready", id="ready"
        ),
        pytest.param({"vmi": vmi(ready=True)}, "ready", "Your VM is ready", id="ready-without-dv"),
    ],
)
def test_build_vm_progress(objects: dict[str, Any], phase: str, message: str) -> None:
    args: dict[str, Any] = {"data_volume": None, "vm": None, "vmi": None, "launcher_pod": None, "events": []}
    step = build_vm_progress(**{**args, **objects})
    assert (step.phase, step.message) == (phase, message)


def test_clone_percent_maps_into_the_disk_range() -> None:
    def percent(progress: str) -> int:
        return build_vm_progress(
            data_volume=dv("CloneInProgress", progress), vm=None, vmi=None, launcher_pod=None, events=[]
        ).percent

    values = [percent(p) for p in ("0.00%", "12.50%", "45.00%", "99.99%", "100.0%")]
    assert values == sorted(values)
    assert values[0] == VM_PHASE_PERCENT["disk"]
    assert values[-1] < VM_PHASE_PERCENT["scheduling"]
    assert percent("N/A") == VM_PHASE_PERCENT["disk"]
    assert percent("250%") == values[-1]


def test_percent_grows_with_the_phase() -> None:
    order = ["disk", "scheduling", "booting", "agent", "ready"]
    assert [VM_PHASE_PERCENT[p] for p in order] == sorted(VM_PHASE_PERCENT[p] for p in order)
    steps = [
        build_vm_progress(
            data_volume=dv("CloneInProgress", "99%"), vm=vm(), vmi=None, launcher_pod=None, events=[]
        ),
        build_vm_progress(
            data_volume=dv(), vm=vm(), vmi=vmi("Scheduling", node=None), launcher_pod=None, events=[]
        ),
        build_vm_progress(data_volume=dv(), vm=vm(), vmi=vmi(), launcher_pod=None, events=[]),
        build_vm_progress(data_volume=dv(), vm=vm(), vmi=vmi(agent=True), launcher_pod=None, events=[]),
        build_vm_progress(data_volume=dv(), vm=vm(), vmi=vmi(ready=True), launcher_pod=None, events=[]),
    ]
    assert [s.phase for s in steps] == order
    percents = [s.percent for s in steps]
    assert percents == sorted(percents) and len(set(percents)) == len(percents)


@pytest.mark.parametrize(
    ("objects", "elapsed", "reason", "message"),
    [
        pytest.param({}, 1000.0, None, None, id="nothing-yet"),
        pytest.param({"data_volume": dv("CloneInProgress", "45.00%")}, 1000.0, None, None, id="slow-clone"),
        pytest.param(
            {"data_volume": dv("Failed", "N/A", message="DataSource vm-images/ubuntu-24-04-gpu not found")},
            1.0,
            "disk",
            "Your root disk notebook-alice-root could not be created from ubuntu-24-04-gpu: "
            "DataSource vm-images/ubuntu-24-04-gpu not found",
            id="dv-failed",
        ),
        pytest.param(
            {
                "data_volume": dv("Failed", "N/A"),
                "events": [event("Error", "clone source PVC is in use", kind="DataVolume")],
            },
            1.0,
            "disk",
            "Your root disk notebook-alice-root could not be created from ubuntu-24-04-gpu: "
            "clone source PVC is in use",
            id="dv-failed-event-message",
        ),
        pytest.param(
            {
                "launcher_pod": launcher(),
                "events": [event("FailedScheduling", SCHEDULER_GPU)],
            },
            59.0,
            None,
            None,
            id="unschedulable-within-grace",
        ),
        pytest.param(
            {
                "data_volume": dv(),
                "vmi": vmi("Scheduling", node=None),
                "launcher_pod": launcher(),
                "events": [event("FailedScheduling", SCHEDULER_GPU)],
            },
            60.0,
            "unschedulable",
            f"{SCHEDULER_GPU}; the GPU mode passthrough-a100 has no free capacity",
            id="unschedulable-after-grace",
        ),
        pytest.param(
            {"data_volume": dv(), "vmi": vmi("Failed", failure="server error. command SyncVMI failed")},
            1.0,
            "vm",
            "Your VM notebook-alice failed: server error. command SyncVMI failed",
            id="vmi-failed",
        ),
        pytest.param(
            {
                "data_volume": dv(),
                "vmi": vmi("Failed"),
                "events": [event("FailedSync", "qemu exited", kind="VirtualMachineInstance")],
            },
            1.0,
            "vm",
            "Your VM notebook-alice failed: qemu exited",
            id="vmi-failed-event-message",
        ),
        pytest.param(
            {"data_volume": dv(), "vm": vm("CrashLoopBackOff", "VMI failed to start repeatedly")},
            1.0,
            "vm",
            "Your VM notebook-alice cannot start (CrashLoopBackOff): VMI failed to start repeatedly",
            id="vm-crash-loop",
        ),
        pytest.param(
            {"vm": vm("ErrorPvcNotFound")},
            1.0,
            "disk",
            "Your VM notebook-alice cannot start (ErrorPvcNotFound)",
            id="vm-pvc-not-found",
        ),
        pytest.param(
            {
                "data_volume": dv(),
                "launcher_pod": launcher("gpu-1", waiting=("ImagePullBackOff", "Back-off pulling image")),
            },
            1.0,
            "image",
            "The image quay.io/kubevirt/virt-launcher:v1.4.1 could not be pulled (ImagePullBackOff): "
            "Back-off pulling image",
            id="launcher-image",
        ),
        pytest.param(
            {"data_volume": dv(), "vm": vm(), "vmi": vmi(agent=True)},
            1000.0,
            None,
            None,
            id="booting-is-fine",
        ),
    ],
)
def test_decide_vm_failure(
    objects: dict[str, Any], elapsed: float, reason: str | None, message: str | None
) -> None:
    args: dict[str, Any] = {"data_volume": None, "vm": None, "vmi": None, "launcher_pod": None, "events": []}
    failure = decide_vm_failure(**{**args, **objects}, elapsed_s=elapsed, unschedulable_after_s=60.0)
    if reason is None:
        assert failure is None
    else:
        assert failure is not None
        assert (failure.reason, failure.message) == (reason, message)
