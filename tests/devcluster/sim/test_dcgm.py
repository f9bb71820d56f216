"""dcgm-exporter and kubelet resource metrics: the pure renderers, workload scripts, and the served endpoints."""

from __future__ import annotations

import base64
import csv
import os
import re
import ssl
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gpuworkspace_devcluster.addresses import instance_from_env
from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.openapi import find_shared_schemas
from gpuworkspace_devcluster.resources import find
from gpuworkspace_devcluster.sim.context import SimContext
from gpuworkspace_devcluster.sim.dcgm import (
    Allocation,
    ExporterOptions,
    Gpu,
    MigSlice,
    load_counters,
    parse_counters,
    render_metrics,
    sanitize_label_name,
)
from gpuworkspace_devcluster.sim.devices import DeviceManager
from gpuworkspace_devcluster.sim.failures import node_not_ready, node_recover
from gpuworkspace_devcluster.sim.resourcemetrics import (
    ContainerUsage,
    DcgmExporter,
    ProcSnapshot,
    collect_usage,
    go_float,
    render_resource_metrics,
)
from gpuworkspace_devcluster.sim.topology import load_topology
from gpuworkspace_devcluster.sim.workloads import (
    Workload,
    WorkloadBook,
    WorkloadError,
    parse_series,
    series_integral,
    workload_book,
)

NOW = 1_800_000_000.0
NS = "gpu-workspaces"
NODES, PODS, NAMESPACES = find("", "v1", "nodes"), find("", "v1", "pods"), find("", "v1", "namespaces")
SERVICES, ENDPOINTS = find("", "v1", "services"), find("", "v1", "endpoints")
SLICES = find("discovery.k8s.io", "v1", "endpointslices")
LABELS = {"hub.jupyter.org/username": "alice", "app.kubernetes.io/component": "singleuser-server", "pod": "x"}


def shared_counters() -> list[str]:
    schemas = find_shared_schemas()
    if schemas is None or not (schemas / "dcgm-default-counters.csv").is_file():
        pytest.skip("../shared/schemas/dcgm-default-counters.csv is absent")
    rows = csv.reader((schemas / "dcgm-default-counters.csv").read_text().splitlines(), skipinitialspace=True)
    return [r[0].strip() for r in rows if r and not r[0].startswith("#") and len(r) >= 3]


def pod(
    name: str, uid: str, labels: dict[str, str] | None = None, container: str = "notebook"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS, "uid": uid, "labels": labels or {}},
        "spec": {"containers": [{"name": container}]},
    }


def card(index: int, **kw: Any) -> Gpu:
    return Gpu(
        index, f"GPU-{index:08d}-0000-0000-0000-000000000000", f"00000000:{0x1B + index:02X}:00.0", **kw
    )


MIG = tuple(MigSlice(7 + i, "1g.10gb", f"MIG-{i}") for i in range(7))
GPUS = [card(i) for i in range(6)] + [card(6), card(7, mig=MIG)]
PODS_BY_UID = {
    "u-alice": pod("jupyter-alice", "u-alice", LABELS),
    "u-bob": pod("jupyter-bob", "u-bob"),
    "u-carol": pod("jupyter-carol", "u-carol"),
    "u-dave": pod("jupyter-dave", "u-dave"),
    "u-vm": pod("virt-launcher-vm-1-abcde", "u-vm", {"kubevirt.io": "virt-launcher"}, "compute"),
}
ALLOCATIONS = [
    Allocation("u-alice", GPUS[0].uuid),
    Allocation("u-vm", GPUS[5].uuid),
    Allocation("u-bob", GPUS[6].uuid, "nvidia.com/gpu.shared", replica=0),
    Allocation("u-carol", GPUS[6].uuid, "nvidia.com/gpu.shared", replica=1),
    Allocation("u-dave", GPUS[7].uuid, "nvidia.com/mig-1g.10gb", gi_id=9),
]


