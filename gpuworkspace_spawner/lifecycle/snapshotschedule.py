"""Scheduled snapshots: which disks are due, and which of the snapshots the schedule took may go.

Pure; time is a parameter. The disk service's snapshot worker (``services/disks/scheduling.py``) lists
the workspace disks and their VolumeSnapshots, asks :func:`decide_snapshot_due` per disk, takes the
snapshots that are due and, only after a new one is ready, asks :func:`decide_prune` which older
*scheduled* snapshots are beyond the disk's keep-count. Manual and safety (pre-restore) snapshots are
never pruned. Fail closed: a failed or unfinished snapshot never counts towards the keep-count, and
a disk whose schedule is malformed is reported, not snapshotted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from gpuworkspace_spawner.manifests.names import DISK_RETAINED, LABEL_DISK_STATE
from gpuworkspace_spawner.manifests.pvc import parse_time

from .diskops import LABEL_SNAPSHOT_KIND, SNAPSHOT_SCHEDULED, ours, snapshot_progress, snapshot_source
from .diskpolicy import snapshot_schedule_of_disk

PENDING_RECHECK = timedelta(seconds=30)
DueAction = Literal["snapshot", "wait", "skip", "invalid"]


@dataclass(frozen=True)
class DueVerdict:
    """``snapshot`` now (``due_at``: when the next one is due, once this one is taken), ``wait`` until
    ``due_at``, ``skip`` (no schedule, not snapshottable now) or ``invalid`` (a malformed schedule:
    reported)."""

    action: DueAction
    reason: str
    due_at: datetime | None = None


@dataclass(frozen=True)
class Prune:
    name: str
    reason: str


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def taken_at(snapshot: Mapping[str, Any]) -> datetime | None:
    """When the snapshot was taken (``status.creationTime``), else when the object was created."""
    status = snapshot.get("status") or {}
    return parse_time(status.get("creationTime")) or parse_time(_meta(snapshot).get("creationTimestamp"))


def is_scheduled(snapshot: Mapping[str, Any]) -> bool:
    return (_meta(snapshot).get("labels") or {}).get(LABEL_SNAPSHOT_KIND) == SNAPSHOT_SCHEDULED


def failed(snapshot: Mapping[str, Any]) -> bool:
    """The snapshot controller reported an error and the snapshot is not ready."""
    return snapshot_progress(snapshot)[0] != "ready" and bool((snapshot.get("status") or {}).get("error"))


def decide_snapshot_due(
    claim: Mapping[str, Any], snapshots: Sequence[Mapping[str, Any]], *, now: datetime
) -> DueVerdict:
    """Whether the schedule stamped on ``claim`` wants a snapshot now (``snapshots``: the namespace's)."""
    meta = _meta(claim)
    name = str(meta.get("name", "?"))
    stamped = snapshot_schedule_of_disk(claim)
    if stamped.problem:
        return DueVerdict("invalid", f"claim {name}: {stamped.problem}; no scheduled snapshots until fixed")
    if stamped.schedule is None:
        return DueVerdict("skip", f"claim {name} has no snapshot schedule")
    if not ours(claim).allowed:
        return DueVerdict("skip", ours(claim).reason)
    if (meta.get("labels") or {}).get(LABEL_DISK_STATE) == DISK_RETAINED:
        return DueVerdict("skip", f"claim {name} is retained (its server was deleted): it no longer changes")
    if (claim.get("status") or {}).get("phase") != "Bound":
        return DueVerdict("skip", f"claim {name} is not Bound yet")
    every = timedelta(seconds=stamped.schedule.every_s)
    times = [t for t in (taken_at(s) for s in _scheduled(name, snapshots)) if t is not None]
    pending = [s for s in _scheduled(name, snapshots) if snapshot_progress(s)[0] != "ready" and not failed(s)]
    if not times:
        return DueVerdict("snapshot", f"claim {name} has no scheduled snapshot yet", now + every)
    due = max(times) + every
    if pending:
        names = ", ".join(sorted(str(_meta(s).get("name")) for s in pending))
        recheck = max(due, now + PENDING_RECHECK)  # a snapshot left pending (by a restart): look again later
        return DueVerdict("wait", f"claim {name}: scheduled snapshot {names} is not ready yet", recheck)
    if now >= due:
        return DueVerdict(
            "snapshot", f"claim {name}: the last scheduled snapshot is {every} old or more", now + every
        )
    return DueVerdict("wait", f"claim {name}: next scheduled snapshot due at {due:%Y-%m-%dT%H:%M:%SZ}", due)


def _scheduled(name: str, snapshots: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [s for s in snapshots if is_scheduled(s) and snapshot_source(s) == name]


def decide_prune(claim_name: str, snapshots: Sequence[Mapping[str, Any]], *, keep: int) -> list[Prune]:
    """The scheduled snapshots of ``claim_name`` to delete so that the newest ``keep`` ready ones remain.

    Only when ``keep`` ready scheduled snapshots exist; then every scheduled snapshot taken before the
    oldest of those (ready, failed or stuck) goes. Manual and safety snapshots, snapshots without a time
    and snapshots already being deleted are never chosen.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    timed = [(t, s) for s in _scheduled(claim_name, snapshots) if (t := taken_at(s)) is not None]
    timed.sort(key=lambda pair: pair[0], reverse=True)
    ready = [(t, s) for t, s in timed if snapshot_progress(s)[0] == "ready"]
    if len(ready) < keep:
        return []
    cutoff = ready[keep - 1][0]
    kept = {id(s) for _, s in ready[:keep]}
    return [
        Prune(
            str(_meta(s).get("name")),
            f"older than the newest {keep} ready scheduled snapshot(s) of {claim_name} (taken {t:%Y-%m-%dT%H:%M:%SZ})",
        )
        for t, s in timed
        if id(s) not in kept and t <= cutoff and not _meta(s).get("deletionTimestamp")
    ]


def next_wake(verdicts: Sequence[DueVerdict], now: datetime, *, at_most_s: float) -> float:
    """Seconds until the earliest disk is due again (at least 1, at most ``at_most_s``): a ``wait``
    verdict's time, or the next time of a disk snapshotted in this pass."""
    due = [v.due_at for v in verdicts if v.action in ("wait", "snapshot") and v.due_at is not None]
    if not due:
        return at_most_s
    return max(1.0, min(at_most_s, (min(due) - now).total_seconds()))
