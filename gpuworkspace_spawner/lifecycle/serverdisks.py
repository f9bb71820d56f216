"""Which disks a deleted server owns, and what its deletion does with each (pure).

A server can run as a container (its disk: a home claim) and, after a profile change, as a VM (its disk:
a root DataVolume and the claim CDI creates for it), or the other way round. Deleting the server must
retain **every** disk it owns, not only the one of the runtime it last ran: a disk left ``active`` is
never reclaimed (a leak). So the answer comes from the cluster's objects, never from the spawner's
memory: the selector labels find the candidates (an index only), the exact-name annotations and the
owner's stable identity decide (:func:`~gpuworkspace_spawner.lifecycle.ownership.decide_owner`).

A root disk is retained through its DataVolume (the reclaimer deletes the DataVolume; the garbage
collector deletes the claim it owns); the claim is written too, because CDI copies the DataVolume's
labels onto its claim only once, when it creates it (see the devcluster's CDI notes), and the claim is
what the disk API lists and meters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpuworkspace_spawner.manifests.names import (
    ANN_RETAIN_UNTIL,
    DISK_HOME,
    DISK_RETAINED,
    DISK_ROOT,
    LABEL_DISK,
    LABEL_DISK_STATE,
    WorkspaceIdentity,
)

from .ownership import decide_owner

DiskObjectKind = Literal["PersistentVolumeClaim", "DataVolume"]
ServerDiskAction = Literal["retain", "skip"]


@dataclass(frozen=True)
class ServerDisk:
    """One disk object found for the server: ``retain`` it, or ``skip`` it for ``reason``."""

    kind: DiskObjectKind
    name: str
    disk: str  # home | root
    action: ServerDiskAction
    reason: str
    mine: bool = True  # this server's disk (False: another owner's under a matching label)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _decide_one(
    obj: Mapping[str, Any], disk: str, identity: WorkspaceIdentity, home_shared: bool
) -> ServerDisk:
    meta = _meta(obj)
    kind: DiskObjectKind = "DataVolume" if disk == DISK_ROOT else "PersistentVolumeClaim"
    name = str(meta.get("name", "?"))
    what = "VM root disk" if disk == DISK_ROOT else "home disk"

    def skip(reason: str) -> ServerDisk:
        return ServerDisk(kind, name, disk, "skip", reason)

    owner = decide_owner(meta, identity)
    if owner.action == "foreign":
        return ServerDisk(kind, name, disk, "skip", owner.reason, mine=False)
    if meta.get("deletionTimestamp"):
        return skip(f"{kind} {name} is already being deleted")
    if (meta.get("labels") or {}).get(LABEL_DISK_STATE) == DISK_RETAINED:
        until = (meta.get("annotations") or {}).get(ANN_RETAIN_UNTIL, "an unknown date")
        return skip(f"{kind} {name} is already retained until {until}; its retention is not extended")
    if disk == DISK_HOME and home_shared:
        return skip(f"claim {name} is shared by the user's servers; it is not retained for one of them")
    return ServerDisk(kind, name, disk, "retain", f"{kind} {name} is this server's {what}")


def decide_server_disks(
    identity: WorkspaceIdentity,
    *,
    claims: Iterable[Mapping[str, Any]],
    data_volumes: Iterable[Mapping[str, Any]],
    home_shared: bool = False,
) -> list[ServerDisk]:
    """Every home claim and root DataVolume found for ``identity``'s server, each with what its deletion
    does. ``claims`` and ``data_volumes`` may hold anything (e.g. a label-selected list): objects that are
    not a home claim resp. a root DataVolume are left out; others' disks are skipped with the reason.
    Root disks' claims are not listed: they follow their DataVolume. ``home_shared``: the home claim
    name has no per-server part (a named server shares the default server's claim)."""
    found = [(c, DISK_HOME) for c in claims] + [(d, DISK_ROOT) for d in data_volumes]
    out = [
        _decide_one(obj, disk, identity, home_shared)
        for obj, disk in found
        if (_meta(obj).get("labels") or {}).get(LABEL_DISK) == disk
    ]
    return sorted(out, key=lambda d: (d.disk, d.name))


def owns_a_vm_disk(decisions: Iterable[ServerDisk]) -> bool:
    """Whether the server has a root disk of its own (retained now or before): its VM objects go too."""
    return any(d.disk == DISK_ROOT and d.mine for d in decisions)


def disks_to_retain(decisions: Iterable[ServerDisk]) -> list[ServerDisk]:
    return [d for d in decisions if d.action == "retain"]