def book() -> WorkloadBook:
    b = WorkloadBook()
    for uid, util in (("u-alice", 80), ("u-bob", 30), ("u-carol", 50), ("u-dave", 60), ("u-vm", 99)):
        b.put(("uid", uid), Workload(gpu_util=float(util), mem_used_mib=1000.0 * util / 10, start=NOW - 10))
    return b


def render(**options: Any) -> str:
    return render_metrics(
        "gpu-node-a", GPUS, ALLOCATIONS, PODS_BY_UID, book(), NOW, options=ExporterOptions(**options)
    )


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for family in text_string_to_metric_families(text):
        out.extend((s.labels, s.value) for s in family.samples if name in (s.name, family.name))
    return out


def by_gpu(text: str, name: str, gpu: str) -> list[tuple[dict[str, str], float]]:
    return [(labels, v) for labels, v in samples(text, name) if labels["gpu"] == gpu]


# ------------------------------------------------------------------------- the exposition format
def test_output_parses_and_every_metric_and_help_comes_from_the_csv() -> None:
    names = shared_counters()
    text = render()
    families = list(text_string_to_metric_families(text))
    assert families
    counters = {c.name: c for c in load_counters()}
    for family in families:
        assert family.name in names
        assert family.type == counters[family.name].prom_type
        assert f"# HELP {family.name} {counters[family.name].help}\n" in text
    assert "DCGM_FI_DRIVER_VERSION" not in {f.name for f in families}  # a "label" counter


def test_exclusive_gpu_line_is_byte_exact() -> None:
    line = next(x for x in render().splitlines() if x.startswith('DCGM_FI_DEV_GPU_UTIL{gpu="0"'))
    assert line == (
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-00000000-0000-0000-0000-000000000000",'
        'pci_bus_id="00000000:1B:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
        'Hostname="gpu-node-a",DCGM_FI_DRIVER_VERSION="570.124.06",'
        'app_kubernetes_io_component="singleuser-server",hub_jupyter_org_username="alice",'
        'container="notebook",namespace="gpu-workspaces",pod="jupyter-alice"} 80'
    )
    power = next(x for x in render().splitlines() if x.startswith('DCGM_FI_DEV_POWER_USAGE{gpu="0"'))
    assert power.endswith(" 574.000000")  # a double field: %f; 70 W idle + 80 % of (700 - 70) W


def test_label_sanitising_and_reserved_names() -> None:
    assert sanitize_label_name("hub.jupyter.org/username") == "hub_jupyter_org_username"
    assert sanitize_label_name("app.kubernetes.io/part-of") == "app_kubernetes_io_part_of"
    ((labels, _),) = by_gpu(render(), "DCGM_FI_DEV_FB_USED", "0")
    assert labels["pod"] == "jupyter-alice"  # a pod label called "pod" cannot shadow the attribute
    for line in render().splitlines():
        if not line.startswith("#"):
            names = re.findall(r'[{,]([A-Za-z_][A-Za-z0-9_]*)="', line)
            assert len(names) == len(set(names)), line


def test_unallocated_gpu_has_no_pod_labels_and_idle_values() -> None:
    ((labels, value),) = by_gpu(render(), "DCGM_FI_DEV_GPU_UTIL", "1")
    assert value == 0 and not {"pod", "namespace", "container"} & set(labels)
    ((_, watts),) = by_gpu(render(), "DCGM_FI_DEV_POWER_USAGE", "1")
    assert watts == 70.0


def test_passthrough_gpu_is_absent() -> None:
    text = render()
    assert 'gpu="5"' not in text and "virt-launcher" not in text
    assert {labels["gpu"] for labels, _ in samples(text, "DCGM_FI_DEV_SM_CLOCK")} == {
        "0",
        "1",
        "2",
        "3",
        "4",
        "6",
        "7",
    }


def test_time_sliced_gpu_default_mode_labels_one_pod_with_the_device_value() -> None:
    series = by_gpu(render(), "DCGM_FI_DEV_GPU_UTIL", "6")
    assert len(series) == 1  # dcgm-exporter's device -> pod map keeps the last pod listed
    labels, value = series[0]
    assert value == 80 and labels["pod"] == "jupyter-carol" and "vgpu" not in labels


