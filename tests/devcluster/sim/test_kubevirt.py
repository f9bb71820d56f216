"""sim/kubevirt.py, sim/virtlauncher.py, sim/guest.py: VM -> VMI -> launcher pod -> guest; stop/restart/delete, node loss.

Only the KubeVirt controller runs; the tests play scheduler and kubelet by binding the launcher pod
(``ApiServer._bind``) and writing its status, and CDI/CSI by writing DataVolume/PVC status.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.quantity import parse_quantity
from gpuworkspace_devcluster.sim import codeserver, guest
from gpuworkspace_devcluster.sim.base import rt_of
from gpuworkspace_devcluster.sim.context import SimContext
from gpuworkspace_devcluster.sim.kubevirt import (
    VM_FINALIZER,
    VMI_FINALIZER,
    KubeVirtController,
    decide_vm_action,
)
from gpuworkspace_devcluster.sim.virtlauncher import (
    DISK_DIR,
    LAUNCHER_IMAGE,
    SECRET_DIR,
    launcher_resources,
    memory_overhead,
)
from gpuworkspace_devcluster.vmactions import run_vm_action

Obj = dict[str, Any]
NS, VM, DISK, SECRET = (
    "gpu-workspaces",
    "notebook-user01",
    "notebook-user01-root",
    "notebook-user01-cloudinit",
)
VMS, VMIS = rt_of("kubevirt.io", "virtualmachines"), rt_of("kubevirt.io", "virtualmachineinstances")
PODS, PVCS, DVS = (
    rt_of("", "pods"),
    rt_of("", "persistentvolumeclaims"),
    rt_of("cdi.kubevirt.io", "datavolumes"),
)
EVENTS, NAMESPACES, SECRETS = rt_of("", "events"), rt_of("", "namespaces"), rt_of("", "secrets")
MERGE = "application/merge-patch+json"
NOW = "2024-10-01T00:00:00Z"


@asynccontextmanager
async def kubevirt(tmp_path: Path) -> AsyncIterator[tuple[DevCluster, KubeVirtController]]:
    async with DevCluster(tmp_path / "state") as c:
        assert c.state_dir is not None
        ctl = KubeVirtController(SimContext(verbs=c.verbs, state_dir=c.state_dir, pod_runtime=c.pod_runtime))
        c.verbs.create(NAMESPACES, "", {"metadata": {"name": NS}})
        await ctl.start()
        try:
            yield c, ctl
        finally:
            await ctl.stop()


async def settle(c: DevCluster, ctl: KubeVirtController) -> None:
    for _ in range(30):
        await ctl.settle()
        await c.controllers.settle()
        await asyncio.sleep(0)


def make_disk(c: DevCluster, name: str = DISK, dv_phase: str = "Succeeded", pvc: bool = True) -> None:
    storage = {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "ceph-rbd",
        "resources": {"requests": {"storage": "200Gi"}},
    }
    dv = {
        "metadata": {"name": name},
        "spec": {
            "sourceRef": {"kind": "DataSource", "name": "ubuntu-24-04-gpu", "namespace": "vm-images"},
            "storage": storage,
        },
    }
    c.verbs.create(DVS, NS, dv)
    set_status(
        c, DVS, name, {"phase": dv_phase, "progress": "100.0%" if dv_phase == "Succeeded" else "42.0%"}
    )
    if pvc:
        c.verbs.create(
            PVCS, NS, {"metadata": {"name": name}, "spec": {**storage, "volumeName": f"pvc-{name}"}}
        )
        set_status(
            c,
            PVCS,
            name,
            {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "200Gi"}},
        )


def set_status(c: DevCluster, rt: Any, name: str, status: Obj) -> Obj:
    obj = c.store.get(rt, NS, name)
    assert obj is not None
    out, _ = c.verbs.update(rt, NS, name, {**obj, "status": status}, subresource="status")
    return out


def vm_body(strategy: str = "Halted", **spec: Any) -> Obj:
    template_spec = {
        "terminationGracePeriodSeconds": 120,
        "nodeSelector": {"gpuworkspace.dev/pool": "gpu"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "domain": {
            "cpu": {"cores": 16},
            "resources": {"requests": {"memory": "64Gi"}},
            "devices": {
                "disks": [
                    {"name": "root", "disk": {"bus": "virtio"}},
                    {"name": "cloudinit", "disk": {"bus": "virtio"}},
                ],
                "interfaces": [{"name": "default", "masquerade": {}}],
                "gpus": [{"name": "gpu0", "deviceName": "nvidia.com/gpu"}],
            },
        },
        "networks": [{"name": "default", "pod": {}}],
        "volumes": [
            {"name": "root", "dataVolume": {"name": DISK}},
            {"name": "cloudinit", "cloudInitNoCloud": {"secretRef": {"name": SECRET}}},
        ],
    }
    labels = {"kubevirt.io/domain": VM, "platform.aik8s.run/owner": "user01"}
    return {
        "metadata": {"name": VM, "labels": {"platform.aik8s.run/owner": "user01"}},
        "spec": {
            "runStrategy": strategy,
            "template": {"metadata": {"labels": labels}, "spec": template_spec},
            **spec,
        },
    }


def get(c: DevCluster, rt: Any, name: str = VM) -> Obj | None:
    return c.store.get(rt, NS, name)


def launchers(c: DevCluster) -> list[Obj]:
    return [
        p
        for p in c.store.items(PODS, NS)
        if p["metadata"].get("labels", {}).get("kubevirt.io") == "virt-launcher"
    ]


def printable(c: DevCluster) -> str:
    vm = get(c, VMS)
    assert vm is not None
    return str(vm.get("status", {}).get("printableStatus"))


def vmi_cond(c: DevCluster, ctype: str) -> Obj:
    vmi = get(c, VMIS)
    assert vmi is not None
    return next((x for x in vmi["status"].get("conditions", []) if x["type"] == ctype), {})


def events(c: DevCluster, kind: str) -> list[tuple[str, str]]:
    return [
        (e["reason"], e["message"]) for e in c.store.items(EVENTS, NS) if e["involvedObject"]["kind"] == kind
    ]


def run_pod(c: DevCluster, pod: Obj, *, ready: bool, ip: str = "127.10.3.7") -> None:
    name = pod["metadata"]["name"]
    conds = [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": NOW}
        for t in ("PodScheduled", "Initialized")
    ]
    conds += [
        {"type": t, "status": str(ready), "lastProbeTime": None, "lastTransitionTime": NOW}
        for t in ("ContainersReady", "Ready")
    ]
    cs = {
        "name": "compute",
        "ready": ready,
        "restartCount": 0,
        "image": LAUNCHER_IMAGE,
        "imageID": LAUNCHER_IMAGE,
        "started": True,
        "state": {"running": {"startedAt": NOW}},
    }
    current = get(c, PODS, name)
    assert current is not None
    status = {
        **current["status"],
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": NOW,
        "conditions": conds,
        "containerStatuses": [cs],
    }
    set_status(c, PODS, name, status)


async def start_running(c: DevCluster, ctl: KubeVirtController, node: str = "gpu-node-a") -> Obj:
    """Start the VM (runStrategy Always) and play scheduler + kubelet until its launcher is Ready."""
    run_vm_action(c.verbs, NS, VM, "start")
    await settle(c, ctl)
    [pod] = [p for p in launchers(c) if not p["metadata"].get("deletionTimestamp")]
    c.api._bind(pod, {"target": {"name": node}})
    await settle(c, ctl)
    run_pod(c, pod, ready=True)
    await settle(c, ctl)
    return get(c, PODS, pod["metadata"]["name"]) or {}


# --------------------------------------------------------------------------------------- tests
async def test_start_creates_vmi_and_launcher_then_running(tmp_path: Path) -> None:
    async with kubevirt(tmp_path) as (c, ctl):
        make_disk(c)
        c.verbs.create(
            SECRETS, NS, {"metadata": {"name": SECRET}, "stringData": {"userdata": "#cloud-config\n"}}
        )
        c.verbs.create(VMS, NS, vm_body())
        await settle(c, ctl)
        vm = get(c, VMS)
        assert vm is not None and VM_FINALIZER in vm["metadata"]["finalizers"]
        assert get(c, VMIS) is None and printable(c) == "Stopped" and vm["status"]["created"] is False

        run_vm_action(c.verbs, NS, VM, "start")
        await settle(c, ctl)
        vm, vmi = get(c, VMS), get(c, VMIS)
        assert vm is not None and vmi is not None
        [ref] = vmi["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"], ref["blockOwnerDeletion"]) == (
            "VirtualMachine",
            vm["metadata"]["uid"],
            True,
            True,
        )
        assert vmi["metadata"]["labels"] == {"kubevirt.io/domain": VM, "platform.aik8s.run/owner": "user01"}
        assert set(vmi["metadata"]["finalizers"]) == {VM_FINALIZER, VMI_FINALIZER}
        assert vmi["status"]["phase"] == "Scheduling" and printable(c) == "Starting"

        [pod] = launchers(c)
        meta, spec = pod["metadata"], pod["spec"]
        assert (
            meta["name"].startswith(f"virt-launcher-{VM}-")
            and len(meta["name"]) == len(f"virt-launcher-{VM}-") + 5
        )
        assert meta["labels"] == {
            "kubevirt.io": "virt-launcher",
            "kubevirt.io/created-by": vmi["metadata"]["uid"],
            "vm.kubevirt.io/name": VM,
            "kubevirt.io/domain": VM,
            "platform.aik8s.run/owner": "user01",
        }
        assert meta["annotations"]["kubevirt.io/domain"] == VM
        assert meta["ownerReferences"][0]["kind"] == "VirtualMachineInstance"
        [compute] = spec["containers"]
        assert compute["name"] == "compute" and compute["image"] == LAUNCHER_IMAGE
        requests, limits = compute["resources"]["requests"], compute["resources"]["limits"]
        guest = 64 * 1024**3
        assert requests["cpu"] == "1600m" and "cpu" not in limits and "memory" not in limits
        assert parse_quantity(requests["memory"]) == guest + memory_overhead(vmi["spec"], guest)
        assert requests["nvidia.com/gpu"] == limits["nvidia.com/gpu"] == "1"
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["root"]["persistentVolumeClaim"] == {"claimName": DISK}
        assert volumes["cloudinit-udata"]["secret"]["secretName"] == SECRET
        env = {e["name"]: e["value"] for e in compute["env"]}
        mounts = {m["name"]: m["mountPath"] for m in compute["volumeMounts"]}
        assert (
            env["GUEST_ROOT_DISK"] == mounts["root"] and env["GUEST_CLOUD_INIT"] == mounts["cloudinit-udata"]
        )
        assert spec["terminationGracePeriodSeconds"] == 150 and spec["restartPolicy"] == "Never"
        assert spec["nodeSelector"] == {"gpuworkspace.dev/pool": "gpu"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        assert (
            "SuccessfulCreate",
            f"Started the virtual machine by creating the new virtual machine instance {VM}",
        ) in events(c, "VirtualMachine")
        assert ("SuccessfulCreate", f"Created virtual machine pod {meta['name']}") in events(
            c, "VirtualMachineInstance"
        )

        c.api._bind(pod, {"target": {"name": "gpu-node-a"}})
        await settle(c, ctl)
        vmi = get(c, VMIS)
        assert (
            vmi is not None
            and vmi["status"]["phase"] == "Scheduled"
            and vmi["status"]["nodeName"] == "gpu-node-a"
        )
        run_pod(c, pod, ready=False)
        await settle(c, ctl)
        assert get(c, VMIS)["status"]["phase"] == "Running"  # type: ignore[index]
        assert vmi_cond(c, "Ready")["status"] == "False" and not vmi_cond(c, "AgentConnected")
        assert printable(c) == "Running" and get(c, VMS)["status"]["ready"] is False  # type: ignore[index]

        run_pod(c, pod, ready=True)
        await settle(c, ctl)
        vmi, vm = get(c, VMIS), get(c, VMS)
        assert vmi is not None and vm is not None
        status = vmi["status"]
        assert vmi_cond(c, "Ready")["status"] == "True" and vmi_cond(c, "AgentConnected")["status"] == "True"
        assert vmi_cond(c, "LiveMigratable")["reason"] == "DisksNotLiveMigratable"
        assert (
            status["interfaces"][0]["ipAddress"] == "127.10.3.7"
            and status["interfaces"][0]["name"] == "default"
        )
        assert status["activePods"] == {pod["metadata"]["uid"]: "gpu-node-a"}
        assert (
            status["guestOSInfo"]["id"] == "ubuntu"
            and status["launcherContainerImageVersion"] == LAUNCHER_IMAGE
        )
        assert vmi["metadata"]["labels"]["kubevirt.io/nodeName"] == "gpu-node-a"
        assert vm["status"]["printableStatus"] == "Running" and vm["status"]["ready"] is True
        assert vm["status"]["created"] is True and vm["status"]["runStrategy"] == "Always"
        assert {x["type"] for x in vm["status"]["conditions"]} >= {
            "Ready",
            "AgentConnected",
            "LiveMigratable",
        }
        assert ("Started", "VirtualMachineInstance started.") in events(c, "VirtualMachineInstance")


async def test_stop_deletes_vmi_after_its_launcher_keeps_vm_dv_pvc(tmp_path: Path) -> None:
    async with kubevirt(tmp_path) as (c, ctl):
        make_disk(c)
        c.verbs.create(VMS, NS, vm_body())
        await settle(c, ctl)
        pod = await start_running(c, ctl)
        c.controllers.kubelet_nodes.add("gpu-node-a")  # a kubelet finishes the pod's termination
        uid = get(c, VMIS)["metadata"]["uid"]  # type: ignore[index]

        run_vm_action(c.verbs, NS, VM, "stop")
        await settle(c, ctl)
        vmi = get(c, VMIS)
        assert vmi is not None and vmi["metadata"].get("deletionTimestamp")  # held until the pod is gone
        assert get(c, PODS, pod["metadata"]["name"])["metadata"].get("deletionTimestamp")  # type: ignore[index]
        assert printable(c) == "Stopping" and vmi_cond(c, "Ready")["reason"] == "PodTerminating"

        c.verbs.finish_deletion(PODS, NS, pod["metadata"]["name"])  # the kubelet: containers are gone
        await settle(c, ctl)
        assert get(c, VMIS) is None and not launchers(c)
        assert get(c, VMS) is not None and get(c, DVS, DISK) is not None and get(c, PVCS, DISK) is not None
        assert printable(c) == "Stopped" and get(c, VMS)["status"]["ready"] is False  # type: ignore[index]
        assert (
            "SuccessfulDelete",
            f"Stopped the virtual machine by deleting the virtual machine instance {uid}",
        ) in events(c, "VirtualMachine")
        assert ("Stopped", "The VirtualMachineInstance was shut down.") in events(c, "VirtualMachineInstance")

        await start_running(c, ctl)  # and it starts again on the same disk
        assert get(c, VMIS)["spec"]["volumes"][0] == {"name": "root", "dataVolume": {"name": DISK}}  # type: ignore[index]
        assert printable(c) == "Running"


async def test_restart_and_manual_state_change_requests(tmp_path: Path) -> None:
    async with kubevirt(tmp_path) as (c, ctl):
        make_disk(c)
        c.verbs.create(VMS, NS, vm_body())
        await settle(c, ctl)
        await start_running(c, ctl)
        first = get(c, VMIS)["metadata"]["uid"]  # type: ignore[index]
        run_vm_action(c.verbs, NS, VM, "restart")
        await settle(c, ctl)
        vmi, vm = get(c, VMIS), get(c, VMS)
        assert vmi is not None and vm is not None and vmi["metadata"]["uid"] != first
        assert "stateChangeRequests" not in vm["status"] and len(launchers(c)) == 1

        c.verbs.patch(VMS, NS, VM, {"spec": {"runStrategy": "Manual"}}, MERGE)
        await settle(c, ctl)
        assert get(c, VMIS) is not None  # Manual leaves a running VMI alone
        run_vm_action(c.verbs, NS, VM, "stop")
        await settle(c, ctl)
        assert get(c, VMIS) is None and printable(c) == "Stopped"
        assert "stateChangeRequests" not in get(c, VMS)["status"]  # type: ignore[index]
        run_vm_action(c.verbs, NS, VM, "start")
        await settle(c, ctl)
        assert get(c, VMIS) is not None and printable(c) == "Starting"


async def test_vm_deletion_stops_vmi_keeps_referenced_disk_and_collects_template_dv(tmp_path: Path) -> None:
    async with kubevirt(tmp_path) as (c, ctl):
        make_disk(c)
        body = vm_body(
            "Always",
            dataVolumeTemplates=[
                {
                    "metadata": {"name": "scratch"},
                    "spec": {
                        "source": {"blank": {}},
                        "storage": {"resources": {"requests": {"storage": "1Gi"}}},
                    },
                }
            ],
        )
        body["spec"]["template"]["spec"]["volumes"].append(
            {"name": "scratch", "dataVolume": {"name": "scratch"}}
        )
        c.verbs.create(VMS, NS, body)
        await settle(c, ctl)
        vm, dv = get(c, VMS), get(c, DVS, "scratch")
        assert vm is not None and dv is not None
        assert dv["metadata"]["ownerReferences"][0]["uid"] == vm["metadata"]["uid"]
        assert get(c, VMIS) is None and printable(c) == "Provisioning"  # waits for its template DV
        assert ("SuccessfulDataVolumeCreate", "Created DataVolume scratch") in events(c, "VirtualMachine")

        set_status(c, DVS, "scratch", {"phase": "Succeeded", "progress": "100.0%"})
        await settle(c, ctl)
        assert get(c, VMIS) is not None and len(launchers(c)) == 1

        c.verbs.delete(VMS, NS, VM, {})
        await settle(c, ctl)
        assert get(c, VMIS) is None and get(c, VMS) is None and not launchers(c)
        assert get(c, DVS, "scratch") is None  # owned by the VM: collected with it
        assert get(c, DVS, DISK) is not None and get(c, PVCS, DISK) is not None  # referenced: kept


async def test_unschedulable_launcher_and_volume_problems(tmp_path: Path) -> None:
    async with kubevirt(tmp_path) as (c, ctl):
        c.verbs.create(VMS, NS, vm_body("Always"))
        await settle(c, ctl)
        assert printable(c) == "ErrorPvcNotFound" and not launchers(c)
        assert "didn't find PVC notebook-user01-root" in vmi_cond(c, "Synchronized")["message"]

        make_disk(c, dv_phase="CloneInProgress", pvc=False)
        await settle(c, ctl)
        assert printable(c) == "Provisioning" and not launchers(c)
        set_status(c, DVS, DISK, {"phase": "Succeeded", "progress": "100.0%"})
        await settle(c, ctl)
        [pod] = launchers(c)
        assert printable(c) == "Starting"

        message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
        sched = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": NOW,
        }
        set_status(c, PODS, pod["metadata"]["name"], {**pod["status"], "conditions": [sched]})
        await settle(c, ctl)
        assert printable(c) == "ErrorUnschedulable" and vmi_cond(c, "PodScheduled")["message"] == message
        assert get(c, VMIS)["status"]["phase"] == "Scheduling"  # type: ignore[index]


async def test_node_not_ready_keeps_vmi_until_launcher_is_gone(tmp_path: Path) -> None:
    async with kubevirt(tmp_path) as (c, ctl):
        make_disk(c)
        c.verbs.create(VMS, NS, vm_body())
        await settle(c, ctl)
        pod = await start_running(c, ctl)
        name, first = pod["metadata"]["name"], get(c, VMIS)["metadata"]["uid"]  # type: ignore[index]
        c.controllers.kubelet_nodes.add("gpu-node-a")  # its kubelet is dead: nothing finishes terminations

        # The node lifecycle controller marks the pod not Ready, then taint eviction deletes it gracefully.
        not_ready = [
            {**x, "status": "False"} if x["type"] in ("Ready", "ContainersReady") else x
            for x in pod["status"]["conditions"]
        ]
        set_status(c, PODS, name, {**pod["status"], "conditions": not_ready})
        await settle(c, ctl)
        vmi = get(c, VMIS)
        assert (
            vmi is not None
            and vmi["status"]["phase"] == "Running"
            and vmi_cond(c, "Ready")["status"] == "False"
        )
        assert printable(c) == "Running" and get(c, VMS)["status"]["ready"] is False  # type: ignore[index]
        c.verbs.delete(PODS, NS, name, {})
        await settle(c, ctl)
        vmi = get(c, VMIS)
        assert (
            vmi is not None
            and vmi["metadata"]["uid"] == first
            and not vmi["metadata"].get("deletionTimestamp")
        )
        assert vmi["status"]["phase"] == "Running" and len(launchers(c)) == 1  # no second VMI, no second pod

        c.verbs.delete(PODS, NS, name, {"gracePeriodSeconds": 0})  # force-deleted (or fenced out-of-service)
        await settle(c, ctl)
        vmi = get(c, VMIS)
        assert vmi is not None and vmi["metadata"]["uid"] != first  # Always: a new VMI ...
        [new_pod] = launchers(c)
        assert new_pod["metadata"]["name"] != name and not new_pod["spec"].get(
            "nodeName"
        )  # ... free to land anywhere
        assert ("Stopped", "The VirtualMachineInstance crashed.") in events(c, "VirtualMachineInstance")
        c.api._bind(new_pod, {"target": {"name": "gpu-node-b"}})
        run_pod(c, new_pod, ready=True, ip="127.11.0.9")
        await settle(c, ctl)
        assert get(c, VMIS)["status"]["nodeName"] == "gpu-node-b" and printable(c) == "Running"  # type: ignore[index]


def end_pod(c: DevCluster, pod: Obj, phase: str, exit_code: int) -> None:
    """The kubelet reports the compute container terminated (restartPolicy Never: the pod is final)."""
    current = get(c, PODS, pod["metadata"]["name"])
    assert current is not None
    terminated = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": NOW,
        "finishedAt": NOW,
    }
    cs = {
        "name": "compute",
        "ready": False,
        "restartCount": 0,
        "image": LAUNCHER_IMAGE,
        "imageID": LAUNCHER_IMAGE,
        "state": {"terminated": terminated},
    }
    set_status(
        c, PODS, pod["metadata"]["name"], {**current["status"], "phase": phase, "containerStatuses": [cs]}
    )


async def test_rerun_on_failure_restarts_a_crashed_guest_not_a_powered_off_one(tmp_path: Path) -> None:
    async with kubevirt(tmp_path) as (c, ctl):
        make_disk(c)
        c.verbs.create(VMS, NS, vm_body("RerunOnFailure"))
        await settle(c, ctl)
        [pod] = launchers(c)
        c.api._bind(pod, {"target": {"name": "gpu-node-a"}})
        run_pod(c, pod, ready=True)
        await settle(c, ctl)
        first = get(c, VMIS)["metadata"]["uid"]  # type: ignore[index]
        end_pod(c, pod, "Failed", 1)
        await settle(c, ctl)
        vmi = get(c, VMIS)
        assert vmi is not None and vmi["metadata"]["uid"] != first and printable(c) == "Starting"

        [pod] = launchers(c)
        c.api._bind(pod, {"target": {"name": "gpu-node-b"}})
        run_pod(c, pod, ready=True)
        await settle(c, ctl)
        end_pod(c, pod, "Succeeded", 0)  # the guest powered itself off
        await settle(c, ctl)
        assert get(c, VMIS) is None and not launchers(c) and printable(c) == "Stopped"


async def test_start_failures_back_off_as_crash_loop(tmp_path: Path) -> None:
    async with kubevirt(tmp_path) as (c, ctl):
        make_disk(c)
        c.verbs.create(VMS, NS, vm_body("Always"))
        await settle(c, ctl)
        [pod] = launchers(c)
        end_pod(c, pod, "Failed", 1)  # fails before it ever ran
        await settle(c, ctl)
        vm = get(c, VMS)
        assert vm is not None and vm["status"]["startFailure"]["consecutiveFailCount"] == 1
        assert get(c, VMIS) is None and printable(c) == "CrashLoopBackOff"  # waits out retryAfterTimestamp


# ------------------------------------------------------------------------------------ pure parts
@pytest.mark.parametrize(
    ("strategy", "vmi_phase", "requests", "expected"),
    [
        ("Always", None, [], "start"),
        ("Always", "Failed", [], "stop"),
        ("Always", "Running", [{"action": "Stop", "uid": "u1"}, {"action": "Start"}], "stop"),
        ("Halted", "Running", [], "stop"),
        ("Halted", None, [], ""),
        ("Manual", None, [{"action": "Start"}], "start"),
        ("Manual", "Running", [], ""),
        ("RerunOnFailure", "Failed", [], "stop+request-start"),
        ("RerunOnFailure", "Succeeded", [], "stop"),
        ("Once", None, [], "start"),
        ("Once", "Succeeded", [], ""),
    ],
)
def test_decide_vm_action(strategy: str, vmi_phase: str | None, requests: list[Obj], expected: str) -> None:
    vm = {
        "metadata": {"name": "v"},
        "spec": {"runStrategy": strategy},
        "status": {"stateChangeRequests": requests},
    }
    vmi = None if vmi_phase is None else {"metadata": {"uid": "u1"}, "status": {"phase": vmi_phase}}
    assert decide_vm_action(vm, vmi) == expected


def test_launcher_resources_shapes() -> None:
    burst = {
        "domain": {
            "cpu": {"cores": 8},
            "resources": {"requests": {"cpu": "2", "memory": "16Gi"}, "limits": {"cpu": "8"}},
            "devices": {},
        }
    }
    res = launcher_resources(burst)
    assert res["requests"]["cpu"] == "2" and res["limits"] == {"cpu": "8"}  # guaranteed 2, burst to 8
    assert parse_quantity(res["requests"]["memory"]) > 16 * 1024**3
    tiny = launcher_resources(
        {"domain": {"memory": {"guest": "2Gi"}, "devices": {"autoattachGraphicsDevice": False}}}
    )
    assert (
        tiny["requests"]["cpu"] == "100m"
        and "limits" not in tiny
        and tiny["requests"]["ephemeral-storage"] == "50M"
    )
    mig = launcher_resources(
        {
            "domain": {
                "resources": {"requests": {"memory": "8Gi"}},
                "devices": {"gpus": [{"name": "a", "deviceName": "nvidia.com/mig-1g.10gb"}]},
            }
        }
    )
    assert mig["requests"]["nvidia.com/mig-1g.10gb"] == mig["limits"]["nvidia.com/mig-1g.10gb"] == "1"


# ------------------------------------------------------------------------------- the guest
USERDATA = "#cloud-config\n" + yaml.safe_dump(
    {
        "write_files": [
            {
                "path": "/etc/gpuworkspace/singleuser.env",
                "permissions": "0600",
                "content": "# service env\nexport JUPYTER_TOKEN='s3cret'\nHOME=/home/user01\nGREETING=\"hi there\"\n",
            },
            {"path": "/opt/app/banner.txt", "encoding": "b64", "content": "aGVsbG8K"},
            {"path": "/../escape.txt", "content": "no"},
        ],
        "runcmd": ['echo ran > "$GUEST_ROOT/var/runcmd-marker"', ["sh", "-c", "exit 3"]],
        "packages": ["ignored"],
    }
)


def _get(url: str, token: str = "") -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=2) as resp:
        return resp.status, resp.read()


def _put(url: str, body: dict[str, object], token: str) -> int:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="PUT",
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        return resp.status


def test_pure_helpers() -> None:
    mounts = {f"{DISK_DIR}/root": "/host/vol", "/": "/host/rootfs"}
    assert guest.host_dir(f"{DISK_DIR}/root", mounts) == Path("/host/vol")
    assert guest.host_dir(f"{DISK_DIR}/root/etc", mounts) == Path("/host/vol/etc")
    assert guest.host_dir("/tmp/x", mounts) == Path("/host/rootfs/tmp/x")
    assert guest.host_dir("/x", {}) is None
    env = guest.parse_env_file("# c\nexport A='x y'\nB=\"q\"\nC=\n\nnot a pair\n")
    assert env == {"A": "x y", "B": "q", "C": ""}
    argv = guest.server_argv({"JUPYTERHUB_API_TOKEN": "t"}, Path("/r"), "127.1.2.3", Path("/nonexistent"))
    assert argv[0] == "jupyterhub-singleuser" and "--ServerApp.ip=127.1.2.3" in argv
    assert "--ServerApp.root_dir=/r" in argv and "--ServerApp.port=8888" in argv


def test_guest_boots_serves_and_persists(tmp_path: Path) -> None:
    root, secret = tmp_path / "volumes" / "pvc-root", tmp_path / "secret"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text('PRETTY_NAME="Ubuntu 24.04.1 LTS"\nID=ubuntu\n')
    secret.mkdir()
    (secret / "userdata").write_text(USERDATA)
    # outside every devcluster instance's ranges (addresses.py), so another test process's pods never hold it
    ip = f"127.{random.randint(110, 250)}.{random.randint(1, 250)}.{random.randint(2, 250)}"
    env = {
        **os.environ,
        "GPUWORKSPACE_MOUNTS": json.dumps(
            {f"{DISK_DIR}/root": str(root), f"{SECRET_DIR}/cloudinit": str(secret)}
        ),
        "GUEST_ROOT_DISK": f"{DISK_DIR}/root",
        "GUEST_CLOUD_INIT": f"{SECRET_DIR}/cloudinit",
        "GUEST_VMI": "notebook-user01",
        "POD_IP": ip,
    }
    cmd = [sys.executable, "-m", "gpuworkspace_devcluster.sim.guest", "--qemu-timeout", "240s"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline, status = time.monotonic() + 45, 0
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, body = _get(f"http://{ip}:8888/api")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        assert status == 200 and b"version" in body, (
            proc.communicate()[0].decode() if proc.poll() is not None else ""
        )
        # The server's root is the disk: writing /etc/motd through it lands on the disk.
        code = _put(
            f"http://{ip}:8888/api/contents/etc/motd",
            {"type": "file", "format": "text", "content": "welcome\n"},
            "s3cret",
        )
        assert code in (200, 201)
        assert _get(f"http://{ip}:8888/api/contents/opt/app", "s3cret")[0] == 200
        # The golden image's code-server: proxied at /vscode/ behind the server's login, not on the pod IP.
        status, body = _get(f"http://{ip}:8888/vscode/", "s3cret")
        assert status == 200 and codeserver.MARKER.encode() in body
        status, body = _get(f"http://{ip}:8888/vscode/", "wrong")  # redirected to the server's login page
        assert codeserver.MARKER.encode() not in body and b"login" in body.lower()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((ip, guest.CODE_SERVER_PORT), timeout=2).close()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode()
    assert (root / "etc" / "motd").read_text() == "welcome\n"
    assert (root / "etc" / "hostname").read_text() == "notebook-user01\n"
    assert (root / "opt" / "app" / "banner.txt").read_text() == "hello\n"
    assert (root / "etc" / "gpuworkspace" / "singleuser.env").stat().st_mode & 0o777 == 0o600
    assert (root / "var" / "runcmd-marker").read_text() == "ran\n"
    assert (root / "home" / "user01").is_dir()
    assert not (tmp_path / "volumes" / "escape.txt").exists()
    log = (root / "var" / "log" / "cloud-init-output.log").read_text()
    assert "running 'init'" in log and "finished at" in log and "exited with 3" in log
    assert "powering off" in log
