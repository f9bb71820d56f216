"""CDI (v1.6x-like) DataVolumes and DataSources over the simulated CSI: a clone copies the source's directory.

A DataVolume with ``spec.sourceRef`` (a DataSource) or ``spec.source.pvc`` clones, ``spec.source.blank`` makes an
empty volume. The target PVC has the DataVolume's name, is owned by it (the garbage collector deletes it with
the DataVolume) and carries, as CDI's ``newPersistentVolumeClaim`` writes them (:func:`claim_metadata`), CDI's
label, every label and annotation of the DataVolume at that moment, then CDI's own annotations and recommended
labels. Copied once, at creation: later changes to the DataVolume's labels do not reach the claim. ``spec.pvc`` is used verbatim; ``spec.storage`` is rendered as CDI
does with the StorageProfile: accessModes exactly as given (omitted: the profile's first claim property set,
for RBD ``[ReadWriteMany]`` with ``volumeMode: Block``), a missing volumeMode from the first property set
allowing the modes (RBD + ReadWriteOnce → Block), the default class when none is named, Filesystem requests
inflated by the filesystem overhead (5.5 %), and a clone's missing size taken from the source.

Phases: Pending → CloneScheduled (WaitForFirstConsumer while a WaitForFirstConsumer target is unbound; the
source must be bound and not used by a pod) → CloneInProgress (``status.progress`` rising over
``clone_duration_s`` while the directory is copied) → Succeeded (``100.0%``). A missing source is Failed with
reason ``CloneWithoutSource`` (a simulator choice: real CDI leaves the phase and only records the event) and
recovers when the source appears. Not modelled: clone strategies (snapshot/csi-clone), the clone-token RBAC
check for cross-namespace clones, importers other than blank.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..store import Obj, TypeKey
from ..verbs import clone, now_rfc3339
from .base import Key, SimController, rt_of
from .context import SimContext
from .csi import PODS, PVCS, SCS, claim_volume_dir, copy_tree, merge_patch, pod_claims, size_of
from .events import record_event

DVS, DATASOURCES = rt_of("cdi.kubevirt.io", "datavolumes"), rt_of("cdi.kubevirt.io", "datasources")
CLONE_COMPONENT, IMPORT_COMPONENT = "datavolume-pvc-clone-controller", "datavolume-import-controller"
CDI_LABEL = {"app": "containerized-data-importer"}  # common.CDILabelKey: common.CDILabelValue
RECOMMENDED_LABELS = {
    "app.kubernetes.io/component": "storage",
    "app.kubernetes.io/managed-by": "cdi-controller",
}
# Filesystem claims: KubePersistentVolumeFillingUp is suppressed (CDI's importer fills them on purpose)
FILLING_UP_SUPPRESS = {"alerts.k8s.io/KubePersistentVolumeFillingUp": "disabled"}
# CDI's StorageProfile capabilities per provisioner: (accessMode, volumeMode), in order of preference
PROFILES = {
    "rbd.csi.ceph.com": (
        ("ReadWriteMany", "Block"),
        ("ReadWriteOnce", "Block"),
        ("ReadWriteOnce", "Filesystem"),
    ),
    "cephfs.csi.ceph.com": (("ReadWriteMany", "Filesystem"),),
}
POD_PHASE = "cdi.kubevirt.io/storage.pod.phase"
_ALIGN = 2**20
_PROGRESS_STEPS = 4


# ------------------------------------------------------------------------------ pure decisions
def render_claim_spec(dv_spec: Obj, sc: Obj | None, source_size: str | None, overhead: float) -> Obj:
    """The target PVC's spec for a DataVolume (``spec.pvc`` verbatim; ``spec.storage`` via the profile)."""
    if dv_spec.get("pvc"):
        return clone(dv_spec["pvc"])
    spec = clone(dv_spec.get("storage") or {})
    profile = PROFILES.get((sc or {}).get("provisioner", ""), ())
    modes = spec.get("accessModes") or []
    if not spec.get("volumeMode"):
        fitting = [vm for am, vm in profile if am in modes]
        spec["volumeMode"] = (fitting or [vm for _, vm in profile] or ["Filesystem"])[0]
    if not modes:
        spec["accessModes"] = [am for am, vm in profile if vm == spec["volumeMode"]][:1] or ["ReadWriteOnce"]
    if sc is not None and not spec.get("storageClassName"):
        spec["storageClassName"] = sc["metadata"]["name"]
    requests = spec.setdefault("resources", {}).setdefault("requests", {})
    if requests.get("storage"):
        if spec["volumeMode"] == "Filesystem" and overhead:
            aligned = math.ceil(size_of(requests["storage"]) / _ALIGN) * _ALIGN
            requests["storage"] = str(math.ceil(aligned / (1 - overhead)))
    elif source_size:
        requests["storage"] = source_size
    return spec


