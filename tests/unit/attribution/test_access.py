"""Who sees what: admin scope, own workspaces, groups and trend series."""

from __future__ import annotations

import pytest

from gpuworkspace_spawner.services.attribution.access import (
    filter_series,
    is_admin,
    may_read_series,
    may_read_user,
    series_user,
    visible_groups,
    visible_users,
)

SERVICE = "gpuworkspace-attribution"
ADMIN = {"kind": "user", "name": "root", "scopes": ["admin:servers", "read:servers"]}
ALICE = {"kind": "user", "name": "alice", "scopes": [f"access:services!service={SERVICE}"]}
ALICE_API = {"kind": "user", "name": "alice", "scopes": ["read:servers!user=alice"]}
FILTERED = {"kind": "user", "name": "gm", "scopes": ["admin:servers!group=ml"]}
SVC = {"kind": "service", "name": "bot", "scopes": ["read:servers!user=alice"]}
GROUPS = {"alice": ["ml"], "bob": ["ml", "cv"], "carol": ["cv"], "root": []}


@pytest.mark.parametrize(
    ("model", "user", "expected"),
    [
        pytest.param(ADMIN, "bob", True, id="admin"),
        pytest.param(ALICE, "alice", True, id="own-oauth"),
        pytest.param(ALICE, "bob", False, id="other-user-403"),
        pytest.param(ALICE_API, "alice", True, id="own-api-token"),
        pytest.param(FILTERED, "bob", False, id="filtered-admin-is-no-admin"),
        pytest.param(SVC, "alice", True, id="service-with-read-servers"),
        pytest.param({"kind": "user", "name": "alice", "scopes": []}, "alice", False, id="no-scopes"),
    ],
)
def test_may_read_user(model: dict, user: str, expected: bool) -> None:
    assert may_read_user(model, user, service=SERVICE) is expected


def test_admin_and_groups() -> None:
    assert is_admin(ADMIN) and not is_admin(FILTERED) and not is_admin(ALICE)
    assert visible_groups(ADMIN, GROUPS) == {"ml", "cv"}
    assert visible_groups(ALICE, GROUPS) == {"ml"}
    assert visible_groups(SVC, GROUPS) == frozenset()
    assert visible_users(ADMIN, GROUPS) is None
    assert visible_users(ALICE, GROUPS) == {"alice", "bob"}
    assert visible_users({"kind": "user", "name": "dave", "scopes": []}, GROUPS) == {"dave"}
    assert visible_users(SVC, GROUPS) == frozenset()


@pytest.mark.parametrize(
    ("model", "series", "expected"),
    [
        pytest.param(ALICE, "cluster:gpu_util", True, id="cluster-public"),
        pytest.param(ALICE, "node:gpu-node-a:gpu_util", True, id="node-public"),
        pytest.param(ALICE, "user:alice:gpus", True, id="own"),
        pytest.param(ALICE, "user:bob:gpus", False, id="other"),
        pytest.param(ADMIN, "user:bob:gpus", True, id="admin"),
        pytest.param(ALICE, "user:alice:x:gpus", False, id="user-name-with-colon"),
        pytest.param(ALICE, "secret:thing", False, id="unknown-kind"),
    ],
)
def test_may_read_series(model: dict, series: str, expected: bool) -> None:
    assert may_read_series(model, series, service=SERVICE) is expected


def test_series_user_and_filter() -> None:
    assert series_user("user:a:b:gpus") == "a:b"
    assert series_user("user:gpus") is None and series_user("cluster:x") is None
    names = ["cluster:gpu_util", "user:alice:gpus", "user:bob:gpus"]
    assert filter_series(ALICE, names, service=SERVICE) == ["cluster:gpu_util", "user:alice:gpus"]
    assert filter_series(ALICE, names) == ["cluster:gpu_util", "user:alice:gpus"]