def test_time_sliced_gpu_virtual_mode_gives_every_sharer_the_device_value() -> None:
    series = by_gpu(render(virtual_gpus=True), "DCGM_FI_DEV_GPU_UTIL", "6")
    assert sorted((labels["pod"], labels["vgpu"], value) for labels, value in series) == [
        ("jupyter-bob", "0", 80.0),
        ("jupyter-carol", "1", 80.0),
    ]
    exclusive = by_gpu(render(virtual_gpus=True), "DCGM_FI_DEV_GPU_UTIL", "0")
    assert "hub_jupyter_org_username" not in exclusive[0][0]  # the virtual-GPU path adds no pod labels


def test_time_sliced_sum_is_capped_and_renamed_resource_needs_configuring() -> None:
    b = book()
    b.put(("uid", "u-bob"), Workload(gpu_util=90.0))
    text = render_metrics("n", GPUS, ALLOCATIONS, PODS_BY_UID, b, NOW)
    ((_, util),) = by_gpu(text, "DCGM_FI_DEV_GPU_UTIL", "6")
    assert util == 100
    ((labels, _),) = by_gpu(render(nvidia_resource_names=()), "DCGM_FI_DEV_GPU_UTIL", "6")
    assert "pod" not in labels  # nvidia.com/gpu.shared is not attributed unless listed


def test_mig_slices_report_zero_util_and_engine_activity() -> None:
    text = render()
    util = by_gpu(text, "DCGM_FI_DEV_GPU_UTIL", "7")
    assert [(labels["GPU_I_PROFILE"], labels["GPU_I_ID"], v) for labels, v in util] == [
        ("1g.10gb", str(gi), 0.0) for gi in range(7, 14)
    ]
    active = {
        labels["GPU_I_ID"]: (labels.get("pod"), v)
        for labels, v in by_gpu(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "7")
    }
    assert active["9"] == ("jupyter-dave", pytest.approx(0.6)) and active["8"] == (None, 0.0)
    line = next(x for x in text.splitlines() if x.startswith('DCGM_FI_DEV_GPU_UTIL{gpu="7"'))
    assert (
        'modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",Hostname="gpu-node-a"' in line
    )


def test_hostname_label_and_counters_option() -> None:
    text = render_metrics("node-x", GPUS[:1], [], {}, WorkloadBook(), NOW, "hostname")
    assert ',hostname="node-x"' in text and "Hostname=" not in text
    only = tuple(parse_counters("# c\nDCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"))
    text = render_metrics(
        "n", GPUS[:1], [], {}, WorkloadBook(), NOW, options=ExporterOptions(collectors=only)
    )
    assert [f.name for f in text_string_to_metric_families(text)] == ["DCGM_FI_DEV_GPU_UTIL"]


# --------------------------------------------------------------------------------- workloads
def test_workload_schedules_are_step_functions_of_time() -> None:
    w = Workload(gpu_util=((0, 10), (60, 90)), cpu_cores=((0, 1), (10, 3)), start=NOW)
    assert w.at(NOW - 5).gpu_util == 10 and w.at(NOW + 30).gpu_util == 10 and w.at(NOW + 61).gpu_util == 90
    assert w.at(NOW + 20).cpu_seconds == pytest.approx(10 * 1 + 10 * 3)
    looped = Workload(gpu_util=((0, 0), (5, 100)), start=NOW, loop_s=10)
    assert [looped.at(NOW + t).gpu_util for t in (1, 6, 11, 16)] == [0, 100, 0, 100]
    assert series_integral(((0, 0), (5, 100)), 0, 25, loop_s=10) == pytest.approx(1000)
    assert WorkloadBook().sample(uid="x", now=NOW).gpu_util == 0


