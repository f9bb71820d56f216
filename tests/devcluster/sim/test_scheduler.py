"""The simulated scheduler: the pure placement core as decision tables, then the controller on a DevCluster."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_devcluster.binding import bind_pod
from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.errors import ApiError
from gpuworkspace_devcluster.resources import find
from gpuworkspace_devcluster.sim.context import SimContext
from gpuworkspace_devcluster.sim.placement import pod_requests, tolerates
from gpuworkspace_devcluster.sim.scheduler import ClaimState, Scheduler, decide_placement
from gpuworkspace_devcluster.sim.topology import apply_topology, load_topology

Obj = dict[str, Any]
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(name: str, *, cpu: str = "8", memory: str = "32Gi", pods: str = "110", **kw: Any) -> Obj:
    allocatable = {
        "cpu": cpu,
        "memory": memory,
        "ephemeral-storage": "100Gi",
        "pods": pods,
        **kw.pop("res", {}),
    }
    conditions = [{"type": "Ready", "status": kw.pop("ready", "True")}]
    spec: Obj = {"taints": kw.pop("taints", [])}
    if kw.pop("cordoned", False):
        spec["unschedulable"] = True
    labels = {"kubernetes.io/hostname": name, **kw.pop("labels", {})}
    assert not kw, kw
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {"allocatable": allocatable, "conditions": conditions},
    }


def gpu_node(name: str, gpus: int = 8, **kw: Any) -> Obj:
    return node(name, cpu="128", memory="1Ti", taints=[GPU_TAINT], res={"nvidia.com/gpu": str(gpus)}, **kw)


def pod(name: str = "p", *, requests: Obj | None = None, limits: Obj | None = None, **spec: Any) -> Obj:
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    phase = spec.pop("phase", "Pending")
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}], **spec},
        "status": {"phase": phase},
    }


def gpu_pod(name: str = "p", n: int = 1, **spec: Any) -> Obj:
    return pod(name, limits={"nvidia.com/gpu": str(n)}, tolerations=[GPU_TOLERATION], **spec)


def affinity(*terms: Obj) -> Obj:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


def expr(key: str, op: str, *values: str) -> Obj:
    return {
        "matchExpressions": [{"key": key, "operator": op, **({"values": list(values)} if values else {})}]
    }


THREE = [gpu_node("gpu-a", 2), gpu_node("gpu-b", 2), node("cpu-a", labels={"pool": "cpu"})]
EIGHT_GPUS_USED = {"gpu-a": [gpu_pod(f"g{i}", nodeName="gpu-a") for i in range(8)]}
NO_VICTIMS, NOT_HELPFUL = (
    "No preemption victims found for incoming pod",
    "Preemption is not helpful for scheduling",
)


def rwo(name: str = "data", **kw: Any) -> ClaimState:
    return ClaimState(name, **kw)


@pytest.mark.parametrize(
    ("the_pod", "nodes", "on_nodes", "claims", "want_node", "want_message"),
    [
        pytest.param(pod(), THREE, {}, [], "cpu-a", "", id="untainted-node-only"),
        pytest.param(
            gpu_pod("ninth"),
            [gpu_node("gpu-a", 8)],
            EIGHT_GPUS_USED,
            [],
            None,
            f"0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available: 1 {NO_VICTIMS}.",
            id="9th-exclusive-gpu-pod-on-8-gpu-node",
        ),
        pytest.param(
            pod(limits={"nvidia.com/gpu": "1"}),
            THREE,
            {},
            [],
            None,
            "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint "
            f"{{nvidia.com/gpu: present}}. preemption: 0/3 nodes are available: 1 {NO_VICTIMS}, 2 {NOT_HELPFUL}.",
            id="gpu-without-toleration",
        ),
        pytest.param(gpu_pod(), THREE, {}, [], "gpu-a", "", id="gpu-least-allocated-then-name"),
        pytest.param(
            gpu_pod(),
            THREE,
            {"gpu-a": [pod("busy", requests={"cpu": "64"}, nodeName="gpu-a")]},
            [],
            "gpu-b",
            "",
            id="least-allocated",
        ),
        pytest.param(
            gpu_pod(),
            THREE,
            {"gpu-a": [gpu_pod(f"x{i}", nodeName="gpu-a", phase="Succeeded") for i in range(2)]},
            [],
            "gpu-a",
            "",
            id="terminal-pods-free-resources",
        ),
        pytest.param(
            pod(nodeSelector={"pool": "gpu"}),
            THREE,
            {},
            [],
            None,
            "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 node(s) had "
            f"untolerated taint {{nvidia.com/gpu: present}}. preemption: 0/3 nodes are available: 3 {NOT_HELPFUL}.",
            id="node-selector",
        ),
        pytest.param(
            pod(affinity=affinity(expr("pool", "In", "cpu"))), THREE, {}, [], "cpu-a", "", id="aff-in"
        ),
        pytest.param(
            gpu_pod(affinity=affinity(expr("pool", "NotIn", "cpu"))),
            THREE,
            {},
            [],
            "gpu-a",
            "",
            id="aff-notin",
        ),
        pytest.param(
            pod(affinity=affinity(expr("pool", "Exists"))), THREE, {}, [], "cpu-a", "", id="aff-exists"
        ),
        pytest.param(
            gpu_pod(affinity=affinity(expr("pool", "DoesNotExist"))),
            THREE,
            {},
            [],
            "gpu-a",
            "",
            id="aff-absent",
        ),
        pytest.param(
            gpu_pod(affinity=affinity(expr("rank", "Gt", "5"))),
            [gpu_node("a", labels={"rank": "3"}), gpu_node("b", labels={"rank": "9"})],
            {},
            [],
            "b",
            "",
            id="aff-gt",
        ),
        pytest.param(
            gpu_pod(affinity=affinity(expr("rank", "Lt", "5"))),
            [gpu_node("a", labels={"rank": "3"}), gpu_node("b", labels={"rank": "x"})],
            {},
            [],
            "a",
            "",
            id="aff-lt",
        ),
        pytest.param(
            gpu_pod(
                affinity=affinity(expr("pool", "In", "tpu"), expr("kubernetes.io/hostname", "In", "gpu-b"))
            ),
            THREE,
            {},
            [],
            "gpu-b",
            "",
            id="aff-terms-ored",
        ),
        pytest.param(
            gpu_pod(
                affinity=affinity(
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["cpu-a"]}]}
                )
            ),
            THREE,
            {},
            [],
            None,
            "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't satisfy plugin(s) "
            f"[NodeAffinity]. preemption: 0/3 nodes are available: 1 {NO_VICTIMS}, 2 {NOT_HELPFUL}.",
            id="aff-match-fields",
        ),
        pytest.param(
            pod(),
            [node("a", cordoned=True), node("b", ready="False"), node("c", ready="Unknown")],
            {},
            [],
            None,
            "0/3 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, 1 node(s) "
            "had untolerated taint {node.kubernetes.io/unreachable: }, 1 node(s) were unschedulable. "
            f"preemption: 0/3 nodes are available: 3 {NOT_HELPFUL}.",
            id="cordoned-notready-unreachable",
        ),
        pytest.param(
            pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]),
            [node("a", cordoned=True)],
            {},
            [],
            "a",
            "",
            id="tolerates-cordon",
        ),
        pytest.param(
            pod(requests={"cpu": "6", "memory": "40Gi", "ephemeral-storage": "1Gi"}),
            [node("a"), node("b", cpu="4")],
            {"a": [pod("x", requests={"cpu": "3"}, nodeName="a")]},
            [],
            None,
            "0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient memory. "
            f"preemption: 0/2 nodes are available: 2 {NO_VICTIMS}.",
            id="insufficient-several",
        ),
        pytest.param(
            pod(),
            [node("a", pods="1")],
            {"a": [pod("x", nodeName="a")]},
            [],
            None,
            f"0/1 nodes are available: 1 Too many pods. preemption: 0/1 nodes are available: 1 {NO_VICTIMS}.",
            id="too-many-pods",
        ),
        pytest.param(
            pod(requests={"cpu": "1"}, preemptionPolicy="Never"),
            [node("a", cpu="500m")],
            {},
            [],
            None,
            "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never.",
            id="preemption-never",
        ),
        pytest.param(pod(), [], {}, [], None, "no nodes available to schedule pods", id="no-nodes"),
        pytest.param(
            pod(),
            THREE,
            {},
            [rwo(bound=False)],
            None,
            "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. "
            f"preemption: 0/3 nodes are available: 3 {NOT_HELPFUL}.",
            id="unbound-immediate-pvc",
        ),
        pytest.param(
            pod(),
            THREE,
            {},
            [rwo(exists=False)],
            None,
            '0/3 nodes are available: persistentvolumeclaim "data" not found. '
            f"preemption: 0/3 nodes are available: 3 {NOT_HELPFUL}.",
            id="missing-pvc",
        ),
        pytest.param(
            pod(), THREE, {}, [rwo(bound=False, wait_for_first_consumer=True)], "cpu-a", "", id="wffc"
        ),
        pytest.param(
            gpu_pod(), THREE, {}, [rwo(attached_to=("gpu-b",))], "gpu-b", "", id="attached-rwo-pins-its-node"
        ),
        pytest.param(
            gpu_pod(),
            THREE,
            {},
            [rwo(access_modes=("ReadWriteMany",), attached_to=("gpu-b",))],
            "gpu-a",
            "",
            id="rwx",
        ),
        pytest.param(
            gpu_pod(nodeSelector={"kubernetes.io/hostname": "gpu-a"}),
            THREE,
            {},
            [rwo(attached_to=("gpu-b",))],
            None,
            "0/3 nodes are available: 1 node(s) had volume node affinity conflict, 2 node(s) didn't match Pod's "
            f"node affinity/selector. preemption: 0/3 nodes are available: 3 {NOT_HELPFUL}.",
            id="attached-elsewhere",
        ),
        pytest.param(
            gpu_pod(),
            THREE,
            {},
            [
                rwo(
                    pv_node_affinity=affinity(expr("kubernetes.io/hostname", "In", "gpu-b"))["nodeAffinity"][
                        "requiredDuringSchedulingIgnoredDuringExecution"
                    ]
                )
            ],
            "gpu-b",
            "",
            id="pv-node-affinity",
        ),
        pytest.param(
            pod(),
            [node("a")],
            {},
            [rwo(access_modes=("ReadWriteOncePod",), rwop_users=("ns/other",))],
            None,
            "0/1 nodes are available: 1 node has pod using PersistentVolumeClaim with the same name and "
            f"ReadWriteOncePod access mode. preemption: 0/1 nodes are available: 1 {NO_VICTIMS}.",
            id="rwop-in-use",
        ),
    ],
)
def test_decide_placement(
    the_pod: Obj,
    nodes: list[Obj],
    on_nodes: dict[str, list[Obj]],
    claims: list[ClaimState],
    want_node: str | None,
    want_message: str,
) -> None:
    placement = decide_placement(the_pod, nodes, on_nodes, claims)
    assert (placement.node, placement.message) == (want_node, want_message)


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        pytest.param(
            {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "1"}}}]},
            {"cpu": "1", "nvidia.com/gpu": "2"},
            id="limits-default-requests",
        ),
        pytest.param(
            {
                "containers": [
                    {"resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "2", "memory": "1Gi"}}}
                ]
            },
            {"cpu": "0.5", "memory": "1Gi"},
            id="per-resource-default",
        ),
        pytest.param(
            {
                "containers": [
                    {"resources": {"requests": {"cpu": "1"}}},
                    {"resources": {"requests": {"cpu": "1"}}},
                ],
                "initContainers": [{"resources": {"requests": {"cpu": "3", "memory": "1Gi"}}}],
            },
            {"cpu": "3", "memory": "1Gi"},
            id="init-max",
        ),
        pytest.param(
            {
                "containers": [{"resources": {"requests": {"cpu": "1"}}}],
                "initContainers": [
                    {"restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                    {"resources": {"requests": {"cpu": "2"}}},
                ],
            },
            {"cpu": "3"},
            id="sidecar-init",
        ),
        pytest.param(
            {"containers": [{"resources": {"requests": {"cpu": "1"}}}], "overhead": {"cpu": "250m"}},
            {"cpu": "1.25"},
            id="overhead",
        ),
        pytest.param(
            {"containers": [{"resources": {"requests": {"storage": "1Gi"}}}]}, {}, id="not-a-pod-resource"
        ),
    ],
)
def test_pod_requests(spec: Obj, want: dict[str, str]) -> None:
    got = pod_requests({"spec": spec})
    assert {k: v for k, v in got.items() if v} == {
        k: Decimal(v) if k == "cpu" else _bytes(v) for k, v in want.items()
    }


def _bytes(v: str) -> Decimal:
    return Decimal(2**30) if v == "1Gi" else Decimal(v)


@pytest.mark.parametrize(
    ("toleration", "want"),
    [
        pytest.param({"key": "nvidia.com/gpu", "operator": "Exists"}, True, id="exists"),
        pytest.param({"key": "nvidia.com/gpu", "value": "present"}, True, id="equal"),
        pytest.param({"key": "nvidia.com/gpu", "value": "absent"}, False, id="equal-other-value"),
        pytest.param({"operator": "Exists"}, True, id="everything"),
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, False, id="effect"
        ),
        pytest.param({"key": "other", "operator": "Exists"}, False, id="key"),
    ],
)
def test_tolerates(toleration: Obj, want: bool) -> None:
    assert tolerates(toleration, GPU_TAINT) is want


# ------------------------------------------------------------------ controller
PODS = find("", "v1", "pods")
EVENTS = find("", "v1", "events")
PVCS = find("", "v1", "persistentvolumeclaims")
PVS = find("", "v1", "persistentvolumes")
SCS = find("storage.k8s.io", "v1", "storageclasses")
VAS = find("storage.k8s.io", "v1", "volumeattachments")

ONE_GPU_NODE = """
nodes:
  - name: gpu-node-a
    cpu: "128"
    memory: 1Ti
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
    gpus: {model: NVIDIA H100 80GB HBM3, count: 8}
  - {name: cpu-node-a, cpu: "32", memory: 128Gi}
