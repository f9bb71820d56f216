"""Self-healing container workspaces: the I/O half of :mod:`.lifecycle.healing` (a spawner mixin).

JupyterHub polls a running server every ``Spawner.poll_interval`` seconds. For a container workspace
the poll reads the pod from KubeSpawner's pod watch cache and asks :func:`decide_healing` what to do.
A pod lost to anything but a stop (``kubectl delete pod``, an eviction or node drain, the node's loss,
a ``Failed`` pod after an OOM kill under ``restartPolicy: Never``) is rebuilt from the last copy of it
this hub saw: the same server token and environment, the same home claim. Before the new pod is created
the fencing check runs (it refuses a disk that another, unreachable node may still write to); once the
new pod is Ready the hub's server record and the proxy route follow its new IP. Each rebuild is audited
(``workspace-rebuilt``) and counted in ``gpuworkspace_workspace_rebuilds_total{reason}``; a workspace
that keeps failing gives up (``workspace-rebuild-failed``, ``gpuworkspace_workspace_heal_failures_total``)
and the reason is kept in the hub state for the home page.

``stop()`` marks the stop before it deletes anything, so a stop by the user, an admin or the culler is
never undone.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import Counter
from traitlets import Bool, Float, Integer, List
from traitlets.config import LoggingConfigurable

from .compat import SpawnException
from .k8s import KubernetesError, NotFound, gateway
from .k8s.reflectors import remembering
from .lifecycle.healing import HealingPolicy, HealingVerdict, build_rebuilt_pod, decide_healing
from .lifecycle.spawning import decide_spawn_failure, is_ready

REBUILDS = Counter(
    "gpuworkspace_workspace_rebuilds_total",
    "Container workspace pods rebuilt after they were lost to something other than a stop",
    ["reason"],
)
HEAL_FAILURES = Counter(
    "gpuworkspace_workspace_heal_failures_total",
    "Container workspaces that stopped because they kept failing (or could not be rebuilt)",
    ["reason"],
)
FAILURE_KEY = "lastFailure"  # in the spawner's hub state (``gpuworkspace``): shown on the home page


class SelfHealing(LoggingConfigurable):
    """Mixed into GPUWorkspaceSpawner before KubeSpawner; container workspaces only."""

    self_healing = Bool(
        True,
        help="""
        Rebuild a running container workspace whose pod was deleted, evicted or failed, on the same home
        disk, with the same server token; the user keeps their URL and their files. A stop by the user,
        an admin or the idle culler is never undone. False: such a workspace is shown as stopped, with
        the reason, as plain KubeSpawner does (without the reason). VM workspaces are restarted by
        KubeVirt (``runStrategy: Always``) either way. See :doc:`/how-to/self-healing`.
        """,
    ).tag(config=True)

    heal_backoff = List(
        Float(),
        default_value=[0.0, 10.0, 60.0],
        help="""
        Seconds to wait before each rebuild, counted within ``heal_window``: the first loss is rebuilt
        after ``heal_backoff[0]`` seconds, the second after ``heal_backoff[1]``, and so on. One loss more
        than the list is long stops the workspace with the reason shown to the user. ``[]`` never
        rebuilds (like ``self_healing = False``).
        """,
    ).tag(config=True)

    heal_window = Float(
        1800.0,
        help="Seconds over which rebuilds (``heal_backoff``) and in-place restarts (``heal_max_restarts``) count.",
    ).tag(config=True)

    heal_max_restarts = Integer(
        3,
        min=0,
        help="""
        In-place restarts of the server container by the kubelet (``restartPolicy: OnFailure``, the
        kubelet's own CrashLoopBackOff: 10 s, 20 s, 40 s … 5 min) within ``heal_window`` after which a
        workspace whose server is still not running is stopped, with its last exit reason shown.
        """,
    ).tag(config=True)

    # provided by GPUWorkspaceSpawner / KubeSpawner
    api: Any
    namespace: str
    pod_name: str
    pvc_name: str
    workspace_state: dict[str, Any]
    k8s_api_request_timeout: int
    unschedulable_timeout: float
    attach_failure_timeout: float
    start_timeout: int
    server: Any
    user: Any
    name: str
    db: Any
    events: Any
    _audit: Any
    _check_fencing: Any
    _claim: Any
    _pod: Any
    _get_pod_url: Any
    _record_last_node: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._reset_healing()
        super().__init__(*args, **kwargs)

    def _reset_healing(self) -> None:
        """A start (or a fresh spawner object) begins with a clean history."""
        self._stop_requested = False
        self._last_pod: dict[str, Any] | None = None
        self._lost_at: float | None = None
        self._rebuilds: list[float] = []
        self._restarts: list[float] = []
        self._restart_count = 0
        self._heal_task: asyncio.Task[None] | None = None
        self._gave_up = False
        self._stopped_after_give_up = False
        self._last_gone: dict[str, Any] | None = None

    async def _start_reflector(
        self, kind: str, reflector_class: Any, replace: bool = False, **kwargs: Any
    ) -> Any:
        """Pods are watched by a reflector that remembers the last copy of a deleted pod (its cause)."""
        if kind == "pods":
            reflector_class = remembering(reflector_class)
        return await super()._start_reflector(  # type: ignore[misc]
            kind=kind, reflector_class=reflector_class, replace=replace, **kwargs
        )

    def _gone_pod(self) -> dict[str, Any] | None:
        """The pod reflector's last copy of this workspace's pod, if a watch saw it deleted."""
        cache = getattr(getattr(self, "pod_reflector", None), "resources", None)
        gone = getattr(cache, "gone", {}).get(f"{self.namespace}/{self.pod_name}")
        last_uid = ((self._last_pod or {}).get("metadata") or {}).get("uid")
        return gone if gone is not None and (gone.get("metadata") or {}).get("uid") == last_uid else None

    def _healing_policy(self) -> HealingPolicy:
        return HealingPolicy(
            enabled=bool(self.self_healing and self.heal_backoff),
            backoff_s=tuple(float(s) for s in self.heal_backoff),
            window_s=float(self.heal_window),
            max_restarts=int(self.heal_max_restarts),
        )

    # --- poll and stop ---------------------------------------------------------------------------

    async def poll(self) -> int | None:
        if self._gave_up:  # JupyterHub polls again while it stops the server: decide (and audit) once
            await self._stop_after_giving_up()
            return 1
        await self._start_watching_pods()  # type: ignore[attr-defined]
        pod = self._pod()
        verdict = self._decide(pod)
        if verdict.action in ("running", "stop"):
            if verdict.action == "running" and pod is not None and is_ready(pod):
                await self._reroute(pod)  # after in-place restarts the pod may answer elsewhere
            result: int | None = await super().poll()  # type: ignore[misc]
            return result
        if verdict.action == "give-up":
            await self._give_up(verdict)
            await self._stop_after_giving_up()
            return 1
        if verdict.cause is not None and (pod is None or _failed(pod)) and self._heal_task is None:
            self._heal_task = asyncio.ensure_future(self._rebuild(verdict))
        self.log.info("Workspace %s: %s", self.pod_name, verdict.reason)
        return None

    def _remember_pod(self, pod: dict[str, Any] | None) -> None:
        """Keep the last copy of the pod (what a rebuild is made from) and count in-place restarts."""
        if pod is None:
            gone = self._gone_pod()  # seen terminating by the watch, between two polls
            if gone is not None and gone is not self._last_gone:
                self._last_gone, self._last_pod = gone, copy.deepcopy(gone)
            return
        now = time.monotonic()
        count = _restart_count(pod)
        if self._last_pod is not None:
            self._restarts += [now] * max(0, count - self._restart_count)
        self._restart_count = count
        self._last_pod = copy.deepcopy(pod)

    def _decide(self, pod: dict[str, Any] | None) -> HealingVerdict:
        """Observe, then decide."""
        self._remember_pod(pod)
        now = time.monotonic()
        if self._heal_task is not None:
            return HealingVerdict("wait", "A rebuild is in progress")
        verdict = decide_healing(
            pod,
            last_seen=self._last_pod,
            # JupyterHub's User.stop sets _stop_pending, then polls, then calls stop(): already a stop
            stop_requested=self._stop_requested or bool(getattr(self, "_stop_pending", False)),
            lost_at=self._lost_at,
            rebuilds=self._rebuilds,
            restarts=self._restarts,
            now=now,
            policy=self._healing_policy(),
        )
        lost = pod is None or _failed(pod) or bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        if verdict.action == "running":
            self._lost_at = None
        elif verdict.action in ("wait", "rebuild") and lost and self._lost_at is None:
            self._lost_at = now  # the back-off counts from when the loss was first seen
        return verdict

    async def stop(self, now: bool = False) -> None:
        self._stop_requested = True  # before anything is deleted: a stop is never undone
        task, self._heal_task = self._heal_task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await super().stop(now=now)  # type: ignore[misc]

    # --- rebuild ---------------------------------------------------------------------------------

    async def _rebuild(self, verdict: HealingVerdict) -> None:
        """The rebuild task: wait out the back-off, rebuild, wait until the new pod serves."""
        try:
            await asyncio.sleep(verdict.wait_s)
            await self._rebuild_pod(verdict)
        except SpawnException as exc:
            failed = HealingVerdict("give-up", f"The workspace stopped: {exc.message}", verdict.cause)
            await self._give_up(failed)
        except (KubernetesError, TimeoutError) as exc:  # the next poll decides again
            self.log.warning("Rebuilding %s failed, will retry: %s", self.pod_name, exc)
        finally:
            if asyncio.current_task() is self._heal_task:
                self._heal_task = None

    async def _rebuild_pod(self, verdict: HealingVerdict) -> None:
        timeout = self.k8s_api_request_timeout
        old = self._pod()
        if self._stop_requested or (old is not None and not _failed(old)):
            return  # stopped meanwhile, or a pod is back (created by someone else): the next poll decides
        if old is not None:  # a Failed pod holds the name: delete it first
            with contextlib.suppress(NotFound):
                await gateway.delete_pod(
                    self.api, self.namespace, self.pod_name, grace_s=0, request_timeout=timeout
                )
            await self._wait_for(lambda: self._pod() is None, "the failed pod to go")
        await self._check_fencing(self.pvc_name, own_uids=frozenset())
        if self._stop_requested or self._last_pod is None:
            return
        self._rebuilds.append(time.monotonic())
        body = build_rebuilt_pod(self._last_pod, rebuilds=len(self._rebuilds))
        created = await gateway.create_pod(self.api, self.namespace, body, request_timeout=timeout)
        self._lost_at, self._restart_count = None, 0
        reason = verdict.cause or "deleted"
        REBUILDS.labels(reason=reason).inc()
        message = f"Rebuilt on home disk {self.pvc_name} ({reason}): {verdict.reason.split(': ', 1)[-1]}"
        await self._audit("workspace-rebuilt", "Pod", self.pod_name, message, created)
        await self._wait_until_serving()

    async def _wait_until_serving(self) -> None:
        """Wait for the rebuilt pod to be Ready (failing early like a start), then move the route to it."""
        started = time.monotonic()
        while True:
            pod = self._pod()
            if self._stop_requested:
                return
            if pod is not None and is_ready(pod):
                break
            failure = decide_spawn_failure(
                self._claim(),
                pod,
                self.events,
                elapsed_s=time.monotonic() - started,
                unschedulable_after_s=self.unschedulable_timeout,
                attach_failure_after_s=self.attach_failure_timeout,
                timeout_after_s=float(self.start_timeout),
            )
            if failure is not None:
                raise SpawnException(failure.message, reason=failure.reason)
            if pod is not None and (_failed(pod) or _restart_count(pod) or _exited(pod)):
                return  # the next poll decides (rebuild again, wait for the kubelet, or give up)
            await asyncio.sleep(0.5)
        # the rebuilt pod is the one a next loss is judged from (and rebuilt from), even when it is
        # lost before the hub's next poll has seen it
        self._remember_pod(pod)
        await self._record_last_node((pod.get("spec") or {}).get("nodeName"))
        await self._reroute(pod)

    async def _reroute(self, pod: dict[str, Any]) -> None:
        """The hub's server record and the proxy route follow the rebuilt pod's new IP."""
        url = self._get_pod_url(pod)
        target = urlsplit(url)  # as JupyterHub reads a start's URL: IPv6 without brackets
        ip, port = target.hostname or "", target.port or 80
        if self.server is None or (self.server.ip, self.server.port) == (ip, port):
            return
        self.server.ip, self.server.port = ip, port
        self.db.commit()
        proxy = (getattr(self.user, "settings", None) or {}).get("proxy")
        if proxy is not None:
            await proxy.add_user(self.user, self.name or "")
        self.log.info("Workspace %s now answers at %s", self.pod_name, url)

    async def _wait_for(self, check: Any, what: str) -> None:
        deadline = time.monotonic() + self.k8s_api_request_timeout * 3
        while not check():  # KubeSpawner's reflector has no change event; this reads its watch cache
            if time.monotonic() > deadline:
                raise TimeoutError(f"waiting for {what}")
            await asyncio.sleep(0.2)

    async def _stop_after_giving_up(self) -> None:
        """Stop (delete a crash-looping pod, revoke, audit) before telling the hub: JupyterHub's
        ``User.stop`` calls ``stop()`` only when ``poll()`` says the server still runs (as KubeSpawner's
        own poll stops a pod whose container terminated before it returns the exit code)."""
        if self._stopped_after_give_up:
            return
        self._stopped_after_give_up = True
        await self.stop(now=True)

    async def _give_up(self, verdict: HealingVerdict) -> None:
        reason = verdict.cause or "unknown"
        HEAL_FAILURES.labels(reason=reason).inc()
        self.workspace_state[FAILURE_KEY] = {
            "reason": reason,
            "message": verdict.reason,
            "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        await self._audit("workspace-rebuild-failed", "Pod", self.pod_name, verdict.reason)
        self.log.warning("Workspace %s: %s", self.pod_name, verdict.reason)
        self._gave_up = True


def _failed(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Failed"


def _exited(pod: dict[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any("terminated" in (s.get("state") or {}) for s in statuses if s.get("name") == "notebook")


def _restart_count(pod: dict[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses if s.get("name") == "notebook")
