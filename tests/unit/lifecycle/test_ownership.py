"""Identity that cannot collide (issue 14 item 6): exact ownership, owner-bound disks, admin transfer."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gpuworkspace_spawner.lifecycle.invariants import decide_extra_pods
from gpuworkspace_spawner.lifecycle.ownership import (
    build_set_aside_patch,
    build_transfer_patch,
    choose_home_claim,
    decide_owner,
    decide_transfer,
    owner_claim_name,
)
from gpuworkspace_spawner.lifecycle.retention import decide_home_disk
from gpuworkspace_spawner.manifests import names
from gpuworkspace_spawner.manifests.names import WorkspaceIdentity, label_value, owner_key
from gpuworkspace_spawner.manifests.pod import build_workspace_pod
from gpuworkspace_spawner.manifests.pvc import build_home_pvc, build_retain_patch
from tests.unit.manifests.scenarios import CPU, context, load_yaml

NS = "gpu-workspaces"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BOB_1 = WorkspaceIdentity("bob", "", NS, owner="2026-01-01T08:00:00.000001Z")
BOB_2 = replace(BOB_1, owner="2026-02-15T10:00:00.500000Z")  # bob deleted, then created again
EMAIL = WorkspaceIdentity("alice@example.com", "", NS, owner="2026-01-02T00:00:00.000000Z")
TWIN = WorkspaceIdentity(label_value("alice@example.com"), "", NS, owner="2026-01-03T00:00:00.000000Z")


def merge(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch (what the API server does with a merge-patch PATCH)."""
    out = dict(obj)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            out[key] = merge(out.get(key) or {}, value)
        else:
            out[key] = value
    return out


def disk(
    identity: WorkspaceIdentity, name: str = "home-bob", *, stamped: bool = True, **extra: Any
) -> dict[str, Any]:
    pvc = build_home_pvc(context(CPU, identity if stamped else replace(identity, owner=""), name))
    pvc["metadata"]["resourceVersion"] = "7"
    return merge(pvc, {"metadata": extra}) if extra else pvc


def retained(pvc: dict[str, Any], why: str = names.RETAINED_BY_SERVER_DELETED) -> dict[str, Any]:
    return merge(pvc, build_retain_patch(retain_until=NOW, now=NOW, why=why))


# ---------------------------------------------------------------- the label collision, and why it is harmless
def test_the_documented_label_collision_exists_and_ownership_tells_them_apart() -> None:
    assert TWIN.user.startswith("alice-example.com-") and TWIN.user != EMAIL.user
    assert TWIN.selector_labels == EMAIL.selector_labels  # labels are only an index: they collide
    alice_pod = build_workspace_pod(load_yaml("kubespawner-pod.yaml"), context(CPU, EMAIL, "home-x"))
    twin_pod = build_workspace_pod(load_yaml("kubespawner-pod.yaml"), context(CPU, TWIN, "home-y"))
    assert EMAIL.owns(alice_pod["metadata"]) and not TWIN.owns(alice_pod["metadata"])
    assert TWIN.owns(twin_pod["metadata"]) and not EMAIL.owns(twin_pod["metadata"])
    alice_pod["metadata"]["name"] = "jupyter-alice"
    # the twin's start removes "extra pods of its workspace": alice's pod is not one of them
    assert decide_extra_pods([alice_pod], TWIN, keep_name="jupyter-twin") == []


pairs = st.tuples(st.text(min_size=1, max_size=40) | st.emails(), st.text(max_size=20) | st.just("default"))


@given(pairs, pairs, st.booleans())
def test_ownership_is_injective_over_user_server_pairs(
    a: tuple[str, str], b: tuple[str, str], twin: bool
) -> None:
    """Whatever two (user, server) pairs, one never owns the other's objects; with ``twin`` the second
    user is named like the first one's hashed label value, so their labels collide."""
    if twin:
        b = (label_value(a[0]), a[1])
    assume(a != b)
    first, second = WorkspaceIdentity(a[0], a[1], NS), WorkspaceIdentity(b[0], b[1], NS)
    for ws in (context(CPU, first, "home-1"), context(CPU, second, "home-2")):
        meta = build_home_pvc(ws)["metadata"]
        mine, other = (first, second) if ws.identity is first else (second, first)
        assert mine.owns(meta)
        assert not other.owns(meta)
        assert names.workspace_names(meta) == (mine.user, mine.server)


