"""The simulated cluster's shape: GPU and CPU nodes, storage classes, namespaces, a golden VM image.

:func:`load_topology` reads the YAML (``sim/topology.yaml`` by default) into frozen dataclasses and
names the file and field of anything wrong; :func:`apply_topology` creates or updates the matching API
objects through ``Verbs`` (idempotent: it runs at every start); :func:`seed_golden` writes the golden
image's small root filesystem (the CSI provisioner calls it for a PVC carrying ``ROOTFS_ANNOTATION``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from ..addresses import NODES_PER_INSTANCE, check_instance, node_octet
from ..quantity import QuantityError, parse_quantity
from ..resources import find
from ..store import Obj
from ..verbs import Verbs, clone, now_rfc3339
from .context import SimContext
from .nodeinfo import node_object, node_status, ready_conditions
from .rootfs import ROOTFS, seed_golden

__all__ = [
    "DEFAULT_TOPOLOGY",
    "GPU_RESOURCE",
    "MIG_PREFIX",
    "ROOTFS_ANNOTATION",
    "SHARED_RESOURCE",
    "GoldenImage",
    "GpuSpec",
    "NodeSpec",
    "SnapshotClassSpec",
    "StorageClassSpec",
    "Topology",
    "apply_topology",
    "load_topology",
    "node_object",
    "node_status",
    "ready_conditions",
    "seed_golden",
]

DEFAULT_TOPOLOGY = Path(__file__).with_name("topology.yaml")
ROOTFS_ANNOTATION = "devcluster.gpuworkspace.dev/rootfs"  # on a PVC: seed its volume with this rootfs
GPU_RESOURCE, SHARED_RESOURCE, MIG_PREFIX = "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-"
GPU_MODES = ("exclusive", "time-sliced", "mig")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
_RT = {
    name: find(group, version, name)
    for group, version, name in (
        ("", "v1", "nodes"),
        ("", "v1", "namespaces"),
        ("", "v1", "persistentvolumeclaims"),
        ("storage.k8s.io", "v1", "storageclasses"),
        ("snapshot.storage.k8s.io", "v1", "volumesnapshotclasses"),
        ("cdi.kubevirt.io", "v1beta1", "datasources"),
    )
}


@dataclass(frozen=True)
class GpuSpec:
    index: int
    model: str
    memory_mib: int
    mode: str = "exclusive"  # exclusive | time-sliced | mig
    replicas: int = 1  # time-sliced: slots offered
    mig_profile: str = ""  # mig: e.g. "1g.10gb"
    mig_slices: int = 0
    fail_requests_greater_than_one: bool = False  # time-sliced: the device plugin refuses requests > 1

    @property
    def resource(self) -> str:
        """The extended resource this card is offered as."""
        if self.mode == "time-sliced":
            return SHARED_RESOURCE
        if self.mode == "mig":
            return MIG_PREFIX + self.mig_profile
        return GPU_RESOURCE

    @property
    def units(self) -> int:
        """How many of :attr:`resource` this card adds to the node."""
        return {"time-sliced": self.replicas, "mig": self.mig_slices}.get(self.mode, 1)


@dataclass(frozen=True)
class NodeSpec:
    name: str
    index: int  # position in the file: with the devcluster's instance, fixes the node's IPs
    instance_type: str
    cpu: Decimal
    memory: Decimal
    ephemeral_storage: Decimal
    pods: int
    reserved: Mapping[str, Decimal] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    gpus: tuple[GpuSpec, ...] = ()
    gpu_family: str = ""
    mig_config: str = "all-disabled"
    instance: int = 0  # the devcluster's (addresses.py)

    @property
    def ip_octet(self) -> int:
        """Second octet of the node's addresses: InternalIP ``127.<octet>.0.1``, pods ``127.<octet>.x.y``."""
        return node_octet(self.instance, self.index)

    @property
    def internal_ip(self) -> str:
        return f"127.{self.ip_octet}.0.1"

    def extended_resources(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for gpu in self.gpus:
            out[gpu.resource] = out.get(gpu.resource, 0) + gpu.units
        return out


@dataclass(frozen=True)
class StorageClassSpec:
    name: str
    provisioner: str
    default: bool = False
    reclaim_policy: str = "Delete"
    allow_volume_expansion: bool = False
    volume_binding_mode: str = "Immediate"
    access_modes: tuple[str, ...] = ("ReadWriteOnce",)
    parameters: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SnapshotClassSpec:
    name: str
    driver: str
    deletion_policy: str = "Delete"
    default: bool = False
    parameters: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GoldenImage:
    namespace: str
    pvc: str
    datasource: str
    storage_class: str
    size: str
    access_modes: tuple[str, ...] = ("ReadWriteOnce",)
    rootfs: str = "ubuntu-24.04"


@dataclass(frozen=True)
class Topology:
    source: Path
    nodes: tuple[NodeSpec, ...]
    storage_classes: tuple[StorageClassSpec, ...] = ()
    snapshot_classes: tuple[SnapshotClassSpec, ...] = ()
    namespaces: tuple[str, ...] = ()
    golden_images: tuple[GoldenImage, ...] = ()

    def node(self, name: str) -> NodeSpec:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def storage_class(self, name: str) -> StorageClassSpec | None:
        return next((sc for sc in self.storage_classes if sc.name == name), None)


# ------------------------------------------------------------------ loading
class _FieldError(Exception):
    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")


_MISSING: Any = object()


def _get(
    data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any = _MISSING
) -> Any:
    if key not in data or data[key] is None:
        if default is _MISSING:
            raise _FieldError(f"{where}.{key}".lstrip("."), "required field is missing")
        return default
    value = data[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, (int, str))):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _FieldError(f"{where}.{key}".lstrip("."), f"expected {want}, got {value!r}")
    return value


