"""What a container start is doing, and whether it has failed, from what the cluster says.

Pure. Inputs are raw camelCase API dicts as KubeSpawner's reflectors hold them: the home claim, the pod and
core/v1 Events (``involvedObject``, ``reason``, ``message``, ``lastTimestamp``/``eventTime``). Users see
which phase is slow and why (ARCHITECTURE.md principle 5): the scheduler's and the kubelet's own words are
shown verbatim rather than paraphrased.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from gpuworkspace_spawner.lifecycle.invariants import ONE_ACTIVE, decide_extra_pods
from gpuworkspace_spawner.manifests.names import LABEL_GPU_MODE
from gpuworkspace_spawner.manifests.pvc import parse_time

__all__ = [
    "ONE_ACTIVE",
    "PHASE_PERCENT",
    "FailureReason",
    "ProgressStep",
    "SpawnFailure",
    "build_progress",
    "classify_api_error",
    "decide_extra_pods",
    "decide_spawn_failure",
]

Phase = Literal["disk", "scheduling", "attach", "image", "starting", "ready"]
FailureReason = Literal["unschedulable", "quota", "disk", "image", "timeout"]

PHASE_PERCENT: dict[str, int] = {
    "disk": 10,
    "scheduling": 25,
    "attach": 40,
    "image": 55,
    "starting": 75,
    "ready": 95,
}

_ATTACH_REASONS = frozenset({"FailedAttachVolume", "FailedMount", "SuccessfulAttachVolume"})
_ATTACH_FAILED = frozenset({"FailedAttachVolume", "FailedMount"})
_IMAGE_REASONS = frozenset({"Pulling", "Pulled"})
_START_REASONS = frozenset({"Created", "Started"})
_PAST_ATTACH = _IMAGE_REASONS | _START_REASONS
_IMAGE_FAILED = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
_CLAIM_WAIT = "unbound immediate PersistentVolumeClaims"
_QUOTA = "exceeded quota"
_EPOCH = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class ProgressStep:
    phase: Phase
    percent: int
    message: str


@dataclass(frozen=True)
class SpawnFailure:
    reason: FailureReason
    message: str


# -- reading the raw objects ------------------------------------------------------------------------


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _events_for(
    events: Sequence[Mapping[str, Any]], obj: Mapping[str, Any] | None, kind: str
) -> list[Mapping[str, Any]]:
    """The events about ``obj``, oldest first; an older object of the same name (by uid) is not ``obj``."""
    if obj is None:
        return []
    meta = _meta(obj)
    mine = []
    for event in events:
        about = event.get("involvedObject") or {}
        if about.get("kind") != kind or about.get("name") != meta.get("name"):
            continue
        if about.get("uid") and meta.get("uid") and about["uid"] != meta["uid"]:
            continue
        mine.append(event)
    return sorted(mine, key=_event_time)


def _event_time(event: Mapping[str, Any]) -> datetime:
    series = event.get("series") or {}
    for raw in (series.get("lastObservedTime"), event.get("lastTimestamp"), event.get("eventTime")):
        parsed = parse_time(raw)
        if parsed is not None:
            return parsed
    return (
        parse_time(event.get("firstTimestamp")) or parse_time(_meta(event).get("creationTimestamp")) or _EPOCH
    )


def _latest(events: Sequence[Mapping[str, Any]], reasons: frozenset[str]) -> Mapping[str, Any] | None:
    return next((e for e in reversed(events) if e.get("reason") in reasons), None)


def _message(event: Mapping[str, Any]) -> str:
    return " ".join(str(event.get("message") or "").split())


def is_ready(obj: Mapping[str, Any]) -> bool:
    """The object's ``Ready`` condition is True (a Pod, a Node or a VMI)."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


_is_ready = is_ready


def containers_running(pod: Mapping[str, Any] | None) -> bool:
    """Every container of the pod runs (phase Running, a pod IP, each status ``running``) and the pod is not
    being deleted: its server may be listening now, whatever its readiness says."""
    if pod is None or _meta(pod).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    return (
        status.get("phase") == "Running"
        and bool(status.get("podIP"))
        and bool(statuses)
        and all("running" in (c.get("state") or {}) for c in statuses)
    )


