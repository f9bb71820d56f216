"""The topology file: loading, its errors, the API objects it makes, the golden root filesystem."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.resources import find
from gpuworkspace_devcluster.sim.context import SimContext
from gpuworkspace_devcluster.sim.topology import (
    DEFAULT_TOPOLOGY,
    ROOTFS_ANNOTATION,
    apply_topology,
    load_topology,
    seed_golden,
)

NODES = find("", "v1", "nodes")
NAMESPACES = find("", "v1", "namespaces")
PVCS = find("", "v1", "persistentvolumeclaims")
SCS = find("storage.k8s.io", "v1", "storageclasses")
VSCS = find("snapshot.storage.k8s.io", "v1", "volumesnapshotclasses")
DATASOURCES = find("cdi.kubevirt.io", "v1beta1", "datasources")


def test_default_topology_matches_the_contract() -> None:
    topo = load_topology()
    assert topo.source == DEFAULT_TOPOLOGY
    assert [n.name for n in topo.nodes] == ["gpu-node-a", "gpu-node-b", "cpu-node-a"]
    assert [n.internal_ip for n in topo.nodes] == ["127.10.0.1", "127.11.0.1", "127.12.0.1"]
    for name in ("gpu-node-a", "gpu-node-b"):
        node = topo.node(name)
        assert node.cpu == 128 and node.memory == Decimal(2**40)
        assert [g.mode for g in node.gpus] == ["exclusive"] * 6 + ["time-sliced", "mig"]
        assert {g.model for g in node.gpus} == {"NVIDIA H100 80GB HBM3"}
        assert node.gpus[6].replicas == 4 and node.gpus[6].fail_requests_greater_than_one
        assert (node.gpus[7].mig_profile, node.gpus[7].mig_slices) == ("1g.10gb", 7)
        assert node.extended_resources() == {
            "nvidia.com/gpu": 6,
            "nvidia.com/gpu.shared": 4,
            "nvidia.com/mig-1g.10gb": 7,
        }
        assert node.taints == ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},)
        assert node.labels["gpuworkspace.dev/pool"] == "gpu"
    assert topo.node("cpu-node-a").gpus == ()
    rbd, cephfs = topo.storage_classes
    assert (rbd.name, rbd.provisioner, rbd.default, rbd.allow_volume_expansion) == (
        "ceph-rbd",
        "rbd.csi.ceph.com",
        True,
        True,
    )
    assert (rbd.reclaim_policy, rbd.volume_binding_mode) == ("Delete", "Immediate")
    assert (cephfs.name, cephfs.provisioner, cephfs.default) == ("cephfs", "cephfs.csi.ceph.com", False)
    assert "ReadWriteMany" in cephfs.access_modes
    assert [(s.name, s.driver, s.deletion_policy) for s in topo.snapshot_classes] == [
        ("ceph-rbd-snapclass", "rbd.csi.ceph.com", "Delete")
    ]
    assert topo.namespaces == ("gpu-workspaces", "vm-images")
    (golden,) = topo.golden_images
    assert (golden.namespace, golden.pvc, golden.datasource) == (
        "vm-images",
        "ubuntu-24-04-gpu-golden",
        "ubuntu-24-04-gpu",
    )


GOOD_NODE = "nodes:\n  - {name: n1, cpu: '4', memory: 8Gi}\n"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        pytest.param("nodes: [\n", "not valid YAML", id="yaml-syntax"),
        pytest.param("storage_classes: []\n", "nodes: required field is missing", id="no-nodes"),
        pytest.param(
            "nodes:\n  - {name: n1, cpu: lots, memory: 8Gi}\n", "nodes[0].cpu: not a quantity", id="cpu"
        ),
        pytest.param("nodes:\n  - {cpu: '4', memory: 8Gi}\n", "nodes[0].name: required", id="name"),
        pytest.param(
            "nodes:\n  - {name: n1, cpu: '4', memory: 8Gi, colour: red}\n",
            "nodes[0]: unknown field(s) ['colour']",
            id="unknown-key",
        ),
        pytest.param(
            GOOD_NODE.replace("}", ", taints: [{key: k, effect: Sometimes}]}"),
            "nodes[0].taints[0].effect: must be one of",
            id="taint-effect",
        ),
        pytest.param(
            GOOD_NODE.replace("}", ", gpus: {model: X, count: 2, sharing: [{index: 5, mode: mig}]}}"),
            "nodes[0].gpus.sharing[0].index: no GPU 5",
            id="gpu-index",
        ),
        pytest.param(
            GOOD_NODE.replace("}", ", gpus: {model: X, count: two}}"),
            "nodes[0].gpus.count: expected int",
            id="gpu-count",
        ),
        pytest.param(
            GOOD_NODE.replace("}", ", gpus: {model: X, count: 1, sharing: [{index: 0, mode: vgpu}]}}"),
            "nodes[0].gpus.sharing[0].mode: must be one of",
            id="gpu-mode",
        ),
        pytest.param(
            GOOD_NODE + GOOD_NODE.replace("nodes:\n", ""), "nodes[1].name: duplicate", id="duplicate"
        ),
        pytest.param(
            GOOD_NODE + "golden_images:\n  - {namespace: a, pvc: b, datasource: c, storage_class: nope}\n",
            "golden_images[0].storage_class: no storage class named 'nope'",
            id="golden-sc",
        ),
        pytest.param(
            GOOD_NODE + "storage_classes:\n  - {name: a, provisioner: p, volume_binding_mode: Later}\n",
            "storage_classes[0].volume_binding_mode: must be one of",
            id="binding-mode",
        ),
    ],
)
def test_bad_topology_names_file_and_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "topo.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match="^" + str(path).replace(".", r"\.")) as info:
        load_topology(path)
    assert field in str(info.value)


def test_missing_file_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read the topology file"):
        load_topology(tmp_path / "absent.yaml")


def test_seed_golden_writes_a_small_rootfs_and_keeps_changes(tmp_path: Path) -> None:
    root = seed_golden(tmp_path / "vol")
    assert 'VERSION_ID="24.04"' in (root / "etc/os-release").read_text()
    for directory in ("opt", "usr/local", "home", "var"):
        assert (root / directory).is_dir()
    (root / "etc/os-release").write_text("changed")
    seed_golden(root)
    assert (root / "etc/os-release").read_text() == "changed"


async def test_apply_topology_creates_realistic_objects_idempotently(tmp_path: Path) -> None:
    async with DevCluster(tmp_path / "state") as c:
        ctx = SimContext(verbs=c.verbs, state_dir=tmp_path / "state", pod_runtime=c.pod_runtime)
        topo = await apply_topology(ctx)
        assert ctx.topology is topo
        node = c.store.get(NODES, "", "gpu-node-b")
        labels = node["metadata"]["labels"]
        assert labels["kubernetes.io/hostname"] == "gpu-node-b"
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert labels["nvidia.com/mig.config"] == "gpu7-1g.10gb"
        assert labels["node.kubernetes.io/instance-type"]
        assert node["spec"]["taints"] == [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
        ]
        status = node["status"]
        assert status["capacity"]["cpu"] == "128" and status["allocatable"]["cpu"] == "127500m"
        assert status["capacity"]["memory"] == "1073741824Ki"
        assert status["allocatable"]["nvidia.com/gpu"] == "6"
        assert status["allocatable"]["nvidia.com/gpu.shared"] == "4"
        assert status["allocatable"]["nvidia.com/mig-1g.10gb"] == "7"
        assert {"ephemeral-storage", "pods"} <= set(status["allocatable"])
        assert {c["type"]: c["status"] for c in status["conditions"]} == {
            "Ready": "True",
            "MemoryPressure": "False",
            "DiskPressure": "False",
            "PIDPressure": "False",
        }
        assert status["addresses"] == [
            {"type": "InternalIP", "address": "127.11.0.1"},
            {"type": "Hostname", "address": "gpu-node-b"},
        ]
        assert status["nodeInfo"]["kubeletVersion"] == "v1.33.0"
        assert status["nodeInfo"]["osImage"].startswith("Ubuntu")
        cpu = c.store.get(NODES, "", "cpu-node-a")
        assert "nvidia.com/gpu" not in cpu["status"]["allocatable"] and "taints" not in cpu["spec"]

        sc = c.store.get(SCS, "", "ceph-rbd")
        assert sc["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
        assert (
            sc["provisioner"],
            sc["reclaimPolicy"],
            sc["volumeBindingMode"],
            sc["allowVolumeExpansion"],
        ) == (
            "rbd.csi.ceph.com",
            "Delete",
            "Immediate",
            True,
        )
        assert c.store.get(SCS, "", "cephfs")["provisioner"] == "cephfs.csi.ceph.com"
        vsc = c.store.get(VSCS, "", "ceph-rbd-snapclass")
        assert (vsc["driver"], vsc["deletionPolicy"]) == ("rbd.csi.ceph.com", "Delete")
        for ns in ("gpu-workspaces", "vm-images"):
            assert c.store.get(NAMESPACES, "", ns) is not None
        pvc = c.store.get(PVCS, "vm-images", "ubuntu-24-04-gpu-golden")
        assert pvc["metadata"]["annotations"][ROOTFS_ANNOTATION] == "ubuntu-24.04"
        assert pvc["spec"]["storageClassName"] == "ceph-rbd"
        ds = c.store.get(DATASOURCES, "vm-images", "ubuntu-24-04-gpu")
        assert ds["spec"]["source"]["pvc"] == {"namespace": "vm-images", "name": "ubuntu-24-04-gpu-golden"}
        (ready,) = ds["status"]["conditions"]
        assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Ready")

        # Others' changes survive a re-apply (a restart); nothing else is rewritten.
        cordon = {"spec": {"taints": [*node["spec"]["taints"], {"key": "x", "effect": "NoExecute"}]}}
        c.verbs.patch(NODES, "", "gpu-node-b", cordon, "application/merge-patch+json")
        c.verbs.patch(
            NODES, "", "gpu-node-b", {"metadata": {"labels": {"extra": "1"}}}, "application/merge-patch+json"
        )
        rv = c.store.rv
        await apply_topology(ctx)
        assert c.store.rv == rv
        node = c.store.get(NODES, "", "gpu-node-b")
        assert node["metadata"]["labels"]["extra"] == "1"
        assert [t["key"] for t in node["spec"]["taints"]] == ["nvidia.com/gpu", "x"]


async def test_apply_topology_restores_the_topology_after_a_restart(tmp_path: Path) -> None:
    async with DevCluster(tmp_path / "state") as c:
        ctx = SimContext(verbs=c.verbs, state_dir=tmp_path / "state", pod_runtime=c.pod_runtime)
        await apply_topology(ctx)
        c.verbs.patch(NODES, "", "cpu-node-a", {"spec": {"taints": None}}, "application/merge-patch+json")
    # Bring up the persisted cluster with an edited topology: nodes follow it.
    edited = tmp_path / "topo.yaml"
    edited.write_text(
        DEFAULT_TOPOLOGY.read_text()
        .replace('cpu: "32"', 'cpu: "64"')
        .replace(
            "    labels:\n      gpuworkspace.dev/pool: cpu",
            "    taints: [{key: dedicated, value: infra, effect: NoSchedule}]\n"
            "    labels:\n      gpuworkspace.dev/pool: cpu",
        )
    )
    async with DevCluster(tmp_path / "state") as c:
        ctx = SimContext(
            verbs=c.verbs,
            state_dir=tmp_path / "state",
            pod_runtime=c.pod_runtime,
            topology=load_topology(edited),
        )
        await apply_topology(ctx)
        node = c.store.get(NODES, "", "cpu-node-a")
        assert node["status"]["capacity"]["cpu"] == "64"
        assert node["spec"]["taints"] == [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]