def claim_metadata(dv: Obj, volume_mode: str, source: Obj | None) -> Obj:
    """Labels and annotations of the claim CDI creates for ``dv`` (datavolume/controller-base.go,
    ``newPersistentVolumeClaim`` then ``util.SetRecommendedLabels`` in ``createPvcForDatavolume``).

    Labels: CDI's ``app`` label (and the filling-up alert suppression for Filesystem claims), then every
    DataVolume label over them, then the recommended labels over those. Annotations: every DataVolume
    annotation, then CDI's (content type, pod phase, restarts, ``createdForDataVolume``, the clone source).
    """
    meta, spec = dv["metadata"], dv.get("spec") or {}
    labels = dict(CDI_LABEL) | (FILLING_UP_SUPPRESS if volume_mode == "Filesystem" else {})
    labels |= meta.get("labels") or {}
    labels |= RECOMMENDED_LABELS
    annotations = dict(meta.get("annotations") or {})
    annotations |= {
        "cdi.kubevirt.io/storage.pod.restarts": "0",
        "cdi.kubevirt.io/storage.contentType": spec.get("contentType", "kubevirt"),
        POD_PHASE: "Pending",
        "cdi.kubevirt.io/createdForDataVolume": meta["uid"],
    }
    if source is not None:
        annotations["cdi.kubevirt.io/cloneRequest"] = (
            f"{source['metadata']['namespace']}/{source['metadata']['name']}"
        )
    return {"labels": labels, "annotations": annotations}


def clone_size_error(dv_spec: Obj, source: Obj) -> str | None:
    """ValidateRequestedCloneSize: a clone's explicit size may not be below the source claim's request."""
    target = (dv_spec.get("pvc") or dv_spec.get("storage") or {}).get("resources", {}).get("requests", {})
    want = size_of(source.get("spec", {}).get("resources", {}).get("requests", {}).get("storage"))
    if target.get("storage") and size_of(target["storage"]) < want:
        return "target resources requests storage size is smaller than the source"
    return None


def dv_source(dv: Obj, datasources: dict[tuple[str, str], Obj]) -> tuple[str, str, str]:
    """(kind, namespace, name) of what a DataVolume clones: ("pvc", ...), ("DataSource", ...) when that
    DataSource is missing, ("blank", "", "") or ("", "", "") for sources this simulator does not import."""
    spec, ns = dv.get("spec") or {}, dv["metadata"]["namespace"]
    ref = spec.get("sourceRef")
    if ref:
        ds_ns = ref.get("namespace") or ns
        ds = datasources.get((ds_ns, ref.get("name", "")))
        if ds is None:
            return "DataSource", ds_ns, ref.get("name", "")
        pvc = (ds.get("spec", {}).get("source") or {}).get("pvc") or {}
        return "pvc", pvc.get("namespace") or ds_ns, pvc.get("name", "")
    source = spec.get("source") or {}
    if "pvc" in source:
        return "pvc", source["pvc"].get("namespace") or ns, source["pvc"].get("name", "")
    return ("blank", "", "") if "blank" in source else ("", "", "")


