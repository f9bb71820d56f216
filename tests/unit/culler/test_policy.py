"""Decision tables for the culler policy: deadlines, staged warnings, cancellation, stops."""

from __future__ import annotations

import ast
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from gpuworkspace_spawner.services.culler import policy as policy_module
from gpuworkspace_spawner.services.culler import precedence as precedence_module
from gpuworkspace_spawner.services.culler.model import Action, Policy, Reason, Warning, Workspace
from gpuworkspace_spawner.services.culler.policy import decide, decide_all
from tests.unit.culler.scenarios import (
    BUSY,
    HOUR,
    LONG_MAX,
    MINUTE,
    NO_LEADS,
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
    ("ws", "policy", "action", "reason", "stop_at", "in_message"),
    [
        pytest.param(
            workspace(hub=-300, status=-300, kernels=BUSY),
            POLICY,
            Action.KEEP,
            Reason.IDLE,
            at(60),
            "active: busy kernel k1",
            id="busy-kernel-no-browser",
        ),
        pytest.param(
            idle_workspace(-20), POLICY, Action.KEEP, Reason.IDLE, at(40), "if still idle", id="idle-20m"
        ),
        pytest.param(
            idle_workspace(-30), POLICY, Action.WARN, Reason.IDLE, at(30), "warning 1 of 2", id="idle-30m"
        ),
        pytest.param(
            workspace(hub=-120, kernels=(kernel(-120),), gpu=gpu(87.0, last_busy=-1)),
            POLICY,
            Action.KEEP,
            Reason.IDLE,
            at(60),
            "active: GPU 87 % (>= 10 %)",
            id="gpu-busy-kernel-idle",
        ),
        pytest.param(
            workspace(hub=-120, kernels=(kernel(-120),), gpu=gpu(2.0, last_busy=-3)),
            POLICY,
            Action.KEEP,
            Reason.IDLE,
            at(57),
            "(latest: gpu)",
            id="gpu-last-busy-recent",
        ),
        pytest.param(
            workspace(hub=-120, kernels=(kernel(-120),), terminals={"1": -2}),
            POLICY,
            Action.KEEP,
            Reason.IDLE,
            at(58),
            "(latest: terminal 1)",
            id="terminal-recent",
        ),
        pytest.param(
            workspace(hub=-120, status=-120, kernels=(kernel(-120, connections=2),), gpu=gpu(0.0, -125)),
            POLICY,
            Action.WARN,
            Reason.IDLE,
            at(30),
            "idle since 2026-12-01 10:00 UTC",
            id="open-tab-idle-kernel-culled",
        ),
        pytest.param(
            idle_workspace(-300), POLICY, Action.WARN, Reason.IDLE, at(30), "stops at 12:30", id="late-culler"
        ),
        pytest.param(
            workspace(hub=None, probe_error="503", kernels=None),
            POLICY,
            Action.KEEP,
            Reason.IDLE,
            at(60),
            "did not answer (503)",
            id="probe-error-no-hub",
        ),
        pytest.param(
            workspace(hub=-120, probe_error="timeout", kernels=None),
            POLICY,
            Action.WARN,
            Reason.IDLE,
            at(30),
            "(latest: hub, as the server did not answer: timeout)",
            id="probe-error-hub-idle",
        ),
        pytest.param(
            workspace(hub=-1, status=-120, kernels=(kernel(-120),)),
            POLICY,
            Action.WARN,
            Reason.IDLE,
            at(30),
            "idle since 2026-12-01 10:00 UTC (latest: server)",
            id="fresh-hub-from-our-probes-is-not-activity",
        ),
        pytest.param(
            workspace(hub=-1, probed=False),
            POLICY,
            Action.KEEP,
            Reason.IDLE,
            at(59),
            "(latest: hub, as the server was not asked)",
            id="unprobed-fresh-hub-keeps",
        ),
        pytest.param(
            workspace(probed=False, started=-120),
            POLICY,
            Action.WARN,
            Reason.IDLE,
            at(30),
            "no activity since the start at 2026-12-01 10:00 UTC",
            id="no-evidence-uses-start",
        ),
        pytest.param(
            workspace(probed=False, started=None),
            POLICY,
            Action.KEEP,
            Reason.IDLE,
            at(60),
            "no activity evidence and no start time",
            id="no-evidence-no-start",
        ),
        pytest.param(
            workspace(started=-450, kernels=BUSY),
            POLICY,
            Action.WARN,
            Reason.MAX_DURATION,
            at(30),
            "running 7.5 h, within the 8 h maximum",
            id="max-duration-busy",
        ),
        pytest.param(
            workspace(started=-100, kernels=BUSY, profile="short"),
            LONG_MAX,
            Action.WARN,
            Reason.MAX_DURATION,
            at(30),
            "the profile's 2 h maximum",
            id="max-duration-profile",
        ),
        pytest.param(
            idle_workspace(-600, started=-700),
            replace(POLICY, idle_timeout=0.0, max_duration=0.0),
            Action.KEEP,
            None,
            None,
            "idle culling is off",
            id="timeout-zero-never",
        ),
        pytest.param(
            idle_workspace(-170),
            replace(POLICY, idle_timeout=0.0),
            Action.KEEP,
            Reason.MAX_DURATION,
            at(300),
            "stops at 17:00",
            id="timeout-zero-max-still-applies",
        ),
        pytest.param(
            idle_workspace(-59), NO_LEADS, Action.KEEP, Reason.IDLE, at(1), "", id="no-leads-before"
        ),
        pytest.param(
            idle_workspace(-60), NO_LEADS, Action.STOP, Reason.IDLE, NOW, "stopping now", id="no-leads-at"
        ),
        pytest.param(
            idle_workspace(-61), NO_LEADS, Action.STOP, Reason.IDLE, at(-1), "", id="no-leads-after"
        ),
        pytest.param(
            workspace(started=-420, kernels=BUSY),
            POLICY,
            Action.KEEP,
            Reason.MAX_DURATION,
            at(60),
            "",
            id="tie-max-duration-wins",
        ),
        pytest.param(
            workspace(started=-10, hub=-10),
            replace(POLICY, idle_timeout=24 * HOUR, max_duration=0.0),
            Action.KEEP,
            Reason.IDLE,
            at(1430),
            "stops at 2026-12-02 11:50 UTC",
            id="stop-tomorrow-full-date",
        ),
    ],
)
def test_decide_without_warnings(
    ws: Workspace,
    policy: Policy,
    action: Action,
    reason: Reason | None,
    stop_at: datetime | None,
    in_message: str,
) -> None:
    decision = decide(ws, policy, (), now=NOW)
    assert (decision.action, decision.reason, decision.stop_at) == (action, reason, stop_at)
    assert decision.stage == (0 if action is Action.WARN else None)
    assert not decision.cancels_warnings
    assert in_message in decision.message


