"""The Job controller's decisions, pure: from a Job, its pods and the time, what to write.

Follows ``pkg/controller/job/job_controller.go`` (Kubernetes 1.31+, JobPodReplacementPolicy on) ``syncJob``:

- ``getNewFinishedPods``/``isPodFailed``: terminal pods still carrying the ``batch.kubernetes.io/job-tracking``
  finalizer are counted into ``status.succeeded``/``status.failed`` and the finalizer is removed
  (``trackJobStatusAndRemoveFinalizers``; the intermediate ``status.uncountedTerminatedPods`` step is not
  shown: one reconcile writes both); a pod deleted before it finished counts as failed;
- ``failed > backoffLimit`` or ``pastBackoffLimitOnFailure`` -> FailureTarget (BackoffLimitExceeded, "Job has
  reached the specified backoff limit"), else ``pastActiveDeadline`` -> FailureTarget (DeadlineExceeded, "Job
  was active longer than specified deadline"); ``deleteActivePods`` deletes the running pods keeping their
  finalizer, so they are counted as failed; ``enactJobFinished`` adds the Failed condition (same reason)
  only when no pod is terminating any more (``delayTerminalCondition``);
- success when ``succeeded >= completions`` (or, without completions, one success) and no pod is active:
  SuccessCriteriaMet then Complete with reason CompletionsReached and ``status.completionTime``;
- ``manageJob``: suspended -> ``deleteJobPods`` (finalizer removed first: not counted; ``active`` and
  ``ready`` lose the removed pods), condition Suspended (JobSuspended, "Job suspended"), ``status.startTime``
  kept (only Kueue's Stop resets it, through the status subresource); resumed -> Suspended False
  (JobResumed, "Job resumed") and ``status.startTime`` set anew; otherwise NonIndexed ``min(parallelism, completions - succeeded)`` active pods
  (work-queue Jobs without completions: ``parallelism`` until one succeeds), excess pods deleted, new pods
  after failures only once the pod-failure backoff has passed (``getRemainingTime``: 10s doubling per
  failure, at most 6 minutes).
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
INDEX_KEY = "batch.kubernetes.io/job-completion-index"  # annotation and label on Indexed Jobs' pods


def pod_index(pod: Obj) -> int | None:
    """The pod's completion index (``getCompletionIndex``), None when it has none."""
    value = (pod["metadata"].get("annotations") or {}).get(INDEX_KEY, "")
    return int(value) if isinstance(value, str) and value.isdigit() else None


def index_ranges(indexes: set[int]) -> str:
    """``status.completedIndexes``: "1,3-5,7" (ranges of three or more, as ``orderedIntervals.String``)."""
    out: list[str] = []
    ordered = sorted(indexes)
    start = 0
    for i in range(1, len(ordered) + 1):
        if i == len(ordered) or ordered[i] != ordered[i - 1] + 1:
            first, last = ordered[start], ordered[i - 1]
            out.append(
                str(first) if first == last else f"{first}-{last}" if last > first + 1 else f"{first},{last}"
            )
            start = i
    return ",".join(out)


@dataclass
class JobPlan:
    """What one sync writes: pod finalizers to drop, pods to delete/create, the new status, Events."""

    release: list[str] = field(default_factory=list)  # pod names whose tracking finalizer goes
    delete: list[str] = field(default_factory=list)  # active pods to delete
    create: int = 0
    indexes: list[int] = field(default_factory=list)  # Indexed: the completion index of each new pod
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


def _count(old: Obj, pods: list[Obj], release: list[str]) -> _Counts:
    """``getNewFinishedPods`` + ``isPodFailed``: finished (or deleted before finishing) pods that still
    carry the tracking finalizer are counted once and their finalizer released."""
    counts = _Counts(int(old.get("succeeded") or 0), int(old.get("failed") or 0))
    for pod in pods:
        meta = pod["metadata"]
        phase = _terminal(pod)
        deleting = bool(meta.get("deletionTimestamp"))
        if not phase and not deleting:
            counts.active.append(pod)
            counts.ready += _ready(pod)
            continue
        counts.terminating += not phase  # CountTerminatingPods
        if TRACKING_FINALIZER in (meta.get("finalizers") or []):
            release.append(meta["name"])
            if phase == "Succeeded":
                counts.succeeded += 1
            else:
                counts.failed += 1
    return counts


