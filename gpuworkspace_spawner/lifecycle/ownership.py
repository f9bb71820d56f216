"""Who owns a workspace disk, which claim a start uses, and an admin's transfer of a disk: pure decisions.

A disk belongs to one hub user record, not to a user name. Its owner is what the disk says:
the exact user and server names (``gpuworkspace.dev/username``, ``…/servername``; labels are only an
index, a hashed label value can equal another user's plain name) and the owner's stable identity
(``gpuworkspace.dev/owner-created``: the creation time of the hub user record, see
:func:`~gpuworkspace_spawner.manifests.names.owner_key`). A user deleted and created again under the same
name is a new record: it gets a new disk under a new name, and the former owner's disk stays retained
until the reclaimer deletes it or an administrator transfers it (:func:`build_transfer_patch`).

Disks written before owners were recorded carry no ``owner-created``: the first start of the same
(user, server) adopts and stamps such a disk, unless it was retained because its user was deleted
(``retained-by: user-deleted``): then the user may have been created again, and only an administrator's
transfer hands it over.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from gpuworkspace_spawner.manifests.names import (
    ANN_OWNER_CREATED,
    ANN_RETAIN_UNTIL,
    ANN_RETAINED_AT,
    ANN_RETAINED_BY,
    ANN_SERVERNAME,
    ANN_USERNAME,
    DISK_ACTIVE,
    DISK_RETAINED,
    LABEL_DISK_STATE,
    RETAINED_BY_TRANSFER,
    RETAINED_BY_USER_DELETED,
    WorkspaceIdentity,
)
from gpuworkspace_spawner.manifests.pvc import format_time

from .diskops import Verdict

OwnerAction = Literal["mine", "legacy", "foreign"]
ANN_TRANSFERRED_AT = "gpuworkspace.dev/transferred-at"
ANN_TRANSFERRED_FROM = "gpuworkspace.dev/transferred-from"
_OWNER_SUFFIX = ".owner-"  # a dot: never in KubeSpawner's expanded names, so never another user's claim name
_OWNER_HASH_LEN = 12
_NAME_MAX = 253  # a PersistentVolumeClaim name is a DNS subdomain


@dataclass(frozen=True)
class OwnerVerdict:
    action: OwnerAction  # mine: this owner's; legacy: unstamped, adopted and stamped; foreign: not ours
    reason: str


@dataclass(frozen=True)
class ClaimChoice:
    name: str
    reason: str


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def describe_owner(meta: Mapping[str, Any]) -> str:
    """``alice/gpu (created 2026-…Z)``, from what the object says (for messages and audit)."""
    annotations = meta.get("annotations") or {}
    user = annotations.get(ANN_USERNAME, "an unknown user")
    server = annotations.get(ANN_SERVERNAME)
    where = f"{user}/{server}" if server else str(user)
    created = annotations.get(ANN_OWNER_CREATED)
    return f"{where} (user created {created})" if created else where


def decide_owner(meta: Mapping[str, Any], identity: WorkspaceIdentity) -> OwnerVerdict:
    """Whether the object with ``meta`` is ``identity``'s: exact names, then the owner's stable identity."""
    name = meta.get("name", "?")
    if not identity.owns(meta):
        return OwnerVerdict(
            "foreign", f"disk {name} belongs to user {describe_owner(meta)}, not to this server"
        )
    stamped = (meta.get("annotations") or {}).get(ANN_OWNER_CREATED)
    if not identity.owner:
        return OwnerVerdict("mine", f"disk {name} is this server's (the hub gave no owner identity)")
    if stamped == identity.owner:
        return OwnerVerdict("mine", f"disk {name} is this server's")
    if stamped:
        return OwnerVerdict(
            "foreign",
            f"disk {name} belongs to a former user named {identity.user!r} (created {stamped}), not to this "
            f"one (created {identity.owner}); an administrator can transfer it",
        )
    if (meta.get("annotations") or {}).get(ANN_RETAINED_BY) == RETAINED_BY_USER_DELETED:
        return OwnerVerdict(
            "foreign",
            f"disk {name} was retained when user {identity.user!r} was deleted, before disks recorded their "
            "owner: it is not handed to a user created again under that name; an administrator can transfer it",
        )
    return OwnerVerdict("legacy", f"disk {name} records no owner yet; adopting it and recording this owner")


def owner_claim_name(base: str, identity: WorkspaceIdentity) -> str:
    """The claim name of a disk whose base name is another owner's: ``<base>.owner-<12 hex>``."""
    digest = hashlib.sha256(
        f"{identity.user}\0{identity.server}\0{identity.owner}".encode("utf-8", "surrogatepass")
    ).hexdigest()[:_OWNER_HASH_LEN]
    suffix = f"{_OWNER_SUFFIX}{digest}"
    return f"{base[: _NAME_MAX - len(suffix)]}{suffix}"


