"""The precedence of the culler's rules per workspace: culler config per profile, catalog (the card),
culler config per GPU mode, default; and that a card's lead times are the ones the policy warns at."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuworkspace_spawner.services.culler.model import (
    Action,
    Effective,
    Policy,
    ProfileSession,
    Reason,
    Source,
    Warning,
    Workspace,
)
from gpuworkspace_spawner.services.culler.policy import decide
from gpuworkspace_spawner.services.culler.precedence import (
    effective,
    gpu_mode_of,
    lead_time_warnings,
    shorter,
)
from tests.unit.culler.scenarios import HOUR, MINUTE, at, gpu, idle_workspace, workspace

CONFIG, CATALOG, MODE, DEFAULT = (
    Source.CONFIG_PROFILE,
    Source.CATALOG,
    Source.CONFIG_GPU_MODE,
    Source.DEFAULT,
)
# the GPU-sharing overlay's culler config, over the shipped catalog's cards (hub_config/catalog)
POLICY = Policy(
    idle_timeout=HOUR,
    max_duration=0.0,
    warn_before=(30 * MINUTE, 5 * MINUTE),
    idle_timeout_by_gpu_mode={"time-sliced": 30 * MINUTE, "mig": HOUR, "none": 0.0},
    idle_timeout_by_profile={"vm-workstation": 4 * HOUR, "off": 0.0},
    max_duration_by_profile={"vm-workstation": 24 * HOUR},
    warn_before_by_profile={"vm-workstation": (HOUR,), "quiet": ()},
    catalog={
        "gpu-shared": ProfileSession(30 * MINUTE, 8 * HOUR, (10 * MINUTE, 2 * MINUTE), "time-sliced"),
        "gpu-mig": ProfileSession(2 * HOUR, 12 * HOUR, (15 * MINUTE, 5 * MINUTE), "mig"),
        "gpu-exclusive": ProfileSession(90 * MINUTE, 12 * HOUR, (30 * MINUTE, 5 * MINUTE), "exclusive"),
        "cpu-small": ProfileSession(HOUR, 12 * HOUR, None, "none"),
        "vm-workstation": ProfileSession(2 * HOUR, 12 * HOUR, (30 * MINUTE, 5 * MINUTE), "none"),
        "quiet": ProfileSession(20 * MINUTE, None, (10 * MINUTE,), "mig"),
        "no-session": ProfileSession(gpu_mode="time-sliced"),
    },
)


def rules(
    idle: tuple[float, Source], longest: tuple[float, Source], leads: tuple[tuple[float, ...], Source]
) -> Effective:
    return Effective(idle[0], idle[1], longest[0], longest[1], leads[0], leads[1])


@pytest.mark.parametrize(
    ("ws", "expected"),
    [
        pytest.param(
            workspace(profile="gpu-shared", gpu=gpu(mode="time-sliced")),
            rules((30 * MINUTE, CATALOG), (8 * HOUR, CATALOG), ((10 * MINUTE, 2 * MINUTE), CATALOG)),
            id="card-and-mode-agree-the-card-says-so",
        ),
        pytest.param(
            workspace(profile="gpu-mig", gpu=gpu(mode="mig")),
            rules((HOUR, MODE), (12 * HOUR, CATALOG), ((15 * MINUTE, 5 * MINUTE), CATALOG)),
            id="gpu-mode-shorter-than-the-card",
        ),
        pytest.param(
            workspace(profile="gpu-exclusive", gpu=gpu(mode="exclusive")),
            rules((90 * MINUTE, CATALOG), (12 * HOUR, CATALOG), ((30 * MINUTE, 5 * MINUTE), CATALOG)),
            id="no-rule-for-the-mode-the-card",
        ),
        pytest.param(
            workspace(profile="cpu-small", gpu=gpu(mode="none")),
            rules((HOUR, CATALOG), (12 * HOUR, CATALOG), ((30 * MINUTE, 5 * MINUTE), DEFAULT)),
            id="mode-never-is-no-ceiling-card-without-warnings",
        ),
        pytest.param(
            workspace(profile="vm-workstation", gpu=gpu(mode="none")),
            rules((4 * HOUR, CONFIG), (24 * HOUR, CONFIG), ((HOUR,), CONFIG)),
            id="culler-config-per-profile-beats-card-and-mode",
        ),
        pytest.param(
            workspace(profile="quiet", gpu=gpu(mode="mig")),
            rules((20 * MINUTE, CATALOG), (0.0, DEFAULT), ((), CONFIG)),
            id="configured-no-warnings-beats-the-card",
        ),
        pytest.param(
            workspace(profile="no-session", gpu=gpu(mode="time-sliced")),
            rules((30 * MINUTE, MODE), (0.0, DEFAULT), ((30 * MINUTE, 5 * MINUTE), DEFAULT)),
            id="no-card-timeout-the-mode",
        ),
        pytest.param(
            workspace(profile="off", gpu=gpu(mode="mig")),
            rules((0.0, CONFIG), (0.0, DEFAULT), ((30 * MINUTE, 5 * MINUTE), DEFAULT)),
            id="configured-never-beats-the-mode",
        ),
        pytest.param(
            workspace(profile="unknown", gpu=gpu(mode="time-sliced")),
            rules((30 * MINUTE, MODE), (0.0, DEFAULT), ((30 * MINUTE, 5 * MINUTE), DEFAULT)),
            id="profile-not-in-catalog-the-mode",
        ),
        pytest.param(
            workspace(profile="gpu-mig"),
            rules((HOUR, MODE), (12 * HOUR, CATALOG), ((15 * MINUTE, 5 * MINUTE), CATALOG)),
            id="no-attribution-data-the-cards-gpu-mode",
        ),
        pytest.param(
            workspace(profile="gpu-shared", gpu=gpu(mode="mig")),
            rules((30 * MINUTE, CATALOG), (8 * HOUR, CATALOG), ((10 * MINUTE, 2 * MINUTE), CATALOG)),
            id="attribution-mode-wins-over-the-cards",
        ),
        pytest.param(
            workspace(),
            rules((HOUR, DEFAULT), (0.0, DEFAULT), ((30 * MINUTE, 5 * MINUTE), DEFAULT)),
            id="no-profile-no-gpu-the-defaults",
        ),
    ],
)
def test_precedence(ws: Workspace, expected: Effective) -> None:
    assert effective(ws, POLICY) == expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        pytest.param(600, 1800, 600, id="shorter"),
        pytest.param(1800, 600, 600, id="either-order"),
        pytest.param(0, 600, 600, id="never-is-longest"),
        pytest.param(600, 0, 600, id="never-is-longest-either-order"),
        pytest.param(0, 0, 0, id="both-never"),
    ],
)
def test_shorter(a: float, b: float, expected: float) -> None:
    assert shorter(a, b) == expected


def test_gpu_mode_of_prefers_the_attribution_service() -> None:
    assert gpu_mode_of(workspace(profile="gpu-mig", gpu=gpu(mode="exclusive")), POLICY) == "exclusive"
    assert gpu_mode_of(workspace(profile="gpu-mig"), POLICY) == "mig"
    assert gpu_mode_of(workspace(profile="unknown"), POLICY) is None


def test_a_card_is_warned_at_its_own_lead_times_then_stopped() -> None:
    """gpu-shared's card: stops after 30 min idle, warned 10 min and 2 min before; the default
    (30 and 5 min) is never used for it. Each stage comes at its lead time, the stop after the last."""
    ws = replace(idle_workspace(0), profile="gpu-shared", gpu=gpu(mode="time-sliced"))
    given: list[Warning] = []
    seen = []
    for minute in range(0, 40):
        now = at(minute)
        decision = decide(ws, POLICY, given, now=now)
        if decision.action is Action.WARN:
            assert decision.stage is not None and decision.stop_at is not None
            given.append(Warning(decision.stage, Reason.IDLE, now, decision.stop_at))
        if decision.action is not Action.KEEP:
            seen.append((minute, decision.action, decision.message.rpartition("(")[2]))
        if decision.action is Action.STOP:
            break
    assert seen == [
        (20, Action.WARN, "warning 1 of 2)"),
        (28, Action.WARN, "warning 2 of 2)"),
        (30, Action.STOP, "due 12:30 UTC)"),
    ]
    assert decide(ws, POLICY, given, now=at(40)).policy == effective(ws, POLICY)


def test_lead_times_as_long_as_a_profiles_timeout_and_a_card_undercut_by_its_mode_are_reported() -> None:
    policy = replace(POLICY, warn_before_by_profile={"quiet": (30 * MINUTE, 5 * MINUTE)})
    assert lead_time_warnings(policy) == [
        # a time-sliced workspace whose profile has no warnings of its own would get the default's
        "CullerApp.warn_before 1800 s >= idle_timeout_by_gpu_mode['time-sliced'] 1800 s: the first idle "
        "warning comes at the first cycle after the last activity",
        "catalog profile 'gpu-mig' promises session.idleTimeout 7200 s, but idle_timeout_by_gpu_mode['mig'] "
        "3600 s is shorter and applies; set CullerApp.idle_timeout_by_profile['gpu-mig'] to keep the card's",
        "CullerApp.warn_before_by_profile['quiet'] 1800 s >= catalog profile 'quiet' session.idleTimeout "
        "1200 s: the first idle warning comes at the first cycle after the last activity",
    ]
