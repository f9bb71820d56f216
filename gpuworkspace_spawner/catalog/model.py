"""The profile catalog as plain, frozen data: what a WorkspaceProfile document means once validated.

Pure. The loader (``catalog/loading.py``) turns YAML documents into these objects after JSON Schema
validation and cross-field checks; everything downstream (rendering, option validation, manifest
builders, the spawner) reads only these types, never raw YAML.

Durations are seconds (``90m`` → 5400), quantities stay Kubernetes quantity strings (``64Gi``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .network import NetworkSettings

if TYPE_CHECKING:
    from .jobprofiles import JobProfile

API_VERSION = "gpuworkspace.dev/v1alpha1"
PROFILE_KIND = "WorkspaceProfile"
CATALOG_KIND = "WorkspaceCatalog"

GpuMode = Literal["exclusive", "mig", "time-sliced", "none"]
Runtime = Literal["container", "vm"]
Ide = Literal["code-server", "jupyterlab"]
HomeAccessMode = Literal["ReadWriteOnce", "ReadWriteOncePod"]

GPU_MODES: tuple[GpuMode, ...] = ("exclusive", "mig", "time-sliced", "none")
IDES: tuple[Ide, ...] = ("code-server", "jupyterlab")


@dataclass(frozen=True)
class NodePool:
    """A named set of nodes: the profile says ``nodePool: gpu-interactive``, the catalog says how to get there."""

    name: str
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Resources:
    """Kubernetes requests and limits, keys as in a container spec (``cpu``, ``memory``, ``nvidia.com/gpu``)."""

    requests: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, str] = field(default_factory=dict)

    @property
    def gpu(self) -> tuple[str, str] | None:
        """The GPU resource name and count (``("nvidia.com/mig-1g.10gb", "1")``), or None."""
        for source in (self.limits, self.requests):
            for name, value in source.items():
                if name.startswith("nvidia.com/"):
                    return name, value
        return None


@dataclass(frozen=True)
class Placement:
    gpu_mode: GpuMode = "none"
    node_pool: NodePool | None = None
    runtime_class_name: str | None = None


@dataclass(frozen=True)
class SnapshotSchedule:
    """``storage.home.snapshots``: the disk service takes a VolumeSnapshot every ``every_s`` seconds and
    keeps the newest ``keep`` of those it took (manual and safety snapshots are never pruned)."""

    every_s: int
    keep: int


@dataclass(frozen=True)
class HomeRetention:
    """``storage.home.retention``: how long a deleted server's home disk is kept (None: the hub's
    ``retention_days``), or ``keep_on_delete=False``: reclaimed as soon as the server is deleted."""

    days: float | None = None
    keep_on_delete: bool = True


@dataclass(frozen=True)
class HomeStorage:
    """The personal RBD disk: retained across stops and server deletion (until retention ends)."""

    size: str = "10Gi"
    storage_class: str | None = None  # None: the cluster's default StorageClass
    mount_path: str = "/home/jovyan"
    access_mode: HomeAccessMode = "ReadWriteOnce"
    max_size: str | None = None  # the most an admin may resize the disk to; None: no limit set
    snapshots: SnapshotSchedule | None = None  # None: no scheduled snapshots
    retention: HomeRetention | None = None  # None: the hub's global retention setting


@dataclass(frozen=True)
class ScratchStorage:
    """Node-local emptyDir, wiped when the workspace stops."""

    size_limit: str | None = None
    mount_path: str = "/scratch"


@dataclass(frozen=True)
class SharedMount:
    """A claim mounted into every workspace of the profile (datasets, models, a team's CephFS directory)."""

    name: str
    claim_name: str
    mount_path: str
    read_only: bool = True
    sub_path: str | None = None


@dataclass(frozen=True)
class Checkpoints:
    """Where ``/checkpoints`` points (issue 16): exactly one of a team directory (by its name in
    ``team_directories``, optionally a sub-directory of it) or an object-store prefix."""

    team_directory: str | None = None
    sub_path: str | None = None
    object_store_url: str | None = None
    object_store_endpoint: str | None = None


@dataclass(frozen=True)
class Storage:
    home: HomeStorage = field(default_factory=HomeStorage)
    scratch: ScratchStorage = field(default_factory=ScratchStorage)
    shm_size_limit: str | None = None  # memory-backed /dev/shm
    datasets: SharedMount | None = None  # read-only /data
    models: SharedMount | None = None  # read-only /models
    team_directories: tuple[SharedMount, ...] = ()
    checkpoints: Checkpoints | None = None  # the durable target of /checkpoints; None: none given


@dataclass(frozen=True)
class Session:
    idle_timeout_s: int | None = None
    max_duration_s: int | None = None
    warnings_s: tuple[int, ...] = ()  # seconds before a stop at which users are warned, descending


@dataclass(frozen=True)
class Security:
    service_account_token: bool = False
    network_profile: str | None = None
    run_as_user: int = 1000
    run_as_group: int = 100
    fs_group: int = 100


@dataclass(frozen=True)
class IdeChoice:
    default: Ide = "code-server"
    choices: tuple[Ide, ...] = ("code-server", "jupyterlab")


@dataclass(frozen=True)
class Access:
    """Who may start the profile; both empty means everyone."""

    groups: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset()

    def allows(self, user: str, groups: frozenset[str] | set[str]) -> bool:
        if not self.groups and not self.users:
            return True
        return user in self.users or bool(self.groups & frozenset(groups))


@dataclass(frozen=True)
class VmGpu:
    """One passthrough GPU of a VM: KubeVirt's ``devices.gpus`` entry (``deviceName`` as the device plugin names it)."""

    name: str
    device_name: str  # e.g. nvidia.com/GH100_H100_SXM5_80GB


@dataclass(frozen=True)
class VmSpec:
    """A ``runtime: vm`` profile's machine: the root disk cloned from a CDI DataSource, the guest's shape.

    The root disk is the VM's home: everything the user installs (``/etc``, ``/opt``, ``/usr/local``, apt)
    stays on it. ``resources`` of the profile are the virt-launcher pod's requests and limits; the guest
    sees ``cores * sockets * threads`` vCPUs and ``guest_memory`` whatever was requested (requests without
    limits: "guaranteed 2, burst to 8", seed 001 §6).
    """

    data_source_name: str
    data_source_namespace: str
    cores: int
    guest_memory: str  # a quantity, e.g. 32Gi
    sockets: int = 1
    threads: int = 1
    root_disk_size: str = "40Gi"  # at least the golden image's size (CDI refuses a smaller clone)
    root_disk_class: str | None = None  # None: the cluster's default StorageClass
    root_disk_max_size: str | None = None  # the most an admin may resize the root disk to
    gpus: tuple[VmGpu, ...] = ()

    @property
    def vcpus(self) -> int:
        return self.cores * self.sockets * self.threads


@dataclass(frozen=True)
class WorkspaceProfile:
    slug: str  # metadata.name: DNS-1123 label, stable key stored with each server
    display_name: str
    image: str | None = None  # required for runtime: container; a VM boots from vm.data_source instead
    description: str = ""
    runtime: Runtime = "container"
    resources: Resources = field(default_factory=Resources)
    placement: Placement = field(default_factory=Placement)
    storage: Storage = field(default_factory=Storage)
    session: Session = field(default_factory=Session)
    security: Security = field(default_factory=Security)
    ide: IdeChoice = field(default_factory=IdeChoice)
    editors: tuple[Ide, ...] = IDES  # what the image declares (catalog/editors.py); ide.choices is within it
    access: Access = field(default_factory=Access)
    cost_center: str | None = None
    team: str | None = None  # the team label of its workspaces; None: from the user's groups (provenance.py)
    default: bool = False
    vm: VmSpec | None = None  # set exactly when runtime is vm
    source: str = ""  # the file the profile came from, for error messages and audit


@dataclass(frozen=True)
class Catalog:
    version: str
    profiles: tuple[WorkspaceProfile, ...]
    sources: tuple[str, ...] = ()
    allow_image_tags: bool = False
    network: NetworkSettings = field(default_factory=NetworkSettings)
    job_profiles: tuple[JobProfile, ...] = ()  # kind JobProfile (catalog/jobprofiles.py)

    def get(self, slug: str) -> WorkspaceProfile | None:
        return next((p for p in self.profiles if p.slug == slug), None)

    def get_job_profile(self, slug: str) -> JobProfile | None:
        return next((p for p in self.job_profiles if p.slug == slug), None)

    @property
    def default_profile(self) -> WorkspaceProfile | None:
        return next((p for p in self.profiles if p.default), self.profiles[0] if self.profiles else None)
