"""Every custom resource kind the product reads or writes, described once.

A :class:`Kind` is what the API paths need (group, version, plural) and whether its objects live in a
namespace. The custom-object verbs (:mod:`.custom`, :mod:`.storage`, :mod:`.batch`) and the watches
(:class:`.custom.CustomReflector`, :class:`.observing.ObjectWatch`) take one of these, never a tuple or
three strings, so a version bump (Kueue's ``v1beta2``) is one line here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DATA_VOLUMES",
    "NETWORK_FENCES",
    "VIRTUAL_MACHINES",
    "VM_INSTANCES",
    "VOLUME_SNAPSHOTS",
    "WORKLOADS",
    "Kind",
]


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


VIRTUAL_MACHINES = Kind("kubevirt.io", "v1", "virtualmachines")
VM_INSTANCES = Kind("kubevirt.io", "v1", "virtualmachineinstances")
DATA_VOLUMES = Kind("cdi.kubevirt.io", "v1beta1", "datavolumes")
NETWORK_FENCES = Kind("csiaddons.openshift.io", "v1alpha1", "networkfences", namespaced=False)
VOLUME_SNAPSHOTS = Kind("snapshot.storage.k8s.io", "v1", "volumesnapshots")
WORKLOADS = Kind("kueue.x-k8s.io", "v1beta2", "workloads")  # Kueue 0.19's stored version
