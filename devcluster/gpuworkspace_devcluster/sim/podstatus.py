"""Pod status as the kubelet computes it (``generateAPIPodStatus``, ``getPhase``). Pure.

:class:`ContainerRun` is the kubelet's record of one container (what its runtime would report);
:func:`pod_status` turns those records into ``status`` (phase, conditions, container statuses), keeping
the fields other writers own (``PodScheduled``, ``DisruptionTarget``, ``nominatedNodeName``, ``qosClass``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")


def rfc3339(ns: int | None = None) -> str:
    when = datetime.now(UTC) if ns is None else datetime.fromtimestamp(ns / 1e9, UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def go_duration(seconds: float) -> str:
    """Go's ``time.Duration.String()`` of a duration truncated to milliseconds: ``177ms``, ``1.2s``, ``1m20s``."""
    ms = int(seconds * 1000)
    if ms <= 0:
        return "0s"
    if ms < 1000:  # noqa: PLR2004
        return f"{ms}ms"
    hours, rem = divmod(ms, 3_600_000)
    minutes, rem = divmod(rem, 60_000)
    secs, frac = divmod(rem, 1000)
    text = f"{secs}" + (f".{frac:03d}".rstrip("0") if frac else "") + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    return f"{minutes}m{text}" if minutes else text


def pod_full_name(pod: Obj) -> str:
    """``format.Pod``: ``name_namespace(uid)``."""
    meta = pod["metadata"]
    return f"{meta['name']}_{meta.get('namespace', '')}({meta.get('uid', '')})"


@dataclass
class ContainerRun:
    """One container as the runtime knows it, plus the kubelet's back-off bookkeeping."""

    name: str
    image: str
    init: bool = False
    image_ref: str = ""  # normalized, once pulled
    image_id: str = ""
    container_id: str = ""
    restart_count: int = 0
    waiting: tuple[str, str] | None = ("ContainerCreating", "")  # (reason, message)
    started_at: str | None = None  # running since
    terminated: Obj | None = None
    last_terminated: Obj | None = None
    ready: bool = False
    started: bool = False
    crash_backoff_s: float = 0.0
    finished_mono: float = 0.0
    resources: Obj = field(default_factory=dict)
    mounts: list[Obj] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.started_at is not None

    def succeeded(self) -> bool:
        return self.terminated is not None and self.terminated.get("exitCode") == 0

    def state(self) -> Obj:
        if self.started_at is not None:
            return {"running": {"startedAt": self.started_at}}
        if self.terminated is not None and self.waiting is None:
            return {"terminated": dict(self.terminated)}
        reason, message = self.waiting or ("ContainerCreating", "")
        return {"waiting": {"reason": reason, **({"message": message} if message else {})}}

    def status(self) -> Obj:
        out: Obj = {
            "name": self.name,
            "state": self.state(),
            "lastState": {"terminated": dict(self.last_terminated)} if self.last_terminated else {},
            "ready": self.ready and self.running,
            "restartCount": self.restart_count,
            "image": self.image_ref or self.image,
            "imageID": self.image_id,
            "started": self.started and self.running,
        }
        if self.container_id:
            out["containerID"] = f"containerd://{self.container_id}"
        if self.resources and not self.init:
            out["resources"] = dict(self.resources)
        if self.mounts:
            out["volumeMounts"] = list(self.mounts)
        return out


def terminated(code: int, started_at: str | None, finished_at: str, container_id: str, **extra: str) -> Obj:
    """A ``state.terminated``: reason Completed for 0, Error otherwise (unless given, e.g. StartError)."""
    reason = extra.pop("reason", "") or ("Completed" if code == 0 else "Error")
    out: Obj = {"exitCode": code, "reason": reason}
    if extra.get("message"):
        out["message"] = extra["message"]
    out.update(
        startedAt=started_at or finished_at,
        finishedAt=finished_at,
        containerID=f"containerd://{container_id}",
    )
    return out


def restore_runs(pod: Obj, now_mono: float) -> dict[str, ContainerRun]:
    """Container records rebuilt from a stored status. A container the status shows running has no process
    any more (the kubelet restarted, as after a node reboot): it counts as exited with 255 ``Unknown``."""
    status, spec = pod.get("status") or {}, pod.get("spec") or {}
    stored = {
        cs["name"]: cs
        for key in ("initContainerStatuses", "containerStatuses")
        for cs in status.get(key) or []
    }
    runs: dict[str, ContainerRun] = {}
    for init, key in ((True, "initContainers"), (False, "containers")):
        for c in spec.get(key) or []:
            run = ContainerRun(
                c["name"], c.get("image", ""), init=init, resources=dict(c.get("resources") or {})
            )
            cs = stored.get(c["name"])
            if cs is not None and cs.get("containerID"):
                run.restart_count = int(cs.get("restartCount") or 0)
                run.container_id = cs["containerID"].split("://", 1)[-1]
                run.last_terminated = (cs.get("lastState") or {}).get("terminated")
                state = cs.get("state") or {}
                run.terminated = (
                    state.get("terminated") or ("waiting" in state and run.last_terminated) or None
                )
                if "running" in state or run.terminated is None:
                    started = (state.get("running") or {}).get("startedAt")
                    run.terminated = terminated(255, started, rfc3339(), run.container_id, reason="Unknown")
                run.waiting, run.finished_mono = None, now_mono
            runs[c["name"]] = run
    return runs


