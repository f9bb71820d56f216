"""Decision tables for the disk admin service's pure core (lifecycle.diskops)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kubernetes_validate
import pytest

from gpuworkspace_spawner.lifecycle.diskops import (
    SizeLimit,
    build_restored_claim,
    build_snapshot,
    claim_users,
    decide_capacity_alert,
    decide_reclaim_now,
    decide_resize,
    decide_resize_progress,
    decide_restore,
    format_size,
    parse_size,
    snapshot_name,
)

NOW = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
KUBERNETES_VERSION = "1.30"


def claim(
    *,
    size: str = "10Gi",
    capacity: str | None = "10Gi",
    phase: str = "Bound",
    state: str = "active",
    disk: str | None = "home",
    user: str | None = "alice",
    deleting: bool = False,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    labels = {"gpuworkspace.dev/server": "ws", "gpuworkspace.dev/disk-state": state, "app": "x"}
    if disk:
        labels["gpuworkspace.dev/disk"] = disk
    if user:
        labels["gpuworkspace.dev/user"] = user
    meta: dict[str, Any] = {
        "name": "home-alice--ws",
        "namespace": "gpu-workspaces",
        "uid": "u1",
        "resourceVersion": "7",
        "labels": labels,
        "annotations": {
            "gpuworkspace.dev/username": "alice",
            "gpuworkspace.dev/profile": "cpu-small",
            "pv.kubernetes.io/bind-completed": "yes",
            "volume.kubernetes.io/storage-provisioner": "rbd.csi.ceph.com",
        },
        "finalizers": ["kubernetes.io/pvc-protection"],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T09:00:00Z"
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if capacity:
        status["capacity"] = {"storage": capacity}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": {
            "accessModes": ["ReadWriteOncePod"],
            "storageClassName": "ceph-rbd",
            "volumeMode": "Filesystem",
            "volumeName": "pvc-u1",
            "resources": {"requests": {"storage": size}},
        },
        "status": status,
    }


def snapshot(*, source: str = "home-alice--ws", ready: bool = True, restore: str = "10Gi") -> dict[str, Any]:
    return {
        "metadata": {"name": "snap1", "namespace": "gpu-workspaces"},
        "spec": {"source": {"persistentVolumeClaimName": source}},
        "status": {"readyToUse": ready, "restoreSize": restore},
    }


LIMIT = SizeLimit("10Gi", None)


@pytest.mark.parametrize(
    ("pvc", "size", "limit", "expandable", "allowed", "refusal", "words"),
    [
        pytest.param(claim(), "12Gi", LIMIT, True, True, None, "10Gi -> 12Gi", id="grow"),
        pytest.param(claim(), "40Gi", LIMIT, True, True, None, "", id="exactly-4x-default-max"),
        pytest.param(claim(), "41Gi", LIMIT, True, False, "invalid", "4x the profile", id="above-4x"),
        pytest.param(
            claim(),
            "60Gi",
            SizeLimit("10Gi", "50Gi"),
            True,
            False,
            "invalid",
            "max size 50Gi",
            id="above-max",
        ),
        pytest.param(claim(), "50Gi", SizeLimit("10Gi", "50Gi"), True, True, None, "", id="at-max"),
        pytest.param(claim(), "10Gi", LIMIT, True, False, "invalid", "not larger", id="same-size"),
        pytest.param(claim(), "8Gi", LIMIT, True, False, "invalid", "only grow", id="shrink"),
        pytest.param(claim(), "lots", LIMIT, True, False, "invalid", "quantity", id="not-a-quantity"),
        pytest.param(claim(), "12Gi", LIMIT, False, False, "conflict", "does not allow", id="class-fixed"),
        pytest.param(claim(), "12Gi", LIMIT, None, False, "conflict", "unknown", id="class-unknown"),
        pytest.param(
            claim(),
            "12Gi",
            SizeLimit(None, None),
            True,
            False,
            "conflict",
            "not in the catalog",
            id="no-profile",
        ),
        pytest.param(
            claim(disk=None), "12Gi", LIMIT, True, False, "conflict", "not a workspace disk", id="not-ours"
        ),
        pytest.param(
            claim(user=None), "12Gi", LIMIT, True, False, "conflict", "not a workspace disk", id="no-owner"
        ),
        pytest.param(
            claim(deleting=True), "12Gi", LIMIT, True, False, "conflict", "being deleted", id="deleting"
        ),
        pytest.param(
            claim(phase="Pending"), "12Gi", LIMIT, True, False, "conflict", "not Bound", id="unbound"
        ),
        pytest.param(claim(disk="root"), "12Gi", LIMIT, True, True, None, "", id="vm-root-disk"),
    ],
)
def test_decide_resize(
    pvc: dict[str, Any],
    size: str,
    limit: SizeLimit,
    expandable: bool | None,
    allowed: bool,
    refusal: str | None,
    words: str,
) -> None:
    verdict = decide_resize(pvc, size, limit=limit, expandable=expandable)
    assert (verdict.allowed, verdict.refusal) == (allowed, refusal), verdict.reason
    assert words in verdict.reason


@pytest.mark.parametrize(
    ("pvc", "in_use", "progress"),
    [
        pytest.param(claim(capacity="12Gi"), True, "done", id="grown"),
        pytest.param(claim(capacity="10Gi"), True, "waiting", id="controller-resizing"),
        pytest.param(
            claim(conditions=[{"type": "FileSystemResizePending", "status": "True"}]),
            False,
            "node-pending",
            id="fs-next-start",
        ),
        pytest.param(
            claim(conditions=[{"type": "FileSystemResizePending", "status": "True"}]),
            True,
            "waiting",
            id="fs-kubelet-busy",
        ),
    ],
)
def test_decide_resize_progress(pvc: dict[str, Any], in_use: bool, progress: str) -> None:
    assert decide_resize_progress(pvc, parse_size("12Gi") or 0, in_use=in_use) == progress


@pytest.mark.parametrize(
    ("pvc", "snap", "users", "allowed", "refusal", "words"),
    [
        pytest.param(claim(), snapshot(), [], True, None, "restoring", id="stopped"),
        pytest.param(
            claim(),
            snapshot(),
            ["pod/jupyter-alice--ws"],
            False,
            "conflict",
            "stop the workspace first",
            id="running",
        ),
        pytest.param(
            claim(),
            snapshot(),
            ["vmi/alice-ws"],
            False,
            "conflict",
            "stop the workspace first",
            id="vm-running",
        ),
        pytest.param(claim(), None, [], False, "invalid", "no such snapshot", id="no-snapshot"),
        pytest.param(
            claim(), snapshot(source="home-bob--ws"), [], False, "invalid", "home-bob--ws", id="someone-elses"
        ),
        pytest.param(claim(), snapshot(ready=False), [], False, "conflict", "not ready", id="not-ready"),
        pytest.param(
            claim(disk=None), snapshot(), [], False, "conflict", "not a workspace disk", id="not-ours"
        ),
        pytest.param(claim(state="retained"), snapshot(), [], True, None, "", id="retained-disk"),
    ],
)
def test_decide_restore(
    pvc: dict[str, Any],
    snap: dict[str, Any] | None,
    users: list[str],
    allowed: bool,
    refusal: str | None,
    words: str,
) -> None:
    verdict = decide_restore(pvc, snap, users=users)
    assert (verdict.allowed, verdict.refusal) == (allowed, refusal), verdict.reason
    assert words in verdict.reason


@pytest.mark.parametrize(
    ("pvc", "users", "allowed", "words"),
    [
        pytest.param(claim(state="retained"), [], True, "deleting it now", id="retained"),
        pytest.param(claim(state="active"), [], False, "delete the server first", id="active"),
        pytest.param(claim(state="retained"), ["pod/x"], False, "still in use", id="retained-in-use"),
        pytest.param(claim(state="retained", deleting=True), [], False, "being deleted", id="deleting"),
    ],
)
def test_decide_reclaim_now(pvc: dict[str, Any], users: list[str], allowed: bool, words: str) -> None:
    verdict = decide_reclaim_now(pvc, users=users)
    assert verdict.allowed is allowed and words in verdict.reason


@pytest.mark.parametrize(
    ("used", "capacity", "threshold", "alert"),
    [
        pytest.param(9, 10, 0.9, True, id="at-threshold"),
        pytest.param(8.99, 10, 0.9, False, id="below"),
        pytest.param(None, 10, 0.9, False, id="unknown-usage"),
        pytest.param(5, 0, 0.9, False, id="unknown-capacity"),
        pytest.param(1, 10**10, 1e-12, True, id="lowered"),
    ],
)
def test_decide_capacity_alert(used: float | None, capacity: float, threshold: float, alert: bool) -> None:
    assert decide_capacity_alert(used, capacity, threshold=threshold) is alert


def test_restored_claim_keeps_identity_and_is_a_valid_claim() -> None:
    pvc = claim(size="12Gi")
    restored = build_restored_claim(pvc, snapshot(restore="10Gi"), now=NOW, by="admin")
    kubernetes_validate.validate(restored, KUBERNETES_VERSION, strict=True)
    meta, spec = restored["metadata"], restored["spec"]
    assert meta["name"] == "home-alice--ws" and meta["labels"] == pvc["metadata"]["labels"]
    assert "pv.kubernetes.io/bind-completed" not in meta["annotations"]
    assert "volume.kubernetes.io/storage-provisioner" not in meta["annotations"]
    assert meta["annotations"]["gpuworkspace.dev/restored-from"] == "snap1"
    assert meta["annotations"]["gpuworkspace.dev/restored-at"] == "2026-12-01T10:00:00Z"
    assert spec["dataSource"] == {
        "apiGroup": "snapshot.storage.k8s.io",
        "kind": "VolumeSnapshot",
        "name": "snap1",
    }
    assert spec["accessModes"] == ["ReadWriteOncePod"] and spec["storageClassName"] == "ceph-rbd"
    assert spec["resources"]["requests"]["storage"] == "12Gi"
    assert "volumeName" not in spec and "uid" not in meta and "finalizers" not in meta
    bigger = build_restored_claim(claim(size="10Gi"), snapshot(restore="20Gi"), now=NOW, by="admin")
    assert bigger["spec"]["resources"]["requests"]["storage"] == "20Gi"  # at least the restore size
    assert pvc["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] == "yes"  # input untouched


def test_snapshot_shape() -> None:
    snap = build_snapshot(claim(), name="home-alice--ws-snap-x", kind="manual", by="admin")
    assert snap["apiVersion"] == "snapshot.storage.k8s.io/v1" and snap["kind"] == "VolumeSnapshot"
    assert snap["spec"] == {"source": {"persistentVolumeClaimName": "home-alice--ws"}}  # default class
    labels = snap["metadata"]["labels"]
    assert labels["gpuworkspace.dev/snapshot-of"] == "home-alice--ws"
    assert labels["gpuworkspace.dev/snapshot-kind"] == "manual"
    assert labels["gpuworkspace.dev/user"] == "alice" and "gpuworkspace.dev/disk-state" not in labels
    assert "app" not in labels
    assert snap["metadata"]["annotations"]["gpuworkspace.dev/snapshot-by"] == "admin"
    with_class = build_snapshot(claim(), name="s", kind="pre-restore", by="a", snapshot_class="fast")
    assert with_class["spec"]["volumeSnapshotClassName"] == "fast"


def test_snapshot_names() -> None:
    assert snapshot_name("home-alice--ws", NOW) == "home-alice--ws-snap-20261201-100000"
    assert snapshot_name("home-alice--ws", NOW, "pre-restore") == "home-alice--ws-pre-restore-20261201-100000"
    long = snapshot_name("h" * 250, NOW, "pre-restore")
    assert len(long) <= 253 and long.endswith("-pre-restore-20261201-100000")


def test_claim_users_counts_unfinished_pods_and_vmis() -> None:
    pods = [
        {
            "metadata": {"name": "a"},
            "spec": {"volumes": [{"persistentVolumeClaim": {"claimName": "c"}}]},
            "status": {"phase": "Running"},
        },
        {
            "metadata": {"name": "b"},
            "spec": {"volumes": [{"persistentVolumeClaim": {"claimName": "c"}}]},
            "status": {"phase": "Succeeded"},
        },
        {"metadata": {"name": "d"}, "spec": {"volumes": [{"persistentVolumeClaim": {"claimName": "other"}}]}},
    ]
    vmis = [
        {
            "metadata": {"name": "vm"},
            "spec": {"volumes": [{"dataVolume": {"name": "c"}}]},
            "status": {"phase": "Running"},
        }
    ]
    assert claim_users("c", pods, vmis) == ["pod/a", "vmi/vm"]


@pytest.mark.parametrize(
    ("text", "size"),
    [("10Gi", 10 * 2**30), ("1.5Gi", 3 * 2**29), ("500M", 500 * 10**6), ("x", None), ("0", None)],
)
def test_parse_size(text: str, size: int | None) -> None:
    assert parse_size(text) == size


def test_format_size() -> None:
    assert (format_size(12 * 2**30), format_size(1536 * 2**20), format_size(1000)) == (
        "12Gi",
        "1536Mi",
        "1000",
    )
