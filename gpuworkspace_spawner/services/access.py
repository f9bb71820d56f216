"""Who may do what, for every service: decided from the hub's model of the caller's token (pure: no
jupyterhub import, so no tornado underneath either).

The model is what ``GET /hub/api/user`` answers for the token (HubAuth): ``name``, ``kind`` and the
token's expanded ``scopes``. Permissions are the token's scopes, never the account's, so a token created
with fewer scopes gets fewer rights:

- admin operations (reclaim, transfer, every workspace): ``admin:servers``;
- growing a disk (up to its profile's limit), taking a manual snapshot of it (up to
  ``Settings.owner_snapshots_max`` per disk) and restoring it from one of its snapshots:
  ``admin:servers``, or the owner's ``servers`` scope for themselves (every user's own API tokens have
  it), or the owner's OAuth login to this service (the page; its form carries an XSRF token);
- reading a user's workspaces and snapshots: ``read:servers`` for that user (every user's own API
  tokens have it for themselves), or, for the user themselves, the OAuth token this service obtained
  in a browser (``access:services!service=<this service>``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ADMIN_SCOPE = "admin:servers"


def check_scopes(required: set[str], scopes: set[str]) -> set[str]:
    """The required scopes the token's (expanded) scopes grant, as JupyterHub's
    ``jupyterhub.services.auth.check_scopes`` decides it for the scopes used here: ``base!filter`` is
    granted by ``base`` (unfiltered) or by exactly ``base!filter``; an unfiltered ``base`` only by
    ``base``. Like JupyterHub's, a ``!group=`` filter never grants a ``!user=`` one (groups are not
    resolved), and a narrower filter (``!server=u/x``) does not grant a broader one (``!user=u``)."""
    return {need for need in required if need in scopes or need.split("!", 1)[0] in scopes}


def _scopes(model: Mapping[str, Any]) -> set[str]:
    return set(model.get("scopes") or [])


def is_admin(model: Mapping[str, Any]) -> bool:
    return bool(check_scopes({ADMIN_SCOPE}, _scopes(model)))


def may_read(model: Mapping[str, Any], user: str, *, service: str) -> bool:
    """Whether the caller may see ``user``'s workspaces and snapshots (nobody's, for no name: an empty
    filter is not a scope)."""
    if not user:
        return False
    scopes = _scopes(model)
    if check_scopes({f"read:servers!user={user}"}, scopes):
        return True
    own = model.get("kind", "user") == "user" and model.get("name") == user
    return own and bool(check_scopes({f"access:services!service={service}"}, scopes))


def may_change(model: Mapping[str, Any], user: str, *, service: str) -> bool:
    """Whether the caller may grow, snapshot and restore ``user``'s disks: an admin, or ``user``
    themselves (see above)."""
    if is_admin(model):
        return True
    if not user:
        return False
    scopes = _scopes(model)
    if check_scopes({f"servers!user={user}"}, scopes):
        return True
    own = model.get("kind", "user") == "user" and model.get("name") == user
    return own and bool(check_scopes({f"access:services!service={service}"}, scopes))


def reads_every_server(model: Mapping[str, Any]) -> bool:
    """Admins, and tokens that may read every user's servers (unfiltered ``read:servers``, e.g. the idle
    culler's): they see every workspace."""
    return is_admin(model) or bool(check_scopes({"read:servers"}, _scopes(model)))


def may_use_service(model: Mapping[str, Any], service: str) -> bool:
    """A browser page of ``service``: the caller's token grants access to it (its OAuth tokens do)."""
    return bool(check_scopes({f"access:services!service={service}"}, _scopes(model)))


def grants_anything_here(model: Mapping[str, Any], service: str) -> bool:
    """Does the token grant anything on ``service``: its access scope, or reading servers (any filter)?

    Every service refuses (403) a token that grants neither, instead of answering it with an empty
    list: a hub token that identifies a user but was made for something else (a culler probe token, which
    opens one single-user server and nothing more) opens nothing here.
    """
    scopes = _scopes(model)
    reads = any(s == "read:servers" or s.startswith("read:servers!") for s in scopes)
    return reads or may_use_service(model, service)


def access_refused(model: Mapping[str, Any], service: str) -> str:
    """The 403 message for a token that grants nothing on ``service``."""
    return (
        f"{who(model)}'s token grants no access to this service: it needs "
        f"access:services!service={service} or read:servers"
    )


def may_read_metrics(model: Mapping[str, Any]) -> bool:
    return bool(check_scopes({"read:metrics"}, _scopes(model)))


def who(model: Mapping[str, Any]) -> str:
    """The caller as audit records name it: ``alice`` or ``service:e2e-admin``."""
    kind, name = model.get("kind", "user"), str(model.get("name", "?"))
    return name if kind == "user" else f"{kind}:{name}"
