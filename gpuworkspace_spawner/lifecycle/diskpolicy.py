"""A home disk's own policies: retention after deletion and the snapshot schedule, stamped on the claim.

Pure. The spawner resolves the profile's ``storage.home.retention`` and ``storage.home.snapshots``
against the hub's global ``retention_days`` (:func:`decide_retention`) at every start and stamps the
result on the claim (:func:`build_policy_annotations`). From then on the disk carries its policy:
``delete_forever`` reads the retention back (:func:`retention_of_disk`) and the disk service's snapshot
worker reads the schedule (:func:`snapshot_schedule_of_disk`), so neither needs the catalog, and a
catalog change applies to a disk at its next start.

Precedence (docs/how-to/retention-and-reclaim.md):

1. ``retention.keepOnDelete: false`` in the profile: the disk is not kept; deleting the server
   retains it until *now*, so the reclaimer deletes it at its next pass (once nothing mounts it);
2. ``retention.days`` in the profile: that many days;
3. otherwise the hub's ``GPUWorkspaceSpawner.retention_days``;

and at deletion, a disk without the stamp (created before this) or with a malformed one: the hub's
``retention_days`` again, with the reason logged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from gpuworkspace_spawner.catalog.model import HomeRetention, SnapshotSchedule

ANN_RETENTION_DAYS = "gpuworkspace.dev/retention-days"  # days a deleted server's disk is kept
ANN_KEEP_ON_DELETE = "gpuworkspace.dev/keep-on-delete"  # "false": reclaimed as soon as deleted
ANN_RETENTION_SOURCE = "gpuworkspace.dev/retention-source"  # profile | hub
ANN_SNAPSHOT_EVERY = "gpuworkspace.dev/snapshot-every"  # seconds between scheduled snapshots
ANN_SNAPSHOT_KEEP = "gpuworkspace.dev/snapshot-keep"  # scheduled snapshots kept
POLICY_ANNOTATIONS = (
    ANN_RETENTION_DAYS,
    ANN_KEEP_ON_DELETE,
    ANN_RETENTION_SOURCE,
    ANN_SNAPSHOT_EVERY,
    ANN_SNAPSHOT_KEEP,
)

RetentionSource = Literal["profile", "hub"]


@dataclass(frozen=True)
class RetentionPolicy:
    """How long a deleted server's disk is kept, where that came from, and why (for logs and audit)."""

    days: float
    keep_on_delete: bool
    source: RetentionSource
    reason: str

    @property
    def period(self) -> timedelta:
        return timedelta(days=self.days) if self.keep_on_delete else timedelta(0)


def _check_hub_days(hub_days: float) -> None:
    if not math.isfinite(hub_days) or hub_days < 0:
        raise ValueError(f"GPUWorkspaceSpawner.retention_days must be 0 or more, got {hub_days!r}")


def decide_retention(profile: HomeRetention | None, hub_days: float) -> RetentionPolicy:
    """The effective retention of a disk started with a profile whose retention is ``profile``."""
    _check_hub_days(hub_days)
    if profile is not None and not profile.keep_on_delete:
        return RetentionPolicy(
            0, False, "profile", "the profile sets keepOnDelete: false: reclaimed when the server is deleted"
        )
    if profile is not None and profile.days is not None:
        return RetentionPolicy(
            profile.days, True, "profile", f"the profile keeps a deleted server's disk {profile.days:g} days"
        )
    return RetentionPolicy(
        hub_days, True, "hub", f"the profile sets no retention days: the hub's retention_days ({hub_days:g})"
    )


def build_policy_annotations(
    retention: RetentionPolicy, snapshots: SnapshotSchedule | None
) -> dict[str, str | None]:
    """The claim annotations that carry the policies (None removes a schedule the profile dropped)."""
    return {
        ANN_RETENTION_DAYS: f"{retention.days:g}",
        ANN_KEEP_ON_DELETE: "true" if retention.keep_on_delete else "false",
        ANN_RETENTION_SOURCE: retention.source,
        ANN_SNAPSHOT_EVERY: str(snapshots.every_s) if snapshots else None,
        ANN_SNAPSHOT_KEEP: str(snapshots.keep) if snapshots else None,
    }


