"""Disk limits: whether a start may create a NEW workspace disk, given every disk the namespace holds.

Pure. The shell (``gpuworkspace_spawner.limiting``) lists the disks and calls
:func:`decide_new_disk` only when a start is about to create a disk; a start that uses or re-adopts
the disk already under its name is never refused (that disk is found in the list and allowed).

What counts as a disk: a container home claim (``gpuworkspace.dev/disk=home``) and a VM root
DataVolume (``gpuworkspace.dev/disk=root``), active or retained: retained disks hold storage until
the reclaimer deletes them, which is why they count. A disk already being deleted does not count.
A disk's owner is its ``gpuworkspace.dev/username`` annotation (the exact JupyterHub name), else its
``gpuworkspace.dev/user`` label (for disks labelled by hand).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpuworkspace_spawner.manifests.names import (
    ANN_RETAIN_UNTIL,
    ANN_SERVERNAME,
    ANN_USERNAME,
    DISK_HOME,
    DISK_RETAINED,
    DISK_ROOT,
    LABEL_DISK,
    LABEL_DISK_STATE,
    LABEL_USER,
)

LimitAction = Literal["allow", "refuse"]
Limit = Literal["", "per-user", "total"]
_LISTED_MAX = 10  # disks named in a refusal; more are summarised as "and N more"


@dataclass(frozen=True)
class DiskLimits:
    """The spawner's ``max_disks_per_user`` and ``max_disks_total``; 0 means unlimited."""

    per_user: int = 0
    total: int = 0

    def __post_init__(self) -> None:
        for name, value in (("max_disks_per_user", self.per_user), ("max_disks_total", self.total)):
            if value < 0:
                raise ValueError(f"{name} must be 0 (unlimited) or more, got {value}")


@dataclass(frozen=True)
class LimitVerdict:
    action: LimitAction
    reason: str  # shown to the user when refused
    limit: Limit = ""  # which limit refused (empty when allowed)
    user_disks: int = 0
    total_disks: int = 0


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def counts_as_disk(obj: Mapping[str, Any]) -> bool:
    """A workspace disk (home claim or root DataVolume) that is not already being deleted."""
    meta = _meta(obj)
    kind = (meta.get("labels") or {}).get(LABEL_DISK)
    return kind in (DISK_HOME, DISK_ROOT) and not meta.get("deletionTimestamp")


def owned_by(obj: Mapping[str, Any], user: str, user_label: str) -> bool:
    """Whether ``user`` (raw name; ``user_label`` its label value) owns the disk."""
    meta = _meta(obj)
    username = (meta.get("annotations") or {}).get(ANN_USERNAME)
    if username is not None:
        return bool(username == user)
    return bool((meta.get("labels") or {}).get(LABEL_USER) == user_label)


def describe_disk(obj: Mapping[str, Any]) -> str:
    """``'gpu' (retained until 2027-01-01T00:00:00Z)``: the server a disk belongs to, and its state."""
    meta = _meta(obj)
    annotations = meta.get("annotations") or {}
    server = annotations.get(ANN_SERVERNAME)
    if server is None:  # a disk labelled by hand: its name is all we know
        who = f"disk {meta.get('name', '?')}"
    else:
        who = f"server '{server}'" if server else "the default server"
    if (meta.get("labels") or {}).get(LABEL_DISK_STATE) == DISK_RETAINED:
        return f"{who} (retained until {annotations.get(ANN_RETAIN_UNTIL, 'unknown')})"
    return f"{who} (in use)"


def _listing(disks: Sequence[Mapping[str, Any]]) -> str:
    names = sorted(describe_disk(d) for d in disks)
    more = len(names) - _LISTED_MAX
    return ", ".join(names[:_LISTED_MAX]) + (f" and {more} more" if more > 0 else "")


def pending_disk(name: str, disk_kind: str, user: str, user_label: str) -> dict[str, Any]:
    """What counts for a disk this hub has just created and no watch or list has shown yet."""
    labels = {LABEL_DISK: disk_kind, LABEL_USER: user_label}
    return {"metadata": {"name": name, "labels": labels, "annotations": {ANN_USERNAME: user}}}


