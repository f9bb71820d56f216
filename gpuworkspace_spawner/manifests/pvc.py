"""The personal home disk: the PersistentVolumeClaim and the merge patches of its retention lifecycle.

Pure. The claim is created on its own and never carries ownerReferences: a pod, a server or a hub going
away must not cascade-delete a user's disk (seed 000 §7). Its state lives on the claim itself
(``gpuworkspace.dev/disk-state``: ``active`` → ``retained`` → deleted by the reclaimer), so the hub holds
nothing but the claim's name.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuworkspace_spawner.manifests.names import (
    ANN_RETAIN_UNTIL,
    ANN_RETAINED_AT,
    ANN_RETAINED_BY,
    DISK_ACTIVE,
    DISK_HOME,
    DISK_RETAINED,
    LABEL_DISK,
    LABEL_DISK_STATE,
    PROVENANCE_ANNOTATIONS,
    PROVENANCE_LABELS,
    WorkspaceContext,
)

_RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


def format_time(dt: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` and whole seconds (``2026-12-31T10:00:00Z``); naive times are refused."""
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"a timezone-aware datetime is required, got naive {dt.isoformat()}")
    return dt.astimezone(UTC).strftime(_RFC3339)


def parse_time(text: object) -> datetime | None:
    """An RFC 3339 timestamp as an aware UTC datetime; None when missing, not a string or unparseable.

    A timestamp without an offset is not RFC 3339 and is refused rather than guessed.
    """
    if not isinstance(text, str) or "T" not in text.upper():
        return None
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.astimezone(UTC)


def build_home_pvc(ws: WorkspaceContext) -> dict[str, Any]:
    """The home claim for ``ws``: RWO or RWOP, Filesystem, the profile's size and class, no owner."""
    home = ws.profile.storage.home
    spec: dict[str, Any] = {
        "accessModes": [home.access_mode],
        "volumeMode": "Filesystem",
        "resources": {"requests": {"storage": home.size}},
    }
    if home.storage_class is not None:
        spec["storageClassName"] = home.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": ws.home_claim,
            "namespace": ws.identity.namespace,
            "labels": {
                **ws.identity.selector_labels,
                LABEL_DISK: DISK_HOME,
                LABEL_DISK_STATE: DISK_ACTIVE,
                **ws.profile_labels,
                **ws.provenance_labels,
            },
            "annotations": ws.disk_annotations,
        },
        "spec": spec,
    }


def build_retain_patch(*, retain_until: datetime, now: datetime, why: str) -> dict[str, Any]:
    """JSON merge patch: the claim enters retention until ``retain_until`` (``why``: who deleted what)."""
    if not why:
        raise ValueError("a retained disk must say why it was retained")
    return {
        "metadata": {
            "labels": {LABEL_DISK_STATE: DISK_RETAINED},
            "annotations": {
                ANN_RETAIN_UNTIL: format_time(retain_until),
                ANN_RETAINED_AT: format_time(now),
                ANN_RETAINED_BY: why,
            },
        }
    }


def build_adopt_patch(ws: WorkspaceContext) -> dict[str, Any]:
    """JSON merge patch: a retained claim becomes active again for ``ws`` (null removes the annotations,
    and the team and image of the start that last adopted it when this start has none)."""
    return {
        "metadata": {
            "labels": {
                LABEL_DISK_STATE: DISK_ACTIVE,
                **ws.profile_labels,
                **dict.fromkeys(PROVENANCE_LABELS),
                **ws.provenance_labels,
            },
            "annotations": {
                **dict.fromkeys(PROVENANCE_ANNOTATIONS),
                **ws.disk_annotations,
                ANN_RETAIN_UNTIL: None,
                ANN_RETAINED_AT: None,
                ANN_RETAINED_BY: None,
            },
        }
    }
