"""Scripted GPU (and CPU/memory) load per pod or per process, as pure functions of time.

A :class:`Workload` says what a pod's processes do to a GPU over time: utilization, framebuffer
memory, power and clocks, each either a constant or a step schedule ``[(t_offset_s, value), ...]``
counted from the workload's ``start`` (epoch seconds), optionally repeating every ``loop_s``.
A :class:`WorkloadBook` maps a pod (by uid, or by namespace/name before the pod exists) and an
optional pid to a workload; :meth:`WorkloadBook.sample` aggregates a pod's processes at ``now``.
Nothing here reads a clock: callers pass ``now``. A pod without a workload is idle.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

Step = tuple[float, float]
Series = float | tuple[Step, ...]

# The optional fields: None means "derive from utilization and the card" (see sim.dcgm).
SERIES_FIELDS = (
    "gpu_util",
    "mem_used_mib",
    "power_w",
    "sm_clock_mhz",
    "mem_copy_util",
    "tensor_active",
    "dram_active",
    "pcie_tx_bytes",
    "pcie_rx_bytes",
    "cpu_cores",
    "memory_bytes",
)


class WorkloadError(ValueError):
    """An invalid workload description; ``field`` names the offending key."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


def parse_series(name: str, value: Any) -> Series:
    """A number, or a list of ``[t_offset_s, value]`` pairs with non-decreasing offsets."""
    if isinstance(value, bool):
        raise WorkloadError(name, "must be a number or a list of [t_offset_s, value] pairs")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise WorkloadError(name, f"must be a finite number >= 0, not {value!r}")
        return float(value)
    if not isinstance(value, list | tuple) or not value:
        raise WorkloadError(name, "must be a number or a non-empty list of [t_offset_s, value] pairs")
    steps: list[Step] = []
    for i, pair in enumerate(value):
        if (
            not isinstance(pair, list | tuple)
            or len(pair) != len(("t_offset_s", "value"))
            or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in pair)
        ):
            raise WorkloadError(f"{name}[{i}]", "must be a [t_offset_s, value] pair of numbers")
        t, v = float(pair[0]), float(pair[1])
        if not (math.isfinite(t) and math.isfinite(v)) or t < 0 or v < 0:
            raise WorkloadError(f"{name}[{i}]", "offsets and values must be finite and >= 0")
        if steps and t < steps[-1][0]:
            raise WorkloadError(f"{name}[{i}]", "offsets must not decrease")
        steps.append((t, v))
    return tuple(steps)


def series_at(series: Series, offset: float, loop_s: float | None = None) -> float:
    """The step function's value at ``offset`` seconds (the first value before the first step)."""
    if isinstance(series, float | int):
        return float(series)
    if loop_s:
        offset = offset % loop_s
    value = series[0][1]
    for t, v in series:
        if t > offset:
            break
        value = v
    return value


def series_integral(series: Series, t0: float, t1: float, loop_s: float | None = None) -> float:
    """Exact integral of the step function over offsets ``[t0, t1]`` (value x seconds)."""
    if t1 <= t0:
        return 0.0
    if isinstance(series, float | int):
        return float(series) * (t1 - t0)
    if loop_s:
        cycles0, r0 = divmod(t0, loop_s)
        cycles1, r1 = divmod(t1, loop_s)
        whole = (cycles1 - cycles0) * series_integral(series, 0.0, loop_s)
        return whole - series_integral(series, 0.0, r0) + series_integral(series, 0.0, r1)
    edges = [t0, *(t for t, _ in series if t0 < t < t1), t1]
    return sum(series_at(series, a) * (b - a) for a, b in itertools.pairwise(edges))


@dataclass(frozen=True)
class WorkloadSample:
    """A workload's values at one instant (None: not scripted, derive it)."""

    gpu_util: float = 0.0  # percent of the device (or of the MIG slice)
    mem_used_mib: float = 0.0
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    mem_copy_util: float | None = None  # percent
    tensor_active: float | None = None  # ratio 0..1
    dram_active: float | None = None  # ratio 0..1
    pcie_tx_bytes: float = 0.0  # bytes per second
    pcie_rx_bytes: float = 0.0
    cpu_cores: float | None = None  # for pods without a known local process
    memory_bytes: float | None = None
    cpu_seconds: float | None = None  # cumulative, integrated from cpu_cores since start

    @property
    def busy(self) -> bool:
        return self.gpu_util > 0 or self.mem_used_mib > 0


IDLE = WorkloadSample()


