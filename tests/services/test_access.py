"""Who may grow, snapshot and restore a disk: admins, and the owner (own servers scope, or own OAuth login
here); nobody else."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

from gpuworkspace_spawner.services.access import may_change
from gpuworkspace_spawner.services.disks.operations import DiskOperations, Settings
from gpuworkspace_spawner.services.serving import ServiceError

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
def test_who_may_change(caller: dict[str, Any], owner: str, allowed: bool) -> None:
    assert may_change(caller, owner, service=SERVICE) is allowed


def _ops_with_manual_snapshots(count: int, limit: int) -> DiskOperations:
    ops = DiskOperations(None, Settings(owner_snapshots_max=limit), None, None)

    async def snapshots(caller: dict[str, Any], name: str) -> list[dict[str, Any]]:
        manual = [{"name": f"{name}-snap-{i}", "kind": "manual"} for i in range(count)]
        return [*manual, {"name": f"{name}-scheduled-0", "kind": "scheduled"}]  # not counted

    ops.snapshots = snapshots  # type: ignore[method-assign]
    return ops


CLAIM = {"metadata": {"name": "home-alice"}}


def test_an_owner_keeps_at_most_the_limit_of_manual_snapshots_an_admin_has_none() -> None:
    owner = model("alice", "servers!user=alice")
    asyncio.run(_ops_with_manual_snapshots(2, 3)._refuse_owner_snapshot_beyond_limit(owner, CLAIM))
    with pytest.raises(ServiceError) as refused:
        asyncio.run(_ops_with_manual_snapshots(3, 3)._refuse_owner_snapshot_beyond_limit(owner, CLAIM))
    assert refused.value.status == 409
    assert "home-alice already has 3 manual snapshots, the most its owner may keep (3)" in str(refused.value)
    admin = model("root", "admin:servers")
    asyncio.run(_ops_with_manual_snapshots(9, 3)._refuse_owner_snapshot_beyond_limit(admin, CLAIM))


HELD = [
    {"admin:servers"},
    {"read:servers"},
    {"read:servers!user=alice"},
    {"read:servers!server=alice/x"},
    {"read:servers!group=ml"},
    {"servers!user=alice", "read:servers!user=alice"},
    {"access:services"},
    {"access:services!service=gpuworkspace-disks"},
    {"access:services!service=other", "read:metrics"},
    set(),
]
NEEDED = [
    "admin:servers",
    "read:servers",
    "read:servers!user=alice",
    "read:servers!user=bob",
    "servers!user=alice",
    "access:services!service=gpuworkspace-disks",
    "read:metrics",
]


@pytest.mark.parametrize("held", HELD, ids=lambda h: ",".join(sorted(h)) or "none")
def test_scope_checks_decide_as_jupyterhubs_own(held: set[str]) -> None:
    """The services decide without importing jupyterhub (the pure core's contract); JupyterHub's own
    check_scopes, here in the test only, is the oracle for every scope the services ask for."""
    from jupyterhub.services.auth import check_scopes as jupyterhubs

    from gpuworkspace_spawner.services.access import check_scopes as ours

    for needed in NEEDED:
        with warnings.catch_warnings():  # it warns that it does not resolve groups without its database
            warnings.simplefilter("ignore", UserWarning)
            expected = jupyterhubs({needed}, held)
        assert ours({needed}, held) == expected, (needed, held)
