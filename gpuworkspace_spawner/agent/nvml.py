"""What NVML says about the GPUs of this node and the processes on them, mapped to pods.

:class:`NvmlReader` calls a pynvml-compatible module (NVIDIA's ``nvidia-ml-py``, imported as
``pynvml``, or a stand-in with the same functions and the same ``NVMLError``) once per read:

- every device: index, UUID, name, memory; with MIG mode on, its MIG devices (GPU instance id, UUID)
  instead of the card itself;
- per device ``nvmlDeviceGetComputeRunningProcesses`` (pid, ``usedGpuMemory``, which is None where
  NVML does not know it) and ``nvmlDeviceGetProcessUtilization`` since the previous read of that
  device (``smUtil`` per sample; ``NVML_ERROR_NOT_FOUND`` means no samples: idle;
  ``NVML_ERROR_NOT_SUPPORTED``, as on MIG devices and older GPUs, means no per-process utilisation).

A broken device is reported as such and does not hide the others; a failed ``nvmlInit`` gives a
reading with ``up=False`` (retried on the next read). Pids map to pods through
``<proc_root>/<pid>/cgroup`` (the host's ``/proc`` when the agent runs with ``hostPID``).
:func:`aggregate` (pure) sums processes per (device, pod).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cgroup import pod_uid_from_cgroup

log = logging.getLogger(__name__)
NvmlModule = Any  # pynvml or a module with the same names


@dataclass(frozen=True)
class GpuDevice:
    gpu: str  # the card index, or "<card>/mig-<GPU instance id>"
    uuid: str  # the card's UUID (a MIG device's parent's), as dcgm-exporter's UUID label
    mig_uuid: str = ""  # the MIG device's own UUID
    name: str = ""
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int | None  # None: NVML does not know


@dataclass(frozen=True)
class DeviceReading:
    device: GpuDevice
    processes: tuple[GpuProcess, ...] = ()
    sm_util: Mapping[int, float] | None = None  # pid -> percent; None: not supported (or failed)
    error: str = ""  # non-empty: this device could not be read


@dataclass(frozen=True)
class NvmlReading:
    up: bool
    devices: tuple[DeviceReading, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class PodRow:
    """One pod's processes on one device (``pod_uid`` ``""``: processes in no pod)."""

    gpu: str
    uuid: str
    mig_uuid: str
    pod_uid: str
    processes: int
    memory_bytes: int | None  # None: no process's memory is known
    sm_util_percent: float | None  # None: the device has no per-process utilisation


# ------------------------------------------------------------------------------- pure helpers
def mean_util_by_pid(samples: Iterable[Any], last_seen_us: int) -> tuple[dict[int, float], int]:
    """Mean ``smUtil`` (capped to 0..100) per pid over samples newer than ``last_seen_us``, and the
    newest sample's timestamp (``last_seen_us`` when there is none)."""
    sums: dict[int, tuple[float, int]] = {}
    newest = last_seen_us
    for s in samples:
        stamp = int(s.timeStamp)
        if stamp <= last_seen_us:
            continue
        newest = max(newest, stamp)
        total, count = sums.get(int(s.pid), (0.0, 0))
        sums[int(s.pid)] = (total + min(100.0, max(0.0, float(s.smUtil))), count + 1)
    return {pid: total / count for pid, (total, count) in sums.items()}, newest


