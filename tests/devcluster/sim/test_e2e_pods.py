"""End to end with kubectl only: single-user pods on the seed's RBD home, Multi-Attach, GPU exhaustion.

Each test starts ``BackgroundCluster(tmp_path / "state", simulate=True)`` (3 nodes, scheduler, kubelets
running real processes, RBD-like CSI) and drives it with the kubectl binary, plus plain HTTP to pod IPs
(every pod binds its own loopback address). Waiting is ``kubectl wait`` or polling with a deadline; no
fixed sleep decides an assertion. After the cluster is closed, no container process may be left.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuworkspace_devcluster.sim.procs import marked_processes
from gpuworkspace_devcluster.sim.topology import DEFAULT_TOPOLOGY
from gpuworkspace_devcluster.testing import BackgroundCluster

from ..conftest import Kubectl

pytestmark = pytest.mark.kubectl
NS = "gpu-workspaces"
NOTEBOOK_IMAGE = "quay.io/jupyter/base-notebook:2024-12-02"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TOKEN = "e2e-pods-token"  # the Jupyter server's token (JUPYTER_TOKEN)
Obj = dict[str, Any]


# ------------------------------------------------------------------ fixtures and helpers
def _eight_whole_cards(tmp_path: Path) -> str:
    """The default topology with every card of gpu-node-a offered whole (8 whole ``nvidia.com/gpu``)."""
    topo = yaml.safe_load(DEFAULT_TOPOLOGY.read_text())
    node = next(n for n in topo["nodes"] if n["name"] == "gpu-node-a")
    # a new mapping: gpu-node-b's ``gpus`` is the same YAML anchor and keeps its sharing
    node["gpus"] = {k: v for k, v in node["gpus"].items() if k not in ("sharing", "mig_config")}
    path = tmp_path / "topology-8-whole.yaml"
    path.write_text(yaml.safe_dump(topo))
    return str(path)


@pytest.fixture
def kubectl(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Kubectl]:
    """kubectl against a simulated cluster; a test parametrized ``topology="eight-whole-cards"`` changes its shape."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed on this machine")
    callspec = getattr(request.node, "callspec", None)
    variant = callspec.params.get("topology") if callspec else None
    topology = _eight_whole_cards(tmp_path) if variant == "eight-whole-cards" else None
    with BackgroundCluster(tmp_path / "state", simulate=True, topology=topology) as bg:
        kc = Kubectl(bg.kubeconfig)
        try:
            yield kc
        finally:
            listed = kc("get", "pods", "-A", "-o", "json", check=False).stdout
            ids = [
                cs["containerID"].split("://", 1)[-1]
                for pod in (json.loads(listed)["items"] if listed else [])
                for cs in pod.get("status", {}).get("containerStatuses", [])
                if cs.get("containerID")
            ]
    eventually(lambda: not marked_processes(ids), 10, "every container process gone after close")


def eventually(check: Callable[[], Any], limit_s: float = 30.0, what: str = "") -> Any:
    deadline, last = time.monotonic() + limit_s, None
    while time.monotonic() < deadline:
        try:
            value = check()
        except (AssertionError, KeyError, IndexError, ValueError, OSError) as exc:
            value, last = None, exc
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {limit_s}s waiting for {what or check}: {last!r}")


def apply(kubectl: Kubectl, *objs: Obj) -> str:
    """``kubectl apply`` of a multi-document stream (a ``kind: List`` makes kubectl validate against
    ``/openapi/v2`` in protobuf, which the emulator serves only as JSON)."""
    return kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(obj) for obj in objs)).stdout


def get(kubectl: Kubectl, kind: str, name: str, ns: str = NS) -> Obj:
    return json.loads(kubectl("get", kind, name, "-n", ns, "-o", "json").stdout)  # type: ignore[no-any-return]


def events(kubectl: Kubectl, name: str, reason: str) -> list[Obj]:
    selector = f"involvedObject.kind=Pod,involvedObject.name={name},reason={reason}"
    out = kubectl("get", "events", "-n", NS, "--field-selector", selector, "-o", "json").stdout
    return json.loads(out)["items"]  # type: ignore[no-any-return]


