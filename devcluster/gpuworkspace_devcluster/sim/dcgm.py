"""dcgm-exporter's ``/metrics`` for a simulated GPU node, rendered by a pure function.

The text is what dcgm-exporter's template writes (``internal/pkg/rendermetrics``): per counter of
``default-counters.csv`` a ``# HELP``/``# TYPE`` pair, then one line per entity::

    NAME{gpu="0",UUID="GPU-…",pci_bus_id="…",device="nvidia0",modelName="…"[,GPU_I_PROFILE="1g.10gb",
         GPU_I_ID="7"],Hostname="node"<Labels, sorted>,<Attributes, sorted>} VALUE

``Labels`` are the "label" counters (``DCGM_FI_DRIVER_VERSION``) plus, with
``--kubernetes-enable-pod-labels``, the pod's labels with every character outside ``[a-zA-Z0-9_]``
turned into ``_``; ``Attributes`` are ``container``, ``namespace``, ``pod`` (and ``vgpu``). Integer
fields print with ``%d``, double fields with ``%f``. Known behaviour reproduced here:

- a MIG-enabled card exports one entity per GPU instance; ``DCGM_FI_DEV_GPU_UTIL`` reads 0 there and
  ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (a ratio) carries the slice's activity;
- a time-sliced card is one device: every sharer sees the same device value. Without
  ``--kubernetes-virtual-gpus`` (dcgm-exporter's and the GPU operator's default) the pod mapper keeps
  ONE pod per device (the last one the kubelet lists) and labels the series with it; with it, every
  sharing pod gets its own series with the device value and a ``vgpu`` label (and no pod labels);
- a renamed shared resource (``nvidia.com/gpu.shared``) is attributed only when it is listed in
  ``--nvidia-resource-names`` (on here by default, as a deployment using the rename must configure);
- a card passed through to a VM (bound to vfio-pci) is invisible to DCGM: no series at all.

Inputs are plain data (:class:`Gpu`, :class:`Allocation`, pod dicts, a :class:`WorkloadBook`);
:class:`.resourcemetrics.DcgmExporter` serves it per GPU node, with allocations from the DeviceManager
(:func:`node_inventory`, the one place that reads it).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..openapi import find_shared_schemas
from .workloads import IDLE, WorkloadBook, WorkloadSample, combine

DRIVER_VERSION = "570.124.06"
H100_MODEL = "NVIDIA H100 80GB HBM3"
VIRT_LAUNCHER = ("kubevirt.io", "virt-launcher")
NVIDIA_GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
_INVALID_LABEL_CHAR = re.compile(r"[^a-zA-Z0-9_]")
_RESERVED_LABELS = frozenset(
    {
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "GPU_I_PROFILE",
        "GPU_I_ID",
        "Hostname",
        "hostname",
        "container",
        "namespace",
        "pod",
        "vgpu",
    }
)

# NVIDIA/dcgm-exporter etc/default-counters.csv (Apache-2.0), used when ../shared/schemas is absent.
_FALLBACK_COUNTERS = """\
DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).
DCGM_FI_DEV_MEMORY_TEMP, gauge, Memory temperature (in C).
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries.
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory utilization (in %).
DCGM_FI_DEV_ENC_UTIL, gauge, Encoder utilization (in %).
DCGM_FI_DEV_DEC_UTIL, gauge, Decoder utilization (in %).
DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.
DCGM_FI_DEV_FB_FREE, gauge, Framebuffer memory free (in MiB).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_FB_RESERVED, gauge, Framebuffer memory reserved (in MiB).
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, Total number of NVLink bandwidth counters for all lanes.
DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for uncorrectable errors
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for correctable errors
DCGM_FI_DEV_ROW_REMAP_FAILURE, gauge, Whether remapping of rows has failed
DCGM_FI_DRIVER_VERSION, label, Driver Version
DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Ratio of time the graphics engine is active.
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor (HMMA) pipe is active.
DCGM_FI_PROF_DRAM_ACTIVE, gauge, Ratio of cycles the device memory interface is active sending or receiving data.
DCGM_FI_PROF_PCIE_TX_BYTES, gauge, The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.
DCGM_FI_PROF_PCIE_RX_BYTES, gauge, The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.
"""
# DCGM field types: these are doubles (printed "%f"); every other numeric field is an int64 ("%d").
_DOUBLE_FIELDS = frozenset(
    {
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    }
)


@dataclass(frozen=True)
class Counter:
    name: str
    prom_type: str  # gauge | counter | label
    help: str


def parse_counters(text: str) -> list[Counter]:
    """dcgm-exporter's counters CSV: ``FIELD, type, help``; ``#`` lines are comments."""
    out = []
    for record in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not record or record[0].lstrip().startswith("#") or len(record) < len(Counter.__annotations__):
            continue
        out.append(Counter(record[0].strip(), record[1].strip(), record[2].strip()))
    return out


