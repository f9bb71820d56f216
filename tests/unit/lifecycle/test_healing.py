"""Decision table for self-healing container workspaces: rebuild, wait, stop, or give up with a reason."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.lifecycle.healing import (
    ANN_REBUILD_OF,
    HealingPolicy,
    build_rebuilt_pod,
    classify_loss,
    decide_healing,
    with_last_failure,
)

POLICY = HealingPolicy(enabled=True, backoff_s=(0.0, 10.0, 60.0), window_s=1800.0, max_restarts=3)
NOW = 10_000.0


def pod(
    phase: str = "Running",
    *,
    state: dict[str, Any] | None = None,
    last: dict[str, Any] | None = None,
    restarts: int = 0,
    deleting: bool = False,
    disruption: str | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}
    status["containerStatuses"] = [
        {
            "name": "notebook",
            "state": state if state is not None else {"running": {"startedAt": "2026-12-01T10:00:00Z"}},
            "lastState": {"terminated": last} if last else {},
            "restartCount": restarts,
        }
    ]
    if disruption:
        status["conditions"].append({"type": "DisruptionTarget", "status": "True", "reason": disruption})
    if reason:
        status["reason"] = reason
    meta: dict[str, Any] = {"name": "jupyter-alice", "namespace": "ws", "uid": "uid-1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T10:05:00Z"
    return {"metadata": meta, "spec": {"nodeName": "gpu-1", "containers": []}, "status": status}


OOM = {"reason": "OOMKilled", "exitCode": 137}
CRASH = {"reason": "Error", "exitCode": 3}
RUNNING = pod()


def decide(current: dict[str, Any] | None, **kw: Any) -> tuple[str, str | None, float]:
    args: dict[str, Any] = {
        "last_seen": RUNNING,
        "stop_requested": False,
        "lost_at": None,
        "rebuilds": (),
        "restarts": (),
        "now": NOW,
        "policy": POLICY,
    }
    args.update(kw)
    verdict = decide_healing(current, **args)
    return verdict.action, verdict.cause, round(verdict.wait_s, 1)


@pytest.mark.parametrize(
    ("current", "kw", "expected"),
    [
        pytest.param(RUNNING, {}, ("running", None, 0), id="running"),
        pytest.param(None, {}, ("rebuild", "deleted", 0), id="kubectl-delete-pod-rebuilt-at-once"),
        pytest.param(None, {"stop_requested": True}, ("stop", None, 0), id="a-stop-is-never-undone"),
        pytest.param(
            pod(deleting=True), {"stop_requested": True}, ("stop", None, 0), id="stop-while-deleting"
        ),
        pytest.param(pod(deleting=True), {}, ("wait", "deleted", 0), id="terminating-wait-for-it-to-go"),
        pytest.param(
            pod(deleting=True, disruption="EvictionByEvictionAPI"),
            {},
            ("wait", "evicted", 0),
            id="drain-eviction-terminating",
        ),
        pytest.param(
            None,
            {"last_seen": pod(deleting=True, disruption="EvictionByEvictionAPI")},
            ("rebuild", "evicted", 0),
            id="drained-pod-gone",
        ),
        pytest.param(
            None,
            {"last_seen": pod(deleting=True, disruption="DeletionByTaintManager")},
            ("rebuild", "node-lost", 0),
            id="taint-eviction-node-lost",
        ),
        pytest.param(
            pod("Failed", state={"terminated": OOM}),
            {},
            ("rebuild", "oom-killed", 0),
            id="oom-killed-restart-never-pod-failed",
        ),
        pytest.param(
            pod("Failed", reason="Evicted", state={"terminated": CRASH}),
            {},
            ("rebuild", "evicted", 0),
            id="kubelet-node-pressure-eviction",
        ),
        pytest.param(
            pod("Failed", state={"terminated": CRASH}), {}, ("rebuild", "failed", 0), id="failed-exit-code"
        ),
        pytest.param(
            pod("Succeeded", state={"terminated": {"reason": "Completed", "exitCode": 0}}),
            {},
            ("stop", None, 0),
            id="shut-down-from-inside-is-a-stop",
        ),
        pytest.param(
            None, {"rebuilds": (NOW - 100,)}, ("wait", "deleted", 10), id="second-loss-backs-off-10s"
        ),
        pytest.param(
            None,
            {"rebuilds": (NOW - 100,), "lost_at": NOW - 10},
            ("rebuild", "deleted", 0),
            id="second-loss-after-its-back-off",
        ),
        pytest.param(
            None,
            {"rebuilds": (NOW - 300, NOW - 100), "lost_at": NOW - 5},
            ("wait", "deleted", 55),
            id="third-loss-backs-off-60s",
        ),
        pytest.param(
            None,
            {"rebuilds": (NOW - 300, NOW - 200, NOW - 100)},
            ("give-up", "deleted", 0),
            id="fourth-loss-in-window-gives-up",
        ),
        pytest.param(
            None,
            {"rebuilds": (NOW - 4000, NOW - 3000, NOW - 2000)},
            ("rebuild", "deleted", 0),
            id="old-rebuilds-outside-window-forgotten",
        ),
        pytest.param(
            None, {"last_seen": None}, ("give-up", "deleted", 0), id="never-seen-nothing-to-rebuild"
        ),
        pytest.param(
            None, {"policy": HealingPolicy(enabled=False)}, ("give-up", "deleted", 0), id="healing-off"
        ),
        pytest.param(
            pod(state={"waiting": {"reason": "CrashLoopBackOff"}}, last=CRASH, restarts=1),
            {"restarts": (NOW - 20,)},
            ("wait", "crashed", 0),
            id="kubelet-restarting-in-place",
        ),
        pytest.param(
            pod(state={"terminated": CRASH}, restarts=0),
            {},
            ("wait", "crashed", 0),
            id="just-exited-kubelet-will-restart",
        ),
        pytest.param(
            pod(state={"waiting": {"reason": "CrashLoopBackOff"}}, last=CRASH, restarts=3),
            {"restarts": (NOW - 60, NOW - 40, NOW - 20)},
            ("give-up", "crashed", 0),
            id="crash-loop-gives-up",
        ),
        pytest.param(
            pod(state={"waiting": {"reason": "CrashLoopBackOff"}}, last=OOM, restarts=3),
            {"restarts": (NOW - 60, NOW - 40, NOW - 20)},
            ("give-up", "oom-killed", 0),
            id="oom-loop-gives-up",
        ),
        pytest.param(
            pod(last=OOM, restarts=5),
            {"restarts": (NOW - 60, NOW - 40, NOW - 20)},
            ("running", None, 0),
            id="restarted-and-running-again",
        ),
        pytest.param(
            pod("Pending", state={"waiting": {"reason": "ContainerCreating"}}),
            {},
            ("running", None, 0),
            id="starting-for-the-first-time",
        ),
    ],
)
def test_decide_healing(
    current: dict[str, Any] | None, kw: dict[str, Any], expected: tuple[Any, ...]
) -> None:
    assert decide(current, **kw) == expected


def test_give_up_reason_names_cause_count_and_that_the_disk_is_kept() -> None:
    verdict = decide_healing(
        None,
        last_seen=pod("Failed", state={"terminated": OOM}),
        stop_requested=False,
        lost_at=None,
        rebuilds=(NOW - 300, NOW - 200, NOW - 100),
        restarts=(),
        now=NOW,
        policy=POLICY,
    )
    assert verdict.action == "give-up"
    assert "out of memory" in verdict.reason
    assert "3 time(s) in the last 30 min" in verdict.reason
    assert "disk is kept" in verdict.reason


def test_crash_loop_reason_names_last_exit() -> None:
    verdict = decide_healing(
        pod(state={"waiting": {"reason": "CrashLoopBackOff"}}, last=CRASH, restarts=3),
        last_seen=RUNNING,
        stop_requested=False,
        lost_at=None,
        rebuilds=(),
        restarts=(NOW - 60, NOW - 40, NOW - 20),
        now=NOW,
        policy=POLICY,
    )
    assert "exited 3 time(s)" in verdict.reason
    assert "Error, exit code 3" in verdict.reason


@pytest.mark.parametrize(
    ("last", "cause"),
    [
        pytest.param(None, "deleted", id="none"),
        pytest.param(pod(disruption="PreemptionByScheduler"), "preempted", id="preempted"),
        pytest.param(pod(disruption="DeletionByPodGC"), "node-lost", id="pod-gc"),
        pytest.param(pod(disruption="TerminationByKubelet"), "evicted", id="kubelet-termination"),
        pytest.param(pod("Failed", state={"terminated": OOM}), "oom-killed", id="oom"),
    ],
)
def test_classify_loss(last: dict[str, Any] | None, cause: str) -> None:
    assert classify_loss(last)[0] == cause


def test_rebuilt_pod_keeps_spec_and_drops_node_status_and_identity() -> None:
    old = pod()
    old["metadata"].update(
        labels={"gpuworkspace.dev/user": "alice"},
        annotations={"a": "b"},
        resourceVersion="42",
        creationTimestamp="2026-12-01T10:00:00Z",
    )
    old["spec"] = {
        "nodeName": "gpu-1",
        "priority": 1000,
        "priorityClassName": "interactive",
        "containers": [{"name": "notebook", "env": [{"name": "JUPYTERHUB_API_TOKEN", "value": "t"}]}],
        "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "home-alice"}}],
    }
    new = build_rebuilt_pod(old, rebuilds=2)
    assert new["metadata"] == {
        "name": "jupyter-alice",
        "namespace": "ws",
        "labels": {"gpuworkspace.dev/user": "alice"},
        "annotations": {"a": "b", ANN_REBUILD_OF: "uid-1", "gpuworkspace.dev/rebuilds": "2"},
    }
    assert "status" not in new and "nodeName" not in new["spec"] and "priority" not in new["spec"]
    assert new["spec"]["priorityClassName"] == "interactive"
    assert new["spec"]["containers"] == old["spec"]["containers"]  # the same token and env
    assert new["spec"]["volumes"] == old["spec"]["volumes"]  # the same claim
    assert old["spec"]["nodeName"] == "gpu-1" and old["metadata"]["annotations"] == {"a": "b"}  # not mutated


def test_with_last_failure_only_on_a_stopped_workspace() -> None:
    failure = {"reason": "crashed", "message": "The workspace stopped: ...", "at": "2026-12-01T10:00:00Z"}
    stopped = {"state": "Stopped", "reason": "No pod", "detail": {}}
    shown = with_last_failure(stopped, failure)
    assert shown["reason"] == failure["message"]
    assert shown["detail"]["lastFailure"] == failure
    running = {"state": "Running", "reason": "Ready", "detail": {}}
    assert with_last_failure(running, failure) == running
    assert with_last_failure(stopped, None) == stopped
