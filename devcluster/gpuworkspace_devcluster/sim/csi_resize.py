"""Volume expansion: external-resizer for our CSI drivers, then the kubelet's file-system resize.

A bound claim whose request grows past its PV's capacity gets the ``Resizing`` condition and event; after
``resize_s`` the PV has the new (rounded) size. RBD file-system volumes then wait in
``FileSystemResizePending`` until a pod on a node has the volume mounted, when the "kubelet" finishes after
``fs_resize_s`` (``FileSystemResizeSuccessful``, the claim's capacity updated, conditions cleared); CephFS
and block volumes are done at once (``VolumeResizeSuccessful``). Whether a class allows expansion is the
API server's check (``verbs``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from ..store import Obj, TypeKey
from ..verbs import now_rfc3339
from .base import Key, SimController
from .context import SimContext
from .csi import (
    DRIVERS,
    PODS,
    PVCS,
    PVS,
    Driver,
    claim_users,
    format_bytes,
    merge_patch,
    pod_claims,
    round_size,
    size_of,
)
from .events import record_event

FS_RESIZE_PENDING = "Waiting for user to (re-)start a pod to finish file system resize of volume on node."


def without(conditions: list[Obj], *types: str) -> list[Obj] | None:
    kept = [c for c in conditions if c.get("type") not in types]
    return kept or None


def resize_step(want: int, have: int, shown: int) -> str:
    """What a bound claim needs: "controller" (grow the volume), "node" (grow its file system) or ""."""
    if want > have:
        return "controller"
    return "node" if have > shown else ""


class Timers:
    """Deadlines of timed steps, kept in memory (after a restart a step waits once more)."""

    def __init__(self, controller: SimController) -> None:
        self.controller = controller
        self.deadlines: dict[tuple[str, str], float] = {}

    def due(self, target: Key, uid: str, step: str, seconds: float) -> bool:
        now = asyncio.get_running_loop().time()
        deadline = self.deadlines.setdefault((uid, step), now + seconds)
        if now >= deadline:
            del self.deadlines[(uid, step)]
            return True
        self.controller.requeue_after(target, deadline - now)
        return False


class ResizeController(SimController):
    name = "csi-resizer"
    watches = (PVCS.key, PVS.key, PODS.key)

    def __init__(self, ctx: SimContext, *, resize_s: float = 0.3, fs_resize_s: float = 0.3) -> None:
        super().__init__(ctx.verbs)
        self.ctx = ctx
        self.resize_s, self.fs_resize_s = resize_s, fs_resize_s
        self.timers = Timers(self)

    def keys_for(self, key: TypeKey, obj: Obj, old: Obj | None) -> Iterable[Key]:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        if key == PVCS.key:
            return [(key, meta["namespace"], meta["name"])]
        if key == PODS.key:
            return [(PVCS.key, meta["namespace"], claim) for claim in pod_claims(obj)]
        ref = spec.get("claimRef") or {}
        return [(PVCS.key, ref["namespace"], ref["name"])] if ref.get("name") else []

    async def reconcile(self, target: Key) -> None:
        pvc = self.get(target)
        if pvc is None or pvc.get("status", {}).get("phase") != "Bound":
            return
        pv = self.store.get(PVS, "", pvc["spec"].get("volumeName") or "")
        driver = DRIVERS.get(((pv or {}).get("spec", {}).get("csi") or {}).get("driver", ""))
        if pv is None or driver is None:
            return
        want = size_of(pvc["spec"].get("resources", {}).get("requests", {}).get("storage"))
        have = size_of(pv["spec"].get("capacity", {}).get("storage"))
        step = resize_step(want, have, size_of(pvc["status"].get("capacity", {}).get("storage")) or have)
        if step == "controller":
            self._controller_expand(target, pvc, pv, driver, want)
        elif step == "node":
            self._node_expand(target, pvc, pv)

    def _controller_expand(self, target: Key, pvc: Obj, pv: Obj, driver: Driver, want: int) -> None:
        """external-resizer: Resizing, then the new PV size; file systems still need the node's resize."""
        conds, component = list(pvc["status"].get("conditions") or []), f"external-resizer {driver.name}"
        if not any(c.get("type") == "Resizing" for c in conds):
            resizing = {"type": "Resizing", "status": "True", "lastTransitionTime": now_rfc3339()}
            status: Obj = {
                "conditions": [*conds, resizing],
                "allocatedResources": {"storage": format_bytes(want)},
                "allocatedResourceStatuses": {"storage": "ControllerResizeInProgress"},
            }
            pvc = merge_patch(self.verbs, PVCS, pvc, {"status": status}, status=True)
            message = f"External resizer is resizing volume {pv['metadata']['name']}"
            record_event(self.verbs, pvc, "Normal", "Resizing", message, component=component)
        if not self.timers.due(target, pvc["metadata"]["uid"], "resize", self.resize_s):
            return
        size = format_bytes(round_size(driver, want))
        merge_patch(self.verbs, PVS, pv, {"spec": {"capacity": {"storage": size}}})
        rest = without(conds, "Resizing", "FileSystemResizePending")
        if driver.node_expand and pvc["spec"].get("volumeMode", "Filesystem") == "Filesystem":
            pending = {
                "type": "FileSystemResizePending",
                "status": "True",
                "lastTransitionTime": now_rfc3339(),
            }
            status = {
                "conditions": [*(rest or []), pending | {"message": FS_RESIZE_PENDING}],
                "allocatedResourceStatuses": {"storage": "NodeResizePending"},
            }
            merge_patch(self.verbs, PVCS, pvc, {"status": status}, status=True)
            message = "Require file system resize of volume on node"
            record_event(self.verbs, pvc, "Normal", "FileSystemResizeRequired", message, component=component)
            return
        status = {"capacity": {"storage": size}, "conditions": rest, "allocatedResourceStatuses": None}
        merge_patch(self.verbs, PVCS, pvc, {"status": status}, status=True)
        message = "Resize volume succeeded"
        record_event(self.verbs, pvc, "Normal", "VolumeResizeSuccessful", message, component=component)

    def _node_expand(self, target: Key, pvc: Obj, pv: Obj) -> None:
        """The kubelet finishes a pending file-system resize once a pod on a node has the volume mounted."""
        users = claim_users(self.ctx, pvc)
        if not users or not self.timers.due(target, pvc["metadata"]["uid"], "fs", self.fs_resize_s):
            return
        conds = without(pvc["status"].get("conditions") or [], "Resizing", "FileSystemResizePending")
        status = {
            "capacity": dict(pv["spec"]["capacity"]),
            "conditions": conds,
            "allocatedResourceStatuses": None,
        }
        pvc = merge_patch(self.verbs, PVCS, pvc, {"status": status}, status=True)
        message = f'MountVolume.NodeExpandVolume succeeded for volume "{pv["metadata"]["name"]}"'
        node = users[0]["spec"]["nodeName"]
        for obj in (pvc, users[0]):
            record_event(
                self.verbs,
                obj,
                "Normal",
                "FileSystemResizeSuccessful",
                message,
                component="kubelet",
                host=node,
            )
