"""Trends in the embedded mode: a bounded ring buffer of time series (pure: the caller passes ``now``).

Series names: ``cluster:gpu_util``, ``cluster:gpus_allocated``, ``cluster:gpus_busy``,
``cluster:gpus_idle``, ``cluster:power_w``, ``node:<name>:gpu_util``, ``node:<name>:gpus_allocated``,
``user:<name>:gpu_util``, ``user:<name>:gpus`` (:func:`series_of`; MIG instances' shared card power
counts once). Each series keeps one point per step (the last value recorded in a step wins) over the
same window: cluster and node series every ``step_s``, user series every ``user_step_s`` (coarser:
there are thousands of users). A series not recorded for a whole window (a user who left, a removed
node) is dropped, and the number of series is capped.

Points are stored compactly (whole seconds since the series began as 32-bit integers, values as
32-bit floats: 8 bytes a point) so that a day of trends for 2,000 users stays a few MiB; values come
back rounded to 6 significant digits.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping

from .model import CellKind, GpuCell, WorkspaceFigures

Point = tuple[float, float]
USER_STEP_FACTOR = 10  # user series are this much coarser than cluster and node series


class _Series:
    """One series' points: ``times`` (s since ``base``) and ``values``, oldest first, at most ``capacity``."""

    __slots__ = ("base", "capacity", "step_s", "times", "values")

    def __init__(self, now: float, step_s: float, capacity: int) -> None:
        self.base, self.step_s, self.capacity = math.floor(now), step_s, capacity
        self.times, self.values = array("i"), array("f")

    @property
    def last(self) -> float:
        return self.base + self.times[-1]

    def add(self, now: float, value: float) -> None:
        offset = math.floor(now) - self.base
        if self.times and math.floor(self.last / self.step_s) == math.floor(now / self.step_s):
            self.times[-1], self.values[-1] = offset, value  # the same step: the last value wins
        elif not self.times or now > self.last:
            self.times.append(offset)
            self.values.append(value)
            excess = len(self.times) - self.capacity
            if excess > self.capacity // 4:  # trim in chunks: amortised O(1) per point
                del self.times[:excess], self.values[:excess]

    def points(self, since: float, until: float | None) -> list[Point]:
        first = max(0, len(self.times) - self.capacity)
        return [
            (float(self.base + t), float(f"{v:.6g}"))
            for t, v in zip(self.times[first:], self.values[first:], strict=True)
            if self.base + t >= since and (until is None or self.base + t <= until)
        ]


class History:
    """``capacity`` points per series at ``step_s`` spacing (default 24 h at 60 s), ``max_series`` series;
    user series at ``user_step_s`` (default 10 x ``step_s``: 10 minutes, 144 points a day) over the same window."""

    def __init__(
        self,
        capacity: int = 1440,
        step_s: float = 60.0,
        max_series: int = 10_000,
        user_step_s: float | None = None,
    ) -> None:
        if capacity < 1 or step_s <= 0 or max_series < 1 or (user_step_s is not None and user_step_s <= 0):
            raise ValueError("capacity, step_s, user_step_s and max_series must be positive")
        self.capacity = capacity
        self.step_s = step_s
        self.max_series = max_series
        self.user_step_s = user_step_s if user_step_s is not None else USER_STEP_FACTOR * step_s
        self._user_capacity = max(1, math.ceil(capacity * step_s / self.user_step_s))
        self._series: dict[str, _Series] = {}

    @property
    def window_s(self) -> float:
        return self.capacity * self.step_s

    def record(self, now: float, series: Mapping[str, float]) -> None:
        """Add one value per series at ``now``; a value in the same step as the last replaces it."""
        for name, value in series.items():
            if not math.isfinite(value):
                continue
            points = self._series.get(name)
            if points is None:
                user = name.startswith("user:")
                step, capacity = (
                    (self.user_step_s, self._user_capacity) if user else (self.step_s, self.capacity)
                )
                points = self._series[name] = _Series(now, step, capacity)
            points.add(now, float(value))
        self._expire(now)

    def _expire(self, now: float) -> None:
        gone = [n for n, p in self._series.items() if not p.times or now - p.last > self.window_s]
        for name in gone:
            del self._series[name]
        excess = len(self._series) - self.max_series
        if excess > 0:  # drop the stalest user series first, then the stalest of any kind
            order = sorted(self._series, key=lambda n: (not n.startswith("user:"), self._series[n].last, n))
            for name in order[:excess]:
                del self._series[name]

    def window(self, name: str, since: float, until: float | None = None) -> list[Point]:
        """Points of ``name`` with ``since <= t <= until`` (oldest first); [] for an unknown series."""
        points = self._series.get(name)
        return points.points(since, until) if points is not None else []

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
    return {k: v for k, v in out.items() if v is not None}