def _mapping(value: Any, where: str, allowed: tuple[str, ...] | None = None) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _FieldError(where or "(top level)", f"expected a mapping, got {value!r}")
    if allowed is not None:
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            raise _FieldError(where or "(top level)", f"unknown field(s) {unknown}; allowed: {list(allowed)}")
    return value


def _quantity(value: Any, where: str) -> Decimal:
    try:
        return parse_quantity(value if isinstance(value, int | float | str) else repr(value))
    except QuantityError as exc:
        raise _FieldError(where, f"not a quantity: {value!r}") from exc


def _str_map(value: Any, where: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in _mapping(value or {}, where).items()}


def _choice(value: str, choices: tuple[str, ...], where: str) -> str:
    if value not in choices:
        raise _FieldError(where, f"must be one of {list(choices)}, got {value!r}")
    return value


def _gpus(data: Any, where: str) -> tuple[tuple[GpuSpec, ...], str, str]:
    d = _mapping(data, where, ("model", "family", "count", "memory_mib", "mig_config", "sharing"))
    model, count = _get(d, "model", str, where), _get(d, "count", int, where)
    memory = _get(d, "memory_mib", int, where, 81559)
    gpus = {i: GpuSpec(i, model, memory) for i in range(count)}
    for j, raw in enumerate(_get(d, "sharing", list, where, [])):
        w = f"{where}.sharing[{j}]"
        s = _mapping(
            raw, w, ("index", "mode", "replicas", "profile", "slices", "fail_requests_greater_than_one")
        )
        index = _get(s, "index", int, w)
        if index not in gpus:
            raise _FieldError(f"{w}.index", f"no GPU {index} on a node with count {count}")
        mode = _choice(_get(s, "mode", str, w), GPU_MODES, f"{w}.mode")
        replicas = _get(s, "replicas", int, w, 4 if mode == "time-sliced" else 1)
        profile = _get(s, "profile", str, w, "1g.10gb" if mode == "mig" else "")
        slices = _get(s, "slices", int, w, 7 if mode == "mig" else 0)
        if replicas < 1 or (mode == "mig" and slices < 1):
            raise _FieldError(w, "replicas and slices must be positive")
        strict = _get(s, "fail_requests_greater_than_one", bool, w, False)
        gpus[index] = GpuSpec(index, model, memory, mode, replicas, profile, slices, strict)
    has_mig = any(g.mode == "mig" for g in gpus.values())
    mig_config = _get(d, "mig_config", str, where, "custom" if has_mig else "all-disabled")
    return tuple(gpus.values()), _get(d, "family", str, where, ""), mig_config


