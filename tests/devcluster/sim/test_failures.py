"""Failure injection on a real DevCluster: node NotReady and recovery, the out-of-service taint, NetworkFence,
pod kill, volume fill, fault knobs, and the control API over HTTP."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.resources import find
from gpuworkspace_devcluster.sim.context import SimContext
from gpuworkspace_devcluster.sim.control import control_handlers
from gpuworkspace_devcluster.sim.failures import (
    FaultError,
    OutOfServiceController,
    SimFaults,
    add_out_of_service_taint,
    clear_out_of_service_taint,
    faults_of,
    fill_volume,
    kill_pod_process,
    node_not_ready,
    node_recover,
    refresh_fenced_nodes,
    slow_image_pull,
)
from gpuworkspace_devcluster.sim.netfence import NetworkFenceController, is_fenced
from gpuworkspace_devcluster.sim.workloads import workload_book

NODES, PODS, EVENTS = find("", "v1", "nodes"), find("", "v1", "pods"), find("", "v1", "events")
PVCS, PVS = find("", "v1", "persistentvolumeclaims"), find("", "v1", "persistentvolumes")
FENCES = find("csiaddons.openshift.io", "v1alpha1", "networkfences")
NS = "default"
MERGE = "application/merge-patch+json"


class StubKubelet:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.pids: dict[tuple[str, str], dict[str, int]] = {}

    def stop_heartbeats(self) -> None:
        self.calls.append("stop")

    def resume(self) -> None:
        self.calls.append("resume")

    def container_pids(self, namespace: str, name: str) -> dict[str, int]:
        return self.pids.get((namespace, name), {})


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[DevCluster]:
    async with DevCluster(tmp_path / "state") as c:
        yield c


@pytest.fixture
def ctx(cluster: DevCluster) -> SimContext:
    ctx = SimContext(verbs=cluster.verbs, state_dir=cluster.state_dir, pod_runtime=cluster.pod_runtime)
    for i, name in enumerate(("gpu-node-a", "gpu-node-b")):
        cluster.verbs.create(
            NODES,
            "",
            {
                "metadata": {"name": name},
                "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
                "status": {
                    "addresses": [{"type": "InternalIP", "address": f"127.{10 + i}.0.1"}],
                    "conditions": [
                        {
                            "type": t,
                            "status": s,
                            "reason": r,
                            "message": m,
                            "lastHeartbeatTime": "2027-01-01T00:00:00Z",
                            "lastTransitionTime": "2027-01-01T00:00:00Z",
                        }
                        for t, s, r, m in (
                            ("MemoryPressure", "False", "KubeletHasSufficientMemory", "ok"),
                            ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
                        )
                    ],
                },
            },
        )
        ctx.components[f"kubelet:{name}"] = StubKubelet()
    return ctx


def running_pod(cluster: DevCluster, name: str, node: str = "gpu-node-a", **spec: Any) -> dict[str, Any]:
    created, _ = cluster.verbs.create(
        PODS,
        NS,
        {
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "notebook", "image": "python:3.12"}], **spec},
        },
    )
    status = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}],
        "containerStatuses": [
            {
                "name": "notebook",
                "ready": True,
                "image": "python:3.12",
                "imageID": "",
                "restartCount": 0,
                "state": {"running": {"startedAt": "2027-01-01T00:00:00Z"}},
            }
        ],
    }
    return cluster.verbs.update(PODS, NS, name, {**created, "status": status}, subresource="status")[0]


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == ctype)


def events(cluster: DevCluster, reason: str) -> list[dict[str, Any]]:
    return [
        e for e in cluster.store.items(EVENTS, NS) if e["reason"] == reason
    ]  # Node events go to default too


async def eventually(check: Callable[[], Any], limit_s: float = 5.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not (result := check()):
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)
    return result


# ---------------------------------------------------------------------------------- node failure
async def test_node_not_ready_marks_node_and_pods_like_the_node_controller(
    cluster: DevCluster, ctx: SimContext
) -> None:
    running_pod(cluster, "jupyter-alice")
    seen: list[set[str]] = []
    faults_of(ctx).subscribe(lambda f: seen.append(set(f.unreachable_nodes)))
    node = node_not_ready(ctx, "gpu-node-a")
    assert ctx.components["kubelet:gpu-node-a"].calls == ["stop"]
    for ctype in ("Ready", "MemoryPressure"):
        cond = condition(node, ctype)
        assert (cond["status"], cond["reason"], cond["message"]) == (
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
        )
        assert cond["lastHeartbeatTime"] == "2027-01-01T00:00:00Z"
    taints = {(t["key"], t["effect"]) for t in node["spec"]["taints"]}
    assert taints == {
        ("nvidia.com/gpu", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    }
    pod = cluster.store.get(PODS, NS, "jupyter-alice")
    assert condition(pod, "Ready")["status"] == "False" and pod["status"]["phase"] == "Running"
    assert not pod["metadata"].get("deletionTimestamp")  # the pod stays: an unreachable orphan
    (ev,) = [e for e in events(cluster, "NodeNotReady") if e["type"] == "Warning"]
    assert ev["message"] == "Node is not ready" and ev["involvedObject"]["name"] == "jupyter-alice"
    assert any(
        e["message"] == "Node gpu-node-a status is now: NodeNotReady" for e in events(cluster, "NodeNotReady")
    )
    assert seen and "gpu-node-a" in seen[-1]

    node = node_recover(ctx, "gpu-node-a")
    assert ctx.components["kubelet:gpu-node-a"].calls == ["stop", "resume"]
    assert (
        condition(node, "Ready")["status"] == "True" and condition(node, "Ready")["reason"] == "KubeletReady"
    )
    assert {t["key"] for t in node["spec"]["taints"]} == {"nvidia.com/gpu"}
    assert condition(cluster.store.get(PODS, NS, "jupyter-alice"), "Ready")["status"] == "True"
    assert "gpu-node-a" not in faults_of(ctx).unreachable_nodes


async def test_out_of_service_force_deletes_pods_of_a_not_ready_node(
    cluster: DevCluster, ctx: SimContext
) -> None:
    running_pod(cluster, "jupyter-alice")
    running_pod(
        cluster, "tolerant", tolerations=[{"key": "node.kubernetes.io/out-of-service", "operator": "Exists"}]
    )
    running_pod(cluster, "elsewhere", node="gpu-node-b")
    node_not_ready(ctx, "gpu-node-a")
    removed = add_out_of_service_taint(ctx, "gpu-node-a")
    assert removed == ["default/jupyter-alice"]
    assert cluster.store.get(PODS, NS, "jupyter-alice") is None
    assert cluster.store.get(PODS, NS, "tolerant") is not None and cluster.store.get(PODS, NS, "elsewhere")
    (taint,) = [
        t for t in cluster.store.get(NODES, "", "gpu-node-a")["spec"]["taints"] if "out-of" in t["key"]
    ]
    assert (taint["value"], taint["effect"]) == ("nodeshutdown", "NoExecute") and taint["timeAdded"]
    assert (
        events(cluster, "TaintManagerEviction")[0]["message"]
        == "Marking for deletion Pod default/jupyter-alice"
    )
    clear_out_of_service_taint(ctx, "gpu-node-a")
    assert all("out-of" not in t["key"] for t in cluster.store.get(NODES, "", "gpu-node-a")["spec"]["taints"])


async def test_out_of_service_on_a_ready_node_only_evicts(cluster: DevCluster, ctx: SimContext) -> None:
    running_pod(cluster, "jupyter-alice", node="gpu-node-b")
    assert add_out_of_service_taint(ctx, "gpu-node-b") == []
    pod = cluster.store.get(PODS, NS, "jupyter-alice")
    assert pod["metadata"]["deletionTimestamp"]  # the node's kubelet finishes the graceful deletion
    cond = condition(pod, "DisruptionTarget")
    assert (cond["reason"], cond["message"]) == (
        "DeletionByTaintManager",
        "Taint manager: deleting due to NoExecute taint",
    )
    node_not_ready(ctx, "gpu-node-b")  # ... unless it goes away: then the pod GC force-deletes
    assert cluster.store.get(PODS, NS, "jupyter-alice") is None


async def test_out_of_service_taint_from_a_client_evicts_too(cluster: DevCluster, ctx: SimContext) -> None:
    """``kubectl taint node X node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`` works like the control API."""
    ctl = OutOfServiceController(ctx)
    await ctl.start()
    try:
        running_pod(cluster, "jupyter-alice")
        node_not_ready(ctx, "gpu-node-a")
        taints = cluster.store.get(NODES, "", "gpu-node-a")["spec"]["taints"]
        taint = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
        cluster.verbs.patch(NODES, "", "gpu-node-a", {"spec": {"taints": [*taints, taint]}}, MERGE)
        await eventually(lambda: cluster.store.get(PODS, NS, "jupyter-alice") is None)
        assert [e["message"] for e in events(cluster, "TaintManagerEviction")] == [
            "Marking for deletion Pod default/jupyter-alice"
        ]
    finally:
        await ctl.stop()


async def test_fencing_a_node_kills_its_processes_once(cluster: DevCluster, ctx: SimContext) -> None:
    """A blocklisted node's pods die, even those already force-deleted from the API."""
    killed: list[tuple[str, str, int]] = []
    kubelet = ctx.components["kubelet:gpu-node-a"]
    kubelet.workers = {(NS, "orphan"): object()}
    kubelet.kill_pod = lambda ns, name, sig: killed.append((ns, name, sig)) or 1
    faults_of(ctx).blocklist.add("127.10.0.1/32")
    assert refresh_fenced_nodes(ctx) == {"gpu-node-a"}
    assert killed == [(NS, "orphan", signal.SIGKILL)]
    refresh_fenced_nodes(ctx)
    assert len(killed) == 1  # only on becoming fenced