def load_counters(path: Path | None = None) -> list[Counter]:
    if path is None:
        schemas = find_shared_schemas()
        path = schemas / "dcgm-default-counters.csv" if schemas is not None else None
    if path is not None and path.is_file():
        return parse_counters(path.read_text())
    return parse_counters(_FALLBACK_COUNTERS)


@dataclass(frozen=True)
class MigSlice:
    gi_id: int  # GPU instance id (GPU_I_ID)
    profile: str  # "1g.10gb" (GPU_I_PROFILE)
    uuid: str  # "MIG-…"
    memory_mib: int = 9856


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    pci_bus_id: str = ""
    model: str = H100_MODEL
    memory_mib: int = 81559
    reserved_mib: int = 566
    mig: tuple[MigSlice, ...] = ()  # non-empty: MIG mode on, one entity per slice
    vfio: bool = False  # bound to vfio-pci for passthrough: invisible to DCGM
    idle_w: float = 70.0
    tdp_w: float = 700.0
    driver_version: str = DRIVER_VERSION
    energy_mj: float = 0.0  # DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, integrated by the exporter
    last_xid: int = 0  # DCGM_FI_DEV_XID_ERRORS


@dataclass(frozen=True)
class Allocation:
    """One device-plugin device given to a pod (what the kubelet pod-resources API lists)."""

    pod_uid: str
    gpu_uuid: str  # the physical card
    resource: str = NVIDIA_GPU
    gi_id: int | None = None  # MIG slice
    replica: int | None = None  # time-slicing replica ("GPU-…::<replica>")
    container: str = ""


@dataclass(frozen=True)
class ExporterOptions:
    hostname_label: str = "Hostname"  # "hostname" on dcgm-exporter main after 4.5.x
    kubernetes: bool = True  # DCGM_EXPORTER_KUBERNETES (the pod mapper)
    pod_labels: bool = True  # --kubernetes-enable-pod-labels
    virtual_gpus: bool = False  # --kubernetes-virtual-gpus
    nvidia_resource_names: tuple[str, ...] = ("nvidia.com/gpu.shared",)  # --nvidia-resource-names
    collectors: tuple[Counter, ...] | None = None  # -f/DCGM_EXPORTER_COLLECTORS; None: the default CSV


@dataclass
class _Entity:
    gpu: Gpu
    mig: MigSlice | None
    allocations: list[Allocation] = field(default_factory=list)
    sample: WorkloadSample = IDLE
    parent_sample: WorkloadSample = IDLE  # the whole card (power, clocks, temperatures)


def sanitize_label_name(name: str) -> str:
    return _INVALID_LABEL_CHAR.sub("_", name)


def is_passthrough_pod(pod: Mapping[str, Any] | None) -> bool:
    labels = (pod or {}).get("metadata", {}).get("labels") or {}
    return labels.get(VIRT_LAUNCHER[0]) == VIRT_LAUNCHER[1]


def _container_for(pod: Mapping[str, Any] | None, resource: str) -> str:
    containers = (pod or {}).get("spec", {}).get("containers") or []
    for c in containers:
        res = c.get("resources") or {}
        if resource in (res.get("limits") or {}) or resource in (res.get("requests") or {}):
            return str(c.get("name", ""))
    return str(containers[0].get("name", "")) if containers else ""


def _entities(
    gpus: Sequence[Gpu],
    allocations: Iterable[Allocation],
    pods_by_uid: Mapping[str, Mapping[str, Any]],
    workloads: WorkloadBook,
    now: float,
) -> list[_Entity]:
    by_gpu: dict[str, list[Allocation]] = {}
    for alloc in allocations:
        by_gpu.setdefault(alloc.gpu_uuid, []).append(alloc)

    def sample(allocs: Iterable[Allocation]) -> WorkloadSample:
        seen: dict[str, WorkloadSample] = {}
        for a in allocs:
            meta = (pods_by_uid.get(a.pod_uid) or {}).get("metadata", {})
            if a.pod_uid not in seen:
                seen[a.pod_uid] = workloads.sample(
                    uid=a.pod_uid, namespace=meta.get("namespace", ""), name=meta.get("name", ""), now=now
                )
        return combine(seen.values())

    out: list[_Entity] = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        allocs = by_gpu.get(gpu.uuid, [])
        if gpu.vfio or any(is_passthrough_pod(pods_by_uid.get(a.pod_uid)) for a in allocs):
            continue
        if not gpu.mig:
            whole = sample(allocs)
            out.append(_Entity(gpu, None, allocs, whole, whole))
            continue
        slices = [
            _Entity(gpu, s, [a for a in allocs if a.gi_id == s.gi_id])
            for s in sorted(gpu.mig, key=lambda s: s.gi_id)
        ]
        for ent in slices:
            ent.sample = sample(ent.allocations)
        share = 1.0 / len(slices)
        parent = combine(
            WorkloadSample(gpu_util=e.sample.gpu_util * share, mem_used_mib=e.sample.mem_used_mib)
            for e in slices
        )
        for ent in slices:
            ent.parent_sample = parent
        out.extend(slices)
    return out


