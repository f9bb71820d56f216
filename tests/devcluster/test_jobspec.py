"""batch/v1 Job on the API side, pure: defaulting, generated selector, validation causes, kubectl's columns."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_devcluster import jobspec
from gpuworkspace_devcluster.tables import human_duration, parse_time

Obj = dict[str, Any]


def job(**spec: Any) -> Obj:
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "python:3.11"}]}}
    return {"metadata": {"name": "train", "uid": "uid-1"}, "spec": {"template": template, **spec}}


def defaulted(**spec: Any) -> Obj:
    obj = job(**spec)
    jobspec.default_job(obj)
    jobspec.generate_selector(obj)
    return obj


def test_defaults_and_generated_selector() -> None:
    obj = defaulted()
    spec = obj["spec"]
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (1, 1, 6)
    assert (spec["completionMode"], spec["suspend"], spec["manualSelector"]) == ("NonIndexed", False, False)
    assert spec["podReplacementPolicy"] == "TerminatingOrFailed"
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": "uid-1"}}
    labels = spec["template"]["metadata"]["labels"]
    assert labels == {
        "batch.kubernetes.io/controller-uid": "uid-1",
        "batch.kubernetes.io/job-name": "train",
        "controller-uid": "uid-1",
        "job-name": "train",
    }
    assert obj["metadata"]["labels"] == labels  # the Job's labels default to its template's
    tspec = spec["template"]["spec"]
    assert (tspec["dnsPolicy"], tspec["terminationGracePeriodSeconds"], tspec["schedulerName"]) == (
        "ClusterFirst",
        30,
        "default-scheduler",
    )
    assert tspec["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert jobspec.validate_job(obj) == []


def test_own_labels_are_kept() -> None:
    obj = job()
    obj["metadata"]["labels"] = {"team": "ml"}
    jobspec.default_job(obj)
    jobspec.generate_selector(obj)
    assert obj["metadata"]["labels"] == {"team": "ml"}
    assert obj["spec"]["template"]["metadata"]["labels"]["job-name"] == "train"


def test_parallelism_only_leaves_completions_unset() -> None:
    spec = defaulted(parallelism=3)["spec"]
    assert spec["parallelism"] == 3 and "completions" not in spec


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"parallelism": -1}, "spec.parallelism", "Invalid value: -1: must be greater than or equal to 0"),
        ({"backoffLimit": -2}, "spec.backoffLimit", "Invalid value: -2: must be greater than or equal to 0"),
        (
            {"activeDeadlineSeconds": -5},
            "spec.activeDeadlineSeconds",
            "Invalid value: -5: must be greater than or equal to 0",
        ),
        (
            {"completionMode": "Sometimes"},
            "spec.completionMode",
            'Unsupported value: "Sometimes": supported values: "NonIndexed", "Indexed"',
        ),
        ({"manualSelector": True}, "spec.selector", "Required value"),
        (
            {"manualSelector": True, "selector": {"matchLabels": {"app": "x"}}},
            "spec.template.metadata.labels",
            "`selector` does not match template `labels`",
        ),
        (
            {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "someone-else"}}},
            "spec.template.metadata.labels",
            "`selector` does not match template `labels`",
        ),
    ],
)
def test_invalid_specs_name_the_field(change: Obj, field: str, message: str) -> None:
    causes = jobspec.validate_job(defaulted(**change))
    assert any(c["field"] == field and message in c["message"] for c in causes), causes


def test_restart_policy_always_is_refused_as_the_apiserver_does() -> None:
    obj = job()
    del obj["spec"]["template"]["spec"]["restartPolicy"]
    jobspec.default_job(obj)
    jobspec.generate_selector(obj)
    causes = jobspec.validate_job(obj)
    assert causes == [
        {
            "reason": "FieldValueNotSupported",
            "field": "spec.template.spec.restartPolicy",
            "message": 'Unsupported value: "Always": supported values: "OnFailure", "Never"',
        }
    ]


def test_update_keeps_template_and_completions_immutable() -> None:
    old = defaulted(completions=2)
    new = defaulted(completions=3)
    new["spec"]["suspend"] = True
    fields = [c["field"] for c in jobspec.validate_job_update(old, new)]
    assert fields == ["spec.completions"]
    suspended = defaulted(completions=2)
    suspended["spec"]["suspend"] = True
    assert jobspec.validate_job_update(old, suspended) == []


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def with_status(obj: Obj, **status: Any) -> Obj:
    return {**obj, "status": status}


def placed(suspend: bool) -> Obj:
    """The Job as Kueue writes it when it admits it: the flavor's node selector and toleration injected."""
    obj = defaulted(suspend=suspend)
    obj["spec"]["template"]["spec"] |= {"nodeSelector": H100, "tolerations": [GPU_TOLERATION]}
    return obj


def test_a_suspended_never_started_job_takes_a_queues_node_selector_and_tolerations() -> None:
    assert jobspec.validate_job_update(defaulted(suspend=True), placed(False)) == []
    # and gives them back while still suspended (Kueue's Stop restores the pod set)
    assert jobspec.validate_job_update(placed(True), defaulted(suspend=True)) == []


def test_a_suspended_job_that_started_keeps_its_template_until_start_time_is_reset() -> None:
    """Kubernetes allows the change only when the OLD Job is suspended and ``status.startTime`` is unset
    (``suspended && notStarted``): a Job Kueue has just suspended still has its startTime."""
    started = with_status(placed(True), startTime="2026-12-02T01:00:00Z", active=0)
    causes = jobspec.validate_job_update(started, with_status(defaulted(suspend=True), **started["status"]))
    assert [c["field"] for c in causes] == ["spec.template"]
    assert causes[0]["reason"] == "FieldValueInvalid"
    assert causes[0]["message"].startswith("Invalid value: {") and causes[0]["message"].endswith(
        ": field is immutable"
    )
    reset = with_status(placed(True), active=0)  # the same Job once its startTime was reset
    assert jobspec.validate_job_update(reset, with_status(defaulted(suspend=True), active=0)) == []


