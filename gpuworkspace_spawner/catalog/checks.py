"""Rules the schema cannot express: one profile's fields against each other and against the catalog.

Each check takes a schema-valid ``spec`` and yields ``(field, message)``; ``profile_problems`` runs
them all so that one pass reports everything.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .building import default_ide, quantity_text
from .checkpoints import check_checkpoints
from .editors import check_editors, image_reference, offered_editors
from .model import HomeStorage, VmSpec
from .units import (
    GPU_RESOURCE,
    IMAGE_DIGEST_RE,
    IMAGE_REFERENCE_RE,
    SHARED_GPU_RESOURCE,
    is_extended_resource,
    is_gpu_resource,
    parse_duration,
    parse_quantity,
)

Finding = tuple[str, str]
MIN_HOME_BYTES = Decimal(1024**3)
RESERVED_MOUNTS = ("/", "/dev", "/proc", "/sys", "/etc", "/usr", "/bin", "/sbin", "/lib", "/var/run/secrets")
SHM_PATH = "/dev/shm"
_MODE_RESOURCE = {
    "exclusive": f"{GPU_RESOURCE} (a whole card)",
    "mig": "an nvidia.com/mig-<profile> resource (a MIG slice, like nvidia.com/mig-1g.10gb)",
    "time-sliced": f"{SHARED_GPU_RESOURCE} (one shared access to a time-sliced card)",
}


@dataclass(frozen=True)
class CatalogSettings:
    """What the WorkspaceCatalog document decides for every profile."""

    allow_image_tags: bool = False
    node_pools: frozenset[str] = frozenset()
    network_profiles: frozenset[str] = frozenset()


def _is_vm(spec: Mapping[str, Any]) -> bool:
    return bool(spec.get("runtime") == "vm")


def check_image(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    if _is_vm(spec):
        return  # a VM boots from vm.dataSource; check_vm_fields refuses an image
    if "image" not in spec:
        yield (
            "spec.image",
            "required field is missing: a container profile needs an image (repo@sha256:<digest>)",
        )
        return
    image = image_reference(spec["image"])
    field = "spec.image.reference" if isinstance(spec["image"], Mapping) else "spec.image"
    if not isinstance(image, str):
        return  # the schema reports it
    if not IMAGE_REFERENCE_RE.match(image):
        yield field, f"{image!r} is not a valid image reference (registry/repository@sha256:<64 hex>)"
    elif not settings.allow_image_tags and not IMAGE_DIGEST_RE.match(image):
        yield (
            field,
            f"{image!r} must be pinned by digest (repo@sha256:<64 hex digits>): a tag can move, so the "
            "catalog version would not say what runs; to allow tags, set allowImageTags: true in the "
            "WorkspaceCatalog document",
        )


def check_runtime(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    runtime = spec.get("runtime", "container")
    if runtime == "vm" and "vm" not in spec:
        yield "spec.vm", "runtime: vm needs a vm section (vm.dataSource names the root disk image)"
    if runtime != "vm" and "vm" in spec:
        yield "spec.vm", "a vm section is only allowed with runtime: vm"


def check_node_pool(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    pool = spec.get("placement", {}).get("nodePool")
    if pool is not None and pool not in settings.node_pools:
        known = (
            ", ".join(sorted(settings.node_pools)) or "none (add nodePools to the WorkspaceCatalog document)"
        )
        yield "spec.placement.nodePool", f"{pool!r} is not a node pool of this catalog; known pools: {known}"


def check_network_profile(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    name = spec.get("security", {}).get("networkProfile")
    if name is not None and name not in settings.network_profiles:
        known = ", ".join(sorted(settings.network_profiles)) or "none"
        yield (
            "spec.security.networkProfile",
            f"{name!r} is not a network profile of this catalog (network.profiles in the WorkspaceCatalog "
            f"document); known profiles: {known}",
        )


def _quantities(resources: Mapping[str, Any]) -> Iterator[tuple[str, str, str, Decimal | None]]:
    for section in ("requests", "limits"):
        for name, value in resources.get(section, {}).items():
            text = quantity_text(value)
            try:
                amount: Decimal | None = parse_quantity(text)
            except ValueError:
                amount = None
            yield section, name, text, amount


def check_quantities(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    for section, name, text, amount in _quantities(spec.get("resources", {})):
        field = f"spec.resources.{section}.{name}"
        if amount is None:
            yield field, f"{text!r} is not a Kubernetes quantity (like 500m, 4, 64Gi)"
        elif is_gpu_resource(name) and (amount != amount.to_integral_value() or amount < 1):
            yield field, f"{text!r}: GPU resources are whole numbers of at least 1"
        elif name == SHARED_GPU_RESOURCE and amount != 1:
            yield field, f"{text!r}: a time-sliced GPU is one shared access; more than 1 buys no more compute"


def check_requests_within_limits(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    resources = spec.get("resources", {})
    requests, limits = resources.get("requests", {}), resources.get("limits", {})
    for name in sorted(set(requests) | set(limits)):
        in_requests, in_limits = name in requests, name in limits
        try:
            request = parse_quantity(quantity_text(requests[name])) if in_requests else None
            limit = parse_quantity(quantity_text(limits[name])) if in_limits else None
        except ValueError:
            continue  # reported by check_quantities
        if is_extended_resource(name) and in_requests and not in_limits:
            yield (
                f"spec.resources.limits.{name}",
                f"missing: Kubernetes needs a limit for {name} (equal to the request)",
            )
        elif is_extended_resource(name) and request is not None and limit is not None and request != limit:
            yield (
                f"spec.resources.requests.{name}",
                f"{name} request ({requests[name]}) must equal its limit ({limits[name]}); extended resources cannot be overcommitted",
            )
        elif request is not None and limit is not None and request > limit:
            yield (
                f"spec.resources.requests.{name}",
                f"{name} request ({requests[name]}) is above its limit ({limits[name]}); Kubernetes rejects that",
            )


def check_gpu_mode(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    if _is_vm(spec):
        return  # check_vm_gpus: a VM's GPUs are passthrough devices, not resources
    resources = spec.get("resources", {})
    names = sorted({n for s in ("requests", "limits") for n in resources.get(s, {}) if is_gpu_resource(n)})
    mode = spec.get("placement", {}).get("gpuMode", "none")
    if len(names) > 1:
        yield "spec.resources", f"a profile asks for one kind of GPU, not several: {', '.join(names)}"
    if mode == "none":
        if names:
            yield (
                "spec.placement.gpuMode",
                f"gpuMode is none (the default) but the profile asks for {names[0]}; set gpuMode",
            )
        return
    if not any(_serves(mode, n) for n in names):
        yield "spec.placement.gpuMode", f"gpuMode {mode} needs {_MODE_RESOURCE[mode]} in resources.limits"


def _serves(mode: str, resource: str) -> bool:
    if mode == "mig":
        return resource.startswith("nvidia.com/mig-")
    return resource == {"exclusive": GPU_RESOURCE, "time-sliced": SHARED_GPU_RESOURCE}.get(mode)


def _mount_paths(storage: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    defaults = {"home": "/home/jovyan", "scratch": "/scratch", "datasets": "/data", "models": "/models"}
    for section, default in defaults.items():
        if section in storage or section in ("home", "scratch"):
            yield f"spec.storage.{section}.mountPath", storage.get(section, {}).get("mountPath", default)
    for index, team in enumerate(storage.get("teamDirectories", [])):
        yield f"spec.storage.teamDirectories[{index}].mountPath", team["mountPath"]


def _mount_path_problem(path: str) -> str | None:
    if ".." in path.split("/"):
        return f"{path!r} must not contain '..'"
    normal = posixpath.normpath(path)
    if normal in RESERVED_MOUNTS or normal == SHM_PATH:
        return f"{path!r} is reserved (system directory or /dev/shm)"
    if normal.startswith(("/proc/", "/sys/", "/dev/")):
        return f"{path!r} is inside a system directory"
    return None


def check_mounts(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    storage = spec.get("storage", {})
    seen: dict[str, str] = {}
    for field, path in _mount_paths(storage):
        problem = _mount_path_problem(path)
        if problem is not None:
            yield field, problem
            continue
        normal = posixpath.normpath(path)
        if normal in seen:
            yield field, f"{path!r} is already used by {seen[normal]}"
        seen.setdefault(normal, field)
    names: set[str] = set()
    for index, team in enumerate(storage.get("teamDirectories", [])):
        if team["name"] in names:
            yield f"spec.storage.teamDirectories[{index}].name", f"{team['name']!r} is used twice"
        names.add(team["name"])
        if ".." in team.get("subPath", "").split("/") or team.get("subPath", "").startswith("/"):
            yield (
                f"spec.storage.teamDirectories[{index}].subPath",
                "must be relative and must not contain '..'",
            )
    for section in ("datasets", "models"):
        sub_path = storage.get(section, {}).get("subPath", "")
        if ".." in sub_path.split("/") or sub_path.startswith("/"):
            yield f"spec.storage.{section}.subPath", "must be relative and must not contain '..'"


_AT_LEAST_1GI = {"spec.storage.home.size": "a home volume", "spec.vm.rootDisk.size": "a root disk"}


def check_sizes(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    storage = spec.get("storage", {})
    home = storage.get("home", {})
    disk = spec.get("vm", {}).get("rootDisk") or {}
    sizes = {
        "spec.storage.home.size": home.get("size"),
        "spec.storage.home.maxSize": home.get("maxSize"),
        "spec.storage.scratch.sizeLimit": storage.get("scratch", {}).get("sizeLimit"),
        "spec.storage.shm.sizeLimit": storage.get("shm", {}).get("sizeLimit"),
        "spec.vm.rootDisk.size": disk.get("size"),
        "spec.vm.rootDisk.maxSize": disk.get("maxSize"),
        "spec.vm.memory.guest": (spec.get("vm", {}).get("memory") or {}).get("guest"),
    }
    for field, value in sizes.items():
        if value is None:
            continue
        try:
            amount = parse_quantity(quantity_text(value))
        except ValueError:
            yield field, f"{quantity_text(value)!r} is not a Kubernetes quantity (like 10Gi)"
            continue
        if field in _AT_LEAST_1GI and amount < MIN_HOME_BYTES:
            yield field, f"{value!r} is too small for {_AT_LEAST_1GI[field]}; use at least 1Gi"
        elif amount <= 0:
            yield field, "must be more than 0"
    yield from _max_size("spec.storage.home", home, HomeStorage().size)
    yield from _max_size("spec.vm.rootDisk", disk, VmSpec("", "", 1, "1Gi").root_disk_size)


def _max_size(where: str, disk: Mapping[str, Any], default_size: str) -> Iterator[Finding]:
    """``maxSize`` (the resize limit) must not be below ``size``."""
    if "maxSize" not in disk:
        return
    size, limit = quantity_text(disk.get("size", default_size)), quantity_text(disk["maxSize"])
    try:
        below = parse_quantity(limit) < parse_quantity(size)
    except ValueError:
        return  # reported above
    if below:
        yield f"{where}.maxSize", f"{limit!r} is below the size ({size!r}); the disk could never be resized"


def _seconds(text: str) -> int | None:
    try:
        return parse_duration(text)
    except ValueError:
        return None


def check_durations(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    session = spec.get("session", {})
    named = [
        (f"spec.session.{key}", session[key]) for key in ("idleTimeout", "maxDuration") if key in session
    ]
    named += [(f"spec.session.warnings[{i}]", text) for i, text in enumerate(session.get("warnings", []))]
    snapshots = spec.get("storage", {}).get("home", {}).get("snapshots", {})
    if "every" in snapshots:
        named.append(("spec.storage.home.snapshots.every", snapshots["every"]))
    for field, text in named:
        if _seconds(text) is None:
            yield field, f"{text!r} is not a duration like 90m, 12h, 1h30m, 45s or 2d (and not zero)"


MIN_SNAPSHOT_INTERVAL_S = 10


def check_home_policies(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    """Snapshot schedule and retention of the home disk: values that could only be mistakes."""
    home = spec.get("storage", {}).get("home", {})
    every = home.get("snapshots", {}).get("every")
    seconds = _seconds(every) if isinstance(every, str) else None
    if seconds is not None and seconds < MIN_SNAPSHOT_INTERVAL_S:
        yield (
            "spec.storage.home.snapshots.every",
            f"{every!r} is shorter than {MIN_SNAPSHOT_INTERVAL_S}s; a snapshot takes longer than that",
        )
    retention = home.get("retention", {})
    if retention.get("keepOnDelete") is False and retention.get("days"):
        yield (
            "spec.storage.home.retention.days",
            f"{retention['days']!r} days has no effect: keepOnDelete is false, so the disk is reclaimed "
            "when the server is deleted; remove days or set keepOnDelete: true",
        )


def check_session(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    session = spec.get("session", {})
    if any(
        _seconds(t) is None
        for t in [
            session.get("idleTimeout", "1s"),
            session.get("maxDuration", "1s"),
            *session.get("warnings", []),
        ]
    ):
        return  # check_durations reports it
    idle = parse_duration(session["idleTimeout"]) if "idleTimeout" in session else None
    maximum = parse_duration(session["maxDuration"]) if "maxDuration" in session else None
    if idle is not None and maximum is not None and idle > maximum:
        yield "spec.session.idleTimeout", "is longer than maxDuration, so it would never apply"
    warnings = [parse_duration(w) for w in session.get("warnings", [])]
    if warnings and idle is None and maximum is None:
        yield "spec.session.warnings", "warnings need an idleTimeout or a maxDuration to warn about"
    if len(set(warnings)) != len(warnings):
        yield "spec.session.warnings", "a warning time is listed twice"
    bound, name = (idle, "idleTimeout") if idle is not None else (maximum, "maxDuration")
    for index, warning in enumerate(warnings):
        if bound is not None and warning >= bound:
            yield (
                f"spec.session.warnings[{index}]",
                f"{session['warnings'][index]!r} must be shorter than {name}",
            )


def check_ide(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    ide = spec.get("ide")
    if isinstance(ide, dict):
        choices = offered_editors(spec)[0]
        default = ide.get("default", default_ide(choices) if choices else None)
        if default not in choices:
            yield "spec.ide.default", f"{default!r} is not one of the choices {list(choices)}"


_NOT_FOR_VM: tuple[tuple[tuple[str, ...], str], ...] = (
    (("image",), "a VM boots from its root disk, cloned from vm.dataSource; remove image"),
    (
        ("storage", "home"),
        "a VM's root disk is its home (/etc, /opt, /usr/local and /home are all kept on it); "
        "size it with vm.rootDisk.size",
    ),
    (("storage", "scratch"), "a VM has no node-local scratch volume; everything is on its root disk"),
    (("storage", "shm"), "a VM's /dev/shm is part of its guest memory (vm.memory.guest)"),
    (("storage", "datasets"), "shared mounts are not available to VMs yet"),
    (("storage", "models"), "shared mounts are not available to VMs yet"),
    (("storage", "teamDirectories"), "shared mounts are not available to VMs yet"),
    (("placement", "runtimeClassName"), "a VM runs in KubeVirt's virt-launcher pod, not a RuntimeClass"),
    (("security", "runAsUser"), "the user is root inside their VM; the uid applies to containers"),
    (("security", "runAsGroup"), "the user is root inside their VM; the gid applies to containers"),
    (("security", "fsGroup"), "a VM's root disk is not mounted with a group; it applies to containers"),
    (("security", "serviceAccountToken"), "a VM never gets a Kubernetes service account token"),
)


def _present(spec: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = spec
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
    return True


def check_vm_fields(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    """Container-only fields are refused for a VM rather than silently ignored."""
    if not _is_vm(spec):
        return
    for path, why in _NOT_FOR_VM:
        if _present(spec, path):
            yield "spec." + ".".join(path), f"not used with runtime: vm: {why}"


def check_vm_gpus(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    """A VM gets whole GPUs by PCI passthrough (gpuMode exclusive with vm.gpus), or none."""
    if not _is_vm(spec):
        return
    mode = spec.get("placement", {}).get("gpuMode", "none")
    gpus = (spec.get("vm") or {}).get("gpus", [])
    if mode in ("mig", "time-sliced"):
        yield (
            "spec.placement.gpuMode",
            f"{mode} is for containers; a VM gets whole GPUs by passthrough (gpuMode: exclusive with "
            "vm.gpus) or none",
        )
    elif mode == "exclusive" and not gpus:
        yield "spec.vm.gpus", "gpuMode exclusive needs at least one passthrough GPU in vm.gpus"
    elif mode == "none" and gpus:
        yield (
            "spec.placement.gpuMode",
            "the VM has passthrough GPUs (vm.gpus) but gpuMode is none; set exclusive",
        )
    names: set[str] = set()
    for index, gpu in enumerate(gpus):
        if gpu["name"] in names:
            yield f"spec.vm.gpus[{index}].name", f"{gpu['name']!r} is used twice"
        names.add(gpu["name"])


def check_vm_resources(spec: Mapping[str, Any], settings: CatalogSettings) -> Iterator[Finding]:
    """A VM's resources are its virt-launcher's cpu and memory, set against the guest's shape."""
    if not _is_vm(spec):
        return
    resources = spec.get("resources", {})
    for section in ("requests", "limits"):
        for name in resources.get(section, {}):
            if name not in ("cpu", "memory"):
                yield (
                    f"spec.resources.{section}.{name}",
                    "a VM's resources are cpu and memory only; its GPUs are passthrough devices in vm.gpus",
                )
    vm = spec.get("vm")
    if not isinstance(vm, Mapping) or "cpu" not in vm or "memory" not in vm:
        return
    cpu = vm["cpu"]
    vcpus = cpu["cores"] * cpu.get("sockets", 1) * cpu.get("threads", 1)
    yield from _vm_amount(
        resources, ("requests", "cpu"), Decimal(vcpus), f"the VM's {vcpus} vCPUs", above=True
    )
    guest = quantity_text(vm["memory"]["guest"])
    try:
        guest_bytes = parse_quantity(guest)
    except ValueError:
        return  # check_sizes reports it
    yield from _vm_amount(
        resources, ("limits", "memory"), guest_bytes, f"the guest memory ({guest})", above=False
    )


