"""The resource types the devcluster API serves (its "discovery" table).

Pure data: every other devcluster module looks kinds up here, so adding a kind
is one entry in :data:`RESOURCE_TYPES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALL_VERBS = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)


@dataclass(frozen=True)
class ResourceType:
    """One served resource, e.g. ``pods`` in ``v1`` or ``virtualmachines`` in ``kubevirt.io/v1``."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    # served subresources: "status", "log", "exec", "binding", "eviction", "scale", "token"
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    singular: str = ""
    # True for kinds declared by a CustomResourceDefinition (kubevirt, cdi, ...)
    custom: bool = False
    extra: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_version(self) -> str:
        return self.group_version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    @property
    def key(self) -> tuple[str, str]:
        """Storage key: objects are stored once per (group, plural)."""
        return (self.group, self.plural)

    def path_prefix(self, namespace: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"


def _core(plural: str, kind: str, namespaced: bool = True, **kw: object) -> ResourceType:
    return ResourceType("", "v1", plural, kind, namespaced, **kw)  # type: ignore[arg-type]


RESOURCE_TYPES: tuple[ResourceType, ...] = (
    _core("namespaces", "Namespace", False, short_names=("ns",), subresources=("status",)),
    _core("nodes", "Node", False, short_names=("no",), subresources=("status",)),
    _core(
        "pods",
        "Pod",
        short_names=("po",),
        categories=("all",),
        subresources=("status", "log", "exec", "binding", "eviction"),
    ),
    _core("events", "Event", short_names=("ev",)),
    _core("services", "Service", short_names=("svc",), categories=("all",), subresources=("status",)),
    _core("endpoints", "Endpoints", short_names=("ep",)),
    _core("secrets", "Secret"),
    _core("configmaps", "ConfigMap", short_names=("cm",)),
    _core("serviceaccounts", "ServiceAccount", short_names=("sa",), subresources=("token",)),
    _core("persistentvolumeclaims", "PersistentVolumeClaim", short_names=("pvc",), subresources=("status",)),
    _core("persistentvolumes", "PersistentVolume", False, short_names=("pv",), subresources=("status",)),
    _core("resourcequotas", "ResourceQuota", short_names=("quota",), subresources=("status",)),
    ResourceType("events.k8s.io", "v1", "events", "Event", True, short_names=("ev",)),
    ResourceType("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceType(
        "batch",
        "v1",
        "cronjobs",
        "CronJob",
        True,
        short_names=("cj",),
        categories=("all",),
        subresources=("status",),
    ),
    ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, short_names=("pc",)),
    ResourceType(
        "networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, short_names=("netpol",)
    ),
    ResourceType("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, short_names=("sc",)),
    ResourceType(
        "storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", False, subresources=("status",)
    ),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        short_names=("crd", "crds"),
        subresources=("status",),
    ),
    ResourceType(
        "snapshot.storage.k8s.io",
        "v1",
        "volumesnapshots",
        "VolumeSnapshot",
        True,
        short_names=("vs",),
        subresources=("status",),
        custom=True,
    ),
    ResourceType(
        "snapshot.storage.k8s.io",
        "v1",
        "volumesnapshotclasses",
        "VolumeSnapshotClass",
        False,
        short_names=("vsclass", "vsclasses"),
        custom=True,
    ),
    ResourceType(
        "kubevirt.io",
        "v1",
        "virtualmachines",
        "VirtualMachine",
        True,
        short_names=("vm", "vms"),
        categories=("all",),
        subresources=("status",),
        custom=True,
    ),
    ResourceType(
        "kubevirt.io",
        "v1",
        "virtualmachineinstances",
        "VirtualMachineInstance",
        True,
        short_names=("vmi", "vmis"),
        categories=("all",),
        subresources=("status",),
        custom=True,
    ),
    ResourceType(
        "cdi.kubevirt.io",
        "v1beta1",
        "datavolumes",
        "DataVolume",
        True,
        short_names=("dv", "dvs"),
        categories=("all",),
        subresources=("status",),
        custom=True,
    ),
    ResourceType(
        "cdi.kubevirt.io",
        "v1beta1",
        "datasources",
        "DataSource",
        True,
        short_names=("das",),
        categories=("all",),
        subresources=("status",),
        custom=True,
    ),
    ResourceType(
        "csiaddons.openshift.io",
        "v1alpha1",
        "networkfences",
        "NetworkFence",
        False,
        subresources=("status",),
        custom=True,
    ),
    # batch/v1 Jobs (the Job controller lives in sim/; Kueue's job integration suspends queued ones)
    ResourceType("batch", "v1", "jobs", "Job", True, categories=("all",), subresources=("status",)),
    # Kueue 0.19 (storage version v1beta2): quotas, queues and the Workloads it admits
    ResourceType(
        "kueue.x-k8s.io",
        "v1beta2",
        "resourceflavors",
        "ResourceFlavor",
        False,
        short_names=("flavor", "flavors", "rf"),
        custom=True,
    ),
    ResourceType(
        "kueue.x-k8s.io",
        "v1beta2",
        "clusterqueues",
        "ClusterQueue",
        False,
        short_names=("cq",),
        subresources=("status",),
        custom=True,
    ),
    ResourceType(
        "kueue.x-k8s.io",
        "v1beta2",
        "localqueues",
        "LocalQueue",
        True,
        short_names=("queue", "queues", "lq"),
        subresources=("status",),
        custom=True,
    ),
    ResourceType(
        "kueue.x-k8s.io",
        "v1beta2",
        "workloadpriorityclasses",
        "WorkloadPriorityClass",
        False,
        short_names=("wpc",),
        custom=True,
    ),
    ResourceType(
        "kueue.x-k8s.io",
        "v1beta2",
        "workloads",
        "Workload",
        True,
        short_names=("kwl", "kueueworkload", "kueueworkloads"),
        subresources=("status",),
        custom=True,
    ),
)

# KubeVirt's aggregated API: action subresources on VMs (PUT .../start|stop|restart).
KUBEVIRT_SUBRESOURCE_GROUP = "subresources.kubevirt.io"
KUBEVIRT_SUBRESOURCE_VERSION = "v1"
KUBEVIRT_VM_ACTIONS = ("start", "stop", "restart")


def find(group: str, version: str, plural: str) -> ResourceType | None:
    """The served resource at ``/apis/{group}/{version}/{plural}`` (``group=""`` for core)."""
    for rt in RESOURCE_TYPES:
        if rt.group == group and rt.version == version and rt.plural == plural:
            return rt
    return None


def find_by_kind(api_version: str, kind: str) -> ResourceType | None:
    for rt in RESOURCE_TYPES:
        if rt.api_version == api_version and rt.kind == kind:
            return rt
    return None


def group_versions() -> dict[str, list[str]]:
    """Served group -> versions (core group excluded), in discovery order."""
    out: dict[str, list[str]] = {}
    for rt in RESOURCE_TYPES:
        if rt.group:
            versions = out.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
    return out
