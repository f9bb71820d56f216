"""VM workspaces: the GPUWorkspaceSpawner's ``runtime: vm`` half (a mixin; orchestration only).

Start: root-disk DataVolume (created once, never owned by the VM) → cloud-init Secret (the hub token
lives only there, replaced on every start) → Service (selects the VM template's label) → VirtualMachine
(``runStrategy: Halted`` at creation) → one-active-compute and fencing checks → ``runStrategy: Always`` →
wait for the VMI by watch. Stop: ``Halted``, wait until the VMI is gone; VM, DataVolume and claim stay.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from .compat import SpawnException
from .k8s import Conflict, NotFound, custom, gateway
from .k8s.custom import DATA_VOLUMES, VIRTUAL_MACHINES, VM_INSTANCES, CustomReflector
from .lifecycle.retention import decide_home_disk
from .lifecycle.spawning import is_ready
from .lifecycle.vmspawning import build_vm_progress, decide_vm_failure
from .limiting import new_disk_guard
from .manifests.names import DISK_ROOT, LABEL_DISK, LABEL_RUNTIME, LABEL_VM, WorkspaceContext
from .manifests.pvc import build_adopt_patch
from .manifests.vm import (
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

NOTEBOOK_PORT = 8888
_LIVE_VMI_PHASES = ("Pending", "Scheduling", "Scheduled", "Running")


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


class VMRuntime:
    """Mixed into GPUWorkspaceSpawner; uses its traits, ``_context()``, ``_audit()`` and fencing check."""

    # provided by GPUWorkspaceSpawner / KubeSpawner
    namespace: str
    log: Any
    events: Any
    k8s_api_request_timeout: int
    k8s_api_request_retry_timeout: int
    unschedulable_timeout: float
    reflectors: dict[Any, Any]
    _context: Any
    _audit: Any
    _check_fencing: Any
    _get_reflector_key: Any
    _start_reflector: Any
    _start_watching_pods: Any
    pod_reflector: Any
    pod_name: str
    pvc_name: str
    _pvc_exists: bool

    # --- names and caches ----------------------------------------------------------------------

    def _vm_names(self) -> VmNames:
        names: VmNames = vm_names(self._context().identity)
        return names

    async def _start_vm_watchers(self) -> None:
        watched = (
            ("vms", VIRTUAL_MACHINES, {LABEL_RUNTIME: "vm"}),
            ("vmis", VM_INSTANCES, {LABEL_RUNTIME: "vm"}),
            ("datavolumes", DATA_VOLUMES, {LABEL_DISK: DISK_ROOT}),
        )
        for key, kind, labels in watched:
            await self._start_reflector(
                kind=key,
                reflector_class=CustomReflector,
                kind_group=kind.group,
                kind_version=kind.version,
                kind_plural=kind.plural,
                labels=labels,
                omit_namespace=False,
            )

    def _cached(self, key: str, name: str) -> dict[str, Any] | None:
        reflector = self.__class__.reflectors.get(self._get_reflector_key(key))
        found: dict[str, Any] | None = (
            reflector.objects.get(f"{self.namespace}/{name}") if reflector else None
        )
        return found

    def _launcher_pod(self, vm_name: str) -> dict[str, Any] | None:
        reflector = self.pod_reflector
        pods = reflector.pods.values() if reflector else ()
        return next(
            (p for p in pods if (p["metadata"].get("labels") or {}).get(LABEL_VM) == vm_name),
            None,
        )

    def _launcher_events(self, pod: dict[str, Any] | None) -> list[dict[str, Any]]:
        reflector = getattr(self, "event_reflector", None)
        if pod is None or reflector is None:
            return []
        return [e for e in reflector.events if e["involvedObject"].get("name") == pod["metadata"]["name"]]

    # --- start ---------------------------------------------------------------------------------

    async def _start_vm(self) -> str:
        ws: WorkspaceContext = self._context()
        names = self._vm_names()
        await self._start_watching_pods()
        await self._start_vm_watchers()
        await self._ensure_root_disk(ws, names)
        self._pvc_exists = True  # KubeSpawner keeps pvc_name (here: the root disk) in the hub state
        await self._remove_workspace_pod(ws)
        env = self.get_env()  # type: ignore[attr-defined]
        timeout = self.k8s_api_request_timeout
        fresh = (
            self._cached("vms", names.vm) is None
        )  # a new (or admin-deleted) VM: its Secret is likely new too
        await custom.put_secret(
            self.namespace,
            build_cloud_init_secret(ws, names, env),
            request_timeout=timeout,
            create_first=fresh,
        )
        url = await self._ensure_service(ws, names)
        await self._ensure_vm(ws, names)
        await self._check_fencing(names.disk, own_uids=frozenset())
        await custom.patch(
            custom.custom_api(),
            VIRTUAL_MACHINES,
            self.namespace,
            names.vm,
            build_start_patch(),
            request_timeout=timeout,
        )
        await self._wait_vmi_ready(names)
        return url

    async def _ensure_root_disk(self, ws: WorkspaceContext, names: VmNames) -> None:
        """Create, re-adopt or use the root-disk DataVolume; refuse one that is not this workspace's."""
        api, timeout = custom.custom_api(), self.k8s_api_request_timeout
        dv = self._cached("datavolumes", names.disk)
        verdict = decide_home_disk(dv, ws.identity)
        if verdict.action == "refuse":
            await self._audit("disk-refused", "DataVolume", names.disk, verdict.reason)
            raise SpawnException(verdict.reason, reason="disk", status_code=409)
        if verdict.action == "create":
            try:
                async with new_disk_guard(self, "DataVolume", names.disk):
                    dv = await custom.create(
                        api, DATA_VOLUMES, self.namespace, build_root_disk(ws, names), request_timeout=timeout
                    )
                await self._audit("disk-created", "DataVolume", names.disk, verdict.reason, dv)
            except Conflict:
                pass  # created meanwhile (the cache lagged); the next checks read it from the cache
        elif verdict.action == "adopt":
            patch = build_adopt_patch(ws)
            dv = await custom.patch(
                api, DATA_VOLUMES, self.namespace, names.disk, patch, request_timeout=timeout
            )
            # and its claim: CDI copied the DataVolume's labels onto it once, when it created it
            with contextlib.suppress(NotFound):
                await gateway.patch_pvc(
                    self.api,  # type: ignore[attr-defined]
                    self.namespace,
                    names.disk,
                    patch,
                    request_timeout=timeout,
                )
            await self._audit("disk-adopted", "DataVolume", names.disk, verdict.reason, dv)

    async def _remove_workspace_pod(self, ws: WorkspaceContext) -> None:
        """One active compute per workspace: a container pod of this workspace goes before the VM starts."""
        reflector = self.pod_reflector
        for pod in list(reflector.pods.values()):
            labels = pod["metadata"].get("labels") or {}
            if labels.get(LABEL_VM) or not ws.identity.owns(pod["metadata"]):  # exact names, not labels
                continue
            name = pod["metadata"]["name"]
            await self._audit(
                "duplicate-pod-removed", "Pod", name, f"A container pod of this workspace: {name}"
            )
            with contextlib.suppress(NotFound):
                await gateway.delete_pod(
                    self.api,  # type: ignore[attr-defined]
                    self.namespace,
                    name,
                    grace_s=0,
                    request_timeout=self.k8s_api_request_timeout,
                )

    async def _ensure_service(self, ws: WorkspaceContext, names: VmNames) -> str:
        timeout = self.k8s_api_request_timeout
        try:  # read first: the Service outlives stops, so it usually exists
            service = await custom.read_service(self.namespace, names.service, request_timeout=timeout)
        except NotFound:
            try:
                service = await custom.create_service(
                    self.namespace, build_vm_service(ws, names), request_timeout=timeout
                )
            except Conflict:
                service = await custom.read_service(self.namespace, names.service, request_timeout=timeout)
        return f"http://{service['spec']['clusterIP']}:{NOTEBOOK_PORT}"

    async def _ensure_vm(self, ws: WorkspaceContext, names: VmNames) -> None:
        """The VM, (re)created when an admin deleted it; rebuilt when it no longer points at our disk."""
        api, timeout = custom.custom_api(), self.k8s_api_request_timeout
        wanted = build_vm(ws, names)
        current = self._cached("vms", names.vm)
        if current is None:
            try:
                await custom.create(api, VIRTUAL_MACHINES, self.namespace, wanted, request_timeout=timeout)
                return
            except Conflict:
                current = None  # the cache lagged: fall through to the disk check by replace
        if current is not None and not vm_outdated(current, wanted):
            return
        if current is not None and self._cached("vmis", names.vm) is not None:
            self.log.warning("VM %s differs from its profile but still runs: not changed now", names.vm)
            return
        self.log.info("VM %s: bringing its spec up to date with the profile (root disk kept)", names.vm)
        if current is not None:
            wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            await custom.replace(
                api, VIRTUAL_MACHINES, self.namespace, names.vm, wanted, request_timeout=timeout
            )

    async def _wait_vmi_ready(self, names: VmNames) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:  # reads the watch caches once a second; no API calls
            vmi = self._cached("vmis", names.vm)
            if vmi is not None and is_ready(vmi):
                return
            pod = self._launcher_pod(names.vm)
            failure = decide_vm_failure(
                data_volume=self._cached("datavolumes", names.disk),
                vm=self._cached("vms", names.vm),
                vmi=vmi,
                launcher_pod=pod,
                events=self._launcher_events(pod),
                elapsed_s=loop.time() - started,
                unschedulable_after_s=self.unschedulable_timeout,
            )
            if failure is not None:
                raise SpawnException(failure.message, reason=failure.reason)
            await asyncio.sleep(0.5)

    def _vm_progress(self) -> Any:
        names = self._vm_names()
        pod = self._launcher_pod(names.vm)
        return build_vm_progress(
            data_volume=self._cached("datavolumes", names.disk),
            vm=self._cached("vms", names.vm),
            vmi=self._cached("vmis", names.vm),
            launcher_pod=pod,
            events=self._launcher_events(pod),
        )

    # --- stop and poll -------------------------------------------------------------------------

    async def _stop_vm(self, names: VmNames) -> None:
        await self._start_vm_watchers()
        try:
            await custom.patch(
                custom.custom_api(),
                VIRTUAL_MACHINES,
                self.namespace,
                names.vm,
                build_stop_patch(),
                request_timeout=self.k8s_api_request_timeout,
            )
        except NotFound:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.k8s_api_request_retry_timeout
        while self._cached("vmis", names.vm) is not None and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.2)  # the VMI watch removes it

    async def _poll_vm(self, names: VmNames) -> int | None:
        await self._start_vm_watchers()
        return vm_poll_status(self._cached("vms", names.vm), self._cached("vmis", names.vm))
