"""KubeVirt's virt-controller (VM and VMI loops) and virt-handler's status reports, simulated.

VM --(runStrategy, status.stateChangeRequests)--> VMI (same name, owned by the VM, finalizers
``kubevirt.io/virtualMachineControllerFinalize`` + ``foregroundDeleteVirtualMachine``) --> launcher pod
``virt-launcher-<vmi>-xxxxx`` (owned by the VMI; see ``sim/virtlauncher.py`` for the pod, the VMI status and
the kubelet/guest contract). The pure ``decide_*``/``render_vmi`` functions hold the decisions;
:class:`KubeVirtController` reads the store and writes through ``Verbs``.

Semantics kept from KubeVirt: stopping deletes the VMI (gracefully: its launcher pod is deleted and the VMI
stays, with its finalizer, until the pod is gone), so the VM, its DataVolumes and PVCs stay; a deleted VM
stops its VMI first (its finalizer holds it), and only ``dataVolumeTemplates`` DVs are owned by (and die
with) the VM. A launcher on a NotReady node keeps its VMI (Running, Ready False) and no new VMI is created
until the pod is really gone (force-deleted, or the node fenced with ``node.kubernetes.io/out-of-service``);
then Always/RerunOnFailure start a new VMI, which may land elsewhere. Start failures (a VMI final before it
ever ran) back off as ``status.startFailure`` (CrashLoopBackOff).
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta

from ..resources import ResourceType
from ..store import Obj, TypeKey
from ..verbs import clone, now_rfc3339
from .base import Key, SimController, rt_of
from .context import SimContext
from .events import record_event
from .virtlauncher import (
    DEFAULT_GRACE,
    DV_USABLE,
    FINAL,
    ORDER,
    claim_volumes,
    cond,
    decide_vmi_status,
    merge_conditions,
    meta,
    mkcond,
    owner_ref,
    parse_os_release,
    phase_of,
    render_launcher_pod,
    root_disk,
    status_of,
    volume_problem,
)

VMS, VMIS = rt_of("kubevirt.io", "virtualmachines"), rt_of("kubevirt.io", "virtualmachineinstances")
PODS, PVCS, PVS = rt_of("", "pods"), rt_of("", "persistentvolumeclaims"), rt_of("", "persistentvolumes")
DVS = rt_of("cdi.kubevirt.io", "datavolumes")
VMI_FINALIZER = "foregroundDeleteVirtualMachine"
VM_FINALIZER = "kubevirt.io/virtualMachineControllerFinalize"
CONTROLLER, HANDLER = "virtualmachine-controller", "virt-handler"
_FIRMWARE_NS = uuid.UUID("6a1a24a1-4061-4607-8bf4-a3963d0c5895")
_TIME = "%Y-%m-%dT%H:%M:%SZ"
Claims = dict[str, Obj | None]


# ---------------------------------------------------------------------- VM decisions
def run_strategy(vm: Obj) -> str:
    spec = vm.get("spec") or {}
    return spec.get("runStrategy") or ("Always" if spec.get("running") else "Halted")


def _first_request(vm: Obj) -> Obj:
    requests = status_of(vm).get("stateChangeRequests") or []
    return requests[0] if requests else {}


def _stop_requested(vm: Obj, vmi: Obj | None) -> bool:
    first = _first_request(vm)
    return vmi is not None and first.get("action") == "Stop" and first.get("uid") == meta(vmi).get("uid")


def decide_vm_action(vm: Obj, vmi: Obj | None) -> str:
    """syncRunStrategy: "start", "stop", "stop+request-start", "set-always" or "" (nothing to do)."""
    strategy, start_req = run_strategy(vm), _first_request(vm).get("action") == "Start"
    live = vmi is not None and not meta(vmi).get("deletionTimestamp")
    ended = live and (_stop_requested(vm, vmi) or phase_of(vmi) in FINAL)
    action = ""
    if strategy == "Always":
        action = "start" if vmi is None else "stop" if ended else ""
    elif strategy == "RerunOnFailure":
        if vmi is not None:
            action = ("stop+request-start" if phase_of(vmi) == "Failed" else "stop") if ended else ""
        elif start_req or status_of(vm).get("runStrategy") != strategy:
            action = "start"
    elif strategy == "Manual":
        action = "stop" if live and _stop_requested(vm, vmi) else "start" if vmi is None and start_req else ""
    elif strategy == "Halted":
        action = "stop" if live else "set-always" if vmi is None and start_req else ""
    elif strategy == "Once":
        action = "start" if vmi is None else ""
    return action


def is_set_to_start(vm: Obj, vmi: Obj | None) -> bool:
    strategy = run_strategy(vm)
    if strategy == "Manual":
        return (
            not _stop_requested(vm, vmi) if vmi is not None else _first_request(vm).get("action") == "Start"
        )
    if strategy == "RerunOnFailure":
        return vmi is None or phase_of(vmi) != "Succeeded"
    return strategy == "Always" or (strategy == "Once" and vmi is None)


def _trim_requests(requests: list[Obj], vmi: Obj | None) -> list[Obj]:
    """isTrimFirstChangeRequestNeeded: drop the first request once it has been acted upon."""
    first = requests[0] if requests else {}
    if first.get("action") == "Stop" and (vmi is None or first.get("uid") != meta(vmi).get("uid")):
        return requests[1:]
    live = vmi is not None and not meta(vmi).get("deletionTimestamp") and phase_of(vmi) not in FINAL
    return requests[1:] if first.get("action") == "Start" and live else requests


def _start_failure(vm: Obj, vmi: Obj | None, now: datetime) -> Obj | None:
    """syncStartFailureStatus: count VMIs that ended before ever running; back off 10s x count^2 (max 300s)."""
    old = status_of(vm).get("startFailure")
    ran = any(t.get("phase") == "Running" for t in status_of(vmi).get("phaseTransitionTimestamps") or [])
    if ran or run_strategy(vm) not in ("Always", "RerunOnFailure", "Once"):
        return None
    if vmi is None or phase_of(vmi) not in FINAL or (old or {}).get("lastFailedVMIUID") == meta(vmi)["uid"]:
        return old
    count = int((old or {}).get("consecutiveFailCount") or 0) + 1
    delay = min(300, 10 * count * count + random.randint(0, 5 * count * count))
    retry = (now + timedelta(seconds=delay)).strftime(_TIME)
    return {"consecutiveFailCount": count, "lastFailedVMIUID": meta(vmi)["uid"], "retryAfterTimestamp": retry}


def decide_printable_status(vm: Obj, vmi: Obj | None, dvs: Claims, pvcs: Claims) -> str:
    """setPrintableStatus: the first status that holds, in KubeVirt's precedence order."""
    names = [c for _, c in claim_volumes(((vm.get("spec") or {}).get("template") or {}).get("spec") or {})]
    dv_phases = [status_of(dvs[n]).get("phase") for n in names if dvs.get(n) is not None]
    unbound = any(pvcs.get(n) is not None and status_of(pvcs[n]).get("phase") != "Bound" for n in names)
    final, phase = vmi is not None and phase_of(vmi) in FINAL, phase_of(vmi)
    sync, sched = cond(vmi, "Synchronized") or {}, cond(vmi, "PodScheduled") or {}
    sync_reason = sync.get("reason") if sync.get("status") == "False" else None
    failures = (status_of(vm).get("startFailure") or {}).get("consecutiveFailCount") or 0
    checks = (
        ("Terminating", bool(meta(vm).get("deletionTimestamp"))),
        ("Stopping", vmi is not None and not final and bool(meta(vmi).get("deletionTimestamp"))),
        ("Running", vmi is not None and phase == "Running"),
        ("ErrorPvcNotFound", sync_reason == "FailedPvcNotFound"),
        ("DataVolumeError", "Failed" in dv_phases),
        ("ErrorUnschedulable", sched.get("status") == "False" and sched.get("reason") == "Unschedulable"),
        ("Provisioning", any(p not in (*DV_USABLE, "Failed") for p in dv_phases)),
        ("WaitingForVolumeBinding", unbound and is_set_to_start(vm, vmi)),
        ("ErrImagePull", sync_reason == "ErrImagePull"),
        ("ImagePullBackOff", sync_reason == "ImagePullBackOff"),
        ("Starting", vmi is not None and phase in ORDER[:3]),
        ("CrashLoopBackOff", (vmi is None or final) and failures > 0 and run_strategy(vm) != "Manual"),
        ("Stopped", vmi is None or final),
    )
    return next((name for name, holds in checks if holds), "Unknown")


