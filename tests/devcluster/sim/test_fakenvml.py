"""The fake NVML behind ``gpuworkspace-agent`` in the devcluster: the pure view, its agreement with the
simulated dcgm-exporter, and the REAL agent CLI scraped against a running simulated cluster.

The live test starts a devcluster, in this process's instance (``$GPUWS_DEVCLUSTER_INSTANCE``).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gpuworkspace_devcluster.sim import fakenvml
from gpuworkspace_devcluster.sim.dcgm import render_metrics
from gpuworkspace_devcluster.sim.nvmlview import cgroup_text, nvml_view, qos_class, synthetic_pid
from gpuworkspace_devcluster.sim.workloads import Workload, WorkloadBook
from gpuworkspace_devcluster.testing import BackgroundCluster
from gpuworkspace_spawner.agent.cgroup import pod_uid_from_cgroup

from ..conftest import Kubectl
from .test_dcgm import ALLOCATIONS, GPUS, NOW, PODS_BY_UID, samples
from .test_e2e_pods import GPU_TOLERATION, apply, pod, shell

NS = "gpu-workspaces"
MIB = 1024 * 1024


# ------------------------------------------------------------------------------ the pure view
def per_pid_book() -> WorkloadBook:
    book = WorkloadBook()
    start = NOW - 10
    book.put(("uid", "u-alice"), Workload(gpu_util=80.0, mem_used_mib=8000.0, start=start))
    book.put(("uid", "u-bob"), Workload(gpu_util=20.0, mem_used_mib=1000.0, start=start), pid=4101)
    book.put(("uid", "u-bob"), Workload(gpu_util=15.0, mem_used_mib=500.0, start=start), pid=4102)
    book.put(("uid", "u-carol"), Workload(gpu_util=40.0, mem_used_mib=3000.0, start=start))
    book.put(("uid", "u-dave"), Workload(gpu_util=60.0, mem_used_mib=2000.0, start=start), pid=777)
    book.put(("uid", "u-vm"), Workload(gpu_util=99.0, start=start))
    return book


def test_view_lists_processes_per_card_and_slice_and_hides_passthrough() -> None:
    view = nvml_view("gpu-node-a", GPUS, ALLOCATIONS, PODS_BY_UID, per_pid_book(), NOW)
    by_index = {d["index"]: d for d in view["devices"]}
    assert sorted(by_index) == [0, 1, 2, 3, 4, 6, 7]  # card 5 is passed through to a VM
    assert [(p["pid"], p["sm_util"], p["mem_used_mib"]) for p in by_index[0]["processes"]] == [
        (synthetic_pid("u-alice"), 80.0, 8000.0)  # a pod-level script is one process
    ]
    shared = by_index[6]["processes"]
    assert [(p["pod"], p["pid"], p["sm_util"]) for p in shared] == sorted(
        [
            ("jupyter-bob", 4101, 20.0),
            ("jupyter-bob", 4102, 15.0),
            ("jupyter-carol", synthetic_pid("u-carol"), 40.0),
        ],
        key=lambda t: t[1],
    )
    assert [(p["gi_id"], p["pid"]) for p in by_index[7]["processes"]] == [(9, 777)]
    assert [m["gi_id"] for m in by_index[7]["mig"]] == list(range(7, 14))
    for proc in (p for d in view["devices"] for p in d["processes"]):
        assert f"-pod{proc['pod_uid'].replace('-', '_')}.slice/cri-containerd-" in proc["cgroup"]
    assert synthetic_pid("u-alice") == synthetic_pid("u-alice") < 4_194_304


@pytest.mark.parametrize(("bob", "carol"), [(20.0, 40.0), (70.0, 60.0)], ids=["under-100", "capped"])
def test_per_process_sm_util_adds_up_to_the_dcgm_device_value(bob: float, carol: float) -> None:
    """Consistency: on a time-sliced card the processes' smUtil sum IS dcgm's DCGM_FI_DEV_GPU_UTIL,
    capped at 100 like the device value (the processes' own values are not capped)."""
    book = WorkloadBook()
    book.put(("uid", "u-bob"), Workload(gpu_util=bob / 2, start=0), pid=1)
    book.put(("uid", "u-bob"), Workload(gpu_util=bob / 2, start=0), pid=2)
    book.put(("uid", "u-carol"), Workload(gpu_util=carol, start=0))
    view = nvml_view("gpu-node-a", GPUS, ALLOCATIONS, PODS_BY_UID, book, NOW)
    card = next(d for d in view["devices"] if d["index"] == 6)
    text = render_metrics("gpu-node-a", GPUS, ALLOCATIONS, PODS_BY_UID, book, NOW)
    (dcgm,) = [v for labels, v in samples(text, "DCGM_FI_DEV_GPU_UTIL") if labels["gpu"] == "6"]
    total = sum(p["sm_util"] for p in card["processes"])
    assert total == bob + carol
    assert dcgm == min(100.0, total)


def test_cgroup_lines_and_qos() -> None:
    uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    guaranteed = {"spec": {"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}
    burstable = {"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}}
    assert [qos_class(p) for p in (guaranteed, burstable, {}, {"status": {"qosClass": "Burstable"}})] == [
        "Guaranteed",
        "Burstable",
        "BestEffort",
        "Burstable",
    ]
    assert cgroup_text(uid, "Guaranteed", "ab") == (
        "0::/kubepods.slice/kubepods-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice/cri-containerd-ab.scope\n"
    )
    assert pod_uid_from_cgroup(cgroup_text(uid, "BestEffort", "ab")) == uid


def test_fake_module_uses_the_real_error_class_and_constants() -> None:
    assert fakenvml.NVMLError is pynvml.NVMLError
    for name in fakenvml.__all__:
        assert getattr(fakenvml, name) == getattr(pynvml, name)
    fakenvml._SOURCE.initialized = False
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fakenvml.nvmlDeviceGetCount()


# ----------------------------------------------------------------- the real agent, live cluster
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ControlApi:
    """PUT/GET on the simulation's control API with the kubeconfig's token and CA."""

    def __init__(self, kubeconfig: Path) -> None:
        doc = yaml.safe_load(kubeconfig.read_text())
        cluster = doc["clusters"][0]["cluster"]
        self.url = cluster["server"].rstrip("/")
        self.headers = {"Authorization": f"Bearer {doc['users'][0]['user']['token']}"}
        ca = cluster.get("certificate-authority-data")
        self.context = ssl.create_default_context(cadata=base64.b64decode(ca).decode()) if ca else None

    def __call__(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {**self.headers, "Content-Type": "application/json"}
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=10, context=self.context) as resp:
            return json.loads(resp.read())


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Kubectl, ControlApi, Path]]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed on this machine")
    with BackgroundCluster(tmp_path / "state", simulate=True) as bg:
        yield Kubectl(bg.kubeconfig), ControlApi(bg.kubeconfig), tmp_path / "state"


def gpu_pod(name: str, resource: str) -> dict[str, Any]:
    container = shell("exec sleep 3600", resources={"limits": {resource: "1"}})
    return pod(
        name, [container], nodeSelector={"kubernetes.io/hostname": "gpu-node-a"}, tolerations=[GPU_TOLERATION]
    )


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


def by_pod(metrics: dict[str, list[tuple[dict[str, str], float]]], name: str) -> dict[tuple[str, str], float]:
    return {(labels["gpu"], labels["pod_uid"]): value for labels, value in metrics[name]}


@pytest.mark.kubectl
@pytest.mark.slow
def test_real_agent_reports_scripted_processes_per_pod(live: tuple[Kubectl, ControlApi, Path]) -> None:
    kubectl, control, state = live
    apply(
        kubectl,
        gpu_pod("shared-a", "nvidia.com/gpu.shared"),
        gpu_pod("shared-b", "nvidia.com/gpu.shared"),
        gpu_pod("exclusive", "nvidia.com/gpu"),
    )
    kubectl("wait", "--for=condition=Ready", "pod", "-l", "app=e2e-pods", "-n", NS, "--timeout=60s")
    uids = {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in json.loads(kubectl("get", "pods", "-n", NS, "-o", "json").stdout)["items"]
    }
    scripts = [
        {"pod": "shared-a", "pid": 5001, "gpu_util": 25, "mem_used_mib": 2048},
        {"pod": "shared-a", "pid": 5002, "gpu_util": 10, "mem_used_mib": 1024},
        {"pod": "shared-b", "pid": 6001, "gpu_util": 40, "mem_used_mib": 4096},
        {"pod": "exclusive", "gpu_util": 90, "mem_used_mib": 30000},  # pod-level: one synthetic process
    ]
    for body in scripts:
        control("PUT", "/_devcluster/sim/workload", {"namespace": NS, **body})

    port = free_port()
    env = {
        **os.environ,
        "GPUWS_FAKE_NVML_KUBECONFIG": str(state / "kubeconfig"),
        "GPUWS_FAKE_NVML_NODE": "gpu-node-a",
        "GPUWS_FAKE_NVML_TTL_S": "0",
    }
    argv = [
        str(Path(sys.executable).parent / "gpuworkspace-agent"),
        *("--listen", f"127.0.0.1:{port}", "--node-name", "gpu-node-a"),
        *("--nvml-module", "gpuworkspace_devcluster.sim.fakenvml"),
        *("--proc-root", str(state / "sim" / "proc" / "gpu-node-a")),
    ]
    agent = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline, metrics = time.monotonic() + 30, None
        while metrics is None and time.monotonic() < deadline:
            assert agent.poll() is None, agent.stdout.read().decode() if agent.stdout else ""
            try:
                metrics = scrape(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                time.sleep(0.2)
        assert metrics is not None
        assert metrics["gpuworkspace_agent_nvml_up"] == [({"node": "gpu-node-a"}, 1.0)]
        a, b, x = uids["shared-a"], uids["shared-b"], uids["exclusive"]
        view = control("GET", "/_devcluster/sim/nvml?node=gpu-node-a")
        shared_gpu = str(
            next(d["index"] for d in view["devices"] if any(p["pod_uid"] == a for p in d["processes"]))
        )
        excl_gpu = str(
            next(d["index"] for d in view["devices"] if any(p["pod_uid"] == x for p in d["processes"]))
        )
        assert shared_gpu == "6"
        assert by_pod(metrics, "gpuworkspace_agent_gpu_processes") == {
            (shared_gpu, a): 2.0,
            (shared_gpu, b): 1.0,
            (excl_gpu, x): 1.0,
        }
        assert by_pod(metrics, "gpuworkspace_agent_gpu_process_memory_bytes") == {
            (shared_gpu, a): 3072.0 * MIB,
            (shared_gpu, b): 4096.0 * MIB,
            (excl_gpu, x): 30000.0 * MIB,
        }
        assert by_pod(metrics, "gpuworkspace_agent_gpu_process_sm_utilization_percent") == {
            (shared_gpu, a): 35.0,
            (shared_gpu, b): 40.0,
            (excl_gpu, x): 90.0,
        }
        labels = next(lbl for lbl, _ in metrics["gpuworkspace_agent_gpu_processes"] if lbl["pod_uid"] == x)
        card = next(d for d in view["devices"] if str(d["index"]) == excl_gpu)
        assert labels["uuid"] == card["uuid"] and labels["mig_uuid"] == ""
        assert (state / "sim" / "proc" / "gpu-node-a" / "5001" / "cgroup").is_file()

        # the next scrape: no utilisation sample newer than the last one would be NOT_FOUND (idle);
        # the fake stamps its samples with the control API's time, so a later scrape has new ones
        control(
            "PUT",
            "/_devcluster/sim/workload",
            {"namespace": NS, "pod": "shared-b", "pid": 6001, "gpu_util": 0},
        )
        later = scrape(f"http://127.0.0.1:{port}/metrics")
        util = by_pod(later, "gpuworkspace_agent_gpu_process_sm_utilization_percent")
        assert util[(shared_gpu, b)] == 0.0 and util[(shared_gpu, a)] == 35.0
    finally:
        agent.send_signal(15)
        out, _ = agent.communicate(timeout=15)
    assert agent.returncode == 0, out.decode()
