"""GPU inventory and allocation: whole cards, time-sliced slots, MIG devices; the checkpoint file."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from gpuworkspace_devcluster.sim.devices import (
    DeviceManager,
    DeviceUnavailable,
    gpu_uuid,
    is_device_resource,
)
from gpuworkspace_devcluster.sim.topology import DEFAULT_TOPOLOGY, Topology, load_topology

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@pytest.fixture
def topo() -> Topology:
    return load_topology()


def test_inventory_ids_are_stable_and_unique(tmp_path: Path, topo: Topology) -> None:
    a = DeviceManager(tmp_path / "a", topo).inventory("gpu-node-a")
    b = DeviceManager(tmp_path / "b", topo).inventory("gpu-node-a")
    assert a == b and len(a) == 8
    assert all(re.fullmatch("GPU-" + UUID, g.uuid) for g in a)
    other = DeviceManager(tmp_path / "a", topo).inventory("gpu-node-b")
    ids = {g.uuid for g in a + other} | {m for g in a + other for m in g.mig_devices}
    assert len(ids) == 16 + 14
    mig = a[7]
    assert (mig.mode, mig.resource, len(mig.mig_devices)) == ("mig", "nvidia.com/mig-1g.10gb", 7)
    assert all(re.fullmatch("MIG-" + UUID, m) for m in mig.mig_devices)
    assert (a[6].mode, a[6].resource, a[6].replicas) == ("time-sliced", "nvidia.com/gpu.shared", 4)
    assert DeviceManager(tmp_path, topo).inventory("cpu-node-a") == []


def test_exclusive_gpus_until_exhausted(tmp_path: Path, topo: Topology) -> None:
    dm = DeviceManager(tmp_path, topo)
    first = dm.allocate("gpu-node-a", "uid-1", "nvidia.com/gpu", 2, namespace="ns", pod="p1", container="c")
    assert [r.gpu_index for r in first] == [0, 1]
    assert [r.visible_id for r in first] == [gpu_uuid("gpu-node-a", 0), gpu_uuid("gpu-node-a", 1)]
    assert (first[0].pod, first[0].namespace, first[0].container) == ("p1", "ns", "c")
    dm.allocate("gpu-node-a", "uid-2", "nvidia.com/gpu", 4)
    with pytest.raises(DeviceUnavailable) as info:
        dm.allocate("gpu-node-a", "uid-3", "nvidia.com/gpu", 1)
    assert str(info.value) == (
        "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. "
        "Requested: 1, Available: 0, which is unexpected"
    )
    assert [r.gpu_index for r in dm.release("uid-1")] == [0, 1]
    assert [r.gpu_index for r in dm.allocate("gpu-node-a", "uid-3", "nvidia.com/gpu", 1)] == [0]
    with pytest.raises(DeviceUnavailable, match="Requested: 1, Available: 0"):
        dm.allocate("cpu-node-a", "uid-4", "nvidia.com/gpu", 1)


def test_time_sliced_slots_share_one_card(tmp_path: Path, topo: Topology) -> None:
    dm = DeviceManager(tmp_path, topo)
    refs = [dm.allocate("gpu-node-b", f"uid-{i}", "nvidia.com/gpu.shared", 1)[0] for i in range(4)]
    card = gpu_uuid("gpu-node-b", 6)
    assert [r.device_id for r in refs] == [f"{card}::{i}" for i in range(4)]
    assert {r.visible_id for r in refs} == {card}
    with pytest.raises(DeviceUnavailable, match=r"nvidia\.com/gpu\.shared\. Requested: 1, Available: 0"):
        dm.allocate("gpu-node-b", "uid-5", "nvidia.com/gpu.shared", 1)


def test_time_sliced_requests_above_one_fail_when_configured(tmp_path: Path, topo: Topology) -> None:
    with pytest.raises(DeviceUnavailable) as info:
        DeviceManager(tmp_path, topo).allocate("gpu-node-a", "uid", "nvidia.com/gpu.shared", 2)
    assert str(info.value) == (
        "Allocate failed due to rpc error: code = Unknown desc = request for 'nvidia.com/gpu.shared: 2' too "
        "large: maximum request size for shared resources is 1, which is unexpected"
    )
    lenient = tmp_path / "lenient.yaml"
    lenient.write_text(DEFAULT_TOPOLOGY.read_text().replace("fail_requests_greater_than_one: true", ""))
    refs = DeviceManager(tmp_path, load_topology(lenient)).allocate(
        "gpu-node-a", "uid", "nvidia.com/gpu.shared", 2
    )
    assert [r.slot for r in refs] == [0, 1]


def test_mig_devices(tmp_path: Path, topo: Topology) -> None:
    dm = DeviceManager(tmp_path, topo)
    refs = dm.allocate("gpu-node-a", "uid-1", "nvidia.com/mig-1g.10gb", 7)
    gpu = dm.inventory("gpu-node-a")[7]
    assert [r.visible_id for r in refs] == list(gpu.mig_devices)
    assert {(r.gpu_index, r.gpu_uuid, r.mode) for r in refs} == {(7, gpu.uuid, "mig")}
    with pytest.raises(DeviceUnavailable):
        dm.allocate("gpu-node-a", "uid-2", "nvidia.com/mig-1g.10gb", 1)
    with pytest.raises(ValueError, match="not a device resource"):
        dm.allocate("gpu-node-a", "uid-2", "cpu", 1)
    assert is_device_resource("nvidia.com/mig-3g.40gb") and not is_device_resource("memory")


def test_allocations_persist_and_readmission_is_idempotent(tmp_path: Path, topo: Topology) -> None:
    dm = DeviceManager(tmp_path, topo)
    refs = dm.allocate("gpu-node-a", "uid-1", "nvidia.com/gpu", 2, container="a")
    dm.allocate("gpu-node-a", "uid-1", "nvidia.com/mig-1g.10gb", 1, container="a")
    dm.allocate("gpu-node-b", "uid-2", "nvidia.com/gpu", 1)
    saved = orjson.loads((tmp_path / "sim" / "devices.json").read_bytes())
    assert len(saved["allocations"]) == 4

    again = DeviceManager(tmp_path, topo)
    assert again.for_pod("uid-1") == dm.for_pod("uid-1")
    assert again.allocate("gpu-node-a", "uid-1", "nvidia.com/gpu", 2, container="a") == refs
    assert [r.gpu_index for r in again.on_node("gpu-node-a")] == [0, 1, 7]
    assert [r.pod_uid for r in again.prune({"uid-2"})] == ["uid-1"] * 3
    assert DeviceManager(tmp_path, topo).on_node("gpu-node-a") == []


def test_allocations_of_devices_gone_from_the_topology_are_dropped(tmp_path: Path, topo: Topology) -> None:
    DeviceManager(tmp_path, topo).allocate("gpu-node-a", "uid-1", "nvidia.com/mig-1g.10gb", 1)
    smaller = tmp_path / "small.yaml"
    smaller.write_text(
        DEFAULT_TOPOLOGY.read_text().replace("profile: 1g.10gb, slices: 7", "profile: 3g.40gb, slices: 2")
    )
    assert DeviceManager(tmp_path, load_topology(smaller)).for_pod("uid-1") == []


def test_a_torn_checkpoint_starts_empty(tmp_path: Path, topo: Topology) -> None:
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "devices.json").write_text("{not json")
    assert DeviceManager(tmp_path, topo).on_node("gpu-node-a") == []