def set_condition(conds: list[Obj], kind: str, status: str, reason: str, message: str, now: str) -> list[Obj]:
    """CDI's updateCondition: transition time moves only with the status, heartbeat with reason/message."""
    old = next((c for c in conds if c.get("type") == kind), None)
    new: Obj = {"type": kind, "status": status, "reason": reason, "message": message}
    if old is None or old.get("status") != status:
        new |= {"lastTransitionTime": now, "lastHeartbeatTime": now}
    else:
        same = (old.get("reason"), old.get("message")) == (reason, message)
        new |= {
            "lastTransitionTime": old.get("lastTransitionTime"),
            "lastHeartbeatTime": old.get("lastHeartbeatTime") if same else now,
        }
    return (
        [c for c in conds if c.get("type") != kind] + [new]
        if old is None
        else [new if c is old else c for c in conds]
    )


def dv_conditions(old: list[Obj], phase: str, pvc: Obj | None, failure: tuple[str, str] | None) -> list[Obj]:
    """Bound, Ready and Running as CDI derives them from the phase, the target PVC and a failure."""
    now = now_rfc3339()
    reason, message = failure or ("", "")
    if pvc is None:
        bound = ("False", reason or "NotFound", message or "No PVC found")
    elif pvc.get("status", {}).get("phase") == "Bound":
        bound = ("True", "Bound", f"PVC {pvc['metadata']['name']} Bound")
    else:
        bound = ("False", "Pending", f"PVC {pvc['metadata']['name']} Pending")
    ready = {"Succeeded": ("True", "", ""), "CloneInProgress": ("False", "TransferRunning", "")}.get(phase)
    running = {
        "Succeeded": ("False", "Completed", ""),
        "CloneInProgress": ("True", "Pod is running", ""),
    }.get(phase)
    conds = set_condition(old, "Bound", *bound, now)
    conds = set_condition(conds, "Ready", *(ready or ("False", reason, message)), now)
    return set_condition(conds, "Running", *(running or ("False", "", "")), now)


@dataclass
class _Clone:
    target: Key
    started: float
    task: asyncio.Future[None]