def _container_statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _claim_phase(pvc: Mapping[str, Any] | None) -> str | None:
    return None if pvc is None else (pvc.get("status") or {}).get("phase")


# -- progress ----------------------------------------------------------------------------------------


def _step(phase: Phase, message: str, bonus: int = 0) -> ProgressStep:
    return ProgressStep(phase, PHASE_PERCENT[phase] + bonus, message)


def _disk_step(pvc: Mapping[str, Any]) -> ProgressStep:
    spec = pvc.get("spec") or {}
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "")
    where = f" on {spec['storageClassName']}" if spec.get("storageClassName") else ""
    detail = f" ({size}{where})" if size else ""
    return _step("disk", f"Provisioning your home disk{detail}")


def build_progress(
    pvc: Mapping[str, Any] | None, pod: Mapping[str, Any] | None, events: Sequence[Mapping[str, Any]]
) -> ProgressStep:
    """Where a start is now: disk → scheduling → attach → image → starting → ready (percent grows)."""
    pod_events = _events_for(events, pod, "Pod")
    if pod is not None and _is_ready(pod):
        return _step("ready", "Your workspace is ready")
    if pod is not None and (pod.get("spec") or {}).get("nodeName"):
        return _on_node(pod, pod_events)
    failed = _latest(pod_events, frozenset({"FailedScheduling"}))
    if failed is not None and _CLAIM_WAIT not in _message(failed):
        return _step("scheduling", f"Waiting for a node: {_message(failed)}")
    if pvc is not None and _claim_phase(pvc) != "Bound":
        return _disk_step(pvc)
    if pod is None:
        return _step("disk", "Home disk ready" if pvc is not None else "Preparing your home disk", 5)
    return _step("scheduling", "Waiting for a node")


