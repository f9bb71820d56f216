"""Decision tables for the home disk: which claim a start may use, and when a retained one may go."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuworkspace_spawner.lifecycle.retention import (
    decide_home_disk,
    decide_reclaim,
    pods_using_claim,
    retain_until,
)
from gpuworkspace_spawner.manifests import names
from gpuworkspace_spawner.manifests.names import WorkspaceIdentity
from gpuworkspace_spawner.manifests.pvc import build_home_pvc, build_retain_patch
from tests.unit.manifests.scenarios import ALICE, CPU, context

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BOB = WorkspaceIdentity(user="bob", server="", namespace="gpu-workspaces")


def claim(
    *,
    state: str | None = names.DISK_ACTIVE,
    owner: WorkspaceIdentity | None = ALICE,
    retain: str | None = None,
    phase: str = "Bound",
    deleting: bool = False,
    disk: str | None = names.DISK_HOME,
) -> dict[str, Any]:
    labels: dict[str, str] = dict(owner.selector_labels) if owner else {}
    if state:
        labels[names.LABEL_DISK_STATE] = state
    if disk:
        labels[names.LABEL_DISK] = disk
    annotations = dict(owner.name_annotations) if owner else {}
    if owner and owner.owner:
        annotations[names.ANN_OWNER_CREATED] = owner.owner
    if retain is not None:
        annotations[names.ANN_RETAIN_UNTIL] = retain
    metadata: dict[str, Any] = {"name": "home-alice", "labels": labels, "annotations": annotations}
    if deleting:
        metadata["deletionTimestamp"] = "2026-03-01T11:00:00Z"
    return {"metadata": metadata, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("pvc", "action", "in_reason"),
    [
        pytest.param(None, "create", "no home claim", id="missing-create"),
        pytest.param(claim(), "use", "this server", id="own-active-use"),
        pytest.param(claim(state=None), "use", "this server", id="own-unlabelled-state-use"),
        pytest.param(claim(phase="Pending"), "use", "this server", id="own-pending-use"),
        pytest.param(claim(owner=BOB), "refuse", "belongs to user bob", id="other-user-refuse"),
        pytest.param(
            claim(owner=WorkspaceIdentity("alice", "gpu", "gpu-workspaces")),
            "refuse",
            "belongs",
            id="other-server",
        ),
        pytest.param(claim(owner=None), "refuse", "no gpuworkspace.dev/user label", id="unlabelled-refuse"),
        pytest.param(claim(deleting=True), "refuse", "being deleted; wait and retry", id="deleting-refuse"),
        pytest.param(claim(phase="Lost"), "refuse", "Lost", id="lost-refuse"),
        pytest.param(
            claim(state=names.DISK_RETAINED, phase="Lost"), "refuse", "Lost", id="retained-but-lost-refuse"
        ),
        pytest.param(
            claim(state=names.DISK_RETAINED, retain="2026-04-01T00:00:00Z"),
            "adopt",
            "retain-until 2026-04-01T00:00:00Z",
            id="retained-adopt",
        ),
        pytest.param(
            claim(state=names.DISK_RETAINED, owner=BOB),
            "refuse",
            "belongs to user bob",
            id="retained-other-refuse",
        ),
    ],
)
def test_decide_home_disk(pvc: dict[str, Any] | None, action: str, in_reason: str) -> None:
    verdict = decide_home_disk(pvc, ALICE)
    assert verdict.action == action
    assert in_reason in verdict.reason


def test_a_built_claim_is_used_by_its_owner_only() -> None:
    pvc = build_home_pvc(context(CPU))
    assert decide_home_disk(pvc, ALICE).action == "use"
    assert decide_home_disk(pvc, BOB).action == "refuse"


@pytest.mark.parametrize(
    ("pvc", "in_use", "action", "in_reason"),
    [
        pytest.param(claim(), False, "keep", "not labelled", id="active-keep"),
        pytest.param(claim(state=None), False, "keep", "not labelled", id="no-state-keep"),
        pytest.param(
            claim(state=names.DISK_RETAINED, retain="2026-01-01T00:00:00Z", disk=None),
            False,
            "keep",
            "not a workspace disk",
            id="not-a-home-disk-keep",
        ),
        pytest.param(
            claim(state=names.DISK_RETAINED, retain="2026-01-01T00:00:00Z", disk=names.DISK_ROOT),
            False,
            "delete",
            "retention ended",
            id="vm-root-disk-past-retention-delete",
        ),
        pytest.param(
            claim(state=names.DISK_RETAINED), False, "keep", "no gpuworkspace.dev/retain-until", id="missing"
        ),
        pytest.param(
            claim(state=names.DISK_RETAINED, retain="soon"),
            False,
            "keep",
            "unparseable",
            id="unparseable-keep",
        ),
        pytest.param(
            claim(state=names.DISK_RETAINED, retain="2026-01-01T00:00:00"),
            False,
            "keep",
            "unparseable",
            id="naive",
        ),
        pytest.param(
            claim(state=names.DISK_RETAINED, retain="2026-01-01T00:00:00Z"),
            True,
            "keep",
            "mounted",
            id="in-use-keep",
        ),
        pytest.param(
            claim(state=names.DISK_RETAINED, retain="2026-04-01T00:00:00Z"),
            False,
            "keep",
            "until",
            id="not-yet",
        ),
        pytest.param(
            claim(state=names.DISK_RETAINED, retain="2026-01-01T00:00:00Z", deleting=True),
            False,
            "keep",
            "already being deleted",
            id="deleting-keep",
        ),
        pytest.param(
            claim(state=names.DISK_RETAINED, retain="2026-03-01T12:00:00Z"),
            False,
            "delete",
            "ended",
            id="exactly-now",
        ),
        pytest.param(
            claim(state=names.DISK_RETAINED, retain="2026-01-01T00:00:00Z"),
            False,
            "delete",
            "ended",
            id="expired",
        ),
    ],
)
def test_decide_reclaim(pvc: dict[str, Any], in_use: bool, action: str, in_reason: str) -> None:
    verdict = decide_reclaim(pvc, now=NOW, in_use=in_use)
    assert verdict.action == action
    assert in_reason in verdict.reason


def test_retain_then_reclaim_round_trip() -> None:
    pvc = build_home_pvc(context(CPU))
    patch = build_retain_patch(
        retain_until=retain_until(NOW, timedelta(days=7)), now=NOW, why="server-deleted"
    )
    pvc["metadata"]["labels"].update(patch["metadata"]["labels"])
    pvc["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    assert decide_home_disk(pvc, ALICE).action == "adopt"
    assert decide_reclaim(pvc, now=NOW + timedelta(days=6), in_use=False).action == "keep"
    verdict = decide_reclaim(pvc, now=NOW + timedelta(days=7), in_use=False)
    assert verdict.action == "delete"
    assert verdict.retain_until == NOW + timedelta(days=7)


def test_retain_until_refuses_negative_retention() -> None:
    assert retain_until(NOW, timedelta(0)) == NOW
    with pytest.raises(ValueError, match="negative"):
        retain_until(NOW, timedelta(seconds=-1))


def test_pods_using_claim() -> None:
    def pod(name: str, claim_name: str, phase: str = "Running", namespace: str = "ns") -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": claim_name}}]},
            "status": {"phase": phase},
        }

    pods = [
        pod("b", "home-alice", "Pending"),
        pod("a", "home-alice"),
        pod("done", "home-alice", "Succeeded"),
        pod("other", "home-bob"),
        pod("elsewhere", "home-alice", namespace="other"),
        {"metadata": {"name": "bare"}},
    ]
    assert pods_using_claim(pods, "home-alice", "ns") == ["a", "b"]
