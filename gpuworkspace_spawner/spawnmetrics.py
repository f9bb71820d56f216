"""The hub's own spawn metrics (served by JupyterHub's ``/hub/metrics`` from the default registry)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Histogram

__all__ = ["SPAWN_PHASE_DURATION", "observe_phases"]

SPAWN_PHASE_DURATION = Histogram(
    "gpuworkspace_spawn_phase_duration_seconds",
    "Seconds a successful container workspace start spent in each phase",
    ["phase"],
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200),
)


def observe_phases(durations: Mapping[str, float]) -> None:
    for phase, seconds in durations.items():
        SPAWN_PHASE_DURATION.labels(phase=phase).observe(seconds)
