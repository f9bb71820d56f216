"""batch/v1 Job: the API server's side (defaulting, selector generation, validation, kubectl's columns).

Pure functions, mirroring kubernetes/kubernetes:

- :func:`default_job`: ``pkg/apis/batch/v1/defaults.go`` ``SetDefaults_Job`` (parallelism/completions 1
  when both unset, backoffLimit 6, completionMode NonIndexed, suspend false, manualSelector false,
  podReplacementPolicy TerminatingOrFailed) plus ``pkg/registry/batch/job/strategy.go``
  ``generateSelector`` (template labels ``batch.kubernetes.io/controller-uid``, ``controller-uid``,
  ``batch.kubernetes.io/job-name``, ``job-name``; selector on the controller-uid label) unless
  ``manualSelector`` is true; the Job's own labels default to its template's;
- :func:`validate_job` / :func:`validate_job_update`: ``pkg/apis/batch/validation/validation.go``
  ``ValidateJob``/``ValidateJobSpec``/``ValidateJobSpecUpdate`` for the fields the simulated controller
  uses, with the real field paths and messages; the template's scheduling directives are mutable only as
  ``pkg/registry/batch/job/strategy.go`` ``validationOptionsForJob`` allows (old Job suspended and never
  started), and ``status.startTime`` as ``ValidateJobUpdateStatus`` allows;
- :func:`job_cells`: ``pkg/printers/internalversion/printers.go`` ``printJob`` (STATUS, COMPLETIONS,
  DURATION columns).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .defaults import container_defaults

Obj = dict[str, Any]
Cause = dict[str, str]

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_JOB_NAME_LABEL = "job-name"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
DEFAULT_BACKOFF_LIMIT = 6
RESTART_POLICIES = ("OnFailure", "Never")
COMPLETION_MODES = ("NonIndexed", "Indexed")
NONNEGATIVE = (
    "parallelism",
    "completions",
    "activeDeadlineSeconds",
    "backoffLimit",
    "ttlSecondsAfterFinished",
)


def default_job(job: Obj) -> None:
    """``SetDefaults_Job`` and ``SetDefaults_PodSpec`` for the template (create and update alike)."""
    meta, spec = job.setdefault("metadata", {}), job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = DEFAULT_BACKOFF_LIMIT
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", False)
    policy = "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    spec.setdefault("podReplacementPolicy", policy)
    template = spec.setdefault("template", {})
    tmeta = template.setdefault("metadata", {})
    if not meta.get("labels") and tmeta.get("labels"):
        meta["labels"] = dict(tmeta["labels"])
    tspec = template.setdefault("spec", {})
    tspec.setdefault("restartPolicy", "Always")  # refused by validate_job, as the real one does
    tspec.setdefault("dnsPolicy", "ClusterFirst")
    tspec.setdefault("schedulerName", "default-scheduler")
    tspec.setdefault("terminationGracePeriodSeconds", 30)
    tspec.setdefault("securityContext", {})
    for container in [*(tspec.get("initContainers") or []), *(tspec.get("containers") or [])]:
        if isinstance(container, dict):
            container_defaults(container)


def generate_selector(job: Obj) -> None:
    """``generateSelector`` on create (``metadata.uid`` set), unless ``manualSelector``; the Job's labels
    then default to the template's (as storage defaulting gives them on every read)."""
    meta, spec = job["metadata"], job["spec"]
    tmeta = spec["template"]["metadata"]
    if spec.get("manualSelector"):
        return
    had_labels = bool(meta.get("labels")) and meta.get("labels") != tmeta.get("labels")
    labels = tmeta.get("labels") or {}
    tmeta["labels"] = labels
    uid, name = meta.get("uid", ""), meta.get("name", "")
    labels.setdefault(LEGACY_CONTROLLER_UID_LABEL, uid)
    labels.setdefault(LEGACY_JOB_NAME_LABEL, name)
    labels.setdefault(CONTROLLER_UID_LABEL, uid)
    labels.setdefault(JOB_NAME_LABEL, name)
    if spec.get("selector") is None:
        spec["selector"] = {"matchLabels": {CONTROLLER_UID_LABEL: uid}}
    if not had_labels:
        meta["labels"] = dict(labels)


