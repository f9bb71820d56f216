"""The policy over many cycles, as the shell runs it: warnings fed back, activity arriving, late cycles.

Ends with property tests over random workspaces and random timelines: a server is stopped only after
every warning stage, each with its full lead time, and never when exempt.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import pytest

from gpuworkspace_spawner.services.culler.model import (
    Action,
    Decision,
    GpuEvidence,
    Policy,
    Probe,
    Reason,
    Terminal,
    Warning,
    Workspace,
)
from gpuworkspace_spawner.services.culler.policy import decide, exemption
from tests.unit.culler.scenarios import (
    HOUR,
    MINUTE,
    NOW,
    POLICY,
    at,
    gpu,
    idle_workspace,
    kernel,
    record,
    run_cycles,
    workspace,
)


def summary(
    events: list[tuple[datetime, Decision]],
) -> list[tuple[datetime, str, int | None, datetime | None]]:
    return [(now, d.action.value, d.stage, d.stop_at) for now, d in events]


def test_idle_kernel_and_gpu_warned_twice_then_stopped() -> None:
    events = run_cycles(lambda now: idle_workspace(0), POLICY, start=NOW, minutes=120)
    assert summary(events) == [
        (at(30), "warn", 0, at(60)),
        (at(55), "warn", 1, at(60)),
        (at(60), "stop", None, at(60)),
    ]
    assert all(d.reason is Reason.IDLE for _, d in events)


def test_busy_kernel_without_browser_is_never_culled() -> None:
    policy = replace(POLICY, max_duration=0.0)
    ws = workspace(hub=-600, status=-600, kernels=(kernel(-600, "busy"),), gpu=gpu(0.0, -600))
    assert run_cycles(lambda now: ws, policy, start=NOW, minutes=10 * 60, every=5) == []


def test_gpu_busy_while_kernel_idle_is_never_culled() -> None:
    policy = replace(POLICY, max_duration=0.0)
    ws = workspace(hub=-600, kernels=(kernel(-600),), gpu=gpu(80.0, last_busy=-1))
    assert run_cycles(lambda now: ws, policy, start=NOW, minutes=10 * 60, every=5) == []


def test_gpu_busy_until_a_time_then_idle() -> None:
    def at_time(now: datetime) -> Workspace:
        busy = now < at(90)
        last_busy = (now if busy else at(90)) - NOW
        evidence = GpuEvidence("mig", 0.5, 70.0 if busy else 0.0, NOW + last_busy)
        return replace(workspace(hub=-600, kernels=(kernel(-600),)), gpu=evidence)

    events = run_cycles(at_time, POLICY, start=NOW, minutes=300)
    assert summary(events)[0] == (at(120), "warn", 0, at(150))
    assert summary(events)[-1] == (at(150), "stop", None, at(150))


def test_max_duration_warned_then_stopped_even_if_busy() -> None:
    ws = workspace(started=0, hub=0, kernels=(kernel(0, "busy"),), gpu=gpu(95.0))
    events = run_cycles(lambda now: ws, POLICY, start=NOW, minutes=9 * 60)
    assert summary(events) == [
        (at(450), "warn", 0, at(480)),
        (at(475), "warn", 1, at(480)),
        (at(480), "stop", None, at(480)),
    ]
    assert all(d.reason is Reason.MAX_DURATION for _, d in events)


def test_activity_after_a_warning_cancels_it() -> None:
    def at_time(now: datetime) -> Workspace:
        ran_cell = 40 if now >= at(40) else 0  # the user comes back 10 minutes after the first warning
        return idle_workspace(ran_cell)

    events = run_cycles(at_time, POLICY, start=NOW, minutes=200)
    assert summary(events) == [
        (at(30), "warn", 0, at(60)),
        (at(40), "keep", None, at(100)),
        (at(70), "warn", 0, at(100)),
        (at(95), "warn", 1, at(100)),
        (at(100), "stop", None, at(100)),
    ]
    assert events[1][1].cancels_warnings


def test_terminal_activity_keeps_pushing_the_stop_out() -> None:
    def at_time(now: datetime) -> Workspace:
        typed = (now - NOW) // timedelta(minutes=20) * 20  # a command every 20 minutes
        return workspace(hub=-600, kernels=(kernel(-600),), terminals={"1": typed})

    assert run_cycles(at_time, replace(POLICY, max_duration=0.0), start=NOW, minutes=600) == []


def test_late_culler_honours_every_lead_time() -> None:
    events = run_cycles(lambda now: idle_workspace(-300), POLICY, start=NOW, minutes=120, every=17)
    assert summary(events) == [
        (at(0), "warn", 0, at(30)),
        (at(34), "warn", 1, at(39)),
        (at(51), "stop", None, at(39)),
    ]


def test_restart_forgets_warnings_and_gives_them_again() -> None:
    first = decide(idle_workspace(-300), POLICY, (), now=NOW)
    given = record([], first, now=NOW)
    second = decide(idle_workspace(-300), POLICY, given, now=at(26))
    assert (second.action, second.stage) == (Action.WARN, 1)
    after_restart = decide(idle_workspace(-300), POLICY, (), now=at(26))  # the book was lost
    assert (after_restart.action, after_restart.stage, after_restart.stop_at) == (Action.WARN, 0, at(56))


# Property tests ---------------------------------------------------------------------------------

LEADS = [(), (30 * MINUTE,), (30 * MINUTE, 5 * MINUTE), (60 * MINUTE, 10 * MINUTE, 1 * MINUTE)]


def random_policy(rng: random.Random) -> Policy:
    return Policy(
        idle_timeout=rng.choice([0.0, 10 * MINUTE, HOUR, 2 * HOUR]),
        idle_timeout_by_gpu_mode={"mig": rng.choice([0.0, 30 * MINUTE, 3 * HOUR])},
        idle_timeout_by_profile={"short": 20 * MINUTE},
        max_duration=rng.choice([0.0, 3 * HOUR, 8 * HOUR]),
        max_duration_by_profile={"short": 2 * HOUR},
        warn_before=rng.choice(LEADS),
        exempt_users=frozenset({"root"}),
        exempt_groups=frozenset({"ops"}),
        exempt_profiles=frozenset({"demo"}),
    )


def maybe_time(rng: random.Random, now: datetime) -> datetime | None:
    return None if rng.random() < 0.2 else now - timedelta(minutes=rng.uniform(-1, 600))


def random_workspace(rng: random.Random, now: datetime) -> Workspace:
    probe = None
    if rng.random() < 0.8:
        kernels = tuple(
            kernel(None, rng.choice(["idle", "idle", "busy", "starting", "dead"]), id=f"k{i}")
            for i in range(rng.randrange(3))
        )
        kernels = tuple(replace(k, last_activity=maybe_time(rng, now)) for k in kernels)
        terminals = tuple(Terminal(str(i), maybe_time(rng, now)) for i in range(rng.randrange(2)))
        error = rng.choice([None, None, None, "503"])
        probe = Probe(maybe_time(rng, now), kernels, terminals, error)
    evidence = None
    if rng.random() < 0.7:
        util = rng.choice([None, 0.0, 5.0, 50.0])
        evidence = GpuEvidence(rng.choice(["exclusive", "mig"]), 1.0, util, maybe_time(rng, now))
    rare = 0.04  # each exemption's chance
    groups = set(rng.sample(["staff", "ml"], rng.randrange(3))) | ({"ops"} if rng.random() < rare else set())
    return Workspace(
        user="root" if rng.random() < rare else rng.choice(["alice", "bob"]),
        server=rng.choice(["", "gpu"]),
        started=maybe_time(rng, now - timedelta(hours=rng.uniform(0, 10))),
        hub_last_activity=maybe_time(rng, now),
        profile="demo" if rng.random() < rare else rng.choice([None, "short", "train"]),
        groups=frozenset(groups),
        exempt_annotation=rng.random() < rare,
        gpu=evidence,
        probe=probe,
    )


def random_warnings(rng: random.Random, now: datetime, stages: int) -> list[Warning]:
    given = []
    for stage in range(rng.randrange(stages + 2)):
        given_at = now - timedelta(minutes=rng.uniform(0, 120))
        stop_at = now + timedelta(minutes=rng.uniform(-60, 60))
        given.append(Warning(stage, rng.choice(list(Reason)), given_at, stop_at))
    return given


def check(decision: Decision, ws: Workspace, policy: Policy, given: list[Warning], now: datetime) -> None:
    """The invariants of one decision."""
    leads = policy.warn_before
    assert (decision.action is Action.EXEMPT) == (exemption(ws, policy) is not None)
    effective = [] if decision.cancels_warnings else sorted(given, key=lambda w: w.stage)
    if decision.action is Action.STOP:
        assert len(effective) >= len(leads)
        assert decision.stop_at is not None and now >= decision.stop_at
        if effective:
            assert decision.stop_at == effective[-1].stop_at
    if decision.action is Action.WARN:
        assert decision.stage == len(effective) < len(leads)
        assert decision.stop_at is not None
        assert decision.stop_at >= now + timedelta(seconds=leads[decision.stage])
        assert not effective or decision.stop_at >= effective[-1].stop_at
    if decision.stop_at is not None:
        assert decision.reason is not None
    assert decision.message


@pytest.mark.parametrize("seed", range(5))
def test_random_workspaces_one_decision(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(400):
        now = NOW + timedelta(minutes=rng.uniform(0, 1000))
        policy = random_policy(rng)
        ws = random_workspace(rng, now)
        given = random_warnings(rng, now, len(policy.warn_before))
        check(decide(ws, policy, given, now=now), ws, policy, given, now)


@dataclass
class Timeline:
    """Random activity over a few hours: moments of activity, busy spells of kernel and GPU."""

    activity: list[datetime]
    kernel_busy: list[tuple[datetime, datetime]]
    gpu_busy: list[tuple[datetime, datetime]]
    rng: random.Random

    def workspace(self, base: Workspace, now: datetime) -> Workspace:
        past = [t for t in self.activity if t <= now]
        last = max(past) if past else None
        busy = any(a <= now < b for a, b in self.kernel_busy)
        gpu_busy = any(a <= now < b for a, b in self.gpu_busy)
        gpu_ends = [min(b, now) for a, b in self.gpu_busy if a <= now]
        failed = self.rng.random() < 0.1
        kernels = (replace(kernel(None, "busy" if busy else "idle"), last_activity=last),)
        probe = Probe(error="503") if failed else Probe(last_activity=last, kernels=kernels, terminals=())
        evidence = GpuEvidence("exclusive", 1.0, 60.0 if gpu_busy else 0.0, max(gpu_ends, default=None))
        return replace(base, hub_last_activity=last, probe=probe, gpu=evidence)


def spells(rng: random.Random, count: int) -> list[tuple[datetime, datetime]]:
    starts = [NOW + timedelta(minutes=rng.uniform(0, 600)) for _ in range(count)]
    return [(s, s + timedelta(minutes=rng.uniform(1, 120))) for s in starts]


@pytest.mark.parametrize("seed", range(40))
def test_random_timelines_stop_only_after_every_warning(seed: int) -> None:
    rng = random.Random(seed)
    policy = random_policy(rng)
    base = replace(random_workspace(rng, NOW), started=NOW)
    timeline = Timeline(
        activity=sorted(NOW + timedelta(minutes=rng.uniform(0, 600)) for _ in range(rng.randrange(6))),
        kernel_busy=spells(rng, rng.randrange(3)),
        gpu_busy=spells(rng, rng.randrange(3)),
        rng=rng,
    )
    given: list[Warning] = []
    now = NOW
    while now < NOW + timedelta(hours=14):
        ws = timeline.workspace(base, now)
        decision = decide(ws, policy, given, now=now)
        check(decision, ws, policy, given, now)
        if decision.action is Action.STOP:
            leads = policy.warn_before
            assert len(given) == len(leads) and not decision.cancels_warnings
            for warning, lead in zip(given, leads, strict=True):
                assert now - warning.given_at >= timedelta(seconds=lead)  # each lead time honoured
            last = ws.hub_last_activity  # no idle warning stands from before the latest activity
            if given and given[-1].reason is Reason.IDLE and last is not None:
                assert all(warning.given_at >= last for warning in given)
            break
        given = record(given, decision, now=now)
        now += timedelta(minutes=rng.uniform(0.5, 20))