def aggregate(reading: NvmlReading, pod_of: Mapping[int, str]) -> list[PodRow]:
    """Per (device, pod) sums of the processes' memory and SM utilisation; a pid missing from
    ``pod_of`` counts as in no pod. Processes seen only in utilisation samples count too."""
    rows: list[PodRow] = []
    for dev in reading.devices:
        if dev.error:
            continue
        memory = {p.pid: p.used_memory_bytes for p in dev.processes}
        pids = sorted(set(memory) | set(dev.sm_util or ()))
        by_pod: dict[str, list[int]] = {}
        for pid in pids:
            by_pod.setdefault(pod_of.get(pid, ""), []).append(pid)
        for pod_uid, members in sorted(by_pod.items()):
            known = [m for m in (memory.get(pid) for pid in members) if m is not None]
            util = None if dev.sm_util is None else sum(dev.sm_util.get(pid, 0.0) for pid in members)
            d = dev.device
            rows.append(
                PodRow(d.gpu, d.uuid, d.mig_uuid, pod_uid, len(members), sum(known) if known else None, util)
            )
    return rows


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# ------------------------------------------------------------------------------------ reading
class NvmlReader:
    """Reads NVML through ``nvml``; keeps, per device, the timestamp of the last utilisation sample."""

    def __init__(self, nvml: NvmlModule, proc_root: Path | str = "/proc") -> None:
        self.nvml = nvml
        self.proc_root = Path(proc_root)
        self._initialized = False
        self._last_seen_us: dict[str, int] = {}
        self._lock = threading.Lock()  # concurrent scrapes must not interleave the timestamps

    def read(self) -> NvmlReading:
        with self._lock:
            return self._read()

    def close(self) -> None:
        with self._lock:
            if self._initialized:
                self._shutdown()

    def pods_of(self, pids: Iterable[int]) -> dict[int, str]:
        """pid -> pod UID from ``<proc_root>/<pid>/cgroup`` (``""``: no pod, or the process is gone)."""
        out = {}
        for pid in pids:
            try:
                text = (self.proc_root / str(pid) / "cgroup").read_text()
            except OSError:
                text = ""
            out[pid] = pod_uid_from_cgroup(text)
        return out

    def _read(self) -> NvmlReading:
        nv = self.nvml
        try:
            if not self._initialized:
                nv.nvmlInit()
                self._initialized = True
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as exc:
            if self._initialized:
                self._shutdown()  # and initialise again on the next read
            return NvmlReading(up=False, error=f"NVML: {exc}")
        devices: list[DeviceReading] = []
        for index in range(count):
            try:
                devices.extend(self._card(index))
            except nv.NVMLError as exc:
                log.warning("GPU %d: %s", index, exc)
                devices.append(DeviceReading(GpuDevice(str(index), ""), error=str(exc)))
        return NvmlReading(up=True, devices=tuple(devices))

    def _shutdown(self) -> None:
        self._initialized = False
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)

    def _card(self, index: int) -> list[DeviceReading]:
        nv = self.nvml
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        card = self._device(handle, str(nv.nvmlDeviceGetIndex(handle)), "")
        if not self._mig_enabled(handle):
            return [self._reading(handle, card, card.uuid)]
        out = []
        for slot in range(int(nv.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) == nv.NVML_ERROR_NOT_FOUND:
                    continue  # no MIG device in this slot
                raise
            gpu = f"{card.gpu}/mig-{int(nv.nvmlDeviceGetGpuInstanceId(mig))}"
            try:
                dev = self._device(mig, gpu, card.uuid)
                out.append(self._reading(mig, dev, dev.mig_uuid))
            except nv.NVMLError as exc:
                log.warning("GPU %s: %s", gpu, exc)
                out.append(DeviceReading(GpuDevice(gpu, card.uuid), error=str(exc)))
        return out

    def _mig_enabled(self, handle: Any) -> bool:
        nv = self.nvml
        try:
            current = nv.nvmlDeviceGetMigMode(handle)[0]
        except nv.NVMLError:
            return False  # a card without MIG support
        return bool(current == nv.NVML_DEVICE_MIG_ENABLE)

    def _device(self, handle: Any, gpu: str, parent_uuid: str) -> GpuDevice:
        nv = self.nvml
        uuid = _text(nv.nvmlDeviceGetUUID(handle))
        total: int | None
        used: int | None
        try:
            memory = nv.nvmlDeviceGetMemoryInfo(handle)
            total, used = int(memory.total), int(memory.used)
        except nv.NVMLError:
            total = used = None
        name = _text(nv.nvmlDeviceGetName(handle))
        if parent_uuid:
            return GpuDevice(gpu, parent_uuid, uuid, name, total, used)
        return GpuDevice(gpu, uuid, "", name, total, used)

    def _reading(self, handle: Any, device: GpuDevice, key: str) -> DeviceReading:
        nv = self.nvml
        processes = tuple(
            GpuProcess(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory))
            for p in nv.nvmlDeviceGetComputeRunningProcesses(handle)
        )
        last = self._last_seen_us.get(key, 0)
        util: dict[int, float] | None
        try:
            util, self._last_seen_us[key] = mean_util_by_pid(
                nv.nvmlDeviceGetProcessUtilization(handle, last), last
            )
        except nv.NVMLError as exc:
            value = getattr(exc, "value", None)
            if value == nv.NVML_ERROR_NOT_FOUND:
                util = {}  # no sample since the last read: idle
            else:
                if value != nv.NVML_ERROR_NOT_SUPPORTED:
                    log.warning("GPU %s: process utilisation: %s", device.gpu, exc)
                util = None
        return DeviceReading(device, processes, util)