def waiting_reason(pod: Obj) -> str:
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    return statuses[0].get("state", {}).get("waiting", {}).get("reason", "")  # type: ignore[no-any-return]


def pvc(name: str, size: str = "1Gi", **labels: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "ceph-rbd",
            "resources": {"requests": {"storage": size}},
        },
    }


def pod(name: str, containers: list[Obj], **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "e2e-pods"}},
        "spec": {"terminationGracePeriodSeconds": 2, "containers": containers, **spec},
    }


def shell(script: str, **extra: Any) -> Obj:
    return {"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", script], **extra}


def jupyter(method: str, url: str, body: Obj | None = None) -> Obj:
    """One request to a Jupyter server's REST API, with the token; the decoded JSON answer."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"token {TOKEN}", "Content-Type": "application/json"}
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


# ------------------------------------------------------------------------------ nodes
def test_three_ready_nodes_with_gpu_capacity(kubectl: Kubectl) -> None:
    kubectl("wait", "--for=condition=Ready", "node", "--all", "--timeout=30s")
    rows = [line.split() for line in kubectl("get", "nodes", "--no-headers").stdout.splitlines()]
    assert sorted((r[0], r[1]) for r in rows) == [
        ("cpu-node-a", "Ready"),
        ("gpu-node-a", "Ready"),
        ("gpu-node-b", "Ready"),
    ]
    for node in ("gpu-node-a", "gpu-node-b"):
        capacity = json.loads(kubectl("get", "node", node, "-o", "jsonpath={.status.capacity}").stdout)
        # 8 H100s: GPUs 0-5 whole, GPU 6 time-sliced (4 replicas), GPU 7 as 7 MIG 1g.10gb slices
        assert capacity["nvidia.com/gpu"] == "6"
        assert capacity["nvidia.com/gpu.shared"] == "4"
        assert capacity["nvidia.com/mig-1g.10gb"] == "7"
        assert capacity["cpu"] == "128"
        allocatable = kubectl("get", "node", node, "-o", r"jsonpath={.status.allocatable.nvidia\.com/gpu}")
        assert allocatable.stdout == "6"
        taints = kubectl("get", "node", node, "-o", "jsonpath={.spec.taints[*].key}={.spec.taints[*].effect}")
        assert taints.stdout == "nvidia.com/gpu=NoSchedule"
    cpu = json.loads(kubectl("get", "node", "cpu-node-a", "-o", "jsonpath={.status.capacity}").stdout)
    assert not any(key.startswith("nvidia.com/") for key in cpu)
    gpu_nodes = kubectl("get", "nodes", "-l", "gpuworkspace.dev/pool=gpu", "-o", "name").stdout.split()
    assert gpu_nodes == ["node/gpu-node-a", "node/gpu-node-b"]


# ------------------------------------------------------------- single-user server on RBD
def test_single_user_pod_on_seed_pvc_serves_and_keeps_files_across_delete(kubectl: Kubectl) -> None:
    # seed 000 §7: the personal home PVC (a modest size instead of 200Gi)
    apply(kubectl, pvc("user01-home", "2Gi", **{"platform.aik8s.run/owner": "user01"}))
    kubectl("wait", "--for=jsonpath={.status.phase}=Bound", "pvc/user01-home", "-n", NS, "--timeout=30s")
    notebook = {
        "name": "notebook",
        "image": NOTEBOOK_IMAGE,  # default CMD start-notebook.py: jupyter-server without a Hub
        "env": [{"name": "JUPYTER_TOKEN", "value": TOKEN}],
        "ports": [{"containerPort": 8888, "name": "notebook-port"}],
        "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}],
    }
    manifest = pod(
        "jupyter-user01",
        [notebook],
        volumes=[{"name": "home", "persistentVolumeClaim": {"claimName": "user01-home"}}],
    )

    def start() -> str:
        apply(kubectl, manifest)
        kubectl("wait", "--for=condition=Ready", "pod/jupyter-user01", "-n", NS, "--timeout=60s")
        running = get(kubectl, "pod", "jupyter-user01")
        assert running["status"]["phase"] == "Running"
        ip: str = running["status"]["podIP"]
        assert ip.startswith("127.")
        assert "version" in eventually(lambda: jupyter("GET", f"http://{ip}:8888/api"), 20, "server /api")
        return ip

    ip = start()
    saved = jupyter(
        "PUT",
        f"http://{ip}:8888/api/contents/notes.txt",
        {"type": "file", "format": "text", "content": "survives the pod\n"},
    )
    assert saved["name"] == "notes.txt" and saved["type"] == "file"
    kubectl("exec", "jupyter-user01", "-n", NS, "--", "sh", "-c", 'echo "from exec" > "$HOME/exec.txt"')
    listed = kubectl("exec", "jupyter-user01", "-n", NS, "--", "sh", "-c", 'ls "$HOME"').stdout.split()
    assert {"notes.txt", "exec.txt"} <= set(listed)
    logs = kubectl("logs", "jupyter-user01", "-n", NS).stdout
    assert "Jupyter Server" in logs and f"http://{ip}:8888/" in logs

    deleted = kubectl("delete", "pod", "jupyter-user01", "-n", NS, "--timeout=30s")
    assert 'pod "jupyter-user01" deleted' in deleted.stdout
    missing = kubectl("get", "pod", "jupyter-user01", "-n", NS, check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr
    assert get(kubectl, "pvc", "user01-home")["status"]["phase"] == "Bound"  # the home outlives the pod

    ip = start()
    notes = jupyter("GET", f"http://{ip}:8888/api/contents/notes.txt")
    assert notes["content"] == "survives the pod\n"
    assert jupyter("GET", f"http://{ip}:8888/api/contents/exec.txt")["content"] == "from exec\n"


# ------------------------------------------------------------------------ Multi-Attach
def test_second_node_using_an_rwo_pvc_gets_multi_attach_and_stays_container_creating(
    kubectl: Kubectl,
) -> None:
    apply(kubectl, pvc("shared-home"))
    kubectl("wait", "--for=jsonpath={.status.phase}=Bound", "pvc/shared-home", "-n", NS, "--timeout=30s")
    volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "shared-home"}}]
    container = shell(
        'echo "running on $NODE"; exec sleep 3600',
        env=[{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        volumeMounts=[{"name": "home", "mountPath": "/home/user"}],
    )
    first = pod(
        "home-a",
        [container],
        volumes=volumes,
        nodeSelector={"kubernetes.io/hostname": "gpu-node-a"},
        tolerations=[GPU_TOLERATION],
    )
    apply(kubectl, first)
    kubectl("wait", "--for=condition=Ready", "pod/home-a", "-n", NS, "--timeout=30s")
    assert eventually(lambda: "running on gpu-node-a" in kubectl("logs", "home-a", "-n", NS).stdout)
    pv = get(kubectl, "pvc", "shared-home")["spec"]["volumeName"]

    # The simulated scheduler keeps a pod off nodes other than where its RWO volume is attached, so the
    # second pod names its node itself (as anything binding pods directly does) and meets the attacher.
    second = pod("home-b", [container], volumes=volumes, nodeName="gpu-node-b", tolerations=[GPU_TOLERATION])
    apply(kubectl, second)
    multi = eventually(lambda: events(kubectl, "home-b", "FailedAttachVolume"), 30, "FailedAttachVolume")
    message = multi[0]["message"]
    assert message == f'Multi-Attach error for volume "{pv}" Volume is already used by pod(s) home-a'
    assert multi[0]["type"] == "Warning"
    pending = get(kubectl, "pod", "home-b")
    assert pending["spec"]["nodeName"] == "gpu-node-b"
    assert pending["status"]["phase"] == "Pending" and waiting_reason(pending) == "ContainerCreating"
    row = kubectl("get", "pod", "home-b", "-n", NS, "--no-headers").stdout.split()
    assert row[1:3] == ["0/1", "ContainerCreating"]
    described = kubectl("describe", "pod", "home-b", "-n", NS).stdout
    assert "FailedAttachVolume" in described and f'Multi-Attach error for volume "{pv}"' in described
    vas = kubectl("get", "volumeattachments", "-o", "json").stdout
    attached = [va["spec"]["nodeName"] for va in json.loads(vas)["items"] if va["status"].get("attached")]
    assert attached == ["gpu-node-a"]  # no second attachment was made
    assert waiting_reason(get(kubectl, "pod", "home-b")) == "ContainerCreating"  # still, after all that

    # Once the first pod is gone the volume detaches from gpu-node-a and the second pod starts.
    kubectl("delete", "pod", "home-a", "-n", NS, "--timeout=30s")
    kubectl("wait", "--for=condition=Ready", "pod/home-b", "-n", NS, "--timeout=30s")
    assert "running on gpu-node-b" in eventually(lambda: kubectl("logs", "home-b", "-n", NS).stdout)


# ------------------------------------------------------------------------ GPU exhaustion
@pytest.mark.parametrize("topology", ["default", "eight-whole-cards"])
def test_one_exclusive_gpu_pod_too_many_stays_pending_with_failed_scheduling(
    kubectl: Kubectl, topology: str
) -> None:
    # default: 6 of gpu-node-a's 8 cards are whole; eight-whole-cards: all 8 (the 9th pod is refused)
    whole = int(
        kubectl("get", "node", "gpu-node-a", "-o", r"jsonpath={.status.allocatable.nvidia\.com/gpu}").stdout
    )
    assert whole == (8 if topology == "eight-whole-cards" else 6)

    def gpu_pod(i: int) -> Obj:
        container = shell(
            'echo "gpus=$NVIDIA_VISIBLE_DEVICES"; exec sleep 3600',
            resources={"limits": {"nvidia.com/gpu": "1"}},
        )
        spec = pod(
            f"gpu-{i}",
            [container],
            nodeSelector={"kubernetes.io/hostname": "gpu-node-a"},
            tolerations=[GPU_TOLERATION],
        )
        spec["metadata"]["labels"]["batch"] = "fill" if i < whole else "extra"
        return spec

    apply(kubectl, *(gpu_pod(i) for i in range(whole)))
    kubectl("wait", "--for=condition=Ready", "pod", "-l", "batch=fill", "-n", NS, "--timeout=45s")
    uuids = set()
    for i in range(whole):
        log = eventually(lambda i=i: kubectl("logs", f"gpu-{i}", "-n", NS).stdout.strip(), 10, "gpu log")
        assert log.startswith("gpus=GPU-")
        uuids.add(log)
    assert len(uuids) == whole  # every pod got its own card

    extra = f"gpu-{whole}"
    apply(kubectl, gpu_pod(whole))
    failed = eventually(lambda: events(kubectl, extra, "FailedScheduling"), 30, "FailedScheduling")
    message = failed[0]["message"]
    assert message.startswith("0/3 nodes are available:"), message
    assert "1 Insufficient nvidia.com/gpu" in message
    assert "2 node(s) didn't match Pod's node affinity/selector" in message
    stuck = get(kubectl, "pod", extra)
    assert stuck["status"]["phase"] == "Pending" and not stuck["spec"].get("nodeName")
    scheduled = next(c for c in stuck["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    assert kubectl("get", "pod", extra, "-n", NS, "--no-headers").stdout.split()[1:3] == ["0/1", "Pending"]
    described = kubectl("describe", "pod", extra, "-n", NS).stdout
    assert "FailedScheduling" in described and "Insufficient nvidia.com/gpu" in described
    assert "0/3 nodes are available:" in described
    running = kubectl("get", "pods", "-n", NS, "--field-selector=status.phase=Running", "-o", "name").stdout
    assert len(running.split()) == whole

    # Freeing a card lets the scheduler place the waiting pod.
    kubectl("delete", "pod", "gpu-0", "-n", NS, "--timeout=30s")
    kubectl("wait", "--for=condition=Ready", f"pod/{extra}", "-n", NS, "--timeout=30s")
    assert get(kubectl, "pod", extra)["spec"]["nodeName"] == "gpu-node-a"
