"""The container runtime: KubeSpawner's pod on a retained home claim (orchestration only).

Start: home claim (created, re-adopted or used; never owned by the pod) → another runtime's compute of
this workspace stopped → duplicate pods removed → fencing check → KubeSpawner's start, supervised from
the watch caches so that a pod that cannot come up fails early with a reason. Stop: KubeSpawner's
(through self-healing); the claim stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..compat import SpawnException
from ..k8s import Conflict, Forbidden, NotFound, gateway
from ..k8s.errors import as_kubernetes_error
from ..k8s.reflectors import ClaimReflector
from ..lifecycle.diskpolicy import build_policy_annotations, build_policy_patch, decide_retention, with_policy
from ..lifecycle.gpuholders import describe_gpu_holders
from ..lifecycle.ownership import choose_home_claim
from ..lifecycle.phasetiming import PhaseClock
from ..lifecycle.retention import decide_home_disk
from ..lifecycle.spawning import ProgressStep, build_progress, decide_extra_pods, decide_spawn_failure
from ..lifecycle.state import WorkspaceState, derive_state
from ..manifests.names import ANN_LAST_NODE, DISK_HOME, LABEL_DISK, LABEL_VM, WorkspaceContext
from ..manifests.pvc import build_adopt_patch, build_home_pvc
from ..spawnmetrics import observe_phases
from .context import Ports, RuntimeContext
from .fencing import check_fencing

if TYPE_CHECKING:
    from . import Runtime


SERVING_CHECK_S = 0.05  # how often a start tries the started pod's server port


class ContainerRuntime:
    """A workspace that runs as a pod (KubeSpawner's) with a retained home claim."""

    kind = "container"
    evict_always = True  # its pods are in the pod watch cache every start has: checked at every start

    def __init__(self, ctx: RuntimeContext, ports: Ports) -> None:
        self.ctx, self.ports = ctx, ports
        self.ns = ctx.identity.namespace
        self.claim_name = ctx.home_claim  # may change at start: an older claim of the workspace is kept
        self._audits: list[asyncio.Future[None]] = []  # audit Events being written beside the start
        self._written: dict[str, Any] | None = None  # the home claim this start created or adopted

    # --- watch caches --------------------------------------------------------------------------

    def claim(self) -> dict[str, Any] | None:
        return self.ports.cached("home-claims", self.claim_name)

    def _pod(self) -> dict[str, Any] | None:
        return self.ports.cached("pods", self.ctx.pod_name)

    def _last_node(self) -> str | None:
        claim = self.claim() or {}
        node: str | None = ((claim.get("metadata") or {}).get("annotations") or {}).get(ANN_LAST_NODE)
        return node

    def progress(self) -> ProgressStep:
        return build_progress(self.claim(), self._pod(), self.ports.pod_events())

    # --- start ---------------------------------------------------------------------------------

    async def start(self, others: Sequence[Runtime]) -> str:
        """The container start, audited; ``others``' compute of this workspace is stopped first."""
        try:
            return await self._start(others)
        finally:
            await self._audited()

    async def _start(self, others: Sequence[Runtime]) -> str:
        ports, pod_name = self.ports, self.ctx.pod_name
        self._written = None
        await ports.watch_pods()
        prepared = asyncio.get_running_loop().time()
        await self._ensure_home_disk()
        ports.use_home_claim(self.claim_name, ensured=True)
        for other in others:
            await other.evict()
        await self._remove_duplicate_pods()
        await self.check_fencing(own_uids=frozenset())
        ports.log_record("workspace-starting", "Pod", pod_name, "Starting the workspace")
        started = asyncio.get_running_loop().time()
        earlier = ((self._pod() or {}).get("metadata") or {}).get("uid")  # a pod still going away
        task = asyncio.ensure_future(ports.start_pod())
        clock = PhaseClock()
        clock.observe("prepare", prepared)  # claim, fencing check: before the pod exists
        try:
            url = await self._supervise(task, started, clock, earlier)
        except SpawnException as exc:
            await ports.audit("workspace-start-failed", "Pod", pod_name, f"{exc.reason}: {exc.message}")
            raise
        ports.remember_pod(self._pod())  # what a rebuild copies
        # two writes after the server answers, at once: each is a request KubeSpawner's start does not make
        await asyncio.gather(
            ports.audit("workspace-started", "Pod", pod_name, f"Workspace ready at {url}"),
            self.record_last_node(((self._pod() or {}).get("spec") or {}).get("nodeName")),
        )
        return str(url)

    async def _audited(self) -> None:
        """Wait for the audit records written beside the start (a new disk's Event), so that none is still
        being written when the start returns or fails; their failures are logged by ``Ports.audit``."""
        writes, self._audits = self._audits, []
        await asyncio.gather(*writes)

    async def check_fencing(self, *, own_uids: frozenset[str]) -> None:
        """The fencing check for the home claim (also before self-healing rebuilds a pod)."""
        await check_fencing(
            self.ctx,
            self.ports,
            self.claim_name,
            claim=self.claim() or self._written,
            last_node=self._last_node(),
            own_uids=own_uids,
        )

    async def record_last_node(self, node: str | None) -> None:
        """Remember where the disk is attached (one write, only when the node changes)."""
        if not node or node == self._last_node():
            return
        await self._patch_claim({"metadata": {"annotations": {ANN_LAST_NODE: node}}})

    async def _patch_claim(self, patch: dict[str, Any]) -> dict[str, Any]:
        return await gateway.patch_pvc(
            self.ports.api, self.ns, self.claim_name, patch, request_timeout=self.ctx.request_timeout
        )

    async def _ensure_home_disk(self) -> None:
        """Create, re-adopt or reuse the home claim; refuse (reason 'disk') when it is not ours to use."""
        reflector: ClaimReflector = await self.ports.watch(
            "home-claims", ClaimReflector, labels={LABEL_DISK: DISK_HOME}, omit_namespace=False
        )
        choice = choose_home_claim(
            list(reflector.claims.values()), self.ports.home_claim_base(), self.ctx.identity
        )
        if choice.name != self.claim_name:
            self.ports.log.info("Home disk of %s: %s", self.ctx.log_name, choice.reason)
        self.claim_name = choice.name
        self.ports.use_home_claim(choice.name)
        ws = dataclasses.replace(self.ctx.started(), home_claim=choice.name)
        claim = self.claim()
        home = ws.profile.storage.home
        policy = build_policy_annotations(
            decide_retention(home.retention, self.ctx.retention_days), home.snapshots
        )
        for _ in range(3):
            verdict = decide_home_disk(claim, ws.identity)
            if verdict.action == "use":
                await self._stamp_policy(claim, policy)
                return
            if verdict.action == "refuse":
                await self.ports.audit(
                    "disk-refused", "PersistentVolumeClaim", self.claim_name, verdict.reason
                )
                raise SpawnException(verdict.reason, reason="disk", status_code=409)
            try:
                # the claim as the API answered the write: the fencing check reads it while the watch
                # cache has not shown it yet, instead of a GET per new disk (issue 19's P4)
                self._written = await self._write_home_disk(ws, verdict.action, verdict.reason, policy)
                return
            except Conflict:
                claim = await gateway.read_pvc(
                    self.ports.api,
                    self.ns,
                    self.claim_name,
                    request_timeout=self.ctx.request_timeout,
                )
            except NotFound:
                claim = None
            except Forbidden as exc:
                reason = "quota" if exc.quota_exceeded else "disk"
                raise SpawnException(f"Cannot create your home disk: {exc.message}", reason=reason) from exc

    async def _write_home_disk(
        self, ws: WorkspaceContext, action: str, reason: str, policy: dict[str, str | None]
    ) -> dict[str, Any]:
        """Create the home claim (``action`` 'create') or re-adopt it; audited."""
        api, ns, name, timeout = self.ports.api, self.ns, self.claim_name, self.ctx.request_timeout
        if action == "create":
            async with self.ports.new_disk_guard("PersistentVolumeClaim", name):
                body = with_policy(build_home_pvc(ws), policy, patch=False)
                claim = await gateway.create_pvc(api, ns, body, request_timeout=timeout)
            # its Event is written while the start goes on (the log line now): awaited by ``_audited``
            self._audits.append(
                asyncio.ensure_future(
                    self.ports.audit("disk-created", "PersistentVolumeClaim", name, reason, claim)
                )
            )
            return claim
        patch = with_policy(build_adopt_patch(ws), policy, patch=True)
        claim = await gateway.patch_pvc(api, ns, name, patch, request_timeout=timeout)
        await self.ports.audit("disk-adopted", "PersistentVolumeClaim", name, reason, claim)
        return claim

    async def _stamp_policy(self, claim: dict[str, Any] | None, policy: dict[str, str | None]) -> None:
        """Bring the retention and snapshot schedule on a disk in use up to date with this start's profile."""
        patch = build_policy_patch(claim or {}, policy)
        if claim is not None and patch is not None:
            await self._patch_claim(patch)

    async def _remove_duplicate_pods(self) -> None:
        """At most one active pod per user workspace, also for pods a previous hub left behind."""
        extra = decide_extra_pods(self.ports.pods(), self.ctx.identity, keep_name=self.ctx.pod_name)
        await self._delete_pods(extra, "Another pod of this workspace")

    async def _delete_pods(self, names: list[str], why: str) -> None:
        """Delete ``names`` (audited), then wait until the pod watch cache has let them go."""
        ns = self.ns
        for name in names:
            await self.ports.audit("duplicate-pod-removed", "Pod", name, f"{why}: {name}")
            with contextlib.suppress(NotFound):
                await gateway.delete_pod(
                    self.ports.api, ns, name, grace_s=0, request_timeout=self.ctx.request_timeout
                )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ctx.retry_timeout
        # Duplicates are rare and have other names than this server's pod, whose changes alone wake a
        # waiter (``next_pod_change``); this reads the watch cache every 0.2 s, never the API.
        while any(self.ports.cached("pods", n) is not None for n in names) and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.2)

    async def _supervise(
        self, task: asyncio.Future[Any], started: float, clock: PhaseClock, earlier: str | None
    ) -> Any:
        """Wait for KubeSpawner's start, failing early (with a reason) when the pod cannot come up.

        It ends as soon as the new pod's server accepts connections. KubeSpawner's start looks at its
        cache after jittered sleeps (``exponential_backoff``: a random wait of up to 0.2, 0.4, ... 5 s)
        and JupyterHub then polls the server's URL with the same backoff, which made a start take about
        2.3 s or 4-5 s at random (issue 19's P1). Here the pod watch's event that shows every container
        running starts a TCP connect to the server every 50 ms, so the hub's first look at the URL finds
        it up. KubeSpawner's start has nothing left to do then but wait and log (``started_pod_url`` is
        None where it has: internal SSL, services, an ``after_pod_created_hook``); it is cancelled. The
        one-second timeout keeps the early-failure deadlines ticking when the pod does not change.
        """
        loop = asyncio.get_running_loop()
        serving: asyncio.Future[str] | None = None
        try:
            while True:
                clock.observe(self.progress().phase, loop.time())
                changed = asyncio.ensure_future(self.ports.next_pod_change(1.0))
                waiting = {task, changed} if serving is None else {task, changed, serving}
                try:
                    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    changed.cancel()
                if serving is None and not task.done():
                    url = self.ports.started_pod_url(not_uid=earlier)
                    if url is not None:
                        serving = asyncio.ensure_future(self._serving(url))
                if task.done() or (serving is not None and serving.done()):
                    if serving is not None and serving.done():
                        if not task.done():
                            task.cancel()  # KubeSpawner's start only waits to see the pod ready
                            await asyncio.gather(task, return_exceptions=True)
                        result: Any = serving.result()
                    else:
                        result = self._start_result(task)
                    # the last sample, when the start returns: a start quicker than one sampling period
                    # still reaches its last phase (``ready``), as the phase clock's contract says
                    now = loop.time()
                    clock.observe(self.progress().phase, now)
                    observe_phases(clock.finish(now))
                    return result
                failure = decide_spawn_failure(
                    self.claim(),
                    self._pod(),
                    self.ports.pod_events(),
                    elapsed_s=loop.time() - started,
                    unschedulable_after_s=self.ctx.unschedulable_timeout,
                    attach_failure_after_s=self.ctx.attach_failure_timeout,
                )
                if failure is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    holders = self._gpu_holders(failure.message) if failure.reason == "unschedulable" else ""
                    raise SpawnException(failure.message + holders, reason=failure.reason)
        finally:
            if serving is not None and not serving.done():
                serving.cancel()

    async def _serving(self, url: str) -> str:
        """``url`` once its server accepts a TCP connection (tried every SERVING_CHECK_S seconds)."""
        # A port has no event to wait on (JupyterHub polls the URL too); connects to the pod, not the API.
        while not await self.ports.accepts_connections(url, 1.0):  # noqa: ASYNC110
            await asyncio.sleep(SERVING_CHECK_S)
        return url

    def _gpu_holders(self, message: str) -> str:
        """Who holds the GPUs a refused start asked for, from the pod watch cache (no API calls)."""
        match = re.search(r"Insufficient (nvidia\.com/[\w.\-]+)", message)
        if match is None or not self.ports.watching("pods"):
            return ""
        resource = match.group(1).rstrip(".")  # "... Insufficient nvidia.com/gpu.shared. preemption: ..."
        holders = describe_gpu_holders(self.ports.pods(), resource, exclude=self.ctx.pod_name)
        return f". Currently held by: {holders}" if holders else ""

    def _start_result(self, task: asyncio.Future[Any]) -> Any:
        try:
            return task.result()
        except TimeoutError as exc:
            raise SpawnException(
                f"The workspace did not become ready in time; last step: {self.progress().message}",
                reason="timeout",
            ) from exc
        except Exception as exc:
            error = as_kubernetes_error(exc)
            if isinstance(error, Forbidden) and error.quota_exceeded:
                raise SpawnException(
                    f"Your team's quota is exhausted: {error.message}", reason="quota"
                ) from exc
            raise

    # --- stop, poll, state, delete -------------------------------------------------------------

    async def stop(self, now: bool) -> None:
        await self.ports.stop_pod(now)
        await self.ports.audit(
            "workspace-stopped", "Pod", self.ctx.pod_name, "Workspace stopped; home disk kept"
        )

    async def evict(self) -> None:
        """One active compute per workspace: this workspace's pods go before compute of another kind."""
        await self.ports.watch_pods()
        pods = [p for p in self.ports.pods() if not (p["metadata"].get("labels") or {}).get(LABEL_VM)]
        extra = decide_extra_pods(pods, self.ctx.identity, keep_name="")  # a VM's launcher pod stays
        await self._delete_pods(extra, "A container pod of this workspace")

    async def poll(self) -> int | None:
        return await self.ports.poll_pod()

    def status(self, now: datetime) -> WorkspaceState | None:
        if not self.ports.watching("home-claims"):
            return None  # this hub has not watched the cluster since it started: nothing honest to say
        return derive_state(
            runtime="container",
            disk=self.claim(),
            data_volume=None,
            pod=self._pod(),
            vm=None,
            vmi=None,
            now=now,
        )

    async def delete(self, now: datetime, why: str, *, home_shared: bool) -> None:
        await self.ports.retain_disks(now, why, home_shared=home_shared, vm=False)