def with_pending_disks(
    seen: Sequence[Mapping[str, Any]],
    pending: Mapping[str, tuple[float, Mapping[str, Any]]],
    *,
    now: float,
    kept_s: float,
) -> tuple[list[Mapping[str, Any]], dict[str, tuple[float, Mapping[str, Any]]]]:
    """``seen`` plus the disks created here that it does not show yet (``pending``: name -> (created at,
    disk)), and what stays pending: a disk leaves once seen, or ``kept_s`` after it was created."""
    names = {_meta(d).get("name") for d in seen}
    still = {n: (at, d) for n, (at, d) in pending.items() if n not in names and now - at < kept_s}
    return [*seen, *(d for _, d in still.values())], still


def decide_new_disk(
    disks: Sequence[Mapping[str, Any]],
    *,
    user: str,
    user_label: str,
    disk_name: str,
    limits: DiskLimits,
) -> LimitVerdict:
    """May ``user``'s start create the disk ``disk_name``? ``disks``: every home claim and root
    DataVolume of the namespace (any owner, any state). Refused past either limit, with a reason
    that says which limit, how many disks the user has, and what to do."""
    counted = [d for d in disks if counts_as_disk(d)]
    mine = [d for d in counted if owned_by(d, user, user_label)]
    n_user, n_total = len(mine), len(counted)
    if any(_meta(d).get("name") == disk_name for d in counted):
        return LimitVerdict("allow", f"disk {disk_name} exists: reused, not new", "", n_user, n_total)
    if limits.per_user and n_user >= limits.per_user:
        reason = (
            f"You already have {n_user} workspace disk{'s' if n_user != 1 else ''}, the most one user "
            f"may keep ({limits.per_user}), so no disk was created for this server. Your disks: "
            f"{_listing(mine)}. Start one of those servers instead (a deleted server's name re-adopts "
            "its retained disk), or ask an administrator to delete a retained disk you no longer need."
        )
        return LimitVerdict("refuse", reason, "per-user", n_user, n_total)
    if limits.total and n_total >= limits.total:
        reason = (
            f"This hub already holds {n_total} workspace disks, the most it allows ({limits.total}), "
            "so no disk was created for this server. You have "
            f"{n_user} disk{'s' if n_user != 1 else ''}"
            f"{': ' + _listing(mine) if mine else ''}. Start an existing server instead (its disk is "
            "reused), or ask an administrator to delete retained disks."
        )
        return LimitVerdict("refuse", reason, "total", n_user, n_total)
    return LimitVerdict(
        "allow", f"a new disk: {n_user + 1} for this user, {n_total + 1} in all", "", n_user, n_total
    )


def form_refusal(verdict: LimitVerdict) -> str:
    """What the spawn form says on a profile card when a start would be refused by ``verdict``: said
    before the click, so in the conditional (nothing was tried yet); empty when the start may go on."""
    if verdict.action != "refuse":
        return ""
    mine = f"{verdict.user_disks} disk{'s' if verdict.user_disks != 1 else ''}"
    if verdict.limit == "per-user":
        return (
            f"this server has no disk yet and you already have {mine}, the most one user may keep. "
            "Start one of your servers that has a disk, or ask an administrator to delete a retained one."
        )
    return (
        f"this server has no disk yet and the hub already holds {verdict.total_disks} disks, the most it "
        f"allows (you have {mine}). Start one of your servers that has a disk, or ask an administrator "
        "to delete retained disks."
    )


def start_refusals(
    disks: Sequence[Mapping[str, Any]],
    *,
    user: str,
    user_label: str,
    new_disks: Mapping[str, str],
    limits: DiskLimits,
) -> dict[str, str]:
    """For each runtime in ``new_disks`` (runtime -> the disk a start of that runtime would create for
    this server), the spawn form's refusal (:func:`form_refusal`), for the runtimes that would be refused."""
    answers = {}
    for runtime, disk_name in new_disks.items():
        verdict = decide_new_disk(disks, user=user, user_label=user_label, disk_name=disk_name, limits=limits)
        if verdict.action == "refuse":
            answers[runtime] = form_refusal(verdict)
    return answers
