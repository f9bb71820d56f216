"""VM root disks: the DataVolume carries the lifecycle, the claim is the volume; restore in place refused."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.lifecycle.rootdisks import data_volume_of, restore_refusal, with_lifecycle_of
from gpuworkspace_spawner.manifests import names

RETAINED = {
    names.ANN_RETAIN_UNTIL: "2027-01-01T00:00:00Z",
    names.ANN_RETAINED_AT: "2026-12-02T00:00:00Z",
    names.ANN_RETAINED_BY: "server-deleted",
}


def obj(
    name: str, kind: str, state: str, annotations: dict[str, str] | None = None, **meta: Any
) -> dict[str, Any]:
    labels = {names.LABEL_DISK: kind, names.LABEL_DISK_STATE: state}
    return {"metadata": {"name": name, "labels": labels, "annotations": dict(annotations or {}), **meta}}


DV = obj("ws-bob--vm-root", names.DISK_ROOT, names.DISK_RETAINED, RETAINED, uid="dv-uid")
# the claim as CDI created it: the DataVolume's labels when it was still active
CLAIM = obj(
    "ws-bob--vm-root",
    names.DISK_ROOT,
    names.DISK_ACTIVE,
    ownerReferences=[{"kind": "DataVolume", "name": "ws-bob--vm-root", "uid": "dv-uid", "controller": True}],
)


def test_a_root_claim_shows_its_datavolumes_lifecycle_and_the_input_is_not_changed() -> None:
    out = with_lifecycle_of(CLAIM, DV)
    assert out["metadata"]["labels"][names.LABEL_DISK_STATE] == names.DISK_RETAINED
    assert {k: out["metadata"]["annotations"][k] for k in RETAINED} == RETAINED
    assert CLAIM["metadata"]["labels"][names.LABEL_DISK_STATE] == names.DISK_ACTIVE
    assert CLAIM["metadata"]["annotations"] == {}


def test_adopted_again_the_retention_annotations_go() -> None:
    claim = obj("ws-bob--vm-root", names.DISK_ROOT, names.DISK_RETAINED, RETAINED)
    out = with_lifecycle_of(claim, obj("ws-bob--vm-root", names.DISK_ROOT, names.DISK_ACTIVE))
    assert out["metadata"]["labels"][names.LABEL_DISK_STATE] == names.DISK_ACTIVE
    assert not set(RETAINED) & set(out["metadata"]["annotations"])


@pytest.mark.parametrize(
    ("claim", "dv"),
    [
        pytest.param(obj("home-bob", names.DISK_HOME, names.DISK_ACTIVE), DV, id="home-claim-is-its-own"),
        pytest.param(CLAIM, None, id="no-datavolume-found"),
    ],
)
def test_unchanged_without_a_datavolume_to_follow(claim: dict[str, Any], dv: dict[str, Any] | None) -> None:
    assert with_lifecycle_of(claim, dv) == claim


def test_the_owning_datavolume_is_found_by_name_and_owner_uid() -> None:
    stranger = obj("ws-bob--vm-root", names.DISK_ROOT, names.DISK_ACTIVE, uid="other-uid")
    assert data_volume_of(CLAIM, [stranger, DV]) is DV
    assert data_volume_of(CLAIM, [stranger]) is None
    assert data_volume_of(obj("x", names.DISK_ROOT, names.DISK_ACTIVE), [DV]) is None


def test_restoring_a_root_disk_in_place_is_refused_with_what_to_do() -> None:
    reason = restore_refusal(CLAIM)
    assert reason is not None and "VM root disk" in reason and "DataVolume ws-bob--vm-root" in reason
    assert "dataSource: VolumeSnapshot" in reason
    assert restore_refusal(obj("home-bob", names.DISK_HOME, names.DISK_ACTIVE)) is None
