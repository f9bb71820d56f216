"""Who may restore a disk: admins, and the owner (own servers scope, or own OAuth login here); nobody else."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.services.disks.access import may_restore

SERVICE = "gpuworkspace-disks"


def model(name: str, *scopes: str, kind: str = "user") -> dict[str, Any]:
    return {"name": name, "kind": kind, "scopes": list(scopes)}


@pytest.mark.parametrize(
    ("caller", "owner", "allowed"),
    [
        pytest.param(model("root", "admin:servers"), "alice", True, id="admin"),
        pytest.param(model("alice", "servers!user=alice"), "alice", True, id="owner-api-token"),
        pytest.param(
            model("alice", f"access:services!service={SERVICE}"), "alice", True, id="owner-page-login"
        ),
        pytest.param(model("bob", "servers!user=bob"), "alice", False, id="another-user"),
        pytest.param(
            model("bob", f"access:services!service={SERVICE}"), "alice", False, id="another-users-login"
        ),
        pytest.param(model("alice", "read:servers!user=alice"), "alice", False, id="owner-read-only-token"),
        pytest.param(
            model("alice", "access:services!service=other"), "alice", False, id="login-to-another-service"
        ),
        pytest.param(
            model("alice", f"access:services!service={SERVICE}", kind="service"),
            "alice",
            False,
            id="a-service-named-alice",
        ),
        pytest.param(model("alice", "servers!user=alice"), "", False, id="disk-without-owner"),
        pytest.param(model("root", "admin:servers"), "", True, id="admin-ownerless-disk"),
    ],
)
def test_who_may_restore(caller: dict[str, Any], owner: str, allowed: bool) -> None:
    assert may_restore(caller, owner, service=SERVICE) is allowed
