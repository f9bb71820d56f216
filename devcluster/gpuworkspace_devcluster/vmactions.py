"""KubeVirt's virt-api action subresources: PUT .../virtualmachines/NAME/{start,stop,restart}.

They change the VM's runStrategy (or queue stateChangeRequests) exactly as virt-api does; what
happens next is the (simulated) virt-controller's business.
"""

from __future__ import annotations

from .errors import ApiError
from .resources import find
from .store import Obj
from .verbs import Verbs

VMS = find("kubevirt.io", "v1", "virtualmachines")
VMIS = find("kubevirt.io", "v1", "virtualmachineinstances")


def _conflict(name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on virtualmachine.kubevirt.io "{name}": {why}',
        details={"name": name, "group": "kubevirt.io", "kind": "virtualmachine"},
    )


def run_vm_action(verbs: Verbs, namespace: str, name: str, action: str) -> Obj:
    assert VMS is not None and VMIS is not None
    vm = verbs.get(VMS, namespace, name)
    spec = vm.get("spec", {})
    strategy = spec.get("runStrategy") or ("Always" if spec.get("running") else "Halted")
    vmi = verbs.store.get(VMIS, namespace, name)
    running = vmi is not None and not vmi["metadata"].get("deletionTimestamp")
    if action == "start":
        if strategy == "Always" or (running and strategy != "Manual"):
            raise _conflict(name, f"{strategy} does not support manual start requests")
        if strategy == "Manual":
            return _state_change(verbs, vm, [{"action": "Start"}])
        return _set_strategy(verbs, vm, "Always")
    if action == "stop":
        if strategy == "Halted" and not running:
            raise _conflict(name, "VM is not running: Halted")
        if strategy == "Manual":
            if not running:
                raise _conflict(name, "VM is not running")
            return _state_change(verbs, vm, [{"action": "Stop", "uid": vmi["metadata"]["uid"]}])  # type: ignore[index]
        return _set_strategy(verbs, vm, "Halted")
    # restart
    if strategy == "Halted":
        raise _conflict(name, "Halted does not support manual restart requests")
    if not running:
        raise _conflict(name, "VM is not running")
    return _state_change(verbs, vm, [{"action": "Stop", "uid": vmi["metadata"]["uid"]}, {"action": "Start"}])  # type: ignore[index]


def _set_strategy(verbs: Verbs, vm: Obj, strategy: str) -> Obj:
    assert VMS is not None
    meta = vm["metadata"]
    patch = {"spec": {"runStrategy": strategy, "running": None}}
    obj, _ = verbs.patch(VMS, meta["namespace"], meta["name"], patch, "application/merge-patch+json")
    return obj


def _state_change(verbs: Verbs, vm: Obj, requests: list[dict[str, str]]) -> Obj:
    assert VMS is not None
    meta = vm["metadata"]
    if vm.get("status", {}).get("stateChangeRequests"):
        raise _conflict(meta["name"], "unable to complete request: stop/start already underway")
    patch = {"status": {"stateChangeRequests": requests}}
    obj, _ = verbs.patch(
        VMS, meta["namespace"], meta["name"], patch, "application/merge-patch+json", subresource="status"
    )
    return obj
