"""The workspace state machine (seed 000 §10), derived from what the cluster says.

Pure; time is a parameter. Kubernetes is the database (ARCHITECTURE.md principle 1): a workspace's state
is never stored, it is read off its disk claim, the root disk's DataVolume, and its pod or
VirtualMachine/VirtualMachineInstance each time it is asked for::

    Requested → ProvisioningDisk → Stopped → Starting → Running → Stopping → Stopped → Retained → DeletingDisk

plus ``Degraded`` (reachable from, and left to, any state) when something needs a person.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, get_args

from gpuworkspace_spawner.manifests.names import ANN_RETAIN_UNTIL, DISK_RETAINED, LABEL_DISK_STATE
from gpuworkspace_spawner.manifests.pvc import parse_time

__all__ = [
    "ALLOWED_TRANSITIONS",
    "STATES",
    "Runtime",
    "State",
    "States",
    "WorkspaceState",
    "derive_state",
    "is_allowed",
    "to_json",
]

State = Literal[
    "Requested",
    "ProvisioningDisk",
    "Stopped",
    "Starting",
    "Running",
    "Stopping",
    "Retained",
    "DeletingDisk",
    "Degraded",
]
States = State  # the name the design brief uses
Runtime = Literal["container", "vm"]
STATES: tuple[State, ...] = get_args(State)

_WAITING_FOR_CONSUMER = frozenset({"WaitForFirstConsumer", "PendingPopulation"})
_FINISHED = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class WorkspaceState:
    state: State
    reason: str
    detail: dict[str, Any] = field(default_factory=dict, compare=False)


# The seed's chain, then the edges real clusters take: a start may provision the disk on the way
# (WaitForFirstConsumer), may be cancelled or fail, a pod may vanish under a running workspace, a
# retained disk is re-adopted by a start of the same server, and provisioning may be abandoned.
_CHAIN: tuple[tuple[State, State], ...] = (
    ("Requested", "ProvisioningDisk"),
    ("ProvisioningDisk", "Stopped"),
    ("Stopped", "Starting"),
    ("Starting", "Running"),
    ("Running", "Stopping"),
    ("Stopping", "Stopped"),
    ("Stopped", "Retained"),
    ("Retained", "DeletingDisk"),
)
_OBSERVED: tuple[tuple[State, State], ...] = (
    ("Requested", "Stopped"),  # the disk was bound before anyone looked
    ("Requested", "Starting"),
    ("ProvisioningDisk", "Starting"),  # WaitForFirstConsumer: the start provisions the disk
    ("Starting", "ProvisioningDisk"),
    ("Starting", "Stopping"),  # a start cancelled or failed
    ("Starting", "Stopped"),
    ("Running", "Stopped"),  # the pod vanished (deleted, node lost)
    ("Running", "Starting"),  # readiness lost, or a VMI restarted by runStrategy Always
    ("Stopping", "Retained"),  # delete while compute is still going away
    ("ProvisioningDisk", "Retained"),
    ("Retained", "Stopped"),  # a start of the same server adopts the retained disk
    ("Retained", "Starting"),
    ("Retained", "ProvisioningDisk"),
    ("DeletingDisk", "Requested"),  # the disk is gone; a new start begins from nothing
)
ALLOWED_TRANSITIONS: frozenset[tuple[State, State]] = frozenset(
    [
        *_CHAIN,
        *_OBSERVED,
        *((s, "Degraded") for s in STATES if s != "Degraded"),
        *(("Degraded", s) for s in STATES if s != "Degraded"),
    ]
)


def is_allowed(a: State, b: State) -> bool:
    """Whether the machine may go from ``a`` to ``b`` (staying put is always allowed)."""
    return a == b or (a, b) in ALLOWED_TRANSITIONS


def to_json(state: WorkspaceState) -> dict[str, Any]:
    """The state as the hub API and audit records show it (stable keys)."""
    return {"state": state.state, "reason": state.reason, "detail": dict(state.detail)}


# -- reading the raw objects ---------------------------------------------------------------------


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _name(obj: Mapping[str, Any] | None) -> str:
    return str(_meta(obj).get("name", "?"))


def _phase(obj: Mapping[str, Any] | None) -> str | None:
    phase = ((obj or {}).get("status") or {}).get("phase")
    return str(phase) if phase else None


def _condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any]:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return {}


def _true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    return _condition(obj, kind).get("status") == "True"


def _dv_message(dv: Mapping[str, Any]) -> str:
    for kind in ("Running", "Ready", "Bound"):
        message = _condition(dv, kind).get("message")
        if message:
            return " ".join(str(message).split())
    return "no message"


def _crash_looping(pod: Mapping[str, Any]) -> str | None:
    status = pod.get("status") or {}
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") == "CrashLoopBackOff":
            return str(cs.get("name", "?"))
    return None


def _run_strategy(vm: Mapping[str, Any]) -> str:
    spec = vm.get("spec") or {}
    if spec.get("runStrategy"):
        return str(spec["runStrategy"])
    if "running" in spec:  # the older boolean field
        return "Always" if spec["running"] else "Halted"
    return "Halted"


# -- the derivation ----------------------------------------------------------------------------------


def _degraded(reason: str, cause: str, **detail: Any) -> WorkspaceState:
    return WorkspaceState("Degraded", reason, {"cause": cause, **detail})


def _disk_gone(disk: Mapping[str, Any] | None, now: datetime) -> WorkspaceState | None:
    """DeletingDisk or Retained: the disk's own lifecycle outranks whatever compute is left."""
    if disk is None:
        return None
    meta = _meta(disk)
    if meta.get("deletionTimestamp"):
        return WorkspaceState("DeletingDisk", f"disk {_name(disk)} is being deleted")
    if (meta.get("labels") or {}).get(LABEL_DISK_STATE) != DISK_RETAINED:
        return None
    raw = (meta.get("annotations") or {}).get(ANN_RETAIN_UNTIL)
    until = parse_time(raw)
    detail: dict[str, Any] = {"retainUntil": raw, "reclaimable": until is not None and now >= until}
    when = f"until {raw}" if until is not None else f"with no valid {ANN_RETAIN_UNTIL}; kept"
    return WorkspaceState("Retained", f"disk {_name(disk)} is retained {when}", detail)


