"""One pod's life on the simulated node, as the kubelet's pod worker runs it (``syncPod``/``SyncTerminatingPod``).

A :class:`PodWorker` is an asyncio task per pod: admit (GPU devices), set up volumes (waiting for
attachment), take a pod IP, then start init containers in order and the containers, pulling images and
applying restartPolicy with the kubelet's back-offs (CrashLoopBackOff, ImagePullBackOff); it writes status
after every step that changed it. On ``deletionTimestamp`` it stops the containers (SIGTERM, grace period,
SIGKILL), writes the terminal status, removes the pod's directories and deletes the pod with grace 0.
Every API write goes through the kubelet (:class:`NodeAgent`), which drops them while the node is cut off.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from ..store import Obj
from . import images, mountns, podenv, podlaunch, probes
from .devices import is_device_resource
from .imagepull import ImagePuller
from .lite_pool import LiteContainer, is_lite
from .podstatus import (
    ContainerRun,
    go_duration,
    pod_full_name,
    pod_phase,
    pod_status,
    restore_runs,
    rfc3339,
    terminated,
)
from .podvolumes import PodVolumes, VolumeNotReady
from .procs import ContainerProcess, run_once, start_error

log = logging.getLogger(__name__)
TERMINAL = ("Succeeded", "Failed")
MIN_GRACE_S = 2.0  # the kubelet's minimum grace period when a pod vanishes from the API


class NodeAgent(Protocol):
    """What a pod worker needs from its kubelet."""

    node: str
    node_ip: str
    config: Any
    volumes: PodVolumes
    host: podlaunch.HostInfo
    isolated: bool

    @property
    def devices(self) -> Any: ...

    def current_pod(self, namespace: str, name: str, uid: str) -> Obj | None: ...
    def record(self, pod: Obj, event_type: str, reason: str, message: str) -> None: ...
    def write_status(self, pod: Obj, status: Obj) -> bool: ...
    def delete_pod(self, pod: Obj) -> None: ...
    def env_sources(self) -> podenv.EnvSources: ...
    def allocate_ip(self, uid: str) -> str: ...
    def release_ip(self, uid: str) -> None: ...
    def pulled(self, ref: str) -> bool: ...
    def mark_pulled(self, ref: str) -> None: ...
    def pull_delay(self, image: str) -> float: ...
    def write_log(self, pod: Obj, container: str, text: str) -> None: ...
    def rotate_log(self, pod: Obj, container: str) -> None: ...
    def worker_done(self, worker: PodWorker) -> None: ...


class PodWorker:
    def __init__(self, agent: NodeAgent, pod: Obj, previous: asyncio.Task[None] | None) -> None:
        meta = pod["metadata"]
        self.k, self.ns, self.name, self.uid = agent, meta.get("namespace", ""), meta["name"], meta["uid"]
        self.last_pod = pod
        self.runs: dict[str, ContainerRun] = {}
        self.procs: dict[str, ContainerProcess] = {}
        self.probers: dict[str, asyncio.Task[None]] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.sandbox, self.pod_ip, self.start_time = False, "", ""
        self.dirs: dict[str, Any] = {}
        self.gpu_env: dict[str, dict[str, str]] = {}
        self.admitted = self.terminal = self.terminating = False
        self.waiting_attach = False
        self.evicted = ""  # the eviction manager's message, once it evicts the pod (sim/eviction.py)
        self.puller = ImagePuller(agent)
        self._written: Obj | None = None
        self._mount_since = 0.0
        self._wake = asyncio.Event()
        self._restore(pod)
        self.task = asyncio.create_task(
            self._run(previous), name=f"kubelet-{agent.node}-{self.ns}/{self.name}"
        )

    # ---------------------------------------------------------------- state
    def _restore(self, pod: Obj) -> None:
        """Pick up from the stored status (a kubelet restart): lost containers count as exits."""
        status = pod.get("status") or {}
        self.start_time = status.get("startTime", "")
        self.terminal = status.get("phase") in TERMINAL
        self.runs = restore_runs(pod, time.monotonic())

    def wake(self) -> None:
        self._wake.set()

    def _current(self) -> Obj | None:
        if self.k.isolated:
            return self.last_pod
        pod = self.k.current_pod(self.ns, self.name, self.uid)
        if pod is not None:
            self.last_pod = pod
        return pod

    def _spec_runs(self, pod: Obj) -> tuple[list[ContainerRun], list[ContainerRun]]:
        spec = pod.get("spec") or {}
        inits = [self.runs[c["name"]] for c in spec.get("initContainers") or [] if c["name"] in self.runs]
        return inits, [self.runs[c["name"]] for c in spec.get("containers") or [] if c["name"] in self.runs]

    # ----------------------------------------------------------------- loop
    async def _run(self, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:  # the pod that had this name is still terminating
            await asyncio.wait([previous])  # however it ends; a cancellation of this task still propagates
        try:
            while True:
                pod = self._current()
                if pod is None or pod["metadata"].get("deletionTimestamp"):
                    await self._terminate(pod)
                    return
                try:
                    delay = await self._sync(pod)
                    self.flush()
                except Exception:
                    log.exception(
                        "devcluster kubelet %s: syncing %s/%s failed", self.k.node, self.ns, self.name
                    )
                    delay = 1.0
                await self._sleep(delay)
        finally:
            self.k.worker_done(self)

    async def _sleep(self, delay: float | None) -> None:
        if not self._wake.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
        self._wake.clear()

    async def _sync(self, pod: Obj) -> float | None:
        if self.terminal:
            return None
        if self.evicted:
            await self._kill_evicted(pod)
            return None
        if not self.admitted:
            self.admitted = self._admit(pod)
            if not self.admitted:
                return None
        if not self.start_time:
            self.start_time = rfc3339()
        if not self.sandbox:
            retry = self._setup_sandbox(pod)
            if retry is not None:
                return retry
        else:  # the kubelet's remount: ConfigMap, Secret, downward API and projected files follow their sources
            self.k.volumes.refresh(pod, self.k.env_sources())
        return await self._sync_containers(pod)

    def flush(self, *, terminal: bool = False) -> None:
        """Write the status when it differs from what was last written."""
        pod = self.last_pod if self.k.isolated else self.k.current_pod(self.ns, self.name, self.uid)
        if pod is None or self.k.isolated:
            return
        inits, mains = self._spec_runs(pod)
        policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
        status = pod_status(
            pod.get("status") or {},
            ips=(self.k.node_ip, self.pod_ip if self.sandbox else ""),
            start_time=self.start_time or rfc3339(),
            sandbox=self.sandbox,
            inits=inits,
            mains=mains,
            policy=policy,
            terminal=terminal,
        )
        if self.evicted:  # evictPod's status: Failed, reason Evicted, the manager's message
            status.update(phase="Failed", reason="Evicted", message=self.evicted)
        if status != self._written and self.k.write_status(pod, status):
            self._written = status
        if status["phase"] in TERMINAL and not self.terminal:
            self.terminal = True
            self._release_devices()

    # ------------------------------------------------------------ admission
    def _admit(self, pod: Obj) -> bool:
        devices = self.k.devices
        if devices is None:
            return True
        spec = pod.get("spec") or {}
        try:
            for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
                for resource, qty in ((c.get("resources") or {}).get("limits") or {}).items():
                    if not is_device_resource(resource):
                        continue
                    refs = devices.allocate(
                        self.k.node,
                        self.uid,
                        resource,
                        int(qty),
                        namespace=self.ns,
                        pod=self.name,
                        container=c["name"],
                    )
                    env = self.gpu_env.setdefault(c["name"], {})
                    ids = [
                        *filter(None, env.get("NVIDIA_VISIBLE_DEVICES", "").split(",")),
                        *(r.visible_id for r in refs),
                    ]
                    env["NVIDIA_VISIBLE_DEVICES"] = ",".join(ids)
        except Exception as exc:  # DeviceUnavailable: the kubelet rejects the pod
            self._release_devices()
            message = str(exc)
            self.k.record(pod, "Warning", "UnexpectedAdmissionError", message)
            status = {
                **(pod.get("status") or {}),
                "phase": "Failed",
                "reason": "UnexpectedAdmissionError",
                "message": f"Pod was rejected: {message}",
                "startTime": rfc3339(),
            }
            self.k.write_status(pod, status)
            self.terminal = True
            return False
        return True

    def _release_devices(self) -> None:
        if self.k.devices is not None:
            with contextlib.suppress(Exception):
                self.k.devices.release(self.uid)

    def _setup_sandbox(self, pod: Obj) -> float | None:
        cfg = self.k.config
        try:
            self.dirs = self.k.volumes.prepare(pod, self.k.env_sources())
        except VolumeNotReady as exc:
            self.waiting_attach = bool(exc.unattached)
            now = time.monotonic()
            self._mount_since = self._mount_since or now
            if exc.event:
                self.k.record(pod, "Warning", "FailedMount", exc.event)
            elif now - self._mount_since >= cfg.mount_timeout_s:
                self._mount_since = now
                names = " ".join(v["name"] for v in (pod.get("spec") or {}).get("volumes") or [])
                unattached = names if exc.unattached else ""
                self.k.record(
                    pod,
                    "Warning",
                    "FailedMount",
                    f"Unable to attach or mount volumes: unmounted volumes=[{names}], "
                    f"unattached volumes=[{unattached}]: timed out waiting for the condition",
                )
            return float(cfg.volume_retry_s)
        self.waiting_attach = False
        host_network = bool((pod.get("spec") or {}).get("hostNetwork"))
        self.pod_ip = self.k.node_ip if host_network else self.k.allocate_ip(self.uid)
        self.sandbox = True
        return None

    # ------------------------------------------------------------ containers
    async def _sync_containers(self, pod: Obj) -> float | None:
        spec = pod.get("spec") or {}
        policy = spec.get("restartPolicy") or "Always"
        inits, mains = self._spec_runs(pod)
        for c, run in zip(spec.get("initContainers") or [], inits, strict=True):
            if run.running or (run.succeeded() and run.waiting is None):
                if run.running:
                    return None
                continue
            for main in mains:
                if not main.container_id:
                    main.waiting = ("PodInitializing", "")
            return await self._start_if_due(pod, c, run, policy)
        delays = []
        for c, run in zip(spec.get("containers") or [], mains, strict=True):
            if not run.running:
                delay = await self._start_if_due(pod, c, run, policy)
                if delay is not None:
                    delays.append(delay)
        return min(delays, default=None)

    async def _start_if_due(self, pod: Obj, c: Obj, run: ContainerRun, policy: str) -> float | None:
        cfg = self.k.config
        if run.terminated is not None:
            if policy == "Never" or (policy == "OnFailure" and run.terminated.get("exitCode") == 0):
                run.waiting = None
                return None
            now = time.monotonic()
            if run.crash_backoff_s > 0:
                until = run.finished_mono + run.crash_backoff_s
                if now < until:
                    if run.waiting is None or run.waiting[0] != "CrashLoopBackOff":
                        full = pod_full_name(pod)
                        wait = go_duration(run.crash_backoff_s)
                        run.waiting = (
                            "CrashLoopBackOff",
                            f"back-off {wait} restarting failed container={c['name']} pod={full}",
                        )
                        run.last_terminated = run.terminated
                        msg = f"Back-off restarting failed container {c['name']} in pod {full}"
                        self.k.record(pod, "Warning", "BackOff", msg)
                    return until - now
                run.crash_backoff_s = min(run.crash_backoff_s * 2, cfg.backoff_max_s)
            else:
                run.crash_backoff_s = cfg.backoff_base_s
        ready, delay = await self.puller.ensure(pod, c, run)
        if not ready:
            return delay
        current = self._current()
        if current is None or current["metadata"].get("deletionTimestamp"):
            return 0.0  # deleted while pulling: the loop terminates the pod
        return self._launch(pod, c, run)

    def _launch(self, pod: Obj, c: Obj, run: ContainerRun) -> float | None:
        info = images.lookup(c.get("image", ""))
        assert info is not None
        try:
            ips = {"podIP": self.pod_ip, "podIPs": [{"ip": self.pod_ip}], "hostIP": self.k.node_ip}
            ips["hostIPs"] = [{"ip": self.k.node_ip}]
            seen = {
                **pod,
                "status": {**(pod.get("status") or {}), **ips},
            }  # the IPs as the kubelet knows them
            own = podenv.build_env(seen, c, self.k.env_sources())
        except podenv.EnvError as exc:
            self.k.record(pod, "Warning", "Failed", f"Error: {exc.message}")
            run.waiting = ("CreateContainerConfigError", exc.message)
            return float(self.k.config.volume_retry_s)
        own.update(self.gpu_env.get(c["name"], {}))
        mounts = self.k.volumes.mounts(pod, c, self.dirs, own)
        plan = podlaunch.plan(pod, c, info, own, mounts, self.pod_ip, self.k.host)
        for path in () if plan.namespaced else (plan.cwd, plan.env["HOME"]):  # the launcher makes its own
            with contextlib.suppress(OSError):
                os.makedirs(path, exist_ok=True)
        if run.container_id:  # a new instance of a container that ran before
            run.restart_count += 1
            run.last_terminated = run.terminated or run.last_terminated
            self.k.rotate_log(pod, c["name"])
        run.container_id = secrets.token_hex(32)
        run.terminated, run.waiting, run.ready = None, None, False
        run.mounts = [
            {
                "name": m["name"],
                "mountPath": m["mountPath"],
                **({"readOnly": True} if m.get("readOnly") else {}),
            }
            for m in c.get("volumeMounts") or []
        ]
        self.k.record(pod, "Normal", "Created", f"Created container: {c['name']}")
        pool = getattr(self.k, "lite_pool", None)  # lite servers: a listener in the node's shared process
        lite = pool is not None and is_lite(plan.argv)
        proc = (
            functools.partial(LiteContainer, pool)
            if lite
            else functools.partial(ContainerProcess, namespaced=plan.namespaced)
        )(
            plan.argv,
            plan.env,
            plan.cwd,
            run.container_id,
            lambda text: self.k.write_log(pod, c["name"], text),
        )
        exe = mountns.command_of(plan.argv) if plan.namespaced else plan.argv[:1]
        try:
            if not exe:
                raise FileNotFoundError("no command specified")
            if plan.namespaced and not mountns.find_executable(
                mounts, exe[0], plan.env, mountns.is_executable
            ):
                raise FileNotFoundError(exe[0])
            proc.start()
        except OSError as exc:
            message = start_error(exe[0] if exe else "", exc)
            self.k.record(pod, "Warning", "Failed", f"Error: {message}")
            run.terminated = terminated(
                128, None, rfc3339(), run.container_id, reason="StartError", message=message
            )
            run.finished_mono = time.monotonic()
            return 0.0
        self.k.record(pod, "Normal", "Started", f"Started container {c['name']}")
        run.started_at, run.started = rfc3339(), not c.get("startupProbe")
        self.procs[c["name"]] = proc
        self._spawn(self._watch_exit(pod, c, run, proc))
        if not run.init:
            self.probers[c["name"]] = self._spawn(self._probe(pod, c, run, proc))
        return None

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _watch_exit(self, pod: Obj, c: Obj, run: ContainerRun, proc: ContainerProcess) -> None:
        await proc.exited.wait()
        await proc.finish()
        if self.procs.get(c["name"]) is not proc:
            return
        del self.procs[c["name"]]
        prober = self.probers.pop(c["name"], None)
        if prober is not None:
            prober.cancel()
        code = proc.returncode if proc.returncode is not None else 137
        oom = "OOMKilled" if getattr(proc, "oom_killed", False) else ""
        run.terminated = terminated(
            code, run.started_at, rfc3339(proc.finished_ns), run.container_id, reason=oom
        )
        run.started_at, run.ready, run.started, run.waiting = None, False, False, None
        run.finished_mono = time.monotonic()
        if (proc.finished_ns - proc.started_ns) / 1e9 >= self.k.config.backoff_reset_s:
            run.crash_backoff_s = 0.0
        self.wake()

    async def _probe(self, pod: Obj, c: Obj, run: ContainerRun, proc: ContainerProcess) -> None:
        def ready(value: bool) -> None:
            run.ready = value
            self.wake()

        def started() -> None:
            run.started = True
            self.wake()

        def unhealthy(kind: str, message: str) -> None:
            self.k.record(self.last_pod, "Warning", "Unhealthy", f"{kind} probe failed: {message}")

        def kill(why: str) -> None:
            self.k.record(
                self.last_pod, "Normal", "Killing", f"Container {c['name']} {why}, will be restarted"
            )
            grace = float((self.last_pod.get("spec") or {}).get("terminationGracePeriodSeconds") or 30)
            self._spawn(_discard(proc.stop(grace)))

        callbacks: dict[str, Callable[..., None]] = {
            "on_ready": ready,
            "on_started": started,
            "on_unhealthy": unhealthy,
            "on_kill": kill,
        }
        prober = probes.Prober(
            c, self.pod_ip, self._exec_runner(c, proc), callbacks, self.k.config.probe_period_cap_s
        )
        await prober.run()

    def _exec_runner(self, c: Obj, proc: ContainerProcess) -> probes.ExecRun:
        info = images.lookup(c.get("image", ""))
        host = self.k.host

        async def run(argv: list[str], limit_s: float) -> tuple[int, str]:
            assert info is not None
            cmd = images.host_command(
                info, argv, proc.env, python=host.python, bin_dir=host.bin_dir, exists=host.exists
            )
            prefix = proc.enter_prefix() if isinstance(proc, ContainerProcess) else []
            return await run_once([*prefix, *cmd.argv], proc.env, Path("/") if prefix else proc.cwd, limit_s)

        return run

    # ----------------------------------------------------------- termination
    async def _terminate(self, pod: Obj | None) -> None:
        self.terminating = True
        gone = pod is None
        source = pod or self.last_pod
        for prober in self.probers.values():
            prober.cancel()
        running = [p for p in self.procs.values() if p.running]
        for name, proc in self.procs.items():
            if proc.running:
                self.k.record(source, "Normal", "Killing", f"Stopping container {name}")
        meta, spec = source["metadata"], source.get("spec") or {}
        grace = (
            MIN_GRACE_S
            if gone
            else float(meta.get("deletionGracePeriodSeconds", spec.get("terminationGracePeriodSeconds", 30)))
        )
        begun = time.monotonic()
        for proc in running:
            proc.signal(signal.SIGTERM)
        while any(p.running for p in running):
            left = begun + grace - time.monotonic()
            if left <= 0:
                break
            await self._sleep_until_exit(running, left)
            now_pod = self._current()
            if now_pod is None and not gone:
                gone, grace = True, min(grace, time.monotonic() - begun + MIN_GRACE_S)
            elif now_pod is not None:
                grace = min(grace, float(now_pod["metadata"].get("deletionGracePeriodSeconds", grace)))
        for proc in list(self.procs.values()):
            await proc.finish()
        await asyncio.gather(*list(self.tasks), return_exceptions=True)
        self._release_devices()
        if not gone and self._current() is not None and not self.k.isolated:
            self.flush(terminal=True)
            self.k.volumes.cleanup(source)
            self.k.delete_pod(source)
        elif not self.k.isolated:
            self.k.volumes.cleanup(source)
        self.k.release_ip(self.uid)

    def evict(self, message: str) -> None:
        """The eviction manager's ``evictPod``: the pod's containers are killed and it ends ``Failed``."""
        if not self.evicted and not self.terminal:
            self.evicted = message
            self.k.record(self.last_pod, "Warning", "Evicted", message)
            self.wake()

    async def _kill_evicted(self, pod: Obj) -> None:
        """``killPodFunc`` with grace period 0: SIGKILL, wait for the exits, then the terminal status."""
        for prober in self.probers.values():
            prober.cancel()
        for name, proc in self.procs.items():
            if proc.running:
                self.k.record(pod, "Normal", "Killing", f"Stopping container {name}")
                proc.signal(signal.SIGKILL)
        for proc in list(self.procs.values()):
            await proc.finish()
        await asyncio.gather(*list(self.tasks), return_exceptions=True)
        for run in self.runs.values():
            run.waiting = None  # nothing restarts: the pod is over
        self.flush(terminal=True)

    async def _sleep_until_exit(self, procs: list[ContainerProcess], limit_s: float) -> None:
        waits = [asyncio.ensure_future(p.exited.wait()) for p in procs if p.running]
        waits.append(asyncio.ensure_future(self._wake.wait()))
        try:
            await asyncio.wait(waits, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            self._wake.clear()

    # ------------------------------------------------------------- controls
    def signal_all(self, sig: int, *, oom: bool = False) -> int:
        """Deliver ``sig`` to every running container (fault injection: a crash or an OOM kill).

        ``oom``: the kernel's OOM killer did it, so the termination says ``OOMKilled`` (exit code 137,
        SIGKILL), as containerd's CRI plugin reports it (``oomExitReason``) and the kubelet copies it.
        """
        running = [p for p in self.procs.values() if p.running]
        for proc in running:
            if oom:
                proc.oom_killed = True
            proc.signal(sig)
        return len(running)

    def kill_now(self) -> None:
        """Shutdown: stop everything at once, writing nothing."""
        self.task.cancel()
        for task in list(self.tasks):
            task.cancel()
        for proc in list(self.procs.values()):
            proc.kill_now()

    def phase(self) -> str:
        inits, mains = self._spec_runs(self.last_pod)
        return pod_phase(
            inits, mains, (self.last_pod.get("spec") or {}).get("restartPolicy") or "Always", False
        )


async def _discard(coro: Awaitable[Any]) -> None:
    await coro
