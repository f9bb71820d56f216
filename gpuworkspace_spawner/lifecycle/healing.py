"""Self-healing container workspaces: what to do when a running workspace's pod is lost (seed 000 §11).

Pure; time is a parameter. The spawner's poll (``selfhealing.py``) asks :func:`decide_healing` with the
pod from its watch cache and the workspace's recent history, and does what the verdict says:

- ``running``: the pod is fine (KubeSpawner's own poll takes over);
- ``stop``: the workspace ended on purpose (a stop was asked for, or the server exited with 0): tell
  JupyterHub it stopped, never rebuild;
- ``wait``: something is already in progress (the pod is being deleted, the kubelet is restarting the
  container, or the next rebuild's back-off has not elapsed): keep the server as running;
- ``rebuild``: create the workspace pod again, on the same home disk, with the same server token;
- ``give-up``: tell JupyterHub the server stopped, and show the user ``reason``.

A pod that keeps failing backs off: rebuild *n* (counted within ``window_s``) waits ``backoff_s[n-1]``
seconds after the loss was seen; when every delay of the schedule has been used, the next loss gives
up. In-place restarts by the kubelet (``restartPolicy: OnFailure``, its own CrashLoopBackOff) count
separately: ``max_restarts`` of them within the window give up too.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ANN_REBUILD_OF",
    "HealingPolicy",
    "HealingVerdict",
    "LossCause",
    "build_rebuilt_pod",
    "classify_loss",
    "decide_healing",
    "with_last_failure",
]

HealAction = Literal["running", "stop", "wait", "rebuild", "give-up"]
LossCause = Literal["deleted", "evicted", "node-lost", "preempted", "oom-killed", "crashed", "failed"]
ANN_REBUILD_OF = "gpuworkspace.dev/rebuild-of"  # on a rebuilt pod: the uid of the pod it replaces
NOTEBOOK = "notebook"  # KubeSpawner's container name

# DisruptionTarget reasons the API server, scheduler and controllers write before a deletion
# (k8s.io/api core/v1 types.go: PodReasonPreemptionByScheduler, ...; pod disruption conditions, KEP-3329).
_DISRUPTION_CAUSES: dict[str, LossCause] = {
    "EvictionByEvictionAPI": "evicted",
    "TerminationByKubelet": "evicted",
    "PreemptionByScheduler": "preempted",
    "DeletionByTaintManager": "node-lost",
    "DeletionByPodGC": "node-lost",
}


@dataclass(frozen=True)
class HealingPolicy:
    enabled: bool = True
    backoff_s: tuple[float, ...] = (0.0, 10.0, 60.0)
    window_s: float = 1800.0
    max_restarts: int = 3


@dataclass(frozen=True)
class HealingVerdict:
    action: HealAction
    reason: str
    cause: LossCause | None = None
    wait_s: float = 0.0


def _disruption(pod: Mapping[str, Any]) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return str(condition.get("reason") or "")
    return None


def _notebook_status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if s.get("name") == NOTEBOOK), {})


def _termination(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The notebook container's current termination, else its last one ({} when it never ended)."""
    status = _notebook_status(pod)
    return ((status.get("state") or {}).get("terminated") or {}) or (
        (status.get("lastState") or {}).get("terminated") or {}
    )


def _describe_exit(terminated: Mapping[str, Any]) -> str:
    reason = terminated.get("reason") or "Error"
    return f"{reason}, exit code {terminated.get('exitCode', '?')}"


def classify_loss(pod: Mapping[str, Any] | None) -> tuple[LossCause, str]:
    """Why the workspace lost its pod, from the pod (or the last copy of it seen before it vanished)."""
    if pod is None:
        return "deleted", "its pod was deleted"
    disruption = _disruption(pod)
    if disruption in _DISRUPTION_CAUSES:
        cause = _DISRUPTION_CAUSES[disruption]
        return cause, f"its pod was {'lost with its node' if cause == 'node-lost' else cause} ({disruption})"
    status = pod.get("status") or {}
    if status.get("reason") == "Evicted":  # the kubelet's node-pressure eviction
        return "evicted", f"its pod was evicted by the kubelet: {status.get('message') or 'node pressure'}"
    terminated = _termination(pod)
    if terminated.get("reason") == "OOMKilled":
        return "oom-killed", "its server ran out of memory (OOMKilled)"
    if status.get("phase") == "Failed":
        detail = _describe_exit(terminated) if terminated else status.get("reason") or "unknown"
        return "failed", f"its pod failed ({detail})"
    return "deleted", "its pod was deleted"


def _recent(times: Sequence[float], now: float, window_s: float) -> list[float]:
    return sorted(t for t in times if now - t <= window_s)


