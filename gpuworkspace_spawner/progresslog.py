"""The steps one start has passed, kept for every progress page that follows it.

JupyterHub streams a start's progress from ``Spawner.progress()`` to each page that asks, and a page can ask
late: the spawn-pending page opened a few seconds after the request, a second tab, a REST client. KubeSpawner
replays its pod's events from the beginning for such a page; a spawner that only reported the step it is at
now showed a late page "Server requested" and then "ready", as if the disk, the node and the image had never
been waited for. Here a recorder beside the start writes each step as it happens (woken by the pod watch),
and each follower replays what it missed, then wakes on every new step rather than on a timer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from .lifecycle.spawning import ProgressStep

__all__ = ["ProgressLog"]


class ProgressLog:
    """One start's steps, oldest first; its percent never goes down (a bar that moves back reads as a
    failure); closed when the start ends, which ends every follower."""

    def __init__(self) -> None:
        self.steps: list[ProgressStep] = []
        self.closed = False
        self._grew = asyncio.Event()

    def record(self, step: ProgressStep) -> None:
        """Add ``step`` unless it is the step the start is already at (same phase and message)."""
        if self.closed:
            return
        if self.steps:
            last = self.steps[-1]
            if (last.phase, last.message) == (step.phase, step.message):
                return
            if step.percent < last.percent:
                step = ProgressStep(step.phase, last.percent, step.message)
        self.steps.append(step)
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        self._grew.set()
        self._grew = asyncio.Event()

    async def follow(
        self, sample: Callable[[], ProgressStep], tick_s: float = 1.0
    ) -> AsyncIterator[ProgressStep]:
        """Every step so far, then each new one until the start ends. ``sample`` (where the start is now, read
        from the watch caches) is recorded on each wake and every ``tick_s`` seconds, so a follower is never
        behind the caches even if the recorder is."""
        sent = 0
        while True:
            grew = self._grew
            if not self.closed:
                self.record(sample())
            while sent < len(self.steps):
                yield self.steps[sent]
                sent += 1
            if self.closed:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(tick_s):  # not wait_for: see k8s.reflectors.Changes
                    await grew.wait()

    @contextlib.asynccontextmanager
    async def recording(
        self, sample: Callable[[], ProgressStep], next_change: Callable[[float], Awaitable[object]]
    ) -> AsyncIterator[None]:
        """Record beside the start in the ``with`` block, then close: ``sample`` on every change
        ``next_change(limit_s)`` waits for (the pod watch), and at least once a second for what has no event
        to wait on here (the claim, Events)."""

        async def record() -> None:
            while not self.closed:  # also ends the loop should a cancellation be swallowed below it
                await next_change(1.0)
                self.record(sample())

        self.record(sample())  # where the start is as it begins

        recorder = asyncio.ensure_future(record())
        try:
            yield
        finally:
            with contextlib.suppress(Exception):  # the step the start ended at: a cache read, never its error
                self.record(sample())
            self.close()
            recorder.cancel()
            await asyncio.gather(recorder, return_exceptions=True)
