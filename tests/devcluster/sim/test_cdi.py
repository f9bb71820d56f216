"""CDI DataVolumes and DataSources over the simulated CSI, driven through the API verbs of a DevCluster."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.resources import find
from gpuworkspace_devcluster.sim.base import SimController
from gpuworkspace_devcluster.sim.cdi import CdiController, claim_metadata, render_claim_spec
from gpuworkspace_devcluster.sim.context import SimContext
from gpuworkspace_devcluster.sim.csi import CsiController, claim_volume_dir
from gpuworkspace_devcluster.sim.topology import ROOTFS_ANNOTATION

MERGE = "application/merge-patch+json"
NAMESPACES, PVCS, PODS = (
    find("", "v1", "namespaces"),
    find("", "v1", "persistentvolumeclaims"),
    find("", "v1", "pods"),
)
EVENTS, SCS = find("", "v1", "events"), find("storage.k8s.io", "v1", "storageclasses")
DVS, DATASOURCES = (
    find("cdi.kubevirt.io", "v1beta1", "datavolumes"),
    find("cdi.kubevirt.io", "v1beta1", "datasources"),
)
IMAGES, WORK = "vm-images", "gpu-workspaces"
GOLDEN, DATASOURCE = "ubuntu-24-04-gpu-golden", "ubuntu-24-04-gpu"
RBD_CLASS = {
    "metadata": {"name": "ceph-rbd"},
    "provisioner": "rbd.csi.ceph.com",
    "parameters": {"pool": "replicapool"},
}


def dv(name: str, source: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body = (
        {"sourceRef": {"kind": "DataSource", "name": DATASOURCE, "namespace": IMAGES}}
        if source is None
        else source
    )
    storage = {"resources": {"requests": {"storage": "2Gi"}}, "storageClassName": "ceph-rbd"}
    return {"metadata": {"name": name}, "spec": body | {"storage": storage} | spec}


def golden_claim(name: str = GOLDEN) -> dict[str, Any]:
    spec = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "2Gi"}},
        "storageClassName": "ceph-rbd",
    }
    return {"metadata": {"name": name, "annotations": {ROOTFS_ANNOTATION: "ubuntu-24.04"}}, "spec": spec}


@dataclass
class Sim:
    cluster: DevCluster
    ctx: SimContext
    controllers: list[SimController]
    phases: list[tuple[str, str, str]] = field(default_factory=list)  # (dv, phase, progress) as written

    def get(self, rt: Any, ns: str, name: str) -> dict[str, Any] | None:
        return self.cluster.store.get(rt, ns, name)

    def create(self, rt: Any, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.cluster.verbs.create(rt, ns, body)[0]

    def events(self, ns: str, name: str, reason: str | None = None) -> list[dict[str, Any]]:
        items = self.cluster.store.items(EVENTS, ns)
        return [e for e in items if e["involvedObject"]["name"] == name and reason in (None, e["reason"])]

    def phase(self, ns: str, name: str) -> str:
        return ((self.get(DVS, ns, name) or {}).get("status") or {}).get("phase", "")

    def condition(self, ns: str, name: str, kind: str) -> dict[str, Any]:
        conds = ((self.get(DVS, ns, name) or {}).get("status") or {}).get("conditions") or []
        return next(c for c in conds if c["type"] == kind)

    async def settle(self) -> None:
        for _ in range(6):
            for ctl in self.controllers:
                await ctl.settle()
            await self.cluster.controllers.settle()


async def eventually(check: Callable[[], Any], within: float = 5.0) -> Any:
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(0.02)


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[Sim]:
    async with DevCluster(tmp_path / "state") as cluster:
        ctx = SimContext(verbs=cluster.verbs, state_dir=tmp_path / "state", pod_runtime=cluster.pod_runtime)
        s = Sim(cluster, ctx, [CsiController(ctx), CdiController(ctx, clone_duration_s=0.4)])
        for ns in (IMAGES, WORK):
            s.create(NAMESPACES, "", {"metadata": {"name": ns}})
        default = {"annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}
        s.create(SCS, "", RBD_CLASS | {"metadata": RBD_CLASS["metadata"] | default})
        wffc = {"metadata": {"name": "ceph-rbd-wffc"}, "volumeBindingMode": "WaitForFirstConsumer"}
        s.create(SCS, "", RBD_CLASS | wffc)
        s.create(SCS, "", {"metadata": {"name": "cephfs"}, "provisioner": "cephfs.csi.ceph.com"})

        def record(key: Any, event: Any) -> None:
            if key == DVS.key and event.type != "DELETED":
                status = event.obj.get("status") or {}
                entry = (event.obj["metadata"]["name"], status.get("phase", ""), status.get("progress", ""))
                if not s.phases or s.phases[-1] != entry:
                    s.phases.append(entry)

        cluster.store.on_change.append(record)
        for ctl in s.controllers:
            await ctl.start()
        try:
            yield s
        finally:
            for ctl in s.controllers:
                await ctl.stop()


async def with_golden(sim: Sim) -> None:
    sim.create(PVCS, IMAGES, golden_claim())
    datasource = {
        "metadata": {"name": DATASOURCE},
        "spec": {"source": {"pvc": {"namespace": IMAGES, "name": GOLDEN}}},
    }
    sim.create(DATASOURCES, IMAGES, datasource)
    await sim.settle()


async def test_clone_from_datasource_reports_progress_and_copies_files(sim: Sim) -> None:
    await with_golden(sim)
    ready = (sim.get(DATASOURCES, IMAGES, DATASOURCE) or {})["status"]
    assert ready["conditions"][0] | {"lastHeartbeatTime": "", "lastTransitionTime": ""} == {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "message": "DataSource is ready to be consumed",
        "lastHeartbeatTime": "",
        "lastTransitionTime": "",
    }
    assert ready["source"] == {"pvc": {"namespace": IMAGES, "name": GOLDEN}}
    sim.create(
        DVS,
        WORK,
        dv(
            "alice-root",
            storage={"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "4Gi"}}},
        ),
    )
    await eventually(lambda: sim.phase(WORK, "alice-root") == "Succeeded")
    mine = [(phase, progress) for name, phase, progress in sim.phases if name == "alice-root"]
    phases = [p for p, _ in mine]
    assert phases.index("CloneScheduled") < phases.index("CloneInProgress") < phases.index("Succeeded")
    progress = [pr for p, pr in mine if p == "CloneInProgress"]
    assert progress[0] == "0.00%" and len(progress) >= 3
    assert [float(p.rstrip("%")) for p in progress] == sorted(float(p.rstrip("%")) for p in progress)
    assert mine[-1] == ("Succeeded", "100.0%")
    root = claim_volume_dir(sim.ctx, WORK, "alice-root")
    assert root is not None and 'VERSION_ID="24.04"' in (root / "etc/os-release").read_text()
    status = (sim.get(DVS, WORK, "alice-root") or {})["status"]
    assert status["claimName"] == "alice-root"
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("Bound", "True", "Bound"),
        ("Ready", "True", ""),
        ("Running", "False", "Completed"),
    ]
    assert sim.condition(WORK, "alice-root", "Bound")["message"] == "PVC alice-root Bound"
    reasons = [
        e["reason"]
        for e in sorted(sim.events(WORK, "alice-root"), key=lambda e: int(e["metadata"]["resourceVersion"]))
    ]
    for reason in ("CloneScheduled", "Bound", "CloneInProgress", "CloneSucceeded"):
        assert reason in reasons
    (done,) = sim.events(WORK, "alice-root", "CloneSucceeded")
    assert done["message"] == f"Successfully cloned from {IMAGES}/{GOLDEN} into {WORK}/alice-root"
    (scheduled,) = sim.events(WORK, "alice-root", "CloneScheduled")
    assert scheduled["message"] == f"Cloning from {IMAGES}/{GOLDEN} into {WORK}/alice-root scheduled"
    pvc = sim.get(PVCS, WORK, "alice-root") or {}
    assert pvc["metadata"]["labels"] == {
        "app": "containerized-data-importer",
        "app.kubernetes.io/component": "storage",
        "app.kubernetes.io/managed-by": "cdi-controller",
    }  # RBD + ReadWriteOnce renders Block: no filling-up suppression label
    (owner,) = pvc["metadata"]["ownerReferences"]
    dv_obj = sim.get(DVS, WORK, "alice-root") or {}
    assert owner == {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "name": "alice-root",
        "uid": dv_obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert pvc["metadata"]["annotations"]["cdi.kubevirt.io/cloneRequest"] == f"{IMAGES}/{GOLDEN}"


async def test_access_modes_are_honoured_exactly(sim: Sim) -> None:
    blank = {"source": {"blank": {}}}
    explicit = {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
        "resources": {"requests": {"storage": "1Gi"}},
    }
    sim.create(DVS, WORK, dv("explicit", blank, storage=explicit))
    sim.create(DVS, WORK, dv("omitted", blank))
    sim.create(
        DVS,
        WORK,
        dv(
            "rwo-only",
            blank,
            storage={"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        ),
    )
    verbatim = {
        "accessModes": ["ReadWriteOncePod"],
        "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "ceph-rbd",
    }
    sim.create(
        DVS, WORK, {"metadata": {"name": "verbatim"}, "spec": {"source": {"blank": {}}, "pvc": verbatim}}
    )
    await eventually(
        lambda: all(
            sim.phase(WORK, n) == "Succeeded" for n in ("explicit", "omitted", "rwo-only", "verbatim")
        )
    )
    specs = {
        n: (sim.get(PVCS, WORK, n) or {})["spec"] for n in ("explicit", "omitted", "rwo-only", "verbatim")
    }
    assert (specs["explicit"]["accessModes"], specs["explicit"]["volumeMode"]) == (
        ["ReadWriteOnce"],
        "Filesystem",
    )
    assert (specs["omitted"]["accessModes"], specs["omitted"]["volumeMode"]) == (["ReadWriteMany"], "Block")
    assert (specs["rwo-only"]["accessModes"], specs["rwo-only"]["volumeMode"]) == (["ReadWriteOnce"], "Block")
    assert (specs["verbatim"]["accessModes"], specs["verbatim"]["resources"]) == (
        ["ReadWriteOncePod"],
        {"requests": {"storage": "1Gi"}},
    )
    # CDI inflates Filesystem requests by the filesystem overhead (5.5 %); Block volumes get the size asked for
    assert specs["explicit"]["resources"]["requests"]["storage"] == str(math.ceil(2**30 / (1 - 0.055)))
    assert specs["omitted"]["resources"]["requests"]["storage"] == "2Gi"
    assert all(s["storageClassName"] == "ceph-rbd" for s in specs.values())
    (imported,) = sim.events(WORK, "omitted", "ImportSucceeded")
    assert imported["message"] == "Successfully imported into PVC omitted"


def test_render_claim_spec_from_the_storage_profile() -> None:
    cephfs = {"metadata": {"name": "cephfs"}, "provisioner": "cephfs.csi.ceph.com"}
    spec = render_claim_spec({"storage": {}}, cephfs, "5Gi", 0.0)
    assert spec == {
        "accessModes": ["ReadWriteMany"],
        "volumeMode": "Filesystem",
        "storageClassName": "cephfs",
        "resources": {"requests": {"storage": "5Gi"}},
    }
    rbd = {"metadata": {"name": "ceph-rbd"}, "provisioner": "rbd.csi.ceph.com"}
    spec = render_claim_spec({"storage": {"volumeMode": "Filesystem"}}, rbd, "2Gi", 0.055)
    assert (
        spec["accessModes"] == ["ReadWriteOnce"] and spec["resources"]["requests"]["storage"] == "2Gi"
    )  # a clone's size


async def test_wait_for_first_consumer_then_clone(sim: Sim) -> None:
    await with_golden(sim)
    storage = {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
        "storageClassName": "ceph-rbd-wffc",
    }
    sim.create(DVS, WORK, dv("late", storage=storage | {"resources": {"requests": {"storage": "2Gi"}}}))
    await sim.settle()
    assert sim.phase(WORK, "late") == "WaitForFirstConsumer"
    assert sim.condition(WORK, "late", "Bound")["message"] == "PVC late Pending"
    consumer = {"containers": [{"name": "c", "image": "python:3.12"}], "nodeName": "gpu-node-a"}
    consumer["volumes"] = [{"name": "root", "persistentVolumeClaim": {"claimName": "late"}}]
    sim.create(PODS, WORK, {"metadata": {"name": "virt-launcher-late"}, "spec": consumer})
    await eventually(lambda: sim.phase(WORK, "late") == "Succeeded")
    root = claim_volume_dir(sim.ctx, WORK, "late")
    assert root is not None and (root / "etc/os-release").exists()


async def test_missing_source_fails_with_a_reason_then_recovers(sim: Sim) -> None:
    sim.create(DVS, WORK, dv("orphan", {"source": {"pvc": {"namespace": IMAGES, "name": "later"}}}))
    sim.create(DVS, WORK, dv("no-ds"))  # the DataSource does not exist yet either
    await sim.settle()
    assert sim.phase(WORK, "orphan") == "Failed"
    ready = sim.condition(WORK, "orphan", "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "CloneWithoutSource",
        "The source pvc later doesn't exist",
    )
    (event,) = sim.events(WORK, "orphan", "CloneWithoutSource")
    assert event["type"] == "Warning"
    assert sim.condition(WORK, "no-ds", "Bound")["reason"] == "CloneWithoutSource"
    assert sim.get(PVCS, WORK, "orphan") is None
    sim.create(PVCS, IMAGES, golden_claim("later"))
    await with_golden(sim)
    await eventually(lambda: sim.phase(WORK, "orphan") == sim.phase(WORK, "no-ds") == "Succeeded")
    for name in ("orphan", "no-ds"):
        root = claim_volume_dir(sim.ctx, WORK, name)
        assert root is not None and (root / "etc/os-release").exists()


async def test_datasource_status_follows_its_pvc(sim: Sim) -> None:
    sim.create(DATASOURCES, IMAGES, {"metadata": {"name": "empty"}, "spec": {"source": {}}})
    sim.create(
        DATASOURCES,
        IMAGES,
        {"metadata": {"name": "later"}, "spec": {"source": {"pvc": {"namespace": IMAGES, "name": "img"}}}},
    )
    await sim.settle()

    def ready(name: str) -> tuple[str, str, str]:
        cond = (sim.get(DATASOURCES, IMAGES, name) or {})["status"]["conditions"][0]
        return cond["status"], cond["reason"], cond["message"]

    assert ready("empty") == ("False", "NoSource", "No source PVC set")
    assert ready("later") == ("False", "NotFound", "PVC not found")
    sim.create(PVCS, IMAGES, golden_claim("img"))
    await sim.settle()
    assert ready("later") == ("True", "Ready", "DataSource is ready to be consumed")


async def test_clone_waits_while_the_source_is_in_use(sim: Sim) -> None:
    await with_golden(sim)
    user = {"containers": [{"name": "c", "image": "python:3.12"}], "nodeName": "gpu-node-a"}
    user["volumes"] = [{"name": "img", "persistentVolumeClaim": {"claimName": GOLDEN}}]
    sim.create(PODS, IMAGES, {"metadata": {"name": "editor"}, "spec": user})
    sim.create(DVS, WORK, dv("copy"))
    await sim.settle()
    assert sim.phase(WORK, "copy") == "CloneScheduled"
    in_use = sim.events(WORK, "copy", "CloneSourceInUse")
    assert in_use and in_use[0]["message"] == f"pod {IMAGES}/editor using PersistentVolumeClaim {GOLDEN}"
    sim.cluster.verbs.delete(PODS, IMAGES, "editor", {})
    await eventually(lambda: sim.phase(WORK, "copy") == "Succeeded")


async def test_deleting_the_datavolume_deletes_its_claim(sim: Sim) -> None:
    await with_golden(sim)
    sim.create(DVS, WORK, dv("temp"))
    await eventually(lambda: sim.phase(WORK, "temp") == "Succeeded")
    sim.cluster.verbs.delete(DVS, WORK, "temp", {})
    await sim.settle()
    assert sim.get(PVCS, WORK, "temp") is None  # the garbage collector follows the ownerReference


async def test_clone_smaller_than_its_source_is_refused(sim: Sim) -> None:
    await with_golden(sim)
    sim.create(DVS, WORK, dv("tiny", storage={"resources": {"requests": {"storage": "1Gi"}}}))
    await sim.settle()
    assert sim.phase(WORK, "tiny") == "Pending" and sim.get(PVCS, WORK, "tiny") is None
    (event,) = sim.events(WORK, "tiny", "CloneValidationFailed")
    assert event["message"] == "The clone doesn't meet the validation requirements"
    ready = sim.condition(WORK, "tiny", "Ready")
    assert ready["message"] == "target resources requests storage size is smaller than the source"
    sim.create(DVS, WORK, dv("sized", storage={"storageClassName": "ceph-rbd"}))  # no size: the source's
    await eventually(lambda: sim.phase(WORK, "sized") == "Succeeded")
    claim = sim.get(PVCS, WORK, "sized") or {}
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"


async def test_the_claim_carries_the_datavolumes_labels_and_annotations_as_created(sim: Sim) -> None:
    """CDI's newPersistentVolumeClaim: DataVolume labels and annotations are copied once, at creation."""
    await with_golden(sim)
    meta = {
        "name": "bob-root",
        "labels": {"gpuworkspace.dev/disk": "root", "app": "mine", "app.kubernetes.io/managed-by": "me"},
        "annotations": {"gpuworkspace.dev/username": "bob", "cdi.kubevirt.io/storage.contentType": "x"},
    }
    sim.create(DVS, WORK, dv("bob-root") | {"metadata": meta})
    await eventually(lambda: sim.phase(WORK, "bob-root") == "Succeeded")
    pvc = sim.get(PVCS, WORK, "bob-root") or {}
    uid = (sim.get(DVS, WORK, "bob-root") or {})["metadata"]["uid"]
    assert pvc["metadata"]["labels"] == {
        "app": "mine",  # the DataVolume's label over CDI's
        "gpuworkspace.dev/disk": "root",
        "app.kubernetes.io/component": "storage",
        "app.kubernetes.io/managed-by": "cdi-controller",  # the recommended labels over the DataVolume's
    }
    annotations = pvc["metadata"]["annotations"]
    assert annotations["gpuworkspace.dev/username"] == "bob"
    assert annotations["cdi.kubevirt.io/storage.contentType"] == "kubevirt"  # CDI's over the DataVolume's
    assert annotations["cdi.kubevirt.io/createdForDataVolume"] == uid
    patch = {"metadata": {"labels": {"gpuworkspace.dev/disk": "changed"}}}
    sim.cluster.verbs.patch(DVS, WORK, "bob-root", patch, MERGE)
    await sim.settle()
    assert (sim.get(PVCS, WORK, "bob-root") or {})["metadata"]["labels"]["gpuworkspace.dev/disk"] == "root"


def test_claim_metadata_suppresses_the_filling_up_alert_on_filesystem_claims() -> None:
    volume = {"metadata": {"uid": "u", "labels": {"a": "1"}}, "spec": {}}
    labels = claim_metadata(volume, "Filesystem", None)["labels"]
    assert labels["alerts.k8s.io/KubePersistentVolumeFillingUp"] == "disabled" and labels["a"] == "1"
    assert (
        "alerts.k8s.io/KubePersistentVolumeFillingUp" not in claim_metadata(volume, "Block", None)["labels"]
    )