def test_workload_book_prefers_uid_and_sums_processes() -> None:
    b = WorkloadBook()
    b.put(b.ref(namespace=NS, name="p"), Workload(gpu_util=5.0))
    assert b.sample(uid="u1", namespace=NS, name="p", now=NOW).gpu_util == 5
    b.put(b.ref(uid="u1"), Workload(gpu_util=40.0), pid=10)
    b.put(b.ref(uid="u1"), Workload(gpu_util=70.0, mem_used_mib=100.0), pid=11)
    s = b.sample(uid="u1", namespace=NS, name="p", now=NOW)
    assert (s.gpu_util, s.mem_used_mib) == (100, 100)
    round_trip = Workload.from_json(b.to_json()[0], now=NOW)
    assert isinstance(round_trip, Workload)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"gpu_util": "high"}, "gpu_util"),
        ({"gpu_util": [[0, 10], [5]]}, "gpu_util[1]"),
        ({"power_w": [[10, 1], [5, 2]]}, "power_w[1]"),
        ({"mem_used_mib": -1}, "mem_used_mib"),
        ({"loop_s": 0}, "loop_s"),
    ],
)
def test_bad_workloads_name_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(WorkloadError) as info:
        Workload.from_json(body, now=NOW)
    assert info.value.field == field
    assert parse_series("x", [[0, 1]]) == ((0.0, 1.0),)


# ---------------------------------------------------------------------- kubelet resource metrics
def test_go_float_matches_strconv_g() -> None:
    cases = {0.0: "0", 357.35491: "357.35491", 1616273408.0: "1.616273408e+09", 503808.0: "503808"}
    cases |= {1e6: "1e+06", 0.0001: "0.0001", 0.00001: "1e-05", 2.5: "2.5", -3.0: "-3"}
    assert {v: go_float(v) for v in cases} == cases


def test_resource_metrics_format() -> None:
    usage = [
        ContainerUsage(NS, "jupyter-alice", "notebook", 12.5, 2.5e8, NOW - 100),
        ContainerUsage(NS, "jupyter-alice", "sidecar", 0.5, 1e6),
    ]
    text = render_resource_metrics(usage, NOW)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) >= {
        "container_cpu_usage_seconds",
        "container_memory_working_set_bytes",
        "pod_cpu_usage_seconds",
        "pod_memory_working_set_bytes",
        "node_cpu_usage_seconds",
        "node_memory_working_set_bytes",
    }
    pod_cpu = families["pod_cpu_usage_seconds"].samples[0]
    assert pod_cpu.labels == {"namespace": NS, "pod": "jupyter-alice"} and pod_cpu.value == 13.0
    assert pod_cpu.timestamp == NOW
    assert (
        'container_memory_working_set_bytes{container="notebook",namespace="gpu-workspaces",'
        f'pod="jupyter-alice"}} 2.5e+08 {int(NOW * 1000)}'
    ) in text
    assert (
        "# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds"
        in text
    )


def test_proc_usage_of_a_real_process_tree_and_the_workload_fallback() -> None:
    snapshot = ProcSnapshot()
    usage = snapshot.usage(os.getpid())
    assert usage is not None and usage[0] > 0 and usage[1] > 1_000_000
    running = {"name": "notebook", "state": {"running": {"startedAt": "2027-01-15T08:00:00Z"}}}
    pods = [
        {"metadata": {"name": "a", "namespace": NS, "uid": "ua"}, "status": {"containerStatuses": [running]}},
        {"metadata": {"name": "b", "namespace": NS, "uid": "ub"}, "status": {"containerStatuses": [running]}},
        {"metadata": {"name": "c", "namespace": NS, "uid": "uc"}, "status": {"containerStatuses": []}},
    ]
    b = WorkloadBook()
    b.put(("uid", "ub"), Workload(cpu_cores=2.0, memory_bytes=5e8, start=NOW - 10))
    got = collect_usage(pods, {(NS, "a"): {"notebook": os.getpid()}}, b, NOW, snapshot)
    assert [(u.pod, u.container) for u in got] == [("a", "notebook"), ("b", "notebook")]
    assert got[0].memory_bytes == usage[1] and got[1].cpu_seconds == pytest.approx(20)
    assert got[1].memory_bytes == 5e8
    assert got[0].start_time == datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()


