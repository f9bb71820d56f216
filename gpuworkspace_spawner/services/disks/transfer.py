"""An administrator's transfer of a workspace disk to another owner: ``POST …/disks/{claim}/transfer``.

The shell around :mod:`~gpuworkspace_spawner.lifecycle.ownership`: read the target user's stable identity
from the hub (with the caller's own token: the service itself needs no ``read:users``), read the claims,
ask :func:`~gpuworkspace_spawner.lifecycle.ownership.decide_transfer`, restamp the claim (with its
``resourceVersion`` as precondition), set the target server's previous disk aside as retained, audit.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from ...k8s import Conflict, NotFound, gateway
from ...lifecycle.diskops import disk_kind
from ...lifecycle.ownership import (
    build_set_aside_patch,
    build_transfer_patch,
    decide_owner,
    decide_transfer,
    describe_owner,
)
from ...manifests.names import DISK_HOME, DISK_RETAINED, LABEL_DISK_STATE, WorkspaceIdentity, owner_key
from .. import access
from ..serving import ServiceError

if TYPE_CHECKING:
    from .operations import DiskOperations

log = logging.getLogger("gpuworkspace.disks")
Obj = dict[str, Any]
# how long the target server's previous disk is kept once a transfer replaced it (the reclaimer then
# deletes it; an admin can transfer it back meanwhile)
SET_ASIDE_RETENTION = timedelta(days=30)


async def hub_user_owner(api_url: str, token: str, user: str, *, timeout_s: float) -> str:
    """The owner key (:func:`~gpuworkspace_spawner.manifests.names.owner_key`) of hub user ``user``,
    read with the caller's token: ``created`` of ``GET /hub/api/users/{user}``."""
    url = f"{api_url.rstrip('/')}/users/{quote(user, safe='')}"
    request = HTTPRequest(url, headers={"Authorization": f"token {token}"}, request_timeout=timeout_s)
    try:
        answer = await AsyncHTTPClient().fetch(request, raise_error=False)
    except OSError as exc:
        raise ServiceError(
            502, f"cannot reach the hub API at {api_url} to read user {user!r}: {exc}"
        ) from None
    if answer.code == HTTPStatus.NOT_FOUND:
        raise ServiceError(404, f"no hub user {user!r} (or the caller's token may not read it)")
    if answer.code == HTTPStatus.FORBIDDEN:
        raise ServiceError(403, f"the caller's token may not read hub user {user!r} (needs read:users)")
    if answer.code != HTTPStatus.OK:
        raise ServiceError(502, f"the hub answered {answer.code} reading user {user!r}")
    try:
        created = json.loads(answer.body).get("created")
    except (ValueError, AttributeError):
        raise ServiceError(502, f"the hub's answer for user {user!r} is not a JSON user model") from None
    key = owner_key(created)
    if not key:
        raise ServiceError(409, f"hub user {user!r} has no creation time: a disk cannot be bound to it")
    return key


async def transfer(ops: DiskOperations, caller: Obj, name: str, target: WorkspaceIdentity) -> Obj:
    """Give home disk ``name`` to ``target`` (whose ``owner`` the caller read from the hub)."""
    ops.require_admin(caller, "transferring a disk")
    claim = await ops.claim(name)
    if disk_kind(claim) != DISK_HOME:
        raise ServiceError(
            409 if disk_kind(claim) else 404,
            f"claim {name} is not a container home disk; only those can be transferred (VM root disks: "
            "not yet, see docs/how-to/disk-retention.md)",
        )
    displaced = [
        c
        for c in await ops.claims()
        if c["metadata"]["name"] != name
        and disk_kind(c) == DISK_HOME
        and (c["metadata"].get("labels") or {}).get(LABEL_DISK_STATE) != DISK_RETAINED
        and decide_owner(c["metadata"], target).action == "mine"
    ]
    displaced_users = [u for c in displaced for u in await ops._users(c["metadata"]["name"])]
    verdict = decide_transfer(claim, target, users=await ops._users(name), displaced_users=displaced_users)
    if not verdict.allowed:
        raise await ops._refuse(verdict, claim, caller, "transfer")
    now, previous = datetime.now(UTC), describe_owner(claim["metadata"])
    # first: a set-aside disk whose transfer then fails is simply adopted again by the server's next start
    set_aside = [await _set_aside(ops, caller, c, now) for c in displaced]
    patch = build_transfer_patch(claim, target, now=now)
    try:
        moved = await gateway.patch_pvc(ops.api, ops.settings.namespace, name, patch, request_timeout=ops._rt)
    except (Conflict, NotFound) as exc:
        raise ServiceError(
            409, f"claim {name} changed since it was read ({exc.message}); not transferred"
        ) from None
    to = describe_owner(moved["metadata"])
    message = f"Disk transferred from {previous} to {to} by an administrator"
    await ops.audit("disk-transferred", moved, message, caller, previousOwner=previous, newOwner=to)
    return {
        "claim": name,
        "user": target.user,
        "server": target.server,
        "previousOwner": previous,
        "setAside": set_aside,
        "message": message,
    }


async def _set_aside(ops: DiskOperations, caller: Obj, claim: Obj, now: datetime) -> str:
    """The target server's previous disk becomes retained (it is not deleted: the reclaimer does that)."""
    name = str(claim["metadata"]["name"])
    patch = build_set_aside_patch(claim, now=now, until=now + SET_ASIDE_RETENTION)
    try:
        aside = await gateway.patch_pvc(ops.api, ops.settings.namespace, name, patch, request_timeout=ops._rt)
    except (Conflict, NotFound) as exc:
        raise ServiceError(
            409, f"the server's current disk {name} changed meanwhile ({exc.message}); nothing transferred"
        ) from None
    message = f"Disk set aside (retained) by {access.who(caller)}: another disk was transferred to its server"
    await ops.audit("disk-retained", aside, message, caller)
    return name
