"""A start's progress log: a page that asks late still sees every step, and followers wake on new steps."""

from __future__ import annotations

import asyncio

from gpuworkspace_spawner.k8s.reflectors import Changes
from gpuworkspace_spawner.lifecycle.spawning import ProgressStep
from gpuworkspace_spawner.progresslog import ProgressLog

DISK = ProgressStep("disk", 10, "Provisioning your home disk (10Gi on ceph-rbd)")
NODE = ProgressStep("attach", 40, "Scheduled on gpu-1; attaching your home disk")
STARTING = ProgressStep("starting", 75, "Starting your workspace on gpu-1")
READY = ProgressStep("ready", 95, "Your workspace is ready")


async def _collect(log: ProgressLog, sample: list[ProgressStep]) -> list[str]:
    return [step.message async for step in log.follow(lambda: sample[-1], tick_s=0.01)]


def test_a_page_that_asks_after_the_start_moved_on_sees_every_step_it_passed() -> None:
    async def scenario() -> list[str]:
        log = ProgressLog()
        now = [DISK]

        async def wake(limit_s: float) -> None:
            await asyncio.sleep(0.001)

        async with log.recording(lambda: now[-1], wake):
            for step in (NODE, STARTING, READY):
                now.append(step)
                await asyncio.sleep(0.02)
            # the page opens only now, when the pod is already ready
            follower = asyncio.ensure_future(_collect(log, now))
            await asyncio.sleep(0.02)
        return await asyncio.wait_for(follower, 2)

    assert asyncio.run(scenario()) == [DISK.message, NODE.message, STARTING.message, READY.message]


def test_a_follower_wakes_on_a_new_step_and_ends_when_the_start_ends() -> None:
    async def scenario() -> tuple[list[str], float]:
        log = ProgressLog()
        loop = asyncio.get_running_loop()
        seen: list[str] = []
        second = asyncio.Event()

        async def follow() -> None:
            async for step in log.follow(lambda: log.steps[-1] if log.steps else DISK, tick_s=30):
                seen.append(step.message)
                if len(seen) == 2:
                    second.set()

        log.record(DISK)
        follower = asyncio.ensure_future(follow())
        await asyncio.sleep(0.01)
        began = loop.time()
        log.record(STARTING)  # no tick for 30 s: only the record wakes the follower
        await asyncio.wait_for(second.wait(), 10)
        waited = loop.time() - began
        log.close()
        await asyncio.wait_for(follower, 2)
        return seen, waited

    seen, waited = asyncio.run(scenario())
    assert seen == [DISK.message, STARTING.message]
    assert waited < 5  # woken by the step, not by the 30 s tick


def test_the_same_step_twice_is_one_step_and_the_bar_never_moves_back() -> None:
    log = ProgressLog()
    log.record(STARTING)
    log.record(STARTING)
    log.record(ProgressStep("scheduling", 25, "Waiting for a node: 0/3 nodes are available"))
    assert [s.message for s in log.steps] == [STARTING.message, "Waiting for a node: 0/3 nodes are available"]
    assert [s.percent for s in log.steps] == [75, 75]


def test_the_step_a_start_ends_at_is_recorded_even_without_a_change_to_wake_the_recorder() -> None:
    async def scenario() -> list[str]:
        log = ProgressLog()
        now = [DISK]

        async def never(limit_s: float) -> None:
            await asyncio.sleep(3600)

        async with log.recording(lambda: now[-1], never):
            await asyncio.sleep(0)
            now.append(READY)  # ready between two wakes of the recorder
        assert log.closed
        log.record(NODE)  # a closed log takes nothing more
        return [s.message for s in log.steps]

    assert asyncio.run(scenario()) == [DISK.message, READY.message]


def test_the_recorder_ends_with_the_start_even_when_the_pod_changes_as_it_ends() -> None:
    """A pod change and the start's end in the same loop turn: Python 3.11's ``asyncio.wait_for`` returned
    the change and swallowed the recorder's cancellation, so the start never returned (a P4 burst: 1 of 200
    servers "failed to start in 120 seconds" after its workspace-started record)."""

    async def scenario() -> None:
        changes, log = Changes(), ProgressLog()

        async def next_change(limit_s: float) -> bool:
            return await changes.next_change("ns/pod", limit_s)

        async with log.recording(lambda: DISK, next_change):
            await asyncio.sleep(0.01)  # the recorder waits for the pod's next change
            changes.notify("ns/pod")  # ... which comes as the start returns, with no await in between

    asyncio.run(asyncio.wait_for(scenario(), 5))