namespaces: [gpu-workspaces]
"""


def events_for(c: DevCluster, name: str) -> list[tuple[str, str, str, str]]:
    return [
        (e["type"], e["reason"], e["message"], e["source"]["component"])
        for e in c.store.items(EVENTS, "gpu-workspaces")
        if e["involvedObject"]["name"] == name
    ]


def workspace_pod(name: str, **spec: Any) -> Obj:
    gpus = spec.pop("gpus", 1)
    return {
        "metadata": {"name": name},
        "spec": {
            "tolerations": [GPU_TOLERATION],
            "containers": [
                {
                    "name": "notebook",
                    "image": "python:3.12",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
            **spec,
        },
    }


async def eventually(check: Any, seconds: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_ninth_gpu_pod_stays_pending_until_a_gpu_frees(tmp_path: Path) -> None:
    topo_file = tmp_path / "topo.yaml"
    topo_file.write_text(ONE_GPU_NODE)
    async with DevCluster(tmp_path / "state") as c:
        ctx = SimContext(
            verbs=c.verbs,
            state_dir=tmp_path / "state",
            pod_runtime=c.pod_runtime,
            topology=load_topology(topo_file),
        )
        await apply_topology(ctx)
        sched = Scheduler(ctx)
        await sched.start()
        try:
            for i in range(9):
                c.verbs.create(PODS, "gpu-workspaces", workspace_pod(f"jupyter-{i}"))
            c.verbs.create(PODS, "gpu-workspaces", workspace_pod("other", schedulerName="my-scheduler"))
            c.verbs.create(PODS, "gpu-workspaces", workspace_pod("preset", nodeName="cpu-node-a"))
            await sched.settle()

            for i in range(8):
                p = c.store.get(PODS, "gpu-workspaces", f"jupyter-{i}")
                assert p["spec"]["nodeName"] == "gpu-node-a"
                (cond,) = p["status"]["conditions"]
                assert (cond["type"], cond["status"]) == ("PodScheduled", "True")
                assert events_for(c, f"jupyter-{i}") == [
                    (
                        "Normal",
                        "Scheduled",
                        f"Successfully assigned gpu-workspaces/jupyter-{i} to gpu-node-a",
                        "default-scheduler",
                    )
                ]
            ninth = c.store.get(PODS, "gpu-workspaces", "jupyter-8")
            message = (
                "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. "
                "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
            )
            assert "nodeName" not in ninth["spec"] and ninth["status"]["phase"] == "Pending"
            (cond,) = ninth["status"]["conditions"]
            assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
                "PodScheduled",
                "False",
                "Unschedulable",
                message,
            )
            assert events_for(c, "jupyter-8") == [
                ("Warning", "FailedScheduling", message, "default-scheduler")
            ]
            assert "nodeName" not in c.store.get(PODS, "gpu-workspaces", "other")["spec"]
            assert events_for(c, "other") == events_for(c, "preset") == []

            # A bound pod goes away (no kubelet here: the control plane finishes its deletion) → retried.
            c.verbs.delete(PODS, "gpu-workspaces", "jupyter-3", {})
            await c.controllers.settle()
            await eventually(lambda: c.store.get(PODS, "gpu-workspaces", "jupyter-8")["spec"].get("nodeName"))
            ninth = c.store.get(PODS, "gpu-workspaces", "jupyter-8")
            assert ninth["status"]["conditions"][-1]["status"] == "True"
            assert (
                "Normal",
                "Scheduled",
                "Successfully assigned gpu-workspaces/jupyter-8 to gpu-node-a",
                "default-scheduler",
            ) in events_for(c, "jupyter-8")
        finally:
            await sched.stop()


async def test_volumes_pin_and_wait_for_first_consumer(tmp_path: Path) -> None:
    async with DevCluster(tmp_path / "state") as c:
        ctx = SimContext(verbs=c.verbs, state_dir=tmp_path / "state", pod_runtime=c.pod_runtime)
        await apply_topology(ctx)
        sched = Scheduler(ctx)
        await sched.start()
        try:
            ns = "gpu-workspaces"
            claim = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
            c.verbs.create(PVCS, ns, {"metadata": {"name": "home"}, "spec": claim})
            vol = {"name": "home", "persistentVolumeClaim": {"claimName": "home"}}
            c.verbs.create(PODS, ns, workspace_pod("early", volumes=[vol]))
            await sched.settle()
            assert "unbound immediate" in events_for(c, "early")[0][2]

            # The provisioner binds the claim; the volume is attached on gpu-node-b: the pod follows it.
            pv = {
                "metadata": {"name": "pvc-home"},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "csi": {"driver": "rbd.csi.ceph.com", "volumeHandle": "h1"},
                    "claimRef": {"namespace": ns, "name": "home"},
                },
            }
            c.verbs.create(PVS, "", pv)
            va = {
                "metadata": {"name": "csi-abc"},
                "spec": {
                    "attacher": "rbd.csi.ceph.com",
                    "nodeName": "gpu-node-b",
                    "source": {"persistentVolumeName": "pvc-home"},
                },
            }
            va_obj, _ = c.verbs.create(VAS, "", va)
            c.verbs.update(VAS, "", "csi-abc", {**va_obj, "status": {"attached": True}}, subresource="status")
            c.verbs.delete(PODS, ns, "early", {})
            pvc = c.store.get(PVCS, ns, "home")
            pvc, _ = c.verbs.update(
                PVCS, ns, "home", {**pvc, "spec": {**pvc["spec"], "volumeName": "pvc-home"}}
            )
            c.verbs.update(PVCS, ns, "home", {**pvc, "status": {"phase": "Bound"}}, subresource="status")
            c.verbs.create(PODS, ns, workspace_pod("pinned", volumes=[vol]))
            await sched.settle()
            assert c.store.get(PODS, ns, "pinned")["spec"]["nodeName"] == "gpu-node-b"
            other = 'persistentvolumeclaim "nope" not found'
            c.verbs.create(
                PODS,
                ns,
                workspace_pod(
                    "missing", volumes=[{"name": "x", "persistentVolumeClaim": {"claimName": "nope"}}]
                ),
            )
            await sched.settle()
            assert other in events_for(c, "missing")[0][2]

            # WaitForFirstConsumer: the scheduler picks a node for the claim, binds the pod once it is bound.
            c.verbs.create(
                SCS,
                "",
                {
                    "metadata": {"name": "local"},
                    "provisioner": "x",
                    "volumeBindingMode": "WaitForFirstConsumer",
                },
            )
            c.verbs.create(
                PVCS, ns, {"metadata": {"name": "scratch"}, "spec": {**claim, "storageClassName": "local"}}
            )
            c.verbs.create(
                PODS,
                ns,
                workspace_pod(
                    "late", volumes=[{"name": "s", "persistentVolumeClaim": {"claimName": "scratch"}}]
                ),
            )
            await sched.settle()
            scratch = c.store.get(PVCS, ns, "scratch")
            chosen = scratch["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
            assert chosen.startswith("gpu-node-") and "nodeName" not in c.store.get(PODS, ns, "late")["spec"]
            scratch, _ = c.verbs.update(
                PVCS, ns, "scratch", {**scratch, "spec": {**scratch["spec"], "volumeName": "pv-s"}}
            )
            c.verbs.update(
                PVCS, ns, "scratch", {**scratch, "status": {"phase": "Bound"}}, subresource="status"
            )
            await sched.settle()
            assert c.store.get(PODS, ns, "late")["spec"]["nodeName"] == chosen
        finally:
            await sched.stop()


async def test_bind_pod_has_the_registry_answers(tmp_path: Path) -> None:
    async with DevCluster(tmp_path / "state") as c:
        created, _ = c.verbs.create(PODS, "default", workspace_pod("p"))
        bound = bind_pod(c.verbs, created, "n1")
        assert bound["spec"]["nodeName"] == "n1"
        assert bound["status"]["conditions"][-1]["type"] == "PodScheduled"
        with pytest.raises(ApiError) as info:
            bind_pod(c.verbs, created, "n2")
        assert info.value.code == 409 and 'is already assigned to node "n1"' in info.value.message
        with pytest.raises(ApiError) as info:
            bind_pod(c.verbs, created, "n2", uid="other")
        assert info.value.code == 409 and "Precondition failed: UID in precondition" in info.value.message
