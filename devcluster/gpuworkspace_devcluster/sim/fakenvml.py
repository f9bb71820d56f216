"""A pynvml-compatible module backed by the devcluster, for running ``gpuworkspace-agent`` unchanged:

    GPUWS_FAKE_NVML_KUBECONFIG=<state>/kubeconfig GPUWS_FAKE_NVML_NODE=gpu-node-a \\
        gpuworkspace-agent --nvml-module gpuworkspace_devcluster.sim.fakenvml \\
        --proc-root <state>/sim/proc/gpu-node-a --node-name gpu-node-a

Environment:

- ``GPUWS_FAKE_NVML_KUBECONFIG``: the devcluster's kubeconfig (API server address, admin token, CA);
- ``GPUWS_FAKE_NVML_URL``: the API server's base URL, when it is not the kubeconfig's server;
- ``GPUWS_FAKE_NVML_NODE``: the node whose GPUs this is (default ``$NODE_NAME``);
- ``GPUWS_FAKE_NVML_TTL_S``: how long one answer of the control API is used (default 1 s).

The data is ``GET /_devcluster/sim/nvml?node=<node>`` (:mod:`.nvmlview`), which also writes the
``<state>/sim/proc/<node>/<pid>/cgroup`` files the agent reads. Functions have the real names,
arguments and return shapes, and errors are the REAL ``pynvml.NVMLError`` (its per-code subclasses,
``pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)``), so the agent runs its production code path:

- ``nvmlDeviceGetProcessUtilization(handle, last_seen_us)``: one sample per process with
  ``smUtil > 0``, stamped with the control API's time; ``NOT_FOUND`` when there is none newer than
  ``last_seen_us`` (idle); ``NOT_SUPPORTED`` on MIG devices and MIG-enabled cards;
- ``nvmlDeviceGetMigDeviceHandleByIndex``: ``NOT_FOUND`` past the card's MIG devices (of at most 7);
- the control API unreachable: ``NVML_ERROR_UNKNOWN``; a call before ``nvmlInit``: ``UNINITIALIZED``.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pynvml import (
    NVML_DEVICE_MIG_DISABLE,
    NVML_DEVICE_MIG_ENABLE,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    NVML_ERROR_UNKNOWN,
    NVMLError,
)

from .nvmlview import MIB, PATH

__all__ = [
    "NVML_DEVICE_MIG_DISABLE",
    "NVML_DEVICE_MIG_ENABLE",
    "NVML_ERROR_GPU_IS_LOST",
    "NVML_ERROR_INVALID_ARGUMENT",
    "NVML_ERROR_NOT_FOUND",
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_UNINITIALIZED",
    "NVML_ERROR_UNKNOWN",
    "NVMLError",
]
MAX_MIG_DEVICES = 7  # an H100's
DRIVER_VERSION = "570.124.06"
NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId of a process outside MIG


@dataclass(frozen=True)
class Handle:
    """A device handle: the card's UUID, and the GPU instance id for a MIG device."""

    uuid: str
    gi_id: int | None = None


@dataclass
class ProcessInfo:  # what nvmlDeviceGetComputeRunningProcesses lists
    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int = NO_INSTANCE
    computeInstanceId: int = NO_INSTANCE


@dataclass
class ProcessUtilizationSample:  # c_nvmlProcessUtilizationSample_t
    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int
    encUtil: int = 0
    decUtil: int = 0


@dataclass
class Memory:  # c_nvmlMemory_t, bytes
    total: int
    free: int
    used: int


