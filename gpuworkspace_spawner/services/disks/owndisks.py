"""What a user sees of their own disks: the hub home page's disk table and ``GET …/users/<name>/disks``.

Pure: the service's workspace items (:func:`.views.workspace_item`, usage from the kubelets' volume
stats included) and the VolumeSnapshots labelled for each disk in, one plain row per disk out. A row
says which workspace and runtime the disk belongs to, its size, used and free bytes and inodes (only
while it is mounted: the kubelet reports mounted volumes only), whether it is active or retained (and
until when), its newest ready snapshot, and whether it is near full: used bytes or used inodes at or
over ``threshold`` of the total (docs/how-to/see-your-disks.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...lifecycle.diskops import DISK_ROOT, snapshot_progress, usage_ratio

Obj = dict[str, Any]


@dataclass(frozen=True)
class NearFull:
    """The verdict on one disk: ``near`` with the sentence the page shows (empty when not near)."""

    near: bool
    reason: str


def _percent(ratio: float) -> str:
    return f"{ratio * 100:.0f}%" if ratio >= 0.01 else f"{ratio * 100:.2g}%"  # noqa: PLR2004


def decide_near_full(disk: Mapping[str, Any], *, threshold: float) -> NearFull:
    """Near full when used bytes or used inodes reach ``threshold`` of the total; unknown use never is."""
    reasons = []
    by_bytes = usage_ratio(disk.get("usedBytes"), disk.get("capacityBytes"))
    if by_bytes is not None and by_bytes >= threshold:
        reasons.append(f"{_percent(by_bytes)} of its space is used")
    by_inodes = usage_ratio(disk.get("inodesUsed"), disk.get("inodes"))
    if by_inodes is not None and by_inodes >= threshold:
        reasons.append(f"{_percent(by_inodes)} of its inodes (files and directories) are used")
    if not reasons:
        return NearFull(False, "")
    return NearFull(True, f"{' and '.join(reasons)} (warning at {_percent(threshold)})")


def last_snapshot(claim: str, snapshots: Iterable[Mapping[str, Any]]) -> Obj | None:
    """The newest ready VolumeSnapshot taken of ``claim`` (``{"name", "time"}``), or None."""
    ready = []
    for snap in snapshots:
        source = ((snap.get("spec") or {}).get("source") or {}).get("persistentVolumeClaimName")
        if source != claim or snapshot_progress(snap)[0] != "ready":
            continue
        meta = snap.get("metadata") or {}
        when = (snap.get("status") or {}).get("creationTime") or meta.get("creationTimestamp") or ""
        ready.append((str(when), str(meta.get("name", ""))))
    if not ready:
        return None
    when, name = max(ready)
    return {"name": name, "time": when or None}


def _state(disk: Mapping[str, Any]) -> Obj:
    if disk.get("state") == "retained":
        return {"state": "retained", "until": disk.get("retainUntil")}
    return {"state": "active", "until": None}


def build_disk_row(
    item: Mapping[str, Any], snapshots: Sequence[Mapping[str, Any]], *, threshold: float
) -> Obj:
    """One row of the user's disk table from a workspace item and the disk's snapshots."""
    disk = item.get("disk") or {}
    verdict = decide_near_full(disk, threshold=threshold)
    return {
        "workspace": item.get("server") or "",
        "profile": item.get("profile"),
        "runtime": "vm" if disk.get("kind") == DISK_ROOT else "container",
        "claim": disk.get("claim"),
        "kind": disk.get("kind"),
        "size": disk.get("capacity") or disk.get("size"),
        "capacityBytes": disk.get("capacityBytes"),
        "usedBytes": disk.get("usedBytes"),
        "freeBytes": disk.get("freeBytes"),
        "inodesUsed": disk.get("inodesUsed"),
        "inodes": disk.get("inodes"),
        "usageRatio": disk.get("usageRatio"),
        "measured": disk.get("usedBytes") is not None,
        **_state(disk),
        "workspaceState": (item.get("state") or {}).get("state"),
        "lastSnapshot": last_snapshot(str(disk.get("claim") or ""), snapshots),
        "nearFull": verdict.near,
        "nearFullReason": verdict.reason,
    }


def build_own_disks(
    user: str,
    items: Sequence[Mapping[str, Any]],
    snapshots: Sequence[Mapping[str, Any]],
    *,
    threshold: float,
) -> Obj:
    """The answer of ``GET …/users/<user>/disks``: ``user``'s rows only, by workspace then disk kind."""
    mine = [i for i in items if i.get("user") == user]
    rows = [build_disk_row(i, snapshots, threshold=threshold) for i in mine]
    rows.sort(key=lambda r: (r["workspace"], r["kind"] != "home", str(r["claim"])))
    return {"user": user, "threshold": threshold, "items": rows}