def _suspension(job: Obj, plan: JobPlan, conds: list[Obj], now: str) -> tuple[list[Obj], bool]:
    """``ensureJobConditionStatus`` for Suspended, with its Event; True when the Job was just resumed."""
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
    last_failure_s: float | None = None,
) -> JobPlan:
    """One ``syncJob`` step. ``now`` is RFC3339, ``now_s`` epoch seconds, ``start_s`` the epoch seconds of
    ``status.startTime``; ``last_failure_s`` when the newest failed pod finished (the backoff counts from it).

    Pods in ``plan.delete`` that are also in ``plan.release`` were counted (as failed) by this step;
    the others are suspended or excess pods, deleted without being counted (``deleteJobPods``)."""
    spec, old = job.get("spec") or {}, job.get("status") or {}
    plan = JobPlan()
    status: Obj = dict(old)
    counts = _count(old, pods, plan.release)
    done_indexes = _succeeded_indexes(spec, pods, counts, status)
    if condition(job, "Complete") or condition(job, "Failed"):
        plan.finished = True  # IsJobFinished: nothing more to do (its pods keep what they have)
        plan.status = status
        return plan
    suspended = bool(spec.get("suspend"))
    if not suspended and not status.get("startTime"):
        status["startTime"], start_s = now, now_s
    conds: list[Obj] = list(old.get("conditions") or [])
    target = condition(job, "SuccessCriteriaMet") or condition(job, "FailureTarget")
    if target is None:
        target = _failure(spec, counts, now_s, start_s, now, suspended)
        plan.requeue_s = None if target is not None or suspended else _deadline_in(spec, start_s, now_s)
    if target is not None:
        _delete_active(plan, counts, failing=target["type"] == "FailureTarget")
    else:
        if suspended:
            plan.delete = [p["metadata"]["name"] for p in counts.active]
        else:
            _manage(plan, spec, counts, now_s, last_failure_s)
            _assign_indexes(plan, spec, counts, done_indexes)
        active = len(counts.active) + plan.create - len(plan.delete)
        if _succeeded(spec, counts) and active == 0:
            target = _cond("SuccessCriteriaMet", "CompletionsReached", COMPLETE_MESSAGE, now)
        else:
            conds, resumed = _suspension(job, plan, conds, now)
            if resumed:
                status["startTime"] = now  # the activeDeadlineSeconds clock restarts on resume
    if target is not None:
        conds = _set_cond(conds, target)
        if counts.terminating == 0:  # delayTerminalCondition: no pod may still be terminating
            conds = _finish(plan, status, conds, target, now)
    gone = [
        p
        for p in counts.active
        if p["metadata"]["name"] in plan.delete and p["metadata"]["name"] not in plan.release
    ]
    removed = len(gone) if target is None else 0
    counts.ready -= sum(_ready(p) for p in gone) if target is None else 0  # deleteJobPods' removedReady
    status.update(
        uncountedTerminatedPods=status.get("uncountedTerminatedPods") or {},  # always empty here (above)
        succeeded=counts.succeeded,
        failed=counts.failed,
        terminating=counts.terminating + removed,
        ready=counts.ready,
        active=len(counts.active) + plan.create - removed,
        conditions=conds or None,
    )
    plan.status = {k: v for k, v in status.items() if v is not None}
    return plan


def _succeeded_indexes(spec: Obj, pods: list[Obj], counts: _Counts, status: Obj) -> set[int]:
    """Indexed: ``calculateSucceededIndexes`` from every succeeded pod; ``succeeded`` is their number."""
    if spec.get("completionMode") != "Indexed":
        return set()
    completions = int(spec.get("completions") or 0)
    done = {
        i
        for p in pods
        if (p.get("status") or {}).get("phase") == "Succeeded" and (i := pod_index(p)) is not None
        if i < completions
    }
    counts.succeeded = len(done)
    status["completedIndexes"] = index_ranges(done)
    return done


