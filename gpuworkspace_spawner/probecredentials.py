"""Per-server probe credentials: the only credential the idle culler ever sends to a single-user server.

The culler asks each server about itself (``/api/status``, ``/api/kernels``, ``/api/terminals``; with
save-first, checkpoints). Those requests end in the user's own process, which the user controls (a
``jupyter_server_config.py`` on the home disk, root in a VM), so whatever credential they carry must
open nothing but that one server. The culler's own token therefore never goes there (its role has no
``access:servers`` at all); instead the spawner issues, at each start, a JupyterHub API token **owned by
the server's user** whose only scope is ``access:servers!server=<user>/<server>``, and keeps it in the
server's state. The culler reads it from the hub's server model (``state``, which JupyterHub shows only
to holders of ``admin:server_state``) and sends it to that server alone. A user who captures it holds
access to their own server, which they had already.

The token is revoked when the server stops and replaced at every start (a start first revokes every
probe token of that server, so one left behind by a crashed hub never accumulates).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The key of the server's state (Spawner.get_state) that holds the probe token.
STATE_KEY = "culler_probe_token"
NOTE_PREFIX = "gpuworkspace-culler probe of "


def probe_scope(user: str, server: str) -> str:
    """The token's one scope: access to this one server (``user/`` is the default server)."""
    return f"access:servers!server={user}/{server}"


def probe_note(user: str, server: str) -> str:
    """The token's note, shown on the user's token page and used to find it again."""
    return f"{NOTE_PREFIX}{user}/{server}"


def probe_token_from_state(state: Any) -> str | None:
    """The probe token in a server's state as the hub API shows it; None when absent or malformed."""
    if not isinstance(state, Mapping):
        return None
    token = state.get(STATE_KEY)
    if isinstance(token, str) and 0 < len(token) <= 256 and token.isprintable() and " " not in token:  # noqa: PLR2004
        return token
    return None


def issue_probe_token(orm_user: Any, server: str) -> str:
    """A new probe token for ``orm_user``'s server ``server`` (older ones of that server revoked first)."""
    revoke_probe_tokens(orm_user, server)
    return str(
        orm_user.new_api_token(
            note=probe_note(orm_user.name, server), scopes=[probe_scope(orm_user.name, server)]
        )
    )


def revoke_probe_tokens(orm_user: Any, server: str) -> int:
    """Delete every probe token of that server (committed); how many there were."""
    note = probe_note(orm_user.name, server)
    tokens = [t for t in orm_user.api_tokens if t.note == note]
    if not tokens:
        return 0
    from sqlalchemy.orm import object_session  # noqa: PLC0415 - only in the hub, where sqlalchemy is

    session = object_session(orm_user)
    if session is None:  # a user object outside the hub's database: nothing stored to revoke
        return 0
    for token in tokens:
        session.delete(token)
    session.commit()
    return len(tokens)


def issue_server_probe_token(user: Any, server: str) -> str | None:
    """:func:`issue_probe_token` for a hub ``User``; None outside a hub (no database: nothing issued)."""
    orm_user = getattr(user, "orm_user", None)
    return None if orm_user is None else issue_probe_token(orm_user, server)


def revoke_server_probe_tokens(user: Any, server: str) -> None:
    """:func:`revoke_probe_tokens` for a hub ``User`` (nothing to do outside a hub)."""
    orm_user = getattr(user, "orm_user", None)
    if orm_user is not None:
        revoke_probe_tokens(orm_user, server)