def pod_phase(
    inits: Sequence[ContainerRun], mains: Sequence[ContainerRun], policy: str, terminal: bool
) -> str:
    """``getPhase``: init containers gate Pending; then running/stopped/waiting counts decide."""
    for run in inits:
        if run.succeeded():
            continue
        failed_for_good = run.terminated is not None and run.waiting is None and policy == "Never"
        return "Failed" if failed_for_good else "Pending"
    running = sum(1 for r in mains if r.running)
    waiting = sum(1 for r in mains if not r.running and r.waiting is not None and r.last_terminated is None)
    stopped = [
        r for r in mains if not r.running and (r.terminated is not None or r.last_terminated is not None)
    ]
    if waiting and not terminal:
        return "Pending"
    if running and not terminal:
        return "Running"
    if not stopped and not terminal:
        return "Pending"
    succeeded = all(_last_exit(r) == 0 for r in stopped) and not running and not waiting
    if terminal or policy == "Never":
        return "Succeeded" if succeeded else "Failed"
    if policy == "OnFailure" and succeeded:
        return "Succeeded"
    return "Running"  # Always (or OnFailure with failures): being restarted


def _last_exit(run: ContainerRun) -> int:
    term = run.terminated if run.terminated is not None else run.last_terminated
    return int((term or {}).get("exitCode", 1))


def conditions(
    old: Sequence[Obj],
    *,
    sandbox: bool,
    inits: Sequence[ContainerRun],
    mains: Sequence[ContainerRun],
    phase: str,
) -> list[Obj]:
    """The kubelet's four pod conditions (transition times kept while unchanged) plus the others kept."""
    now = rfc3339()
    done = phase in ("Succeeded", "Failed")
    pending_init = [r.name for r in inits if not r.succeeded()]
    unready = [r.name for r in mains if not (r.ready and r.running)]
    rows: list[tuple[str, bool, str, str]] = [("PodReadyToStartContainers", sandbox and not done, "", "")]
    if pending_init and not done:
        msg = f"containers with incomplete status: [{' '.join(pending_init)}]"
        rows.append(("Initialized", False, "ContainersNotInitialized", msg))
    else:
        rows.append(("Initialized", True, "", ""))
    if done:
        rows += [("Ready", False, "PodCompleted", ""), ("ContainersReady", False, "PodCompleted", "")]
    elif unready:
        msg = f"containers with unready status: [{' '.join(unready)}]"
        rows += [
            ("Ready", False, "ContainersNotReady", msg),
            ("ContainersReady", False, "ContainersNotReady", msg),
        ]
    else:
        rows += [("Ready", True, "", ""), ("ContainersReady", True, "", "")]
    previous = {c.get("type"): c for c in old}
    out = []
    for kind, ok, reason, message in rows:
        status = "True" if ok else "False"
        prev = previous.get(kind) or {}
        when = prev.get("lastTransitionTime") if prev.get("status") == status else now
        cond: Obj = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": when or now}
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        out.append(cond)
    return out + [c for c in old if c.get("type") not in KUBELET_CONDITIONS]


def pod_status(
    old: Obj,
    *,
    ips: tuple[str, str],
    start_time: str,
    sandbox: bool,
    inits: Sequence[ContainerRun],
    mains: Sequence[ContainerRun],
    policy: str,
    terminal: bool = False,
) -> Obj:
    """The whole ``status`` the kubelet writes (``ips``: host, pod); fields it does not own are kept from ``old``."""
    host_ip, pod_ip = ips
    phase = pod_phase(inits, mains, policy, terminal)
    status: Obj = {k: v for k, v in old.items() if k in ("nominatedNodeName", "qosClass", "resize")}
    status.update(
        phase=phase,
        conditions=conditions(
            old.get("conditions") or [], sandbox=sandbox, inits=inits, mains=mains, phase=phase
        ),
        hostIP=host_ip,
        hostIPs=[{"ip": host_ip}],
        startTime=start_time,
    )
    if pod_ip:
        status.update(podIP=pod_ip, podIPs=[{"ip": pod_ip}])
    if inits:
        status["initContainerStatuses"] = [r.status() for r in inits]
    status["containerStatuses"] = [r.status() for r in mains]
    return status
