"""The culler's per-server probe tokens, issued and revoked in a real JupyterHub database.

The hub resolves the token to exactly one scope, access to that one server: a user who captures it
(their server receives it with every probe) holds nothing they did not have.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from jupyterhub import orm, roles
from jupyterhub.scopes import get_scopes_for

from gpuworkspace_spawner.probecredentials import (
    issue_probe_token,
    probe_note,
    revoke_probe_tokens,
)


@pytest.fixture
def db() -> Iterator[Any]:
    session = orm.new_session_factory("sqlite://")()
    for role in roles.get_default_roles():
        roles.create_role(session, role)
    session.add(orm.OAuthClient(identifier="jupyterhub"))
    session.commit()
    yield session
    session.close()


def user(db: Any, name: str, *, admin: bool = False) -> Any:
    orm_user = orm.User(name=name, admin=admin)
    db.add(orm_user)
    db.commit()
    roles.assign_default_roles(db, orm_user)
    return orm_user


@pytest.mark.parametrize(
    ("server", "scope"), [("gpu", "alice/gpu"), ("", "alice/")], ids=["named", "default"]
)
@pytest.mark.parametrize("admin", [False, True], ids=["user", "admin"])
def test_the_token_opens_that_one_server_and_nothing_else(
    db: Any, server: str, scope: str, admin: bool
) -> None:
    alice = user(db, "alice", admin=admin)
    token = issue_probe_token(alice, server)
    found = orm.APIToken.find(db, token)
    assert found is not None and found.user is alice and found.note == probe_note("alice", server)
    # even an admin's probe token carries no admin right: the one scope asked for, plus what JupyterHub
    # adds to every token (reading its owner's own name and groups: identify_scopes)
    granted = set(get_scopes_for(found))
    assert granted - {f"access:servers!server={scope}"} <= {
        "read:users:name!user=alice",
        "read:users:groups!user=alice",
        "read:users:activity!user=alice",
    }
    assert f"access:servers!server={scope}" in granted


def test_a_new_start_replaces_the_servers_token_and_leaves_the_others(db: Any) -> None:
    alice = user(db, "alice")
    first = issue_probe_token(alice, "gpu")
    other = issue_probe_token(alice, "cpu")
    second = issue_probe_token(alice, "gpu")
    assert orm.APIToken.find(db, first) is None  # revoked by the new start
    assert orm.APIToken.find(db, second) is not None and orm.APIToken.find(db, other) is not None


def test_a_stop_revokes_the_servers_tokens_only(db: Any) -> None:
    alice, bob = user(db, "alice"), user(db, "bob")
    mine, kept, bobs = (
        issue_probe_token(alice, "gpu"),
        issue_probe_token(alice, ""),
        issue_probe_token(bob, "gpu"),
    )
    user_token = alice.new_api_token(note="alice's own")
    assert revoke_probe_tokens(alice, "gpu") == 1
    assert orm.APIToken.find(db, mine) is None
    assert all(orm.APIToken.find(db, t) is not None for t in (kept, bobs, user_token))
    assert revoke_probe_tokens(alice, "gpu") == 0  # nothing left: a second stop is harmless