def _degraded_state(
    disk: Mapping[str, Any] | None,
    dv: Mapping[str, Any] | None,
    pod: Mapping[str, Any] | None,
    vmi: Mapping[str, Any] | None,
    extra_compute: int,
) -> WorkspaceState | None:
    if dv is not None and _phase(dv) == "Failed":
        return _degraded(f"root disk DataVolume {_name(dv)} failed: {_dv_message(dv)}", "DataVolumeFailed")
    if disk is not None and _phase(disk) == "Lost":
        return _degraded(f"disk {_name(disk)} is Lost: its volume is gone", "ClaimLost")
    if extra_compute > 0:
        return _degraded(
            f"{extra_compute} more active pod/VMI of this workspace; only one may run",
            "OneActive",
            extra=extra_compute,
        )
    if pod is not None and _phase(pod) == "Failed":
        return _degraded(f"pod {_name(pod)} failed", "PodFailed")
    crashing = _crash_looping(pod) if pod is not None else None
    if crashing is not None:
        return _degraded(
            f"container {crashing} of pod {_name(pod)} is in CrashLoopBackOff", "CrashLoopBackOff"
        )
    if vmi is not None and _phase(vmi) == "Failed":
        return _degraded(f"VMI {_name(vmi)} failed", "VMIFailed")
    return None


def _provisioning(
    disk: Mapping[str, Any] | None, dv: Mapping[str, Any] | None, compute_wanted: bool
) -> WorkspaceState | None:
    dv_phase = _phase(dv) if dv is not None else None
    if dv is not None and dv_phase != "Succeeded":
        detail = {
            "phase": dv_phase or "Pending",
            "progress": (dv.get("status") or {}).get("progress") or "N/A",
        }
        if dv_phase in _WAITING_FOR_CONSUMER and not compute_wanted:
            return WorkspaceState(
                "Stopped",
                f"root disk {_name(dv)} will be provisioned at the first start ({dv_phase})",
                detail,
            )
        return WorkspaceState("ProvisioningDisk", f"root disk {_name(dv)} is {detail['phase']}", detail)
    if disk is not None and _phase(disk) in (None, "Pending") and dv is None:
        return WorkspaceState("ProvisioningDisk", f"disk {_name(disk)} is Pending", {"phase": "Pending"})
    return None