def decide_vm_status(vm: Obj, vmi: Obj | None, dvs: Claims, pvcs: Claims, now: datetime) -> Obj:
    """updateStatus: created, ready, runStrategy, generations, requests, startFailure, conditions, printable."""
    old = status_of(vm)
    mine = ("created", "ready", "printableStatus", "conditions", "stateChangeRequests", "startFailure")
    status: Obj = {k: v for k, v in old.items() if k not in mine}
    status["created"] = vmi is not None
    status["ready"] = (cond(vmi, "Ready") or {}).get("status") == "True"
    if old.get("runStrategy") or vmi is not None:
        status["runStrategy"] = run_strategy(vm)
    generation = (meta(vmi).get("annotations") or {}).get("kubevirt.io/vm-generation", "")
    if generation.isdigit():
        status["observedGeneration"], status["desiredGeneration"] = (
            int(generation),
            meta(vm).get("generation", 1),
        )
    requests = _trim_requests(list(old.get("stateChangeRequests") or []), vmi)
    failure = _start_failure(vm, vmi, now)
    status.update({"stateChangeRequests": requests} if requests else {})
    status.update({"startFailure": failure} if failure else {})
    if vmi is None:
        ready = mkcond("Ready", "False", "VMINotExists", "VMI does not exist")
    else:
        ready = cond(vmi, "Ready") or mkcond(
            "Ready", "False", "VMIConditionMissing", "VMI is missing the Ready condition"
        )
    others = [c for c in status_of(vmi).get("conditions") or [] if c.get("type") != "Ready"]
    status["conditions"] = merge_conditions(
        old.get("conditions") or [], [ready, *others], now.strftime(_TIME)
    )
    status["printableStatus"] = decide_printable_status({**vm, "status": status}, vmi, dvs, pvcs)
    return status


