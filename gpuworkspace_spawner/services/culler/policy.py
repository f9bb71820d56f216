"""The culling policy: latest activity, the deadline, and the staged warnings before a stop (pure).

:func:`decide` turns one :class:`.Workspace`, the :class:`.Policy` and the warnings already given into
a :class:`.Decision`:

1. An exemption (user, group, profile, annotation) wins over everything, max duration included.
2. Activity is the latest of the server's own evidence (``/api/status``, each kernel's and
   terminal's ``last_activity``), the GPU's and the CPU's ``last_busy``; a busy or starting kernel, a
   GPU sample and the pod's CPU use at or above their thresholds are activity *now* (the CPU covers a
   process busy in a terminal that prints nothing). Open connections (a browser tab) are not. The
   hub's ``last_activity`` counts **only when the server's own evidence is missing** (it was not
   probed, or its probe failed before reading anything): the culler's own probes pass through the
   proxy, which records every proxied request as the route's activity, and the hub copies that into
   the server's ``last_activity`` (``JupyterHub.update_last_activity``, every
   ``last_activity_interval``), so a probed server's hub record is always recent. With no evidence the
   start time stands in; a failed probe with no hub activity either is active: unknown is not idle.
3. The deadline is the earlier of idle (last activity + idle timeout) and max duration (start + max).
   Which idle timeout, maximum and lead times apply to a workspace, and why: :mod:`.precedence`.
4. Every stage of the workspace's lead times (its profile's ``session.warnings``, else
   ``warn_before``) is given before a stop, each with its full lead time even when the culler runs
   late; new activity withdraws idle warnings, never max-duration ones.

Time is the ``now=`` parameter; the I/O shell (:mod:`.cycle`) keeps the warnings given and acts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from ...manifests.names import ANN_CULL_EXEMPT
from .model import Action, Decision, Effective, Kernel, Policy, Probe, Reason, Source, Warning, Workspace
from .precedence import effective

EXEMPT_ANNOTATION = ANN_CULL_EXEMPT
# A kernel no client ever connected to stays "starting" in jupyter_server 2.x; only this long after its
# last activity is "starting" taken for a kernel coming up.
STARTING_GRACE = timedelta(minutes=2)
SOURCE_HUB = "hub"
SOURCE_SERVER = "server"
SOURCE_GPU = "gpu"
SOURCE_CPU = "cpu"
SOURCE_STARTED = "started"  # no activity evidence: idle since the start
SOURCE_UNKNOWN = "probe failed"  # the server did not answer and the hub saw no activity: active now
SOURCE_NONE = "no evidence"  # neither activity nor a start time: active now

_MINUTE = 60
_HOUR = 3600
_FOR = {Reason.IDLE: "idleness", Reason.MAX_DURATION: "the maximum session length"}
_Plan = tuple[Action, int | None, datetime | None, Reason | None]  # action, stage, stop_at, reason


def exemption(workspace: Workspace, policy: Policy) -> str | None:
    """Why the workspace is never culled ("user alice is exempt"), or None."""
    if workspace.user in policy.exempt_users:
        return f"user {workspace.user} is exempt"
    groups = sorted(workspace.groups & policy.exempt_groups)
    if groups:
        return f"group {groups[0]} is exempt"
    if workspace.profile is not None and workspace.profile in policy.exempt_profiles:
        return f"profile {workspace.profile} is exempt"
    if workspace.exempt_annotation:
        return f"annotation {EXEMPT_ANNOTATION} is set"
    return None


def idle_timeout_for(workspace: Workspace, policy: Policy) -> float:
    """Seconds of idleness before a stop (0: never), by :func:`.precedence.effective`."""
    return effective(workspace, policy).idle_timeout


def max_duration_for(workspace: Workspace, policy: Policy) -> float:
    """Longest session in seconds (0: no limit), by :func:`.precedence.effective`."""
    return effective(workspace, policy).max_duration


def last_activity(workspace: Workspace, policy: Policy, *, now: datetime) -> tuple[datetime, str]:
    """The latest activity and its source ("server", "kernel k1", "busy kernel k1", "gpu", "hub", ...).

    Activity now (a busy kernel, a busy GPU, a failed probe with no hub activity) returns ``now``.
    The hub's ``last_activity`` is evidence only without the server's own (:func:`own_evidence`).
    Without any evidence: the start time (source "started"), else ``now`` (source "no evidence").
    """
    live, seen = _probe_evidence(workspace, now)
    gpu = workspace.gpu
    if gpu is not None:
        if gpu.util_percent is not None and gpu.util_percent >= policy.gpu_busy_percent:
            live.append(SOURCE_GPU)
        seen.append((gpu.last_busy, SOURCE_GPU))
    cpu = workspace.cpu
    if cpu is not None and policy.cpu_busy_cores > 0:
        if cpu.used_cores is not None and cpu.used_cores >= policy.cpu_busy_cores:
            live.append(SOURCE_CPU)
        seen.append((cpu.last_busy, SOURCE_CPU))
    probe = workspace.probe
    if probe is not None and probe.error is not None and not seen_by_server_or_hub(workspace):
        live.append(SOURCE_UNKNOWN)
    if live:
        return now, live[0]
    known = [(at, source) for at, source in seen if at is not None]
    if known:
        return max(known, key=lambda pair: pair[0])  # the first source wins a tie
    if workspace.started is not None:
        return workspace.started, SOURCE_STARTED
    return now, SOURCE_NONE


def own_evidence(probe: Probe | None) -> bool:
    """Did the server say anything about itself? Not when unprobed, nor when its probe read nothing."""
    if probe is None:
        return False
    read = probe.last_activity is not None or probe.kernels is not None or probe.terminals is not None
    return probe.error is None or read


def seen_by_server_or_hub(workspace: Workspace) -> bool:
    """Is there any activity evidence from the server, or (without it) from the hub?"""
    if own_evidence(workspace.probe):
        return True
    return workspace.hub_last_activity is not None


def runs_code(kernel: Kernel, at: datetime) -> bool:
    """Is the kernel running code (activity now) as of ``at``? Busy, or starting for a short while."""
    if kernel.execution_state == "busy":
        return True
    if kernel.execution_state == "starting":
        return kernel.last_activity is None or at - kernel.last_activity < STARTING_GRACE
    return False


def _probe_evidence(
    workspace: Workspace, now: datetime
) -> tuple[list[str], list[tuple[datetime | None, str]]]:
    """Sources active now, and timestamped evidence, from the single-user server (else the hub).

    What a failed probe did return still counts: it can only delay a stop.
    """
    live: list[str] = []
    probe = workspace.probe
    if probe is None or not own_evidence(probe):
        return live, [(workspace.hub_last_activity, SOURCE_HUB)]
    seen: list[tuple[datetime | None, str]] = [(probe.last_activity, SOURCE_SERVER)]
    for kernel in probe.kernels or ():
        if runs_code(kernel, now):
            live.append(f"busy kernel {kernel.id}")
        seen.append((kernel.last_activity, f"kernel {kernel.id}"))  # connections are not activity
    seen.extend((terminal.last_activity, f"terminal {terminal.name}") for terminal in probe.terminals or ())
    return live, seen


def decide(workspace: Workspace, policy: Policy, warnings: Sequence[Warning], *, now: datetime) -> Decision:
    """What to do with one running server now, given the warnings already given to it."""
    return hold_unconfirmed_idle_stop(workspace, _decide(workspace, policy, warnings, now=now))


def hold_unconfirmed_idle_stop(workspace: Workspace, decision: Decision) -> Decision:
    """Fail closed: no idle stop on evidence the server itself could not confirm (its probe failed)."""
    probe = workspace.probe
    if decision.action is Action.STOP and decision.reason is Reason.IDLE and probe and probe.error:
        message = f"not stopped: the server did not answer ({probe.error}); {decision.message}"
        return replace(decision, action=Action.KEEP, message=message)
    return decision


def _decide(workspace: Workspace, policy: Policy, warnings: Sequence[Warning], *, now: datetime) -> Decision:
    last, source = last_activity(workspace, policy, now=now)
    rules = effective(workspace, policy)
    exempt = exemption(workspace, policy)
    if exempt is not None:
        return Decision(
            workspace.user,
            workspace.server,
            Action.EXEMPT,
            f"never culled: {exempt}",
            last_activity=last,
            activity_source=source,
            policy=rules,
        )
    given = sorted(warnings, key=lambda w: w.stage)
    idle_at, max_at = _deadlines(workspace, rules, last)
    cancel = _cancels(given, idle_at, max_at, last)
    if cancel is not None:
        given = []
    plan = _plan(rules.warn_before, given, idle_at, max_at, last, now=now)
    action, stage, stop_at, reason = plan
    message = _message(workspace, policy, rules, plan, last, source, now=now)
    if cancel is not None:
        message = f"warnings withdrawn ({cancel}); {message}"
    # the warnings' hand-off, also between stages (a notice outlives its cycle); not on the stop itself
    handoff = action is not Action.STOP and stop_at is not None and _offers_handoff(workspace, policy, reason)
    return Decision(
        workspace.user,
        workspace.server,
        action,
        message,
        reason=reason,
        stage=stage,
        stop_at=stop_at,
        last_activity=last,
        activity_source=source,
        cancels_warnings=cancel is not None,
        handoff=handoff,
        policy=rules,
    )


def decide_all(
    workspaces: Iterable[Workspace],
    policy: Policy,
    warnings: Mapping[tuple[str, str], Sequence[Warning]],
    *,
    now: datetime,
) -> list[Decision]:
    """:func:`decide` for each workspace, in input order."""
    return [decide(ws, policy, warnings.get(ws.key, ()), now=now) for ws in workspaces]


def _deadlines(
    workspace: Workspace, rules: Effective, last: datetime
) -> tuple[datetime | None, datetime | None]:
    """The idle deadline and the max-duration deadline (None: that rule does not apply)."""
    idle, longest = rules.idle_timeout, rules.max_duration
    idle_at = last + timedelta(seconds=idle) if idle > 0 else None
    started = workspace.started
    max_at = started + timedelta(seconds=longest) if longest > 0 and started is not None else None
    return idle_at, max_at


def _governing(
    given: Sequence[Warning], idle_at: datetime | None, max_at: datetime | None
) -> tuple[datetime, Reason] | None:
    """The deadline that governs; max duration wins a tie, and keeps governing once announced."""
    if max_at is not None and (
        idle_at is None or max_at <= idle_at or (given and given[-1].reason is Reason.MAX_DURATION)
    ):
        return max_at, Reason.MAX_DURATION
    if idle_at is not None:
        return idle_at, Reason.IDLE
    return None


def _cancels(
    given: Sequence[Warning], idle_at: datetime | None, max_at: datetime | None, last: datetime
) -> str | None:
    """Why the warnings given no longer hold (new activity, another reason), or None."""
    if not given:
        return None
    if any(w.reason is Reason.IDLE and last > w.given_at for w in given):
        return "new activity"
    governing = _governing(given, idle_at, max_at)
    if governing is None:
        return "no stop applies any more"
    if governing[1] is not given[-1].reason:
        return f"the stop is now for {_FOR[governing[1]]}"
    return None


def _plan(
    leads: Sequence[float],
    given: Sequence[Warning],
    idle_at: datetime | None,
    max_at: datetime | None,
    last: datetime,
    *,
    now: datetime,
) -> _Plan:
    """The next step: the next warning stage once its lead time has come, a stop once all were given."""
    governing = _governing(given, idle_at, max_at)
    if governing is None:
        return Action.KEEP, None, None, None
    deadline, reason = governing
    stop_at = given[-1].stop_at if given else deadline
    if reason is Reason.IDLE and last >= now:  # active now: nothing to warn about yet
        return Action.KEEP, None, stop_at, reason
    stage = len(given)
    if stage < len(leads):
        lead = timedelta(seconds=leads[stage])
        if now >= stop_at - lead:
            return Action.WARN, stage, max(stop_at, now + lead), reason  # every lead is honoured
        return Action.KEEP, None, stop_at, reason
    if now >= stop_at:
        return Action.STOP, None, stop_at, reason
    return Action.KEEP, None, stop_at, reason


def _message(
    workspace: Workspace,
    policy: Policy,
    rules: Effective,
    plan: _Plan,
    last: datetime,
    source: str,
    *,
    now: datetime,
) -> str:
    """One sentence for the user and the status page: the evidence, then what happens when."""
    action, stage, stop_at, reason = plan
    if reason is Reason.MAX_DURATION and workspace.started is not None:
        longest = rules.max_duration
        whose = "the" if rules.max_duration_source is Source.DEFAULT else "the profile's"
        running = _duration((now - workspace.started).total_seconds())
        over = "over" if now >= workspace.started + timedelta(seconds=longest) else "within"
        evidence = f"running {running}, {over} {whose} {_duration(longest)} maximum"
    else:
        evidence = _evidence(workspace, policy, last, source, now=now)
    if stop_at is None:
        return f"{evidence}; idle culling is off"
    when = _clock(stop_at, now)
    if action is Action.STOP:
        return f"{evidence}; stopping now (due {when})"
    if action is Action.WARN and stage is not None:
        warning = f"{evidence}; stops at {when} (warning {stage + 1} of {len(rules.warn_before)})"
        return f"{warning}. {policy.handoff}" if _offers_handoff(workspace, policy, reason) else warning
    if reason is Reason.IDLE:
        return f"{evidence}; stops at {when} if still idle"
    return f"{evidence}; stops at {when}"


def _offers_handoff(workspace: Workspace, policy: Policy, reason: Reason | None) -> bool:
    """A warning names the jobs hand-off when one is configured and the run may be long: a session at
    its maximum, or a workspace holding a GPU (an idle one may be waiting on a run it no longer shows)."""
    holds_gpu = workspace.gpu is not None and workspace.gpu.allocated > 0
    return bool(policy.handoff) and (reason is Reason.MAX_DURATION or holds_gpu)


def _evidence(workspace: Workspace, policy: Policy, last: datetime, source: str, *, now: datetime) -> str:
    gpu, probe = workspace.gpu, workspace.probe
    if source == SOURCE_GPU and last >= now and gpu is not None and gpu.util_percent is not None:
        return f"active: GPU {gpu.util_percent:g} % (>= {policy.gpu_busy_percent:g} %)"
    cpu = workspace.cpu
    if source == SOURCE_CPU and last >= now and cpu is not None and cpu.used_cores is not None:
        return f"active: CPU {cpu.used_cores:g} cores (>= {policy.cpu_busy_cores:g})"
    if source == SOURCE_UNKNOWN and probe is not None:
        return f"active as far as known: the server did not answer ({probe.error}), the hub saw no activity"
    if source == SOURCE_HUB:
        why = "the server was not asked" if probe is None else f"the server did not answer: {probe.error}"
        return f"idle since {_stamp(last)} (latest: hub, as {why})"
    if source == SOURCE_NONE:
        return "active as far as known: no activity evidence and no start time"
    if last >= now:
        return f"active: {source}"
    if source == SOURCE_STARTED:
        return f"no activity since the start at {_stamp(last)}"
    return f"idle since {_stamp(last)} (latest: {source})"


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _clock(at: datetime, now: datetime) -> str:
    """The time alone ("10:32 UTC") on the day of ``now``, else with the date."""
    at = at.astimezone(UTC)
    return at.strftime("%H:%M UTC") if at.date() == now.astimezone(UTC).date() else _stamp(at)


def _duration(seconds: float) -> str:
    if seconds >= _HOUR:
        return f"{round(seconds / _HOUR, 1):g} h"
    if seconds >= _MINUTE:
        return f"{round(seconds / _MINUTE)} min"
    return f"{max(round(seconds), 0)} s"