def _assign_indexes(plan: JobPlan, spec: Obj, counts: _Counts, done: set[int]) -> None:
    """Indexed: new pods take the lowest indexes neither succeeded nor running (``firstPendingIndexes``)."""
    if spec.get("completionMode") != "Indexed" or not plan.create:
        return
    running = {pod_index(p) for p in counts.active}
    free = [i for i in range(int(spec["completions"])) if i not in done and i not in running]
    plan.indexes = free[: plan.create]
    plan.create = len(plan.indexes)


def _deadline_in(spec: Obj, start_s: float | None, now_s: float) -> float | None:
    """Seconds until ``activeDeadlineSeconds`` passes (the controller syncs again then), if set."""
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is None or start_s is None:
        return None
    return max(start_s + float(deadline) - now_s, 0.0) + 0.05


def _delete_active(plan: JobPlan, counts: _Counts, *, failing: bool) -> None:
    """``deleteActivePods``: deleted with their finalizer, so counted as failed when the Job fails."""
    for pod in counts.active:
        plan.delete.append(pod["metadata"]["name"])
        if failing:
            plan.release.append(pod["metadata"]["name"])
            counts.failed += 1
    counts.terminating += len(counts.active)
    counts.ready, counts.active = 0, []


def _succeeded(spec: Obj, counts: _Counts) -> bool:
    completions = spec.get("completions")
    return counts.succeeded >= int(completions) if completions is not None else counts.succeeded > 0


def _finish(plan: JobPlan, status: Obj, conds: list[Obj], target: Obj, now: str) -> list[Obj]:
    """``enactJobFinished`` + ``recordJobFinished``: the terminal condition after the interim one."""
    plan.finished = True
    if target["type"] == "SuccessCriteriaMet":
        status["completionTime"] = now
        plan.events.append(("Normal", "Completed", "Job completed"))
        return _set_cond(conds, _cond("Complete", target["reason"], target["message"], now))
    plan.events.append(("Warning", target["reason"], target["message"]))
    return _set_cond(conds, _cond("Failed", target["reason"], target["message"], now))


def _failure(
    spec: Obj, counts: _Counts, now_s: float, start_s: float | None, now: str, suspended: bool
) -> Obj | None:
    """FailureTarget with its reason: backoff limit first, then the active deadline (``pastActiveDeadline``)."""
    limit = int(spec.get("backoffLimit", 6))
    on_failure = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") == "OnFailure"
    restarts = sum(_restarts(p) for p in counts.active) if on_failure else 0
    # pastBackoffLimitOnFailure: container restarts count as failures under OnFailure
    if counts.failed > limit or (on_failure and (restarts > 0 if limit == 0 else restarts >= limit)):
        return _cond("FailureTarget", "BackoffLimitExceeded", BACKOFF_MESSAGE, now)
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and start_s is not None and not suspended and now_s - start_s >= float(deadline):
        return _cond("FailureTarget", "DeadlineExceeded", DEADLINE_MESSAGE, now)
    return None


def _manage(plan: JobPlan, spec: Obj, counts: _Counts, now_s: float, last_failure_s: float | None) -> None:
    """``manageJob``: delete the excess or create the missing pods (after the failure backoff)."""
    active, succeeded, failed = counts.active, counts.succeeded, counts.failed
    parallelism = int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    if completions is not None:
        want = min(parallelism, max(int(completions) - succeeded, 0))
    else:
        want = len(active) if succeeded > 0 else parallelism
    if len(active) > want:
        plan.delete = [p["metadata"]["name"] for p in active[want:]]
        return
    # podReplacementPolicy TerminatingOrFailed: terminating pods are replaced at once
    missing = want - len(active)
    if missing <= 0:
        return
    if failed > 0 and last_failure_s is not None:
        remaining = last_failure_s + min(BACKOFF_BASE_S * 2 ** (failed - 1), BACKOFF_MAX_S) - now_s
        if remaining > 0:
            plan.requeue_s = min(remaining, plan.requeue_s or remaining)
            return
    plan.create = missing