class _Source:
    """The control API's latest answer for this node, refreshed after ``ttl_s``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.initialized = False
        self.view: dict[str, Any] = {}
        self.fetched = 0.0

    def get(self) -> dict[str, Any]:
        with self.lock:
            if not self.initialized:
                raise NVMLError(NVML_ERROR_UNINITIALIZED)
            if time.monotonic() - self.fetched > float(os.environ.get("GPUWS_FAKE_NVML_TTL_S", "1")):
                self.view, self.fetched = fetch(), time.monotonic()
            return self.view


_SOURCE = _Source()


def fetch() -> dict[str, Any]:
    """One ``GET /_devcluster/sim/nvml?node=…``; :class:`NVMLError` (UNKNOWN) when it fails."""
    node = os.environ.get("GPUWS_FAKE_NVML_NODE") or os.environ.get("NODE_NAME", "")
    url, headers, context = "", {}, None
    kubeconfig = os.environ.get("GPUWS_FAKE_NVML_KUBECONFIG")
    try:
        if kubeconfig:
            doc = yaml.safe_load(Path(kubeconfig).read_text())
            cluster = doc["clusters"][0]["cluster"]
            url = cluster["server"]
            token = (doc.get("users") or [{}])[0].get("user", {}).get("token")
            if token:
                headers["Authorization"] = f"Bearer {token}"
            if cluster.get("certificate-authority-data"):
                ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
                context = ssl.create_default_context(cadata=ca)
        url = os.environ.get("GPUWS_FAKE_NVML_URL") or url
        if not url or not node:
            raise ValueError("set GPUWS_FAKE_NVML_KUBECONFIG (or _URL) and GPUWS_FAKE_NVML_NODE")
        query = urllib.parse.urlencode({"node": node})
        request = urllib.request.Request(f"{url.rstrip('/')}{PATH}?{query}", headers=headers)
        with urllib.request.urlopen(request, timeout=5, context=context) as resp:
            view: dict[str, Any] = json.loads(resp.read())
    except (OSError, ValueError, KeyError, IndexError, yaml.YAMLError) as exc:
        raise NVMLError(NVML_ERROR_UNKNOWN) from exc
    return view


# ----------------------------------------------------------------------------- init / system
def nvmlInit() -> None:
    with _SOURCE.lock:
        _SOURCE.view, _SOURCE.fetched = fetch(), time.monotonic()
        _SOURCE.initialized = True


def nvmlShutdown() -> None:
    with _SOURCE.lock:
        if not _SOURCE.initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        _SOURCE.initialized = False


def nvmlSystemGetDriverVersion() -> str:
    _SOURCE.get()
    return DRIVER_VERSION


# ------------------------------------------------------------------------------------ devices
def _devices() -> list[dict[str, Any]]:
    return list(_SOURCE.get()["devices"])


def _card(handle: Handle) -> dict[str, Any]:
    if not isinstance(handle, Handle):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    for dev in _devices():
        if dev["uuid"] == handle.uuid:
            return dev
    raise NVMLError(NVML_ERROR_GPU_IS_LOST)


def _slice(handle: Handle) -> dict[str, Any] | None:
    if handle.gi_id is None:
        return None
    for mig in _card(handle)["mig"]:
        if mig["gi_id"] == handle.gi_id:
            return dict(mig)
    raise NVMLError(NVML_ERROR_GPU_IS_LOST)


def _processes(handle: Handle) -> list[dict[str, Any]]:
    procs = _card(handle)["processes"]
    return [p for p in procs if handle.gi_id is None or p["gi_id"] == handle.gi_id]


def nvmlDeviceGetCount() -> int:
    return len(_devices())


def nvmlDeviceGetHandleByIndex(index: int) -> Handle:
    devices = _devices()
    if not 0 <= index < len(devices):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return Handle(devices[index]["uuid"])


def nvmlDeviceGetIndex(handle: Handle) -> int:
    """The card's index in the devcluster's topology (also for a card after one passed through)."""
    if handle.gi_id is not None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return int(_card(handle)["index"])


def nvmlDeviceGetUUID(handle: Handle) -> str:
    mig = _slice(handle)
    return str(mig["uuid"]) if mig else str(_card(handle)["uuid"])


def nvmlDeviceGetName(handle: Handle) -> str:
    mig, model = _slice(handle), str(_card(handle)["model"])
    return f"{model} MIG {mig['profile']}" if mig else model


def nvmlDeviceGetMemoryInfo(handle: Handle, version: int | None = None) -> Memory:
    mig = _slice(handle)
    total = int((mig or _card(handle))["memory_mib"]) * MIB
    used = min(total, int(sum(p["mem_used_mib"] for p in _processes(handle)) * MIB))
    return Memory(total=total, free=total - used, used=used)


def nvmlDeviceGetMigMode(device: Handle) -> list[int]:
    if device.gi_id is not None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    mode = NVML_DEVICE_MIG_ENABLE if _card(device)["mig"] else NVML_DEVICE_MIG_DISABLE
    return [mode, mode]


def nvmlDeviceGetMaxMigDeviceCount(device: Handle) -> int:
    _card(device)
    return MAX_MIG_DEVICES


def nvmlDeviceGetMigDeviceHandleByIndex(device: Handle, index: int) -> Handle:
    migs = _card(device)["mig"]
    if device.gi_id is not None or not 0 <= index < MAX_MIG_DEVICES:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    if index >= len(migs):
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return Handle(device.uuid, int(migs[index]["gi_id"]))


def nvmlDeviceIsMigDeviceHandle(device: Handle) -> int:
    _card(device)
    return int(device.gi_id is not None)


def nvmlDeviceGetGpuInstanceId(device: Handle) -> int:
    if device.gi_id is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    _slice(device)
    return device.gi_id


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(migDevice: Handle) -> Handle:
    _slice(migDevice)
    return Handle(migDevice.uuid)


# ---------------------------------------------------------------------------------- processes
def nvmlDeviceGetComputeRunningProcesses(handle: Handle) -> list[ProcessInfo]:
    return [
        ProcessInfo(
            pid=int(p["pid"]),
            usedGpuMemory=int(p["mem_used_mib"] * MIB),
            gpuInstanceId=NO_INSTANCE if p["gi_id"] is None else int(p["gi_id"]),
            computeInstanceId=NO_INSTANCE if p["gi_id"] is None else 0,
        )
        for p in _processes(handle)
    ]


def nvmlDeviceGetProcessUtilization(handle: Handle, timeStamp: int) -> list[ProcessUtilizationSample]:
    if handle.gi_id is not None or _card(handle)["mig"]:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    stamp = int(float(_SOURCE.get()["time"]) * 1_000_000)
    samples = [
        ProcessUtilizationSample(int(p["pid"]), stamp, round(p["sm_util"]), 0)
        for p in _processes(handle)
        if p["sm_util"] > 0
    ]
    if not samples or stamp <= int(timeStamp):
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return samples