# ---------------------------------------------------------------------------------- NetworkFence
def fence(name: str, cidrs: list[str], state: str = "Fenced", **spec: Any) -> dict[str, Any]:
    body = {
        "driver": "rbd.csi.ceph.com",
        "cidrs": cidrs,
        "fenceState": state,
        "secret": {"name": "rook-csi-rbd-provisioner", "namespace": "rook-ceph"},
        "parameters": {"clusterID": "devcluster-ceph"},
        **spec,
    }
    return {
        "apiVersion": "csiaddons.openshift.io/v1alpha1",
        "kind": "NetworkFence",
        "metadata": {"name": name},
        "spec": {k: v for k, v in body.items() if v is not None},
    }


def fence_status(cluster: DevCluster, name: str) -> dict[str, Any]:
    return dict(cluster.store.get(FENCES, "", name).get("status") or {})


async def test_network_fence_fences_and_unfences_the_node_in_the_cidr(
    cluster: DevCluster, ctx: SimContext
) -> None:
    ctl = NetworkFenceController(ctx, delay_s=0.05)
    await ctl.start()
    try:
        changes: list[set[str]] = []
        faults_of(ctx).subscribe(lambda f: changes.append(set(f.fenced_nodes)))
        cluster.verbs.create(FENCES, "", fence("gpu-node-a-rbd", ["127.10.0.1/32"]))
        await ctl.settle()
        got = cluster.store.get(FENCES, "", "gpu-node-a-rbd")
        assert "status" not in got or not got["status"].get("result")  # not before the delay
        await eventually(lambda: fence_status(cluster, "gpu-node-a-rbd").get("result"))
        got = cluster.store.get(FENCES, "", "gpu-node-a-rbd")
        assert got["status"] == {"result": "Succeeded", "message": "fencing operation successful"}
        assert got["metadata"]["finalizers"] == ["csiaddons.openshift.io/network-fence"]
        assert is_fenced(ctx, "gpu-node-a") and not is_fenced(ctx, "gpu-node-b")
        assert faults_of(ctx).fenced_nodes == {"gpu-node-a"} and {"gpu-node-a"} in changes

        cluster.verbs.patch(FENCES, "", "gpu-node-a-rbd", {"spec": {"fenceState": "Unfenced"}}, MERGE)
        await eventually(
            lambda: fence_status(cluster, "gpu-node-a-rbd").get("message") == "unfencing operation successful"
        )
        assert not is_fenced(ctx, "gpu-node-a") and faults_of(ctx).fenced_nodes == set()

        cluster.verbs.delete(FENCES, "", "gpu-node-a-rbd", {})
        await eventually(lambda: cluster.store.get(FENCES, "", "gpu-node-a-rbd") is None)
    finally:
        await ctl.stop()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            fence("no-driver", ["127.10.0.1/32"], driver=None),
            "Failed to validate Networkfence parameters: required parameter driver is not specified",
        ),
        (
            fence("bad-cidr", ["not-a-cidr"]),
            'rpc error: code = Internal desc = failed to add blocklist range "not-a-cidr": '
            "invalid CIDR address: not-a-cidr",
        ),
    ],
)
async def test_network_fence_failures(
    cluster: DevCluster, ctx: SimContext, body: dict[str, Any], message: str
) -> None:
    ctl = NetworkFenceController(ctx, delay_s=0)
    await ctl.start()
    try:
        name = body["metadata"]["name"]
        cluster.verbs.create(FENCES, "", body)
        got = await eventually(lambda: fence_status(cluster, name).get("result"))
        assert got == "Failed"
        assert cluster.store.get(FENCES, "", name)["status"]["message"] == message
        assert faults_of(ctx).blocklist == set()
    finally:
        await ctl.stop()


