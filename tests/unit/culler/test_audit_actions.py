"""The culler's audit actions are part of the audit vocabulary, each with an Event reason."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import get_args

import pytest

from gpuworkspace_spawner.audit import _REASONS, Action, AuditRecord, build_audit_event
from gpuworkspace_spawner.services.culler.cycle import AUDIT_STOPPED, AUDIT_WARNED, AUDIT_WITHDRAWN


def test_every_action_has_an_event_reason() -> None:
    assert set(get_args(Action)) == set(_REASONS)


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        (AUDIT_WARNED, "WorkspaceCullWarned"),
        (AUDIT_WITHDRAWN, "WorkspaceCullWarningsWithdrawn"),
        (AUDIT_STOPPED, "WorkspaceStopped"),
    ],
)
def test_culler_actions_build_events(action: Action, reason: str) -> None:
    record = AuditRecord(action, "alice", "gpu", "workspaces", "Server", "alice/gpu", "idle since 10:00")
    event = build_audit_event(record, now=datetime(2026, 1, 1, tzinfo=UTC), instance="culler")
    assert (event["reason"], event["type"]) == (reason, "Normal")