def _container(pod: Mapping[str, Any] | None) -> WorkspaceState:
    if pod is None:
        return WorkspaceState("Stopped", "no workspace pod; the disk is kept")
    name = _name(pod)
    if _meta(pod).get("deletionTimestamp"):
        return WorkspaceState("Stopping", f"pod {name} is terminating")
    if _phase(pod) == "Succeeded":
        return WorkspaceState("Stopped", f"pod {name} has exited")
    if _true(pod, "Ready"):
        return WorkspaceState(
            "Running", f"pod {name} is ready", {"node": (pod.get("spec") or {}).get("nodeName")}
        )
    return WorkspaceState("Starting", f"pod {name} is {_phase(pod) or 'Pending'} and not ready yet")


def _vm(vm: Mapping[str, Any] | None, vmi: Mapping[str, Any] | None) -> WorkspaceState:
    if vmi is not None and (_meta(vmi).get("deletionTimestamp") or _meta(vm).get("deletionTimestamp")):
        return WorkspaceState("Stopping", f"VMI {_name(vmi)} is shutting down")
    if vm is None:
        if vmi is not None:
            return WorkspaceState("Stopping", f"VMI {_name(vmi)} outlives its VM and is going away")
        return WorkspaceState("Stopped", "no VirtualMachine; the next start recreates it on the same disk")
    strategy = _run_strategy(vm)
    detail: dict[str, Any] = {"runStrategy": strategy}
    if vmi is None:
        if strategy == "Always":
            return WorkspaceState("Starting", f"VM {_name(vm)} is starting; no VMI yet", detail)
        return WorkspaceState("Stopped", f"VM {_name(vm)} is {strategy} and has no VMI", detail)
    phase = _phase(vmi) or "Pending"
    detail = {**detail, "phase": phase, "node": (vmi.get("status") or {}).get("nodeName")}
    if strategy == "Halted":
        return WorkspaceState("Stopping", f"VM {_name(vm)} is Halted; VMI {_name(vmi)} is {phase}", detail)
    if _true(vmi, "Ready") and phase not in _FINISHED:
        return WorkspaceState("Running", f"VMI {_name(vmi)} is ready", detail)
    return WorkspaceState("Starting", f"VMI {_name(vmi)} is {phase} and not ready yet", detail)


def derive_state(
    *,
    runtime: Runtime,
    disk: Mapping[str, Any] | None,
    data_volume: Mapping[str, Any] | None,
    pod: Mapping[str, Any] | None,
    vm: Mapping[str, Any] | None,
    vmi: Mapping[str, Any] | None,
    extra_compute: int = 0,
    now: datetime,
) -> WorkspaceState:
    """The workspace's state from its objects: ``disk`` is the home (container) or root-disk (vm) claim.

    ``extra_compute`` counts other active pods/VMIs of the same workspace (the one-active invariant).
    Objects of the other runtime are ignored.
    """
    if runtime == "container":
        vm = vmi = data_volume = None
    else:
        pod = None
    compute = pod is not None or vm is not None or vmi is not None
    wanted = pod is not None or vmi is not None or (vm is not None and _run_strategy(vm) == "Always")
    state = _disk_gone(disk, now) or _degraded_state(disk, data_volume, pod, vmi, extra_compute)
    if state is not None:
        return state
    if disk is None and data_volume is None:
        if compute:
            return _degraded("the workspace's compute exists but its disk does not", "DiskMissing")
        return WorkspaceState("Requested", "no disk yet; the first start creates it")
    state = _provisioning(disk, data_volume, wanted)
    if state is not None:
        return state
    return _container(pod) if runtime == "container" else _vm(vm, vmi)