def _go(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_go(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def _cause(reason: str, field: str, message: str) -> Cause:
    return {"reason": reason, "field": field, "message": message}


def _invalid(field: str, value: Any, detail: str) -> Cause:
    return _cause("FieldValueInvalid", field, f"Invalid value: {_go(value)}: {detail}")


def _not_supported(field: str, value: Any, allowed: tuple[str, ...]) -> Cause:
    supported = ", ".join(_go(a) for a in allowed)
    return _cause(
        "FieldValueNotSupported", field, f"Unsupported value: {_go(value)}: supported values: {supported}"
    )


def selector_matches(selector: Obj, labels: dict[str, str]) -> bool:
    """A LabelSelector against labels (matchLabels and the four matchExpressions operators)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(op, False)
        if not ok:
            return False
    return True


def validate_job(job: Obj) -> list[Cause]:
    """The causes the real API server gives for a bad Job spec (empty when it is valid)."""
    spec = job.get("spec") or {}
    causes: list[Cause] = []
    for name in NONNEGATIVE:
        value = spec.get(name)
        if isinstance(value, int) and value < 0:
            causes.append(_invalid(f"spec.{name}", value, "must be greater than or equal to 0"))
    mode = spec.get("completionMode", "NonIndexed")
    if mode not in COMPLETION_MODES:
        causes.append(_not_supported("spec.completionMode", mode, COMPLETION_MODES))
    elif mode == "Indexed" and spec.get("completions") is None:
        causes.append(
            _cause(
                "FieldValueRequired", "spec.completions", "Required value: when completion mode is Indexed"
            )
        )
    selector = spec.get("selector")
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not selector:
        causes.append(_cause("FieldValueRequired", "spec.selector", "Required value"))
    elif not selector_matches(selector, labels):
        causes.append(
            _invalid("spec.template.metadata.labels", labels, "`selector` does not match template `labels`")
        )
    elif not spec.get("manualSelector"):
        uid = (job.get("metadata") or {}).get("uid", "")
        if (selector.get("matchLabels") or {}).get(CONTROLLER_UID_LABEL) != uid or selector.get(
            "matchExpressions"
        ):
            causes.append(_invalid("spec.selector", selector, "`selector` not auto-generated"))
    tspec = (spec.get("template") or {}).get("spec") or {}
    if not tspec.get("containers"):
        causes.append(_cause("FieldValueRequired", "spec.template.spec.containers", "Required value"))
    policy = tspec.get("restartPolicy", "Always")
    if policy not in RESTART_POLICIES:
        causes.append(_not_supported("spec.template.spec.restartPolicy", policy, RESTART_POLICIES))
    return causes


IMMUTABLE = ("selector", "template", "completionMode", "completions")
# validatePodTemplateUpdate with AllowMutableSchedulingDirectives: what a queue (Kueue) may change in the
# template of a suspended Job that never started
SCHEDULING_META = ("labels", "annotations")
SCHEDULING_SPEC = ("nodeSelector", "tolerations", "schedulingGates")
STARTTIME_MESSAGE = "Required value: startTime cannot be removed for unsuspended job"


def _take(target: Obj, source: Obj, key: str) -> None:
    if source.get(key) is None:
        target.pop(key, None)
    else:
        target[key] = source[key]


def _with_new_scheduling(old: Any, new: Any) -> Any:
    """``validatePodTemplateUpdate``: the old template with the new one's labels, annotations, nodeSelector,
    tolerations, schedulingGates and ``affinity.nodeAffinity`` (an affinity may be dropped only if it held
    nothing but a nodeAffinity); what is left must equal the new template."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return old
    meta, spec = dict(old.get("metadata") or {}), dict(old.get("spec") or {})
    new_meta, new_spec = new.get("metadata") or {}, new.get("spec") or {}
    for key in SCHEDULING_META:
        _take(meta, new_meta, key)
    for key in SCHEDULING_SPEC:
        _take(spec, new_spec, key)
    before, after = spec.get("affinity"), new_spec.get("affinity")
    if after is None and isinstance(before, dict):
        rest = {k: v for k, v in before.items() if k != "nodeAffinity"}
        if rest:
            spec["affinity"] = rest
        else:
            spec.pop("affinity")
    elif isinstance(after, dict):
        kept = dict(before) if isinstance(before, dict) else {}
        _take(kept, after, "nodeAffinity")
        spec["affinity"] = kept
    return {**old, "metadata": meta, "spec": spec}


def scheduling_mutable(old: Obj) -> bool:
    """``validationOptionsForJob``: ``AllowMutableSchedulingDirectives`` is ``suspended && notStarted`` of
    the OLD Job (``spec.suspend`` true and ``status.startTime`` unset)."""
    return bool((old.get("spec") or {}).get("suspend")) and not (old.get("status") or {}).get("startTime")


def validate_job_update(old: Obj, new: Obj) -> list[Cause]:
    """``ValidateJobSpecUpdate``: selector, template, completionMode and completions are immutable, except
    that the template's scheduling directives may change while the old Job is suspended and has never
    started (:func:`scheduling_mutable`): how Kueue injects a flavor's node labels and tolerations before it
    unsuspends the Job, and restores them after it suspended it and reset ``status.startTime``."""
    a, b = old.get("spec") or {}, new.get("spec") or {}
    causes = validate_job(new)
    mutable = scheduling_mutable(old)
    for name in IMMUTABLE:
        before, after = a.get(name), b.get(name)
        if name == "template" and mutable:
            before = _with_new_scheduling(before, after)
        if before != after:
            causes.append(_invalid(f"spec.{name}", b.get(name), "field is immutable"))
    return causes + validate_job_status_update(old, new)


def validate_job_status_update(old: Obj, new: Obj) -> list[Cause]:
    """``ValidateJobUpdateStatus`` with ``RejectStartTimeUpdateForUnsuspendedJob`` (``JobManagedBy``, on by
    default since 1.32): a set ``status.startTime`` may change only while the Job is suspended, or in the
    Job controller's write that resumes it (Suspended True -> not True, kubernetes#134769)."""
    before = (old.get("status") or {}).get("startTime")
    after = (new.get("status") or {}).get("startTime")
    suspended = bool((new.get("spec") or {}).get("suspend"))
    resuming = condition(old, "Suspended") is not None and condition(new, "Suspended") is None
    if before is not None and before != after and not suspended and not resuming:
        return [_cause("FieldValueRequired", "status.startTime", STARTTIME_MESSAGE)]
    return []


def condition(job: Obj, type_: str) -> Obj | None:
    """The Job's condition of ``type_`` when its status is True."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


def job_cells(
    job: Obj, seconds_between: Callable[[Any, Any], float | None], human: Callable[[float], str]
) -> list[str]:
    """``printJob``: STATUS, COMPLETIONS, DURATION (``seconds_between(start, end_or_None)``)."""
    spec, status, meta = job.get("spec") or {}, job.get("status") or {}, job.get("metadata") or {}
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif int(spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    duration = ""
    if status.get("startTime"):
        elapsed = seconds_between(status["startTime"], status.get("completionTime"))
        duration = human(elapsed) if elapsed is not None else ""
    if condition(job, "Complete"):
        state = "Complete"
    elif condition(job, "Failed"):
        state = "Failed"
    elif meta.get("deletionTimestamp"):
        state = "Terminating"
    elif condition(job, "FailureTarget"):
        state = "FailureTarget"
    elif condition(job, "Suspended"):
        state = "Suspended"
    elif condition(job, "SuccessCriteriaMet"):
        state = "SuccessCriteriaMet"
    else:
        state = "Running"
    return [state, completions, duration]
