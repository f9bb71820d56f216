"""The Job controller's decisions (sim/jobstate.py), pure: one syncJob step per case."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_devcluster import jobspec
from gpuworkspace_devcluster.sim.jobstate import index_ranges, plan_job

Obj = dict[str, Any]
NOW, NOW_S = "2026-12-02T01:00:00Z", 1_000_000.0
TRACK = jobspec.TRACKING_FINALIZER


def job(status: Obj | None = None, **spec: Any) -> Obj:
    template = {"spec": {"restartPolicy": spec.pop("restartPolicy", "Never"), "containers": [{"name": "c"}]}}
    obj = {
        "metadata": {"name": "j", "uid": "u"},
        "spec": {"template": template, **spec},
        "status": status or {},
    }
    jobspec.default_job(obj)
    jobspec.generate_selector(obj)
    return obj


def pod(
    name: str, phase: str = "Running", *, tracked: bool = True, deleting: bool = False, **extra: Any
) -> Obj:
    meta: Obj = {"name": name, "uid": f"uid-{name}", "finalizers": [TRACK] if tracked else []}
    if deleting:
        meta["deletionTimestamp"] = NOW
    return {"metadata": meta, "status": {"phase": phase, **extra}}


def conds(plan_status: Obj) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in plan_status.get("conditions") or []}


def test_new_job_starts_one_pod_and_its_clock() -> None:
    plan = plan_job(job(), [], NOW, NOW_S, None)
    assert plan.create == 1 and plan.status["startTime"] == NOW and plan.status["active"] == 1


def test_parallelism_two_completions_three_never_overshoots() -> None:
    spec = {"parallelism": 2, "completions": 3}
    assert plan_job(job(**spec), [], NOW, NOW_S, None).create == 2
    # two succeeded (counted now), none running: only one more is needed
    plan = plan_job(job(**spec), [pod("a", "Succeeded"), pod("b", "Succeeded")], NOW, NOW_S, NOW_S)
    assert (plan.create, plan.status["succeeded"], sorted(plan.release)) == (1, 2, ["a", "b"])
    # the third succeeds: counted once, then Complete (no pod left active or terminating)
    status = {"succeeded": 2, "startTime": NOW}
    pods = [pod("a", "Succeeded", tracked=False), pod("b", "Succeeded", tracked=False), pod("c", "Succeeded")]
    plan = plan_job(job(status, **spec), pods, NOW, NOW_S, NOW_S)
    assert plan.status["succeeded"] == 3 and plan.release == ["c"] and plan.create == 0
    assert conds(plan.status) == {
        "SuccessCriteriaMet": ("True", "CompletionsReached"),
        "Complete": ("True", "CompletionsReached"),
    }
    assert plan.status["completionTime"] == NOW and plan.finished
    assert ("Normal", "Completed", "Job completed") in plan.events


def test_work_queue_job_completes_when_one_succeeds_and_the_rest_finish() -> None:
    spec = {"parallelism": 2}
    plan = plan_job(job({"startTime": NOW}, **spec), [pod("a", "Succeeded"), pod("b")], NOW, NOW_S, NOW_S)
    assert plan.create == 0 and not plan.delete and "Complete" not in conds(plan.status)
    plan = plan_job(
        job({"startTime": NOW, "succeeded": 1}, **spec), [pod("b", "Succeeded")], NOW, NOW_S, NOW_S
    )
    assert conds(plan.status)["Complete"] == ("True", "CompletionsReached")


def test_backoff_limit_exceeded_deletes_running_pods_then_fails() -> None:
    spec = {"backoffLimit": 1, "parallelism": 2, "completions": 2}
    pods = [pod("a", "Failed"), pod("b", "Failed"), pod("c")]
    plan = plan_job(job({"startTime": NOW}, **spec), pods, NOW, NOW_S, NOW_S)
    # c is deleted with its finalizer and, the Job failing, counted as failed too
    assert plan.delete == ["c"] and plan.status["failed"] == 3 and sorted(plan.release) == ["a", "b", "c"]
    assert conds(plan.status) == {"FailureTarget": ("True", "BackoffLimitExceeded")} and not plan.finished
    assert plan.status["terminating"] == 1 and plan.status["active"] == 0
    after = job(plan.status, **spec)
    plan = plan_job(after, [pod("c", deleting=True, tracked=False)], NOW, NOW_S, NOW_S)
    assert "Failed" not in conds(plan.status)  # a pod is still terminating
    plan = plan_job(after, [], NOW, NOW_S, NOW_S)
    assert conds(plan.status)["Failed"] == ("True", "BackoffLimitExceeded") and plan.status["failed"] == 3
    assert ("Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit") in plan.events
    assert "completionTime" not in plan.status


def test_on_failure_restarts_count_against_the_backoff_limit() -> None:
    restarting = pod("a", containerStatuses=[{"restartCount": 2}])
    spec = {"backoffLimit": 2, "restartPolicy": "OnFailure"}
    plan = plan_job(job({"startTime": NOW}, **spec), [restarting], NOW, NOW_S, NOW_S)
    assert conds(plan.status)["FailureTarget"] == ("True", "BackoffLimitExceeded")
    once = pod("a", containerStatuses=[{"restartCount": 1}])
    assert "FailureTarget" not in conds(
        plan_job(job({"startTime": NOW}, **spec), [once], NOW, NOW_S, NOW_S).status
    )


def test_failure_backoff_delays_the_replacement_pod() -> None:
    plan = plan_job(job({"startTime": NOW}), [pod("a", "Failed")], NOW, NOW_S, NOW_S, NOW_S - 4)
    assert plan.create == 0 and plan.requeue_s == pytest.approx(6.0) and plan.status["failed"] == 1
    later = job({"startTime": NOW, "failed": 1})
    plan = plan_job(later, [pod("a", "Failed", tracked=False)], NOW, NOW_S, NOW_S, NOW_S - 11)
    assert plan.create == 1


def test_active_deadline_exceeded() -> None:
    spec = {"activeDeadlineSeconds": 30}
    early = plan_job(job({"startTime": NOW}, **spec), [pod("a")], NOW, NOW_S + 10, NOW_S)
    assert early.requeue_s == pytest.approx(20.05) and not early.delete
    late = plan_job(job({"startTime": NOW}, **spec), [pod("a")], NOW, NOW_S + 30, NOW_S)
    assert late.delete == ["a"] and conds(late.status)["FailureTarget"] == ("True", "DeadlineExceeded")
    gone = plan_job(job(late.status, **spec), [], NOW, NOW_S + 31, NOW_S)
    assert conds(gone.status)["Failed"] == ("True", "DeadlineExceeded")
    assert gone.status["failed"] == 1  # the running pod, removed because the Job failed
    assert ("Warning", "DeadlineExceeded", "Job was active longer than specified deadline") in gone.events


def test_suspend_removes_pods_uncounted_and_resume_resets_the_start_time() -> None:
    plan = plan_job(job({"startTime": NOW}, suspend=True), [pod("a")], NOW, NOW_S, NOW_S)
    assert plan.delete == ["a"] and plan.create == 0 and plan.release == []
    assert conds(plan.status) == {"Suspended": ("True", "JobSuspended")}
    assert (plan.status["failed"], plan.status["active"], plan.status["terminating"]) == (0, 0, 1)
    assert ("Normal", "Suspended", "Job suspended") in plan.events
    later = "2026-12-02T02:00:00Z"
    resumed = plan_job(job(plan.status), [], later, NOW_S + 3600, NOW_S)
    assert conds(resumed.status) == {"Suspended": ("False", "JobResumed")}
    assert resumed.status["startTime"] == later and resumed.create == 1
    assert ("Normal", "Resumed", "Job resumed") in resumed.events


def test_suspend_keeps_the_start_time_and_drops_the_ready_count() -> None:
    """``syncJob`` never clears ``status.startTime`` on suspend (Kueue's Stop does, through the status
    subresource); the removed pods leave ``active`` and ``ready``."""
    ready = pod("a", conditions=[{"type": "Ready", "status": "True"}])
    running = plan_job(job({"startTime": NOW}), [ready], NOW, NOW_S, NOW_S)
    assert running.status["ready"] == 1
    plan = plan_job(job(running.status, suspend=True), [ready], NOW, NOW_S + 5, NOW_S)
    assert plan.delete == ["a"]
    assert (plan.status["startTime"], plan.status["ready"], plan.status["active"]) == (NOW, 0, 0)
    reset = {k: v for k, v in plan.status.items() if k != "startTime"}  # what Kueue writes next
    again = plan_job(job(reset, suspend=True), [], NOW, NOW_S + 6, None)
    assert "startTime" not in again.status
    assert jobspec.validate_job_status_update(job(reset, suspend=True), job(again.status, suspend=True)) == []


def test_suspended_job_does_not_hit_its_deadline() -> None:
    plan = plan_job(
        job({"startTime": NOW}, suspend=True, activeDeadlineSeconds=5), [], NOW, NOW_S + 60, NOW_S
    )
    assert "FailureTarget" not in conds(plan.status) and plan.requeue_s is None


def test_created_suspended_has_no_start_time() -> None:
    plan = plan_job(job(suspend=True), [], NOW, NOW_S, None)
    assert "startTime" not in plan.status and plan.create == 0
    assert conds(plan.status) == {"Suspended": ("True", "JobSuspended")}


def test_pod_deleted_by_someone_else_counts_as_failed_and_is_replaced() -> None:
    plan = plan_job(job({"startTime": NOW}), [pod("a", deleting=True)], NOW, NOW_S, NOW_S)
    assert plan.status["failed"] == 1 and plan.status["terminating"] == 1 and plan.release == ["a"]
    assert plan.create == 1  # TerminatingOrFailed: no wait for the old pod to go


def indexed(name: str, index: int, phase: str = "Running", **kw: Any) -> Obj:
    obj = pod(name, phase, **kw)
    obj["metadata"]["annotations"] = {"batch.kubernetes.io/job-completion-index": str(index)}
    return obj


def test_indexed_job_runs_each_index_once_and_lists_completed_indexes() -> None:
    spec = {"completionMode": "Indexed", "completions": 5, "parallelism": 2}
    plan = plan_job(job(**spec), [], NOW, NOW_S, None)
    assert (plan.create, plan.indexes) == (2, [0, 1])
    # index 0 succeeded, 1 is running: the next pod takes index 2
    pods = [indexed("a", 0, "Succeeded"), indexed("b", 1)]
    plan = plan_job(job({"startTime": NOW}, **spec), pods, NOW, NOW_S, NOW_S)
    assert plan.indexes == [2] and plan.status["completedIndexes"] == "0" and plan.status["succeeded"] == 1
    done = [indexed(n, i, "Succeeded", tracked=False) for n, i in zip("abcde", range(5), strict=True)]
    plan = plan_job(job({"startTime": NOW, "succeeded": 4}, **spec), done, NOW, NOW_S, NOW_S)
    assert plan.status["completedIndexes"] == "0-4" and conds(plan.status)["Complete"][0] == "True"


@pytest.mark.parametrize(
    ("indexes", "text"),
    [({0}, "0"), ({0, 1}, "0,1"), ({0, 1, 2}, "0-2"), ({1, 3, 4, 5, 7}, "1,3-5,7"), (set(), "")],
)
def test_completed_indexes_format(indexes: set[int], text: str) -> None:
    assert index_ranges(indexes) == text