def choose_home_claim(
    claims: Iterable[Mapping[str, Any]], base: str, identity: WorkspaceIdentity
) -> ClaimChoice:
    """Which claim a start of ``identity``'s server uses, from the claims in its namespace.

    This owner's own claim first (an active one before a retained one, the base name before others); else
    the base name when it is free, an unstamped disk of this server, or another server's claim (which
    the start then refuses, as before); else (a former owner of the same names) a new claim under
    :func:`owner_claim_name`, so a former owner's disk is neither adopted nor overwritten.
    """
    by_name = {str(_meta(c).get("name")): c for c in claims if not _meta(c).get("deletionTimestamp")}
    mine = [n for n, c in by_name.items() if decide_owner(_meta(c), identity).action == "mine"]
    if identity.owner and mine:
        labels = {n: _meta(by_name[n]).get("labels") or {} for n in mine}
        best = min(mine, key=lambda n: (labels[n].get(LABEL_DISK_STATE) != DISK_ACTIVE, n != base, n))
        return ClaimChoice(best, f"claim {best} is this owner's disk")
    current = by_name.get(base)
    if current is None:
        return ClaimChoice(base, f"no claim {base} yet")
    verdict = decide_owner(_meta(current), identity)
    if verdict.action != "foreign" or not identity.owner or not identity.owns(_meta(current)):
        return ClaimChoice(base, verdict.reason)  # another server's or user's claim: the start refuses it
    name = owner_claim_name(base, identity)
    return ClaimChoice(name, f"{verdict.reason}; this user's disk is {name}")


def decide_transfer(
    claim: Mapping[str, Any], target: WorkspaceIdentity, *, users: list[str], displaced_users: list[str]
) -> Verdict:
    """Whether an administrator may give ``claim`` to ``target`` now.

    ``users``: pods/VMs mounting the claim; ``displaced_users``: those mounting the target server's
    current disk (it is set aside as retained). Both must be empty: a disk changes hands only unmounted.
    """
    meta = _meta(claim)
    name = meta.get("name", "?")
    if not target.owner:
        return Verdict(False, f"user {target.user!r} has no creation time in the hub; cannot bind")
    if meta.get("deletionTimestamp"):
        return Verdict(False, f"claim {name} is being deleted")
    if decide_owner(meta, target).action == "mine" and (meta.get("annotations") or {}).get(ANN_OWNER_CREATED):
        return Verdict(False, f"claim {name} already belongs to {describe_owner(meta)}")
    if users:
        return Verdict(False, f"claim {name} is mounted by {', '.join(users)}; stop it first")
    if displaced_users:
        return Verdict(
            False,
            f"the current disk of {target.user}/{target.server} is mounted by {', '.join(displaced_users)}; "
            "stop that server first",
        )
    return Verdict(True, f"claim {name} goes from {describe_owner(meta)} to {target.user}")


def build_transfer_patch(
    claim: Mapping[str, Any], target: WorkspaceIdentity, *, now: datetime
) -> dict[str, Any]:
    """JSON merge patch: ``claim`` becomes the active disk of ``target`` (names, labels, owner restamped).

    Carries the claim's ``resourceVersion``: a claim changed since it was read is not patched (409).
    The profile labels stay; the next start of the server brings them up to date.
    """
    meta = _meta(claim)
    return {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "labels": {**target.selector_labels, LABEL_DISK_STATE: DISK_ACTIVE},
            "annotations": {
                **target.name_annotations,
                ANN_OWNER_CREATED: target.owner,
                ANN_TRANSFERRED_AT: format_time(now),
                ANN_TRANSFERRED_FROM: describe_owner(meta),
                ANN_RETAIN_UNTIL: None,
                ANN_RETAINED_AT: None,
                ANN_RETAINED_BY: None,
            },
        }
    }


def build_set_aside_patch(claim: Mapping[str, Any], *, now: datetime, until: datetime) -> dict[str, Any]:
    """JSON merge patch: the target server's current disk, replaced by a transfer, is retained until ``until``."""
    return {
        "metadata": {
            "resourceVersion": _meta(claim).get("resourceVersion"),
            "labels": {LABEL_DISK_STATE: DISK_RETAINED},
            "annotations": {
                ANN_RETAIN_UNTIL: format_time(until),
                ANN_RETAINED_AT: format_time(now),
                ANN_RETAINED_BY: RETAINED_BY_TRANSFER,
            },
        }
    }
