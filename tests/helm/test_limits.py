"""Limits in helm-values/ and hub_config/: the hub's own (named servers, disks per user and in total)
are set, and extra-manifests/15-quota.yaml's ResourceQuota and LimitRange admit every shipped catalog
profile and refuse what is past them.

The devcluster enforces neither kind, so this applies Kubernetes' own rules here: the LimitRanger's
defaulting (``defaultRequest`` for absent requests, ``default`` for absent limits; requests default to
limits first) and its ``min``/``max`` checks, and the ResourceQuota's sums (``requests.<resource>``
over pods, ``requests.storage`` and ``<class>.storageclass.storage.k8s.io/requests.storage`` over
claims, object counts). The workloads are the spawner's own builders' output for every profile of the
catalog ConfigMaps (base, GPU sharing, VM).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_spawner.catalog import load_catalog
from gpuworkspace_spawner.catalog.model import WorkspaceProfile
from gpuworkspace_spawner.catalog.units import is_extended_resource, parse_quantity
from gpuworkspace_spawner.lifecycle.diskops import DEFAULT_MAX_FACTOR
from gpuworkspace_spawner.manifests.names import WorkspaceContext, WorkspaceIdentity
from gpuworkspace_spawner.manifests.pod import build_workspace_pod
from gpuworkspace_spawner.manifests.vm import build_vm, vm_names
from tests.helm import (
    BASE,
    CATALOG_LABEL,
    WORKSPACE_NAMESPACE,
    combinations,
    load_yaml,
    manifests,
    user_values,
)
from tests.services.culler.test_web import load_hub_config
from tests.unit.manifests.scenarios import load_yaml as load_golden

# virt-launcher's compute container asks for the guest's memory plus KubeVirt's overhead (the
# virt-launcher and QEMU processes, page tables): a generous allowance for it.
VM_MEMORY_OVERHEAD = "1Gi"
Resources = dict[str, Decimal]


def _one(kind: str) -> dict[str, Any]:
    found = [
        d
        for _, d in manifests()
        if d["kind"] == kind and d["metadata"].get("namespace") == WORKSPACE_NAMESPACE
    ]
    assert len(found) == 1, f"one {kind} in {WORKSPACE_NAMESPACE}, found {len(found)}"
    return found[0]


QUOTA = _one("ResourceQuota")
LIMITS = _one("LimitRange")


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> list[WorkspaceProfile]:
    """Every profile of the catalog ConfigMaps, loaded as the hub loads the projected directory."""
    directory = tmp_path_factory.mktemp("catalog")
    for _, doc in manifests():
        if doc["kind"] == "ConfigMap" and CATALOG_LABEL in (doc["metadata"].get("labels") or {}):
            for key, text in doc["data"].items():
                (directory / key).write_text(text)
    return list(load_catalog(Path(directory)).profiles)


# ------------------------------------------------------------------------------ workloads
def _context(profile: WorkspaceProfile) -> WorkspaceContext:
    identity = WorkspaceIdentity(user="alice", server="", namespace=WORKSPACE_NAMESPACE)
    home = vm_names(identity).disk if profile.runtime == "vm" else "home-alice"
    ide = "jupyterlab"
    return WorkspaceContext(identity=identity, profile=profile, catalog_version="1", ide=ide, home_claim=home)


def containers(profile: WorkspaceProfile) -> list[dict[str, Any]]:
    """The containers the profile's workspace pod runs, as built (a VM: its virt-launcher compute)."""
    ws = _context(profile)
    if profile.runtime == "vm":
        domain = build_vm(ws, vm_names(ws.identity))["spec"]["template"]["spec"]["domain"]
        resources = copy.deepcopy(domain.get("resources") or {})
        requests = resources.setdefault("requests", {})
        guest = profile.vm.guest_memory if profile.vm else "0"
        memory = parse_quantity(requests.get("memory", guest)) + parse_quantity(VM_MEMORY_OVERHEAD)
        requests["memory"] = str(memory)
        return [{"name": "compute", "resources": resources}]
    pod = build_workspace_pod(load_golden("kubespawner-pod.yaml"), ws)
    return [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]


def disk(profile: WorkspaceProfile) -> tuple[str, str | None, str]:
    """(size, storage class, largest size the disk service may grow it to) of the profile's disk."""
    if profile.runtime == "vm" and profile.vm is not None:
        size, cls, top = profile.vm.root_disk_size, profile.vm.root_disk_class, profile.vm.root_disk_max_size
    else:
        home = profile.storage.home
        size, cls, top = home.size, home.storage_class, home.max_size
    return size, cls, top or str(parse_quantity(size) * DEFAULT_MAX_FACTOR)


# ------------------------------------------------------------------------------ LimitRanger
def _quantities(values: Mapping[str, Any] | None) -> Resources:
    return {k: parse_quantity(str(v)) for k, v in (values or {}).items()}


