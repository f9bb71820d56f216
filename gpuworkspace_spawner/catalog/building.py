"""Schema-valid YAML documents → the frozen model objects in ``model.py``.

Only called after ``validation`` and ``checks`` found nothing wrong, so shapes and values are trusted;
the functions here only rename (camelCase → snake_case), apply defaults and convert durations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from .editors import declared_editors, image_reference
from .model import (
    Access,
    Checkpoints,
    GpuMode,
    HomeAccessMode,
    HomeRetention,
    HomeStorage,
    Ide,
    IdeChoice,
    NodePool,
    Placement,
    Resources,
    Runtime,
    ScratchStorage,
    Security,
    Session,
    SharedMount,
    SnapshotSchedule,
    Storage,
    VmGpu,
    VmSpec,
    WorkspaceProfile,
)
from .units import parse_duration

DEFAULT_DATASETS_PATH = "/data"
DEFAULT_MODELS_PATH = "/models"


def quantity_text(value: object) -> str:
    """YAML may give ``cpu: 8`` (an int) or ``cpu: "8"``; the model keeps Kubernetes' string form."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def build_node_pools(spec: Mapping[str, Any]) -> dict[str, NodePool]:
    pools: dict[str, NodePool] = {}
    for name, pool in spec.get("nodePools", {}).items():
        pools[name] = NodePool(
            name=name,
            node_selector=dict(pool.get("nodeSelector", {})),
            tolerations=tuple(dict(t) for t in pool.get("tolerations", [])),
        )
    return pools


def build_ide(value: object, declared: tuple[Ide, ...] = ("code-server", "jupyterlab")) -> IdeChoice:
    """The ``ide`` field; without choices the profile offers what its image declares (``declared``)."""
    if isinstance(value, str):
        return IdeChoice(default=cast(Ide, value), choices=(cast(Ide, value),))
    spec = value if isinstance(value, dict) else {}
    choices = tuple(cast(list[Ide], spec["choices"])) if "choices" in spec else declared
    return IdeChoice(default=cast(Ide, spec.get("default", default_ide(choices))), choices=choices)


def default_ide(choices: tuple[str, ...]) -> str:
    """Without an explicit default: code-server when it is a choice, else the first choice."""
    return "code-server" if "code-server" in choices else choices[0]


def _resources(spec: Mapping[str, Any]) -> Resources:
    return Resources(
        requests={k: quantity_text(v) for k, v in spec.get("requests", {}).items()},
        limits={k: quantity_text(v) for k, v in spec.get("limits", {}).items()},
    )


def _shared(name: str, spec: Mapping[str, Any], default_path: str) -> SharedMount:
    return SharedMount(
        name=name,
        claim_name=spec["claimName"],
        mount_path=spec.get("mountPath", default_path),
        read_only=spec.get("readOnly", True),
        sub_path=spec.get("subPath"),
    )


def _storage(spec: Mapping[str, Any]) -> Storage:
    home = spec.get("home", {})
    scratch = spec.get("scratch", {})
    defaults = HomeStorage()
    datasets = spec.get("datasets")
    models = spec.get("models")
    return Storage(
        home=HomeStorage(
            size=quantity_text(home.get("size", defaults.size)),
            storage_class=home.get("class"),
            mount_path=home.get("mountPath", defaults.mount_path),
            access_mode=cast(HomeAccessMode, home.get("accessMode", defaults.access_mode)),
            max_size=quantity_text(home["maxSize"]) if "maxSize" in home else None,
            snapshots=_snapshots(home.get("snapshots")),
            retention=_retention(home.get("retention")),
        ),
        scratch=ScratchStorage(
            size_limit=quantity_text(scratch["sizeLimit"]) if "sizeLimit" in scratch else None,
            mount_path=scratch.get("mountPath", ScratchStorage().mount_path),
        ),
        shm_size_limit=quantity_text(spec["shm"]["sizeLimit"])
        if "sizeLimit" in spec.get("shm", {})
        else None,
        datasets=_shared("datasets", datasets, DEFAULT_DATASETS_PATH) if datasets is not None else None,
        models=_shared("models", models, DEFAULT_MODELS_PATH) if models is not None else None,
        team_directories=tuple(
            _shared(team["name"], team, team["mountPath"]) for team in spec.get("teamDirectories", [])
        ),
        checkpoints=_checkpoints(spec["checkpoints"]) if "checkpoints" in spec else None,
    )


