"""The attribution service's plain data: what the sources read, and what the rules attribute (pure).

Inputs (built by the sources from the Kubernetes API, dcgm-exporter or Prometheus, the kubelets and the
optional node agent): :class:`NodeInfo`, :class:`WorkspacePod`, :class:`DeviceSample`,
:class:`ProcessSample`, :class:`ContainerUsage`, gathered in one :class:`Observation`.
Outputs (built by :mod:`.rules` and :mod:`.aggregate`): :class:`GpuCell` per card, MIG instance or
passthrough slot, each with its :class:`GpuShare` owners, and :class:`WorkspaceFigures` per workspace.
Every figure carries its :class:`Basis`, so a reader knows how far to trust it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from ...manifests.names import KIND_JOB


class Basis(StrEnum):
    """How a GPU figure was obtained."""

    MEASURED = "measured"  # the device's own counter with one owner (whole card, MIG instance)
    PER_PROCESS = "per-process"  # a shared card's value split by the node agent's per-process samples
    SHARED = "shared"  # a shared card's device value; its sharers are listed, no split is known
    ALLOCATION = "allocation"  # who holds the card; its use is invisible (VM passthrough)
    NONE = "none"  # no GPU


class CellKind(StrEnum):
    WHOLE = "whole"  # a card given whole to one pod (nvidia.com/gpu)
    MIG = "mig"  # one MIG GPU instance
    TIME_SLICED = "time-sliced"  # a card shared by time-slicing
    PASSTHROUGH = "passthrough"  # a card bound to vfio-pci and given to a VM; invisible to DCGM


@dataclass(frozen=True)
class NodeInfo:
    """A node as the API shows it."""

    name: str
    ready: bool
    unschedulable: bool = False
    taints: tuple[str, ...] = ()  # "key=value:Effect"
    capacity: Mapping[str, float] = field(default_factory=dict)  # cpu (cores), memory (bytes), GPU resources
    allocatable: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    address: str | None = None  # InternalIP (for the kubelet scrape)


@dataclass(frozen=True)
class WorkspacePod:
    """A running workspace: its pod, or a VM's virt-launcher pod, with our labels and annotations."""

    namespace: str
    pod: str
    uid: str
    user: str
    server: str  # "" for JupyterHub's default server
    profile: str
    gpu_mode: str  # exclusive | mig | time-sliced | none (catalog GpuMode)
    runtime: str  # container | vm
    node: str | None
    phase: str = "Running"
    cost_center: str = ""
    cpu_request: float = 0.0  # cores
    cpu_limit: float | None = None
    memory_request: float = 0.0  # bytes
    memory_limit: float | None = None
    gpu_resources: Mapping[str, int] = field(default_factory=dict)  # extended resource → count (limits)
    started_at: float | None = None  # epoch seconds
    cull_exempt: bool = False  # annotated gpuworkspace.dev/cull-exempt: "true" (read by the idle culler)
    kind: str = "workspace"  # "job": a pod of a job the user submitted (labelled gpuworkspace.dev/kind=job)
    job: str = ""  # the job's name (kind "job")

    @property
    def is_job(self) -> bool:
        return self.kind == KIND_JOB

    @property
    def key(self) -> str:
        """``namespace/pod``: unique among live workspaces."""
        return f"{self.namespace}/{self.pod}"

    @property
    def passthrough(self) -> bool:
        """A VM holding GPUs: a virt-launcher's GPU resources are PCI devices passed to the guest."""
        return self.runtime == "vm" and any(n > 0 for n in self.gpu_resources.values())