def _vm_amount(
    resources: Mapping[str, Any], where: tuple[str, str], bound: Decimal, what: str, *, above: bool
) -> Iterator[Finding]:
    section, name = where
    if name not in resources.get(section, {}):
        return
    text = quantity_text(resources[section][name])
    try:
        amount = parse_quantity(text)
    except ValueError:
        return  # check_quantities reports it
    if above and amount > bound:
        yield (
            f"spec.resources.{section}.{name}",
            f"{text!r} is more than {what}; the guest could never use it",
        )
    elif not above and amount < bound:
        yield (
            f"spec.resources.{section}.{name}",
            f"{text!r} is below {what}; KubeVirt refuses a VM whose memory limit is below its guest memory",
        )


CHECKS: tuple[Callable[[Mapping[str, Any], CatalogSettings], Iterator[Finding]], ...] = (
    check_image,
    check_runtime,
    check_node_pool,
    check_network_profile,
    check_quantities,
    check_requests_within_limits,
    check_gpu_mode,
    check_mounts,
    check_sizes,
    check_durations,
    check_home_policies,
    check_session,
    check_ide,
    check_editors,
    check_vm_fields,
    check_vm_gpus,
    check_vm_resources,
    check_checkpoints,
)


def _reported(field: str, already: frozenset[str]) -> bool:
    return any(field == known or field.startswith((known + ".", known + "[")) for known in already)


def profile_findings(
    spec: Mapping[str, Any], settings: CatalogSettings, already: frozenset[str] = frozenset()
) -> list[Finding]:
    """Every cross-field problem of one profile spec.

    The checks are written for schema-valid specs. When the schema already found problems (their
    fields are ``already``), the checks still run so that one pass reports everything, but a check
    that trips over a malformed value is skipped, and findings about already reported fields dropped.
    """
    findings: list[Finding] = []
    for check in CHECKS:
        try:
            found = list(check(spec, settings))
        except (KeyError, TypeError, AttributeError, ValueError, IndexError):
            if not already:
                raise
            continue  # the schema problems explain this part of the spec
        findings.extend(f for f in found if not _reported(f[0], already))
    return findings
