"""What a VM start is doing, and whether it has failed, from what the cluster says.

Pure; the VM counterpart of :mod:`~gpuworkspace_spawner.lifecycle.spawning`. Inputs are raw camelCase
API dicts: the root disk's CDI DataVolume, the KubeVirt VirtualMachine and its VirtualMachineInstance
(same name), the VMI's virt-launcher pod, and core/v1 Events. Phases, with percents that only grow::

    disk (clone progress mapped into 5-40) → scheduling 45 → booting 60 → agent 80 → ready 95

The scheduler's, CDI's and KubeVirt's own words are shown verbatim (ARCHITECTURE.md principle 5).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from gpuworkspace_spawner.lifecycle.spawning import (
    _CLAIM_WAIT,
    FailureReason,
    Phase,
    ProgressStep,
    SpawnFailure,
    _events_for,
    _image_failure,
    _latest,
    _message,
    _unschedulable,
)

__all__ = ["VM_PHASE_PERCENT", "VmFailureReason", "VmPhase", "build_vm_progress", "decide_vm_failure"]

VmPhase = Literal["disk", "scheduling", "booting", "agent", "ready"]
VmFailureReason = Literal["unschedulable", "disk", "image", "vm"]

VM_PHASE_PERCENT: dict[str, int] = {"disk": 5, "scheduling": 45, "booting": 60, "agent": 80, "ready": 95}
_DISK_END = 40  # a finished clone reaches 40%; scheduling starts at 45%

_IMPORT_PHASES = frozenset({"ImportScheduled", "ImportInProgress"})
_UPLOAD_PHASES = frozenset({"UploadScheduled", "UploadReady"})
_WAITING = frozenset({"WaitForFirstConsumer", "PendingPopulation"})
_ON_NODE = frozenset({"Scheduled", "Running"})
_BAD_VM_STATUS: dict[str, VmFailureReason] = {
    "CrashLoopBackOff": "vm",
    "ErrorPvcNotFound": "disk",
    "DataVolumeError": "disk",
}


def _step(phase: VmPhase, message: str, percent: int | None = None) -> ProgressStep:
    # spawning.Phase names the container phases only; widening it to VmPhase drops this cast.
    return ProgressStep(cast(Phase, phase), VM_PHASE_PERCENT[phase] if percent is None else percent, message)


def _failure(reason: VmFailureReason, message: str) -> SpawnFailure:
    # spawning.FailureReason lacks "vm"; widening it drops this cast.
    return SpawnFailure(cast(FailureReason, reason), message)


def _status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("status") or {}


def _condition_true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in _status(obj).get("conditions") or []
    )


def _condition_message(obj: Mapping[str, Any] | None, kinds: Sequence[str]) -> str:
    """The first non-empty message among the conditions ``kinds`` (in that order), whitespace-folded."""
    conditions = {c.get("type"): c for c in _status(obj).get("conditions") or []}
    for kind in kinds:
        message = (conditions.get(kind) or {}).get("message")
        if message:
            return " ".join(str(message).split())
    return ""


def _name(obj: Mapping[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("name", "?"))


# -- progress ------------------------------------------------------------------------------------------


def _source(dv: Mapping[str, Any]) -> str:
    spec = dv.get("spec") or {}
    ref = spec.get("sourceRef") or {}
    if ref.get("name"):
        return str(ref["name"])
    source = spec.get("source") or {}
    for kind, key in (("pvc", "name"), ("snapshot", "name"), ("registry", "url"), ("http", "url")):
        if (source.get(kind) or {}).get(key):
            return str(source[kind][key])
    return "the golden image"


def _percent(progress: object) -> float | None:
    """CDI's ``status.progress`` ("45.00%") as a fraction; None for "N/A" or anything unparseable."""
    try:
        value = float(str(progress).strip().rstrip("%"))
    except ValueError:
        return None
    return min(max(value / 100, 0.0), 1.0)


def _disk_step(dv: Mapping[str, Any]) -> ProgressStep:
    phase = str(_status(dv).get("phase") or "Pending")
    source = _source(dv)
    if phase in _WAITING:
        return _step("disk", f"Your root disk will be cloned from {source} once the VM has a node ({phase})")
    verb = "Importing" if phase in _IMPORT_PHASES else "Uploading" if phase in _UPLOAD_PHASES else "Cloning"
    raw = _status(dv).get("progress")
    fraction = _percent(raw)
    if fraction is None:
        return _step("disk", f"{verb} your root disk from {source} ({phase})")
    start = VM_PHASE_PERCENT["disk"]
    percent = start + round(fraction * (_DISK_END - start))
    return _step("disk", f"{verb} your root disk from {source}: {raw}", percent)


