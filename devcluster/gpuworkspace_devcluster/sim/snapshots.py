"""Volume snapshots (snapshot-controller plus csi-snapshotter): a snapshot is a copy of the volume's directory.

A ``VolumeSnapshot`` of a bound claim of ours is copied to ``volumes/snapshot-<uid>/`` and then reports
``readyToUse``, ``restoreSize``, ``creationTime`` and ``boundVolumeSnapshotContentName: snapcontent-<uid>``.
``VolumeSnapshotContent`` objects are not served: the name is recorded only. A snapshot with no class gets
its driver's default class, as snapshot-controller sets it; deleting it removes the copy when the class's
``deletionPolicy`` is Delete. Restoring is the provisioner's (a claim whose ``dataSource`` is the snapshot
starts as a copy of it, see ``csi``).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterable
from pathlib import Path

from ..store import Obj, TypeKey
from ..verbs import now_rfc3339
from .base import Key, SimController, rt_of
from .context import SimContext
from .csi import (
    DRIVERS,
    PVCS,
    SNAPSHOTS,
    add_finalizer,
    bound_volume,
    copy_tree,
    drop_finalizers,
    merge_patch,
    volume_dir,
)
from .events import record_event

CLASSES = rt_of("snapshot.storage.k8s.io", "volumesnapshotclasses")
BOUND_PROTECTION = "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection"
DEFAULT_CLASS = "snapshot.storage.kubernetes.io/is-default-class"
COMPONENT = "snapshot-controller"


def snapshot_dir(ctx: SimContext, uid: str) -> Path:
    return ctx.path("volumes", f"snapshot-{uid}")


def default_class(classes: Iterable[Obj], driver: str) -> str | None:
    """The one default VolumeSnapshotClass for ``driver`` (None when there is none)."""
    for cls in classes:
        if (
            cls.get("driver") == driver
            and (cls["metadata"].get("annotations") or {}).get(DEFAULT_CLASS) == "true"
        ):
            return str(cls["metadata"]["name"])
    return None


class SnapshotController(SimController):
    name = "snapshots"
    watches = (SNAPSHOTS.key, PVCS.key)

    def __init__(self, ctx: SimContext) -> None:
        super().__init__(ctx.verbs)
        self.ctx = ctx

    def keys_for(self, key: TypeKey, obj: Obj, old: Obj | None) -> Iterable[Key]:
        meta = obj["metadata"]
        if key == SNAPSHOTS.key:
            return [(key, meta["namespace"], meta["name"])]
        snaps = self.store.items(SNAPSHOTS, meta["namespace"])
        return [
            (SNAPSHOTS.key, s["metadata"]["namespace"], s["metadata"]["name"])
            for s in snaps
            if (s.get("spec", {}).get("source") or {}).get("persistentVolumeClaimName") == meta["name"]
        ]

    async def reconcile(self, target: Key) -> None:
        snap = self.get(target)
        if snap is None:
            return
        meta, spec = snap["metadata"], snap.get("spec") or {}
        if meta.get("deletionTimestamp"):
            cls = self.store.get(CLASSES, "", spec.get("volumeSnapshotClassName") or "")
            if (cls or {}).get("deletionPolicy", "Delete") == "Delete":
                await asyncio.to_thread(shutil.rmtree, snapshot_dir(self.ctx, meta["uid"]), True)
            drop_finalizers(self.verbs, SNAPSHOTS, snap, BOUND_PROTECTION)
            return
        claim = (spec.get("source") or {}).get("persistentVolumeClaimName")
        if snap.get("status", {}).get("readyToUse") or not claim:
            return
        pv = bound_volume(self.ctx, target[1], claim)
        driver = ((pv or {}).get("spec", {}).get("csi") or {}).get("driver", "")
        if pv is None or driver not in DRIVERS:
            self._fail(snap, claim)
            return
        if not spec.get("volumeSnapshotClassName"):
            name = default_class(self.store.items(CLASSES), driver)
            if name is not None:
                merge_patch(self.verbs, SNAPSHOTS, snap, {"spec": {"volumeSnapshotClassName": name}})
            return  # the change brings us back (or a class showing up does not: create one first)
        snap = add_finalizer(self.verbs, SNAPSHOTS, snap, BOUND_PROTECTION)
        key = f"{meta['namespace']}/{meta['name']}"
        message = f"Waiting for a snapshot {key} to be created by the CSI driver."
        record_event(self.verbs, snap, "Normal", "CreatingSnapshot", message, component=COMPONENT)
        source = volume_dir(self.ctx, pv["spec"]["csi"]["volumeHandle"])
        await asyncio.to_thread(copy_tree, source, snapshot_dir(self.ctx, meta["uid"]))
        now = self.get(target)
        if now is None or now["metadata"]["uid"] != meta["uid"]:
            await asyncio.to_thread(shutil.rmtree, snapshot_dir(self.ctx, meta["uid"]), True)
            return
        status = {
            "boundVolumeSnapshotContentName": f"snapcontent-{meta['uid']}",
            "creationTime": now_rfc3339(),
            "readyToUse": True,
            "restoreSize": pv["spec"]["capacity"]["storage"],
            "error": None,
        }
        now = merge_patch(self.verbs, SNAPSHOTS, now, {"status": status}, status=True)
        message = f"Snapshot {key} was successfully created by the CSI driver."
        record_event(self.verbs, now, "Normal", "SnapshotCreated", message, component=COMPONENT)
        message = f"Snapshot {key} is ready to use."
        record_event(self.verbs, now, "Normal", "SnapshotReady", message, component=COMPONENT)

    def _fail(self, snap: Obj, claim: str) -> None:
        """The source claim is missing or unbound: report it and wait (a claim change brings us back)."""
        pvc = self.store.get(PVCS, snap["metadata"]["namespace"], claim)
        reason = (
            f"the PVC {claim} is not yet bound to a PV, will not attempt to take a snapshot"
            if pvc is not None
            else f'failed to retrieve PVC {claim} from the lister: "persistentvolumeclaim \\"{claim}\\" not found"'
        )
        message = (
            "Failed to create snapshot content with error failed to get input parameters to create snapshot "
            f'{snap["metadata"]["name"]}: "{reason}"'
        )
        if (snap.get("status", {}).get("error") or {}).get("message") != message:
            status = {"readyToUse": False, "error": {"message": message, "time": now_rfc3339()}}
            merge_patch(self.verbs, SNAPSHOTS, snap, {"status": status}, status=True)
            record_event(
                self.verbs, snap, "Warning", "SnapshotContentCreationFailed", message, component=COMPONENT
            )
