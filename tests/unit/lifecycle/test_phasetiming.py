"""PhaseClock: seconds per start phase, as gpuworkspace_spawn_phase_duration_seconds observes them."""

from __future__ import annotations

import pytest

from gpuworkspace_spawner.lifecycle.phasetiming import PhaseClock


@pytest.mark.parametrize(
    ("samples", "end", "expected"),
    [
        pytest.param([], 5.0, {}, id="nothing-seen"),
        pytest.param([("prepare", 0.0)], 2.5, {"prepare": 2.5}, id="one-phase-closed-at-the-end"),
        pytest.param(
            [("prepare", 0.0), ("disk", 1.0), ("disk", 2.0), ("scheduling", 4.0), ("ready", 10.0)],
            10.5,
            {"prepare": 1.0, "disk": 3.0, "scheduling": 6.0, "ready": 0.5},
            id="repeated-samples-of-a-phase-do-not-restart-it",
        ),
        pytest.param(
            [("image", 0.0), ("starting", 3.0), ("image", 4.0), ("starting", 6.0)],
            7.0,
            {"image": 5.0, "starting": 2.0},
            id="a-phase-seen-again-adds-up",
        ),
        pytest.param(
            [("disk", 5.0), ("image", 4.0)], 4.0, {"disk": 0.0, "image": 0.0}, id="clock-never-negative"
        ),
    ],
)
def test_phase_durations(samples: list[tuple[str, float]], end: float, expected: dict[str, float]) -> None:
    clock = PhaseClock()
    for phase, now in samples:
        clock.observe(phase, now)
    assert clock.finish(end) == expected
    assert clock.finish(end + 100) == expected  # finished: later calls add nothing