def limit_range_admit(
    container: Mapping[str, Any], limit_range: Mapping[str, Any]
) -> tuple[dict[str, Resources], list[str]]:
    """The container's resources after the LimitRanger's defaulting, and its refusals (empty: admitted)."""
    item = next((i for i in limit_range["spec"]["limits"] if i["type"] == "Container"), {})
    resources = container.get("resources") or {}
    limits = _quantities(resources.get("limits"))
    requests = {**limits, **_quantities(resources.get("requests"))}  # API defaulting: requests from limits
    for name, value in _quantities(item.get("default")).items():
        limits.setdefault(name, value)
    for name, value in _quantities(item.get("defaultRequest")).items():
        requests.setdefault(name, value)
    problems = [
        f"{name}: request {requests[name]} above limit {limits[name]}"
        for name in sorted(requests.keys() & limits.keys())
        if requests[name] > limits[name]
    ]
    for name, top in _quantities(item.get("max")).items():
        if name not in limits:
            problems.append(f"{name}: maximum {top} per Container, no limit specified")
        elif limits[name] > top:
            problems.append(f"{name}: limit {limits[name]} above the maximum {top} per Container")
    return {"requests": requests, "limits": limits}, problems


def claim_admit(size: str, limit_range: Mapping[str, Any]) -> list[str]:
    item = next((i for i in limit_range["spec"]["limits"] if i["type"] == "PersistentVolumeClaim"), {})
    storage = parse_quantity(size)
    low, high = (_quantities(item.get(k)).get("storage") for k in ("min", "max"))
    problems = []
    if low is not None and storage < low:
        problems.append(f"storage {size} below the minimum {low} per PersistentVolumeClaim")
    if high is not None and storage > high:
        problems.append(f"storage {size} above the maximum {high} per PersistentVolumeClaim")
    return problems


# ------------------------------------------------------------------------------ ResourceQuota
def usage(profile: WorkspaceProfile, limit_range: Mapping[str, Any]) -> Counter[str]:
    """What one workspace of ``profile`` (its pod and its disk) adds to the quota's tracked totals."""
    used: Counter[str] = Counter({"pods": 1, "persistentvolumeclaims": 1})
    if profile.runtime == "vm":
        used.update({"services": 1, "count/virtualmachines.kubevirt.io": 1})
    for container in containers(profile):
        resources, _ = limit_range_admit(container, limit_range)
        for name, value in resources["requests"].items():
            used[f"requests.{name}" if not name.startswith("requests.") else name] += value  # type: ignore[assignment]
    size, cls, _ = disk(profile)
    used["requests.storage"] += parse_quantity(size)  # type: ignore[assignment]
    if cls:
        used[f"{cls}.storageclass.storage.k8s.io/requests.storage"] += parse_quantity(size)  # type: ignore[assignment]
    return used


def quota_refusals(workloads: Iterable[Counter[str]], quota: Mapping[str, Any]) -> list[str]:
    """The quota's exceeded totals for ``workloads`` together (what the API server names in a 403)."""
    total: Counter[str] = Counter()
    for used in workloads:
        total.update(used)
    hard = _quantities(quota["spec"]["hard"])
    return [
        f"exceeded quota: {name}, requested {total[name]}, limited {hard[name]}"
        for name in sorted(hard)
        if total[name] > hard[name]
    ]


# ------------------------------------------------------------------------------ tests
def test_every_profile_passes_the_limit_range(profiles: list[WorkspaceProfile]) -> None:
    assert {p.runtime for p in profiles} == {"container", "vm"} and len(profiles) >= 5
    for profile in profiles:
        for container in containers(profile):
            assert limit_range_admit(container, LIMITS)[1] == [], (profile.slug, container["name"])
        size, _, grown = disk(profile)
        assert claim_admit(size, LIMITS) == [], profile.slug
        assert claim_admit(grown, LIMITS) == [], f"{profile.slug}: the disk service may grow it to {grown}"


def test_one_of_every_profile_fits_the_quota_together(profiles: list[WorkspaceProfile]) -> None:
    assert quota_refusals([usage(p, LIMITS) for p in profiles], QUOTA) == []


