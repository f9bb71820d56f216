"""GPU and CPU evidence from the attribution service: one ``GET api/v1/workspaces`` per cycle.

The attribution service (:mod:`..attribution.views` ``workspace_json``) reports each running workspace's
GPU mode, allocation, latest utilisation sample and idle-allocated GPU seconds. It keeps no "last busy"
time, so this module does, in memory: a sample at or above ``policy.gpu_busy_percent`` moves it to the
cycle's ``now``. A GPU workspace first seen by this process starts at the process's start time, never
earlier: a restarted culler waits a full idle timeout before it can idle-stop a GPU workspace. The
pod's CPU use (``cpu.used``, cores) is kept the same way, except that it has no such floor: CPU use is
evidence only when seen.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from .hubapi import Http, HttpError
from .model import GPU_MODES, CpuEvidence, GpuEvidence

log = logging.getLogger("gpuworkspace.culler")

Key = tuple[str, str]


@dataclass(frozen=True)
class GpuReading:
    """What the attribution service says about one running workspace."""

    gpu: GpuEvidence
    profile: str | None = None
    namespace: str = ""
    cull_exempt: bool = False  # the workspace carries the cull-exempt annotation
    cpu: CpuEvidence | None = None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def parse_workspace(item: Mapping[str, Any]) -> tuple[Key, str, GpuReading] | None:
    """(key, gpu mode, reading without last_busy) from one ``workspace_json`` row; None if unusable, or
    a job's pod (an attribution service that lists them with workspaces must not make a job's GPU use the
    activity of the workspace it was submitted from)."""
    user = item.get("user")
    if not isinstance(user, str) or not user or item.get("kind", "workspace") != "workspace":
        return None
    gpu = _mapping(item.get("gpu"))
    accounting = _mapping(item.get("accounting"))
    cpu_used = _float(_mapping(item.get("cpu")).get("used"))
    mode = str(item.get("gpu_mode") or "none")
    reading = GpuReading(
        gpu=GpuEvidence(
            mode=mode if mode in GPU_MODES else "none",
            allocated=_float(gpu.get("allocated")) or 0.0,
            util_percent=_float(gpu.get("util_percent")),
            idle_allocated_gpu_seconds=_float(accounting.get("idle_allocated_gpu_seconds")),
        ),
        profile=item.get("profile") or None,
        namespace=str(item.get("namespace") or ""),
        cull_exempt=item.get("cull_exempt") is True,
        cpu=CpuEvidence(used_cores=cpu_used if cpu_used is None or cpu_used >= 0 else None),
    )
    return (user, str(item.get("server") or "")), mode, reading


class GpuSource:
    """Reads the attribution service and keeps each GPU workspace's last busy time."""

    def __init__(self, http: Http, url: str, *, started_at: datetime) -> None:
        self.http = http
        self.url = url.rstrip("/") + "/api/v1/workspaces"
        self.started_at = started_at
        self.error: str | None = None  # the last read's failure, None when it worked
        self._last_busy: dict[Key, datetime] = {}
        self._cpu_last_busy: dict[Key, datetime] = {}

    async def read(
        self, *, busy_percent: float, now: datetime, cpu_busy_cores: float = 0.0
    ) -> dict[Key, GpuReading]:
        """Every workspace the attribution service lists; {} (and ``error`` set) when it cannot be read."""
        try:
            body = await self.http.get_json(self.url, what="read GPU attribution")
        except HttpError as e:
            if self.error is None:  # once per outage
                log.warning("GPU evidence unavailable, deciding without it: %s", e)
            self.error = str(e)
            return {}
        if self.error is not None:
            log.info("GPU evidence available again from %s", self.url)
        self.error = None
        items = body.get("items") if isinstance(body, Mapping) else body
        readings: dict[Key, GpuReading] = {}
        for item in items if isinstance(items, list) else ():
            parsed = parse_workspace(item) if isinstance(item, Mapping) else None
            if parsed is None:
                continue
            key, _, reading = parsed
            reading = self._with_cpu_last_busy(key, reading, busy_cores=cpu_busy_cores, now=now)
            readings[key] = self._with_last_busy(key, reading, busy_percent=busy_percent, now=now)
        for key in [k for k in self._last_busy if k not in readings]:
            del self._last_busy[key]
        for key in [k for k in self._cpu_last_busy if k not in readings]:
            del self._cpu_last_busy[key]
        return readings

    def _with_cpu_last_busy(
        self, key: Key, reading: GpuReading, *, busy_cores: float, now: datetime
    ) -> GpuReading:
        cpu = reading.cpu
        if cpu is None:
            return reading
        if busy_cores > 0 and cpu.used_cores is not None and cpu.used_cores >= busy_cores:
            self._cpu_last_busy[key] = now
        return replace(reading, cpu=replace(cpu, last_busy=self._cpu_last_busy.get(key)))

    def _with_last_busy(
        self, key: Key, reading: GpuReading, *, busy_percent: float, now: datetime
    ) -> GpuReading:
        gpu = reading.gpu
        if gpu.allocated <= 0:
            return reading
        util = gpu.util_percent
        if util is not None and util >= busy_percent:
            self._last_busy[key] = now
        last = self._last_busy.setdefault(key, self.started_at)
        evidence = GpuEvidence(gpu.mode, gpu.allocated, util, last, gpu.idle_allocated_gpu_seconds)
        return replace(reading, gpu=evidence)
