"""VM root disks: the DataVolume is the disk's handle (its lifecycle), its claim is the volume (pure).

CDI creates a root DataVolume's claim with the DataVolume's labels and annotations, copied once, at
creation (``newPersistentVolumeClaim`` in CDI's datavolume controller), so the claim is listed, read,
resized, snapshotted and metered like a home claim. The reclaimer acts on the DataVolume (deleting it
deletes the claim it owns), so a root disk's state (``active``/``retained``, ``retain-until``) is the
DataVolume's (:func:`with_lifecycle_of`). Restoring a root disk in place is refused
(:func:`restore_refusal`): replacing the claim under a finished DataVolume is not something CDI supports.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from gpuworkspace_spawner.manifests.names import (
    ANN_RETAIN_UNTIL,
    ANN_RETAINED_AT,
    ANN_RETAINED_BY,
    LABEL_DISK_STATE,
)

from .diskops import DISK_ROOT, disk_kind

Obj = dict[str, Any]
_LIFECYCLE_ANNOTATIONS = (ANN_RETAIN_UNTIL, ANN_RETAINED_AT, ANN_RETAINED_BY)


def data_volume_of(
    claim: Mapping[str, Any], data_volumes: Iterable[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The root DataVolume that owns ``claim`` (same name, and the claim's controller owner when it says)."""
    meta = claim.get("metadata") or {}
    owners = {r.get("uid") for r in meta.get("ownerReferences") or [] if r.get("kind") == "DataVolume"}
    for dv in data_volumes:
        dv_meta = dv.get("metadata") or {}
        if dv_meta.get("name") == meta.get("name") and (not owners or dv_meta.get("uid") in owners):
            return dv
    return None


def with_lifecycle_of(claim: Mapping[str, Any], dv: Mapping[str, Any] | None) -> Obj:
    """``claim`` with its disk state and retention annotations taken from its DataVolume ``dv`` (a root
    disk whose DataVolume is known), else unchanged. Pure: a copy, the input is not changed."""
    out: Obj = copy.deepcopy(dict(claim))
    if dv is None or disk_kind(claim) != DISK_ROOT:
        return out
    dv_meta = dv.get("metadata") or {}
    meta = out.setdefault("metadata", {})
    labels = meta.setdefault("labels", {})
    annotations = meta.setdefault("annotations", {})
    state = (dv_meta.get("labels") or {}).get(LABEL_DISK_STATE)
    if state is None:
        labels.pop(LABEL_DISK_STATE, None)
    else:
        labels[LABEL_DISK_STATE] = state
    for key in _LIFECYCLE_ANNOTATIONS:
        value = (dv_meta.get("annotations") or {}).get(key)
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    return out


def restore_refusal(claim: Mapping[str, Any]) -> str | None:
    """Why ``claim`` cannot be restored in place (a VM root disk), or None."""
    if disk_kind(claim) != DISK_ROOT:
        return None
    name = (claim.get("metadata") or {}).get("name", "?")
    return (
        f"claim {name} is a VM root disk: its claim belongs to DataVolume {name} and is not replaced in "
        "place; its snapshots can be restored into a new disk (kubectl: a PersistentVolumeClaim with "
        "dataSource: VolumeSnapshot)"
    )
