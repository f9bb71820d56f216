"""Home disk decisions: which claim a start may use, and when a retained claim may finally be deleted.

Pure; time is a parameter. Fail closed (ARCHITECTURE.md principle 4): a claim whose owner, state or
retention date is unknown is never deleted and never handed to another user.

Lifecycle of a home claim (seed 000 §10): ``active`` (a server uses it, running or stopped) →
``retained`` (the server or user was deleted; ``retain-until`` says how long) → deleted by the reclaimer
once retention has passed and nothing mounts it. A start of the same server during retention adopts it,
when the disk's owner is the starting user record (:mod:`~gpuworkspace_spawner.lifecycle.ownership`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from gpuworkspace_spawner.manifests.names import (
    ANN_RETAIN_UNTIL,
    DISK_HOME,
    DISK_RETAINED,
    DISK_ROOT,
    LABEL_DISK,
    LABEL_DISK_STATE,
    LABEL_USER,
    WorkspaceIdentity,
)
from gpuworkspace_spawner.manifests.pvc import parse_time

from .ownership import decide_owner

DiskAction = Literal["create", "use", "adopt", "refuse"]
ReclaimAction = Literal["delete", "keep"]


@dataclass(frozen=True)
class DiskVerdict:
    action: DiskAction
    reason: str


@dataclass(frozen=True)
class ReclaimVerdict:
    action: ReclaimAction
    reason: str
    retain_until: datetime | None = None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def decide_home_disk(pvc: Mapping[str, Any] | None, identity: WorkspaceIdentity) -> DiskVerdict:
    """What a start of ``identity``'s server does with the home claim found under its name (or None)."""
    if pvc is None:
        return DiskVerdict("create", "no home claim yet; creating one")
    meta = _meta(pvc)
    name = meta.get("name", "?")
    labels = meta.get("labels") or {}
    if LABEL_USER not in labels:
        return DiskVerdict(
            "refuse",
            f"claim {name} exists but carries no {LABEL_USER} label; an administrator must label it "
            "for this user (or rename it) before it is mounted",
        )
    owner = decide_owner(meta, identity)
    if owner.action == "foreign":
        return DiskVerdict("refuse", owner.reason)
    if meta.get("deletionTimestamp"):
        return DiskVerdict("refuse", f"claim {name} is being deleted; wait and retry")
    phase = (pvc.get("status") or {}).get("phase")
    if phase == "Lost":
        return DiskVerdict(
            "refuse", f"claim {name} is Lost: its volume is gone; an administrator must restore it"
        )
    if labels.get(LABEL_DISK_STATE) == DISK_RETAINED:
        until = (meta.get("annotations") or {}).get(ANN_RETAIN_UNTIL, "unknown")
        return DiskVerdict("adopt", f"claim {name} was retained (retain-until {until}); adopting it again")
    if owner.action == "legacy":
        return DiskVerdict("adopt", owner.reason)
    return DiskVerdict("use", f"claim {name} is this server's home disk")


def retain_until(now: datetime, retention: timedelta) -> datetime:
    """When a disk retained at ``now`` may be reclaimed."""
    if retention < timedelta(0):
        raise ValueError(f"retention must not be negative, got {retention}")
    return now + retention


def decide_reclaim(pvc: Mapping[str, Any], *, now: datetime, in_use: bool) -> ReclaimVerdict:
    """Whether the reclaimer may delete ``pvc`` now. Anything not provably expired is kept."""
    meta = _meta(pvc)
    name = meta.get("name", "?")
    labels = meta.get("labels") or {}
    if labels.get(LABEL_DISK) not in (DISK_HOME, DISK_ROOT):  # a container home or a VM root disk
        return ReclaimVerdict("keep", f"claim {name} is not a workspace disk")
    if labels.get(LABEL_DISK_STATE) != DISK_RETAINED:
        return ReclaimVerdict("keep", f"claim {name} is not labelled {LABEL_DISK_STATE}={DISK_RETAINED}")
    if meta.get("deletionTimestamp"):
        return ReclaimVerdict("keep", f"claim {name} is already being deleted")
    raw = (meta.get("annotations") or {}).get(ANN_RETAIN_UNTIL)
    if raw is None:
        return ReclaimVerdict("keep", f"claim {name} has no {ANN_RETAIN_UNTIL} annotation")
    until = parse_time(raw)
    if until is None:
        return ReclaimVerdict("keep", f"claim {name} has an unparseable {ANN_RETAIN_UNTIL}: {raw!r}")
    if in_use:
        return ReclaimVerdict("keep", f"claim {name} is still mounted by a pod", until)
    if now < until:
        return ReclaimVerdict("keep", f"claim {name} is retained until {raw}", until)
    return ReclaimVerdict("delete", f"claim {name} retention ended at {raw}", until)


def pods_using_claim(pods: Sequence[Mapping[str, Any]], claim: str, namespace: str) -> list[str]:
    """Names of pods in ``namespace`` that mount ``claim`` and have not finished (input for ``in_use``)."""
    users = []
    for pod in pods:
        meta = _meta(pod)
        if meta.get("namespace", namespace) != namespace:
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        volumes = (pod.get("spec") or {}).get("volumes") or []
        if any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim for v in volumes):
            users.append(str(meta.get("name", "?")))
    return sorted(users)
