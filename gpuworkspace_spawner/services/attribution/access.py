"""Who sees what in the attribution API, from the hub's model of the caller's token (pure).

The scope rules are the disk service's (:mod:`..access`): admin is the unfiltered
``admin:servers`` scope; a user's workspaces are readable with ``read:servers`` for that user, or by the
user themselves through this service's OAuth token. On top of those:

- everyone logged in sees the node grid with its owners (who is on the GPUs is public by design);
- a user sees the totals of their own groups and the top consumers among their groups' members; admins
  see every group and everyone;
- trends: ``cluster:*`` and ``node:*`` for everyone, ``user:<name>:*`` for that user and admins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..access import is_admin, may_read

USER_SERIES = "user:"
PUBLIC_SERIES = ("cluster:", "node:")

__all__ = [
    "filter_series",
    "is_admin",
    "may_read_series",
    "may_read_user",
    "series_user",
    "visible_groups",
    "visible_users",
]


def may_read_user(model: Mapping[str, Any], user: str, *, service: str) -> bool:
    """Whether the caller may see ``user``'s workspaces (their detail, accounting and trends)."""
    return is_admin(model) or may_read(model, user, service=service)


def _caller(model: Mapping[str, Any]) -> str | None:
    return str(model["name"]) if model.get("kind", "user") == "user" and model.get("name") else None


def visible_groups(model: Mapping[str, Any], groups_of_user: Mapping[str, Sequence[str]]) -> frozenset[str]:
    """The groups whose totals the caller sees: all of them for admins, else the caller's own."""
    if is_admin(model):
        return frozenset(g for groups in groups_of_user.values() for g in groups)
    caller = _caller(model)
    return frozenset(groups_of_user.get(caller, ())) if caller else frozenset()


def visible_users(
    model: Mapping[str, Any], groups_of_user: Mapping[str, Sequence[str]]
) -> frozenset[str] | None:
    """Users whose workspaces the caller may rank among (top consumers): None = everyone (admins);
    else the members of the caller's groups, and the caller."""
    if is_admin(model):
        return None
    caller = _caller(model)
    if caller is None:
        return frozenset()
    mine = set(groups_of_user.get(caller, ()))
    return frozenset({caller} | {u for u, groups in groups_of_user.items() if mine.intersection(groups)})


def series_user(series_name: str) -> str | None:
    """The user a ``user:<name>:<metric>`` series belongs to (names may contain ``:``), else None."""
    if not series_name.startswith(USER_SERIES):
        return None
    rest = series_name[len(USER_SERIES) :]
    user, sep, metric = rest.rpartition(":")
    return user if sep and user and metric else None


def may_read_series(model: Mapping[str, Any], series_name: str, *, service: str = "") -> bool:
    """``cluster:*`` and ``node:*`` for everyone; a user's series for that user (see
    :func:`may_read_user`) and admins; anything else only for admins."""
    if series_name.startswith(PUBLIC_SERIES):
        return True
    user = series_user(series_name)
    if user is not None:
        return (
            may_read_user(model, user, service=service)
            if service
            else is_admin(model) or user == _caller(model)
        )
    return is_admin(model)


def filter_series(model: Mapping[str, Any], names: Iterable[str], *, service: str = "") -> list[str]:
    """The subset of ``names`` the caller may read, in order."""
    return [n for n in names if may_read_series(model, n, service=service)]