def _on_node(pod: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> ProgressStep:
    node = pod["spec"]["nodeName"]
    running = any("running" in (s.get("state") or {}) for s in _container_statuses(pod))
    if running or _latest(events, _START_REASONS) is not None:
        return _step("starting", f"Starting your workspace on {node}")
    image = _latest(events, _IMAGE_REASONS)
    if image is not None:
        return _image_step(image)
    attach = _latest(events, _ATTACH_REASONS)
    if attach is None:
        return _step("attach", f"Scheduled on {node}; attaching your home disk")
    if attach.get("reason") == "SuccessfulAttachVolume":
        return _step("attach", f"Home disk attached to {node}", 5)
    verb = (
        "Attaching your home disk" if attach.get("reason") == "FailedAttachVolume" else "Mounting your disks"
    )
    return _step("attach", f"{verb}: {_message(attach)}")


_IMAGE = re.compile(r'image "([^"]+)"')
_DURATION = re.compile(r"\bin ([0-9][0-9.hmsµun]*)")
_SIZE = re.compile(r"Image size: (\d+) bytes")


def _human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000:  # noqa: PLR2004 -- decimal units, as registries and the kubelet report them
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def _image_step(event: Mapping[str, Any]) -> ProgressStep:
    message = _message(event)
    found = _IMAGE.search(message)
    image = found.group(1) if found else "the workspace image"
    if event.get("reason") == "Pulling":
        return _step("image", f"Pulling image {image}")
    if "already present" in message:
        return _step("image", f"Image {image} already on the node", 10)
    duration, size = _DURATION.search(message), _SIZE.search(message)
    details = [_human_bytes(int(size.group(1)))] if size else []
    details += [f"in {duration.group(1)}"] if duration else []
    return _step("image", f"Pulled image {image}" + (f" ({' '.join(details)})" if details else ""), 10)


# -- failures ----------------------------------------------------------------------------------------


def classify_api_error(status: int, message: str) -> SpawnFailure | None:
    """An API error at create time as a user-facing failure: only a quota refusal (403) is one."""
    if status == 403 and _QUOTA in message.lower():  # noqa: PLR2004 -- HTTP Forbidden
        return SpawnFailure(
            "quota", f"Your namespace's resource quota does not allow this workspace: {message}"
        )
    return None


def decide_spawn_failure(
    pvc: Mapping[str, Any] | None,
    pod: Mapping[str, Any] | None,
    events: Sequence[Mapping[str, Any]],
    *,
    elapsed_s: float,
    unschedulable_after_s: float,
    attach_failure_after_s: float,
    timeout_after_s: float | None = None,
) -> SpawnFailure | None:
    """Whether a start has failed for a reason the user should see, or None while it may still succeed.

    Image and provisioning failures are final at once; attach/mount failures and an unschedulable pod only
    after they persist for their grace period (the scheduler and the attach-detach controller retry).
    ``timeout_after_s`` (optional) turns a start still going after that long into a ``timeout`` that
    names the phase it is stuck in.
    """
    pod_events = _events_for(events, pod, "Pod")
    pvc_events = _events_for(events, pvc, "PersistentVolumeClaim")
    failure = (
        _image_failure(pod)
        or _quota_failure([*pvc_events, *pod_events])
        or _disk_failure(pvc, pvc_events)
        or (_attach_failure(pod, pod_events) if elapsed_s >= attach_failure_after_s else None)
        or (_unschedulable(pod, pod_events) if elapsed_s >= unschedulable_after_s else None)
    )
    if failure is None and timeout_after_s is not None and elapsed_s >= timeout_after_s:
        step = build_progress(pvc, pod, events)
        failure = SpawnFailure(
            "timeout", f"The workspace did not start within {elapsed_s:.0f}s; last step: {step.message}"
        )
    return failure


def _image_failure(pod: Mapping[str, Any] | None) -> SpawnFailure | None:
    for status in _container_statuses(pod or {}):
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _IMAGE_FAILED:
            image = status.get("image") or "the workspace image"
            detail = " ".join(str(waiting.get("message") or "").split())
            return SpawnFailure(
                "image", f"The image {image} could not be pulled ({waiting['reason']}): {detail}".rstrip(": ")
            )
    return None


def _quota_failure(events: Sequence[Mapping[str, Any]]) -> SpawnFailure | None:
    for event in reversed(events):
        if _QUOTA in _message(event).lower():
            return SpawnFailure("quota", f"A resource quota does not allow this workspace: {_message(event)}")
    return None


def _disk_failure(pvc: Mapping[str, Any] | None, events: Sequence[Mapping[str, Any]]) -> SpawnFailure | None:
    phase = _claim_phase(pvc)
    name = _meta(pvc).get("name", "?")
    if phase == "Lost":
        return SpawnFailure(
            "disk", f"Your home disk claim {name} is Lost: its volume is gone; ask an administrator"
        )
    failed = _latest(events, frozenset({"ProvisioningFailed"}))
    if failed is not None and phase != "Bound":
        return SpawnFailure("disk", f"Your home disk {name} could not be provisioned: {_message(failed)}")
    return None


def _attach_failure(
    pod: Mapping[str, Any] | None, events: Sequence[Mapping[str, Any]]
) -> SpawnFailure | None:
    """The latest attach/mount event is a failure and nothing has happened on the node since."""
    positions = [i for i, e in enumerate(events) if e.get("reason") in _ATTACH_REASONS]
    if pod is None or not positions or events[positions[-1]].get("reason") not in _ATTACH_FAILED:
        return None
    attach = events[positions[-1]]
    if any(e.get("reason") in _PAST_ATTACH for e in events[positions[-1] + 1 :]):
        return None
    message = _message(attach)
    hint = ""
    if "Multi-Attach" in message:
        hint = (
            " (the disk is still attached to another node; the old workspace must stop or its node be fenced)"
        )
    return SpawnFailure("disk", f"Your disks could not be attached: {message}{hint}")


def _unschedulable(pod: Mapping[str, Any] | None, events: Sequence[Mapping[str, Any]]) -> SpawnFailure | None:
    if pod is None or (pod.get("spec") or {}).get("nodeName"):
        return None
    failed = _latest(events, frozenset({"FailedScheduling"}))
    if failed is None:
        return None
    message = _message(failed)
    found = re.search(r"Insufficient (nvidia\.com/[A-Za-z0-9._-]*[A-Za-z0-9])", message)
    if found:
        mode = (_meta(pod).get("labels") or {}).get(LABEL_GPU_MODE) or found.group(1)
        message += f"; the GPU mode {mode} has no free capacity"
    return SpawnFailure("unschedulable", message)