def build_policy_patch(claim: Mapping[str, Any], wanted: Mapping[str, str | None]) -> dict[str, Any] | None:
    """JSON merge patch that makes ``claim``'s policy annotations ``wanted``; None when they already are."""
    current = (claim.get("metadata") or {}).get("annotations") or {}
    changed = {k: v for k, v in wanted.items() if current.get(k) != v}
    return {"metadata": {"annotations": changed}} if changed else None


def _annotations(claim: Mapping[str, Any]) -> Mapping[str, Any]:
    return (claim.get("metadata") or {}).get("annotations") or {}


def _number(text: object) -> float | None:
    try:
        value = float(str(text))
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def retention_of_disk(claim: Mapping[str, Any] | None, hub_days: float) -> RetentionPolicy:
    """The retention stamped on ``claim`` at its last start; the hub's when there is none or it is malformed."""
    _check_hub_days(hub_days)
    annotations = _annotations(claim or {})
    hub = RetentionPolicy(hub_days, True, "hub", "")
    keep, days = annotations.get(ANN_KEEP_ON_DELETE), annotations.get(ANN_RETENTION_DAYS)
    if keep is None and days is None:
        why = f"the disk carries no {ANN_RETENTION_DAYS}: the hub's retention_days ({hub_days:g})"
        return RetentionPolicy(hub.days, True, "hub", why)
    if keep not in (None, "true", "false"):
        why = f"{ANN_KEEP_ON_DELETE} is {keep!r}, not true or false: the hub's retention_days ({hub_days:g})"
        return RetentionPolicy(hub.days, True, "hub", why)
    source: RetentionSource = "profile" if annotations.get(ANN_RETENTION_SOURCE) == "profile" else "hub"
    if keep == "false":
        return RetentionPolicy(0, False, source, f"the disk's {ANN_KEEP_ON_DELETE} is false")
    value = _number(days)
    if value is None:
        why = (
            f"{ANN_RETENTION_DAYS} is {days!r}, not a number of days: the hub's retention_days ({hub_days:g})"
        )
        return RetentionPolicy(hub.days, True, "hub", why)
    return RetentionPolicy(
        value, True, source, f"the disk's {ANN_RETENTION_DAYS} ({value:g}, from the {source})"
    )


@dataclass(frozen=True)
class StampedSchedule:
    """The schedule a claim carries: ``schedule`` None with ``problem`` set when it is malformed."""

    schedule: SnapshotSchedule | None
    problem: str = ""


def snapshot_schedule_of_disk(claim: Mapping[str, Any]) -> StampedSchedule:
    """The snapshot schedule stamped on ``claim`` (none: no scheduled snapshots)."""
    annotations = _annotations(claim)
    every, keep = annotations.get(ANN_SNAPSHOT_EVERY), annotations.get(ANN_SNAPSHOT_KEEP)
    if every is None and keep is None:
        return StampedSchedule(None)
    try:
        every_s, keep_n = int(str(every)), int(str(keep))
    except ValueError:
        return StampedSchedule(
            None,
            f"{ANN_SNAPSHOT_EVERY}={every!r} and {ANN_SNAPSHOT_KEEP}={keep!r} must both be whole numbers",
        )
    if every_s <= 0 or keep_n <= 0:
        return StampedSchedule(
            None, f"{ANN_SNAPSHOT_EVERY}={every_s} and {ANN_SNAPSHOT_KEEP}={keep_n} must both be more than 0"
        )
    return StampedSchedule(SnapshotSchedule(every_s=every_s, keep=keep_n))


def with_policy(
    body_or_patch: dict[str, Any], wanted: Mapping[str, str | None], *, patch: bool
) -> dict[str, Any]:
    """A copy of a claim body (``patch=False``: unset values left out) or merge patch (``patch=True``: None
    removes) with the policy annotations ``wanted`` added."""
    meta = dict(body_or_patch.get("metadata") or {})
    extra = dict(wanted) if patch else {k: v for k, v in wanted.items() if v is not None}
    meta["annotations"] = {**(meta.get("annotations") or {}), **extra}
    return {**body_or_patch, "metadata": meta}