async def test_fence_covers_a_node_registered_later(cluster: DevCluster, ctx: SimContext) -> None:
    ctl = NetworkFenceController(ctx, delay_s=0)
    await ctl.start()
    try:
        cluster.verbs.create(FENCES, "", fence("range", ["127.12.0.0/16"]))
        await eventually(lambda: fence_status(cluster, "range").get("result"))
        assert faults_of(ctx).fenced_nodes == set()
        cluster.verbs.create(
            NODES,
            "",
            {
                "metadata": {"name": "cpu-node-a"},
                "status": {"addresses": [{"type": "InternalIP", "address": "127.12.0.1"}]},
            },
        )
        await eventually(lambda: faults_of(ctx).fenced_nodes == {"cpu-node-a"})
    finally:
        await ctl.stop()


# ------------------------------------------------------------------------- pods, volumes, knobs
async def test_kill_pod_process_signals_the_containers(cluster: DevCluster, ctx: SimContext) -> None:
    running_pod(cluster, "jupyter-alice")
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "import time; time.sleep(60)")
    try:
        ctx.components["kubelet:gpu-node-a"].pids[(NS, "jupyter-alice")] = {"notebook": proc.pid}
        assert kill_pod_process(ctx, NS, "jupyter-alice", signal.SIGTERM) == 1
        assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGTERM
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_fill_volume_brings_the_claim_to_capacity(cluster: DevCluster, ctx: SimContext) -> None:
    cluster.verbs.create(
        PVS,
        "",
        {
            "metadata": {"name": "pvc-1"},
            "spec": {
                "capacity": {"storage": "1Mi"},
                "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": "rbd.csi.ceph.com", "volumeHandle": "0001-vol-1"},
                "claimRef": {"namespace": NS, "name": "home"},
            },
        },
    )
    cluster.verbs.create(
        PVCS,
        NS,
        {
            "metadata": {"name": "home"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Mi"}},
                "volumeName": "pvc-1",
            },
        },
    )
    assert fill_volume(ctx, NS, "home") == 2**20
    assert (ctx.state_dir / "volumes" / "0001-vol-1" / ".devcluster-fill").stat().st_size == 2**20