_NODE_KEYS = ("name", "instance_type", "cpu", "memory", "ephemeral_storage", "pods", "reserved", "labels")


def _node(raw: Any, index: int, instance: int) -> NodeSpec:
    where = f"nodes[{index}]"
    d = _mapping(raw, where, (*_NODE_KEYS, "taints", "gpus"))
    taints = []
    for j, item in enumerate(_get(d, "taints", list, where, [])):
        w = f"{where}.taints[{j}]"
        t = _mapping(item, w, ("key", "value", "effect"))
        value = "" if t.get("value") is None else str(t["value"])
        taint = {"key": _get(t, "key", str, w), **({"value": value} if value else {})}
        taint["effect"] = _choice(_get(t, "effect", str, w), TAINT_EFFECTS, f"{w}.effect")
        taints.append(taint)
    gpus, family, mig_config = (
        _gpus(d["gpus"], f"{where}.gpus") if d.get("gpus") else ((), "", "all-disabled")
    )
    reserved = {
        k: _quantity(v, f"{where}.reserved.{k}") for k, v in _str_map(d.get("reserved"), where).items()
    }
    return NodeSpec(
        name=_get(d, "name", str, where),
        index=index,
        instance_type=_get(d, "instance_type", str, where, "devcluster"),
        cpu=_quantity(_get(d, "cpu", (int, str), where), f"{where}.cpu"),
        memory=_quantity(_get(d, "memory", (int, str), where), f"{where}.memory"),
        ephemeral_storage=_quantity(_get(d, "ephemeral_storage", (int, str), where, "100Gi"), where),
        pods=_get(d, "pods", int, where, 110),
        reserved=reserved,
        labels=_str_map(d.get("labels"), f"{where}.labels"),
        taints=tuple(taints),
        gpus=gpus,
        gpu_family=family,
        mig_config=mig_config,
        instance=instance,
    )


def _modes(value: Any, where: str) -> tuple[str, ...]:
    return tuple(_choice(str(m), ACCESS_MODES, where) for m in value)


def _storage_class(raw: Any, i: int) -> StorageClassSpec:
    w = f"storage_classes[{i}]"
    d = _mapping(raw, w, tuple(StorageClassSpec.__dataclass_fields__))
    return StorageClassSpec(
        name=_get(d, "name", str, w),
        provisioner=_get(d, "provisioner", str, w),
        default=_get(d, "default", bool, w, False),
        reclaim_policy=_choice(
            _get(d, "reclaim_policy", str, w, "Delete"), ("Delete", "Retain"), f"{w}.reclaim_policy"
        ),
        allow_volume_expansion=_get(d, "allow_volume_expansion", bool, w, False),
        volume_binding_mode=_choice(
            _get(d, "volume_binding_mode", str, w, "Immediate"),
            ("Immediate", "WaitForFirstConsumer"),
            f"{w}.volume_binding_mode",
        ),
        access_modes=_modes(_get(d, "access_modes", list, w, ["ReadWriteOnce"]), f"{w}.access_modes"),
        parameters=_str_map(d.get("parameters"), f"{w}.parameters"),
    )


def _snapshot_class(raw: Any, i: int) -> SnapshotClassSpec:
    w = f"snapshot_classes[{i}]"
    d = _mapping(raw, w, tuple(SnapshotClassSpec.__dataclass_fields__))
    return SnapshotClassSpec(
        name=_get(d, "name", str, w),
        driver=_get(d, "driver", str, w),
        deletion_policy=_choice(
            _get(d, "deletion_policy", str, w, "Delete"), ("Delete", "Retain"), f"{w}.deletion_policy"
        ),
        default=_get(d, "default", bool, w, False),
        parameters=_str_map(d.get("parameters"), f"{w}.parameters"),
    )


