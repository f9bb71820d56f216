"""What NVML would say on a simulated GPU node, for the fake NVML module (:mod:`.fakenvml`).

``GET /_devcluster/sim/nvml?node=<node>`` answers :func:`nvml_view` as JSON and, as a side effect,
keeps ``<state_dir>/sim/proc/<node>/<pid>/cgroup`` in step with it: one file per reported process
with the cgroup v2 line (systemd driver, containerd) a real node would show for a container of that
pod, so ``gpuworkspace-agent --proc-root <state_dir>/sim/proc/<node>`` maps pids to pods unchanged.

Devices and MIG slices are the DeviceManager's, read through :func:`.dcgm.node_inventory` (the same
GPU instance ids as the dcgm-exporter). Processes come from the allocations and the workload scripts
at ``now``: every scripted pid of a pod holding a device is one process on it; a pod-level script
(no pid) is ONE process with a stable synthetic pid (:func:`synthetic_pid`); a pod without a script
has no process. Per process ``gpu_util`` is NVML's ``smUtil`` and ``mem_used_mib`` its
``usedGpuMemory``. A card held by a virt-launcher pod is bound to vfio-pci for passthrough: NVML on
the host does not see it (as DCGM does not, :func:`.dcgm.is_passthrough_pod`).

On a time-sliced card the processes' ``smUtil`` add up to the dcgm-exporter's device value
(``DCGM_FI_DEV_GPU_UTIL``, :func:`.workloads.combine`) as long as that sum is at most 100 %; above,
the device value is capped at 100 and the processes' values are not.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from ..errors import ApiError
from .context import SimContext
from .dcgm import Allocation, Gpu, is_passthrough_pod, node_inventory
from .failures import pods_on
from .workloads import WorkloadBook, workload_book

PATH = "/_devcluster/sim/nvml"
MIB = 1024 * 1024
_PID_BASE, _PID_SPAN = 100_000, 4_000_000  # synthetic pids stay under the kernel's pid_max (4194304)


def synthetic_pid(pod_uid: str) -> int:
    """The pid of a pod-level workload's one process: stable per pod UID."""
    digest = hashlib.sha256(pod_uid.encode()).digest()
    return _PID_BASE + int.from_bytes(digest[:4], "big") % _PID_SPAN


def qos_class(pod: Mapping[str, Any] | None) -> str:
    """``status.qosClass``, else derived from the containers' cpu/memory requests and limits."""
    status_qos = (pod or {}).get("status", {}).get("qosClass")
    if status_qos:
        return str(status_qos)
    containers = (pod or {}).get("spec", {}).get("containers") or []
    resources = [c.get("resources") or {} for c in containers]
    pairs = [
        ((r.get("requests") or {}).get(k), (r.get("limits") or {}).get(k))
        for r in resources
        for k in ("cpu", "memory")
    ]
    if not any(req or lim for req, lim in pairs):
        return "BestEffort"
    if pairs and all(lim and (req is None or req == lim) for req, lim in pairs):
        return "Guaranteed"
    return "Burstable"


def cgroup_text(pod_uid: str, qos: str, container_id: str) -> str:
    """``/proc/<pid>/cgroup`` of a container process on a cgroup v2 node with the systemd driver."""
    uid = pod_uid.replace("-", "_")
    scope = f"cri-containerd-{container_id}.scope"
    if qos == "Guaranteed":
        return f"0::/kubepods.slice/kubepods-pod{uid}.slice/{scope}\n"
    tier = qos.lower()
    return f"0::/kubepods.slice/kubepods-{tier}.slice/kubepods-{tier}-pod{uid}.slice/{scope}\n"


def _container_id(pod_uid: str, container: str) -> str:
    return hashlib.sha256(f"{pod_uid}/{container}".encode()).hexdigest()


