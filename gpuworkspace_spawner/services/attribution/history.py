"""Trends in the embedded mode: a bounded ring buffer of time series (pure: the caller passes ``now``).

Series names: ``cluster:gpu_util``, ``cluster:gpus_allocated``, ``cluster:gpus_busy``,
``cluster:gpus_idle``, ``cluster:power_w``, ``node:<name>:gpu_util``, ``node:<name>:gpus_allocated``,
``user:<name>:gpu_util``, ``user:<name>:gpus``, ``user:<name>:cpu``, ``user:<name>:memory``
(:func:`series_of`; MIG instances' shared card power counts once). Each series keeps at most ``capacity`` points, one per ``step_s`` (the last value
recorded in a step wins); a series not recorded for a whole window (a user who left, a removed node)
is dropped, and the number of series is capped.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping

from .model import CellKind, GpuCell, WorkspaceFigures

Point = tuple[float, float]


class History:
    """``capacity`` points per series at ``step_s`` spacing (default 24 h at 60 s), ``max_series`` series."""

    def __init__(self, capacity: int = 1440, step_s: float = 60.0, max_series: int = 10_000) -> None:
        if capacity < 1 or step_s <= 0 or max_series < 1:
            raise ValueError("capacity, step_s and max_series must be positive")
        self.capacity = capacity
        self.step_s = step_s
        self.max_series = max_series
        self._series: dict[str, deque[Point]] = {}

    @property
    def window_s(self) -> float:
        return self.capacity * self.step_s

    def record(self, now: float, series: Mapping[str, float]) -> None:
        """Add one value per series at ``now``; a value in the same step as the last replaces it."""
        step = math.floor(now / self.step_s)
        for name, value in series.items():
            if not math.isfinite(value):
                continue
            points = self._series.get(name)
            if points is None:
                points = self._series[name] = deque(maxlen=self.capacity)
            if points and math.floor(points[-1][0] / self.step_s) == step:
                points[-1] = (now, float(value))
            elif not points or now > points[-1][0]:
                points.append((now, float(value)))
        self._expire(now)

    def _expire(self, now: float) -> None:
        gone = [n for n, p in self._series.items() if not p or now - p[-1][0] > self.window_s]
        for name in gone:
            del self._series[name]
        excess = len(self._series) - self.max_series
        if excess > 0:  # drop the stalest user series first, then the stalest of any kind
            order = sorted(self._series, key=lambda n: (not n.startswith("user:"), self._series[n][-1][0], n))
            for name in order[:excess]:
                del self._series[name]

    def window(self, name: str, since: float, until: float | None = None) -> list[Point]:
        """Points of ``name`` with ``since <= t <= until`` (oldest first); [] for an unknown series."""
        points = self._series.get(name, ())
        return [(t, v) for t, v in points if t >= since and (until is None or t <= until)]

    def names(self, prefix: str = "") -> list[str]:
        return sorted(n for n in self._series if n.startswith(prefix))

    def __len__(self) -> int:
        return len(self._series)


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def series_of(cells: Iterable[GpuCell], figures: Iterable[WorkspaceFigures]) -> dict[str, float]:
    """The values of one cycle for :meth:`History.record` (series with no known value are left out)."""
    cells = list(cells)
    figures = list(figures)
    out: dict[str, float | None] = {
        "cluster:gpu_util": _mean(c.util_percent for c in cells if c.kind is not CellKind.PASSTHROUGH),
        "cluster:gpus_allocated": sum(f.gpus_allocated for f in figures),
        "cluster:gpus_busy": sum(
            f.gpus_allocated * f.gpu_util_percent / 100 for f in figures if f.gpu_util_percent is not None
        ),
        "cluster:gpus_idle": sum(f.gpus_allocated for f in figures if f.gpu_idle),
        "cluster:power_w": sum(
            {(c.node, c.gpu.split("/")[0]): c.power_w for c in cells if c.power_w is not None}.values()
        ),
    }
    by_node: dict[str, list[GpuCell]] = {}
    for c in cells:
        by_node.setdefault(c.node, []).append(c)
    for node, node_cells in by_node.items():
        out[f"node:{node}:gpu_util"] = _mean(c.util_percent for c in node_cells)
    by_user: dict[str, list[WorkspaceFigures]] = {}
    for f in figures:
        by_user.setdefault(f.workspace.user, []).append(f)
        node = f.workspace.node or ""
        key = f"node:{node}:gpus_allocated"
        out[key] = (out.get(key) or 0.0) + f.gpus_allocated
    for user, figs in by_user.items():
        out[f"user:{user}:gpu_util"] = _mean(f.gpu_util_percent for f in figs if f.gpus_allocated > 0)
        out[f"user:{user}:gpus"] = sum(f.gpus_allocated for f in figs)
        out[f"user:{user}:cpu"] = sum(f.cpu_cores or 0.0 for f in figs)
        out[f"user:{user}:memory"] = sum(f.memory_bytes or 0.0 for f in figs)
    return {k: v for k, v in out.items() if v is not None}