def _golden(raw: Any, i: int, classes: tuple[StorageClassSpec, ...]) -> GoldenImage:
    w = f"golden_images[{i}]"
    d = _mapping(raw, w, tuple(GoldenImage.__dataclass_fields__))
    sc = _get(d, "storage_class", str, w)
    if not any(c.name == sc for c in classes):
        raise _FieldError(f"{w}.storage_class", f"no storage class named {sc!r}")
    size = str(_get(d, "size", (int, str), w, "20Gi"))
    _quantity(size, f"{w}.size")
    return GoldenImage(
        namespace=_get(d, "namespace", str, w),
        pvc=_get(d, "pvc", str, w),
        datasource=_get(d, "datasource", str, w),
        storage_class=sc,
        size=size,
        access_modes=_modes(_get(d, "access_modes", list, w, ["ReadWriteOnce"]), f"{w}.access_modes"),
        rootfs=_choice(_get(d, "rootfs", str, w, "ubuntu-24.04"), tuple(ROOTFS), f"{w}.rootfs"),
    )


def _parse(data: Any, source: Path, instance: int) -> Topology:
    top = _mapping(data, "", ("nodes", "storage_classes", "snapshot_classes", "namespaces", "golden_images"))
    raw_nodes = _get(top, "nodes", list, "")
    if len(raw_nodes) > NODES_PER_INSTANCE:
        raise _FieldError(
            "nodes", f"{len(raw_nodes)} nodes: a devcluster has at most {NODES_PER_INSTANCE} (addresses.py)"
        )
    nodes = tuple(_node(raw, i, instance) for i, raw in enumerate(raw_nodes))
    names = [n.name for n in nodes]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise _FieldError(f"nodes[{i}].name", f"duplicate node name {name!r}")
    classes = tuple(
        _storage_class(raw, i) for i, raw in enumerate(_get(top, "storage_classes", list, "", []))
    )
    if sum(sc.default for sc in classes) > 1:
        raise _FieldError("storage_classes", "more than one default storage class")
    snaps = tuple(
        _snapshot_class(raw, i) for i, raw in enumerate(_get(top, "snapshot_classes", list, "", []))
    )
    golden = tuple(_golden(raw, i, classes) for i, raw in enumerate(_get(top, "golden_images", list, "", [])))
    namespaces = [str(n) for n in _get(top, "namespaces", list, "", [])]
    namespaces += [g.namespace for g in golden if g.namespace not in namespaces]
    return Topology(source, nodes, classes, snaps, tuple(namespaces), golden)


def load_topology(path: Path | str | None = None, *, instance: int = 0) -> Topology:
    """Read a topology file (the packaged default when ``path`` is None), its nodes placed in the
    address ranges of devcluster ``instance``.

    Raises ``ValueError("<file>: <field>: <problem>")`` for unreadable YAML or a bad field.
    """
    source = Path(path) if path is not None else DEFAULT_TOPOLOGY
    try:
        data = yaml.safe_load(source.read_text())
    except OSError as exc:
        raise ValueError(f"{source}: cannot read the topology file: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"{source}: not valid YAML: {exc}") from exc
    try:
        return _parse(data, source, check_instance(instance))
    except _FieldError as exc:
        raise ValueError(f"{source}: {exc}") from None


# ------------------------------------------------------------ API objects
def storage_class_object(sc: StorageClassSpec) -> Obj:
    ann = {"storageclass.kubernetes.io/is-default-class": "true"} if sc.default else {}
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": sc.name, **({"annotations": ann} if ann else {})},
        "provisioner": sc.provisioner,
        "parameters": dict(sc.parameters),
        "reclaimPolicy": sc.reclaim_policy,
        "allowVolumeExpansion": sc.allow_volume_expansion,
        "volumeBindingMode": sc.volume_binding_mode,
    }


def snapshot_class_object(vsc: SnapshotClassSpec) -> Obj:
    ann = {"snapshot.storage.kubernetes.io/is-default-class": "true"} if vsc.default else {}
    return {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotClass",
        "metadata": {"name": vsc.name, **({"annotations": ann} if ann else {})},
        "driver": vsc.driver,
        "deletionPolicy": vsc.deletion_policy,
        "parameters": dict(vsc.parameters),
    }