def test_fault_knobs() -> None:
    faults = SimFaults()
    faults.update_from_json({"slow_pull_s": {"quay.io/jupyter/": 2, "quay.io/": 1}, "slow_disk_s": 0.5})
    assert faults.pull_delay("quay.io/jupyter/minimal-notebook:latest") == 2
    assert faults.pull_delay("quay.io/other:1") == 1 and faults.pull_delay("python:3.12") == 0
    for body, field in (
        ({"slow_disk_s": -1}, "slow_disk_s"),
        ({"slow_pull_s": {"x": "y"}}, "slow_pull_s['x']"),
        ({"nope": 1}, "nope"),
    ):
        with pytest.raises(FaultError) as info:
            faults.update_from_json(body)
        assert info.value.field == field
    assert faults.slow_disk_s == 0.5  # a rejected update changes nothing


# ----------------------------------------------------------------------------- the control API
async def test_control_api_over_http(cluster: DevCluster, ctx: SimContext) -> None:
    cluster.api.config.extra_handlers.update(control_handlers(ctx))
    running_pod(cluster, "jupyter-alice")
    base = f"{cluster.url}/_devcluster/sim"
    async with aiohttp.ClientSession() as http:

        async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
            async with http.request(method, base + path, json=body) as r:
                return r.status, await r.json()

        status, got = await call(
            "PUT", "/workload", {"namespace": NS, "pod": "jupyter-alice", "gpu_util": [[0, 20], [60, 90]]}
        )
        assert status == 200 and got["uid"]
        status, got = await call(
            "PUT", "/workload", {"namespace": NS, "pod": "future", "gpu_util": 5, "pid": 42}
        )
        assert status == 200 and got["uid"] == ""
        assert len((await call("GET", "/workload"))[1]["workloads"]) == 2
        assert workload_book(ctx).sample(uid="", namespace=NS, name="future", now=0).gpu_util == 5

        status, err = await call("PUT", "/workload", {"namespace": NS, "pod": "p", "gpu_util": "lots"})
        assert (
            status == 400
            and err["details"]["causes"][0]["field"] == "gpu_util"
            and "gpu_util" in err["message"]
        )
        status, err = await call("PUT", "/workload", {"namespace": NS, "pod": "p", "gpu_utilization": 1})
        assert status == 400 and err["details"]["causes"][0]["field"] == "gpu_utilization"
        status, err = await call("POST", "/node", {"node": "gpu-node-a", "action": "reboot"})
        assert status == 400 and err["details"]["causes"][0]["field"] == "action"
        status, err = await call("POST", "/node", {"action": "recover"})
        assert status == 400 and err["details"]["causes"][0]["field"] == "node"
        assert (await call("POST", "/node", {"node": "no-such-node", "action": "recover"}))[0] == 404
        assert (await call("GET", "/node"))[0] == 405

        status, got = await call("POST", "/node", {"node": "gpu-node-a", "action": "not-ready"})
        assert status == 200
        assert condition(cluster.store.get(NODES, "", "gpu-node-a"), "Ready")["status"] == "Unknown"
        status, got = await call("POST", "/node", {"node": "gpu-node-a", "action": "out-of-service"})
        assert got["forceDeletedPods"] == ["default/jupyter-alice"]
        await call("POST", "/node", {"node": "gpu-node-a", "action": "clear-out-of-service"})
        await call("POST", "/node", {"node": "gpu-node-a", "action": "recover"})
        assert condition(cluster.store.get(NODES, "", "gpu-node-a"), "Ready")["status"] == "True"

        running_pod(cluster, "victim", node="gpu-node-b")
        status, got = await call(
            "POST", "/pod", {"namespace": NS, "pod": "victim", "action": "kill", "signal": "TERM"}
        )
        assert (status, got["signalled"]) == (200, 0)
        status, got = await call("POST", "/pod", {"namespace": NS, "pod": "victim", "action": "oom"})
        assert (status, got["signalled"]) == (200, 0)
        status, err = await call(
            "POST", "/pod", {"namespace": NS, "pod": "victim", "action": "kill", "signal": "NOPE"}
        )
        assert status == 400 and err["details"]["causes"][0]["field"] == "signal"
        status, err = await call("POST", "/volume", {"namespace": NS, "pvc": "missing", "action": "fill"})
        assert status == 404

        status, got = await call("PUT", "/faults", {"slow_pull_s": {"python:": 3}, "slow_disk_s": 1})
        assert status == 200 and got["slow_pull_s"] == {"python:": 3.0} and faults_of(ctx).slow_disk_s == 1
        status, err = await call("PUT", "/faults", {"slow_disk_s": "slow"})
        assert status == 400 and err["details"]["causes"][0]["field"] == "slow_disk_s"
        assert (await call("DELETE", "/faults"))[1]["slow_pull_s"] == {}
        slow_image_pull(ctx, "quay.io/", 4)
        assert (await call("GET", "/faults"))[1]["slow_pull_s"] == {"quay.io/": 4.0}
        assert (await call("DELETE", "/workload"))[1] == {"removed": 2}
