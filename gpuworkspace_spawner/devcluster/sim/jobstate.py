"""The Job controller's decisions, pure: from a Job, its pods and the time, what to write.

Follows ``pkg/controller/job/job_controller.go`` (Kubernetes 1.31+) ``syncJob``:

- terminal pods still carrying the ``batch.kubernetes.io/job-tracking`` finalizer are counted into
  ``status.succeeded``/``status.failed`` and their finalizer removed (``trackJobStatusAndRemoveFinalizers``;
  the intermediate ``status.uncountedTerminatedPods`` step is not shown: one reconcile writes both);
  a pod deleted by someone else before it finished counts as failed (podReplacementPolicy
  TerminatingOrFailed); pods the controller itself deleted (suspend, deadline, excess) are not counted;
- ``pastBackoffLimitOnFailure`` / ``failed > backoffLimit`` -> FailureTarget then Failed, reason
  BackoffLimitExceeded, "Job has reached the specified backoff limit"; ``pastActiveDeadline`` ->
  DeadlineExceeded, "Job was active longer than specified deadline"; active pods are deleted first and
  the terminal condition (Failed, or Complete after SuccessCriteriaMet with reason CompletionsReached)
  is added once no pod is terminating, as 1.31+ does (``JobManagedByLabel`` aside);
- ``suspend``: active pods deleted, condition Suspended (JobSuspended, "Job suspended"); on resume the
  condition turns False (JobResumed, "Job resumed") and ``status.startTime`` is reset, so
  activeDeadlineSeconds counts from the resume;
- ``manageJob``: NonIndexed, ``min(parallelism, completions - succeeded)`` active pods (work-queue Jobs
  without completions: ``parallelism`` until one succeeds); new pods after failures wait the pod-failure
  backoff (``getRemainingTime``: 10s doubling per consecutive failure, capped at 6 minutes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..jobspec import TRACKING_FINALIZER, condition

Obj = dict[str, Any]
BACKOFF_BASE_S = 10.0
BACKOFF_MAX_S = 360.0
BACKOFF_MESSAGE = "Job has reached the specified backoff limit"
DEADLINE_MESSAGE = "Job was active longer than specified deadline"
COMPLETE_MESSAGE = "Reached expected number of succeeded pods"


@dataclass
class JobPlan:
    """What one sync writes: pod finalizers to drop, pods to delete/create, the new status, Events."""

    release: list[str] = field(default_factory=list)  # pod names whose tracking finalizer goes
    delete: list[str] = field(default_factory=list)  # active pods to delete
    create: int = 0
    status: Obj = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    requeue_s: float | None = None
    finished: bool = False


def _terminal(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase", "")) if _phase_final(pod) else ""


def _phase_final(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _ready(pod: Obj) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _restarts(pod: Obj) -> int:
    return sum(
        int(cs.get("restartCount") or 0) for cs in (pod.get("status") or {}).get("containerStatuses") or []
    )


def _cond(type_: str, reason: str, message: str, now: str, status: str = "True") -> Obj:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }


def _set_cond(conds: list[Obj], new: Obj) -> list[Obj]:
    """Replace the condition of the same type (keeping lastTransitionTime if the status is unchanged)."""
    out = []
    for c in conds:
        if c.get("type") == new["type"]:
            if c.get("status") == new["status"] and c.get("reason") == new["reason"]:
                return conds
            continue
        out.append(c)
    return [*out, new]


@dataclass
class _Counts:
    succeeded: int
    failed: int
    active: list[Obj] = field(default_factory=list)
    terminating: int = 0
    ready: int = 0


def _count(old: Obj, pods: list[Obj], deleted_by_us: set[str], release: list[str]) -> _Counts:
    """Fold finished (or deleted) pods that still carry the tracking finalizer into the counts."""
    counts = _Counts(int(old.get("succeeded") or 0), int(old.get("failed") or 0))
    for pod in pods:
        meta = pod["metadata"]
        tracked = TRACKING_FINALIZER in (meta.get("finalizers") or [])
        phase = _terminal(pod)
        if not phase and not meta.get("deletionTimestamp"):
            counts.active.append(pod)
            counts.ready += _ready(pod)
            continue
        counts.terminating += not phase
        if tracked:
            release.append(meta["name"])
            if phase == "Succeeded":
                counts.succeeded += 1
            elif meta.get("uid") not in deleted_by_us:
                counts.failed += 1
    return counts


def _suspension(job: Obj, plan: JobPlan, conds: list[Obj], now: str) -> tuple[list[Obj], bool]:
    """Suspended/JobResumed conditions and events; True when the Job was just resumed."""
    suspended = bool((job.get("spec") or {}).get("suspend"))
    was_suspended = condition(job, "Suspended") is not None
    if suspended and not was_suspended:
        plan.events.append(("Normal", "Suspended", "Job suspended"))
        return _set_cond(conds, _cond("Suspended", "JobSuspended", "Job suspended", now)), False
    if not suspended and was_suspended:
        plan.events.append(("Normal", "Resumed", "Job resumed"))
        return _set_cond(conds, _cond("Suspended", "JobResumed", "Job resumed", now, "False")), True
    return conds, False


def plan_job(
    job: Obj,
    pods: list[Obj],
    now: str,
    now_s: float,
    start_s: float | None,
    deleted_by_us: set[str],
    last_failure_s: float | None = None,
) -> JobPlan:
    """One ``syncJob`` step. ``now`` is RFC3339, ``now_s`` epoch seconds, ``start_s`` the epoch seconds of
    ``status.startTime``; ``deleted_by_us`` the uids of pods this controller deleted; ``last_failure_s``
    when the newest failed pod finished (the backoff counts from it)."""
    spec, old = job.get("spec") or {}, job.get("status") or {}
    plan = JobPlan()
    status: Obj = dict(old)
    counts = _count(old, pods, deleted_by_us, plan.release)
    status.update(
        succeeded=counts.succeeded, failed=counts.failed, terminating=counts.terminating, ready=counts.ready
    )
    if condition(job, "Complete") or condition(job, "Failed"):
        plan.finished = True
        plan.delete = [p["metadata"]["name"] for p in counts.active]
        plan.status = {**status, "active": 0}
        return plan
    suspended = bool(spec.get("suspend"))
    conds, resumed = _suspension(job, plan, list(old.get("conditions") or []), now)
    if resumed or (not suspended and not status.get("startTime")):
        status["startTime"], start_s = now, now_s  # reset on resume: the deadline counts from here
    target = condition(job, "FailureTarget") or condition(job, "SuccessCriteriaMet")
    if not suspended and target is None:
        target = _decide_end(spec, counts, now_s, start_s, now)
        if target is not None:
            conds = _set_cond(conds, target)
        elif spec.get("activeDeadlineSeconds") is not None and start_s is not None:
            plan.requeue_s = max(start_s + float(spec["activeDeadlineSeconds"]) - now_s, 0.0) + 0.05
    if suspended or target is not None:
        plan.delete = [p["metadata"]["name"] for p in counts.active]
    if target is not None and not plan.delete and counts.terminating == 0:
        conds = _finish(plan, status, conds, target, now)
    elif target is None and not suspended:
        _manage(plan, spec, counts, now_s, last_failure_s)
    active = len(counts.active) + plan.create - len(plan.delete)
    status["active"] = 0 if plan.finished else max(active, 0)
    status["conditions"] = conds or None
    plan.status = {k: v for k, v in status.items() if v is not None}
    return plan


def _finish(plan: JobPlan, status: Obj, conds: list[Obj], target: Obj, now: str) -> list[Obj]:
    """No pod left running: the terminal condition after FailureTarget / SuccessCriteriaMet."""
    plan.finished = True
    if target["type"] == "SuccessCriteriaMet":
        status["completionTime"] = now
        plan.events.append(("Normal", "Completed", "Job completed"))
        return _set_cond(conds, _cond("Complete", target["reason"], target["message"], now))
    plan.events.append(("Warning", target["reason"], target["message"]))
    return _set_cond(conds, _cond("Failed", target["reason"], target["message"], now))


def _decide_end(spec: Obj, counts: _Counts, now_s: float, start_s: float | None, now: str) -> Obj | None:
    """SuccessCriteriaMet or FailureTarget (with its reason) when the Job has reached an end."""
    completions = spec.get("completions")
    done = counts.succeeded >= int(completions) if completions is not None else counts.succeeded > 0
    if done and (completions is not None or not counts.active):
        return _cond("SuccessCriteriaMet", "CompletionsReached", COMPLETE_MESSAGE, now)
    limit = int(spec.get("backoffLimit", 6))
    on_failure = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") == "OnFailure"
    restarts = sum(_restarts(p) for p in counts.active) if on_failure else 0
    # pastBackoffLimitOnFailure: container restarts count as failures under OnFailure
    if counts.failed > limit or (on_failure and (restarts > 0 if limit == 0 else restarts >= limit)):
        return _cond("FailureTarget", "BackoffLimitExceeded", BACKOFF_MESSAGE, now)
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and start_s is not None and now_s - start_s >= float(deadline):
        return _cond("FailureTarget", "DeadlineExceeded", DEADLINE_MESSAGE, now)
    return None


def _manage(plan: JobPlan, spec: Obj, counts: _Counts, now_s: float, last_failure_s: float | None) -> None:
    """``manageJob``: create the missing pods (after the failure backoff) or delete the excess."""
    active, succeeded, failed = counts.active, counts.succeeded, counts.failed
    parallelism = int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    if completions is not None:
        want = min(parallelism, max(int(completions) - succeeded, 0))
    else:
        want = 0 if succeeded > 0 else parallelism
    if len(active) > want:
        plan.delete = [p["metadata"]["name"] for p in active[want:]]
        return
    missing = want - len(active)
    if missing <= 0:
        return
    if failed > 0 and last_failure_s is not None:
        remaining = last_failure_s + min(BACKOFF_BASE_S * 2 ** (failed - 1), BACKOFF_MAX_S) - now_s
        if remaining > 0:
            plan.requeue_s = remaining
            return
    plan.create = missing
