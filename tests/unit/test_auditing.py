"""The one audit function (audit.write_audit) every emitter uses: a JSON log line always, an Event when
given an API client, the actor named in the Event's message, and an Event the API refuses never fails the operation."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuworkspace_spawner.audit import AuditRecord, build_audit_event, write_audit

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


def _record(actor: str = "") -> AuditRecord:
    return AuditRecord(
        action="job-cancelled",
        user="alice",
        server="ws",
        namespace="gpu-workspaces",
        kind="Job",
        name="alice-train-x1",
        message="Job alice-train-x1 cancelled",
        actor=actor,
    )


@pytest.mark.parametrize(
    ("actor", "message"),
    [
        pytest.param("", "Job alice-train-x1 cancelled", id="the spawner's own"),
        pytest.param("alice", "Job alice-train-x1 cancelled (by alice)", id="asked by a user"),
    ],
)
def test_the_event_names_who_asked(actor: str, message: str) -> None:
    assert build_audit_event(_record(actor), now=NOW, instance="h")["message"] == message


class _Answer:
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status, self.reason, self._body = status, "", json.dumps(body).encode()

    async def read(self) -> bytes:
        return self._body


class _Api:
    def __init__(self, status: int) -> None:
        self.status = status
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def create_namespaced_event(self, namespace: str, body: dict[str, Any], **_: Any) -> _Answer:
        self.events.append((namespace, body))
        return _Answer(self.status, {"kind": "Status", "code": self.status, "message": "events is forbidden"})


def _audit_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()[6:]) for r in caplog.records if r.getMessage().startswith("audit ")]


async def test_the_record_is_logged_and_sent_as_an_event(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpuworkspace.audit")
    api = _Api(201)
    await write_audit(_record("alice"), api=api, request_timeout=5)
    [(namespace, event)] = api.events
    assert namespace == "gpu-workspaces" and event["involvedObject"]["name"] == "alice-train-x1"
    assert [line["actor"] for line in _audit_lines(caplog)] == ["alice"]


async def test_a_refused_event_is_a_warning_not_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpuworkspace.audit")
    await write_audit(_record("alice"), api=_Api(403), request_timeout=5)
    assert len(_audit_lines(caplog)) == 1
    assert any(
        r.levelno == logging.WARNING and "Could not record audit event job-cancelled" in r.getMessage()
        for r in caplog.records
    )


async def test_without_an_api_client_it_only_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpuworkspace.audit")
    await write_audit(_record(), request_timeout=5)
    assert len(_audit_lines(caplog)) == 1
