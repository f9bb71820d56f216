"""Disk administration decisions: resize, snapshot, restore and early reclaim of a workspace disk.

Pure; time is a parameter. The disk admin service (``services/disks``) fetches the claim, its class,
snapshots and the pods/VMIs using it, asks these functions, and acts. Fail closed (ARCHITECTURE.md
principle 4): a claim that is not one of ours, a class whose expansion support is unknown, a profile
without a known size, or a disk still mounted is refused with a reason that says what to do.

Snapshots are not backups (seed 001 §22): they live on the same Ceph cluster as the disk. A restore
therefore first takes a *safety* snapshot of the current disk, so a restore never loses data.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_CEILING, Decimal
from typing import Any, Literal

from gpuworkspace_spawner.catalog.units import parse_quantity
from gpuworkspace_spawner.manifests.names import (
    DISK_HOME,
    DISK_RETAINED,
    LABEL_DISK,
    LABEL_DISK_STATE,
    LABEL_USER,
)
from gpuworkspace_spawner.manifests.pvc import format_time

DISK_ROOT = "root"  # a VM's root disk (CDI DataVolume → claim of the same name)
DISK_KINDS = (DISK_HOME, DISK_ROOT)
LABEL_SNAPSHOT_OF = "gpuworkspace.dev/snapshot-of"  # the claim a VolumeSnapshot was taken of
LABEL_SNAPSHOT_KIND = "gpuworkspace.dev/snapshot-kind"  # manual | pre-restore | scheduled
ANN_SNAPSHOT_BY = "gpuworkspace.dev/snapshot-by"  # the hub user who asked for it
ANN_RESTORED_FROM = "gpuworkspace.dev/restored-from"  # the VolumeSnapshot a claim was restored from
ANN_RESTORED_AT = "gpuworkspace.dev/restored-at"
ANN_RESTORED_BY = "gpuworkspace.dev/restored-by"
SnapshotKind = Literal["manual", "pre-restore", "scheduled"]
SNAPSHOT_MANUAL: SnapshotKind = "manual"
SNAPSHOT_SAFETY: SnapshotKind = "pre-restore"
SNAPSHOT_SCHEDULED: SnapshotKind = "scheduled"  # taken by the disk service on the profile's schedule
SNAPSHOT_API_VERSION = "snapshot.storage.k8s.io/v1"
SNAPSHOT_GROUP = "snapshot.storage.k8s.io"
DEFAULT_MAX_FACTOR = 4  # no max configured: an admin may grow a disk up to 4x the profile's size
FS_RESIZE_PENDING = "FileSystemResizePending"
# Annotations the control plane writes on a claim; a restored claim must not inherit them.
_SYSTEM_ANNOTATION_PREFIXES = ("pv.kubernetes.io/", "volume.beta.kubernetes.io/", "volume.kubernetes.io/")
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_NAME_MAX = 253
_HASH_LEN = 8

Refusal = Literal["invalid", "conflict"]  # the service answers 400 and 409
ResizeProgress = Literal["done", "node-pending", "waiting"]
SnapshotProgress = Literal["ready", "pending"]


@dataclass(frozen=True)
class Verdict:
    """``allowed`` or refused with a ``reason`` a person can act on; ``refusal`` says which kind."""

    allowed: bool
    reason: str
    refusal: Refusal | None = None


@dataclass(frozen=True)
class ResizeVerdict(Verdict):
    size: str = ""  # the new request, as given
    max_size: str = ""  # the limit that applied, for the answer and the audit record


@dataclass(frozen=True)
class SizeLimit:
    """What the catalog says about a disk: the profile's size and optional max (``None``: not set)."""

    profile_size: str | None
    max_size: str | None
    factor: int = DEFAULT_MAX_FACTOR


def _allow(reason: str) -> Verdict:
    return Verdict(True, reason)


def _refuse(reason: str, refusal: Refusal = "conflict") -> Verdict:
    return Verdict(False, reason, refusal)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def parse_size(text: object) -> int | None:
    """A storage quantity in bytes (rounded up), or None when it is not one."""
    if not isinstance(text, str):
        return None
    try:
        value = parse_quantity(text)
    except ValueError:
        return None
    return int(value.to_integral_value(rounding=ROUND_CEILING)) if value > 0 else None