STARTED_MAX = workspace(started=-450, kernels=BUSY)  # max duration due at(30), busy


@pytest.mark.parametrize(
    ("ws", "policy", "given", "action", "stage", "stop_at", "cancels"),
    [
        pytest.param(
            idle_workspace(-2),
            POLICY,
            [warned(0, -10, 20)],
            Action.KEEP,
            None,
            at(58),
            True,
            id="activity-cancels",
        ),
        pytest.param(
            workspace(hub=-50, kernels=(kernel(-50, "busy"),)),
            POLICY,
            [warned(0, -10, 20), warned(1, -1, 20)],
            Action.KEEP,
            None,
            at(60),
            True,
            id="busy-kernel-cancels",
        ),
        pytest.param(
            idle_workspace(-40),
            POLICY,
            [warned(0, -10, 20)],
            Action.KEEP,
            None,
            at(20),
            False,
            id="no-new-activity",
        ),
        pytest.param(
            idle_workspace(-40), POLICY, [warned(0, -10, 4)], Action.WARN, 1, at(5), False, id="stage-1-late"
        ),
        pytest.param(
            idle_workspace(-40),
            POLICY,
            [warned(0, -26, 5)],
            Action.WARN,
            1,
            at(5),
            False,
            id="stage-1-on-time",
        ),
        pytest.param(
            idle_workspace(-40),
            POLICY,
            [warned(0, -30, 3), warned(1, -2, 3)],
            Action.KEEP,
            None,
            at(3),
            False,
            id="all-given-before-stop",
        ),
        pytest.param(
            idle_workspace(-40),
            POLICY,
            [warned(0, -30, 0), warned(1, -5, 0)],
            Action.STOP,
            None,
            NOW,
            False,
            id="all-given-stop",
        ),
        pytest.param(
            idle_workspace(-40),
            POLICY,
            [warned(1, -5, 0), warned(0, -30, -10)],
            Action.STOP,
            None,
            NOW,
            False,
            id="unordered-given",
        ),
        pytest.param(
            idle_workspace(-40),
            POLICY,
            [warned(0, -40, -1), warned(1, -20, -1), warned(2, -10, -1)],
            Action.STOP,
            None,
            at(-1),
            False,
            id="more-warnings-than-stages",
        ),
        pytest.param(
            idle_workspace(-40),
            NO_LEADS,
            [warned(0, -30, 5)],
            Action.KEEP,
            None,
            at(5),
            False,
            id="leads-removed-keeps-announced-stop",
        ),
        pytest.param(
            STARTED_MAX,
            POLICY,
            [warned(0, -10, 30, Reason.MAX_DURATION)],
            Action.KEEP,
            None,
            at(30),
            False,
            id="max-not-cancelled-by-activity",
        ),
        pytest.param(
            STARTED_MAX,
            POLICY,
            [warned(0, -10, 3, Reason.MAX_DURATION)],
            Action.WARN,
            1,
            at(5),
            False,
            id="max-stage-1-while-busy",
        ),
        pytest.param(
            STARTED_MAX,
            POLICY,
            [warned(0, -30, 0, Reason.MAX_DURATION), warned(1, -5, 0, Reason.MAX_DURATION)],
            Action.STOP,
            None,
            NOW,
            False,
            id="max-stop-while-busy",
        ),
        pytest.param(
            idle_workspace(-50, started=-450),
            POLICY,
            [warned(0, -1, 30, Reason.MAX_DURATION)],
            Action.KEEP,
            None,
            at(30),
            False,
            id="max-announced-keeps-governing",
        ),
        pytest.param(
            idle_workspace(-40, started=-470),
            POLICY,
            [warned(0, -10, 20)],
            Action.WARN,
            0,
            at(30),
            True,
            id="idle-warned-now-max-governs",
        ),
        pytest.param(
            idle_workspace(-40),
            replace(POLICY, idle_timeout=0.0, max_duration=0.0),
            [warned(0, -10, 20)],
            Action.KEEP,
            None,
            None,
            True,
            id="culling-turned-off",
        ),
    ],
)
def test_decide_with_warnings(
    ws: Workspace,
    policy: Policy,
    given: list[Warning],
    action: Action,
    stage: int | None,
    stop_at: datetime | None,
    cancels: bool,
) -> None:
    decision = decide(ws, policy, given, now=NOW)
    assert (decision.action, decision.stage, decision.stop_at) == (action, stage, stop_at)
    assert decision.cancels_warnings is cancels
    assert decision.message.startswith("warnings withdrawn (") is cancels