def render_vmi(vm: Obj) -> Obj:
    """setupVMIFromVM plus the VMI mutating webhook's defaults."""
    template = clone((vm.get("spec") or {}).get("template") or {})
    tmeta, spec, name = template.get("metadata") or {}, template.get("spec") or {}, meta(vm)["name"]
    annotations = {
        **(tmeta.get("annotations") or {}),
        "kubevirt.io/latest-observed-api-version": "v1",
        "kubevirt.io/storage-observed-api-version": "v1",
        "kubevirt.io/vm-generation": str(meta(vm).get("generation", 1)),
    }
    domain = spec.setdefault("domain", {})
    devices = domain.setdefault("devices", {})
    domain.setdefault("firmware", {}).setdefault("uuid", str(uuid.uuid5(_FIRMWARE_NS, name)))
    domain.setdefault("machine", {"type": "q35"})
    cpu = domain.setdefault("cpu", {})
    for key in ("cores", "sockets", "threads"):
        cpu.setdefault(key, 1)
    guest = (domain.get("memory") or {}).get("guest")
    if guest and not (domain.get("resources") or {}).get("requests", {}).get("memory"):
        domain.setdefault("resources", {}).setdefault("requests", {})["memory"] = guest
    spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE)
    if not spec.get("networks") and not devices.get("interfaces"):
        spec["networks"] = [{"name": "default", "pod": {}}]
        devices["interfaces"] = [{"name": "default", "masquerade": {}}]
    vmi_meta = {
        "name": name,
        "namespace": meta(vm)["namespace"],
        "labels": tmeta.get("labels") or {},
        "annotations": annotations,
        "ownerReferences": [owner_ref(vm)],
        "finalizers": [VM_FINALIZER, VMI_FINALIZER],
    }
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": vmi_meta,
        "spec": spec,
    }