def _values(ent: _Entity) -> dict[str, float]:
    """Every counter's value for one entity (a card, or a MIG slice)."""
    gpu, s, card = ent.gpu, ent.sample, ent.parent_sample
    util = s.gpu_util
    busy = card.gpu_util > 0
    total_mib = ent.mig.memory_mib if ent.mig else gpu.memory_mib
    reserved = 0 if ent.mig else gpu.reserved_mib
    used = min(float(total_mib - reserved), s.mem_used_mib)
    return {
        "DCGM_FI_DEV_SM_CLOCK": card.sm_clock_mhz
        if card.sm_clock_mhz is not None
        else (1980 if busy else 345),
        "DCGM_FI_DEV_MEM_CLOCK": 2619,
        "DCGM_FI_DEV_MEMORY_TEMP": 38 + card.gpu_util * 0.3,
        "DCGM_FI_DEV_GPU_TEMP": 31 + card.gpu_util * 0.4,
        "DCGM_FI_DEV_POWER_USAGE": _power(ent),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": gpu.energy_mj,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
        "DCGM_FI_DEV_GPU_UTIL": 0 if ent.mig else util,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 0
        if ent.mig
        else (s.mem_copy_util if s.mem_copy_util is not None else util * 0.4),
        "DCGM_FI_DEV_ENC_UTIL": 0,
        "DCGM_FI_DEV_DEC_UTIL": 0,
        "DCGM_FI_DEV_XID_ERRORS": gpu.last_xid,
        "DCGM_FI_DEV_FB_FREE": total_mib - reserved - used,
        "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_FB_RESERVED": reserved,
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 0,
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": util / 100,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": s.tensor_active
        if s.tensor_active is not None
        else util / 100 * 0.5,
        "DCGM_FI_PROF_DRAM_ACTIVE": s.dram_active if s.dram_active is not None else util / 100 * 0.35,
        "DCGM_FI_PROF_PCIE_TX_BYTES": s.pcie_tx_bytes,
        "DCGM_FI_PROF_PCIE_RX_BYTES": s.pcie_rx_bytes,
    }


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _pod_attributes(
    ent: _Entity, pods_by_uid: Mapping[str, Mapping[str, Any]], options: ExporterOptions
) -> list[tuple[dict[str, str], dict[str, str]]]:
    """(extra Labels, Attributes) per series of this entity: one unlabelled series when unattributed."""
    mapped = []
    for alloc in ent.allocations:
        pod = pods_by_uid.get(alloc.pod_uid)
        if pod is None:
            continue
        if alloc.resource not in (
            NVIDIA_GPU,
            *options.nvidia_resource_names,
        ) and not alloc.resource.startswith(MIG_PREFIX):
            continue
        mapped.append((alloc, pod))
    if not options.kubernetes or not mapped:
        return [({}, {})]

    def attrs(alloc: Allocation, pod: Mapping[str, Any]) -> dict[str, str]:
        meta = pod.get("metadata", {})
        return {
            "pod": str(meta.get("name", "")),
            "namespace": str(meta.get("namespace", "")),
            "container": alloc.container or _container_for(pod, alloc.resource),
        }

    if options.virtual_gpus:
        out: list[tuple[dict[str, str], dict[str, str]]] = []
        for alloc, pod in mapped:
            a = attrs(alloc, pod)
            if alloc.replica is not None:
                a["vgpu"] = str(alloc.replica)
            out.append(({}, a))
        return out
    alloc, pod = mapped[-1]  # the device -> pod map keeps the last pod listed for the device
    labels: dict[str, str] = {}
    if options.pod_labels:
        for key, value in (pod.get("metadata", {}).get("labels") or {}).items():
            name = sanitize_label_name(str(key))
            if name not in _RESERVED_LABELS:
                labels[name] = str(value)
    return [(labels, attrs(alloc, pod))]


def _format(name: str, value: float) -> str:
    if name in _DOUBLE_FIELDS:
        return f"{float(value):f}"
    return str(round(value))


