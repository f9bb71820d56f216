"""Builders for the attribution tests: workspaces, devices, nodes and dcgm-exporter text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuworkspace_spawner.services.attribution.model import (
    DeviceSample,
    NodeInfo,
    ProcessSample,
    WorkspacePod,
)

NODE = "gpu-node-a"
MIB = 1024 * 1024


def ws(
    user: str,
    server: str = "",
    *,
    resources: Mapping[str, int] | None = None,
    node: str | None = NODE,
    mode: str | None = None,
    runtime: str = "container",
    pod: str | None = None,
    namespace: str = "gpu-workspaces",
) -> WorkspacePod:
    resources = dict(resources if resources is not None else {"nvidia.com/gpu": 1})
    if mode is None:
        mode = (
            "mig"
            if any(n.startswith("nvidia.com/mig-") for n in resources)
            else "time-sliced"
            if "nvidia.com/gpu.shared" in resources
            else "exclusive"
            if resources
            else "none"
        )
    name = pod or f"jupyter-{user}{'-' + server if server else ''}"
    return WorkspacePod(
        namespace=namespace,
        pod=name,
        uid=f"uid-{name}",
        user=user,
        server=server,
        profile="p",
        gpu_mode=mode,
        runtime=runtime,
        node=node,
        cpu_request=2.0,
        memory_request=8 * 2**30,
        gpu_resources=resources,
    )


def dev(
    gpu: str,
    *pods: WorkspacePod | tuple[str, str],
    node: str = NODE,
    util: float | None = 50.0,
    mem: float | None = 1000.0,
    total: float | None = 81559.0,
    power: float | None = 300.0,
    xid: int = 0,
    mig: str | None = None,
    profile: str | None = None,
) -> DeviceSample:
    refs = tuple(p if isinstance(p, tuple) else (p.namespace, p.pod) for p in pods)
    return DeviceSample(
        node=node,
        gpu=gpu,
        uuid=f"GPU-{node}-{gpu}",
        model="NVIDIA H100 80GB HBM3",
        util_percent=util,
        mem_used_mib=mem,
        mem_total_mib=total,
        power_w=power,
        xid=xid,
        mig_profile=profile if mig is not None else None,
        mig_instance=mig,
        pods=refs,
    )


def proc(device: DeviceSample, owner: WorkspacePod | str, sm: float, mem_mib: float = 0.0) -> ProcessSample:
    uid = owner.uid if isinstance(owner, WorkspacePod) else owner
    return ProcessSample(device.node, device.uuid, uid, sm, mem_mib * MIB)


def node(
    name: str = NODE,
    *,
    ready: bool = True,
    allocatable: Mapping[str, float] | None = None,
    taints: Sequence[str] = (),
    unschedulable: bool = False,
    labels: Mapping[str, str] | None = None,
) -> NodeInfo:
    alloc = dict(allocatable or {"cpu": 127.5, "memory": 1020 * 2**30, "nvidia.com/gpu": 8})
    return NodeInfo(
        name=name,
        ready=ready,
        unschedulable=unschedulable,
        taints=tuple(taints),
        capacity={"cpu": 128, "memory": 1024 * 2**30, **{k: v for k, v in alloc.items() if "/" in k}},
        allocatable=alloc,
        labels=dict(labels or {}),
    )


def pod_obj(
    name: str,
    uid: str,
    resource: str = "nvidia.com/gpu",
    count: int = 1,
    labels: Mapping[str, str] | None = None,
    namespace: str = "gpu-workspaces",
) -> dict[str, Any]:
    """A pod as the simulated dcgm-exporter's pod mapper reads it."""
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": dict(labels or {})},
        "spec": {"containers": [{"name": "notebook", "resources": {"limits": {resource: str(count)}}}]},
    }