def _decide_lost(
    cause: LossCause,
    why: str,
    *,
    lost_at: float,
    rebuilds: Sequence[float],
    now: float,
    policy: HealingPolicy,
) -> HealingVerdict:
    if not policy.enabled:
        return HealingVerdict("give-up", f"The workspace stopped: {why}. Self-healing is off.", cause)
    recent = _recent(rebuilds, now, policy.window_s)
    if len(recent) >= len(policy.backoff_s):
        minutes = policy.window_s / 60
        return HealingVerdict(
            "give-up",
            f"The workspace stopped: {why}, and it was already rebuilt {len(recent)} time(s) in the "
            f"last {minutes:g} min. Your disk is kept; start the server again.",
            cause,
        )
    due = lost_at + policy.backoff_s[len(recent)]
    if now < due:
        return HealingVerdict("wait", f"Rebuilding in {due - now:.0f}s: {why}", cause, due - now)
    return HealingVerdict("rebuild", f"Rebuilding the workspace on the same disk: {why}", cause)


def decide_healing(
    pod: Mapping[str, Any] | None,
    *,
    last_seen: Mapping[str, Any] | None,
    stop_requested: bool,
    lost_at: float | None,
    rebuilds: Sequence[float],
    restarts: Sequence[float],
    now: float,
    policy: HealingPolicy,
) -> HealingVerdict:
    """What the poll of a running container workspace does with its pod (see the module docstring).

    ``pod`` is the watch cache's copy (None: gone); ``last_seen`` the last copy seen before (None: this
    hub never saw the pod, so it has nothing to rebuild from); ``lost_at`` when the loss was first seen;
    ``rebuilds`` and ``restarts`` the times of past rebuilds and observed in-place restarts.
    """
    if stop_requested:
        return HealingVerdict("stop", "A stop was requested")
    if pod is None or (pod.get("status") or {}).get("phase") == "Failed":
        cause, why = classify_loss(pod if pod is not None else last_seen)
        if pod is None and last_seen is None:
            return HealingVerdict(
                "give-up",
                "The workspace stopped: its pod is gone and this hub never saw it running, so it cannot "
                "be rebuilt with the same credentials. Your disk is kept; start the server again.",
                cause,
            )
        at = now if lost_at is None else lost_at
        return _decide_lost(cause, why, lost_at=at, rebuilds=rebuilds, now=now, policy=policy)
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        cause, why = classify_loss(pod)
        return HealingVerdict("wait", f"Waiting for the old pod to go: {why}", cause)
    if (pod.get("status") or {}).get("phase") == "Succeeded":
        return HealingVerdict("stop", "The server exited normally (shut down from inside)")
    return _decide_in_place(pod, restarts=restarts, now=now, policy=policy)


def _decide_in_place(
    pod: Mapping[str, Any], *, restarts: Sequence[float], now: float, policy: HealingPolicy
) -> HealingVerdict:
    """A pod that still exists: is its server running, or is the kubelet restarting it?"""
    status = _notebook_status(pod)
    state = status.get("state") or {}
    if not status or "running" in state:
        return HealingVerdict("running", "The server is running")
    if "terminated" not in state and not status.get("restartCount"):
        return HealingVerdict("running", "The server is starting")  # waiting for its first start
    terminated = _termination(pod)
    cause: LossCause = "oom-killed" if terminated.get("reason") == "OOMKilled" else "crashed"
    what = _describe_exit(terminated) if terminated else "not running"
    recent = _recent(restarts, now, policy.window_s)
    if policy.enabled and len(recent) < policy.max_restarts:
        return HealingVerdict("wait", f"The server exited ({what}); the kubelet restarts it", cause)
    return HealingVerdict(
        "give-up",
        f"The workspace stopped: its server exited {len(recent)} time(s) in the last "
        f"{policy.window_s / 60:g} min (last: {what}). Your disk is kept; check what your server runs at "
        "start (for example ~/.jupyter configuration), then start it again.",
        cause,
    )


_KEEP_METADATA = ("name", "namespace", "labels", "annotations")
# Written by the scheduler (nodeName) and by the Priority admission plugin from priorityClassName, which
# refuses a pod that brings its own differing value: left for them to compute again.
_COMPUTED_SPEC = ("nodeName", "priority", "preemptionPolicy")


def build_rebuilt_pod(old: Mapping[str, Any], *, rebuilds: int) -> dict[str, Any]:
    """A new pod for the workspace, from the last copy of the lost one: the same spec (server token,
    environment, home claim, resources), fresh metadata and status, and no node (the scheduler places it).
    """
    meta = old.get("metadata") or {}
    new_meta: dict[str, Any] = {k: copy.deepcopy(meta[k]) for k in _KEEP_METADATA if k in meta}
    new_meta.setdefault("annotations", {})
    new_meta["annotations"][ANN_REBUILD_OF] = str(meta.get("uid", ""))
    new_meta["annotations"]["gpuworkspace.dev/rebuilds"] = str(rebuilds)
    spec = copy.deepcopy(dict(old.get("spec") or {}))
    for computed in _COMPUTED_SPEC:
        spec.pop(computed, None)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": new_meta, "spec": spec}


def with_last_failure(status: dict[str, Any], failure: Mapping[str, Any] | None) -> dict[str, Any]:
    """A stopped workspace's status (``to_json``) with why self-healing gave up, for the home page."""
    if not failure or status.get("state") != "Stopped":
        return status
    detail = {**(status.get("detail") or {}), "lastFailure": dict(failure)}
    return {**status, "reason": str(failure.get("message") or status.get("reason", "")), "detail": detail}
