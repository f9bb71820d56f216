"""The agent's /metrics: exactly the contract's families and labels, parsed back with prometheus_client."""

from __future__ import annotations

from pathlib import Path

import pynvml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuworkspace_spawner.agent.collector import AgentCollector
from gpuworkspace_spawner.agent.nvml import NvmlReader

from .scripted import Card, ScriptedNvml

GIB = 1 << 30
UID = "3f2c9a4e-1b7d-4c55-9e0a-6d8f1c2b3a4e"
FAMILIES = {
    "gpuworkspace_agent_gpu_process_memory_bytes",
    "gpuworkspace_agent_gpu_process_sm_utilization_percent",
    "gpuworkspace_agent_gpu_processes",
    "gpuworkspace_agent_nvml_up",
}


def scrape(nvml: ScriptedNvml, proc: Path) -> dict[str, list[tuple[dict[str, str], float]]]:
    registry = CollectorRegistry()
    registry.register(AgentCollector(NvmlReader(nvml, proc), "gpu-node-a"))
    text = generate_latest(registry).decode()
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


def test_families_labels_and_values(tmp_path: Path) -> None:
    (tmp_path / "200").mkdir()
    (tmp_path / "200" / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
        "cri-containerd-0123.scope\n"
    )
    nvml = ScriptedNvml(
        [
            Card(6, "GPU-6", [(200, 2 * GIB), (201, None)], [(200, 5, 30), (201, 5, 12)]),
            Card(7, "GPU-7", mig=[(9, "MIG-9", [(200, GIB)])]),
        ]
    )
    got = scrape(nvml, tmp_path)
    assert set(got) == FAMILIES
    labels = {"node": "gpu-node-a", "gpu": "6", "uuid": "GPU-6", "mig_uuid": ""}
    mig = {"node": "gpu-node-a", "gpu": "7/mig-9", "uuid": "GPU-7", "mig_uuid": "MIG-9"}
    assert got["gpuworkspace_agent_nvml_up"] == [({"node": "gpu-node-a"}, 1.0)]
    assert got["gpuworkspace_agent_gpu_processes"] == [
        ({**labels, "pod_uid": ""}, 1.0),  # pid 201 has no /proc entry: in no pod
        ({**labels, "pod_uid": UID}, 1.0),
        ({**mig, "pod_uid": UID}, 1.0),
    ]
    assert got["gpuworkspace_agent_gpu_process_memory_bytes"] == [
        ({**labels, "pod_uid": UID}, 2.0 * GIB),  # pid 201's memory is unknown: no series
        ({**mig, "pod_uid": UID}, 1.0 * GIB),
    ]
    assert got["gpuworkspace_agent_gpu_process_sm_utilization_percent"] == [
        ({**labels, "pod_uid": ""}, 12.0),
        ({**labels, "pod_uid": UID}, 30.0),  # the MIG device has no per-process utilisation
    ]


def test_nvml_down_is_one_series(tmp_path: Path) -> None:
    nvml = ScriptedNvml([Card(0, "GPU-0")], {("nvmlInit", ""): pynvml.NVML_ERROR_LIBRARY_NOT_FOUND})
    got = scrape(nvml, tmp_path)
    assert got["gpuworkspace_agent_nvml_up"] == [({"node": "gpu-node-a"}, 0.0)]
    assert all(not samples for name, samples in got.items() if name != "gpuworkspace_agent_nvml_up")
