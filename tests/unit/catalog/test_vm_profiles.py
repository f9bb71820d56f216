"""runtime: vm profiles: the typed vm section, the rules that differ from containers, and the card."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_spawner.catalog import CatalogError, CatalogProblem, build_profile_list, load_catalog
from gpuworkspace_spawner.catalog.model import VmGpu, VmSpec

from .conftest import DELETE, catalog_doc, profile_doc, with_path, write_yaml

REPO = Path(__file__).resolve().parents[3]
H100 = "nvidia.com/GH100_H100_SXM5_80GB"


def vm_doc(name: str = "vm", **spec: Any) -> dict[str, Any]:
    doc = profile_doc(
        name,
        runtime="vm",
        vm={
            "dataSource": {"name": "ubuntu-24-04-gpu", "namespace": "vm-images"},
            "cpu": {"cores": 8},
            "memory": {"guest": "16Gi"},
        },
        resources={"requests": {"cpu": "2", "memory": "16Gi"}},
        **spec,
    )
    del doc["spec"]["image"]
    return doc


def gpu_vm_doc(name: str = "vm-gpu") -> dict[str, Any]:
    doc = vm_doc(name, placement={"nodePool": "gpu", "gpuMode": "exclusive"})
    doc["spec"]["vm"]["gpus"] = [{"name": "gpu1", "deviceName": H100}]
    return doc


def problems_of(path: Path) -> tuple[CatalogProblem, ...]:
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    return caught.value.problems


def test_vm_profile_model(tmp_path: Path) -> None:
    doc = gpu_vm_doc()
    doc["spec"]["vm"].update(
        rootDisk={"size": "100Gi", "class": "ceph-rbd", "maxSize": "500Gi"},
        cpu={"cores": 4, "sockets": 2, "threads": 2},
        memory={"guest": "64Gi"},
    )
    doc["spec"]["resources"] = {"requests": {"cpu": 16, "memory": "64Gi"}, "limits": {"memory": "64Gi"}}
    profile = load_catalog(write_yaml(tmp_path / "c.yaml", catalog_doc(), doc)).profiles[0]
    assert profile.runtime == "vm" and profile.image is None
    assert profile.vm == VmSpec(
        data_source_name="ubuntu-24-04-gpu",
        data_source_namespace="vm-images",
        cores=4,
        sockets=2,
        threads=2,
        guest_memory="64Gi",
        root_disk_size="100Gi",
        root_disk_class="ceph-rbd",
        root_disk_max_size="500Gi",
        gpus=(VmGpu(name="gpu1", device_name=H100),),
    )
    assert profile.vm.vcpus == 16
    assert profile.resources.requests["cpu"] == "16"


def test_vm_defaults(tmp_path: Path) -> None:
    profile = load_catalog(write_yaml(tmp_path / "c.yaml", catalog_doc(), vm_doc())).profiles[0]
    assert profile.vm is not None
    assert (profile.vm.sockets, profile.vm.threads, profile.vm.gpus) == (1, 1, ())
    assert (profile.vm.root_disk_size, profile.vm.root_disk_class, profile.vm.root_disk_max_size) == (
        "40Gi",
        None,
        None,
    )


def test_container_profile_has_no_vm_and_keeps_home_max_size(tmp_path: Path) -> None:
    doc = profile_doc("c", storage={"home": {"size": "10Gi", "maxSize": "100Gi"}})
    profile = load_catalog(write_yaml(tmp_path / "c.yaml", catalog_doc(), doc)).profiles[0]
    assert profile.vm is None and profile.image is not None
    assert profile.storage.home.max_size == "100Gi"


def test_sample_vm_profile() -> None:
    profile = load_catalog(REPO / "hub_config" / "catalog").get("vm-workstation")
    assert profile is not None and profile.vm is not None
    assert profile.runtime == "vm" and profile.placement.gpu_mode == "none"
    assert profile.vm.vcpus == 8 and profile.vm.guest_memory == "16Gi"
    assert profile.vm.root_disk_size == "40Gi" and profile.vm.root_disk_max_size == "200Gi"
    assert profile.resources.limits == {}  # burstable: requests only
    assert profile.placement.node_pool is not None and profile.placement.node_pool.name == "cpu"


# (document, dotted path, value; DELETE removes) → (field reported, words in the message)
VM_ERRORS = [
    pytest.param(profile_doc("vm"), "spec.image", DELETE, "spec.image", "container profile needs an image", id="container-without-image"),
    pytest.param(vm_doc(), "spec.image", "quay.io/x/y:1", "spec.image", "boots from its root disk", id="vm-with-image"),
    pytest.param(vm_doc(), "spec.storage.home", {"size": "10Gi"}, "spec.storage.home", "root disk is its home", id="vm-home"),
    pytest.param(vm_doc(), "spec.storage.scratch", {"sizeLimit": "1Gi"}, "spec.storage.scratch", "not used with runtime: vm", id="vm-scratch"),
    pytest.param(vm_doc(), "spec.storage.shm", {"sizeLimit": "1Gi"}, "spec.storage.shm", "guest memory", id="vm-shm"),
    pytest.param(vm_doc(), "spec.storage.datasets", {"claimName": "ds"}, "spec.storage.datasets", "not available to VMs", id="vm-datasets"),
    pytest.param(vm_doc(), "spec.placement.runtimeClassName", "nvidia", "spec.placement.runtimeClassName", "virt-launcher", id="vm-runtime-class"),
    pytest.param(vm_doc(), "spec.security.runAsUser", 1000, "spec.security.runAsUser", "root inside their VM", id="vm-uid"),
    pytest.param(vm_doc(), "spec.placement.gpuMode", "mig", "spec.placement.gpuMode", "mig is for containers", id="vm-mig"),
    pytest.param(vm_doc(), "spec.placement.gpuMode", "exclusive", "spec.vm.gpus", "at least one passthrough GPU", id="vm-exclusive-without-gpus"),
    pytest.param(vm_doc(), "spec.vm.gpus", [{"name": "g", "deviceName": H100}], "spec.placement.gpuMode", "set exclusive", id="vm-gpus-with-mode-none"),
    pytest.param(gpu_vm_doc(), "spec.vm.gpus", [{"name": "g", "deviceName": H100}] * 2, "spec.vm.gpus[1].name", "used twice", id="vm-gpu-name-twice"),
    pytest.param(gpu_vm_doc(), "spec.vm.gpus", [{"name": "g", "deviceName": "H100"}], "spec.vm.gpus[0].deviceName", "device resource name", id="vm-gpu-device-name"),
    pytest.param(vm_doc(), "spec.resources.limits", {"nvidia.com/gpu": "1"}, "spec.resources.limits.nvidia.com/gpu", "passthrough devices in vm.gpus", id="vm-gpu-resource"),
    pytest.param(vm_doc(), "spec.resources.requests.cpu", "9", "spec.resources.requests.cpu", "more than the VM's 8 vCPUs", id="vm-cpu-request-above-vcpus"),
    pytest.param(vm_doc(), "spec.resources.limits", {"memory": "8Gi"}, "spec.resources.limits.memory", "below the guest memory", id="vm-memory-limit-below-guest"),
    pytest.param(vm_doc(), "spec.vm.cpu", DELETE, "spec.vm.cpu", "required", id="vm-without-cpu"),
    pytest.param(vm_doc(), "spec.vm.memory", {}, "spec.vm.memory.guest", "required", id="vm-without-guest-memory"),
    pytest.param(vm_doc(), "spec.vm.cpu.cores", 0, "spec.vm.cpu.cores", "minimum", id="vm-zero-cores"),
    pytest.param(vm_doc(), "spec.vm.colour", "red", "spec.vm.colour", "unknown field", id="vm-unknown-field"),
    pytest.param(vm_doc(), "spec.vm.dataSource", {"name": "ubuntu"}, "spec.vm.dataSource.namespace", "required", id="vm-datasource-namespace"),
    pytest.param(vm_doc(), "spec.vm.rootDisk", {"size": "500Mi"}, "spec.vm.rootDisk.size", "at least 1Gi", id="vm-root-disk-too-small"),
    pytest.param(vm_doc(), "spec.vm.rootDisk", {"size": "50Gi", "maxSize": "40Gi"}, "spec.vm.rootDisk.maxSize", "below the size", id="vm-max-below-size"),
    pytest.param(vm_doc(), "spec.vm.rootDisk", {"maxSize": "20Gi"}, "spec.vm.rootDisk.maxSize", "below the size ('40Gi')", id="vm-max-below-default-size"),
    pytest.param(profile_doc("c"), "spec.storage.home", {"size": "20Gi", "maxSize": "10Gi"}, "spec.storage.home.maxSize", "below the size", id="home-max-below-size"),
]  # fmt: skip


@pytest.mark.parametrize(("doc", "path", "value", "field", "words"), VM_ERRORS)
def test_vm_errors_name_file_profile_and_field(
    tmp_path: Path, doc: dict[str, Any], path: str, value: Any, field: str, words: str
) -> None:
    bad = with_path(doc, path, value)
    file = write_yaml(tmp_path / "profiles.yaml", catalog_doc(), bad)
    found = problems_of(file)
    assert any(p.field == field and words in p.message for p in found), found
    assert all(p.file == str(file) and p.profile == bad["metadata"]["name"] for p in found)


@pytest.mark.parametrize(
    ("requests", "limits"),
    [
        pytest.param({"cpu": "2", "memory": "16Gi"}, {}, id="burstable"),
        pytest.param({"cpu": "8", "memory": "16Gi"}, {"cpu": "8", "memory": "16Gi"}, id="guaranteed"),
        pytest.param({"cpu": "2", "memory": "8Gi"}, {}, id="best-effort-memory"),
        pytest.param({}, {}, id="kubevirt-defaults"),
    ],
)
def test_vm_overcommit_shapes_load(tmp_path: Path, requests: dict[str, str], limits: dict[str, str]) -> None:
    doc = with_path(vm_doc(), "spec.resources", {"requests": requests, "limits": limits})
    assert load_catalog(write_yaml(tmp_path / "c.yaml", catalog_doc(), doc)).profiles[0].vm is not None


def _card(tmp_path: Path, doc: dict[str, Any]) -> str:
    catalog = load_catalog(write_yaml(tmp_path / "c.yaml", catalog_doc(), doc))
    (entry,) = build_profile_list(catalog, "alice", [])
    return html.unescape(entry["description"])


def test_vm_card_says_what_is_kept_and_how_the_cpu_bursts(tmp_path: Path) -> None:
    card = _card(tmp_path, vm_doc())
    assert "a whole Linux VM" in card
    assert "(/etc, /opt, /usr/local, apt) is kept on your root disk (40Gi)" in card.replace(
        "<code>", ""
    ).replace("</code>", "")
    assert "8 vCPUs, 2 guaranteed, bursting when the node is idle" in card
    assert "16Gi memory" in card and "no GPU" in card
    assert "/scratch" not in card and "/dev/shm" not in card


def test_vm_card_for_guaranteed_and_passthrough(tmp_path: Path) -> None:
    doc = gpu_vm_doc()
    doc["spec"]["resources"] = {
        "requests": {"cpu": "8", "memory": "16Gi"},
        "limits": {"cpu": "8", "memory": "16Gi"},
    }
    card = _card(tmp_path, doc)
    assert "8 vCPUs, all guaranteed" in card
    assert f"1 \u00d7 <code>{H100}</code> by PCI passthrough" in card


def test_vm_card_with_a_smaller_memory_request(tmp_path: Path) -> None:
    card = _card(tmp_path, with_path(vm_doc(), "spec.resources.requests.memory", "8Gi"))
    assert "16Gi memory (8Gi guaranteed" in card
