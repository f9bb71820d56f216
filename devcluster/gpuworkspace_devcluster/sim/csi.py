"""Ceph-CSI-like storage (``rbd.csi.ceph.com``, ``cephfs.csi.ceph.com``): every volume is a directory.

:class:`CsiController` plays external-provisioner, the PV controller (binding, reclaim), the pvc-/pv-protection
controllers (attach/detach: ``csi_attach``; expansion: ``csi_resize``; snapshots: ``snapshots``).
A volume's data lives in ``volumes/<volumeHandle>/`` (:func:`volume_dir`).

Not modelled: ENOSPC. A volume is a plain directory, so writes past its capacity succeed; usage is measured
(:func:`volume_usage`, apparent sizes as ``du --apparent-size``) and reported, and the :func:`fill_volume`
fault brings a volume to capacity with a sparse file so that :func:`is_full` and volume stats say so.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..quantity import parse_quantity
from ..resources import ResourceType
from ..store import Obj, TypeKey
from ..verbs import Verbs
from .base import Key, SimController, rt_of
from .context import SimContext
from .events import record_event
from .topology import ROOTFS_ANNOTATION, seed_golden

PVCS, PVS, PODS = rt_of("", "persistentvolumeclaims"), rt_of("", "persistentvolumes"), rt_of("", "pods")
SCS, SNAPSHOTS = (
    rt_of("storage.k8s.io", "storageclasses"),
    rt_of("snapshot.storage.k8s.io", "volumesnapshots"),
)
MERGE = "application/merge-patch+json"
RBD, CEPHFS = "rbd.csi.ceph.com", "cephfs.csi.ceph.com"
PVC_PROTECTION, PV_PROTECTION = "kubernetes.io/pvc-protection", "kubernetes.io/pv-protection"
PROVISIONER_FINALIZER = "external-provisioner.volume.kubernetes.io/finalizer"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
STORAGE_PROVISIONER = (
    "volume.beta.kubernetes.io/storage-provisioner",
    "volume.kubernetes.io/storage-provisioner",
)
GOLDEN_LABEL = "gpuworkspace.dev/golden"  # label "true": seed the default rootfs (or ROOTFS_ANNOTATION)
DEFAULT_ROOTFS = "ubuntu-24.04"
FILL_FILE = ".devcluster-fill"
PV_CONTROLLER = "persistentvolume-controller"
# the scheduler's VolumeRestrictions reason for a second user of a ReadWriteOncePod claim
RWOP_CONFLICT = "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
_EXTERNAL_PROVISIONING = (
    "Waiting for a volume to be created either by the external provisioner '{}' or manually by the system "
    "administrator. If volume creation is delayed, please verify that the provisioner is running and "
    "correctly registered."
)
_MIB, _GIB = 2**20, 2**30
_SECRET_KINDS = ("controller-publish", "node-stage", "node-publish", "controller-expand", "node-expand")


@dataclass(frozen=True)
class Driver:
    name: str
    short: str  # "rbd" | "cephfs"
    attach_required: bool  # the CSIDriver's attachRequired
    node_expand: bool  # filesystem volumes finish expansion on the node (kubelet NodeExpandVolume)


# Rook registers both CSIDrivers with attachRequired: true (VolumeAttachments also serve its fencing).
DRIVERS = {RBD: Driver(RBD, "rbd", True, True), CEPHFS: Driver(CEPHFS, "cephfs", True, False)}


# ---------------------------------------------------------------------------- pure decisions
def volume_handle(cluster_id: str, pool: str, object_uuid: str) -> str:
    """ceph-csi's composite volume ID: version, clusterID length and ID, pool ID, object UUID."""
    pool_id = int(hashlib.sha1(pool.encode()).hexdigest()[:2], 16) % 16 + 1
    return f"0001-{len(cluster_id):04x}-{cluster_id}-{pool_id:016x}-{object_uuid}"