def golden_pvc_object(g: GoldenImage) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": g.pvc, "namespace": g.namespace, "annotations": {ROOTFS_ANNOTATION: g.rootfs}},
        "spec": {
            "accessModes": list(g.access_modes),
            "resources": {"requests": {"storage": g.size}},
            "storageClassName": g.storage_class,
            "volumeMode": "Filesystem",
        },
    }


def datasource_object(g: GoldenImage) -> Obj:
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataSource",
        "metadata": {"name": g.datasource, "namespace": g.namespace},
        "spec": {"source": {"pvc": {"namespace": g.namespace, "name": g.pvc}}},
    }


# ----------------------------------------------------------------- applying
async def apply_topology(ctx: SimContext) -> Topology:
    """Create what is missing and bring nodes in line with the topology (``ctx.topology``, else the default).

    Existing objects keep what others added (extra labels and taints, e.g. a cordon or an
    out-of-service taint; node conditions, which the kubelet owns once it runs).
    """
    topo = ctx.topology if isinstance(ctx.topology, Topology) else load_topology()
    ctx.topology = topo
    verbs = ctx.verbs
    for ns in topo.namespaces:
        _create_missing(verbs, "namespaces", "", {"metadata": {"name": ns}})
    for sc in topo.storage_classes:
        _create_missing(verbs, "storageclasses", "", storage_class_object(sc))
    for vsc in topo.snapshot_classes:
        _create_missing(verbs, "volumesnapshotclasses", "", snapshot_class_object(vsc))
    for node in topo.nodes:
        _apply_node(verbs, node)
    for g in topo.golden_images:
        _create_missing(verbs, "persistentvolumeclaims", g.namespace, golden_pvc_object(g))
        _apply_datasource(verbs, g)
    return topo


def _create_missing(verbs: Verbs, plural: str, namespace: str, body: Obj) -> Obj:
    rt = _RT[plural]
    assert rt is not None
    existing = verbs.store.get(rt, namespace, body["metadata"]["name"])
    return existing if existing is not None else verbs.create(rt, namespace, body)[0]


def _apply_node(verbs: Verbs, node: NodeSpec) -> None:
    rt = _RT["nodes"]
    assert rt is not None
    want = node_object(node)
    current = verbs.store.get(rt, "", node.name)
    if current is None:
        current = verbs.create(rt, "", want)[0]
    else:
        merged = clone(current)
        meta, spec = merged["metadata"], merged.setdefault("spec", {})
        meta["labels"] = {**(meta.get("labels") or {}), **want["metadata"]["labels"]}
        meta["annotations"] = {**(meta.get("annotations") or {}), **want["metadata"]["annotations"]}
        taints = list(spec.get("taints") or [])
        for taint in want["spec"].get("taints", []):
            if not any(t.get("key") == taint["key"] and t.get("effect") == taint["effect"] for t in taints):
                taints.append(taint)
        spec.update({k: v for k, v in want["spec"].items() if k != "taints"})
        if taints:
            spec["taints"] = taints
        if merged != current:
            current = verbs.update(rt, "", node.name, merged)[0]
    conditions = (current.get("status") or {}).get("conditions") or ready_conditions(now_rfc3339())
    status = node_status(node, conditions)
    if {k: (current.get("status") or {}).get(k) for k in status} != status:
        verbs.update(rt, "", node.name, {**current, "status": status}, subresource="status")


def _apply_datasource(verbs: Verbs, g: GoldenImage) -> None:
    rt = _RT["datasources"]
    assert rt is not None
    ds = _create_missing(verbs, "datasources", g.namespace, datasource_object(g))
    if (ds.get("status") or {}).get("conditions"):
        return  # CDI's DataSource controller owns the status from here on
    now = now_rfc3339()
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "message": "DataSource is ready to be consumed",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    status = {"conditions": [ready], "source": {"pvc": {"namespace": g.namespace, "name": g.pvc}}}
    verbs.update(rt, g.namespace, g.datasource, {**ds, "status": status}, subresource="status")