def test_a_burstable_vm_gets_the_maximum_as_its_limit(profiles: list[WorkspaceProfile]) -> None:
    """Requests without limits (seed 001 §6) stay admitted: the LimitRange's default fills the limit."""
    vm = next(p for p in profiles if p.runtime == "vm" and not p.resources.limits)
    (compute,) = containers(vm)
    admitted, problems = limit_range_admit(compute, LIMITS)
    assert problems == [] and "limits" not in compute["resources"]
    assert admitted["limits"] == _quantities(
        next(i for i in LIMITS["spec"]["limits"] if i["type"] == "Container")["max"]
    )


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb"])
def test_the_quota_refuses_one_workspace_past_a_gpu_total(
    profiles: list[WorkspaceProfile], resource: str
) -> None:
    profile = next(p for p in profiles if resource in p.resources.requests)
    per_workspace = parse_quantity(profile.resources.requests[resource])
    fits = int(parse_quantity(QUOTA["spec"]["hard"][f"requests.{resource}"]) / per_workspace)
    assert fits >= 1
    assert quota_refusals([usage(profile, LIMITS)] * fits, QUOTA) == []
    assert quota_refusals([usage(profile, LIMITS)] * (fits + 1), QUOTA) == [
        f"exceeded quota: requests.{resource}, requested {per_workspace * (fits + 1)}, "
        f"limited {parse_quantity(QUOTA['spec']['hard'][f'requests.{resource}'])}"
    ]


def test_every_extended_resource_of_the_catalog_has_a_total(profiles: list[WorkspaceProfile]) -> None:
    wanted = {r for p in profiles for r in p.resources.requests if is_extended_resource(r)}
    assert wanted and {f"requests.{r}" for r in wanted} <= QUOTA["spec"]["hard"].keys()


def test_the_quota_sets_no_limits_totals() -> None:
    """A limits.* total refuses every pod without limits: the burstable VM profiles."""
    assert not [k for k in QUOTA["spec"]["hard"] if k.startswith("limits.")]


def test_the_quota_leaves_room_for_max_disks_total() -> None:
    spawner = load_yaml(BASE)["hub"]["config"]["GPUWorkspaceSpawner"]
    assert 0 < spawner["max_disks_per_user"] <= spawner["max_disks_total"]
    assert int(QUOTA["spec"]["hard"]["persistentvolumeclaims"]) >= spawner["max_disks_total"]


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        pytest.param({"limits": {"cpu": "64"}}, "cpu: limit 64 above the maximum 32", id="cpu-over-max"),
        pytest.param({"requests": {"memory": "256Gi"}}, "memory: request", id="request-over-default-limit"),
        pytest.param({"limits": {"memory": "200Gi"}}, "memory: limit", id="memory-over-max"),
    ],
)
def test_the_limit_range_check_can_fail(container: dict[str, Any], expected: str) -> None:
    problems = limit_range_admit({"name": "c", "resources": container}, LIMITS)[1]
    assert any(expected in p for p in problems), problems


def test_the_claim_check_can_fail() -> None:
    assert claim_admit("2Ti", LIMITS) == [
        "storage 2Ti above the maximum 1099511627776 per PersistentVolumeClaim"
    ]
    assert claim_admit("512Mi", LIMITS)


# ------------------------------------------------------------------------------ the hub's own limits
@pytest.mark.parametrize("files", [pytest.param(files, id=name) for name, files in combinations()])
def test_values_limit_named_servers_and_disks(files: tuple[Path, ...]) -> None:
    """z2jh sets JupyterHub.named_server_limit_per_user from hub.namedServerLimitPerUser; hub.config
    sets the spawner's traits as they are. 0 (or absent) would mean no limit."""
    hub = user_values(*files)["hub"]
    assert hub["allowNamedServers"] is True and hub["namedServerLimitPerUser"] > 0
    spawner = hub["config"]["GPUWorkspaceSpawner"]
    assert spawner["max_disks_per_user"] > 0 and spawner["max_disks_total"] > 0
    # a user may fill every named server and the default one, each with a disk
    assert spawner["max_disks_per_user"] >= hub["namedServerLimitPerUser"] + 1


def _hub_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> Any:
    for name in (
        "GPUWS_CATALOG",
        "GPUWS_NAMED_SERVER_LIMIT",
        "GPUWS_MAX_DISKS_PER_USER",
        "GPUWS_MAX_DISKS_TOTAL",
    ):
        monkeypatch.delenv(name, raising=False)
    return load_hub_config(monkeypatch, tmp_path, **env)


def test_the_demo_hub_sets_the_limits_from_its_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = _hub_config(monkeypatch, tmp_path)
    assert config.JupyterHub.named_server_limit_per_user == 20
    assert (config.GPUWorkspaceSpawner.max_disks_per_user, config.GPUWorkspaceSpawner.max_disks_total) == (
        20,
        500,
    )
    changed = _hub_config(
        monkeypatch,
        tmp_path,
        GPUWS_NAMED_SERVER_LIMIT="2",
        GPUWS_MAX_DISKS_PER_USER="3",
        GPUWS_MAX_DISKS_TOTAL="0",
    )
    assert changed.JupyterHub.named_server_limit_per_user == 2
    assert (changed.GPUWorkspaceSpawner.max_disks_per_user, changed.GPUWorkspaceSpawner.max_disks_total) == (
        3,
        0,
    )