# ------------------------------------------------------------------------ the controller
class KubeVirtController(SimController):
    """virt-controller's VM and VMI loops plus virt-handler's reports; keys are VM and VMI names."""

    name = "kubevirt"
    watches: tuple[TypeKey, ...] = (VMS.key, VMIS.key, PODS.key, DVS.key, PVCS.key)

    def __init__(self, ctx: SimContext) -> None:
        super().__init__(ctx.verbs)
        self.ctx = ctx
        ctx.components.setdefault("kubevirt", self)

    def keys_for(self, key: TypeKey, obj: Obj, old: Obj | None) -> list[Key]:
        m = meta(obj)
        ns, names = m.get("namespace", ""), set()
        if key in (VMS.key, VMIS.key):
            names.add(m["name"])
        elif key == PODS.key:
            if (m.get("labels") or {}).get("kubevirt.io") == "virt-launcher":
                names.add((m.get("annotations") or {}).get("kubevirt.io/domain", ""))
        else:  # a DataVolume or PVC: the VMs and VMIs in its namespace that use it
            for rt in (VMS, VMIS):
                for item in self.store.items(rt, ns):
                    spec = item.get("spec") or {}
                    used = [c for _, c in claim_volumes((spec.get("template") or {}).get("spec") or spec)]
                    used += [str(meta(t).get("name")) for t in spec.get("dataVolumeTemplates") or []]
                    names.update([meta(item)["name"]] if m["name"] in used else [])
        return [(k, ns, n) for n in sorted(names - {""}) for k in (VMIS.key, VMS.key)]

    async def reconcile(self, target: Key) -> None:
        if target[0] == VMS.key:
            self._sync_vm(target)
        else:
            self._sync_vmi(target)

    # ---------------------------------------------------------------- reads
    def _claims(self, ns: str, spec: Obj) -> tuple[Claims, Claims]:
        names = [c for _, c in claim_volumes(spec)]
        return {n: self.store.get(DVS, ns, n) for n in names}, {n: self.store.get(PVCS, ns, n) for n in names}

    def _owned_vmi(self, vm: Obj) -> Obj | None:
        vmi = self.store.get(VMIS, meta(vm)["namespace"], meta(vm)["name"])
        refs = [r for r in meta(vmi).get("ownerReferences") or [] if r.get("controller")]
        return vmi if vmi is not None and (not refs or refs[0].get("uid") == meta(vm)["uid"]) else None

    def _launcher_pods(self, vmi: Obj) -> list[Obj]:
        uid, m = meta(vmi)["uid"], meta(vmi)
        pods = [
            p
            for p in self.store.items(PODS, m["namespace"])
            if (meta(p).get("labels") or {}).get("kubevirt.io/created-by") == uid
        ]
        return sorted(
            pods, key=lambda p: (meta(p).get("creationTimestamp", ""), int(meta(p)["resourceVersion"]))
        )

    def _os_info(self, vmi: Obj) -> Obj | None:
        """The guest's /etc/os-release, read on its root disk (PVC -> PV -> CSI volumeHandle -> directory)."""
        boot = root_disk(vmi.get("spec") or {})
        pvc = self.store.get(PVCS, meta(vmi)["namespace"], boot[1]) if boot else None
        pv = self.store.get(PVS, "", (pvc.get("spec") or {}).get("volumeName", "")) if pvc else None
        handle = ((pv or {}).get("spec") or {}).get("csi", {}).get("volumeHandle")
        try:
            return (
                parse_os_release(self.ctx.path("volumes", handle, "etc", "os-release").read_text())
                if handle
                else None
            )
        except OSError:
            return None

    # --------------------------------------------------------------- writes
    def _patch(self, rt: ResourceType, obj: Obj, patch: Obj, subresource: str = "") -> Obj:
        m, mp = meta(obj), "application/merge-patch+json"
        out, _ = self.verbs.patch(rt, m.get("namespace", ""), m["name"], patch, mp, subresource=subresource)
        return out

    def _set_finalizers(self, rt: ResourceType, obj: Obj, finalizers: list[str]) -> None:
        if finalizers != list(meta(obj).get("finalizers") or []):
            rv = meta(obj)["resourceVersion"]
            self._patch(rt, obj, {"metadata": {"finalizers": finalizers or None, "resourceVersion": rv}})

    def _write_status(self, rt: ResourceType, obj: Obj, status: Obj) -> None:
        """Write only a real change (a dry run applies the server's defaulting and pruning first)."""
        if status == obj.get("status"):
            return
        m, body = meta(obj), {**obj, "status": status}
        normalized, _ = self.verbs.update(
            rt, m["namespace"], m["name"], body, subresource="status", dry_run=True
        )
        if normalized.get("status") != obj.get("status"):
            self.verbs.update(rt, m["namespace"], m["name"], body, subresource="status")

    def _event(
        self, obj: Obj, reason: str, message: str, host: str | None = None, kind: str = "Normal"
    ) -> None:
        component = CONTROLLER if host is None else HANDLER
        record_event(self.verbs, obj, kind, reason, message, component=component, host=host or "")

    # -------------------------------------------------------------- VM loop
    def _sync_vm(self, target: Key) -> None:
        vm = self.get(target)
        if vm is None:
            return
        vmi, finalizers = self._owned_vmi(vm), list(meta(vm).get("finalizers") or [])
        if meta(vm).get("deletionTimestamp"):
            if vmi is None or "orphan" in finalizers:
                self._set_finalizers(VMS, vm, [f for f in finalizers if f != VM_FINALIZER])
            else:
                self._stop(vm, vmi)
        else:
            if VM_FINALIZER not in finalizers:
                self._set_finalizers(VMS, vm, [*finalizers, VM_FINALIZER])
            if self._ensure_data_volumes(vm) or run_strategy(vm) == "Halted":
                self._act(target, vm, vmi)
        vm = self.get(target)
        if vm is None:
            return
        vmi = self._owned_vmi(vm)
        dvs, pvcs = self._claims(target[1], ((vm.get("spec") or {}).get("template") or {}).get("spec") or {})
        self._write_status(VMS, vm, decide_vm_status(vm, vmi, dvs, pvcs, datetime.now(UTC)))
        if vmi is not None and phase_of(vmi) in FINAL and VM_FINALIZER in (meta(vmi).get("finalizers") or []):
            self._set_finalizers(VMIS, vmi, [f for f in meta(vmi)["finalizers"] if f != VM_FINALIZER])

    def _act(self, target: Key, vm: Obj, vmi: Obj | None) -> None:
        action = decide_vm_action(vm, vmi)
        if action.startswith("stop") and vmi is not None:
            self._stop(vm, vmi)
            if action == "stop+request-start":
                requests = [*(status_of(vm).get("stateChangeRequests") or []), {"action": "Start"}]
                self._patch(VMS, vm, {"status": {"stateChangeRequests": requests}}, "status")
        elif action == "set-always":
            self._patch(VMS, vm, {"spec": {"runStrategy": "Always", "running": None}})
        elif action == "start":
            retry = (status_of(vm).get("startFailure") or {}).get("retryAfterTimestamp")
            due = datetime.strptime(retry, _TIME).replace(tzinfo=UTC) if retry else datetime.now(UTC)
            if (wait := (due - datetime.now(UTC)).total_seconds()) > 0:
                self.requeue_after(target, wait)
            elif self.store.get(VMIS, target[1], target[2]) is None:  # else a foreign VMI holds the name
                self.verbs.create(VMIS, target[1], render_vmi(vm))
                message = (
                    f"Started the virtual machine by creating the new virtual machine instance {target[2]}"
                )
                self._event(vm, "SuccessfulCreate", message)

    def _stop(self, vm: Obj, vmi: Obj) -> None:
        if not meta(vmi).get("deletionTimestamp"):
            self.verbs.delete(VMIS, meta(vmi)["namespace"], meta(vmi)["name"], {})
            uid = meta(vmi)["uid"]
            self._event(
                vm,
                "SuccessfulDelete",
                f"Stopped the virtual machine by deleting the virtual machine instance {uid}",
            )

    def _ensure_data_volumes(self, vm: Obj) -> bool:
        """handleDataVolumes: create missing dataVolumeTemplates DVs (owned by the VM); True once all usable."""
        ready, ns = True, meta(vm)["namespace"]
        for template in (vm.get("spec") or {}).get("dataVolumeTemplates") or []:
            tmeta = clone(template.get("metadata") or {})
            dv = self.store.get(DVS, ns, tmeta["name"])
            if dv is None and self.store.get(PVCS, ns, tmeta["name"]) is None:
                tmeta["ownerReferences"] = [owner_ref(vm)]
                body = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": tmeta}
                self.verbs.create(DVS, ns, {**body, "spec": clone(template.get("spec") or {})})
                self._event(vm, "SuccessfulDataVolumeCreate", f"Created DataVolume {tmeta['name']}")
                ready = False
            elif dv is not None and status_of(dv).get("phase") not in DV_USABLE:
                ready = False
        return ready

    # ------------------------------------------------------------- VMI loop
    def _sync_vmi(self, target: Key) -> None:
        vmi = self.get(target)
        if vmi is None:
            return
        ns, phase, deleting = target[1], phase_of(vmi), bool(meta(vmi).get("deletionTimestamp"))
        finalizers = list(meta(vmi).get("finalizers") or [])
        if not deleting and phase not in FINAL and VMI_FINALIZER not in finalizers:
            self._set_finalizers(VMIS, vmi, [*finalizers, VMI_FINALIZER])
            return  # the write brings us back
        pods = self._launcher_pods(vmi)
        dvs, pvcs = self._claims(ns, vmi.get("spec") or {})
        problem = None
        if deleting or phase in FINAL:
            self._delete_pods(vmi, [p for p in pods if not meta(p).get("deletionTimestamp")], deleting)
        elif not pods and phase == "Pending":
            problem = volume_problem(vmi, dvs, pvcs)
            if problem is None:
                pod, _ = self.verbs.create(PODS, ns, render_launcher_pod(vmi))
                self._event(vmi, "SuccessfulCreate", f"Created virtual machine pod {meta(pod)['name']}")
        pods = self._launcher_pods(vmi)
        os_info = self._os_info(vmi) if pods else None
        status = decide_vmi_status(vmi, pods, problem, pvcs, os_info, now_rfc3339())
        self._vmi_events(vmi, phase, status["phase"], pods[-1] if pods else None)
        self._write_status(VMIS, vmi, status)
        vmi = self.get(target) or vmi
        node = status.get("nodeName")
        if (
            node
            and status["phase"] not in FINAL
            and (meta(vmi).get("labels") or {}).get("kubevirt.io/nodeName") != node
        ):
            vmi = self._patch(VMIS, vmi, {"metadata": {"labels": {"kubevirt.io/nodeName": node}}})
        if status["phase"] in FINAL and not pods:
            self._release_vmi(vmi, deleting)

    def _delete_pods(self, vmi: Obj, pods: list[Obj], deleting: bool) -> None:
        for pod in pods:
            if deleting and phase_of(vmi) == "Running":
                self._event(
                    vmi, "ShuttingDown", "Signaled Graceful Shutdown", host=pod["spec"].get("nodeName", "")
                )
            self.verbs.delete(PODS, meta(pod)["namespace"], meta(pod)["name"], {})
            self._event(vmi, "SuccessfulDelete", f"Deleted virtual machine pod {meta(pod)['name']}")

    def _release_vmi(self, vmi: Obj, deleting: bool) -> None:
        """All launcher pods are gone: drop foregroundDeleteVirtualMachine (and the VM's, if it has no VM)."""
        keep = [f for f in meta(vmi).get("finalizers") or [] if f != VMI_FINALIZER]
        refs: list[Obj] = meta(vmi).get("ownerReferences") or []
        owner = next((r for r in refs if r.get("controller")), {})
        vm = self.store.get(VMS, meta(vmi)["namespace"], owner["name"]) if owner else None
        if deleting or vm is None or meta(vm).get("uid") != owner.get("uid"):
            keep = [f for f in keep if f != VM_FINALIZER]
        self._set_finalizers(VMIS, vmi, keep)

    def _vmi_events(self, vmi: Obj, old: str, new: str, pod: Obj | None) -> None:
        host = ((pod or {}).get("spec") or {}).get("nodeName", "")
        if new == "Running" and old != "Running":
            self._event(vmi, "Created", "VirtualMachineInstance defined.", host=host)
            self._event(vmi, "Started", "VirtualMachineInstance started.", host=host)
        elif new == "Succeeded" and old != new:
            self._event(vmi, "Stopped", "The VirtualMachineInstance was shut down.", host=host)
        elif new == "Failed" and old == "Running":
            self._event(vmi, "Stopped", "The VirtualMachineInstance crashed.", host=host, kind="Warning")