# ----------------------------------------------------------------------------- served endpoints
@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[DevCluster]:
    async with DevCluster(tmp_path / "state") as c:
        yield c


async def _get(url: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r,
    ):
        return r.status, await r.text()


async def test_exporter_serves_node_metrics_and_publishes_discovery(cluster: DevCluster) -> None:
    ctx = SimContext(verbs=cluster.verbs, state_dir=cluster.state_dir, pod_runtime=cluster.pod_runtime)
    instance = instance_from_env()  # this test process's (another may serve node a of instance 0)
    topo = load_topology(instance=instance)
    ctx.topology, ctx.devices = topo, DeviceManager(cluster.state_dir, topo)
    ip = topo.node("gpu-node-a").internal_ip
    assert ip == f"127.{10 + 10 * instance}.0.1"
    cluster.verbs.create(
        NODES,
        "",
        {
            "metadata": {"name": "gpu-node-a"},
            "status": {
                "addresses": [{"type": "InternalIP", "address": ip}],
                "capacity": {"nvidia.com/gpu": "6"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    cluster.verbs.create(NAMESPACES, "", {"metadata": {"name": NS}})
    running = {
        "name": "notebook",
        "ready": True,
        "image": "python:3.12",
        "imageID": "",
        "restartCount": 0,
        "state": {"running": {"startedAt": "2027-01-15T08:00:00Z"}},
    }
    created, _ = cluster.verbs.create(
        PODS,
        NS,
        {
            "metadata": {"name": "jupyter-alice", "labels": {"hub.jupyter.org/username": "alice"}},
            "spec": {"nodeName": "gpu-node-a", "containers": [{"name": "notebook", "image": "python:3.12"}]},
        },
    )
    cluster.verbs.update(
        PODS,
        NS,
        "jupyter-alice",
        {**created, "status": {"phase": "Running", "containerStatuses": [running]}},
        subresource="status",
    )
    uid = created["metadata"]["uid"]
    (dev,) = ctx.devices.allocate(
        "gpu-node-a", uid, "nvidia.com/gpu", 1, namespace=NS, pod="jupyter-alice", container="notebook"
    )
    workload_book(ctx).put(("uid", uid), Workload(gpu_util=42.0, cpu_cores=1.0, memory_bytes=3e8, start=0))

    exporter = DcgmExporter(ctx)
    await exporter.start()
    try:
        await exporter.settle()
        status, text = await _get(f"http://{ip}:9400/metrics")
        assert status == 200
        series = [
            (labels, v)
            for labels, v in samples(text, "DCGM_FI_DEV_GPU_UTIL")
            if labels["UUID"] == dev.gpu_uuid
        ]
        assert series == [(dict(series[0][0]), 42.0)] and series[0][0]["pod"] == "jupyter-alice"
        assert series[0][0]["hub_jupyter_org_username"] == "alice"
        assert len(samples(text, "DCGM_FI_DEV_GPU_UTIL")) == 6 + 1 + 7  # 6 whole, 1 shared, 7 MIG slices
        energy = [
            v for labels, v in samples(text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") if labels["gpu"] == "0"
        ]
        _, again = await _get(f"http://{ip}:9400/metrics")
        later = [
            v for labels, v in samples(again, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") if labels["gpu"] == "0"
        ]
        assert later[0] >= energy[0] > 0

        status, text = await _get(f"http://{ip}:10250/metrics/resource")
        pod_mem = samples(text, "pod_memory_working_set_bytes")
        assert status == 200 and pod_mem == [({"namespace": NS, "pod": "jupyter-alice"}, 3e8)]

        svc = cluster.store.get(SERVICES, "gpu-operator", "nvidia-dcgm-exporter")
        assert svc["metadata"]["labels"] == {"app": "nvidia-dcgm-exporter"}
        assert svc["spec"]["ports"][0]["port"] == 9400
        eps = cluster.store.get(ENDPOINTS, "gpu-operator", "nvidia-dcgm-exporter")
        assert eps["subsets"][0]["addresses"] == [{"ip": ip, "nodeName": "gpu-node-a"}]
        (eps_slice,) = cluster.store.items(SLICES, "gpu-operator")
        assert eps_slice["metadata"]["labels"]["kubernetes.io/service-name"] == "nvidia-dcgm-exporter"
        assert eps_slice["endpoints"][0]["addresses"] == [ip] and eps_slice["ports"][0]["port"] == 9400

        node_not_ready(ctx, "gpu-node-a")  # unreachable: the node's endpoints stop answering
        await exporter.settle()
        with pytest.raises(aiohttp.ClientConnectionError):
            await _get(f"http://{ip}:9400/metrics")
        eps = cluster.store.get(ENDPOINTS, "gpu-operator", "nvidia-dcgm-exporter")
        assert eps["subsets"][0]["notReadyAddresses"] == [{"ip": ip, "nodeName": "gpu-node-a"}]
        node_recover(ctx, "gpu-node-a")
        await exporter.settle()
        assert (await _get(f"http://{ip}:9400/metrics"))[0] == 200
    finally:
        await exporter.stop()


async def _get_as(url: str, token: str | None, context: ssl.SSLContext) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=headers, ssl=context, timeout=aiohttp.ClientTimeout(total=5)) as r,
    ):
        return r.status, await r.text()


async def test_a_tls_clusters_kubelet_verifies_with_the_cluster_ca_and_authorizes_nodes_metrics(
    tmp_path: Path,
) -> None:
    """As a real kubelet with serverTLSBootstrap and webhook auth: a serving certificate for the node IP
    from the cluster CA (the kubeconfig's), 401 without a token, 403 without ``get nodes/metrics``."""
    async with DevCluster(tmp_path / "state", tls=True, rbac_enabled=True) as cluster:
        ctx = SimContext(
            verbs=cluster.verbs, state_dir=cluster.state_dir, pod_runtime=cluster.pod_runtime, cluster=cluster
        )
        topo = load_topology(instance=instance_from_env())  # this test process's node addresses
        ctx.topology, ctx.devices = topo, DeviceManager(cluster.state_dir, topo)
        ip = topo.node("cpu-node-a").internal_ip
        cluster.verbs.create(
            NODES,
            "",
            {
                "metadata": {"name": "cpu-node-a"},
                "status": {
                    "addresses": [{"type": "InternalIP", "address": ip}],
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )
        kubeconfig = yaml.safe_load(cluster.kubeconfig.read_text())
        ca_pem = base64.b64decode(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"])
        trusting = ssl.create_default_context(cadata=ca_pem.decode())
        admin = kubeconfig["users"][0]["user"]["token"]
        reader_config = yaml.safe_load(cluster.service_account_kubeconfig("monitoring", "reader").read_text())
        reader = reader_config["users"][0]["user"]["token"]
        url = f"https://{ip}:10250/metrics/resource"
        exporter = DcgmExporter(ctx)
        await exporter.start()
        try:
            await exporter.settle()
            with pytest.raises(aiohttp.ClientConnectorCertificateError):  # not a publicly trusted cert
                await _get_as(url, None, ssl.create_default_context())
            assert await _get_as(url, None, trusting) == (401, "Unauthorized")
            status, text = await _get_as(url, reader, trusting)
            assert (
                status == 403
                and "nodes/metrics" in text
                and "system:serviceaccount:monitoring:reader" in text
            )
            status, text = await _get_as(url, admin, trusting)
            assert status == 200 and "container_cpu_usage_seconds_total" in text
            assert (await _get_as(f"https://{ip}:10250/metrics", admin, trusting))[0] == 200
        finally:
            await exporter.stop()
    reviews = [(r.user, r.verb, r.resource, r.name, r.status) for r in cluster.api.request_log if r.name]
    assert reviews == [
        ("", "get", "nodes/metrics", "cpu-node-a", 401),
        ("system:serviceaccount:monitoring:reader", "get", "nodes/metrics", "cpu-node-a", 403),
        ("system:admin", "get", "nodes/metrics", "cpu-node-a", 200),
        ("system:admin", "get", "nodes/metrics", "cpu-node-a", 200),
    ]