@dataclass(frozen=True)
class Workload:
    """A scripted load; every series is a constant or a step schedule from ``start``."""

    gpu_util: Series = 0.0
    mem_used_mib: Series = 0.0
    power_w: Series | None = None
    sm_clock_mhz: Series | None = None
    mem_copy_util: Series | None = None
    tensor_active: Series | None = None
    dram_active: Series | None = None
    pcie_tx_bytes: Series = 0.0
    pcie_rx_bytes: Series = 0.0
    cpu_cores: Series | None = None
    memory_bytes: Series | None = None
    start: float = 0.0  # epoch seconds of offset 0
    loop_s: float | None = None  # repeat the schedules with this period

    def at(self, now: float) -> WorkloadSample:
        offset = max(0.0, now - self.start)

        def val(series: Series | None) -> float | None:
            return None if series is None else series_at(series, offset, self.loop_s)

        util = val(self.gpu_util) or 0.0
        cpu_seconds = (
            None if self.cpu_cores is None else series_integral(self.cpu_cores, 0.0, offset, self.loop_s)
        )
        return WorkloadSample(
            gpu_util=min(100.0, util),
            mem_used_mib=val(self.mem_used_mib) or 0.0,
            power_w=val(self.power_w),
            sm_clock_mhz=val(self.sm_clock_mhz),
            mem_copy_util=val(self.mem_copy_util),
            tensor_active=val(self.tensor_active),
            dram_active=val(self.dram_active),
            pcie_tx_bytes=val(self.pcie_tx_bytes) or 0.0,
            pcie_rx_bytes=val(self.pcie_rx_bytes) or 0.0,
            cpu_cores=val(self.cpu_cores),
            memory_bytes=val(self.memory_bytes),
            cpu_seconds=cpu_seconds,
        )

    @classmethod
    def from_json(cls, body: Mapping[str, Any], *, now: float) -> Workload:
        """From the control API's JSON (unknown keys are the caller's business); ``start`` defaults to now."""
        kwargs: dict[str, Any] = {}
        for name in SERIES_FIELDS:
            if body.get(name) is not None:
                kwargs[name] = parse_series(name, body[name])
        start = body.get("start", now)
        if isinstance(start, bool) or not isinstance(start, int | float):
            raise WorkloadError("start", "must be epoch seconds")
        loop_s = body.get("loop_s")
        if loop_s is not None and (
            isinstance(loop_s, bool) or not isinstance(loop_s, int | float) or loop_s <= 0
        ):
            raise WorkloadError("loop_s", "must be a number of seconds > 0")
        return cls(**kwargs, start=float(start), loop_s=None if loop_s is None else float(loop_s))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            out[f.name] = [list(step) for step in value] if isinstance(value, tuple) else value
        return out


def combine(samples: Iterable[WorkloadSample]) -> WorkloadSample:
    """Several processes (or pods) on one device: utilizations and memory add up, capped."""
    items = list(samples)
    if not items:
        return IDLE
    if len(items) == 1:
        return items[0]

    def total(name: str, cap: float | None = None) -> float | None:
        values = [getattr(s, name) for s in items if getattr(s, name) is not None]
        if not values:
            return None
        return min(cap, sum(values)) if cap is not None else sum(values)

    def peak(name: str) -> float | None:
        values = [getattr(s, name) for s in items if getattr(s, name) is not None]
        return max(values) if values else None

    return WorkloadSample(
        gpu_util=total("gpu_util", 100.0) or 0.0,
        mem_used_mib=total("mem_used_mib") or 0.0,
        power_w=peak("power_w"),
        sm_clock_mhz=peak("sm_clock_mhz"),
        mem_copy_util=total("mem_copy_util", 100.0),
        tensor_active=total("tensor_active", 1.0),
        dram_active=total("dram_active", 1.0),
        pcie_tx_bytes=total("pcie_tx_bytes") or 0.0,
        pcie_rx_bytes=total("pcie_rx_bytes") or 0.0,
        cpu_cores=total("cpu_cores"),
        memory_bytes=total("memory_bytes"),
        cpu_seconds=total("cpu_seconds"),
    )


PodRef = tuple[str, str]  # ("uid", <uid>) or ("name", "<namespace>/<name>")


@dataclass
class WorkloadBook:
    """Pod (uid or namespace/name) and optional pid -> workload. A uid entry wins over a name entry."""

    entries: dict[tuple[PodRef, int | None], Workload] = field(default_factory=dict)

    @staticmethod
    def ref(*, uid: str = "", namespace: str = "", name: str = "") -> PodRef:
        if uid:
            return ("uid", uid)
        if namespace and name:
            return ("name", f"{namespace}/{name}")
        raise WorkloadError("pod", "a pod uid, or a namespace and a name, is required")

    def put(self, ref: PodRef, workload: Workload, pid: int | None = None) -> None:
        self.entries[(ref, pid)] = workload

    def remove(self, ref: PodRef, pid: int | None = None, *, all_pids: bool = False) -> int:
        keys = [k for k in self.entries if k[0] == ref and (all_pids or k[1] == pid)]
        for key in keys:
            del self.entries[key]
        return len(keys)

    def clear(self) -> None:
        self.entries.clear()

    def for_pod(self, *, uid: str, namespace: str, name: str) -> dict[int | None, Workload]:
        by_uid = {pid: w for (ref, pid), w in self.entries.items() if ref == ("uid", uid)}
        if by_uid:
            return by_uid
        key = ("name", f"{namespace}/{name}")
        return {pid: w for (ref, pid), w in self.entries.items() if ref == key}

    def sample(self, *, uid: str, namespace: str = "", name: str = "", now: float) -> WorkloadSample:
        """The pod's processes combined at ``now``; idle when nothing is scripted."""
        scripted = self.for_pod(uid=uid, namespace=namespace, name=name)
        return combine(w.at(now) for w in scripted.values())

    def forget_pod(self, uid: str) -> None:
        """Drop a deleted pod's uid entries (name entries stay: they describe a future pod too)."""
        for key in [k for k in self.entries if k[0] == ("uid", uid)]:
            del self.entries[key]

    def to_json(self) -> list[dict[str, Any]]:
        out = []
        for (ref, pid), workload in sorted(self.entries.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
            item: dict[str, Any] = {ref[0]: ref[1], **workload.to_json()}
            if pid is not None:
                item["pid"] = pid
            out.append(item)
        return out


def workload_book(ctx: Any) -> WorkloadBook:
    """The cluster's workload scripts (``ctx.components["workloads"]`` of a SimContext), made on first use."""
    book = ctx.components.get("workloads")
    if not isinstance(book, WorkloadBook):
        book = ctx.components["workloads"] = WorkloadBook()
    return book
