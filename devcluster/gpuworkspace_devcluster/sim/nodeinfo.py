"""What a kubelet registers for a topology node: the Node object, its labels, capacity and status.

Pure functions of a :class:`topology.NodeSpec`; ``topology.apply_topology`` writes them, the kubelet
and failure injection reuse :func:`ready_conditions`.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .topology import NodeSpec

Obj = dict[str, Any]
KUBELET_VERSION = "v1.33.0"
OS_IMAGE = "Ubuntu 24.04.2 LTS"
KERNEL_VERSION = "6.8.0-60-generic"
RUNTIME_VERSION = "containerd://1.7.27"


def _cpu(value: Decimal) -> str:
    return str(int(value)) if value == value.to_integral_value() else f"{int(value * 1000)}m"


def _ki(value: Decimal) -> str:
    return f"{int(value) // 1024}Ki"


def gfd_labels(node: NodeSpec) -> dict[str, str]:
    """What NVIDIA GPU feature discovery and the MIG manager put on a GPU node."""
    first = node.gpus[0]
    out = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": first.model.replace(" ", "-"),
        "nvidia.com/gpu.count": str(len(node.gpus)),
        "nvidia.com/gpu.memory": str(first.memory_mib),
        "nvidia.com/mig.config": node.mig_config,
        "nvidia.com/mig.config.state": "success",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "mixed",
    }
    if node.gpu_family:
        out["nvidia.com/gpu.family"] = node.gpu_family
    for gpu in node.gpus:
        if gpu.mode == "mig":
            key = f"nvidia.com/mig-{gpu.mig_profile}.count"
            out[key] = str(int(out.get(key, "0")) + gpu.mig_slices)
        elif gpu.mode == "time-sliced":
            out["nvidia.com/gpu.sharing-strategy"] = "time-slicing"
            out["nvidia.com/gpu.replicas"] = str(gpu.replicas)
    return out


def _stable_id(node: str, what: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"devcluster://{node}/{what}"))


def node_object(node: NodeSpec) -> Obj:
    """The Node as the kubelet registers it (metadata and spec; status from :func:`node_status`)."""
    drivers = f'{{"cephfs.csi.ceph.com":"{node.name}","rbd.csi.ceph.com":"{node.name}"}}'
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": node_labels(node),
            "annotations": {
                "csi.volume.kubernetes.io/nodeid": drivers,
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {
            "podCIDR": f"127.{node.ip_octet}.0.0/16",
            "podCIDRs": [f"127.{node.ip_octet}.0.0/16"],
            "providerID": f"devcluster://{node.name}",
            **({"taints": [dict(t) for t in node.taints]} if node.taints else {}),
        },
    }


def ready_conditions(now: str) -> list[Obj]:
    """The kubelet's four node conditions for a healthy node."""
    rows = (
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    )
    return [
        {
            "type": t,
            "status": s,
            "reason": r,
            "message": m,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for t, s, r, m in rows
    ]


def node_status(node: NodeSpec, conditions: list[Obj]) -> Obj:
    return {
        "capacity": node_capacity(node),
        "allocatable": node_allocatable(node),
        "conditions": conditions,
        "addresses": [
            {"type": "InternalIP", "address": node.internal_ip},
            {"type": "Hostname", "address": node.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": _stable_id(node.name, "machine").replace("-", ""),
            "systemUUID": _stable_id(node.name, "system"),
            "bootID": _stable_id(node.name, "boot"),
            "kernelVersion": KERNEL_VERSION,
            "osImage": OS_IMAGE,
            "containerRuntimeVersion": RUNTIME_VERSION,
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": "",  # deprecated: kubelets since 1.31 leave it empty
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def node_capacity(node: NodeSpec) -> dict[str, str]:
    """status.capacity as the kubelet reports it (memory and ephemeral-storage in Ki)."""
    return {
        "cpu": _cpu(node.cpu),
        "memory": _ki(node.memory),
        "ephemeral-storage": _ki(node.ephemeral_storage),
        "pods": str(node.pods),
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        **{k: str(v) for k, v in node.extended_resources().items()},
    }


def node_allocatable(node: NodeSpec) -> dict[str, str]:
    """Capacity less ``reserved``, in the kubelet's units (ephemeral-storage in plain bytes)."""
    left = {
        key: getattr(node, attr) - node.reserved.get(key, Decimal(0))
        for key, attr in (
            ("cpu", "cpu"),
            ("memory", "memory"),
            ("ephemeral-storage", "ephemeral_storage"),
        )
    }
    return {
        **node_capacity(node),
        "cpu": _cpu(left["cpu"]),
        "memory": _ki(left["memory"]),
        "ephemeral-storage": str(int(left["ephemeral-storage"])),
    }


def node_labels(node: NodeSpec) -> dict[str, str]:
    """The labels a real node would carry: kubelet's well-known ones, GPU feature discovery's, the file's."""
    out = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": node.name,
        "node.kubernetes.io/instance-type": node.instance_type,
    }
    if node.gpus:
        out.update(gfd_labels(node))
    out.update(node.labels)
    return out