def render_metrics(
    node: str,
    gpus: Sequence[Gpu],
    allocations: Iterable[Allocation],
    pods_by_uid: Mapping[str, Mapping[str, Any]],
    workloads: WorkloadBook,
    now: float,
    hostname_label: str = "Hostname",
    *,
    options: ExporterOptions | None = None,
) -> str:
    """The body of ``GET /metrics`` of the dcgm-exporter on ``node`` at time ``now``.

    ``options`` (when given) supplies the hostname label too; cards carry their energy and last XID.
    """
    options = options or ExporterOptions(hostname_label=hostname_label)
    counters = options.collectors if options.collectors is not None else load_counters()
    entities = _entities(gpus, allocations, pods_by_uid, workloads, now)
    label_fields = [c.name for c in counters if c.prom_type == "label"]
    rows: list[tuple[str, dict[str, float]]] = []
    for ent in entities:
        gpu = ent.gpu
        base = (
            f'gpu="{gpu.index}",UUID="{_escape(gpu.uuid)}",pci_bus_id="{_escape(gpu.pci_bus_id)}",'
            f'device="nvidia{gpu.index}",modelName="{_escape(gpu.model)}"'
        )
        if ent.mig is not None:
            base += f',GPU_I_PROFILE="{_escape(ent.mig.profile)}",GPU_I_ID="{ent.mig.gi_id}"'
        if node:
            base += f',{options.hostname_label}="{_escape(node)}"'
        static = {f: gpu.driver_version for f in label_fields if f == "DCGM_FI_DRIVER_VERSION"}
        values = _values(ent)
        for labels, attributes in _pod_attributes(ent, pods_by_uid, options):
            merged = {**static, **labels}
            text = base + "".join(f',{k}="{_escape(merged[k])}"' for k in sorted(merged))
            text += "".join(f',{k}="{_escape(attributes[k])}"' for k in sorted(attributes))
            rows.append((text, values))
    out: list[str] = []
    for counter in counters:
        if not rows or counter.name not in rows[0][1]:
            continue  # "label" counters, and fields this simulation has no value for (DCGM leaves them blank)
        out.append(f"# HELP {counter.name} {counter.help}\n# TYPE {counter.name} {counter.prom_type}\n")
        for labels_text, values in rows:
            out.append(f"{counter.name}{{{labels_text}}} {_format(counter.name, values[counter.name])}\n")
    return "".join(out)


def _power(ent: _Entity) -> float:
    gpu, card = ent.gpu, ent.parent_sample
    watts = (
        card.power_w
        if card.power_w is not None
        else gpu.idle_w + card.gpu_util / 100 * (gpu.tdp_w - gpu.idle_w)
    )
    return min(watts, gpu.tdp_w)


def card_power(
    gpus: Sequence[Gpu],
    allocations: Iterable[Allocation],
    pods_by_uid: Mapping[str, Mapping[str, Any]],
    workloads: WorkloadBook,
    now: float,
) -> dict[str, float]:
    """Watts per visible card at ``now`` (what the energy counter integrates)."""
    return {e.gpu.uuid: _power(e) for e in _entities(gpus, allocations, pods_by_uid, workloads, now)}


# --------------------------------------------------------------- the DeviceManager, read in one place
_PCI_BUSES = ("1B", "43", "52", "61", "9D", "C3", "D1", "DF")  # an HGX H100 8-GPU board
MIG_FIRST_GI = 7  # GPU instance ids of 1g profiles start at 7 (7..13 for seven 1g.10gb slices)


def pci_bus_id(index: int) -> str:
    bus = _PCI_BUSES[index] if index < len(_PCI_BUSES) else f"{0xE0 + index:02X}"
    return f"00000000:{bus}:00.0"


def _mig_memory_mib(profile: str) -> int:
    match = re.search(r"(\d+)gb", profile)
    return int(int(match.group(1)) * 985.6) if match else 9856


def node_inventory(devices: Any, node: str) -> tuple[list[Gpu], list[Allocation]]:
    """The node's cards and their allocations from ``sim.devices.DeviceManager`` (``inventory``, ``on_node``),
    as dcgm-exporter learns them from NVML and the kubelet pod-resources API."""
    if devices is None:
        return [], []
    gpus = []
    for g in devices.inventory(node):
        mig: tuple[MigSlice, ...] = ()
        if g.mode == "mig":
            mem = _mig_memory_mib(g.mig_profile)
            mig = tuple(
                MigSlice(MIG_FIRST_GI + i, g.mig_profile, u, mem) for i, u in enumerate(g.mig_devices)
            )
        gpus.append(Gpu(g.index, g.uuid, pci_bus_id(g.index), g.model, g.memory_mib, mig=mig))
    allocations = [
        Allocation(
            pod_uid=r.pod_uid,
            gpu_uuid=r.gpu_uuid,
            resource=r.resource,
            gi_id=MIG_FIRST_GI + r.slot if r.mode == "mig" else None,
            replica=r.slot if r.mode == "time-sliced" else None,
            container=r.container,
        )
        for r in devices.on_node(node)
    ]
    return gpus, allocations
