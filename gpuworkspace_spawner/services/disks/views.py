"""The API's JSON representation of workspace disks (pure: claims and objects in, dicts out)."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...lifecycle.diskops import (
    ANN_RESTORED_FROM,
    DISK_ROOT,
    capacity_size,
    claim_users,
    disk_kind,
    requested_size,
    snapshot_progress,
    usage_ratio,
)
from ...lifecycle.rootdisks import data_volume_of, with_lifecycle_of
from ...manifests.names import (
    ANN_CATALOG_VERSION,
    ANN_PROFILE,
    ANN_RETAIN_UNTIL,
    LABEL_CATALOG_VERSION,
    LABEL_DISK_STATE,
    LABEL_PROFILE,
    workspace_names,
)

Obj = dict[str, Any]


@dataclass(frozen=True)
class Usage:
    """A mounted disk's file system as its kubelet reports it (``None``: the kubelet did not say)."""

    used: float
    capacity: float
    available: float | None = None
    inodes_used: float | None = None
    inodes: float | None = None


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def owner(claim: Mapping[str, Any]) -> tuple[str, str]:
    """(user, server) of a workspace disk: the exact names from its annotations (``("", "")`` without them:
    a disk without them is nobody's but the admins'; labels may be hashed and never decide who owns it)."""
    return workspace_names(_meta(claim)) or ("", "")


def _state_function() -> Callable[..., Any] | None:
    """lifecycle.state.derive_state when that module is there (it arrived after this service)."""
    with contextlib.suppress(ImportError):
        module = importlib.import_module("gpuworkspace_spawner.lifecycle.state")
        return getattr(module, "derive_state", None)
    return None


def _fallback_state(claim: Mapping[str, Any], pod: Mapping[str, Any] | None) -> Obj:
    if (_meta(claim).get("labels") or {}).get(LABEL_DISK_STATE) == "retained":
        return {"state": "Retained", "reason": "the server was deleted; the disk is retained", "detail": {}}
    if pod is None:
        return {"state": "Stopped", "reason": "no pod uses the disk", "detail": {}}
    phase = (pod.get("status") or {}).get("phase")
    running = phase == "Running" and not _meta(pod).get("deletionTimestamp")
    return {"state": "Running" if running else "Starting", "reason": f"pod phase {phase}", "detail": {}}


@dataclass(frozen=True)
class Related:
    """What else the cluster says about the namespace's workspaces (for the state)."""

    pods: Sequence[Mapping[str, Any]] = ()
    vms: Sequence[Mapping[str, Any]] = ()
    vmis: Sequence[Mapping[str, Any]] = ()
    data_volumes: Sequence[Mapping[str, Any]] = ()


def _same_workspace(obj: Mapping[str, Any], claim: Mapping[str, Any]) -> bool:
    mine = workspace_names(_meta(claim))
    return mine is not None and workspace_names(_meta(obj)) == mine  # exact names, not the labels


def workspace_state(claim: Mapping[str, Any], related: Related, *, now: datetime) -> Obj:
    name = str(_meta(claim).get("name", ""))
    users = {u.split("/", 1)[1] for u in claim_users(name, related.pods)}
    pods = [p for p in related.pods if _meta(p).get("name") in users]
    pod = pods[0] if pods else None
    derive = _state_function()
    if derive is None:
        return _fallback_state(claim, pod)
    vm = next((v for v in related.vms if _same_workspace(v, claim)), None)
    vmis = [v for v in related.vmis if _same_workspace(v, claim)]
    dv = next((d for d in related.data_volumes if _meta(d).get("name") == name), None)
    root = disk_kind(claim) == DISK_ROOT
    state = derive(
        runtime="vm" if root else "container",
        disk=claim,
        data_volume=dv,
        pod=pod,
        vm=vm,
        vmi=vmis[0] if vmis else None,
        extra_compute=max(0, (len(vmis) if root else len(pods)) - 1),
        now=now,
    )
    return {"state": state.state, "reason": state.reason, "detail": dict(state.detail)}


def disk_view(claim: Mapping[str, Any], usage: Usage | None) -> Obj:
    meta = _meta(claim)
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    status = claim.get("status") or {}
    view: Obj = {
        "claim": meta.get("name"),
        "kind": disk_kind(claim),
        "size": requested_size(claim),
        "capacity": capacity_size(claim),
        "storageClass": (claim.get("spec") or {}).get("storageClassName"),
        "phase": status.get("phase"),
        "state": labels.get(LABEL_DISK_STATE),
        "retainUntil": annotations.get(ANN_RETAIN_UNTIL),
        "resizePending": [c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"],
        "restoredFrom": annotations.get(ANN_RESTORED_FROM),
        "uid": meta.get("uid"),
    }
    if usage is not None:
        view["usedBytes"] = int(usage.used)
        view["capacityBytes"] = int(usage.capacity)
        view["usageRatio"] = usage_ratio(usage.used, usage.capacity)
        for key, value in (
            ("freeBytes", usage.available),
            ("inodesUsed", usage.inodes_used),
            ("inodes", usage.inodes),
        ):
            if value is not None:
                view[key] = int(value)
    return view


def workspace_item(claim: Mapping[str, Any], related: Related, usage: Usage | None, *, now: datetime) -> Obj:
    claim = with_lifecycle_of(claim, data_volume_of(claim, related.data_volumes))  # a root disk's: its DV's
    meta = _meta(claim)
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    user, server = owner(claim)
    return {
        "user": user,
        "server": server,
        "profile": annotations.get(ANN_PROFILE) or labels.get(LABEL_PROFILE),
        "catalogVersion": annotations.get(ANN_CATALOG_VERSION) or labels.get(LABEL_CATALOG_VERSION),
        "disk": disk_view(claim, usage),
        "state": workspace_state(claim, related, now=now),
    }


def snapshot_view(snapshot: Mapping[str, Any]) -> Obj:
    meta, status = _meta(snapshot), snapshot.get("status") or {}
    progress, message = snapshot_progress(snapshot)
    spec = snapshot.get("spec") or {}
    return {
        "name": meta.get("name"),
        "claim": (spec.get("source") or {}).get("persistentVolumeClaimName"),
        "kind": (meta.get("labels") or {}).get("gpuworkspace.dev/snapshot-kind"),
        "class": spec.get("volumeSnapshotClassName"),
        "readyToUse": progress == "ready",
        "message": message,
        "restoreSize": status.get("restoreSize"),
        "creationTime": status.get("creationTime") or meta.get("creationTimestamp"),
        "by": (meta.get("annotations") or {}).get("gpuworkspace.dev/snapshot-by"),
    }
