"""How long a start spent in each phase: the figures behind ``gpuworkspace_spawn_phase_duration_seconds``.

Pure (times are passed in). The spawner samples the phase it reports as progress (``disk``,
``scheduling``, ``attach``, ``image``, ``starting``, ``ready``: :func:`.spawning.build_progress`) about
once a second while it waits for the pod, and once when the start returns; a phase's time runs from
the sample that first saw it to the sample that saw the next one. A phase seen again later (a pod
re-created) adds to its total.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PhaseClock"]


@dataclass
class PhaseClock:
    """Seconds per phase of one start; ``observe`` each sample, ``finish`` once at the end."""

    current: str | None = None
    since: float = 0.0
    totals: dict[str, float] = field(default_factory=dict)

    def observe(self, phase: str, now: float) -> None:
        if phase == self.current:
            return
        self._close(now)
        self.current, self.since = phase, now

    def finish(self, now: float) -> dict[str, float]:
        """The seconds of every phase seen, the current one closed at ``now``."""
        self._close(now)
        self.current = None
        return dict(self.totals)

    def _close(self, now: float) -> None:
        if self.current is not None:
            self.totals[self.current] = self.totals.get(self.current, 0.0) + max(0.0, now - self.since)