@dataclass(frozen=True)
class DeviceSample:
    """One dcgm-exporter entity: a card, or one MIG GPU instance of a card."""

    node: str
    gpu: str  # the card's index ("0".."7")
    uuid: str  # the card's UUID (MIG instances share their card's UUID in dcgm-exporter output)
    model: str
    util_percent: float | None  # DCGM_FI_DEV_GPU_UTIL; for MIG: DCGM_FI_PROF_GR_ENGINE_ACTIVE x 100
    mem_used_mib: float | None
    mem_total_mib: float | None  # FB_USED + FB_FREE (+ FB_RESERVED)
    power_w: float | None  # the card's power (MIG instances report the card's)
    xid: int = 0  # DCGM_FI_DEV_XID_ERRORS: the last XID error, 0 for none
    mig_profile: str | None = None  # GPU_I_PROFILE, e.g. "1g.10gb"
    mig_instance: str | None = None  # GPU_I_ID
    pods: tuple[tuple[str, str], ...] = ()  # (namespace, pod) the exporter attributes the entity to

    @property
    def entity(self) -> str:
        """The entity's id on its node: ``3`` for a card, ``7/mig-2`` for a MIG instance."""
        return self.gpu if self.mig_instance is None else f"{self.gpu}/mig-{self.mig_instance}"


@dataclass(frozen=True)
class ProcessSample:
    """The node agent's per-pod figures on one device (its processes summed)."""

    node: str
    gpu_uuid: str
    pod_uid: str  # "" for processes outside any pod
    sm_util_percent: float  # NVML per-process SM utilisation, summed over the pod's processes
    mem_used_bytes: float
    processes: int = 1


@dataclass(frozen=True)
class ContainerUsage:
    """CPU and memory use of one pod (its containers summed), from the kubelet or metrics.k8s.io."""

    namespace: str
    pod: str
    cpu_cores: float | None  # a rate: needs two scrapes
    memory_bytes: float | None  # working set


@dataclass(frozen=True)
class Observation:
    """Everything one collector cycle read, at ``now`` (epoch seconds)."""

    now: float
    nodes: tuple[NodeInfo, ...] = ()
    workspaces: tuple[WorkspacePod, ...] = ()
    devices: tuple[DeviceSample, ...] = ()
    processes: tuple[ProcessSample, ...] = ()  # empty when no node agent runs
    agent_nodes: frozenset[str] = frozenset()  # nodes whose agent answered this cycle
    usage: tuple[ContainerUsage, ...] = ()
    failed_sources: tuple[str, ...] = ()  # "dcgm gpu-node-a: connection refused", shown to admins


@dataclass(frozen=True)
class GpuShare:
    """One workspace's part of a GPU cell."""

    workspace: str  # WorkspacePod.key
    user: str
    server: str
    basis: Basis
    util_percent: float | None  # the part of the device this workspace uses (SHARED: the device value)
    mem_used_mib: float | None
    power_w: float | None  # PER_PROCESS: split by utilisation; MEASURED: the device's; SHARED: None
    caveat: str = ""  # shown next to the figure, e.g. "device value, shared by 3 workspaces"
    job: str = ""  # the holder is a pod of this job (kind "job"), not a workspace


@dataclass(frozen=True)
class GpuCell:
    """One cell of the node grid."""

    node: str
    gpu: str  # card index, or "pt-0".. for passthrough slots no exporter can see
    kind: CellKind
    model: str = ""
    uuid: str | None = None
    mig_profile: str | None = None
    util_percent: float | None = None  # the device's (None: invisible)
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    power_w: float | None = None
    xid: int = 0
    owners: tuple[GpuShare, ...] = ()
    abnormal: tuple[str, ...] = ()  # "XID 79", "GPU memory full"

    @property
    def entity(self) -> str:
        return self.gpu


@dataclass(frozen=True)
class WorkspaceFigures:
    """One workspace's resources: allocation next to use."""

    workspace: WorkspacePod
    cpu_cores: float | None
    memory_bytes: float | None
    gpus_allocated: float  # cards (a MIG instance or a time-slice counts 1/slices or 1/replicas of one)
    gpu_util_percent: float | None  # mean over its GPU shares (None: unknown)
    gpu_mem_used_mib: float | None
    power_w: float | None
    basis: Basis  # the weakest basis among its shares
    caveat: str = ""
    cells: tuple[str, ...] = ()  # "node/gpu" of the cells it holds
    gpu_idle: bool = False  # holds a GPU whose use is known to be under the idle threshold