def test_a_running_job_keeps_its_scheduling_directives() -> None:
    causes = jobspec.validate_job_update(defaulted(suspend=False), placed(False))
    assert [c["field"] for c in causes] == ["spec.template"]
    # suspending it in the same write does not help: the old Job decides
    assert [c["field"] for c in jobspec.validate_job_update(defaulted(), placed(True))] == ["spec.template"]


def test_only_scheduling_directives_are_mutable_even_when_suspended() -> None:
    image = defaulted(suspend=True)
    image["spec"]["template"]["spec"]["containers"][0]["image"] = "python:3.13"
    assert [c["field"] for c in jobspec.validate_job_update(defaulted(suspend=True), image)] == [
        "spec.template"
    ]
    labelled = defaulted(suspend=True)
    labelled["spec"]["template"]["metadata"]["annotations"] = {"kueue.x-k8s.io/workload": "w"}
    labelled["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/topology"}]
    assert jobspec.validate_job_update(defaulted(suspend=True), labelled) == []


NODE_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
    }
}
POD_AFFINITY = {"preferredDuringSchedulingIgnoredDuringExecution": []}


@pytest.mark.parametrize(
    ("before", "after", "fields"),
    [
        (None, {"nodeAffinity": NODE_AFFINITY}, []),
        ({"nodeAffinity": NODE_AFFINITY}, None, []),
        ({"nodeAffinity": NODE_AFFINITY, "podAffinity": POD_AFFINITY}, {"podAffinity": POD_AFFINITY}, []),
        (None, {"podAffinity": POD_AFFINITY}, ["spec.template"]),
        ({"nodeAffinity": NODE_AFFINITY, "podAffinity": POD_AFFINITY}, None, ["spec.template"]),
    ],
)
def test_only_node_affinity_is_mutable(before: Obj | None, after: Obj | None, fields: list[str]) -> None:
    old, new = defaulted(suspend=True), defaulted(suspend=True)
    for obj, affinity in ((old, before), (new, after)):
        if affinity is not None:
            obj["spec"]["template"]["spec"]["affinity"] = affinity
    assert [c["field"] for c in jobspec.validate_job_update(old, new)] == fields


START, LATER = "2026-12-02T01:00:00Z", "2026-12-02T01:05:00Z"
SUSPENDED = {"type": "Suspended", "status": "True", "reason": "JobSuspended", "message": "Job suspended"}
RESUMED = {"type": "Suspended", "status": "False", "reason": "JobResumed", "message": "Job resumed"}


@pytest.mark.parametrize(
    ("suspend", "old_status", "new_status", "refused"),
    [
        (True, {"startTime": START}, {}, False),  # Kueue's Stop: cleared once the Job is suspended
        (False, {"startTime": START}, {}, True),  # ... but not while it runs
        (False, {"startTime": START}, {"startTime": LATER}, True),
        (False, {}, {"startTime": START}, False),  # the Job controller's first start
        # the Job controller's resume of a Job suspended after it started (kubernetes#134769)
        (
            False,
            {"startTime": START, "conditions": [SUSPENDED]},
            {"startTime": LATER, "conditions": [RESUMED]},
            False,
        ),
    ],
)
def test_start_time_changes_only_while_suspended_or_on_resume(
    suspend: bool, old_status: Obj, new_status: Obj, refused: bool
) -> None:
    old = with_status(defaulted(suspend=suspend), **old_status)
    causes = jobspec.validate_job_status_update(old, with_status(defaulted(suspend=suspend), **new_status))
    expected = {
        "reason": "FieldValueRequired",
        "field": "status.startTime",
        "message": "Required value: startTime cannot be removed for unsuspended job",
    }
    assert causes == ([expected] if refused else [])


def _seconds(start: Any, end: Any) -> float | None:
    a, b = parse_time(start), parse_time(end or "2026-12-02T01:10:00Z")
    return (b - a).total_seconds() if a and b else None


@pytest.mark.parametrize(
    ("spec", "status", "cells"),
    [
        ({"completions": 3}, {}, ["Running", "0/3", ""]),
        (
            {"completions": 3},
            {
                "succeeded": 3,
                "startTime": "2026-12-02T01:00:00Z",
                "completionTime": "2026-12-02T01:02:05Z",
                "conditions": [{"type": "Complete", "status": "True"}],
            },
            ["Complete", "3/3", "2m5s"],
        ),
        (
            {"parallelism": 2},
            {"succeeded": 0, "startTime": "2026-12-02T01:09:30Z"},
            ["Running", "0/1 of 2", "30s"],
        ),
        (
            {"completions": 1},
            {"conditions": [{"type": "Suspended", "status": "True"}]},
            ["Suspended", "0/1", ""],
        ),
        (
            {"completions": 1},
            {"failed": 7, "conditions": [{"type": "Failed", "status": "True"}]},
            ["Failed", "0/1", ""],
        ),
    ],
)
def test_kubectl_columns(spec: Obj, status: Obj, cells: list[str]) -> None:
    obj = {"metadata": {"name": "j"}, "spec": spec, "status": status}
    assert jobspec.job_cells(obj, _seconds, human_duration) == cells