# --------------------------------------------------------------------------------- controller
class CdiController(SimController):
    """DataVolumes (clone from a PVC or DataSource, blank) and DataSource status."""

    name = "cdi"
    watches = (DVS.key, DATASOURCES.key, PVCS.key, PODS.key)

    def __init__(
        self, ctx: SimContext, *, clone_duration_s: float = 1.0, filesystem_overhead: float = 0.055
    ) -> None:
        super().__init__(ctx.verbs)
        self.ctx = ctx
        self.clone_duration_s, self.filesystem_overhead = clone_duration_s, filesystem_overhead
        self._clones: dict[str, _Clone] = {}  # DataVolume uid → copy in flight

    async def stop(self) -> None:
        for job in self._clones.values():
            job.task.cancel()
        await super().stop()

    def _datasources(self) -> dict[tuple[str, str], Obj]:
        return {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in self.store.items(DATASOURCES)}

    def keys_for(self, key: TypeKey, obj: Obj, old: Obj | None) -> Iterable[Key]:
        ns, name = obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
        if key == DVS.key:
            return [(key, ns, name)]
        if key == PODS.key and not pod_claims(obj):
            return []
        claims = (
            [(ns, c) for c in pod_claims(obj)] if key == PODS.key else [(ns, name)] if key == PVCS.key else []
        )
        out = [(DVS.key, c_ns, c) for c_ns, c in claims if key == PVCS.key or self.store.get(DVS, c_ns, c)]
        for ds in self.store.items(DATASOURCES):
            src = (ds.get("spec", {}).get("source") or {}).get("pvc") or {}
            if (src.get("namespace") or ds["metadata"]["namespace"], src.get("name")) in claims:
                out.append((DATASOURCES.key, ds["metadata"]["namespace"], ds["metadata"]["name"]))
        if key == DATASOURCES.key:
            out.append((key, ns, name))
        datasources = self._datasources()
        for dv in self.store.items(DVS):
            kind, s_ns, s_name = dv_source(dv, datasources)
            ref = dv.get("spec", {}).get("sourceRef") or {}
            via = key == DATASOURCES.key and (
                ref.get("namespace") or dv["metadata"]["namespace"],
                ref.get("name"),
            ) == (ns, name)
            if via or (kind == "pvc" and (s_ns, s_name) in claims):
                out.append((DVS.key, dv["metadata"]["namespace"], dv["metadata"]["name"]))
        return out

    async def reconcile(self, target: Key) -> None:
        if target[0] == DATASOURCES.key:
            self._datasource(target)
        else:
            self._datavolume(target)

    # -------------------------------------------------------------------------- DataSources
    def _datasource(self, target: Key) -> None:
        ds = self.get(target)
        if ds is None:
            return
        src = (ds.get("spec", {}).get("source") or {}).get("pvc")
        if not src:
            ready = ("False", "NoSource", "No source PVC set")
        else:
            ns = src.get("namespace") or target[1]
            dv, pvc = (
                self.store.get(DVS, ns, src.get("name", "")),
                self.store.get(PVCS, ns, src.get("name", "")),
            )
            phase = ((dv or {}).get("status") or {}).get("phase", "")
            if dv is not None and phase != "Succeeded":
                ready = ("False", phase, f"Import DataVolume phase {phase}")
            elif dv is None and pvc is None:
                ready = ("False", "NotFound", "PVC not found")
            else:
                ready = ("True", "Ready", "DataSource is ready to be consumed")
        old = ds.get("status") or {}
        conds = set_condition(list(old.get("conditions") or []), "Ready", *ready, now_rfc3339())
        status = {"conditions": conds, "source": ds["spec"].get("source") or {}}
        if _essence(old.get("conditions")) != _essence(conds) or old.get("source") != status["source"]:
            merge_patch(self.verbs, DATASOURCES, ds, {"status": status}, status=True)

    # -------------------------------------------------------------------------- DataVolumes
    def _datavolume(self, target: Key) -> None:
        dv = self.get(target)
        if dv is None or dv["metadata"].get("deletionTimestamp"):
            for uid, job in list(self._clones.items()):
                if job.target == target:  # the DataVolume went away: stop waiting for its copy
                    job.task.cancel()
                    del self._clones[uid]
            return
        if (dv.get("status") or {}).get("phase") == "Succeeded":
            return
        kind, s_ns, s_name = dv_source(dv, self._datasources())
        source = self.store.get(PVCS, s_ns, s_name) if kind == "pvc" else None
        pvc = self.store.get(PVCS, target[1], target[2])
        if kind in ("pvc", "DataSource") and source is None:
            message = f"The source {'pvc' if kind == 'pvc' else kind} {s_name} doesn't exist"
            self._status(
                dv,
                "Failed",
                pvc,
                failure=("CloneWithoutSource", message),
                event=("Warning", "CloneWithoutSource", message),
            )
            return
        invalid = (
            clone_size_error(dv.get("spec") or {}, source) if source is not None and pvc is None else None
        )
        if invalid:  # CDI's ValidateClone: the DataVolume waits, its target is not created
            message = "The clone doesn't meet the validation requirements"
            record_event(
                self.verbs, dv, "Warning", "CloneValidationFailed", message, component=CLONE_COMPONENT
            )
            self._status(dv, "Pending", None, failure=("CloneValidationFailed", invalid))
            return
        if pvc is None:
            pvc = self._create_claim(dv, source)
        elif not any(
            r.get("uid") == dv["metadata"]["uid"] for r in pvc["metadata"].get("ownerReferences") or []
        ):
            message = f'Resource "{pvc["metadata"]["name"]}" already exists and is not managed by DataVolume'
            record_event(self.verbs, dv, "Warning", "ErrResourceExists", message, component=CLONE_COMPONENT)
            return
        if kind == "blank":
            self._blank(dv, pvc)
        elif kind == "pvc" and source is not None:
            self._clone(target, dv, pvc, source)
        else:
            message = "the devcluster's CDI clones PVCs and DataSources and creates blank volumes only"
            record_event(self.verbs, dv, "Warning", "UnsupportedSource", message, component=IMPORT_COMPONENT)

    def _create_claim(self, dv: Obj, source: Obj | None) -> Obj:
        spec = dv.get("spec") or {}
        name = (spec.get("storage") or spec.get("pvc") or {}).get("storageClassName")
        sc = self.store.get(SCS, "", name) if name else self._default_class()
        source_size = ((source or {}).get("status") or {}).get("capacity", {}).get("storage")
        if source is not None and not source_size:
            source_size = source["spec"].get("resources", {}).get("requests", {}).get("storage")
        meta = dv["metadata"]
        claim_spec = render_claim_spec(spec, sc, source_size, self.filesystem_overhead)
        owner = {
            "apiVersion": DVS.api_version,
            "kind": "DataVolume",
            "name": meta["name"],
            "uid": meta["uid"],
        }
        body = {
            "metadata": {
                "name": meta["name"],
                **claim_metadata(dv, claim_spec.get("volumeMode") or "Filesystem", source),
                "ownerReferences": [owner | {"controller": True, "blockOwnerDeletion": True}],
            },
            "spec": claim_spec,
        }
        pvc, _ = self.verbs.create(PVCS, meta["namespace"], body)
        return pvc

    def _default_class(self) -> Obj | None:
        for sc in self.store.items(SCS):
            if (sc["metadata"].get("annotations") or {}).get(
                "storageclass.kubernetes.io/is-default-class"
            ) == "true":
                return sc
        return None

    def _waiting_phase(self, pvc: Obj) -> str | None:
        """While the target is unbound: WaitForFirstConsumer for such a class, else CloneScheduled."""
        if pvc.get("status", {}).get("phase") == "Bound":
            return None
        sc = self.store.get(SCS, "", pvc["spec"].get("storageClassName") or "")
        return (
            "WaitForFirstConsumer"
            if (sc or {}).get("volumeBindingMode") == "WaitForFirstConsumer"
            else "CloneScheduled"
        )

    def _clone(self, target: Key, dv: Obj, pvc: Obj, source: Obj) -> None:
        src = f"{source['metadata']['namespace']}/{source['metadata']['name']}"
        dst = f"{pvc['metadata']['namespace']}/{pvc['metadata']['name']}"
        scheduled = ("Normal", "CloneScheduled", f"Cloning from {src} into {dst} scheduled")
        waiting = self._waiting_phase(pvc)
        users = [
            p
            for p in self.store.items(PODS, source["metadata"]["namespace"])
            if source["metadata"]["name"] in pod_claims(p)
            and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        ]
        for pod in users:
            message = f"pod {pod['metadata']['namespace']}/{pod['metadata']['name']} using PersistentVolumeClaim {source['metadata']['name']}"
            record_event(self.verbs, dv, "Warning", "CloneSourceInUse", message, component=CLONE_COMPONENT)
        if waiting or users or source.get("status", {}).get("phase") != "Bound":
            self._status(
                dv,
                waiting or "CloneScheduled",
                pvc,
                event=None if waiting == "WaitForFirstConsumer" else scheduled,
            )
            return
        src_dir = claim_volume_dir(self.ctx, source["metadata"]["namespace"], source["metadata"]["name"])
        dst_dir = claim_volume_dir(self.ctx, pvc["metadata"]["namespace"], pvc["metadata"]["name"])
        if src_dir is None or dst_dir is None:
            self._status(dv, "CloneScheduled", pvc, event=scheduled)
            return
        loop, uid = asyncio.get_running_loop(), dv["metadata"]["uid"]
        job = self._clones.get(uid)
        if job is None:
            copy = asyncio.ensure_future(asyncio.to_thread(copy_tree, src_dir, dst_dir))
            job = self._clones[uid] = _Clone(target, loop.time(), copy)
            job.task.add_done_callback(lambda _: self._put(target))
            merge_patch(self.verbs, PVCS, pvc, {"metadata": {"annotations": {POD_PHASE: "Running"}}})
        interval = self.clone_duration_s / _PROGRESS_STEPS
        elapsed = loop.time() - job.started
        step = min(int(elapsed / interval), _PROGRESS_STEPS) if interval > 0 else _PROGRESS_STEPS
        if not job.task.done() or step < _PROGRESS_STEPS:  # progress moves in steps, as the cloner reports it
            in_progress = ("Normal", "CloneInProgress", f"Cloning from {src} into {dst} in progress")
            progress = f"{min(step, _PROGRESS_STEPS - 1) * 100 / _PROGRESS_STEPS:.2f}%"
            self._status(dv, "CloneInProgress", pvc, progress=progress, event=in_progress)
            self.requeue_after(target, max((step + 1) * interval - elapsed, 0.01))
            return
        del self._clones[uid]
        error = None if job.task.cancelled() else job.task.exception()
        if job.task.cancelled() or error is not None:
            message = f"Cloning from {src} into {dst} failed"
            self._status(
                dv, "Failed", pvc, failure=("CloneFailed", message), event=("Warning", "CloneFailed", message)
            )
            return
        merge_patch(self.verbs, PVCS, pvc, {"metadata": {"annotations": {POD_PHASE: "Succeeded"}}})
        succeeded = ("Normal", "CloneSucceeded", f"Successfully cloned from {src} into {dst}")
        self._status(dv, "Succeeded", pvc, progress="100.0%", event=succeeded)

    def _blank(self, dv: Obj, pvc: Obj) -> None:
        name = pvc["metadata"]["name"]
        if pvc.get("status", {}).get("phase") != "Bound":
            waiting = self._waiting_phase(pvc) or "ImportScheduled"
            phase = "ImportScheduled" if waiting == "CloneScheduled" else waiting
            self._status(dv, phase, pvc, event=("Normal", "ImportScheduled", f"Import into {name} scheduled"))
            return
        merge_patch(self.verbs, PVCS, pvc, {"metadata": {"annotations": {POD_PHASE: "Succeeded"}}})
        succeeded = ("Normal", "ImportSucceeded", f"Successfully imported into PVC {name}")
        self._status(dv, "Succeeded", pvc, progress="100.0%", event=succeeded)

    def _status(
        self,
        dv: Obj,
        phase: str,
        pvc: Obj | None,
        *,
        progress: str = "N/A",
        failure: tuple[str, str] | None = None,
        event: tuple[str, str, str] | None = None,
    ) -> None:
        """Write phase, progress and conditions if they changed; the event on a phase change, Bound's on its own."""
        old = dv.get("status") or {}
        conds = dv_conditions(list(old.get("conditions") or []), phase, pvc, failure)
        status: dict[str, Any] = {"phase": phase, "progress": progress, "conditions": conds}
        if pvc is not None:
            status["claimName"] = pvc["metadata"]["name"]
        changed = {k: v for k, v in status.items() if k != "conditions" and old.get(k) != v}
        if not changed and _essence(old.get("conditions")) == _essence(conds):
            return
        dv = merge_patch(self.verbs, DVS, dv, {"status": status}, status=True)
        if event is not None and old.get("phase") != phase:
            record_event(self.verbs, dv, event[0], event[1], event[2], component=CLONE_COMPONENT)
        bound = next(c for c in conds if c["type"] == "Bound")
        before: Obj = next((c for c in old.get("conditions") or [] if c.get("type") == "Bound"), {})
        if pvc is not None and (before.get("status"), before.get("reason"), before.get("message")) != (
            bound["status"],
            bound["reason"],
            bound["message"],
        ):
            record_event(
                self.verbs, dv, "Normal", bound["reason"], bound["message"], component=CLONE_COMPONENT
            )


def _essence(conds: Any) -> list[tuple[Any, ...]]:
    return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in conds or []]
