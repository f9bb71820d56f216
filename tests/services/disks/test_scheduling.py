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
    made, pruned = asyncio.run(SnapshotWorker(ops).snapshot(disk(), [snap("old", 90)], NOW))  # type: ignore[arg-type]
    assert (made is None) == isinstance(outcome, BaseException) and pruned == [] and deleted == []
    assert [a for a, _ in ops.audits] == ["disk-snapshot-failed"]
    assert words in ops.audits[0][1] and "no older snapshot was deleted" in ops.audits[0][1]


def test_a_ready_snapshot_prunes_the_scheduled_ones_beyond_keep(deleted: list[tuple[str, str]]) -> None:
    ops = FakeOps(True)
    made, pruned = asyncio.run(
        SnapshotWorker(ops).snapshot(disk(), [snap("old", 90), snap("older", 150)], NOW)  # type: ignore[arg-type]
    )
    assert made is not None and sorted(pruned) == ["old", "older"]
    assert sorted(deleted) == [("old", "uid-old"), ("older", "uid-older")]
    assert sorted(a for a, _ in ops.audits) == ["disk-snapshot-pruned", "disk-snapshot-pruned"]


class FakeWatch:
    """An ObjectWatch whose list the test writes: ``objects``, ``changes``, woken by ``change()``."""

    made: list[FakeWatch] = []  # noqa: RUF012 -- the watches the worker started, in order

    def __init__(self, list_method: str, *args: Any, **kwargs: Any) -> None:
        self.list_method, self.objects, self.changes = list_method, {}, 1
        self.woken = asyncio.Event()
        self.stopped = False
        FakeWatch.made.append(self)

    def change(self, obj: dict[str, Any]) -> None:
        self.objects[f"ns/{obj['metadata']['name']}"] = obj
        self.changes += 1
        self.woken.set()

    async def ready(self, timeout_s: float) -> None:
        return None

    async def next_change(self, seen: int, timeout_s: float) -> bool:
        if self.changes == seen:
            await asyncio.wait_for(self.woken.wait(), timeout_s)
        self.woken.clear()
        return True

    async def stop(self) -> None:
        self.stopped = True


def test_the_worker_passes_from_watch_caches_and_takes_a_due_snapshot_once(
    monkeypatch: pytest.MonkeyPatch, deleted: list[tuple[str, str]]
) -> None:
    """A burst of disk changes (200 starts at once) is a pass each over the caches, never a list each; a
    snapshot the worker took counts before its watch shows it, so the next pass does not take it again."""
    monkeypatch.setattr(scheduling, "ObjectWatch", FakeWatch)
    monkeypatch.setattr(
        scheduling, "custom_watch", lambda log, kind, ns, selector: FakeWatch(f"list {kind.plural}")
    )
    FakeWatch.made = []
    ops = FakeOps(True)
    taken: list[str] = []
    take = ops._take_snapshot

    async def counted(caller: Any, claim: Any, name: str, kind: str, timeout_s: float | None = None) -> Any:
        taken.append(name)
        made, ready = await take(caller, claim, name, kind, timeout_s)
        made["status"]["creationTime"] = datetime.now(UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )  # the worker's clock
        return made, ready

    ops._take_snapshot = counted  # type: ignore[method-assign]

    async def scenario() -> None:
        worker = asyncio.ensure_future(SnapshotWorker(ops).run())  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        claims, snapshots = FakeWatch.made
        assert claims.list_method == "list_namespaced_persistent_volume_claim"
        assert snapshots.list_method == "list volumesnapshots"
        claims.change(disk())  # alice's disk, due (no snapshot yet)
        await asyncio.sleep(0.01)
        for i in range(5):  # other disks arrive; the snapshot watch has not shown alice's snapshot yet
            other = disk()
            other["metadata"]["name"] = f"home-bob{i}--ws"
            other["metadata"]["annotations"] = {}
            claims.change(other)
            await asyncio.sleep(0.01)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        assert claims.stopped and snapshots.stopped

    asyncio.run(scenario())
    assert len(taken) == 1, taken