def format_size(size: int) -> str:
    """Bytes as the shortest exact binary quantity (``12Gi``, ``1536Mi``, else plain bytes)."""
    for power, suffix in ((50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")):
        if size and size % (1 << power) == 0:
            return f"{size >> power}{suffix}"
    return str(size)


def _text(value: object) -> str | None:
    return str(value) if value is not None else None


def requested_size(claim: Mapping[str, Any]) -> str | None:
    return _text(((claim.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage"))


def capacity_size(claim: Mapping[str, Any]) -> str | None:
    return _text(((claim.get("status") or {}).get("capacity") or {}).get("storage"))


def disk_kind(claim: Mapping[str, Any]) -> str | None:
    """``home`` or ``root`` for a workspace disk, else None."""
    kind = (_meta(claim).get("labels") or {}).get(LABEL_DISK)
    return kind if kind in DISK_KINDS else None


def ours(claim: Mapping[str, Any]) -> Verdict:
    """Whether the service may operate on ``claim`` at all: a labelled workspace disk, not being deleted."""
    meta = _meta(claim)
    name = meta.get("name", "?")
    labels = meta.get("labels") or {}
    if disk_kind(claim) is None or LABEL_USER not in labels:
        return _refuse(
            f"claim {name} is not a workspace disk (it needs the labels {LABEL_DISK}=home|root and "
            f"{LABEL_USER}); this service only manages workspace disks"
        )
    if meta.get("deletionTimestamp"):
        return _refuse(f"claim {name} is being deleted")
    return _allow(f"claim {name} is a workspace {disk_kind(claim)} disk")


def size_limit_bytes(limit: SizeLimit) -> tuple[int, str] | None:
    """The largest size allowed and how it was found; None when neither size nor max is known."""
    configured = parse_size(limit.max_size)
    if configured is not None:
        return configured, f"the profile's max size {limit.max_size}"
    base = parse_size(limit.profile_size)
    if base is None:
        return None
    return base * limit.factor, f"{limit.factor}x the profile's size {limit.profile_size} (no max size set)"


def decide_resize(
    claim: Mapping[str, Any], requested: str, *, limit: SizeLimit, expandable: bool | None
) -> ResizeVerdict:
    """Whether ``claim`` may grow to ``requested``: larger than now, within the limit, class expandable."""
    base = ours(claim)
    name = _meta(claim).get("name", "?")
    if not base.allowed:
        return ResizeVerdict(False, base.reason, base.refusal)
    want = parse_size(requested)
    if want is None:
        return ResizeVerdict(False, f"size {requested!r} is not a storage quantity like 20Gi", "invalid")
    current = requested_size(claim)
    have = parse_size(current)
    if have is None:
        return ResizeVerdict(False, f"claim {name} has no readable storage request ({current!r})", "conflict")
    if want <= have:
        return ResizeVerdict(
            False, f"{requested} is not larger than the current size {current}; disks only grow", "invalid"
        )
    bound = size_limit_bytes(limit)
    if bound is None:
        return ResizeVerdict(
            False, f"no size limit is known for claim {name}: its profile is not in the catalog", "conflict"
        )
    most, why = bound
    if want > most:
        return ResizeVerdict(
            False, f"{requested} is above {format_size(most)}, {why}", "invalid", max_size=format_size(most)
        )
    if (claim.get("status") or {}).get("phase") != "Bound":
        return ResizeVerdict(
            False, f"claim {name} is not Bound; only bound claims can be resized", "conflict"
        )
    if expandable is not True:
        what = "does not allow" if expandable is False else "may not allow (its class is unknown)"
        return ResizeVerdict(False, f"the storage class of claim {name} {what} volume expansion", "conflict")
    return ResizeVerdict(
        True, f"claim {name}: {current} -> {requested}", size=requested, max_size=format_size(most)
    )


def decide_resize_progress(claim: Mapping[str, Any], want: int, *, in_use: bool) -> ResizeProgress:
    """``done`` once the capacity reached ``want``; ``node-pending`` when only the file-system resize is
    left and no pod mounts the disk (the next start finishes it); else ``waiting``."""
    have = parse_size(capacity_size(claim))
    if have is not None and have >= want:
        return "done"
    conditions = (claim.get("status") or {}).get("conditions") or []
    pending = any(c.get("type") == FS_RESIZE_PENDING and c.get("status") == "True" for c in conditions)
    return "node-pending" if pending and not in_use else "waiting"


def snapshot_name(claim_name: str, now: datetime, kind: SnapshotKind = SNAPSHOT_MANUAL) -> str:
    """``<claim>-<kind>-<YYYYMMDD-HHMMSS>``, shortened with a hash to a valid object name."""
    suffix = f"-{'snap' if kind == SNAPSHOT_MANUAL else kind}-{now.strftime('%Y%m%d-%H%M%S')}"
    if len(claim_name) + len(suffix) <= _NAME_MAX:
        return claim_name + suffix
    digest = hashlib.sha256(claim_name.encode()).hexdigest()[:_HASH_LEN]
    keep = _NAME_MAX - len(suffix) - _HASH_LEN - 1
    return f"{claim_name[:keep].rstrip('-.')}-{digest}{suffix}"


def workspace_labels(claim: Mapping[str, Any]) -> dict[str, str]:
    """The claim's gpuworkspace.dev labels except its disk state (a snapshot has no lifecycle state)."""
    labels = _meta(claim).get("labels") or {}
    return {
        k: str(v) for k, v in labels.items() if k.startswith("gpuworkspace.dev/") and k != LABEL_DISK_STATE
    }


def build_snapshot(
    claim: Mapping[str, Any],
    *,
    name: str,
    kind: SnapshotKind,
    by: str,
    snapshot_class: str | None = None,
) -> dict[str, Any]:
    """A ``snapshot.storage.k8s.io/v1`` VolumeSnapshot of ``claim`` (no class: the cluster's default)."""
    meta = _meta(claim)
    annotations = {
        k: str(v) for k, v in (meta.get("annotations") or {}).items() if k.startswith("gpuworkspace.dev/")
    }
    spec: dict[str, Any] = {"source": {"persistentVolumeClaimName": meta["name"]}}
    if snapshot_class:
        spec["volumeSnapshotClassName"] = snapshot_class
    return {
        "apiVersion": SNAPSHOT_API_VERSION,
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {**workspace_labels(claim), LABEL_SNAPSHOT_OF: meta["name"], LABEL_SNAPSHOT_KIND: kind},
            "annotations": {**annotations, ANN_SNAPSHOT_BY: by},
        },
        "spec": spec,
    }


def snapshot_progress(snapshot: Mapping[str, Any]) -> tuple[SnapshotProgress, str]:
    """``ready`` once ``readyToUse``; else ``pending`` with the controller's error message, if any."""
    status = snapshot.get("status") or {}
    if status.get("readyToUse") is True:
        return "ready", f"ready, restore size {status.get('restoreSize', '?')}"
    error = (status.get("error") or {}).get("message")
    return "pending", str(error) if error else "waiting for the snapshot controller"


def snapshot_source(snapshot: Mapping[str, Any]) -> str | None:
    return _text(((snapshot.get("spec") or {}).get("source") or {}).get("persistentVolumeClaimName"))


def claim_users(
    claim: str, pods: Sequence[Mapping[str, Any]], vmis: Sequence[Mapping[str, Any]] = ()
) -> list[str]:
    """``pod/<name>`` and ``vmi/<name>`` for unfinished pods and VMIs that mount ``claim``, sorted."""
    users = []
    for kind, objects, finished in (
        ("pod", pods, ("Succeeded", "Failed")),
        ("vmi", vmis, ("Succeeded", "Failed")),
    ):
        for obj in objects:
            if (obj.get("status") or {}).get("phase") in finished:
                continue
            for volume in (obj.get("spec") or {}).get("volumes") or []:
                ref = (volume.get("persistentVolumeClaim") or {}).get("claimName") or (
                    volume.get("dataVolume") or {}
                ).get("name")
                if ref == claim:
                    users.append(f"{kind}/{_meta(obj).get('name', '?')}")
                    break
    return sorted(users)


def decide_restore(
    claim: Mapping[str, Any], snapshot: Mapping[str, Any] | None, *, users: Sequence[str]
) -> Verdict:
    """Whether ``claim`` may be replaced by a copy of ``snapshot`` now."""
    base = ours(claim)
    if not base.allowed:
        return base
    name = _meta(claim).get("name", "?")
    if users:
        return _refuse(f"claim {name} is in use by {', '.join(users)}: stop the workspace first")
    if snapshot is None:
        return _refuse("no such snapshot", "invalid")
    snap = _meta(snapshot).get("name", "?")
    if snapshot_source(snapshot) != name:
        return _refuse(f"snapshot {snap} is of claim {snapshot_source(snapshot)}, not of {name}", "invalid")
    if _meta(snapshot).get("deletionTimestamp"):
        return _refuse(f"snapshot {snap} is being deleted")
    progress, message = snapshot_progress(snapshot)
    if progress != "ready":
        return _refuse(f"snapshot {snap} is not ready to use: {message}")
    if parse_size((snapshot.get("status") or {}).get("restoreSize")) is None:
        return _refuse(f"snapshot {snap} reports no restoreSize")
    return _allow(f"claim {name} is not in use; restoring it from snapshot {snap}")


def _restored_size(claim: Mapping[str, Any], snapshot: Mapping[str, Any]) -> str:
    current = requested_size(claim) or "0"
    restore = str((snapshot.get("status") or {}).get("restoreSize") or "0")
    current_b, restore_b = parse_size(current) or 0, parse_size(restore) or 0
    return current if current_b >= restore_b else restore


def build_restored_claim(
    claim: Mapping[str, Any], snapshot: Mapping[str, Any], *, now: datetime, by: str
) -> dict[str, Any]:
    """The claim again, same name, labels, annotations, access modes, class and mode, at least the
    snapshot's restore size, whose volume starts as a copy of ``snapshot``."""
    meta, spec = _meta(claim), claim.get("spec") or {}
    annotations = {
        k: str(v)
        for k, v in (meta.get("annotations") or {}).items()
        if not k.startswith(_SYSTEM_ANNOTATION_PREFIXES) and k != _LAST_APPLIED
    }
    annotations |= {
        ANN_RESTORED_FROM: str(_meta(snapshot)["name"]),
        ANN_RESTORED_AT: format_time(now),
        ANN_RESTORED_BY: by,
    }
    new_spec: dict[str, Any] = {
        "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
        "volumeMode": spec.get("volumeMode") or "Filesystem",
        "resources": {"requests": {"storage": _restored_size(claim, snapshot)}},
        "dataSource": {"apiGroup": SNAPSHOT_GROUP, "kind": "VolumeSnapshot", "name": _meta(snapshot)["name"]},
    }
    if spec.get("storageClassName"):
        new_spec["storageClassName"] = spec["storageClassName"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "annotations": annotations,
        },
        "spec": new_spec,
    }


def decide_reclaim_now(claim: Mapping[str, Any], *, users: Sequence[str]) -> Verdict:
    """Whether an admin may delete ``claim`` before its retention ends: only a retained, unused disk."""
    base = ours(claim)
    if not base.allowed:
        return base
    name = _meta(claim).get("name", "?")
    state = (_meta(claim).get("labels") or {}).get(LABEL_DISK_STATE)
    if state != DISK_RETAINED:
        return _refuse(
            f"claim {name} is {state or 'not labelled with a state'}, not {DISK_RETAINED}: only the disks of "
            "deleted servers can be reclaimed (delete the server first; its disk is then retained)"
        )
    if users:
        return _refuse(f"claim {name} is retained but still in use by {', '.join(users)}")
    return _allow(f"claim {name} is retained and unused; deleting it now")


def usage_ratio(used: float | None, capacity: float | None) -> float | None:
    if used is None or not capacity or capacity <= 0:
        return None
    return float(Decimal(str(used)) / Decimal(str(capacity)))


def decide_capacity_alert(used: float | None, capacity: float | None, *, threshold: float) -> bool:
    """Alert when used/capacity reaches ``threshold`` (unknown usage never alerts)."""
    ratio = usage_ratio(used, capacity)
    return ratio is not None and ratio >= threshold
