"""Each workspace's last hour, for the panel in its own JupyterLab (pure: the caller passes ``now``).

:class:`.history.History` keeps cluster, node and per-user series for a day; a workspace's own
figures (GPU utilisation and memory with their basis, CPU, memory) are kept here, for one hour only,
one point per ``step_s`` (the last value of a step wins, so the newest point is always this cycle's).
A workspace not seen for a whole window is dropped.

Written by the collector's worker thread, read by the API on the event loop: each workspace's points
are an immutable tuple replaced whole (one dict assignment), so a reader never sees half a cycle.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

from .model import WorkspaceFigures

# the figures of one point, in this order (JSON names of the API's series)
FIELDS = ("gpu_util_percent", "gpu_mem_used_mib", "cpu_cores", "memory_bytes")
Point = tuple[float, float | None, float | None, float | None, float | None]


class Recent(NamedTuple):
    """One workspace's points (oldest first) and what its latest cycle said about them (a NamedTuple:
    one is built for every workspace in every cycle; about 8 ms a cycle for 2,000 workspaces)."""

    points: tuple[Point, ...]
    basis: str
    gpu_mode: str
    caveat: str
    cpu_limit: float | None  # cores (None: no limit)
    memory_limit: float | None  # bytes


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


class RecentUsage:
    """The last ``window_s`` of every running workspace, keyed by ``(user, server)``."""

    def __init__(self, window_s: float = 3600.0, step_s: float = 30.0) -> None:
        if window_s <= 0 or step_s <= 0:
            raise ValueError("window_s and step_s must be positive")
        self.window_s, self.step_s = window_s, step_s
        self._recent: dict[tuple[str, str], Recent] = {}

    def record(self, now: float, figures: Iterable[WorkspaceFigures]) -> None:
        """This cycle's figures of every workspace (job pods are not workspaces and are left out)."""
        seen: set[tuple[str, str]] = set()
        since = now - self.window_s
        for f in figures:
            ws = f.workspace
            if ws.is_job:
                continue
            key = (ws.user, ws.server)
            seen.add(key)
            point: Point = (
                now,
                _finite(f.gpu_util_percent),
                _finite(f.gpu_mem_used_mib),
                _finite(f.cpu_cores),
                _finite(f.memory_bytes),
            )
            old = self._recent.get(key)
            points = old.points if old else ()
            first = 0
            while first < len(points) and points[first][0] < since:  # oldest first: usually 0 or 1 to drop
                first += 1
            points = points[first:]
            if points and math.floor(points[-1][0] / self.step_s) == math.floor(now / self.step_s):
                points = points[:-1]  # the same step: the last value wins
            self._recent[key] = Recent(
                points=(*points, point),
                basis=str(f.basis),
                gpu_mode=ws.gpu_mode,
                caveat=f.caveat,
                cpu_limit=ws.cpu_limit,
                memory_limit=ws.memory_limit,
            )
        for key in [k for k, r in self._recent.items() if k not in seen and r.points[-1][0] < since]:
            del self._recent[key]

    def get(self, user: str, server: str) -> Recent | None:
        return self._recent.get((user, server))

    def __len__(self) -> int:
        return len(self._recent)


def recent_json(recent: Recent, *, since: float) -> dict[str, object]:
    """The API's body: one ``[[t, value], ...]`` series per figure (unknown values left out)."""
    kept = [p for p in recent.points if p[0] >= since]
    series = {
        name: [[round(p[0], 3), round(v, 4)] for p in kept if (v := p[i + 1]) is not None]
        for i, name in enumerate(FIELDS)
    }
    return {
        "basis": recent.basis,
        "gpu_mode": recent.gpu_mode,
        "caveat": recent.caveat,
        "limits": {"cpu_cores": recent.cpu_limit, "memory_bytes": recent.memory_limit},
        "series": series,
    }
