"""Parsing the sources: dcgm-exporter text (rendered by the devcluster's exporter and a real sample),
the node agent, the kubelet, Prometheus API answers and Kubernetes objects."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_devcluster.sim.dcgm import (
    Allocation,
    ExporterOptions,
    Gpu,
    MigSlice,
    render_metrics,
)
from gpuworkspace_devcluster.sim.resourcemetrics import (
    ContainerUsage as SimUsage,
)
from gpuworkspace_devcluster.sim.resourcemetrics import render_resource_metrics
from gpuworkspace_devcluster.sim.workloads import Workload, WorkloadBook
from gpuworkspace_spawner.services.attribution.model import ContainerUsage
from gpuworkspace_spawner.services.attribution.parsing import (
    PROMQL,
    SeriesCache,
    agent_nvml_up,
    cpu_rates,
    node_info,
    parse_agent,
    parse_dcgm,
    parse_resource_metrics,
    pod_essentials,
    prometheus_agent_nodes,
    prometheus_matrix_to_points,
    prometheus_vector_to_devices,
    prometheus_vector_to_processes,
    prometheus_vector_to_usage,
    workspace_pod,
)

from .conftest import pod_obj

NOW = 1_750_000_000.0
UUIDS = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(8)]


def _book(**utils: float) -> WorkloadBook:
    book = WorkloadBook()
    for uid, util in utils.items():
        book.put(WorkloadBook.ref(uid=uid), Workload(gpu_util=util, mem_used_mib=2048.0))
    return book


def _render(
    gpus: list[Gpu], allocs: list[Allocation], pods: dict[str, Any], book: WorkloadBook, **opts: Any
) -> str:
    return render_metrics("gpu-node-a", gpus, allocs, pods, book, NOW, options=ExporterOptions(**opts))


def test_whole_cards_from_the_devcluster_exporter() -> None:
    gpus = [Gpu(0, UUIDS[0]), Gpu(1, UUIDS[1], last_xid=79)]
    pods = {"u-alice": pod_obj("jupyter-alice", "u-alice", labels={"gpuworkspace.dev/user": "alice"})}
    text = _render(gpus, [Allocation("u-alice", UUIDS[0])], pods, _book(**{"u-alice": 60.0}))
    devices = parse_dcgm(text, "gpu-node-a")
    assert [(d.gpu, d.pods) for d in devices] == [("0", (("gpu-workspaces", "jupyter-alice"),)), ("1", ())]
    busy, free = devices
    assert busy.util_percent == 60.0
    assert busy.mem_used_mib == 2048.0
    assert busy.mem_total_mib == 81559.0  # used + free + reserved
    assert busy.power_w is not None and busy.power_w > free.power_w  # type: ignore[operator]
    assert busy.model == "NVIDIA H100 80GB HBM3"
    assert busy.mig_instance is None and busy.uuid == UUIDS[0]
    assert free.xid == 79 and free.util_percent == 0.0


def test_mig_instances_use_the_graphics_engine_activity() -> None:
    slices = tuple(MigSlice(7 + i, "1g.10gb", f"MIG-{i}") for i in range(3))
    gpus = [Gpu(7, UUIDS[7], mig=slices)]
    pods = {"u-bob": pod_obj("jupyter-bob", "u-bob", "nvidia.com/mig-1g.10gb")}
    allocs = [Allocation("u-bob", UUIDS[7], "nvidia.com/mig-1g.10gb", gi_id=8)]
    devices = parse_dcgm(_render(gpus, allocs, pods, _book(**{"u-bob": 81.0})), "gpu-node-a")
    assert [(d.entity, d.mig_profile, d.pods) for d in devices] == [
        ("7/mig-7", "1g.10gb", ()),
        ("7/mig-8", "1g.10gb", (("gpu-workspaces", "jupyter-bob"),)),
        ("7/mig-9", "1g.10gb", ()),
    ]
    # DCGM_FI_DEV_GPU_UTIL reads 0 on MIG; the GR engine ratio x 100 is the instance's activity.
    assert devices[1].util_percent == pytest.approx(81.0)
    assert devices[0].util_percent == 0.0
    assert devices[1].uuid == UUIDS[7]  # MIG entities carry their card's UUID


def test_time_sliced_default_names_one_pod_and_virtual_gpus_merge() -> None:
    gpus = [Gpu(6, UUIDS[6])]
    pods = {u: pod_obj(f"jupyter-{u}", u, "nvidia.com/gpu.shared") for u in ("a", "b", "c")}
    allocs = [Allocation(u, UUIDS[6], "nvidia.com/gpu.shared", replica=i) for i, u in enumerate(pods)]
    book = _book(a=10.0, b=20.0, c=0.0)
    (default,) = parse_dcgm(_render(gpus, allocs, pods, book), "gpu-node-a")
    assert default.pods == (("gpu-workspaces", "jupyter-c"),)  # the last pod the kubelet lists
    assert default.util_percent == 30.0  # the device value
    (merged,) = parse_dcgm(_render(gpus, allocs, pods, book, virtual_gpus=True), "gpu-node-a")
    assert merged.pods == tuple(("gpu-workspaces", f"jupyter-{u}") for u in ("a", "b", "c"))
    assert merged.util_percent == 30.0


def test_passthrough_cards_are_invisible() -> None:
    gpus = [Gpu(0, UUIDS[0], vfio=True), Gpu(1, UUIDS[1])]
    devices = parse_dcgm(_render(gpus, [], {}, WorkloadBook()), "gpu-node-a")
    assert [d.gpu for d in devices] == ["1"]


# Real dcgm-exporter output, copied by hand: a MIG instance with the driver-version label and
# site-specific extra labels (plazonic/dcgm-exporter README, Princeton's A100 MIG node), and an
# unattributed K80 as the Kubernetes-mode exporter writes it (empty pod attributes).
REAL_SAMPLE = """\
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-d6dd33b9-e50e-997c-f303-c8f7312fa498",device="nvidia0",modelName="NVIDIA A100 80GB PCIe",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",Hostname="della-l01g1",DCGM_FI_DRIVER_VERSION="535.104.05",jobid="51234567",userid="123456"} 8543
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-f3a2185e-464d-c671-4057-0d056df64b6e",device="nvidia1",modelName="Tesla K80",Hostname="dcgm-exporter-cmhft",container="",namespace="",pod=""} 0
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-d6dd33b9-e50e-997c-f303-c8f7312fa498",device="nvidia0",modelName="NVIDIA A100 80GB PCIe",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",Hostname="della-l01g1",DCGM_FI_DRIVER_VERSION="535.104.05",jobid="51234567",userid="123456"} 0
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-f3a2185e-464d-c671-4057-0d056df64b6e",device="nvidia1",modelName="Tesla K80",Hostname="dcgm-exporter-cmhft",container="",namespace="",pod=""} 0
"""


def test_real_world_sample() -> None:
    mig, k80 = parse_dcgm(REAL_SAMPLE, "della-l01g1")
    assert (mig.entity, mig.mig_profile, mig.mem_used_mib, mig.model) == (
        "0/mig-7",
        "1g.10gb",
        8543.0,
        "NVIDIA A100 80GB PCIe",
    )
    assert mig.util_percent is None  # no GR engine counter: MIG utilisation unknown, not 0
    assert mig.mem_total_mib is None  # no FB_FREE in the sample
    assert k80.pods == () and k80.util_percent == 0.0 and k80.node == "della-l01g1"


AGENT_TEXT = """\
# HELP gpuworkspace_agent_gpu_process_sm_utilization_percent x
# TYPE gpuworkspace_agent_gpu_process_sm_utilization_percent gauge
gpuworkspace_agent_gpu_process_sm_utilization_percent{node="n",gpu="6",uuid="GPU-6",pod_uid="u-a"} 25
gpuworkspace_agent_gpu_process_sm_utilization_percent{node="n",gpu="6",uuid="GPU-6",pod_uid=""} 3
gpuworkspace_agent_gpu_process_sm_utilization_percent{node="n",gpu="7/mig-8",uuid="GPU-7",pod_uid="u-b",mig_uuid="MIG-1"} 10
gpuworkspace_agent_gpu_process_sm_utilization_percent{node="n",gpu="7/mig-9",uuid="GPU-7",pod_uid="u-b",mig_uuid="MIG-2"} 5
# HELP gpuworkspace_agent_gpu_process_memory_bytes x
# TYPE gpuworkspace_agent_gpu_process_memory_bytes gauge
gpuworkspace_agent_gpu_process_memory_bytes{node="n",gpu="6",uuid="GPU-6",pod_uid="u-a"} 1048576
# HELP gpuworkspace_agent_gpu_processes x
# TYPE gpuworkspace_agent_gpu_processes gauge
gpuworkspace_agent_gpu_processes{node="n",gpu="6",uuid="GPU-6",pod_uid="u-a"} 2
# HELP gpuworkspace_agent_nvml_up x
# TYPE gpuworkspace_agent_nvml_up gauge
gpuworkspace_agent_nvml_up{node="n"} 1
"""


def test_agent_samples_sum_per_pod_and_card() -> None:
    samples = {(s.gpu_uuid, s.pod_uid): s for s in parse_agent(AGENT_TEXT, "gpu-node-a")}
    assert set(samples) == {("GPU-6", "u-a"), ("GPU-6", ""), ("GPU-7", "u-b")}
    a = samples[("GPU-6", "u-a")]
    assert (a.node, a.sm_util_percent, a.mem_used_bytes, a.processes) == ("gpu-node-a", 25.0, 1048576.0, 2)
    assert samples[("GPU-7", "u-b")].sm_util_percent == 15.0
    assert agent_nvml_up(AGENT_TEXT)
    assert not agent_nvml_up(AGENT_TEXT.replace('{node="n"} 1', '{node="n"} 0'))


def test_kubelet_resource_metrics_and_cpu_rates() -> None:
    def scrape(cpu: float, now: float) -> str:
        return render_resource_metrics(
            [
                SimUsage("ns", "jupyter-a", "notebook", cpu, 1e9),
                SimUsage("ns", "jupyter-a", "sidecar", 1.0, 2e8),
                SimUsage("ns", "other", "c", 5.0, 1e6),
            ],
            now,
        )

    prev = parse_resource_metrics(scrape(10.0, NOW))
    assert prev[("ns", "jupyter-a")] == (11.0, 1.2e9, NOW * 1000)
    cur = parse_resource_metrics(scrape(40.0, NOW + 15))
    del prev[("ns", "other")]
    rates = {u.pod: u for u in cpu_rates(prev, cur, dt=999.0)}  # the samples' timestamps win over dt
    assert rates["jupyter-a"] == ContainerUsage("ns", "jupyter-a", pytest.approx(2.0), 1.2e9)  # type: ignore[arg-type]
    assert rates["other"].cpu_cores is None and rates["other"].memory_bytes == 1e6
    restarted = cpu_rates(cur, {("ns", "jupyter-a"): (1.0, 5.0, None)}, dt=15.0)
    assert restarted[0].cpu_cores is None


def _vector(*series: tuple[dict[str, str], float]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": m, "value": [NOW, str(v)]} for m, v in series],
        },
    }


@pytest.mark.parametrize(
    ("series", "expected"),
    [
        pytest.param(
            [
                (
                    {
                        "__name__": "DCGM_FI_DEV_GPU_UTIL",
                        "gpu": "0",
                        "UUID": "G0",
                        "Hostname": "h",
                        "kubernetes_node": "n1",
                        "namespace": "ns",
                        "pod": "p",
                    },
                    42,
                ),
                (
                    {
                        "__name__": "DCGM_FI_DEV_FB_USED",
                        "gpu": "0",
                        "UUID": "G0",
                        "kubernetes_node": "n1",
                        "namespace": "ns",
                        "pod": "p",
                    },
                    100,
                ),
                (
                    {
                        "__name__": "DCGM_FI_DEV_FB_FREE",
                        "gpu": "0",
                        "UUID": "G0",
                        "kubernetes_node": "n1",
                        "namespace": "ns",
                        "pod": "p",
                    },
                    900,
                ),
            ],
            [("n1", "0", 42.0, 1000.0, (("ns", "p"),))],
            id="relabelled-node-wins-over-hostname",
        ),
        pytest.param(
            [
                (
                    {
                        "__name__": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                        "gpu": "7",
                        "UUID": "G7",
                        "GPU_I_ID": "3",
                        "GPU_I_PROFILE": "3g.40gb",
                        "Hostname": "n2",
                    },
                    0.5,
                ),
                (
                    {
                        "__name__": "DCGM_FI_DEV_GPU_UTIL",
                        "gpu": "7",
                        "UUID": "G7",
                        "GPU_I_ID": "3",
                        "GPU_I_PROFILE": "3g.40gb",
                        "Hostname": "n2",
                    },
                    0,
                ),
            ],
            [("n2", "7/mig-3", 50.0, None, ())],
            id="mig-from-prometheus",
        ),
        pytest.param(
            [
                (
                    {
                        "__name__": "DCGM_FI_DEV_GPU_UTIL",
                        "gpu": "6",
                        "UUID": "G6",
                        "node": "n3",
                        "namespace": "ns",
                        "pod": "a",
                        "vgpu": "0",
                    },
                    30,
                ),
                (
                    {
                        "__name__": "DCGM_FI_DEV_GPU_UTIL",
                        "gpu": "6",
                        "UUID": "G6",
                        "node": "n3",
                        "namespace": "ns",
                        "pod": "b",
                        "vgpu": "1",
                    },
                    30,
                ),
                ({"__name__": "go_goroutines", "node": "n3"}, 7),
            ],
            [("n3", "6", 30.0, None, (("ns", "a"), ("ns", "b")))],
            id="virtual-gpus-merge",
        ),
        pytest.param([], [], id="empty"),
    ],
)
def test_prometheus_devices(
    series: list[tuple[dict[str, str], float]], expected: list[tuple[Any, ...]]
) -> None:
    got = prometheus_vector_to_devices(_vector(*series))
    assert [(d.node, d.entity, d.util_percent, d.mem_total_mib, d.pods) for d in got] == expected


def test_prometheus_processes_usage_and_agent_nodes() -> None:
    procs = prometheus_vector_to_processes(
        _vector(
            (
                {
                    "__name__": "gpuworkspace_agent_gpu_process_sm_utilization_percent",
                    "node": "n",
                    "uuid": "G6",
                    "pod_uid": "u",
                },
                12,
            ),
            (
                {
                    "__name__": "gpuworkspace_agent_gpu_process_memory_bytes",
                    "node": "n",
                    "uuid": "G6",
                    "pod_uid": "u",
                },
                2048,
            ),
        )
    )
    assert [(p.node, p.gpu_uuid, p.pod_uid, p.sm_util_percent, p.mem_used_bytes) for p in procs] == [
        ("n", "G6", "u", 12.0, 2048.0)
    ]
    usage = prometheus_vector_to_usage(
        _vector(({"namespace": "ns", "pod": "a"}, 1.5)),
        _vector(({"namespace": "ns", "pod": "a"}, 4e9), ({"namespace": "ns", "pod": "b"}, 1e9)),
    )
    assert usage == [ContainerUsage("ns", "a", 1.5, 4e9), ContainerUsage("ns", "b", None, 1e9)]
    assert prometheus_agent_nodes(_vector(({"node": "n1"}, 1), ({"kubernetes_node": "n2"}, 1))) == {
        "n1",
        "n2",
    }
    assert set(PROMQL) >= {"devices", "processes", "agent_up", "cpu", "memory"}


def test_prometheus_errors_and_ranges() -> None:
    with pytest.raises(ValueError, match="vector"):
        prometheus_vector_to_devices({"status": "error", "errorType": "bad_data", "error": "parse error"})
    matrix = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {"metric": {"pod": "a"}, "values": [[NOW, "1"], [NOW + 60, "NaN"], [NOW + 120, "3.5"]]}
            ],
        },
    }
    assert prometheus_matrix_to_points(matrix) == [({"pod": "a"}, [(NOW, 1.0), (NOW + 120, 3.5)])]
    with pytest.raises(ValueError, match="matrix"):
        prometheus_matrix_to_points(_vector())


def test_node_info() -> None:
    info = node_info(
        {
            "metadata": {"name": "gpu-node-a", "labels": {"nvidia.com/gpu.count": "8"}},
            "spec": {
                "unschedulable": True,
                "taints": [
                    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                    {"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"},
                ],
            },
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True"},
                ],
                "capacity": {
                    "cpu": "128",
                    "memory": "1Ti",
                    "nvidia.com/gpu": "6",
                    "nvidia.com/gpu.shared": "4",
                },
                "allocatable": {"cpu": "127500m", "memory": "1020Gi", "bogus": "x"},
                "addresses": [
                    {"type": "Hostname", "address": "h"},
                    {"type": "InternalIP", "address": "127.10.0.1"},
                ],
            },
        }
    )
    assert info.ready and info.unschedulable and info.address == "127.10.0.1"
    assert info.taints == ("nvidia.com/gpu=present:NoSchedule", "node.kubernetes.io/out-of-service:NoExecute")
    assert info.capacity["memory"] == 2**40 and info.capacity["nvidia.com/gpu.shared"] == 4
    assert info.allocatable == {"cpu": 127.5, "memory": 1020 * 2**30}
    assert not node_info({"metadata": {"name": "x"}}).ready


def _pod(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Running",
    node: str | None = "gpu-node-a",
    limits: dict[str, str] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "jupyter-alice",
        "namespace": "gpu-workspaces",
        "uid": "u1",
        "labels": {"gpuworkspace.dev/user": "alice", **(labels or {})},
        # every workspace pod carries the exact names (manifests/names.py); labels alone name nobody
        "annotations": {"gpuworkspace.dev/username": "alice", **(annotations or {})},
    }
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "notebook",
                    "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": limits or {}},
                },
                {"name": "sidecar", "resources": {"requests": {"cpu": "500m"}}},
            ],
            "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "4"}}}],
        },
        "status": {"phase": phase, "startTime": "2025-06-15T12:00:00Z"},
    }


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            _pod(limits={"nvidia.com/gpu": "1", "cpu": "4"}),
            ("alice", "", "exclusive", "container", {"nvidia.com/gpu": 1}),
            id="exclusive",
        ),
        pytest.param(
            _pod(
                labels={"gpuworkspace.dev/server": "default", "gpuworkspace.dev/gpu-mode": "mig"},
                limits={"nvidia.com/mig-1g.10gb": "1"},
            ),
            ("alice", "", "mig", "container", {"nvidia.com/mig-1g.10gb": 1}),
            id="mig-default-server-label",
        ),
        pytest.param(
            _pod(
                labels={"gpuworkspace.dev/user": "alice-2e-b", "gpuworkspace.dev/server": "big"},
                annotations={
                    "gpuworkspace.dev/username": "alice.b",
                    "gpuworkspace.dev/servername": "Big One",
                },
                limits={"nvidia.com/gpu.shared": "1"},
            ),
            ("alice.b", "Big One", "time-sliced", "container", {"nvidia.com/gpu.shared": 1}),
            id="annotations-carry-the-real-names",
        ),
        pytest.param(
            _pod(labels={"gpuworkspace.dev/runtime": "vm"}, limits={"nvidia.com/GH100_H100_SXM5_80GB": "2"}),
            ("alice", "", "exclusive", "vm", {"nvidia.com/GH100_H100_SXM5_80GB": 2}),
            id="virt-launcher-passthrough",
        ),
        pytest.param(
            _pod(deleting=True), ("alice", "", "none", "container", {}), id="terminating-still-holds"
        ),
        pytest.param(_pod(phase="Pending"), ("alice", "", "none", "container", {}), id="pending-with-node"),
        pytest.param(_pod(phase="Pending", node=None), None, id="pending-without-node"),
        pytest.param(_pod(phase="Succeeded"), None, id="finished"),
        pytest.param(
            {
                "metadata": {"name": "x", "labels": {}},
                "spec": {"nodeName": "n"},
                "status": {"phase": "Running"},
            },
            None,
            id="not-a-workspace",
        ),
        pytest.param(
            {
                "metadata": {"name": "x", "labels": {"gpuworkspace.dev/user": "alice-example.com-ff8d9819"}},
                "spec": {"nodeName": "n"},
                "status": {"phase": "Running"},
            },
            None,
            id="labels-without-exact-names-are-nobodys",
        ),
    ],
)
def test_workspace_pod(obj: dict[str, Any], expected: tuple[Any, ...] | None) -> None:
    got = workspace_pod(obj)
    assert workspace_pod(pod_essentials(obj)) == got  # what the watch cache keeps of a pod is enough
    if expected is None:
        assert got is None
        return
    assert got is not None
    assert (got.user, got.server, got.gpu_mode, got.runtime, dict(got.gpu_resources)) == expected
    assert got.cpu_request == 4.0  # the init container's 4 cores exceed the containers' 2.5
    assert got.memory_request == 8 * 2**30
    assert got.started_at == 1749988800.0
    assert got.key == "gpu-workspaces/jupyter-alice"
    assert got.cull_exempt is False


@pytest.mark.parametrize(
    ("value", "exempt"), [("true", True), ("True", True), ("false", False), ("yes", False), ("", False)]
)
def test_the_cull_exempt_annotation_reaches_the_workspace(value: str, exempt: bool) -> None:
    got = workspace_pod(pod_essentials(_pod(annotations={"gpuworkspace.dev/cull-exempt": value})))
    assert got is not None and got.cull_exempt is exempt


@pytest.mark.parametrize(
    ("labels", "kind", "job"),
    [
        (
            {"gpuworkspace.dev/kind": "job", "gpuworkspace.dev/job": "alice-train-x7k2q"},
            "job",
            "alice-train-x7k2q",
        ),
        ({"gpuworkspace.dev/job": "alice-train-x7k2q"}, "workspace", ""),  # the kind label decides
        ({"gpuworkspace.dev/kind": "something-else"}, "workspace", ""),
        ({}, "workspace", ""),
    ],
)
def test_a_job_pod_is_its_users_but_of_kind_job(labels: dict[str, str], kind: str, job: str) -> None:
    got = workspace_pod(pod_essentials(_pod(labels=labels)))
    assert got is not None and (got.user, got.kind, got.job, got.is_job) == (
        "alice",
        kind,
        job,
        kind == "job",
    )


def test_series_cache_gives_the_parsers_answers_with_each_scrapes_values() -> None:
    """Repeated scrapes parse each series' labels once; values (and timestamps) are always the new ones."""
    gpus = [Gpu(0, UUIDS[0]), Gpu(1, UUIDS[1], mig=(MigSlice(7, "1g.10gb", "MIG-a"),))]
    pods = {"u-a": pod_obj("jupyter-a", "u-a", labels={"gpuworkspace.dev/user": "a"})}
    allocs = [Allocation("u-a", UUIDS[0])]
    cache = SeriesCache()
    for util in (10.0, 60.0, 95.0):
        text = _render(gpus, allocs, pods, _book(**{"u-a": util}))
        assert parse_dcgm(text, "gpu-node-a", cache) == parse_dcgm(text, "gpu-node-a")
        assert parse_dcgm(text, "gpu-node-a", cache)[0].util_percent == util
    assert 0 < len(cache) < 200  # one entry per series, not per scrape
    assert parse_agent(AGENT_TEXT, "n", cache) == parse_agent(AGENT_TEXT, "n")
    for cpu, now in ((10.0, NOW), (40.0, NOW + 15)):
        text = render_resource_metrics([SimUsage("ns", "p", "c", cpu, 1e9)], now)
        assert parse_resource_metrics(text, cache) == parse_resource_metrics(text)
    small = SeriesCache(max_series=3)
    text = _render(gpus, allocs, pods, _book(**{"u-a": 5.0}))
    assert parse_dcgm(text, "gpu-node-a", small) == parse_dcgm(text, "gpu-node-a") and len(small) <= 3
