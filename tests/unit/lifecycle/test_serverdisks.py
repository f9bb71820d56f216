"""Decision table: which disks a deleted server owns (from the objects' labels and annotations, not from
the runtime it last ran), and what its deletion does with each."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.lifecycle.serverdisks import decide_server_disks, disks_to_retain, owns_a_vm_disk
from gpuworkspace_spawner.manifests import names
from gpuworkspace_spawner.manifests.names import WorkspaceIdentity

ALICE = WorkspaceIdentity(user="alice", server="ws", namespace="gpu-workspaces", owner="2026-02-01T09:30:00Z")
ALICE_AGAIN = WorkspaceIdentity(  # a user created again under the same name: another hub user record
    user="alice", server="ws", namespace="gpu-workspaces", owner="2026-11-01T09:30:00Z"
)
OTHER_SERVER = WorkspaceIdentity(user="alice", server="gpu", namespace="gpu-workspaces", owner=ALICE.owner)


def disk(
    name: str,
    kind: str,
    owner: WorkspaceIdentity = ALICE,
    *,
    state: str = names.DISK_ACTIVE,
    retain_until: str | None = None,
    deleting: bool = False,
    stamped: bool = True,
) -> dict[str, Any]:
    labels = {**owner.selector_labels, names.LABEL_DISK: kind, names.LABEL_DISK_STATE: state}
    annotations = dict(owner.name_annotations)
    if stamped and owner.owner:
        annotations[names.ANN_OWNER_CREATED] = owner.owner
    if retain_until:
        annotations[names.ANN_RETAIN_UNTIL] = retain_until
    meta: dict[str, Any] = {"name": name, "labels": labels, "annotations": annotations}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta}


HOME = disk("home-alice--ws", names.DISK_HOME)
ROOT = disk("ws-alice--ws-root", names.DISK_ROOT)
# the claim CDI made for the root DataVolume: the same labels (copied at creation), listed among claims
ROOT_CLAIM = disk("ws-alice--ws-root", names.DISK_ROOT)


def table(claims: list[Any], dvs: list[Any], **kw: Any) -> list[tuple[str, str, str]]:
    return [
        (d.kind, d.name, d.action) for d in decide_server_disks(ALICE, claims=claims, data_volumes=dvs, **kw)
    ]


@pytest.mark.parametrize(
    ("claims", "dvs", "kw", "expected"),
    [
        pytest.param(
            [HOME],
            [],
            {},
            [("PersistentVolumeClaim", "home-alice--ws", "retain")],
            id="container-only",
        ),
        pytest.param(
            [],
            [ROOT],
            {},
            [("DataVolume", "ws-alice--ws-root", "retain")],
            id="vm-only",
        ),
        pytest.param(
            [HOME, ROOT_CLAIM],
            [ROOT],
            {},
            [
                ("PersistentVolumeClaim", "home-alice--ws", "retain"),
                ("DataVolume", "ws-alice--ws-root", "retain"),
            ],
            id="ran-as-container-then-vm-both-retained-root-claim-follows-its-datavolume",
        ),
        pytest.param(
            [
                disk(
                    "home-alice--ws",
                    names.DISK_HOME,
                    state=names.DISK_RETAINED,
                    retain_until="2026-12-31T00:00:00Z",
                )
            ],
            [ROOT],
            {},
            [
                ("PersistentVolumeClaim", "home-alice--ws", "skip"),
                ("DataVolume", "ws-alice--ws-root", "retain"),
            ],
            id="already-retained-is-not-extended",
        ),
        pytest.param(
            [disk("home-alice--ws", names.DISK_HOME, ALICE_AGAIN)],
            [],
            {},
            [("PersistentVolumeClaim", "home-alice--ws", "skip")],
            id="former-owner-of-same-name-skipped",
        ),
        pytest.param(
            [disk("home-alice--gpu", names.DISK_HOME, OTHER_SERVER)],
            [disk("ws-alice--gpu-root", names.DISK_ROOT, OTHER_SERVER)],
            {},
            [
                ("PersistentVolumeClaim", "home-alice--gpu", "skip"),
                ("DataVolume", "ws-alice--gpu-root", "skip"),
            ],
            id="another-server-of-the-user-skipped",
        ),
        pytest.param(
            [disk("home-alice--ws", names.DISK_HOME, stamped=False)],
            [],
            {},
            [("PersistentVolumeClaim", "home-alice--ws", "retain")],
            id="legacy-unstamped-disk-of-this-server-retained",
        ),
        pytest.param(
            [HOME],
            [ROOT],
            {"home_shared": True},
            [
                ("PersistentVolumeClaim", "home-alice--ws", "skip"),
                ("DataVolume", "ws-alice--ws-root", "retain"),
            ],
            id="shared-home-claim-skipped-root-still-retained",
        ),
        pytest.param(
            [disk("home-alice--ws", names.DISK_HOME, deleting=True)],
            [],
            {},
            [("PersistentVolumeClaim", "home-alice--ws", "skip")],
            id="being-deleted-skipped",
        ),
        pytest.param([], [], {}, [], id="no-disks"),
    ],
)
def test_which_disks_a_deleted_server_retains(
    claims: list[Any], dvs: list[Any], kw: dict[str, Any], expected: list[tuple[str, str, str]]
) -> None:
    assert table(claims, dvs, **kw) == expected


def test_reasons_say_why() -> None:
    retained = disk(
        "home-alice--ws", names.DISK_HOME, state=names.DISK_RETAINED, retain_until="2026-12-31T00:00:00Z"
    )
    (home,) = decide_server_disks(ALICE, claims=[retained], data_volumes=[])
    assert home.reason == (
        "PersistentVolumeClaim home-alice--ws is already retained until 2026-12-31T00:00:00Z; "
        "its retention is not extended"
    )
    (foreign,) = decide_server_disks(
        ALICE, claims=[disk("home-alice--ws", names.DISK_HOME, ALICE_AGAIN)], data_volumes=[]
    )
    assert "former user named 'alice'" in foreign.reason and not foreign.mine
    (root,) = decide_server_disks(ALICE, claims=[], data_volumes=[ROOT])
    assert root.reason == "DataVolume ws-alice--ws-root is this server's VM root disk"


def test_the_vm_goes_with_a_root_disk_of_its_own_retained_now_or_before() -> None:
    before = disk(
        "ws-alice--ws-root", names.DISK_ROOT, state=names.DISK_RETAINED, retain_until="2027-01-01T00:00:00Z"
    )
    assert owns_a_vm_disk(decide_server_disks(ALICE, claims=[], data_volumes=[before]))
    assert not disks_to_retain(decide_server_disks(ALICE, claims=[], data_volumes=[before]))
    foreign = disk("ws-alice--ws-root", names.DISK_ROOT, ALICE_AGAIN)
    assert not owns_a_vm_disk(decide_server_disks(ALICE, claims=[], data_volumes=[foreign]))
    assert not owns_a_vm_disk(decide_server_disks(ALICE, claims=[HOME], data_volumes=[]))


def test_objects_of_another_kind_are_left_out() -> None:
    """A root claim among the claims (it follows its DataVolume) or a home label on a DataVolume."""
    assert table([ROOT_CLAIM], [disk("odd", names.DISK_HOME)]) == []
