"""Decision tables for the culler policy's inputs and words: evidence, timeouts, exemptions, messages."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from gpuworkspace_spawner.manifests.names import ANN_CULL_EXEMPT
from gpuworkspace_spawner.services.culler.model import Action, CpuEvidence, Policy, Reason, Warning, Workspace
from gpuworkspace_spawner.services.culler.policy import (
    EXEMPT_ANNOTATION,
    decide,
    exemption,
    idle_timeout_for,
    last_activity,
    max_duration_for,
)
from tests.unit.culler.scenarios import (
    BUSY,
    EXEMPTIONS,
    HOUR,
    LONG_MAX,
    NOW,
    POLICY,
    at,
    gpu,
    idle_workspace,
    kernel,
    warned,
    workspace,
)


@pytest.mark.parametrize(
    ("ws", "when", "source"),
    [
        pytest.param(workspace(hub=-50, probed=False), at(-50), "hub", id="hub-unprobed"),
        pytest.param(
            workspace(hub=-50, kernels=None, probe_error="503"), at(-50), "hub", id="hub-probe-read-nothing"
        ),
        pytest.param(workspace(hub=-5, status=-50), at(-50), "server", id="hub-ignored-when-server-answers"),
        pytest.param(
            workspace(hub=-5, started=-90), at(-90), "started", id="hub-ignored-server-says-nothing"
        ),
        pytest.param(workspace(hub=-50, status=-20), at(-20), "server", id="server-status"),
        pytest.param(workspace(hub=-50, kernels=(kernel(-10),)), at(-10), "kernel k1", id="kernel"),
        pytest.param(workspace(hub=-300, kernels=(kernel(-300, "busy"),)), NOW, "busy kernel k1", id="busy"),
        pytest.param(
            workspace(kernels=(kernel(-9), kernel(None, "starting", id="k2"))),
            NOW,
            "busy kernel k2",
            id="starting-kernel",
        ),
        pytest.param(
            workspace(kernels=(kernel(-9), kernel(-1, "starting", id="k2"))),
            NOW,
            "busy kernel k2",
            id="starting-kernel-within-the-grace",
        ),
        pytest.param(
            # a kernel no client ever connected to stays "starting" in jupyter_server 2.x
            workspace(kernels=(kernel(-90), kernel(-30, "starting", id="k2"))),
            at(-30),
            "kernel k2",
            id="kernel-starting-for-long-is-not-running-code",
        ),
        pytest.param(workspace(hub=-50, terminals={"1": -5, "2": None}), at(-5), "terminal 1", id="terminal"),
        pytest.param(workspace(hub=-50, gpu=gpu(3.0, last_busy=-4)), at(-4), "gpu", id="gpu-last-busy"),
        pytest.param(workspace(hub=-50, gpu=gpu(87.0)), NOW, "gpu", id="gpu-busy-now"),
        pytest.param(workspace(hub=-50, gpu=gpu(10.0)), NOW, "gpu", id="gpu-at-threshold"),
        pytest.param(workspace(status=-50, gpu=gpu(9.9)), at(-50), "server", id="gpu-below-threshold"),
        pytest.param(workspace(hub=-50, probed=False, gpu=gpu(None)), at(-50), "hub", id="gpu-not-visible"),
        pytest.param(
            workspace(hub=-1, kernels=(kernel(-120, connections=3),)),
            at(-120),
            "kernel k1",
            id="open-tab-is-not",
        ),
        pytest.param(workspace(status=-30, kernels=(kernel(-30),)), at(-30), "server", id="tie-first-source"),
        pytest.param(workspace(started=-90), at(-90), "started", id="no-evidence-started"),
        pytest.param(workspace(started=None, probed=False), NOW, "no evidence", id="no-evidence-no-start"),
        pytest.param(
            workspace(probe_error="503", kernels=None, gpu=gpu(0.0, -60)),
            NOW,
            "probe failed",
            id="probe-failed-no-hub",
        ),
        pytest.param(
            workspace(hub=-70, probe_error="timeout", kernels=None),
            at(-70),
            "hub",
            id="probe-failed-hub-known",
        ),
        pytest.param(
            workspace(hub=-70, status=-3, probe_error="kernels: 500"),
            at(-3),
            "server",
            id="probe-failed-partial-data-counts",
        ),
        pytest.param(
            workspace(probed=False, started=-90), at(-90), "started", id="not-probed-is-not-unknown"
        ),
    ],
)
def test_last_activity(ws: Workspace, when: datetime, source: str) -> None:
    assert last_activity(ws, POLICY, now=NOW) == (when, source)


TIMEOUTS = replace(
    POLICY,
    idle_timeout_by_gpu_mode={"mig": 2 * HOUR, "time-sliced": 0.0},
    idle_timeout_by_profile={"big": 4 * HOUR, "notebook": 0.0},
    max_duration_by_profile={"big": 24 * HOUR, "short": 2 * HOUR},
)


@pytest.mark.parametrize(
    ("ws", "idle", "longest"),
    [
        pytest.param(workspace(), HOUR, 8 * HOUR, id="defaults"),
        pytest.param(workspace(gpu=gpu(mode="mig")), 2 * HOUR, 8 * HOUR, id="gpu-mode"),
        pytest.param(workspace(gpu=gpu(mode="exclusive")), HOUR, 8 * HOUR, id="gpu-mode-unlisted"),
        pytest.param(workspace(profile="big", gpu=gpu(mode="mig")), 4 * HOUR, 24 * HOUR, id="profile-wins"),
        pytest.param(workspace(profile="notebook", gpu=gpu(mode="mig")), 0.0, 8 * HOUR, id="profile-zero"),
        pytest.param(workspace(profile="short", gpu=gpu(mode="time-sliced")), 0.0, 2 * HOUR, id="mode-zero"),
    ],
)
def test_timeouts(ws: Workspace, idle: float, longest: float) -> None:
    assert idle_timeout_for(ws, TIMEOUTS) == idle
    assert max_duration_for(ws, TIMEOUTS) == longest


@pytest.mark.parametrize(
    ("ws", "expected"),
    [
        pytest.param(idle_workspace(-600, started=-6000), None, id="not-exempt"),
        pytest.param(replace(workspace(), user="root"), "user root is exempt", id="user"),
        pytest.param(
            workspace(groups=frozenset({"staff", "ops", "admins"})), "group admins is exempt", id="group"
        ),
        pytest.param(workspace(profile="demo"), "profile demo is exempt", id="profile"),
        pytest.param(
            workspace(annotation=True), "annotation gpuworkspace.dev/cull-exempt is set", id="annotation"
        ),
    ],
)
def test_exemption(ws: Workspace, expected: str | None) -> None:
    assert exemption(ws, EXEMPTIONS) == expected


@pytest.mark.parametrize(
    "ws",
    [
        pytest.param(replace(idle_workspace(-600, started=-6000), user="root"), id="user"),
        pytest.param(idle_workspace(-600, started=-6000, groups=frozenset({"ops"})), id="group"),
        pytest.param(idle_workspace(-600, started=-6000, profile="demo"), id="profile"),
        pytest.param(idle_workspace(-600, started=-6000, annotation=True), id="annotation"),
    ],
)
def test_exempt_past_max_duration_with_warnings(ws: Workspace) -> None:
    given = [warned(0, -60, -30, Reason.MAX_DURATION), warned(1, -35, -30, Reason.MAX_DURATION)]
    decision = decide(ws, EXEMPTIONS, given, now=NOW)
    assert decision.action is Action.EXEMPT
    assert (decision.stage, decision.stop_at, decision.reason, decision.cancels_warnings) == (
        None,
        None,
        None,
        False,
    )
    assert decision.message.startswith("never culled: ")


def test_annotation_name_matches_manifests() -> None:
    assert EXEMPT_ANNOTATION == ANN_CULL_EXEMPT


@pytest.mark.parametrize(
    ("ws", "policy", "given", "message"),
    [
        pytest.param(
            workspace(hub=-45, status=-45, kernels=(kernel(-30),)),
            POLICY,
            [],
            "idle since 2026-12-01 11:30 UTC (latest: kernel k1); stops at 12:30 UTC (warning 1 of 2)",
            id="idle-warn",
        ),
        pytest.param(
            workspace(hub=-300, kernels=BUSY),
            POLICY,
            [],
            "active: busy kernel k1; stops at 13:00 UTC if still idle",
            id="busy",
        ),
        pytest.param(
            workspace(started=-120, profile="short", kernels=BUSY),
            LONG_MAX,
            [warned(0, -30, 0, Reason.MAX_DURATION), warned(1, -5, 0, Reason.MAX_DURATION)],
            "running 2 h, over the profile's 2 h maximum; stopping now (due 12:00 UTC)",
            id="max-stop",
        ),
        pytest.param(
            idle_workspace(-3),
            POLICY,
            [warned(0, -10, 20)],
            "warnings withdrawn (new activity); idle since 2026-12-01 11:57 UTC (latest: server); "
            "stops at 12:57 UTC if still idle",
            id="withdrawn",
        ),
        pytest.param(
            idle_workspace(-40, started=-470),
            POLICY,
            [warned(0, -10, 20)],
            "warnings withdrawn (the stop is now for the maximum session length); "
            "running 7.8 h, within the 8 h maximum; stops at 12:30 UTC (warning 1 of 2)",
            id="reason-changed",
        ),
        pytest.param(
            workspace(groups=frozenset({"ops"})),
            EXEMPTIONS,
            [],
            "never culled: group ops is exempt",
            id="exempt",
        ),
    ],
)
def test_messages(ws: Workspace, policy: Policy, given: list[Warning], message: str) -> None:
    assert decide(ws, policy, given, now=NOW).message == message


HANDOFF = "To keep a long run going, submit it as a job."


@pytest.mark.parametrize(
    ("ws", "policy", "given", "offered"),
    [
        pytest.param(idle_workspace(-40, started=-470), POLICY, [], True, id="max-duration"),
        pytest.param(
            workspace(hub=-45, status=-45, kernels=(kernel(-30),), gpu=gpu(0.0, -30)),
            POLICY,
            [],
            True,
            id="idle-gpu",
        ),
        pytest.param(
            workspace(hub=-45, status=-45, kernels=(kernel(-30),)), POLICY, [], False, id="idle-cpu"
        ),
        pytest.param(
            workspace(started=-120, profile="short", kernels=BUSY),
            LONG_MAX,
            [warned(0, -30, 0, Reason.MAX_DURATION), warned(1, -5, 0, Reason.MAX_DURATION)],
            False,
            id="not-on-the-stop-itself",
        ),
    ],
)
def test_warnings_offer_the_job_handoff_where_a_run_may_be_long(
    ws: Workspace, policy: Policy, given: list[Warning], offered: bool
) -> None:
    """A configured hand-off (the jobs service) ends max-duration warnings and a GPU workspace's warnings;
    without one, or for a CPU workspace, the message is what it was."""
    plain = decide(ws, policy, given, now=NOW)
    told = decide(ws, replace(policy, handoff=HANDOFF), given, now=NOW)
    assert told.action == plain.action
    assert told.message == (f"{plain.message}. {HANDOFF}" if offered else plain.message)
    assert (told.handoff, plain.handoff) == (offered, False)  # the notices' structured "handoff"
    if offered:
        assert told.action is Action.WARN and "warning 1 of 2" in told.message


# ------------------------------------------------------------------ CPU use (a silent terminal process)
def _cpu(used: float | None, last_busy_min: float | None = None) -> CpuEvidence:
    return CpuEvidence(used_cores=used, last_busy=at(last_busy_min) if last_busy_min is not None else None)


@pytest.mark.parametrize(
    ("cpu", "policy", "when", "source"),
    [
        pytest.param(_cpu(1.0, 0), POLICY, NOW, "cpu", id="busy-now"),
        pytest.param(_cpu(0.25, 0), POLICY, NOW, "cpu", id="at-the-threshold"),
        pytest.param(_cpu(0.2), POLICY, at(-50), "server", id="below-the-threshold"),
        pytest.param(_cpu(0.01, -10), POLICY, at(-10), "cpu", id="busy-ten-minutes-ago"),
        pytest.param(_cpu(None), POLICY, at(-50), "server", id="not-measured"),
        pytest.param(_cpu(4.0, 0), replace(POLICY, cpu_busy_cores=0), at(-50), "server", id="turned-off"),
    ],
)
def test_cpu_use_is_activity(cpu: CpuEvidence, policy: Policy, when: datetime, source: str) -> None:
    ws = replace(workspace(hub=-50, status=-50), cpu=cpu)
    assert last_activity(ws, policy, now=NOW) == (when, source)


def test_a_busy_cpu_keeps_an_otherwise_idle_workspace_and_says_why() -> None:
    ws = replace(idle_workspace(-600), cpu=_cpu(1.5, 0))  # idle for ten hours but for the CPU
    decision = decide(ws, POLICY, (), now=NOW)
    assert decision.action is Action.KEEP and decision.activity_source == "cpu"
    assert "CPU 1.5 cores" in decision.message
