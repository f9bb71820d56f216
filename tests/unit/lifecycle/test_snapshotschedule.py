"""Scheduled snapshots: which disks are due, and which scheduled snapshots beyond the keep-count go."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuworkspace_spawner.lifecycle.diskpolicy import ANN_SNAPSHOT_EVERY, ANN_SNAPSHOT_KEEP
from gpuworkspace_spawner.lifecycle.snapshotschedule import (
    decide_prune,
    decide_snapshot_due,
    next_wake,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
CLAIM = "home-alice--ws"


def disk(*, every: str | None = "3600", keep: str | None = "3", **changes: Any) -> dict[str, Any]:
    annotations = {
        "gpuworkspace.dev/username": "alice",
        "gpuworkspace.dev/servername": "ws",
    }
    if every is not None:
        annotations[ANN_SNAPSHOT_EVERY] = every
    if keep is not None:
        annotations[ANN_SNAPSHOT_KEEP] = keep
    labels = {"gpuworkspace.dev/disk": "home", "gpuworkspace.dev/user": "alice"}
    labels.update(changes.pop("labels", {}))
    meta = {"name": CLAIM, "namespace": "ns", "labels": labels, "annotations": annotations}
    meta.update(changes.pop("meta", {}))
    return {"metadata": meta, "status": {"phase": changes.pop("phase", "Bound")}}


def snap(
    name: str,
    minutes_ago: float,
    *,
    ready: bool = True,
    kind: str = "scheduled",
    of: str = CLAIM,
    error: bool = False,
) -> dict[str, Any]:
    taken = (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status: dict[str, Any] = {"readyToUse": ready, "creationTime": taken}
    if ready:
        status["restoreSize"] = "10Gi"
    if error:
        status["error"] = {"message": "rbd: snapshot failed"}
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"gpuworkspace.dev/snapshot-kind": kind},
            "creationTimestamp": taken,
        },
        "spec": {"source": {"persistentVolumeClaimName": of}},
        "status": status,
    }


@pytest.mark.parametrize(
    ("claim", "snapshots", "action", "words"),
    [
        pytest.param(disk(every=None, keep=None), [], "skip", "no snapshot schedule", id="no-schedule"),
        pytest.param(disk(), [], "snapshot", "no scheduled snapshot yet", id="first-snapshot"),
        pytest.param(disk(), [snap("s1", 30)], "wait", "next scheduled", id="recent-enough"),
        pytest.param(disk(), [snap("s1", 61)], "snapshot", "old or more", id="due"),
        pytest.param(
            disk(), [snap("s1", 61, kind="manual")], "snapshot", "yet", id="manual-ones-do-not-count"
        ),
        pytest.param(
            disk(), [snap("s1", 61, of="home-bob--ws")], "snapshot", "yet", id="other-disks-do-not-count"
        ),
        pytest.param(
            disk(),
            [snap("s1", 61, ready=False, error=True)],
            "snapshot",
            "old",
            id="failed-retried-next-interval",
        ),
        pytest.param(
            disk(), [snap("s1", 10, ready=False, error=True)], "wait", "next", id="failed-not-retried-at-once"
        ),
        pytest.param(disk(), [snap("s1", 61, ready=False)], "wait", "not ready yet", id="one-still-pending"),
        pytest.param(
            disk(labels={"gpuworkspace.dev/disk-state": "retained"}),
            [],
            "skip",
            "retained",
            id="retained-disk",
        ),
        pytest.param(disk(phase="Pending"), [], "skip", "not Bound", id="not-bound"),
        pytest.param(
            disk(meta={"deletionTimestamp": "2026-12-02T11:00:00Z"}), [], "skip", "deleted", id="deleting"
        ),
        pytest.param(
            disk(labels={"gpuworkspace.dev/disk": "other"}), [], "skip", "not a workspace disk", id="foreign"
        ),
        pytest.param(disk(every="hourly"), [], "invalid", "whole numbers", id="malformed-schedule"),
    ],
)
def test_which_disks_are_due(claim: dict[str, Any], snapshots: list[Any], action: str, words: str) -> None:
    verdict = decide_snapshot_due(claim, snapshots, now=NOW)
    assert verdict.action == action, verdict
    assert words in verdict.reason, verdict


def test_the_next_wake_is_the_earliest_due_disk() -> None:
    verdicts = [
        decide_snapshot_due(disk(), [snap("s1", 50)], now=NOW),  # due in 10 minutes
        decide_snapshot_due(disk(every="7200"), [snap("s1", 30)], now=NOW),  # due in 90 minutes
        decide_snapshot_due(disk(every=None, keep=None), [], now=NOW),
    ]
    assert next_wake(verdicts, NOW, at_most_s=3600) == 600
    assert next_wake(verdicts[2:], NOW, at_most_s=300) == 300
    # a disk snapshotted in this pass is due again one interval later: the worker wakes for it
    taken_now = decide_snapshot_due(disk(every="120"), [], now=NOW)
    assert taken_now.action == "snapshot"
    assert next_wake([taken_now, verdicts[2]], NOW, at_most_s=3600) == 120
    pending = decide_snapshot_due(disk(every="60"), [snap("s1", 5, ready=False)], now=NOW)
    assert next_wake([pending], NOW, at_most_s=3600) == 30  # rechecked, not hammered every second


@pytest.mark.parametrize(
    ("snapshots", "keep", "pruned"),
    [
        pytest.param([snap("s1", 10), snap("s2", 20)], 3, [], id="fewer-than-keep"),
        pytest.param([snap("s1", 10), snap("s2", 20), snap("s3", 30)], 3, [], id="exactly-keep"),
        pytest.param(
            [snap("s1", 10), snap("s2", 20), snap("s3", 30), snap("s4", 40), snap("s5", 50)],
            3,
            ["s4", "s5"],
            id="oldest-beyond-keep",
        ),
        pytest.param(
            [
                snap("new", 1),
                snap("m", 100, kind="manual"),
                snap("p", 100, kind="pre-restore"),
                snap("old", 90),
            ],
            1,
            ["old"],
            id="manual-and-safety-never-pruned",
        ),
        pytest.param(
            [snap("s1", 10, ready=False, error=True), snap("s2", 20), snap("s3", 30)],
            2,
            [],
            id="failed-ones-do-not-count-towards-keep",
        ),
        pytest.param(
            [snap("s1", 10), snap("s2", 20, ready=False, error=True), snap("s3", 30)],
            1,
            ["s2", "s3"],
            id="failed-older-than-the-kept-ones-go-too",
        ),
        pytest.param(
            [snap("s1", 10, ready=False), snap("s2", 20), snap("s3", 30)], 2, [], id="pending-new-one-kept"
        ),
        pytest.param([snap("s1", 10), snap("b", 90, of="home-bob--ws")], 1, [], id="other-disks-untouched"),
    ],
)
def test_which_snapshots_are_pruned(snapshots: list[Any], keep: int, pruned: list[str]) -> None:
    names = [p.name for p in decide_prune(CLAIM, snapshots, keep=keep)]
    assert sorted(names) == sorted(pruned)


def test_a_snapshot_being_deleted_is_not_pruned_again() -> None:
    old = snap("old", 90)
    old["metadata"]["deletionTimestamp"] = "2026-12-02T11:59:00Z"
    assert decide_prune(CLAIM, [snap("new", 1), old], keep=1) == []


def test_keep_must_be_positive() -> None:
    with pytest.raises(ValueError, match="keep"):
        decide_prune(CLAIM, [], keep=0)