def test_decide_all_keeps_order_and_looks_up_warnings() -> None:
    busy = workspace(user="bob", kernels=BUSY)
    warned_once = replace(idle_workspace(-40), server="gpu")
    fresh = replace(idle_workspace(-40), user="carol")
    given = {("alice", "gpu"): [warned(0, -26, 5)], ("nobody", ""): [warned(0, -1, 1)]}
    decisions = decide_all([busy, warned_once, fresh], POLICY, given, now=NOW)
    assert [d.key for d in decisions] == [("bob", ""), ("alice", "gpu"), ("carol", "")]
    assert [(d.action, d.stage) for d in decisions] == [
        (Action.KEEP, None),
        (Action.WARN, 1),
        (Action.WARN, 0),
    ]
    assert decisions[1].stop_at == at(5)
    assert decisions[2].stop_at == at(30)


def test_decision_carries_the_evidence() -> None:
    decision = decide(workspace(hub=-80, terminals={"3": -70}), POLICY, (), now=NOW)
    assert (decision.last_activity, decision.activity_source) == (at(-70), "terminal 3")
    assert decision.key == ("alice", "")


def _imports(path: str) -> set[str]:
    tree = ast.parse(Path(path).read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            imported.add("." + module if node.level else module.split(".")[0])
    return {name for name in imported if name not in sys.stdlib_module_names}


def test_policy_imports_only_the_standard_library_and_the_model() -> None:
    # the model, the precedence, and the project's pure constants (the exemption annotation's name)
    assert _imports(policy_module.__file__) == {".model", ".precedence", ".manifests.names"}
    assert _imports(precedence_module.__file__) == {".model"}  # no I/O


def test_durations_in_messages() -> None:
    ws = workspace(started=-45, kernels=BUSY)
    decision = decide(ws, replace(POLICY, max_duration=50 * MINUTE), (), now=NOW)
    assert decision.message.startswith("running 45 min, within the 50 min maximum")


def test_an_idle_stop_is_held_while_the_server_does_not_answer() -> None:
    """Fail closed: what the server said before still shows it idle, but it did not confirm it now."""
    ws = workspace(status=-120, kernels=(kernel(-120),), probe_error="503 Service Unavailable")
    given = (warned(0, -35, -5), warned(1, -10, -5))
    held = decide(ws, POLICY, given, now=NOW)
    assert held.action is Action.KEEP and "did not answer (503" in held.message
    answered = decide(workspace(status=-120, kernels=(kernel(-120),)), POLICY, given, now=NOW)
    assert answered.action is Action.STOP