# ---------------------------------------------------------------- the owner's stable identity
def test_owner_key_is_the_same_from_the_database_and_from_the_rest_api() -> None:
    created = datetime(2026, 2, 15, 10, 0, 0, 500000)  # naive UTC, as User.created
    assert owner_key(created) == owner_key("2026-02-15T10:00:00.500000Z") == BOB_2.owner
    assert owner_key(created.replace(tzinfo=UTC)) == BOB_2.owner
    assert owner_key("2026-02-15T10:00:00Z") == "2026-02-15T10:00:00.000000Z"
    assert owner_key(None) == owner_key("yesterday") == ""


@pytest.mark.parametrize(
    ("pvc", "identity", "action", "in_reason"),
    [
        pytest.param(disk(BOB_1), BOB_1, "mine", "this server's", id="matching-owner"),
        pytest.param(disk(BOB_1), BOB_2, "foreign", "former user named 'bob'", id="recreated-user"),
        pytest.param(disk(BOB_1, stamped=False), BOB_2, "legacy", "records no owner", id="missing-active"),
        pytest.param(
            retained(disk(BOB_1, stamped=False)),
            BOB_2,
            "legacy",
            "records no owner",
            id="missing-server-deleted",
        ),
        pytest.param(
            retained(disk(BOB_1, stamped=False), names.RETAINED_BY_USER_DELETED),
            BOB_2,
            "foreign",
            "retained when user 'bob' was deleted",
            id="missing-user-deleted",
        ),
        pytest.param(disk(BOB_1), replace(BOB_2, owner=""), "mine", "no owner identity", id="hub-gave-none"),
        pytest.param(disk(EMAIL, "home-x"), TWIN, "foreign", "belongs to user alice@example.com", id="twin"),
        pytest.param(
            disk(BOB_1), replace(BOB_1, server="gpu"), "foreign", "belongs to user bob", id="server"
        ),
    ],
)
def test_decide_owner(pvc: dict[str, Any], identity: WorkspaceIdentity, action: str, in_reason: str) -> None:
    verdict = decide_owner(pvc["metadata"], identity)
    assert (verdict.action, in_reason in verdict.reason) == (action, True), verdict


@pytest.mark.parametrize(
    ("pvc", "identity", "action"),
    [
        pytest.param(disk(BOB_1), BOB_1, "use", id="matching-use"),
        pytest.param(retained(disk(BOB_1)), BOB_1, "adopt", id="matching-retained-adopt"),
        pytest.param(disk(BOB_1), BOB_2, "refuse", id="mismatching-refuse"),
        pytest.param(retained(disk(BOB_1)), BOB_2, "refuse", id="mismatching-retained-refuse"),
        pytest.param(disk(BOB_1, stamped=False), BOB_1, "adopt", id="missing-adopt-and-stamp"),
        pytest.param(
            retained(disk(BOB_1, stamped=False), names.RETAINED_BY_USER_DELETED),
            BOB_2,
            "refuse",
            id="missing-after-user-deleted-refuse",
        ),
    ],
)
def test_adoption_decision(pvc: dict[str, Any], identity: WorkspaceIdentity, action: str) -> None:
    assert decide_home_disk(pvc, identity).action == action


def test_adopting_an_unstamped_disk_stamps_it() -> None:
    from gpuworkspace_spawner.manifests.pvc import build_adopt_patch

    adopted = merge(disk(BOB_1, stamped=False), build_adopt_patch(context(CPU, BOB_1, "home-bob")))
    assert adopted["metadata"]["annotations"][names.ANN_OWNER_CREATED] == BOB_1.owner
    assert decide_home_disk(adopted, BOB_1).action == "use"
    assert decide_home_disk(adopted, BOB_2).action == "refuse"


# ---------------------------------------------------------------- which claim a start uses
OWN_NAME = owner_claim_name("home-bob", BOB_2)


