"""The Ceph-CSI-like storage simulation, driven through the API verbs of a real DevCluster."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.resources import find
from gpuworkspace_devcluster.sim.base import SimController
from gpuworkspace_devcluster.sim.context import SimContext
from gpuworkspace_devcluster.sim.csi import (
    CsiController,
    claim_volume_dir,
    fill_volume,
    format_bytes,
    is_full,
    rwop_users,
    unfill_volume,
    volume_dir,
    volume_usage,
)
from gpuworkspace_devcluster.sim.csi_attach import (
    AttachController,
    multi_attach_message,
    volumes_attached,
)
from gpuworkspace_devcluster.sim.csi_resize import ResizeController
from gpuworkspace_devcluster.sim.snapshots import SnapshotController, snapshot_dir
from gpuworkspace_devcluster.sim.topology import ROOTFS_ANNOTATION

MERGE = "application/merge-patch+json"
PVCS, PVS, PODS = (
    find("", "v1", "persistentvolumeclaims"),
    find("", "v1", "persistentvolumes"),
    find("", "v1", "pods"),
)
NODES, EVENTS = find("", "v1", "nodes"), find("", "v1", "events")
SCS, VAS = find("storage.k8s.io", "v1", "storageclasses"), find("storage.k8s.io", "v1", "volumeattachments")
VSS = find("snapshot.storage.k8s.io", "v1", "volumesnapshots")
VSCLASSES = find("snapshot.storage.k8s.io", "v1", "volumesnapshotclasses")
NS = "default"
RBD_PARAMS = {
    "clusterID": "rook-ceph",
    "pool": "replicapool",
    "imageFeatures": "layering",
    "csi.storage.k8s.io/fstype": "ext4",
    "csi.storage.k8s.io/node-stage-secret-name": "rook-csi-rbd-node",
    "csi.storage.k8s.io/node-stage-secret-namespace": "rook-ceph",
}


def storage_class(name: str, provisioner: str = "rbd.csi.ceph.com", **extra: Any) -> dict[str, Any]:
    params = RBD_PARAMS if provisioner.startswith("rbd") else {"clusterID": "rook-ceph", "fsName": "myfs"}
    body = {"metadata": {"name": name}, "provisioner": provisioner, "parameters": params}
    return (
        body
        | {"allowVolumeExpansion": True, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}
        | extra
    )


def claim(
    name: str, sc: str = "ceph-rbd", modes: tuple[str, ...] = ("ReadWriteOnce",), **spec: Any
) -> dict[str, Any]:
    body = {"accessModes": list(modes), "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": sc}
    return {"metadata": {"name": name}, "spec": body | spec}


def pod(name: str, pvc: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "python:3.12"}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": pvc}}],
    }
    return {"metadata": {"name": name}, "spec": spec | ({"nodeName": node} if node else {})}


@dataclass
class Sim:
    cluster: DevCluster
    ctx: SimContext
    controllers: list[SimController]

    @property
    def verbs(self) -> Any:
        return self.cluster.verbs

    def get(self, rt: Any, name: str, ns: str = NS) -> dict[str, Any] | None:
        return self.cluster.store.get(rt, ns if rt.namespaced else "", name)

    def create(self, rt: Any, body: dict[str, Any], ns: str = NS) -> dict[str, Any]:
        return self.verbs.create(rt, ns if rt.namespaced else "", body)[0]

    def patch(self, rt: Any, name: str, patch: dict[str, Any], ns: str = NS, **kw: Any) -> dict[str, Any]:
        return self.verbs.patch(rt, ns if rt.namespaced else "", name, patch, MERGE, **kw)[0]

    def delete(self, rt: Any, name: str, ns: str = NS, **options: Any) -> None:
        self.verbs.delete(rt, ns if rt.namespaced else "", name, options)

    def events(self, name: str, reason: str | None = None, ns: str = NS) -> list[dict[str, Any]]:
        return [
            e
            for e in self.cluster.store.items(EVENTS, ns)
            if e["involvedObject"]["name"] == name and reason in (None, e["reason"])
        ]

    async def settle(self) -> None:
        for _ in range(6):
            for ctl in self.controllers:
                await ctl.settle()
            await self.cluster.controllers.settle()

    def data(self, pvc: str, ns: str = NS) -> Path:
        path = claim_volume_dir(self.ctx, ns, pvc)
        assert path is not None, f"{pvc} is not bound"
        return path


async def eventually(check: Callable[[], Any], within: float = 5.0) -> Any:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        result = check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(0.02)


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[Sim]:
    async with DevCluster(tmp_path / "state") as cluster:
        ctx = SimContext(verbs=cluster.verbs, state_dir=tmp_path / "state", pod_runtime=cluster.pod_runtime)
        controllers: list[SimController] = [
            CsiController(ctx),
            ResizeController(ctx, resize_s=0.05, fs_resize_s=0.05),
            AttachController(ctx, max_wait_for_unmount_s=0.3),
            SnapshotController(ctx),
        ]
        s = Sim(cluster, ctx, controllers)
        s.create(SCS, storage_class("ceph-rbd"))
        s.create(SCS, storage_class("ceph-rbd-retain", reclaimPolicy="Retain"))
        s.create(SCS, storage_class("ceph-rbd-wffc", volumeBindingMode="WaitForFirstConsumer"))
        s.create(SCS, storage_class("cephfs", "cephfs.csi.ceph.com"))
        for ctl in controllers:
            await ctl.start()
        try:
            yield s
        finally:
            for ctl in controllers:
                await ctl.stop()


async def test_provisions_and_binds_like_external_provisioner(sim: Sim) -> None:
    sim.create(PVCS, claim("data"))
    await sim.settle()
    pvc = sim.get(PVCS, "data")
    assert pvc is not None
    uid = pvc["metadata"]["uid"]
    pv = sim.get(PVS, f"pvc-{uid}")
    assert pv is not None
    assert pvc["spec"]["volumeName"] == f"pvc-{uid}"
    assert pvc["status"] == {
        "phase": "Bound",
        "accessModes": ["ReadWriteOnce"],
        "capacity": {"storage": "1Gi"},
    }
    ann = pvc["metadata"]["annotations"]
    assert ann["pv.kubernetes.io/bind-completed"] == "yes"
    assert ann["pv.kubernetes.io/bound-by-controller"] == "yes"
    assert ann["volume.kubernetes.io/storage-provisioner"] == "rbd.csi.ceph.com"
    assert ann["volume.beta.kubernetes.io/storage-provisioner"] == "rbd.csi.ceph.com"
    assert pvc["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    spec = pv["spec"]
    assert spec["csi"]["driver"] == "rbd.csi.ceph.com"
    assert spec["csi"]["volumeHandle"].startswith("0001-0009-rook-ceph-")
    assert spec["csi"]["fsType"] == "ext4"
    assert spec["csi"]["nodeStageSecretRef"] == {"name": "rook-csi-rbd-node", "namespace": "rook-ceph"}
    assert spec["csi"]["volumeAttributes"]["imageName"].startswith("csi-vol-")
    assert spec["csi"]["volumeAttributes"]["pool"] == "replicapool"
    assert spec["claimRef"]["uid"] == uid and spec["claimRef"]["name"] == "data"
    assert spec["persistentVolumeReclaimPolicy"] == "Delete"
    assert spec["capacity"] == {"storage": "1Gi"} and spec["volumeMode"] == "Filesystem"
    assert spec["storageClassName"] == "ceph-rbd" and spec["accessModes"] == ["ReadWriteOnce"]
    assert pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == "rbd.csi.ceph.com"
    assert "kubernetes.io/pv-protection" in pv["metadata"]["finalizers"]
    assert pv["status"]["phase"] == "Bound"
    assert volume_dir(sim.ctx, spec["csi"]["volumeHandle"]).is_dir()
    assert [
        e["reason"] for e in sorted(sim.events("data"), key=lambda e: e["metadata"]["resourceVersion"])
    ] == [
        "ExternalProvisioning",
        "Provisioning",
        "ProvisioningSucceeded",
    ]
    (provisioning,) = sim.events("data", "Provisioning")
    assert provisioning["message"] == 'External provisioner is provisioning volume for claim "default/data"'
    assert provisioning["source"]["component"].startswith("rbd.csi.ceph.com_csi-rbdplugin-provisioner")
    (succeeded,) = sim.events("data", "ProvisioningSucceeded")
    assert succeeded["message"] == f"Successfully provisioned volume pvc-{uid}"
    (external,) = sim.events("data", "ExternalProvisioning")
    assert external["message"].startswith(
        "Waiting for a volume to be created either by the external provisioner 'rbd.csi.ceph.com' or manually"
    )


async def test_access_modes_per_driver(sim: Sim) -> None:
    sim.create(PVCS, claim("rwx-fs", modes=("ReadWriteMany",)))
    sim.create(PVCS, claim("rwx-block", modes=("ReadWriteMany",), volumeMode="Block"))
    sim.create(PVCS, claim("shared", "cephfs", modes=("ReadWriteMany",)))
    sim.create(PVCS, claim("rwop", modes=("ReadWriteOncePod",)))
    await sim.settle()
    refused = sim.get(PVCS, "rwx-fs")
    assert refused is not None and refused["status"]["phase"] == "Pending"
    assert not refused["spec"].get("volumeName")
    (failed,) = sim.events("rwx-fs", "ProvisioningFailed")
    assert failed["type"] == "Warning"
    assert failed["message"] == (
        'failed to provision volume with StorageClass "ceph-rbd": rpc error: code = InvalidArgument desc = '
        "multi node access modes are only supported on rbd `block` type volumes"
    )
    for name in ("rwx-block", "shared", "rwop"):
        bound = sim.get(PVCS, name)
        assert bound is not None and bound["status"]["phase"] == "Bound", name
    shared = sim.get(PVS, sim.get(PVCS, "shared")["spec"]["volumeName"])  # type: ignore[index]
    assert shared is not None and shared["spec"]["csi"]["driver"] == "cephfs.csi.ceph.com"
    assert "fsType" not in shared["spec"]["csi"]
    assert shared["spec"]["csi"]["volumeAttributes"]["subvolumeName"].startswith("csi-vol-")


async def test_wait_for_first_consumer(sim: Sim) -> None:
    sim.create(PVCS, claim("late", "ceph-rbd-wffc"))
    await sim.settle()
    pvc = sim.get(PVCS, "late")
    assert pvc is not None and pvc["status"]["phase"] == "Pending"
    (waiting,) = sim.events("late", "WaitForFirstConsumer")
    assert waiting["message"] == "waiting for first consumer to be created before binding"
    assert waiting["source"]["component"] == "persistentvolume-controller"
    sim.create(PODS, pod("consumer", "late"))  # not scheduled yet: still waiting
    await sim.settle()
    assert sim.get(PVCS, "late")["status"]["phase"] == "Pending"  # type: ignore[index]
    sim.delete(PODS, "consumer")
    sim.create(PODS, pod("consumer2", "late", node="gpu-node-a"))
    await sim.settle()
    pvc = sim.get(PVCS, "late")
    assert pvc is not None and pvc["status"]["phase"] == "Bound"
    assert pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == "gpu-node-a"


async def test_multi_attach_error_for_rwo_on_two_nodes(sim: Sim) -> None:
    sim.create(PVCS, claim("home"))
    await sim.settle()
    first = sim.create(PODS, pod("first", "home", node="gpu-node-a"))
    await sim.settle()
    second = sim.create(PODS, pod("second", "home", node="gpu-node-b"))
    await sim.settle()
    pv = sim.get(PVS, sim.get(PVCS, "home")["spec"]["volumeName"])  # type: ignore[index]
    assert pv is not None
    handle, pv_name = pv["spec"]["csi"]["volumeHandle"], pv["metadata"]["name"]
    name = "csi-" + hashlib.sha256(f"{handle}rbd.csi.ceph.comgpu-node-a".encode()).hexdigest()
    va = sim.get(VAS, name)
    assert va is not None
    assert va["spec"] == {
        "attacher": "rbd.csi.ceph.com",
        "nodeName": "gpu-node-a",
        "source": {"persistentVolumeName": pv_name},
    }
    assert va["status"]["attached"] is True
    assert [v["spec"]["nodeName"] for v in sim.cluster.store.items(VAS)] == ["gpu-node-a"]
    assert volumes_attached(sim.ctx, first) and not volumes_attached(sim.ctx, second)
    (attached,) = sim.events("first", "SuccessfulAttachVolume")
    assert attached["message"] == f'AttachVolume.Attach succeeded for volume "{pv_name}"'
    (error,) = sim.events("second", "FailedAttachVolume")
    assert error["type"] == "Warning" and error["source"]["component"] == "attachdetach-controller"
    assert (
        error["message"]
        == f'Multi-Attach error for volume "{pv_name}" Volume is already used by pod(s) first'
    )
    assert error["count"] == 1  # reported once per pod
    sim.delete(PODS, "first")  # detaches from gpu-node-a; then the second pod's node gets it
    await sim.settle()
    assert [v["spec"]["nodeName"] for v in sim.cluster.store.items(VAS)] == ["gpu-node-b"]
    assert volumes_attached(sim.ctx, sim.get(PODS, "second"))  # type: ignore[arg-type]


def test_multi_attach_message_variants() -> None:
    def p(name: str, ns: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": ns}}

    assert multi_attach_message("pv1", "a", []) == (
        'Multi-Attach error for volume "pv1" Volume is already exclusively attached to one node and '
        "can't be attached to another"
    )
    assert multi_attach_message("pv1", "a", [p("x", "a"), p("y", "b")]) == (
        'Multi-Attach error for volume "pv1" Volume is already used by pod(s) x and 1 pod(s) in different namespaces'
    )
    assert multi_attach_message("pv1", "a", [p("y", "b")]) == (
        'Multi-Attach error for volume "pv1" Volume is already used by 1 pod(s) in different namespaces'
    )


async def test_detach_from_not_ready_node_waits_unless_out_of_service(sim: Sim) -> None:
    not_ready = {"conditions": [{"type": "Ready", "status": "Unknown"}]}
    for node in ("gpu-node-a", "gpu-node-b"):
        sim.create(NODES, {"metadata": {"name": node}})
        sim.patch(NODES, node, {"status": not_ready}, subresource="status")
    for name, node in (("vol-a", "gpu-node-a"), ("vol-b", "gpu-node-b")):
        sim.create(PVCS, claim(name))
        await sim.settle()
        sim.create(PODS, pod(f"user-{name}", name, node=node))
    await sim.settle()
    assert len(list(sim.cluster.store.items(VAS))) == 2
    sim.patch(
        NODES,
        "gpu-node-b",
        {"spec": {"taints": [{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}]}},
    )
    for name in ("user-vol-a", "user-vol-b"):
        sim.delete(PODS, name, gracePeriodSeconds=0)  # a force delete: the node cannot confirm
    await sim.settle()
    assert [v["spec"]["nodeName"] for v in sim.cluster.store.items(VAS)] == ["gpu-node-a"]  # waits 0.3 s
    await eventually(lambda: not list(sim.cluster.store.items(VAS)))


async def test_pvc_protection_holds_deletion_while_a_pod_uses_it(sim: Sim) -> None:
    sim.create(PVCS, claim("held"))
    await sim.settle()
    pv_name = sim.get(PVCS, "held")["spec"]["volumeName"]  # type: ignore[index]
    sim.create(PODS, pod("user", "held", node="gpu-node-a"))
    await sim.settle()
    sim.delete(PVCS, "held")
    await sim.settle()
    pvc = sim.get(PVCS, "held")
    assert pvc is not None and pvc["metadata"]["deletionTimestamp"]
    assert pvc["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    assert sim.get(PVS, pv_name) is not None
    sim.delete(PODS, "user")
    await sim.settle()
    assert sim.get(PVCS, "held") is None
    assert sim.get(PVS, pv_name) is None  # reclaimPolicy Delete


@pytest.mark.parametrize(("sc", "kept"), [("ceph-rbd", False), ("ceph-rbd-retain", True)])
async def test_reclaim_policy_decides_whether_data_survives(sim: Sim, sc: str, kept: bool) -> None:
    sim.create(PVCS, claim("work", sc))
    await sim.settle()
    data = sim.data("work")
    (data / "notebook.ipynb").write_text("{}")
    pv_name = sim.get(PVCS, "work")["spec"]["volumeName"]  # type: ignore[index]
    sim.delete(PVCS, "work")
    await sim.settle()
    pv = sim.get(PVS, pv_name)
    assert (data / "notebook.ipynb").exists() is kept
    if kept:
        assert pv is not None and pv["status"]["phase"] == "Released"
        assert pv["metadata"]["finalizers"] == ["kubernetes.io/pv-protection"]
    else:
        assert pv is None and not data.exists()


async def test_expansion_rbd_needs_the_node_cephfs_does_not(sim: Sim) -> None:
    sim.create(PVCS, claim("grow"))
    sim.create(PVCS, claim("grow-fs", "cephfs", modes=("ReadWriteMany",)))
    await sim.settle()
    sim.patch(PVCS, "grow", {"spec": {"resources": {"requests": {"storage": "2Gi"}}}})
    await sim.settle()
    pvc = sim.get(PVCS, "grow")
    assert pvc is not None
    assert [c["type"] for c in pvc["status"]["conditions"]] == ["Resizing"]
    (resizing,) = sim.events("grow", "Resizing")
    pv_name = pvc["spec"]["volumeName"]
    assert resizing["message"] == f"External resizer is resizing volume {pv_name}"
    assert resizing["source"]["component"] == "external-resizer rbd.csi.ceph.com"

    def pending() -> bool:
        conds = (sim.get(PVCS, "grow") or {})["status"].get("conditions") or []
        return [c["type"] for c in conds] == ["FileSystemResizePending"]

    await eventually(pending)
    assert sim.get(PVS, pv_name)["spec"]["capacity"] == {"storage": "2Gi"}  # type: ignore[index]
    assert sim.get(PVCS, "grow")["status"]["capacity"] == {"storage": "1Gi"}  # type: ignore[index]
    assert sim.events("grow", "FileSystemResizeRequired")
    await asyncio.sleep(0.2)
    assert pending()  # no pod has it mounted: the file system resize waits
    sim.create(PODS, pod("mounter", "grow", node="gpu-node-a"))
    await eventually(lambda: sim.get(PVCS, "grow")["status"]["capacity"] == {"storage": "2Gi"})  # type: ignore[index]
    pvc = sim.get(PVCS, "grow")
    assert pvc is not None and not pvc["status"].get("conditions")
    (done,) = sim.events("grow", "FileSystemResizeSuccessful")
    assert done["message"] == f'MountVolume.NodeExpandVolume succeeded for volume "{pv_name}"'
    assert done["source"] == {"component": "kubelet", "host": "gpu-node-a"}

    sim.patch(PVCS, "grow-fs", {"spec": {"resources": {"requests": {"storage": "3Gi"}}}})
    await eventually(lambda: sim.get(PVCS, "grow-fs")["status"]["capacity"] == {"storage": "3Gi"})  # type: ignore[index]
    assert sim.events("grow-fs", "VolumeResizeSuccessful")[0]["message"] == "Resize volume succeeded"


async def test_snapshot_and_restore_copy_the_data(sim: Sim) -> None:
    sim.create(VSCLASSES, {
        "metadata": {"name": "rbd-snap", "annotations": {"snapshot.storage.kubernetes.io/is-default-class": "true"}},
        "driver": "rbd.csi.ceph.com",
        "deletionPolicy": "Delete",
    })  # fmt: skip
    sim.create(PVCS, claim("origin"))
    await sim.settle()
    (sim.data("origin") / "state.txt").write_text("before")
    snap = sim.create(
        VSS, {"metadata": {"name": "snap1"}, "spec": {"source": {"persistentVolumeClaimName": "origin"}}}
    )
    await sim.settle()
    (sim.data("origin") / "state.txt").write_text("after")
    snap = sim.get(VSS, "snap1")  # type: ignore[assignment]
    uid = snap["metadata"]["uid"]
    assert (
        snap["spec"]["volumeSnapshotClassName"] == "rbd-snap"
    )  # the default class, as snapshot-controller sets it
    status = snap["status"]
    assert status["readyToUse"] is True and status["restoreSize"] == "1Gi"
    assert status["boundVolumeSnapshotContentName"] == f"snapcontent-{uid}" and status["creationTime"]
    assert [e["reason"] for e in sim.events("snap1")] != []
    (ready,) = sim.events("snap1", "SnapshotReady")
    assert ready["message"] == "Snapshot default/snap1 is ready to use."
    restore = claim(
        "restored",
        dataSource={"kind": "VolumeSnapshot", "apiGroup": "snapshot.storage.k8s.io", "name": "snap1"},
    )
    sim.create(PVCS, restore)
    await sim.settle()
    assert (sim.data("restored") / "state.txt").read_text() == "before"
    sim.delete(VSS, "snap1")
    await sim.settle()
    assert sim.get(VSS, "snap1") is None and not snapshot_dir(sim.ctx, uid).exists()


async def test_restore_from_a_missing_snapshot_waits(sim: Sim) -> None:
    sim.create(
        PVCS,
        claim(
            "early",
            dataSource={"kind": "VolumeSnapshot", "apiGroup": "snapshot.storage.k8s.io", "name": "nope"},
        ),
    )
    await sim.settle()
    assert sim.get(PVCS, "early")["status"]["phase"] == "Pending"  # type: ignore[index]
    (failed,) = sim.events("early", "ProvisioningFailed")
    assert "error getting handle for DataSource Type VolumeSnapshot by Name nope" in failed["message"]


async def test_capacity_accounting_and_fill_fault(sim: Sim) -> None:
    sim.create(PVCS, claim("small", resources={"requests": {"storage": "10Mi"}}))
    await sim.settle()
    handle = sim.get(PVS, sim.get(PVCS, "small")["spec"]["volumeName"])["spec"]["csi"]["volumeHandle"]  # type: ignore[index]
    (volume_dir(sim.ctx, handle) / "f").write_bytes(b"x" * 1000)
    assert volume_usage(sim.ctx, handle) == (1000, 10 * 2**20)
    assert not is_full(sim.ctx, handle)
    assert fill_volume(sim.ctx, handle) == 10 * 2**20 - 1000
    assert is_full(sim.ctx, handle)
    unfill_volume(sim.ctx, handle)
    assert volume_usage(sim.ctx, handle)[0] == 1000


async def test_golden_claims_are_seeded_with_the_root_filesystem(sim: Sim) -> None:
    golden = claim("golden")
    golden["metadata"]["annotations"] = {ROOTFS_ANNOTATION: "ubuntu-24.04"}
    sim.create(PVCS, golden)
    labelled = claim("labelled")
    labelled["metadata"]["labels"] = {"gpuworkspace.dev/golden": "true"}
    sim.create(PVCS, labelled)
    await sim.settle()
    for name in ("golden", "labelled"):
        root = sim.data(name)
        assert 'VERSION_ID="24.04"' in (root / "etc/os-release").read_text()
        assert all((root / d).is_dir() for d in ("opt", "usr/local", "home", "var"))


async def test_rwop_users_for_the_scheduler(sim: Sim) -> None:
    sim.create(PVCS, claim("single", modes=("ReadWriteOncePod",)))
    sim.create(PVCS, claim("multi"))
    await sim.settle()
    sim.create(PODS, pod("holder", "single", node="gpu-node-a"))
    sim.create(PODS, pod("waiting", "single"))
    sim.create(PODS, pod("other", "multi", node="gpu-node-a"))
    assert [p["metadata"]["name"] for p in rwop_users(sim.ctx, sim.get(PVCS, "single"))] == ["holder"]  # type: ignore[arg-type]
    assert rwop_users(sim.ctx, sim.get(PVCS, "multi")) == []  # type: ignore[arg-type]


def test_format_bytes() -> None:
    assert [format_bytes(n) for n in (2**30, 1536 * 2**20, 2**40, 1000)] == ["1Gi", "1536Mi", "1Ti", "1000"]


async def test_a_retained_volume_can_be_bound_again(sim: Sim) -> None:
    sim.create(PVCS, claim("home", "ceph-rbd-retain"))
    await sim.settle()
    (sim.data("home") / "kept.txt").write_text("still here")
    pv_name = sim.get(PVCS, "home")["spec"]["volumeName"]  # type: ignore[index]
    sim.delete(PVCS, "home")
    await sim.settle()
    sim.create(PVCS, claim("home", "ceph-rbd-retain", volumeName=pv_name))
    await sim.settle()
    assert sim.get(PVCS, "home")["status"]["phase"] == "Pending"  # type: ignore[index]  # claimRef: the old uid
    sim.patch(PVS, pv_name, {"spec": {"claimRef": None}})  # what an administrator does to reuse it
    await sim.settle()
    pvc = sim.get(PVCS, "home")
    assert pvc is not None and pvc["status"]["phase"] == "Bound"
    assert sim.get(PVS, pv_name)["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]  # type: ignore[index]
    assert (sim.data("home") / "kept.txt").read_text() == "still here"
