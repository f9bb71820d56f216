"""Builders for culler policy tests: workspaces with chosen evidence, and a cycle loop like the shell's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gpuworkspace_spawner.services.culler.model import (
    Action,
    Decision,
    GpuEvidence,
    Kernel,
    Policy,
    Probe,
    Reason,
    Terminal,
    Warning,
    Workspace,
)
from gpuworkspace_spawner.services.culler.policy import decide

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
MINUTE = 60.0
HOUR = 3600.0
POLICY = Policy(idle_timeout=HOUR, max_duration=8 * HOUR, warn_before=(30 * MINUTE, 5 * MINUTE))
NO_LEADS = replace(POLICY, warn_before=())
LONG_MAX = replace(POLICY, max_duration_by_profile={"short": 2 * HOUR})
EXEMPTIONS = replace(
    POLICY,
    exempt_users=frozenset({"root"}),
    exempt_groups=frozenset({"ops", "admins"}),
    exempt_profiles=frozenset({"demo"}),
)


def at(minutes: float) -> datetime:
    """NOW plus ``minutes`` (negative: in the past)."""
    return NOW + timedelta(minutes=minutes)


def warned(stage: int, given: float, stop: float, reason: Reason = Reason.IDLE) -> Warning:
    """A warning given ``given`` minutes from NOW, announcing a stop ``stop`` minutes from NOW."""
    return Warning(stage=stage, reason=reason, given_at=at(given), stop_at=at(stop))


def kernel(last: float | None, state: str = "idle", *, id: str = "k1", connections: int = 0) -> Kernel:
    return Kernel(
        id=id,
        execution_state=state,
        last_activity=None if last is None else at(last),
        connections=connections,
    )


BUSY = (kernel(-300, "busy"),)  # busy for the last 5 hours


def gpu(util: float | None = 0.0, last_busy: float | None = None, mode: str = "exclusive") -> GpuEvidence:
    return GpuEvidence(
        mode=mode, allocated=1.0, util_percent=util, last_busy=None if last_busy is None else at(last_busy)
    )


def workspace(
    *,
    started: float | None = -180,
    hub: float | None = None,
    status: float | None = None,
    kernels: tuple[Kernel, ...] | None = (),
    terminals: dict[str, float | None] | None = None,
    probe_error: str | None = None,
    probed: bool = True,
    gpu: GpuEvidence | None = None,
    profile: str | None = None,
    groups: frozenset[str] = frozenset(),
    annotation: bool = False,
    user: str = "alice",
    server: str = "",
) -> Workspace:
    """A running server; times are minutes relative to NOW (started 3 h ago by default)."""
    probe = None
    if probed:
        probe = Probe(
            last_activity=None if status is None else at(status),
            kernels=kernels,
            terminals=None
            if terminals is None
            else tuple(Terminal(name, None if t is None else at(t)) for name, t in terminals.items()),
            error=probe_error,
        )
    return Workspace(
        user=user,
        server=server,
        started=None if started is None else at(started),
        hub_last_activity=None if hub is None else at(hub),
        profile=profile,
        groups=groups,
        exempt_annotation=annotation,
        gpu=gpu,
        probe=probe,
    )


def idle_workspace(
    last: float,
    *,
    started: float | None = -180,
    profile: str | None = None,
    groups: frozenset[str] = frozenset(),
    annotation: bool = False,
) -> Workspace:
    """Idle kernel and idle GPU, all evidence ``last`` minutes from NOW."""
    return workspace(
        started=started,
        hub=last,
        status=last,
        kernels=(kernel(last),),
        gpu=gpu(0.0, last_busy=last - 5),
        profile=profile,
        groups=groups,
        annotation=annotation,
    )


def record(given: list[Warning], decision: Decision, *, now: datetime) -> list[Warning]:
    """What the shell does with a decision: forget cancelled warnings, then keep the one given."""
    if decision.cancels_warnings:
        given = []
    if decision.action is Action.WARN:
        assert decision.stage is not None and decision.reason and decision.stop_at
        given = [*given, Warning(decision.stage, decision.reason, given_at=now, stop_at=decision.stop_at)]
    return given


def run_cycles(
    workspace_at: Callable[[datetime], Workspace],
    policy: Policy,
    *,
    start: datetime,
    minutes: int,
    every: float = 1.0,
) -> list[tuple[datetime, Decision]]:
    """Cycles every ``every`` minutes until a STOP; the decisions that were not a plain KEEP."""
    given: list[Warning] = []
    events: list[tuple[datetime, Decision]] = []
    now = start
    while now <= start + timedelta(minutes=minutes):
        decision = decide(workspace_at(now), policy, given, now=now)
        if decision.action is not Action.KEEP or decision.cancels_warnings:
            events.append((now, decision))
        if decision.action is Action.STOP:
            break
        given = record(given, decision, now=now)
        now += timedelta(minutes=every)
    return events
