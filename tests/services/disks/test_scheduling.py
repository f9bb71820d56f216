"""The snapshot worker's I/O shell: fail closed (a failed snapshot is audited and deletes nothing), prune
only after a ready snapshot, and only the scheduled ones beyond keep."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuworkspace_spawner.k8s import Unavailable
from gpuworkspace_spawner.services.disks import scheduling
from gpuworkspace_spawner.services.disks.operations import Settings
from gpuworkspace_spawner.services.disks.scheduling import SnapshotWorker

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
CLAIM = "home-alice--ws"


def disk() -> dict[str, Any]:
    return {
        "metadata": {
            "name": CLAIM,
            "namespace": "ns",
            "labels": {"gpuworkspace.dev/disk": "home", "gpuworkspace.dev/user": "alice"},
            "annotations": {"gpuworkspace.dev/snapshot-every": "60", "gpuworkspace.dev/snapshot-keep": "1"},
        },
        "status": {"phase": "Bound"},
    }


def snap(name: str, minutes_ago: float, *, ready: bool = True) -> dict[str, Any]:
    taken = (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"gpuworkspace.dev/snapshot-kind": "scheduled"},
        },
        "spec": {"source": {"persistentVolumeClaimName": CLAIM}},
        "status": {"readyToUse": ready, "creationTime": taken, "restoreSize": "1Gi"},
    }


class FakeOps:
    def __init__(self, outcome: Any) -> None:
        self.settings = Settings(namespace="ns")
        self.api, self._rt = object(), 1.0
        self.outcome = outcome
        self.audits: list[tuple[str, str]] = []

    async def _take_snapshot(
        self, caller: Any, claim: Any, name: str, kind: str, timeout_s: float | None = None
    ) -> tuple[dict[str, Any], bool]:
        assert caller == {"kind": "service", "name": "gpuworkspace-disks"} and kind == "scheduled"
        assert timeout_s == 60  # the schedule's interval: below the service's 300 s snapshot timeout
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return snap(name, 0, ready=self.outcome), self.outcome

    async def audit(self, action: str, claim: Any, message: str, caller: Any, **details: Any) -> None:
        self.audits.append((action, message))


@pytest.fixture
def deleted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    calls: list[tuple[str, str]] = []

    async def delete_snapshot(
        api: Any, namespace: str, name: str, *, uid: str, request_timeout: float
    ) -> dict[str, Any]:
        calls.append((name, uid))
        return {}

    monkeypatch.setattr(scheduling.storage, "delete_snapshot", delete_snapshot)
    return calls


@pytest.mark.parametrize(
    ("outcome", "words"),
    [
        pytest.param(False, "was not ready in time", id="not-ready"),
        pytest.param(Unavailable(503, "the API server is down"), "could not be created", id="create-failed"),
    ],
)
def test_a_failed_snapshot_is_audited_and_deletes_nothing(
    deleted: list[tuple[str, str]], outcome: Any, words: str
) -> None:
    ops = FakeOps(outcome)
    ok = asyncio.run(SnapshotWorker(ops).snapshot(disk(), [snap("old", 90)], NOW))  # type: ignore[arg-type]
    assert ok is False and deleted == []
    assert [a for a, _ in ops.audits] == ["disk-snapshot-failed"]
    assert words in ops.audits[0][1] and "no older snapshot was deleted" in ops.audits[0][1]


def test_a_ready_snapshot_prunes_the_scheduled_ones_beyond_keep(deleted: list[tuple[str, str]]) -> None:
    ops = FakeOps(True)
    ok = asyncio.run(SnapshotWorker(ops).snapshot(disk(), [snap("old", 90), snap("older", 150)], NOW))  # type: ignore[arg-type]
    assert ok is True
    assert sorted(deleted) == [("old", "uid-old"), ("older", "uid-older")]
    assert sorted(a for a, _ in ops.audits) == ["disk-snapshot-pruned", "disk-snapshot-pruned"]
