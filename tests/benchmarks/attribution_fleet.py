"""A synthetic GPU fleet for the attribution benchmark: nodes, workspace pods, dcgm-exporter and kubelet texts.

64 nodes x 8 H100s; on each node cards 0-4 are whole (one workspace each), card 5 is passed through
to a VM, card 6 is time-sliced (4 workspaces), card 7 is MIG (7 workspaces): 17 GPU workspaces per node,
1,088 in all; the other workspaces (912 of 2,000) hold no GPU and are spread over the nodes. The
dcgm-exporter text is rendered by the devcluster's renderer (the real exporter's labels and MIG,
time-slicing and passthrough behaviour), the kubelet text by the devcluster's ``/metrics/resource``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from gpuworkspace_devcluster.sim.dcgm import (
    MIG_FIRST_GI,
    Allocation,
    Gpu,
    MigSlice,
    pci_bus_id,
    render_metrics,
)
from gpuworkspace_devcluster.sim.resourcemetrics import ContainerUsage, render_resource_metrics
from gpuworkspace_devcluster.sim.workloads import Workload, WorkloadBook

NS = "gpu-workspaces"
GPUS_PER_NODE = 8
WHOLE, PASSTHROUGH, SHARED, MIG = (0, 1, 2, 3, 4), 5, 6, 7
REPLICAS, SLICES = 4, 7
NOW = 1_790_000_000.0


@dataclass
class Fleet:
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    dcgm: dict[str, str] = field(default_factory=dict)  # node IP → text
    kubelet: dict[str, str] = field(default_factory=dict)  # node IP → text

    @property
    def gpu_workspaces(self) -> int:
        return sum(1 for p in self.pods if _gpu_limits(p))


def _gpu_limits(pod: dict[str, Any]) -> dict[str, str]:
    limits = pod["spec"]["containers"][0]["resources"].get("limits", {})
    return {k: v for k, v in limits.items() if k.startswith("nvidia.com/")}


def node_ip(i: int) -> str:
    return f"127.{200 + i // 250}.{i % 250}.1"


def node_body(i: int) -> dict[str, Any]:
    name = f"gpu-node-{i:03d}"
    capacity = {
        "cpu": "128",
        "memory": "1Ti",
        "pods": "110",
        "nvidia.com/gpu": str(len(WHOLE) + 1),
        "nvidia.com/gpu.shared": str(REPLICAS),
        "nvidia.com/mig-1g.10gb": str(SLICES),
    }
    return {
        "metadata": {
            "name": name,
            "labels": {"gpuworkspace.dev/pool": "gpu", "kubernetes.io/hostname": name},
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [
                {"type": "InternalIP", "address": node_ip(i)},
                {"type": "Hostname", "address": name},
            ],
        },
    }


def pod_body(
    n: int, node: str, *, gpu: dict[str, str], mode: str, runtime: str = "container"
) -> dict[str, Any]:
    user, server = f"user{n:04d}", "" if n % 3 else "train"
    name = f"jupyter-{user}" + (f"--{server}" if server else "")
    labels = {
        "app": "jupyterhub",
        "component": "singleuser-server",
        "gpuworkspace.dev/user": user,
        "gpuworkspace.dev/server": server or "default",
        "gpuworkspace.dev/profile": f"profile-{mode}",
        "gpuworkspace.dev/gpu-mode": mode,
        "gpuworkspace.dev/runtime": runtime,
    }
    if runtime == "vm":
        labels["kubevirt.io"] = "virt-launcher"
        name = f"virt-launcher-{user}-abcde"
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": labels,
            "annotations": {
                "gpuworkspace.dev/username": user,
                "gpuworkspace.dev/servername": server,
                "gpuworkspace.dev/profile": f"profile-{mode}",
            },
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "compute" if runtime == "vm" else "notebook",
                    "image": "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07",
                    "resources": {
                        "requests": {"cpu": "2", "memory": "8Gi", **gpu},
                        "limits": {"cpu": "4", "memory": "16Gi", **gpu},
                    },
                }
            ],
        },
        "status": {
            "phase": "Running",
            "startTime": "2026-12-01T00:00:00Z",
            "containerStatuses": [
                {
                    "name": "compute" if runtime == "vm" else "notebook",
                    "image": "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07",
                    "imageID": "quay.io/jupyter/pytorch-notebook@sha256:" + "0" * 64,
                    "restartCount": 0,
                    "ready": True,
                    "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}},
                }
            ],
        },
    }


def build_fleet(nodes: int = 64, workspaces: int = 2000, seed: int = 1) -> Fleet:
    rng = random.Random(seed)
    fleet = Fleet()
    n = 0
    per_node_pods: dict[int, list[dict[str, Any]]] = {}
    for i in range(nodes):
        node = node_body(i)
        fleet.nodes.append(node)
        name = node["metadata"]["name"]
        mine: list[dict[str, Any]] = []
        for _ in WHOLE:
            mine.append(pod_body(n, name, gpu={"nvidia.com/gpu": "1"}, mode="exclusive"))
            n += 1
        mine.append(pod_body(n, name, gpu={"nvidia.com/gpu": "1"}, mode="exclusive", runtime="vm"))
        n += 1
        for _ in range(REPLICAS):
            mine.append(pod_body(n, name, gpu={"nvidia.com/gpu.shared": "1"}, mode="time-sliced"))
            n += 1
        for _ in range(SLICES):
            mine.append(pod_body(n, name, gpu={"nvidia.com/mig-1g.10gb": "1"}, mode="mig"))
            n += 1
        per_node_pods[i] = mine
    while n < workspaces:  # CPU-only workspaces spread over the nodes
        i = n % nodes
        per_node_pods[i].append(pod_body(n, fleet.nodes[i]["metadata"]["name"], gpu={}, mode="none"))
        n += 1
    for i, node in enumerate(fleet.nodes):
        pods = per_node_pods[i]
        for p in pods:
            p["metadata"]["uid"] = f"{i:04d}-{p['metadata']['name']}"
        fleet.pods.extend(pods)
        fleet.dcgm[node_ip(i)] = _dcgm_text(node["metadata"]["name"], i, pods, rng)
        fleet.kubelet[node_ip(i)] = render_resource_metrics(
            [
                ContainerUsage(
                    NS,
                    p["metadata"]["name"],
                    "notebook",
                    rng.uniform(10, 5000),
                    rng.uniform(1e8, 1e10),
                    NOW - 3600,
                )
                for p in pods
            ],
            NOW,
        )
    return fleet


def _dcgm_text(node: str, i: int, pods: list[dict[str, Any]], rng: random.Random) -> str:
    uuid = lambda g: f"GPU-{i:04x}{g:04x}-0000-0000-0000-000000000000"  # noqa: E731
    gpus = [
        Gpu(
            g,
            uuid(g),
            pci_bus_id(g),
            mig=tuple(MigSlice(MIG_FIRST_GI + s, "1g.10gb", f"MIG-{i:04x}{s:04x}") for s in range(SLICES))
            if g == MIG
            else (),
            vfio=g == PASSTHROUGH,
        )
        for g in range(GPUS_PER_NODE)
    ]
    allocations: list[Allocation] = []
    book = WorkloadBook()
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for p in pods:
        limits = _gpu_limits(p)
        kind = next(iter(limits), "none") + (
            "-vm" if p["metadata"]["labels"]["gpuworkspace.dev/runtime"] == "vm" else ""
        )
        by_kind.setdefault(kind, []).append(p)
    for g, p in zip(WHOLE, by_kind.get("nvidia.com/gpu", []), strict=False):
        allocations.append(Allocation(p["metadata"]["uid"], uuid(g), "nvidia.com/gpu", container="notebook"))
    for p in by_kind.get("nvidia.com/gpu-vm", []):
        allocations.append(
            Allocation(p["metadata"]["uid"], uuid(PASSTHROUGH), "nvidia.com/gpu", container="compute")
        )
    for r, p in enumerate(by_kind.get("nvidia.com/gpu.shared", [])):
        allocations.append(
            Allocation(
                p["metadata"]["uid"], uuid(SHARED), "nvidia.com/gpu.shared", replica=r, container="notebook"
            )
        )
    for s, p in enumerate(by_kind.get("nvidia.com/mig-1g.10gb", [])):
        allocations.append(
            Allocation(
                p["metadata"]["uid"],
                uuid(MIG),
                "nvidia.com/mig-1g.10gb",
                gi_id=MIG_FIRST_GI + s,
                container="notebook",
            )
        )
    for p in pods:
        if _gpu_limits(p):
            load = Workload(
                gpu_util=float(rng.choice((0, 0, 5, 40, 95))),
                mem_used_mib=float(rng.randint(0, 9000)),
                start=NOW,
            )
            book.put(WorkloadBook.ref(uid=p["metadata"]["uid"]), load)
    pods_by_uid = {p["metadata"]["uid"]: p for p in pods}
    return render_metrics(node, gpus, allocations, pods_by_uid, book, NOW)