def _checkpoints(spec: Mapping[str, Any]) -> Checkpoints:
    store = spec.get("objectStore") or {}
    return Checkpoints(
        team_directory=spec.get("teamDirectory"),
        sub_path=spec.get("subPath"),
        object_store_url=store.get("url"),
        object_store_endpoint=store.get("endpoint"),
    )


def _snapshots(spec: Mapping[str, Any] | None) -> SnapshotSchedule | None:
    if spec is None:
        return None
    return SnapshotSchedule(every_s=parse_duration(spec["every"]), keep=int(spec["keep"]))


def _retention(spec: Mapping[str, Any] | None) -> HomeRetention | None:
    if spec is None:
        return None
    days = spec.get("days")
    return HomeRetention(
        days=float(days) if days is not None else None, keep_on_delete=spec.get("keepOnDelete", True)
    )


def _session(spec: Mapping[str, Any]) -> Session:
    idle = spec.get("idleTimeout")
    maximum = spec.get("maxDuration")
    return Session(
        idle_timeout_s=parse_duration(idle) if idle is not None else None,
        max_duration_s=parse_duration(maximum) if maximum is not None else None,
        warnings_s=tuple(sorted((parse_duration(w) for w in spec.get("warnings", [])), reverse=True)),
    )


def _security(spec: Mapping[str, Any]) -> Security:
    defaults = Security()
    return Security(
        service_account_token=spec.get("serviceAccountToken", defaults.service_account_token),
        network_profile=spec.get("networkProfile"),
        run_as_user=spec.get("runAsUser", defaults.run_as_user),
        run_as_group=spec.get("runAsGroup", defaults.run_as_group),
        fs_group=spec.get("fsGroup", defaults.fs_group),
    )


def build_vm(spec: Mapping[str, Any]) -> VmSpec:
    """The ``vm`` section (schema-valid) as a VmSpec."""
    disk = spec.get("rootDisk", {})
    cpu = spec["cpu"]
    defaults = VmSpec(data_source_name="", data_source_namespace="", cores=1, guest_memory="1Gi")
    return VmSpec(
        data_source_name=spec["dataSource"]["name"],
        data_source_namespace=spec["dataSource"]["namespace"],
        cores=cpu["cores"],
        sockets=cpu.get("sockets", defaults.sockets),
        threads=cpu.get("threads", defaults.threads),
        guest_memory=quantity_text(spec["memory"]["guest"]),
        root_disk_size=quantity_text(disk.get("size", defaults.root_disk_size)),
        root_disk_class=disk.get("class"),
        root_disk_max_size=quantity_text(disk["maxSize"]) if "maxSize" in disk else None,
        gpus=tuple(VmGpu(name=g["name"], device_name=g["deviceName"]) for g in spec.get("gpus", [])),
    )


def build_profile(body: Mapping[str, Any], pools: Mapping[str, NodePool], source: str) -> WorkspaceProfile:
    spec = body["spec"]
    placement = spec.get("placement", {})
    access = spec.get("access", {})
    pool_name = placement.get("nodePool")
    return WorkspaceProfile(
        slug=body["metadata"]["name"],
        display_name=spec["displayName"],
        image=cast("str | None", image_reference(spec.get("image"))),
        description=spec.get("description", ""),
        runtime=cast(Runtime, spec.get("runtime", "container")),
        resources=_resources(spec.get("resources", {})),
        placement=Placement(
            gpu_mode=cast(GpuMode, placement.get("gpuMode", "none")),
            node_pool=pools[pool_name] if pool_name is not None else None,
            runtime_class_name=placement.get("runtimeClassName"),
        ),
        storage=_storage(spec.get("storage", {})),
        session=_session(spec.get("session", {})),
        security=_security(spec.get("security", {})),
        ide=build_ide(spec.get("ide", {}), declared_editors(spec)),
        editors=declared_editors(spec),
        access=Access(groups=frozenset(access.get("groups", [])), users=frozenset(access.get("users", []))),
        cost_center=spec.get("costCenter"),
        team=spec.get("team"),
        default=spec.get("default", False),
        vm=build_vm(spec["vm"]) if "vm" in spec else None,
        source=source,
    )