def _processes(
    allocs: Iterable[Allocation],
    pods_by_uid: Mapping[str, Mapping[str, Any]],
    workloads: WorkloadBook,
    now: float,
) -> list[dict[str, Any]]:
    out: dict[tuple[int | None, int], dict[str, Any]] = {}
    for alloc in allocs:
        pod = pods_by_uid.get(alloc.pod_uid) or {}
        meta = pod.get("metadata", {})
        scripts = workloads.for_pod(
            uid=alloc.pod_uid, namespace=meta.get("namespace", ""), name=meta.get("name", "")
        )
        for pid, workload in scripts.items():
            real_pid = pid if pid is not None else synthetic_pid(alloc.pod_uid)
            sample = workload.at(now)
            out[(alloc.gi_id, real_pid)] = {
                "pid": real_pid,
                "pod_uid": alloc.pod_uid,
                "namespace": meta.get("namespace", ""),
                "pod": meta.get("name", ""),
                "gi_id": alloc.gi_id,
                "sm_util": sample.gpu_util,
                "mem_used_mib": sample.mem_used_mib,
                "cgroup": cgroup_text(
                    alloc.pod_uid, qos_class(pod), _container_id(alloc.pod_uid, alloc.container)
                ),
            }
    return [out[k] for k in sorted(out, key=lambda k: (k[0] or 0, k[1]))]


def nvml_view(
    node: str,
    gpus: Iterable[Gpu],
    allocations: Iterable[Allocation],
    pods_by_uid: Mapping[str, Mapping[str, Any]],
    workloads: WorkloadBook,
    now: float,
) -> dict[str, Any]:
    """The node's NVML-visible devices and their processes at ``now`` (JSON-ready)."""
    by_gpu: dict[str, list[Allocation]] = {}
    for alloc in allocations:
        by_gpu.setdefault(alloc.gpu_uuid, []).append(alloc)
    devices = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        allocs = by_gpu.get(gpu.uuid, [])
        if gpu.vfio or any(is_passthrough_pod(pods_by_uid.get(a.pod_uid)) for a in allocs):
            continue
        devices.append(
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "model": gpu.model,
                "memory_mib": gpu.memory_mib,
                "mig": [
                    {"gi_id": s.gi_id, "uuid": s.uuid, "profile": s.profile, "memory_mib": s.memory_mib}
                    for s in sorted(gpu.mig, key=lambda s: s.gi_id)
                ],
                "processes": _processes(allocs, pods_by_uid, workloads, now),
            }
        )
    return {"node": node, "time": now, "devices": devices}


def sync_proc(root: Path, view: Mapping[str, Any]) -> None:
    """Make ``root/<pid>/cgroup`` exist for exactly the view's processes."""
    wanted = {p["pid"]: p["cgroup"] for d in view["devices"] for p in d["processes"]}
    root.mkdir(parents=True, exist_ok=True)
    for entry in root.iterdir():
        if not (entry.name.isdigit() and int(entry.name) in wanted):
            shutil.rmtree(entry, ignore_errors=True)
    for pid, text in wanted.items():
        path = root / str(pid) / "cgroup"
        if path.is_file() and path.read_text() == text:
            continue
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


def proc_root(state_dir: Path, node: str) -> Path:
    return Path(state_dir) / "sim" / "proc" / node


def nvml_handler(
    ctx: SimContext, clock: Callable[[], float] = time.time
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """``GET /_devcluster/sim/nvml?node=<node>``: 404 for a node without GPUs."""

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"{PATH} allows GET, not {request.method}")
        node = request.query.get("node", "")
        gpus, allocations = node_inventory(ctx.devices, node)
        if not gpus:
            raise ApiError(404, "NotFound", f"node {node!r} has no GPUs")
        pods = {p["metadata"]["uid"]: p for p in pods_on(ctx, node)}
        view = nvml_view(node, gpus, allocations, pods, workload_book(ctx), clock())
        sync_proc(proc_root(ctx.state_dir, node), view)
        return web.Response(body=orjson.dumps(view), content_type="application/json")

    return handler