def format_bytes(size: int) -> str:
    """A byte count as a canonical BinarySI quantity ("1Gi", "1536Mi")."""
    for power, suffix in ((60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")):
        if size and size % (1 << power) == 0:
            return f"{size >> power}{suffix}"
    return str(size)


def round_size(driver: Driver, size: int) -> int:
    """ceph-csi rounds RBD images up to MiB, CephFS subvolumes up to MiB below 1Gi, else to GiB."""
    unit = _GIB if driver.short == "cephfs" and size >= _GIB else _MIB
    return max(-(-size // unit), 1) * unit


def access_mode_error(driver: Driver, modes: list[str], volume_mode: str) -> str | None:
    """ceph-csi's CreateVolume refusal of access modes it cannot serve (None when fine)."""
    if driver.short == "rbd" and "ReadWriteMany" in modes and volume_mode != "Block":
        return "rpc error: code = InvalidArgument desc = multi node access modes are only supported on rbd `block` type volumes"
    return None


def pod_claims(pod: Obj) -> list[str]:
    """The PVC names a pod's volumes reference (generic ephemeral volumes by their derived name)."""
    out = []
    for vol in pod.get("spec", {}).get("volumes") or []:
        if vol.get("persistentVolumeClaim"):
            out.append(vol["persistentVolumeClaim"].get("claimName", ""))
        elif vol.get("ephemeral"):
            out.append(f"{pod['metadata']['name']}-{vol['name']}")
    return out


def pod_on_node(pod: Obj) -> bool:
    """Scheduled and not terminated: what the protection and attach/detach controllers count as a user."""
    return bool(pod.get("spec", {}).get("nodeName")) and pod.get("status", {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


def data_source(pvc: Obj) -> tuple[str, str] | None:
    """(kind, name) of the claim's dataSourceRef/dataSource, if any."""
    spec = pvc.get("spec", {})
    src = spec.get("dataSourceRef") or spec.get("dataSource")
    return (src.get("kind", ""), src.get("name", "")) if src else None


def secret_refs(params: dict[str, str]) -> Obj:
    """``csi.storage.k8s.io/<kind>-secret-name`` class parameters → the PV's ``<kind>SecretRef`` fields."""
    out = {}
    for kind in _SECRET_KINDS:
        name = params.get(f"csi.storage.k8s.io/{kind}-secret-name")
        if name:
            first, second = kind.split("-")
            namespace = params.get(f"csi.storage.k8s.io/{kind}-secret-namespace", "")
            out[f"{first}{second.capitalize()}SecretRef"] = {"name": name, "namespace": namespace}
    return out


def size_of(value: Any) -> int:
    return int(parse_quantity(value)) if value not in (None, "") else 0


# ---------------------------------------------------------------------------- shared helpers
def merge_patch(verbs: Verbs, rt: ResourceType, obj: Obj, patch: Obj, *, status: bool = False) -> Obj:
    meta = obj["metadata"]
    sub = "status" if status else ""
    new, _ = verbs.patch(rt, meta.get("namespace", ""), meta["name"], patch, MERGE, subresource=sub)
    return new


def add_finalizer(verbs: Verbs, rt: ResourceType, obj: Obj, name: str) -> Obj:
    finalizers = list(obj["metadata"].get("finalizers") or [])
    if name in finalizers or obj["metadata"].get("deletionTimestamp"):
        return obj
    return merge_patch(verbs, rt, obj, {"metadata": {"finalizers": [*finalizers, name]}})


def drop_finalizers(verbs: Verbs, rt: ResourceType, obj: Obj, *names: str) -> None:
    """Remove finalizers, guarded by the resourceVersion read (a concurrent writer makes us retry)."""
    meta = obj["metadata"]
    if set(names) & set(meta.get("finalizers") or []):
        kept = [f for f in meta["finalizers"] if f not in names]
        patch = {"metadata": {"finalizers": kept or None, "resourceVersion": meta["resourceVersion"]}}
        merge_patch(verbs, rt, obj, patch)


def copy_tree(src: Path, dst: Path) -> None:
    """A volume copy (clone, snapshot, restore): the whole tree, symlinks kept, into ``dst``."""
    dst.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)


def volume_dir(ctx: SimContext, handle: str) -> Path:
    return ctx.path("volumes", handle)


def bound_volume(ctx: SimContext, namespace: str, claim: str) -> Obj | None:
    """The PV a claim is bound to (None while unbound)."""
    name = (ctx.verbs.store.get(PVCS, namespace, claim) or {}).get("spec", {}).get("volumeName")
    return ctx.verbs.store.get(PVS, "", name) if name else None


def claim_volume_dir(ctx: SimContext, namespace: str, claim: str) -> Path | None:
    """PVC → PV → ``spec.csi.volumeHandle`` → directory (None while unbound, or not one of ours)."""
    csi = ((bound_volume(ctx, namespace, claim) or {}).get("spec", {}).get("csi")) or {}
    return volume_dir(ctx, csi["volumeHandle"]) if csi.get("driver") in DRIVERS else None


def volume_usage(ctx: SimContext, handle: str) -> tuple[int, int]:
    """(used bytes, capacity bytes): apparent file sizes under the directory; capacity from the PV."""
    used = 0
    for root, _dirs, files in os.walk(volume_dir(ctx, handle)):
        for name in files:
            try:
                used += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    capacity = 0
    for pv in ctx.verbs.store.items(PVS):
        if (pv.get("spec", {}).get("csi") or {}).get("volumeHandle") == handle:
            capacity = size_of(pv["spec"].get("capacity", {}).get("storage"))
    return used, capacity


def is_full(ctx: SimContext, handle: str) -> bool:
    used, capacity = volume_usage(ctx, handle)
    return bool(capacity) and used >= capacity


def fill_volume(ctx: SimContext, handle: str, leave_bytes: int = 0) -> int:
    """Fault: a sparse file brings usage to capacity minus ``leave_bytes``; returns its size."""
    path = volume_dir(ctx, handle) / FILL_FILE
    path.unlink(missing_ok=True)
    used, capacity = volume_usage(ctx, handle)
    size = max(capacity - used - leave_bytes, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.truncate(size)
    return size


def unfill_volume(ctx: SimContext, handle: str) -> None:
    (volume_dir(ctx, handle) / FILL_FILE).unlink(missing_ok=True)


def claim_users(ctx: SimContext, pvc: Obj) -> list[Obj]:
    """Scheduled, unterminated pods using the claim."""
    ns, name = pvc["metadata"]["namespace"], pvc["metadata"]["name"]
    return [p for p in ctx.verbs.store.items(PODS, ns) if pod_on_node(p) and name in pod_claims(p)]


def rwop_users(ctx: SimContext, pvc: Obj) -> list[Obj]:
    """The pods holding a ReadWriteOncePod claim: a new pod using it is unschedulable (``RWOP_CONFLICT``)."""
    return claim_users(ctx, pvc) if "ReadWriteOncePod" in pvc.get("spec", {}).get("accessModes", []) else []


def golden_rootfs(pvc: Obj) -> str | None:
    """Which root filesystem seeds a new volume: the topology's annotation, or the golden label's default."""
    meta = pvc["metadata"]
    rootfs = (meta.get("annotations") or {}).get(ROOTFS_ANNOTATION)
    return rootfs or (DEFAULT_ROOTFS if (meta.get("labels") or {}).get(GOLDEN_LABEL) == "true" else None)


def _populate(target: Path, source: Path | None, rootfs: str | None) -> None:
    target.mkdir(parents=True, exist_ok=True)
    if source is not None:
        copy_tree(source, target)
    elif rootfs:
        seed_golden(target, rootfs)  # the one coupling to the golden image's content


def _claim_ref(pvc: Obj) -> Obj:
    meta = pvc["metadata"]
    keys = ("name", "namespace", "uid", "resourceVersion")
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim"} | {k: meta[k] for k in keys}


# --------------------------------------------------------------------------- provisioner, binder
class CsiController(SimController):
    """Provisioning, binding, reclaim, pvc/pv protection and expansion for our drivers' volumes."""

    name = "csi"
    watches = (PVCS.key, PVS.key, SCS.key, PODS.key, SNAPSHOTS.key)

    def __init__(self, ctx: SimContext) -> None:
        super().__init__(ctx.verbs)
        self.ctx = ctx
        self.identity = f"{int(time.time() * 1000)}-{uuid.uuid4().int % 10000}"

    def keys_for(self, key: TypeKey, obj: Obj, old: Obj | None) -> Iterable[Key]:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        ns, name = meta.get("namespace", ""), meta["name"]
        if key == PVCS.key:
            return [(key, ns, name)] + ([(PVS.key, "", spec["volumeName"])] if spec.get("volumeName") else [])
        if key == PVS.key:
            ref = spec.get("claimRef") or {}
            if ref.get("name"):
                return [(key, "", name), (PVCS.key, ref["namespace"], ref["name"])]
            return [(key, "", name)] + [
                _key(p) for p in self.store.items(PVCS) if p["spec"].get("volumeName") == name
            ]
        if key == PODS.key:
            return [(PVCS.key, ns, claim) for claim in pod_claims(obj)]
        claims = self.store.items(PVCS, ns or None)
        if key == SCS.key:
            return [_key(p) for p in claims if p.get("spec", {}).get("storageClassName") == name]
        return [_key(p) for p in claims if data_source(p) == ("VolumeSnapshot", name)]

    async def reconcile(self, target: Key) -> None:
        if target[0] == PVCS.key:
            await self._claim(target)
        else:
            await self._volume(target)

    # --------------------------------------------------------------------------- claims
    async def _claim(self, target: Key) -> None:
        pvc = self.get(target)
        if pvc is None:
            return
        if pvc["metadata"].get("deletionTimestamp"):  # pvc-protection
            if not claim_users(self.ctx, pvc):
                drop_finalizers(self.verbs, PVCS, pvc, PVC_PROTECTION)
            return
        pvc = add_finalizer(self.verbs, PVCS, pvc, PVC_PROTECTION)  # what admission adds on create
        if pvc["spec"].get("volumeName"):
            pv = self.store.get(PVS, "", pvc["spec"]["volumeName"])
            if pv is not None:
                self._bind(pvc, pv, by_controller=False)
            elif pvc.get("status", {}).get("phase") == "Bound":
                merge_patch(self.verbs, PVCS, pvc, {"status": {"phase": "Lost"}}, status=True)
                message = "Bound claim has lost its PersistentVolume. Data on the volume is lost!"
                record_event(self.verbs, pvc, "Warning", "ClaimLost", message, component=PV_CONTROLLER)
            return
        sc = self.store.get(SCS, "", pvc["spec"].get("storageClassName") or "")
        if sc is None or sc.get("provisioner") not in DRIVERS or pvc.get("status", {}).get("phase") == "Lost":
            return
        if sc.get("volumeBindingMode") == "WaitForFirstConsumer" and not self._selected_node(pvc):
            return
        await self._provision(pvc, sc, DRIVERS[sc["provisioner"]])

    def _selected_node(self, pvc: Obj) -> str:
        """The node chosen for a WaitForFirstConsumer claim: the scheduler's annotation or its first user's."""
        node = (pvc["metadata"].get("annotations") or {}).get(SELECTED_NODE, "")
        users = claim_users(self.ctx, pvc)
        if not node and users:
            node = users[0]["spec"]["nodeName"]
            merge_patch(self.verbs, PVCS, pvc, {"metadata": {"annotations": {SELECTED_NODE: node}}})
        elif not node:
            ns, name = pvc["metadata"]["namespace"], pvc["metadata"]["name"]
            waiting = [p["metadata"]["name"] for p in self.store.items(PODS, ns) if name in pod_claims(p)]
            reason, message = (
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding",
            )
            if waiting:
                reason, message = "WaitForPodScheduled", f"waiting for pod {waiting[0]} to be scheduled"
            record_event(self.verbs, pvc, "Normal", reason, message, component=PV_CONTROLLER)
        return node

    async def _provision(self, pvc: Obj, sc: Obj, driver: Driver) -> None:
        meta, spec = pvc["metadata"], pvc["spec"]
        if (meta.get("annotations") or {}).get(STORAGE_PROVISIONER[1]) != driver.name:
            annotations = dict.fromkeys(STORAGE_PROVISIONER, driver.name)
            pvc = merge_patch(self.verbs, PVCS, pvc, {"metadata": {"annotations": annotations}})
            message = _EXTERNAL_PROVISIONING.format(driver.name)
            record_event(self.verbs, pvc, "Normal", "ExternalProvisioning", message, component=PV_CONTROLLER)
        existing = self.store.get(PVS, "", f"pvc-{meta['uid']}")
        if existing is not None:  # provisioned before a restart, not yet bound
            self._bind(pvc, existing, by_controller=True)
            return
        component = f"{driver.name}_csi-{driver.short}plugin-provisioner-0_{self.identity}"
        message = (
            f'External provisioner is provisioning volume for claim "{meta["namespace"]}/{meta["name"]}"'
        )
        record_event(self.verbs, pvc, "Normal", "Provisioning", message, component=component)
        error = access_mode_error(
            driver, spec.get("accessModes") or [], spec.get("volumeMode") or "Filesystem"
        )
        source, error = (None, error) if error else self._content_source(pvc)
        if error:
            message = f'failed to provision volume with StorageClass "{sc["metadata"]["name"]}": {error}'
            record_event(self.verbs, pvc, "Warning", "ProvisioningFailed", message, component=component)
            return
        params, object_uuid = sc.get("parameters") or {}, str(uuid.uuid4())
        pool = params.get("pool") or params.get("fsName", "")
        handle = volume_handle(params.get("clusterID", "rook-ceph"), pool, object_uuid)
        target = volume_dir(self.ctx, handle)
        await asyncio.to_thread(_populate, target, source, golden_rootfs(pvc))
        now = self.store.get(PVCS, meta["namespace"], meta["name"])
        if now is None or now["metadata"]["uid"] != meta["uid"] or now["metadata"].get("deletionTimestamp"):
            await asyncio.to_thread(shutil.rmtree, target, True)  # the claim went away meanwhile
            return
        pv, _ = self.verbs.create(PVS, "", self._pv_body(now, sc, driver, handle, object_uuid))
        message = f"Successfully provisioned volume {pv['metadata']['name']}"
        record_event(self.verbs, now, "Normal", "ProvisioningSucceeded", message, component=component)
        self._bind(now, pv, by_controller=True)

    def _content_source(self, pvc: Obj) -> tuple[Path | None, str | None]:
        """The directory a new volume starts as a copy of (a VolumeSnapshot or PVC data source)."""
        kind, name = data_source(pvc) or ("", "")
        ns = pvc["metadata"]["namespace"]
        prefix = f"error getting handle for DataSource Type {kind} by Name {name}"
        if kind == "PersistentVolumeClaim":
            path = claim_volume_dir(self.ctx, ns, name)
            return (path, None) if path else (None, f"{prefix}: claim {name} is not bound")
        if kind != "VolumeSnapshot":
            return None, None
        snap = self.store.get(SNAPSHOTS, ns, name)
        if snap is None:
            missing = f'volumesnapshots.snapshot.storage.k8s.io "{name}" not found'
            return None, f"{prefix}: error getting snapshot {name} from api server: {missing}"
        if not snap.get("status", {}).get("readyToUse"):
            return None, f"{prefix}: snapshot {name} is not Ready"
        return self.ctx.path("volumes", f"snapshot-{snap['metadata']['uid']}"), None

    def _pv_body(self, pvc: Obj, sc: Obj, driver: Driver, handle: str, object_uuid: str) -> Obj:
        spec, params = pvc["spec"], sc.get("parameters") or {}
        policy, volume_mode = sc.get("reclaimPolicy", "Delete"), spec.get("volumeMode", "Filesystem")
        attrs = {k: str(v) for k, v in params.items() if not k.startswith("csi.storage.k8s.io/")}
        attrs["storage.kubernetes.io/csiProvisionerIdentity"] = f"{self.identity}-{driver.name}"
        if driver.short == "rbd":
            attrs |= {"imageName": f"csi-vol-{object_uuid}", "journalPool": params.get("pool", "")}
        else:
            path = f"/volumes/csi/csi-vol-{object_uuid}/{uuid.uuid4()}"
            attrs |= {"subvolumeName": f"csi-vol-{object_uuid}", "subvolumePath": path}
        csi = {"driver": driver.name, "volumeHandle": handle, "volumeAttributes": attrs} | secret_refs(params)
        if driver.short == "rbd" and volume_mode == "Filesystem":
            csi["fsType"] = params.get("csi.storage.k8s.io/fstype", "ext4")
        request = size_of(spec.get("resources", {}).get("requests", {}).get("storage", "1Gi"))
        return {
            "metadata": {
                "name": f"pvc-{pvc['metadata']['uid']}",
                "annotations": {"pv.kubernetes.io/provisioned-by": driver.name},
                "finalizers": [PV_PROTECTION] + ([PROVISIONER_FINALIZER] if policy == "Delete" else []),
            },
            "spec": {
                "accessModes": list(spec.get("accessModes") or []),
                "capacity": {"storage": format_bytes(round_size(driver, request))},
                "claimRef": _claim_ref(pvc),
                "csi": csi,
                "persistentVolumeReclaimPolicy": policy,
                "storageClassName": sc["metadata"]["name"],
                "volumeMode": volume_mode,
            }
            | ({"mountOptions": list(sc["mountOptions"])} if sc.get("mountOptions") else {}),
        }

    def _bind(self, pvc: Obj, pv: Obj, *, by_controller: bool) -> bool:
        """PV → claimRef + Bound; PVC → volumeName, bind annotations, Bound status. False if it can't."""
        meta, ref = pvc["metadata"], pv["spec"].get("claimRef") or {}
        if ref and (ref.get("namespace"), ref.get("name"), ref.get("uid") or meta["uid"]) != (
            meta["namespace"],
            meta["name"],
            meta["uid"],
        ):
            return False
        if ref.get("uid") != meta["uid"]:
            pv = merge_patch(self.verbs, PVS, pv, {"spec": {"claimRef": _claim_ref(pvc)}})
        if pv.get("status", {}).get("phase") != "Bound":
            pv = merge_patch(self.verbs, PVS, pv, {"status": {"phase": "Bound"}}, status=True)
        annotations = {"pv.kubernetes.io/bind-completed": "yes"}
        annotations |= {"pv.kubernetes.io/bound-by-controller": "yes"} if by_controller else {}
        current = meta.get("annotations") or {}
        if pvc["spec"].get("volumeName") != pv["metadata"]["name"] or any(
            k not in current for k in annotations
        ):
            patch = {"metadata": {"annotations": annotations}, "spec": {"volumeName": pv["metadata"]["name"]}}
            pvc = merge_patch(self.verbs, PVCS, pvc, patch)
        if pvc.get("status", {}).get("phase") != "Bound":
            keys = ("accessModes", "capacity")
            status = {"phase": "Bound"} | {k: pv["spec"].get(k) for k in keys}
            merge_patch(self.verbs, PVCS, pvc, {"status": status}, status=True)
        return True

    # -------------------------------------------------------------------------- volumes
    async def _volume(self, target: Key) -> None:
        """Reclaim (Released; Delete removes data and PV, Retain keeps both) and pv-protection."""
        pv = self.get(target)
        if pv is None or (pv["spec"].get("csi") or {}).get("driver") not in DRIVERS:
            return
        meta, spec, phase = pv["metadata"], pv["spec"], pv.get("status", {}).get("phase")
        ref = spec.get("claimRef") or {}
        claim = self.store.get(PVCS, ref.get("namespace", ""), ref.get("name", "")) if ref else None
        claim_alive = claim is not None and ref.get("uid") in (None, "", claim["metadata"]["uid"])
        data = volume_dir(self.ctx, spec["csi"]["volumeHandle"])
        delete_data = spec.get("persistentVolumeReclaimPolicy") == "Delete"
        if meta.get("deletionTimestamp"):
            if phase != "Bound" or not claim_alive:  # pv-protection lets go of a volume no claim holds
                if delete_data:
                    await asyncio.to_thread(shutil.rmtree, data, True)
                drop_finalizers(self.verbs, PVS, pv, PV_PROTECTION, PROVISIONER_FINALIZER)
            return
        pv = add_finalizer(self.verbs, PVS, pv, PV_PROTECTION)
        if ref.get("uid") and not claim_alive:
            if phase != "Released":
                pv = merge_patch(self.verbs, PVS, pv, {"status": {"phase": "Released"}}, status=True)
            if delete_data:  # external-provisioner deletes the volume, then the PV object
                await asyncio.to_thread(shutil.rmtree, data, True)
                self.verbs.delete(PVS, "", meta["name"], {})
        elif not ref.get("uid") and phase in (None, "", "Pending", "Released"):
            merge_patch(self.verbs, PVS, pv, {"status": {"phase": "Available"}}, status=True)


def _key(pvc: Obj) -> Key:
    return (PVCS.key, pvc["metadata"]["namespace"], pvc["metadata"]["name"])