def build_vm_progress(
    *,
    data_volume: Mapping[str, Any] | None,
    vm: Mapping[str, Any] | None,
    vmi: Mapping[str, Any] | None,
    launcher_pod: Mapping[str, Any] | None,
    events: Sequence[Mapping[str, Any]],
) -> ProgressStep:
    """Where a VM start is now: disk → scheduling → booting → agent → ready (percent grows)."""
    phase = _status(vmi).get("phase")
    if vmi is not None and _condition_true(vmi, "Ready"):
        return _step("ready", "Your VM is ready")
    if vmi is not None and _condition_true(vmi, "AgentConnected"):
        return _step("agent", "Guest agent connected; waiting for your workspace to answer")
    if vmi is not None and phase in _ON_NODE:
        node = _status(vmi).get("nodeName")
        return _step("booting", f"Booting your VM on {node}" if node else "Booting your VM")
    failed = _latest(_events_for(events, launcher_pod, "Pod"), frozenset({"FailedScheduling"}))
    if failed is not None and _CLAIM_WAIT not in _message(failed):
        return _step("scheduling", f"Waiting for a node: {_message(failed)}")
    if data_volume is not None and _status(data_volume).get("phase") != "Succeeded":
        return _disk_step(data_volume)
    if vmi is not None or launcher_pod is not None:
        return _step("scheduling", "Waiting for a node")
    if data_volume is not None:
        return _step("disk", "Root disk ready", _DISK_END)
    return _step("disk", "Preparing your root disk")


# -- failures ------------------------------------------------------------------------------------------


def _disk_failure(dv: Mapping[str, Any] | None, events: Sequence[Mapping[str, Any]]) -> SpawnFailure | None:
    if dv is None or _status(dv).get("phase") != "Failed":
        return None
    message = _condition_message(dv, ("Running", "Ready", "Bound"))
    if not message:
        warning = next((e for e in reversed(events) if e.get("type") == "Warning"), None)
        message = _message(warning) if warning is not None else "no reason given"
    return _failure("disk", f"Your root disk {_name(dv)} could not be created from {_source(dv)}: {message}")


def _vmi_failure(vmi: Mapping[str, Any] | None, events: Sequence[Mapping[str, Any]]) -> SpawnFailure | None:
    if vmi is None or _status(vmi).get("phase") != "Failed":
        return None
    conditions = [c for c in _status(vmi).get("conditions") or [] if c.get("status") != "True"]
    message = next((" ".join(str(c["message"]).split()) for c in conditions if c.get("message")), "")
    if not message:
        warning = next((e for e in reversed(events) if e.get("type") == "Warning"), None)
        message = _message(warning) if warning is not None else "no reason given"
    return _failure("vm", f"Your VM {_name(vmi)} failed: {message}")


def _vm_status_failure(vm: Mapping[str, Any] | None) -> SpawnFailure | None:
    status = str(_status(vm).get("printableStatus") or "")
    reason = _BAD_VM_STATUS.get(status)
    if reason is None:
        return None
    detail = _condition_message(vm, ("Failure", "Ready"))
    suffix = f": {detail}" if detail else ""
    return _failure(reason, f"Your VM {_name(vm)} cannot start ({status}){suffix}")


def decide_vm_failure(
    *,
    data_volume: Mapping[str, Any] | None,
    vm: Mapping[str, Any] | None,
    vmi: Mapping[str, Any] | None,
    launcher_pod: Mapping[str, Any] | None,
    events: Sequence[Mapping[str, Any]],
    elapsed_s: float,
    unschedulable_after_s: float,
) -> SpawnFailure | None:
    """Whether a VM start has failed for a reason the user should see, or None while it may succeed.

    A failed clone, a failed VMI, a VM KubeVirt reports as failing and a launcher image that cannot
    be pulled are final at once; an unschedulable launcher pod only after ``unschedulable_after_s``
    (the scheduler retries, and a GPU may free up).
    """
    launcher_events = _events_for(events, launcher_pod, "Pod")
    return (
        _image_failure(launcher_pod)
        or _disk_failure(data_volume, _events_for(events, data_volume, "DataVolume"))
        or _vmi_failure(vmi, _events_for(events, vmi, "VirtualMachineInstance"))
        or _vm_status_failure(vm)
        or (_unschedulable(launcher_pod, launcher_events) if elapsed_s >= unschedulable_after_s else None)
    )
