"""The VM runtime: a KubeVirt VirtualMachine on a root disk cloned by CDI (orchestration only).

Start: root-disk DataVolume (created once, never owned by the VM) → cloud-init Secret (the hub token
lives only there, replaced on every start) → Service (selects the VM template's label) → VirtualMachine
(``runStrategy: Halted`` at creation) → one-active-compute and fencing checks → ``runStrategy: Always`` →
wait for the VMI by watch. Stop: ``Halted``, wait until the VMI is gone; VM, DataVolume and claim stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..compat import SpawnException
from ..k8s import Conflict, NotFound, custom, gateway
from ..k8s.custom import CustomReflector
from ..k8s.kinds import DATA_VOLUMES, VIRTUAL_MACHINES, VM_INSTANCES, Kind
from ..lifecycle.retention import decide_home_disk
from ..lifecycle.spawning import ProgressStep, is_ready
from ..lifecycle.state import WorkspaceState, derive_state
from ..lifecycle.vmspawning import build_vm_progress, decide_vm_failure
from ..manifests.names import (
    ANN_LAST_NODE,
    DISK_ROOT,
    LABEL_DISK,
    LABEL_RUNTIME,
    LABEL_VM,
    WorkspaceContext,
)
from ..manifests.pvc import build_adopt_patch
from ..manifests.vm import (
    VmNames,
    build_cloud_init_secret,
    build_root_disk,
    build_start_patch,
    build_stop_patch,
    build_vm,
    build_vm_service,
    vm_names,
    vm_outdated,
)
from .context import Ports, RuntimeContext
from .fencing import check_fencing

if TYPE_CHECKING:
    from . import Runtime

NOTEBOOK_PORT = 8888
_LIVE_VMI_PHASES = ("Pending", "Scheduling", "Scheduled", "Running")
ROOT_DISKS_WATCH = ("datavolumes", DATA_VOLUMES, {LABEL_DISK: DISK_ROOT})  # the disk limits' too
_WATCHED = (
    ("vms", VIRTUAL_MACHINES, {LABEL_RUNTIME: "vm"}),
    ("vmis", VM_INSTANCES, {LABEL_RUNTIME: "vm"}),
    ROOT_DISKS_WATCH,
)


async def start_custom_watch(watch: Any, key: str, kind: Kind, labels: dict[str, str]) -> None:
    """Start (once per hub: KubeSpawner keeps reflectors by ``key``) the watch cache ``key`` of ``kind``'s
    objects with ``labels`` in the hub's namespace; ``watch`` is ``Ports.watch``'s signature."""
    await watch(
        key,
        CustomReflector,
        kind_group=kind.group,
        kind_version=kind.version,
        kind_plural=kind.plural,
        labels=labels,
        omit_namespace=False,
    )


def vm_poll_status(vm: dict[str, Any] | None, vmi: dict[str, Any] | None) -> int | None:
    """``Spawner.poll``'s answer for a VM workspace: None while it runs or is meant to run, else 1.

    A VM whose ``runStrategy`` is ``Always`` counts even before its VMI exists or while KubeVirt
    restarts it: a start the hub lost in a restart must not read as stopped, or the hub forgets a VM
    that goes on to boot (an orphan holding its GPUs) instead of stopping it.
    """
    meant_to_run = vm is not None and (vm.get("spec") or {}).get("runStrategy") == "Always"
    if meant_to_run and vm is not None and not vm["metadata"].get("deletionTimestamp"):
        return None
    if vmi is None or vmi["metadata"].get("deletionTimestamp"):
        return 1
    return None if (vmi.get("status") or {}).get("phase", "Pending") in _LIVE_VMI_PHASES else 1


class VmRuntime:
    """A workspace that runs as a KubeVirt VM; the root disk is its home."""

    kind = "vm"
    evict_always = False  # a VM is halted for a start of another kind only when the state says "vm"

    def __init__(self, ctx: RuntimeContext, ports: Ports) -> None:
        self.ctx, self.ports = ctx, ports
        self.ns = ctx.identity.namespace
        self.names: VmNames = vm_names(ctx.identity)

    # --- watch caches --------------------------------------------------------------------------

    async def _watch(self) -> None:
        for key, kind, labels in _WATCHED:
            await start_custom_watch(self.ports.watch, key, kind, labels)

    def _workspace(self) -> WorkspaceContext:
        """The start's context, whose home claim is the root disk (the manifests' builders check it)."""
        return dataclasses.replace(self.ctx.started(), home_claim=self.names.disk)

    def _cached(self, key: str, name: str) -> dict[str, Any] | None:
        return self.ports.cached(key, name)

    def _launcher_pod(self) -> dict[str, Any] | None:
        return next(
            (
                p
                for p in self.ports.pods()
                if (p["metadata"].get("labels") or {}).get(LABEL_VM) == self.names.vm
            ),
            None,
        )

    def _launcher_events(self, pod: dict[str, Any] | None) -> list[dict[str, Any]]:
        return [] if pod is None else self.ports.events_of(pod["metadata"]["name"])

    def _last_node(self) -> str | None:
        dv = self._cached("datavolumes", self.names.disk) or {}
        node: str | None = ((dv.get("metadata") or {}).get("annotations") or {}).get(ANN_LAST_NODE)
        return node

    # --- start ---------------------------------------------------------------------------------

    async def start(self, others: Sequence[Runtime]) -> str:
        """The VM start, audited; ``others``' compute of this workspace is stopped before the VM's."""
        name = self.names.vm
        self.ports.use_home_claim(self.names.disk)  # the root disk is the VM's home (the records name it)
        self.ports.log_record("workspace-starting", "VirtualMachine", name, "Starting the VM workspace")
        try:
            url = await self._start(others)
        except SpawnException as exc:
            failed = f"{exc.reason}: {exc.message}"
            if self.ports.rejected():  # refused before any write (a disk limit): no Event either
                self.ports.log_record("workspace-start-failed", "VirtualMachine", name, failed)
            else:
                await self.ports.audit("workspace-start-failed", "VirtualMachine", name, failed)
            raise
        await self.ports.audit("workspace-started", "VirtualMachine", name, f"VM workspace ready at {url}")
        vmi = self._cached("vmis", name) or {}
        await self._record_last_node((vmi.get("status") or {}).get("nodeName"))
        return url

    async def _start(self, others: Sequence[Runtime]) -> str:
        ws, names, ports = self._workspace(), self.names, self.ports
        await ports.watch_pods()
        await self._watch()
        await self._ensure_root_disk()
        ports.use_home_claim(names.disk, ensured=True)  # KubeSpawner keeps it in the hub state
        for other in others:  # one active compute per workspace: a container pod goes first
            await other.evict()
        env = ports.env()
        timeout = self.ctx.request_timeout
        fresh = (
            self._cached("vms", names.vm) is None
        )  # a new (or admin-deleted) VM: its Secret is likely new too
        await custom.put_secret(
            self.ns,
            build_cloud_init_secret(ws, names, env),
            request_timeout=timeout,
            create_first=fresh,
        )
        url = await self._ensure_service()
        await self._ensure_vm()
        await check_fencing(
            self.ctx, ports, names.disk, claim=None, last_node=self._last_node(), own_uids=frozenset()
        )
        await custom.patch(
            custom.custom_api(),
            VIRTUAL_MACHINES,
            self.ns,
            names.vm,
            build_start_patch(),
            request_timeout=timeout,
        )
        await self._wait_vmi_ready()
        return url

    async def _ensure_root_disk(self) -> None:
        """Create, re-adopt or use the root-disk DataVolume; refuse one that is not this workspace's."""
        ws, names, ns = self._workspace(), self.names, self.ns
        api, timeout = custom.custom_api(), self.ctx.request_timeout
        dv = self._cached("datavolumes", names.disk)
        verdict = decide_home_disk(dv, ws.identity)
        if verdict.action == "refuse":
            await self.ports.audit("disk-refused", "DataVolume", names.disk, verdict.reason)
            raise SpawnException(verdict.reason, reason="disk", status_code=409)
        if verdict.action == "create":
            try:
                async with self.ports.new_disk_guard("DataVolume", names.disk):
                    dv = await custom.create(
                        api, DATA_VOLUMES, ns, build_root_disk(ws, names), request_timeout=timeout
                    )
                await self.ports.audit("disk-created", "DataVolume", names.disk, verdict.reason, dv)
            except Conflict:
                pass  # created meanwhile (the cache lagged); the next checks read it from the cache
        elif verdict.action == "adopt":
            patch = build_adopt_patch(ws)
            dv = await custom.patch(api, DATA_VOLUMES, ns, names.disk, patch, request_timeout=timeout)
            # and its claim: CDI copied the DataVolume's labels onto it once, when it created it
            with contextlib.suppress(NotFound):
                await gateway.patch_pvc(self.ports.api, ns, names.disk, patch, request_timeout=timeout)
            await self.ports.audit("disk-adopted", "DataVolume", names.disk, verdict.reason, dv)

    async def _ensure_service(self) -> str:
        ns, name, timeout = self.ns, self.names.service, self.ctx.request_timeout
        try:  # read first: the Service outlives stops, so it usually exists
            service = await custom.read_service(ns, name, request_timeout=timeout)
        except NotFound:
            try:
                service = await custom.create_service(
                    ns, build_vm_service(self._workspace(), self.names), request_timeout=timeout
                )
            except Conflict:
                service = await custom.read_service(ns, name, request_timeout=timeout)
        return f"http://{service['spec']['clusterIP']}:{NOTEBOOK_PORT}"

    async def _ensure_vm(self) -> None:
        """The VM, (re)created when an admin deleted it; rebuilt when it no longer points at our disk."""
        api, timeout = custom.custom_api(), self.ctx.request_timeout
        ns, names = self.ns, self.names
        wanted = build_vm(self._workspace(), names)
        current = self._cached("vms", names.vm)
        if current is None:
            try:
                await custom.create(api, VIRTUAL_MACHINES, ns, wanted, request_timeout=timeout)
                return
            except Conflict:
                current = None  # the cache lagged: fall through to the disk check by replace
        if current is not None and not vm_outdated(current, wanted):
            return
        if current is not None and self._cached("vmis", names.vm) is not None:
            self.ports.log.warning("VM %s differs from its profile but still runs: not changed now", names.vm)
            return
        self.ports.log.info("VM %s: bringing its spec up to date with the profile (root disk kept)", names.vm)
        if current is not None:
            wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            await custom.replace(api, VIRTUAL_MACHINES, ns, names.vm, wanted, request_timeout=timeout)

    async def _wait_vmi_ready(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        names = self.names
        while True:  # reads the watch caches once a second; no API calls
            vmi = self._cached("vmis", names.vm)
            if vmi is not None and is_ready(vmi):
                return
            pod = self._launcher_pod()
            failure = decide_vm_failure(
                data_volume=self._cached("datavolumes", names.disk),
                vm=self._cached("vms", names.vm),
                vmi=vmi,
                launcher_pod=pod,
                events=self._launcher_events(pod),
                elapsed_s=loop.time() - started,
                unschedulable_after_s=self.ctx.unschedulable_timeout,
            )
            if failure is not None:
                raise SpawnException(failure.message, reason=failure.reason)
            await asyncio.sleep(0.5)

    async def _record_last_node(self, node: str | None) -> None:
        """Remember where the disk is attached (one write, only when the node changes)."""
        if not node or node == self._last_node():
            return
        patch = {"metadata": {"annotations": {ANN_LAST_NODE: node}}}
        await custom.patch(
            custom.custom_api(),
            DATA_VOLUMES,
            self.ns,
            self.names.disk,
            patch,
            request_timeout=self.ctx.request_timeout,
        )

    def progress(self) -> ProgressStep:
        pod = self._launcher_pod()
        names = self.names
        return build_vm_progress(
            data_volume=self._cached("datavolumes", names.disk),
            vm=self._cached("vms", names.vm),
            vmi=self._cached("vmis", names.vm),
            launcher_pod=pod,
            events=self._launcher_events(pod),
        )

    # --- stop, poll, state, delete -------------------------------------------------------------

    async def _halt(self) -> None:
        """``runStrategy: Halted``, then wait (on the VMI watch) until KubeVirt has removed the VMI."""
        try:
            await custom.patch(
                custom.custom_api(),
                VIRTUAL_MACHINES,
                self.ns,
                self.names.vm,
                build_stop_patch(),
                request_timeout=self.ctx.request_timeout,
            )
        except NotFound:
            return
        await self._watch()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ctx.retry_timeout
        while self._cached("vmis", self.names.vm) is not None and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.2)  # the VMI watch removes it

    async def stop(self, now: bool) -> None:
        await self._halt()
        await self.ports.audit(
            "workspace-stopped", "VirtualMachine", self.names.vm, "VM stopped; root disk kept"
        )

    async def evict(self) -> None:
        """One active compute per workspace: a running VM of this workspace stops before a pod starts."""
        await self._watch()
        vm = self._cached("vms", self.names.vm)
        if vm is not None and (vm.get("spec") or {}).get("runStrategy") != "Halted":
            await self.ports.audit(
                "duplicate-pod-removed", "VirtualMachine", self.names.vm, "Halting this workspace's VM"
            )
            await self._halt()

    async def poll(self) -> int | None:
        await self._watch()
        return vm_poll_status(self._cached("vms", self.names.vm), self._cached("vmis", self.names.vm))

    def status(self, now: datetime) -> WorkspaceState | None:
        if not self.ports.watching("datavolumes"):
            return None  # this hub has not watched the cluster since it started: nothing honest to say
        dv = self._cached("datavolumes", self.names.disk)
        return derive_state(
            runtime="vm",
            disk=dv,
            data_volume=dv,
            pod=None,
            vm=self._cached("vms", self.names.vm),
            vmi=self._cached("vmis", self.names.vm),
            now=now,
        )

    async def delete(self, now: datetime, why: str, *, home_shared: bool) -> None:
        await self.ports.retain_disks(now, why, home_shared=home_shared, vm=True)
