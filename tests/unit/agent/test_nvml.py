"""The agent's NVML reading: devices, MIG, processes, utilisation samples, errors, aggregation per pod."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from gpuworkspace_spawner.agent.nvml import (
    DeviceReading,
    GpuDevice,
    GpuProcess,
    NvmlReader,
    NvmlReading,
    PodRow,
    aggregate,
    mean_util_by_pid,
)

from .scripted import Card, ScriptedNvml

GIB = 1 << 30
UID_A, UID_B, UID_C, UID_D = (f"{c * 8}-0000-4000-8000-{c * 12}" for c in "abcd")


def test_aggregate_sums_per_device_and_pod() -> None:
    reading = NvmlReading(
        up=True,
        devices=(
            DeviceReading(
                GpuDevice("6", "GPU-6"),
                (GpuProcess(11, 2 * GIB), GpuProcess(12, GIB), GpuProcess(21, None), GpuProcess(99, 5)),
                {11: 20.0, 12: 15.5, 21: 40.0, 30: 7.0},  # 30: sampled, not listed as compute process
            ),
            DeviceReading(GpuDevice("7/mig-9", "GPU-7", "MIG-a"), (GpuProcess(41, GIB),), None),
            DeviceReading(GpuDevice("3", ""), error="GPU is lost"),
        ),
    )
    pods = {11: "pod-a", 12: "pod-a", 21: "pod-b", 30: "pod-b", 41: "pod-c"}  # 99: not in a pod
    assert aggregate(reading, pods) == [
        PodRow("6", "GPU-6", "", "", 1, 5, 0.0),
        PodRow("6", "GPU-6", "", "pod-a", 2, 3 * GIB, 35.5),
        PodRow("6", "GPU-6", "", "pod-b", 2, None, 47.0),  # no process's memory known
        PodRow("7/mig-9", "GPU-7", "MIG-a", "pod-c", 1, GIB, None),  # MIG: no per-process utilisation
    ]


def test_mean_util_by_pid_uses_only_newer_samples_and_caps() -> None:
    class S:
        def __init__(self, pid: int, t: int, u: int) -> None:
            self.pid, self.timeStamp, self.smUtil = pid, t, u

    samples = [S(1, 100, 90), S(1, 200, 30), S(1, 300, 50), S(2, 300, 4294967295), S(3, 50, 80)]
    assert mean_util_by_pid(samples, 100) == ({1: 40.0, 2: 100.0}, 300)
    assert mean_util_by_pid([], 700) == ({}, 700)


def cards() -> list[Card]:
    return [
        Card(0, "GPU-0", [(100, 4 * GIB)], [(100, 1_000, 80)]),
        Card(6, "GPU-6", [(200, GIB), (201, None), (300, 2 * GIB)], [(200, 1_000, 30), (300, 1_000, 50)]),
        Card(7, "GPU-7", mig=[(7, "MIG-7", []), (9, "MIG-9", [(400, 3 * GIB)])]),
    ]


def proc_tree(tmp_path: Path, pods: dict[int, str]) -> Path:
    for pid, uid in pods.items():
        (tmp_path / str(pid)).mkdir()
        line = f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid.replace('-', '_')}.slice/x.scope\n"
        (tmp_path / str(pid) / "cgroup").write_text(line)
    return tmp_path


def test_reader_lists_cards_mig_devices_processes_and_pods(tmp_path: Path) -> None:
    pods = {100: UID_A, 200: UID_B, 201: UID_B, 300: UID_C, 400: UID_D}
    reader = NvmlReader(ScriptedNvml(cards()), proc_tree(tmp_path, pods))
    reading = reader.read()
    assert reading.up
    assert [(d.device.gpu, d.device.uuid, d.device.mig_uuid) for d in reading.devices] == [
        ("0", "GPU-0", ""),
        ("6", "GPU-6", ""),
        ("7/mig-7", "GPU-7", "MIG-7"),
        ("7/mig-9", "GPU-7", "MIG-9"),
    ]
    assert reading.devices[0].device.name == "NVIDIA H100 80GB HBM3"
    assert reading.devices[1].processes[1] == GpuProcess(201, None)
    assert reading.devices[1].sm_util == {200: 30.0, 300: 50.0}
    assert reading.devices[3].sm_util is None  # NOT_SUPPORTED on MIG devices
    rows = aggregate(reading, reader.pods_of([100, 200, 201, 300, 400, 555]))
    assert [(r.gpu, r.pod_uid, r.processes, r.memory_bytes, r.sm_util_percent) for r in rows] == [
        ("0", UID_A, 1, 4 * GIB, 80.0),
        ("6", UID_B, 2, GIB, 30.0),
        ("6", UID_C, 1, 2 * GIB, 50.0),
        ("7/mig-9", UID_D, 1, 3 * GIB, None),
    ]
    assert reader.pods_of([555]) == {555: ""}  # no /proc entry: the process is gone


def test_no_new_samples_is_idle_and_the_timestamp_is_kept_per_device(tmp_path: Path) -> None:
    nvml = ScriptedNvml(cards())
    reader = NvmlReader(nvml, tmp_path)
    reader.read()
    second = reader.read()
    assert second.devices[0].sm_util == {} and second.devices[1].sm_util == {}  # NOT_FOUND: idle
    assert [p.pid for p in second.devices[1].processes] == [200, 201, 300]  # still holding memory
    nvml.cards[0].samples.append((100, 2_000, 10))
    third = reader.read()
    assert third.devices[0].sm_util == {100: 10.0}
    asked = [
        arg
        for name, arg in nvml.calls
        if name == "nvmlDeviceGetProcessUtilization" and arg[0].startswith("GPU")
    ]
    assert asked == [
        ("GPU-0", 0),
        ("GPU-6", 0),
        ("GPU-0", 1_000),
        ("GPU-6", 1_000),
        ("GPU-0", 1_000),
        ("GPU-6", 1_000),
    ]


def test_not_supported_means_no_utilisation(tmp_path: Path) -> None:
    nvml = ScriptedNvml(
        cards(), {("nvmlDeviceGetProcessUtilization", "GPU-0"): pynvml.NVML_ERROR_NOT_SUPPORTED}
    )
    reading = NvmlReader(nvml, tmp_path).read()
    assert reading.devices[0].sm_util is None and reading.devices[1].sm_util is not None
    assert aggregate(reading, {})[0].sm_util_percent is None


def test_a_broken_device_does_not_hide_the_others(tmp_path: Path) -> None:
    nvml = ScriptedNvml(
        cards(), {("nvmlDeviceGetComputeRunningProcesses", "GPU-6"): pynvml.NVML_ERROR_GPU_IS_LOST}
    )
    reading = NvmlReader(nvml, tmp_path).read()
    assert reading.up
    assert [(d.device.gpu, d.error) for d in reading.devices] == [
        ("0", ""),
        ("1", "GPU is lost"),  # NVML's enumeration index: the card's own could not be read
        ("7/mig-7", ""),
        ("7/mig-9", ""),
    ]


def test_a_card_without_mig_support_is_read_whole(tmp_path: Path) -> None:
    nvml = ScriptedNvml(cards(), {("nvmlDeviceGetMigMode", "GPU-0"): pynvml.NVML_ERROR_NOT_SUPPORTED})
    reading = NvmlReader(nvml, tmp_path).read()
    assert reading.devices[0].device.gpu == "0" and reading.devices[0].processes == (
        GpuProcess(100, 4 * GIB),
    )


def test_init_failure_is_down_and_retried(tmp_path: Path) -> None:
    nvml = ScriptedNvml(cards(), {("nvmlInit", ""): pynvml.NVML_ERROR_DRIVER_NOT_LOADED})
    reader = NvmlReader(nvml, tmp_path)
    down = reader.read()
    assert not down.up and down.devices == () and "Driver Not Loaded" in down.error
    del nvml.errors[("nvmlInit", "")]
    assert reader.read().up


def test_count_failure_after_init_shuts_down_for_a_fresh_init(tmp_path: Path) -> None:
    nvml = ScriptedNvml(cards(), {("nvmlDeviceGetCount", ""): pynvml.NVML_ERROR_UNKNOWN})
    reader = NvmlReader(nvml, tmp_path)
    assert not reader.read().up
    assert ("nvmlShutdown", None) in nvml.calls
    reader.close()  # already shut down: no second shutdown
    assert nvml.calls.count(("nvmlShutdown", None)) == 1


def test_the_real_module_without_a_driver_is_down(tmp_path: Path) -> None:
    reader = NvmlReader(pynvml, tmp_path)
    reading = reader.read()
    if reading.up:
        reader.close()
        pytest.skip("this machine has an NVIDIA driver")
    assert reading.devices == () and reading.error.startswith("NVML: ")
