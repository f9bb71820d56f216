"""A job's state in plain words, from its Job and Kueue's Workload (pure).

``queued`` (with Kueue's reason: the Workload's QuotaReserved condition message, as Kueue writes it,
e.g. ``couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in
flavor h100, 1 more needed``), ``running``, ``succeeded``, ``failed``, or ``cancelling``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..manifests.names import LABEL_JOB
from .manifests import (
    ANN_NOTEBOOK,
    ANN_OUTPUT,
    ANN_SCRIPT,
    ANN_SUBMITTED_BY,
    PRIORITY_LABEL,
    QUEUE_LABEL,
)

JobPhase = Literal["queued", "running", "succeeded", "failed", "cancelling"]


@dataclass(frozen=True)
class JobState:
    phase: JobPhase
    reason: str  # for people


def _condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def _true(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    cond = _condition(obj, kind)
    return cond if cond is not None and cond.get("status") == "True" else None


def _queued_reason(job: Mapping[str, Any], workload: Mapping[str, Any] | None) -> str:
    queue = ((job.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL, "?")
    if workload is None:
        return f"waiting for Kueue to take it into queue {queue}"
    if _condition(workload, "Evicted") is not None and _true(workload, "Evicted"):
        cond = _true(workload, "Evicted") or {}
        return f"put back in queue {queue}: {cond.get('message', 'evicted')}"
    reserved = _condition(workload, "QuotaReserved")
    if reserved is not None and reserved.get("status") == "False" and reserved.get("message"):
        if reserved.get("reason") == "Inadmissible":
            return f"queue {queue} cannot admit it: {reserved['message']}"
        return f"waiting for quota in queue {queue}: {reserved['message']}"
    if _true(workload, "QuotaReserved") and not _true(workload, "Admitted"):
        return f"quota reserved in queue {queue}; waiting for admission checks"
    return f"waiting in queue {queue}"


def decide_state(job: Mapping[str, Any], workload: Mapping[str, Any] | None) -> JobState:
    """The job's state; ``workload``: Kueue's Workload of the Job (None: not created yet)."""
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        return JobState("cancelling", "cancelled; its pods are being removed")
    for kind, phase in (("Complete", "succeeded"), ("Failed", "failed")):
        cond = _true(job, kind)
        if cond is not None:
            words = cond.get("message") or cond.get("reason") or kind
            return JobState(phase, str(words))  # type: ignore[arg-type]
    status, spec = job.get("status") or {}, job.get("spec") or {}
    if spec.get("suspend", False):
        return JobState("queued", _queued_reason(job, workload))
    if status.get("active"):
        ready = status.get("ready") or 0
        return JobState("running", "running" if ready else "admitted; its pod is starting")
    return JobState("running", "admitted; its pod is being created")


def job_view(job: Mapping[str, Any], workload: Mapping[str, Any] | None) -> dict[str, Any]:
    """The API's answer for one job."""
    meta = job.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    state = decide_state(job, workload)
    status = job.get("status") or {}
    return {
        "name": meta.get("name"),
        "user": annotations.get("gpuworkspace.dev/username"),
        "server": annotations.get("gpuworkspace.dev/servername", ""),
        "profile": annotations.get("gpuworkspace.dev/profile"),
        "notebook": annotations.get(ANN_NOTEBOOK),
        "script": annotations.get(ANN_SCRIPT),
        "image": annotations.get("gpuworkspace.dev/image"),
        "queue": labels.get(QUEUE_LABEL),
        "priorityClass": labels.get(PRIORITY_LABEL),
        "output": annotations.get(ANN_OUTPUT),
        "submittedBy": annotations.get(ANN_SUBMITTED_BY),
        "created": meta.get("creationTimestamp"),
        "started": status.get("startTime"),
        "finished": status.get("completionTime"),
        "state": state.phase,
        "reason": state.reason,
        "job": labels.get(LABEL_JOB, meta.get("name")),
    }
