"""Attach/detach for our attach-required CSI volumes: the attach/detach controller plus external-attacher.

One ``VolumeAttachment`` (``csi-<sha256(handle+driver+node)>``) per (PV, node) a scheduled pod needs, with
``status.attached=true`` (Ceph's ControllerPublish is a no-op: attaching is bookkeeping, as in reality).
An RWO/RWOP volume attached to one node is not attached to a second: its pods get the once-per-pod
``FailedAttachVolume`` Multi-Attach event and wait. Detach happens when no pod on the node uses the volume;
from a NotReady node only after ``max_wait_for_unmount_s`` (maxWaitForUnmountDuration, 6 min), or at once
when the node carries the ``node.kubernetes.io/out-of-service`` taint.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable

from ..store import Obj, TypeKey
from .base import Key, SimController, rt_of
from .context import SimContext
from .csi import (
    DRIVERS,
    PODS,
    PVCS,
    PVS,
    Driver,
    bound_volume,
    drop_finalizers,
    merge_patch,
    pod_claims,
    pod_on_node,
)
from .events import record_event

NODES, VAS = rt_of("", "nodes"), rt_of("storage.k8s.io", "volumeattachments")
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
AD_CONTROLLER = "attachdetach-controller"


# ---------------------------------------------------------------------------- pure decisions
def attachment_name(handle: str, driver: str, node: str) -> str:
    """The VolumeAttachment name the in-tree CSI attacher derives."""
    return "csi-" + hashlib.sha256(f"{handle}{driver}{node}".encode()).hexdigest()


def exclusive(modes: Iterable[str]) -> bool:
    """Multi-attach is forbidden for RWO/RWOP volumes."""
    return any(m in ("ReadWriteOnce", "ReadWriteOncePod") for m in modes)


def multi_attach_message(pv_name: str, namespace: str, blockers: list[Obj]) -> str:
    """The ``FailedAttachVolume`` text for a pod in ``namespace`` (reconciler.reportMultiAttachError)."""
    local = [p["metadata"]["name"] for p in blockers if p["metadata"].get("namespace") == namespace]
    others = len(blockers) - len(local)
    if not blockers:
        detail = "Volume is already exclusively attached to one node and can't be attached to another"
    elif local:
        detail = f"Volume is already used by pod(s) {', '.join(local)}"
        detail += f" and {others} pod(s) in different namespaces" if others else ""
    else:
        detail = f"Volume is already used by {others} pod(s) in different namespaces"
    return f'Multi-Attach error for volume "{pv_name}" {detail}'


def has_taint(node: Obj, key: str) -> bool:
    return any(t.get("key") == key for t in node.get("spec", {}).get("taints") or [])


def node_not_ready(node: Obj) -> bool:
    conds = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") != "True" for c in conds)


def _driver(pv: Obj | None) -> Driver | None:
    driver = DRIVERS.get(((pv or {}).get("spec", {}).get("csi") or {}).get("driver", ""))
    return driver if driver is not None and driver.attach_required else None


def _finalizer(driver: Driver) -> str:
    return f"external-attacher/{driver.name.replace('.', '-')}"


def volumes_attached(ctx: SimContext, pod: Obj) -> bool:
    """Every attach-required volume of a scheduled pod is attached to its node (the kubelet's mount gate)."""
    node = pod.get("spec", {}).get("nodeName") or ""
    for claim in pod_claims(pod):
        pv = bound_volume(ctx, pod["metadata"]["namespace"], claim)
        driver = _driver(pv)
        if pv is None or not node:
            return False
        if driver is not None:
            va = ctx.verbs.store.get(
                VAS, "", attachment_name(pv["spec"]["csi"]["volumeHandle"], driver.name, node)
            )
            if va is None or not va.get("status", {}).get("attached"):
                return False
    return True


class AttachController(SimController):
    """Reconciles per PV: wanted nodes (its pods') against its VolumeAttachments."""

    name = "csi-attacher"
    watches = (PODS.key, PVS.key, PVCS.key, VAS.key, NODES.key)

    def __init__(self, ctx: SimContext, *, max_wait_for_unmount_s: float | None = 360.0) -> None:
        super().__init__(ctx.verbs)
        self.ctx = ctx
        self.max_wait_for_unmount_s = max_wait_for_unmount_s  # None: never force-detach from a NotReady node
        self._unneeded_since: dict[str, float] = {}  # attachment → when it stopped being needed
        self._reported: set[tuple[str, str]] = set()  # (pv/node, pod uid): Multi-Attach events sent

    def keys_for(self, key: TypeKey, obj: Obj, old: Obj | None) -> Iterable[Key]:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        if key == PVS.key:
            names = [meta["name"]]
        elif key == VAS.key:
            names = [(spec.get("source") or {}).get("persistentVolumeName") or ""]
        elif key == PVCS.key:
            names = [spec.get("volumeName") or ""]
        elif key == PODS.key:
            claims = [self.store.get(PVCS, meta["namespace"], c) or {} for c in pod_claims(obj)]
            names = [c.get("spec", {}).get("volumeName") or "" for c in claims]
        else:
            vas = [va for va in self.store.items(VAS) if va["spec"].get("nodeName") == meta["name"]]
            names = [va["spec"]["source"].get("persistentVolumeName") or "" for va in vas]
        return [(PVS.key, "", n) for n in names if n]

    async def reconcile(self, target: Key) -> None:
        pv = self.store.get(PVS, "", target[2])
        driver = _driver(pv)
        wanted = self._wanted(pv) if pv is not None and driver is not None else {}
        attached = {
            va["spec"]["nodeName"]: va
            for va in self.store.items(VAS)
            if va["spec"]["source"].get("persistentVolumeName") == target[2]
        }
        for node, pods in wanted.items():
            assert pv is not None and driver is not None
            va = attached.get(node)
            if va is not None:
                self._unneeded_since.pop(va["metadata"]["name"], None)
                if not va["metadata"].get("deletionTimestamp"):
                    self._mark_attached(va, pv, pods)
                continue
            others = [n for n in attached if n != node]
            if others and exclusive(pv["spec"].get("accessModes") or []):
                self._report_multi_attach(pv, node, pods, [p for n in others for p in wanted.get(n, [])])
                continue
            handle = pv["spec"]["csi"]["volumeHandle"]
            body = {
                "metadata": {
                    "name": attachment_name(handle, driver.name, node),
                    "finalizers": [_finalizer(driver)],
                },
                "spec": {
                    "attacher": driver.name,
                    "nodeName": node,
                    "source": {"persistentVolumeName": target[2]},
                },
            }
            attached[node], _ = self.verbs.create(VAS, "", body)
            self._mark_attached(attached[node], pv, pods)
        for node, va in attached.items():
            if node not in wanted:
                self._detach(target, va)

    def _wanted(self, pv: Obj) -> dict[str, list[Obj]]:
        """node → pods there using the PV's claim; the earliest pod's node first (first come, first attached)."""
        ref = pv["spec"].get("claimRef") or {}
        pvc = self.store.get(PVCS, ref.get("namespace", ""), ref.get("name", ""))
        if pvc is None or pvc["spec"].get("volumeName") != pv["metadata"]["name"]:
            return {}
        pods = [
            p
            for p in self.store.items(PODS, ref["namespace"])
            if pod_on_node(p) and ref["name"] in pod_claims(p)
        ]
        pods.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]))
        out: dict[str, list[Obj]] = {}
        for pod in pods:
            out.setdefault(pod["spec"]["nodeName"], []).append(pod)
        return out

    def _mark_attached(self, va: Obj, pv: Obj, pods: list[Obj]) -> None:
        """external-attacher: record the attachment (no ControllerPublish work for Ceph)."""
        if va.get("status", {}).get("attached"):
            return
        merge_patch(self.verbs, VAS, va, {"status": {"attached": True}}, status=True)
        message = f'AttachVolume.Attach succeeded for volume "{pv["metadata"]["name"]}"'
        for pod in pods:
            self._reported = {r for r in self._reported if r[1] != pod["metadata"]["uid"]}
            record_event(
                self.verbs, pod, "Normal", "SuccessfulAttachVolume", message, component=AD_CONTROLLER
            )

    def _report_multi_attach(self, pv: Obj, node: str, pods: list[Obj], blockers: list[Obj]) -> None:
        """Once per waiting pod, as the reconciler does (MultiAttachErrorReported)."""
        for pod in pods:
            key = (f"{pv['metadata']['name']}/{node}", pod["metadata"]["uid"])
            if key not in self._reported:
                self._reported.add(key)
                message = multi_attach_message(pv["metadata"]["name"], pod["metadata"]["namespace"], blockers)
                record_event(
                    self.verbs, pod, "Warning", "FailedAttachVolume", message, component=AD_CONTROLLER
                )

    def _detach(self, target: Key, va: Obj) -> None:
        name = va["metadata"]["name"]
        if va["metadata"].get("deletionTimestamp"):  # external-attacher: ControllerUnpublish (no-op), let go
            drop_finalizers(self.verbs, VAS, va, *(va["metadata"].get("finalizers") or []))
            return
        node = self.store.get(NODES, "", va["spec"]["nodeName"])
        if node is not None and node_not_ready(node) and not has_taint(node, OUT_OF_SERVICE):
            if self.max_wait_for_unmount_s is None:
                return
            now = asyncio.get_running_loop().time()
            remaining = self._unneeded_since.setdefault(name, now) + self.max_wait_for_unmount_s - now
            if remaining > 0:
                self.requeue_after(target, remaining)
                return
        self._unneeded_since.pop(name, None)
        self.verbs.delete(VAS, "", name, {})