@pytest.mark.parametrize(
    ("claims", "chosen"),
    [
        pytest.param([], "home-bob", id="none-yet-base"),
        pytest.param([disk(BOB_2)], "home-bob", id="own-base"),
        pytest.param([retained(disk(BOB_1))], OWN_NAME, id="former-owner-retained-new-name"),
        pytest.param([retained(disk(BOB_1)), retained(disk(BOB_2, OWN_NAME))], OWN_NAME, id="own-retained"),
        pytest.param([disk(BOB_2, OWN_NAME)], OWN_NAME, id="own-after-former-reclaimed"),
        pytest.param([disk(BOB_1, stamped=False)], "home-bob", id="legacy-base-adopted"),
        pytest.param(
            [retained(disk(BOB_1, stamped=False), names.RETAINED_BY_USER_DELETED)],
            OWN_NAME,
            id="legacy-user-deleted-new-name",
        ),
        pytest.param(
            [retained(disk(BOB_2, "home-bob.old")), disk(BOB_2, "home-bob.new")],
            "home-bob.new",
            id="active-before-retained",
        ),
        pytest.param(
            [disk(BOB_2, deletionTimestamp="2026-03-01T00:00:00Z")], "home-bob", id="deleting-ignored"
        ),
        # another user's claim under this name (a custom template): kept, so the start refuses it
        pytest.param([disk(TWIN, "home-bob")], "home-bob", id="other-user-under-base-name-refused"),
    ],
)
def test_choose_home_claim(claims: list[dict[str, Any]], chosen: str) -> None:
    choice = choose_home_claim(claims, "home-bob", BOB_2)
    assert choice.name == chosen, choice.reason


def test_owner_claim_name_cannot_be_another_users_kubespawner_name() -> None:
    assert OWN_NAME.startswith("home-bob.owner-") and len(OWN_NAME) == len("home-bob.owner-") + 12
    assert owner_claim_name("home-bob", BOB_1) != OWN_NAME
    assert len(owner_claim_name("h" * 300, BOB_2)) == 253


# ---------------------------------------------------------------- an administrator's transfer
@pytest.mark.parametrize(
    ("claim", "target", "users", "displaced", "allowed", "in_reason"),
    [
        pytest.param(retained(disk(BOB_1)), BOB_2, [], [], True, "goes from bob", id="allowed"),
        pytest.param(retained(disk(BOB_1)), BOB_2, ["pod-x"], [], False, "stop it first", id="mounted"),
        pytest.param(
            retained(disk(BOB_1)), BOB_2, [], ["pod-y"], False, "stop that server", id="target-busy"
        ),
        pytest.param(disk(BOB_2), BOB_2, [], [], False, "already belongs", id="already-theirs"),
        pytest.param(
            retained(disk(BOB_1)), replace(BOB_2, owner=""), [], [], False, "no creation", id="no-owner"
        ),
        pytest.param(
            disk(BOB_1, deletionTimestamp="2026-03-01T00:00:00Z"),
            BOB_2,
            [],
            [],
            False,
            "deleted",
            id="deleting",
        ),
    ],
)
def test_decide_transfer(
    claim: dict[str, Any],
    target: WorkspaceIdentity,
    users: list[str],
    displaced: list[str],
    allowed: bool,
    in_reason: str,
) -> None:
    verdict = decide_transfer(claim, target, users=users, displaced_users=displaced)
    assert (verdict.allowed, in_reason in verdict.reason) == (allowed, True), verdict


def test_a_transferred_disk_is_the_new_owners_and_no_longer_the_former_ones() -> None:
    old = retained(disk(BOB_1), names.RETAINED_BY_USER_DELETED)
    target = WorkspaceIdentity("carol@example.com", "gpu box", NS, owner="2026-03-01T00:00:00.000000Z")
    moved = merge(old, build_transfer_patch(old, target, now=NOW))
    meta = moved["metadata"]
    assert meta["resourceVersion"] == "7"  # the precondition: a claim changed meanwhile is not patched
    assert decide_owner(meta, target).action == "mine" and decide_owner(meta, BOB_1).action == "foreign"
    assert meta["labels"][names.LABEL_DISK_STATE] == names.DISK_ACTIVE
    assert names.ANN_RETAIN_UNTIL not in meta["annotations"]
    assert meta["annotations"]["gpuworkspace.dev/transferred-from"] == f"bob (user created {BOB_1.owner})"
    assert choose_home_claim([moved], "home-carol-40example-2ecom--gpu-20box", target).name == "home-bob"


def test_the_target_servers_own_disk_is_set_aside_as_retained() -> None:
    aside = merge(disk(BOB_2, OWN_NAME), build_set_aside_patch(disk(BOB_2, OWN_NAME), now=NOW, until=NOW))
    labels, annotations = aside["metadata"]["labels"], aside["metadata"]["annotations"]
    assert labels[names.LABEL_DISK_STATE] == names.DISK_RETAINED
    assert annotations[names.ANN_RETAINED_BY] == names.RETAINED_BY_TRANSFER
    assert annotations[names.ANN_RETAIN_UNTIL] == "2026-03-01T12:00:00Z"
