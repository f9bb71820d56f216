"""A user's disk rows (services/disks/owndisks.py) and the volume stats they are built from."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.services.disks.metrics import parse_volume_stats
from gpuworkspace_spawner.services.disks.owndisks import (
    build_own_disks,
    decide_near_full,
    last_snapshot,
)
from gpuworkspace_spawner.services.disks.views import Usage, disk_view

GI = 1024**3
KUBELET = """\
# TYPE kubelet_volume_stats_available_bytes gauge
kubelet_volume_stats_available_bytes{namespace="ws",persistentvolumeclaim="home-alice"} 750
# TYPE kubelet_volume_stats_capacity_bytes gauge
kubelet_volume_stats_capacity_bytes{namespace="ws",persistentvolumeclaim="home-alice"} 1000
kubelet_volume_stats_capacity_bytes{namespace="ws",persistentvolumeclaim="home-old"} 1000
# TYPE kubelet_volume_stats_inodes gauge
kubelet_volume_stats_inodes{namespace="ws",persistentvolumeclaim="home-alice"} 64
# TYPE kubelet_volume_stats_inodes_used gauge
kubelet_volume_stats_inodes_used{namespace="ws",persistentvolumeclaim="home-alice"} 12
# TYPE kubelet_volume_stats_used_bytes gauge
kubelet_volume_stats_used_bytes{namespace="ws",persistentvolumeclaim="home-alice"} 250
kubelet_volume_stats_used_bytes{namespace="ws",persistentvolumeclaim="home-old"} 10
"""


def test_the_kubelets_bytes_and_inodes_reach_the_disk_view() -> None:
    usage = parse_volume_stats(KUBELET)
    assert usage[("ws", "home-alice")] == Usage(250, 1000, 750, 12, 64)
    # an older kubelet without the free and inode families: bytes only, nothing invented
    assert usage[("ws", "home-old")] == Usage(10, 1000)
    claim = {"metadata": {"name": "home-alice"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}
    view = disk_view(claim, usage[("ws", "home-alice")])
    assert {k: view[k] for k in ("usedBytes", "freeBytes", "inodesUsed", "inodes", "usageRatio")} == {
        "usedBytes": 250,
        "freeBytes": 750,
        "inodesUsed": 12,
        "inodes": 64,
        "usageRatio": 0.25,
    }
    assert "freeBytes" not in disk_view(claim, usage[("ws", "home-old")])


@pytest.mark.parametrize(
    ("disk", "threshold", "near", "says"),
    [
        pytest.param({}, 0.9, False, "", id="not-mounted-never-warns"),
        pytest.param({"usedBytes": 899, "capacityBytes": 1000}, 0.9, False, "", id="below"),
        pytest.param({"usedBytes": 900, "capacityBytes": 1000}, 0.9, True, "90% of its space", id="at"),
        pytest.param({"usedBytes": 2, "capacityBytes": GI}, 1e-9, True, "of its space", id="lowered"),
        pytest.param(
            {"usedBytes": 1, "capacityBytes": 1000, "inodesUsed": 95, "inodes": 100},
            0.9,
            True,
            "95% of its inodes",
            id="inodes-only",
        ),
        pytest.param({"usedBytes": 5, "capacityBytes": 0}, 0.9, False, "", id="no-capacity-never-warns"),
    ],
)
def test_near_full_is_bytes_or_inodes_at_the_threshold(
    disk: dict[str, Any], threshold: float, near: bool, says: str
) -> None:
    verdict = decide_near_full(disk, threshold=threshold)
    assert verdict.near is near
    assert says in verdict.reason and (verdict.reason == "") is (not near)


def _snap(name: str, claim: str, when: str, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": when},
        "spec": {"source": {"persistentVolumeClaimName": claim}},
        "status": {"readyToUse": ready, "creationTime": when},
    }


@pytest.mark.parametrize(
    ("snaps", "expected"),
    [
        pytest.param([], None, id="none"),
        pytest.param([_snap("s1", "home-a", "2026-12-01T10:00:00Z", ready=False)], None, id="not-ready"),
        pytest.param([_snap("s1", "home-b", "2026-12-01T10:00:00Z")], None, id="other-disk"),
        pytest.param(
            [_snap("s1", "home-a", "2026-12-01T10:00:00Z"), _snap("s2", "home-a", "2026-12-01T11:00:00Z")],
            {"name": "s2", "time": "2026-12-01T11:00:00Z"},
            id="newest-ready",
        ),
    ],
)
def test_last_snapshot_is_the_newest_ready_one_of_this_disk(snaps: list[Any], expected: Any) -> None:
    assert last_snapshot("home-a", snaps) == expected


def _item(user: str, server: str, disk: dict[str, Any], state: str = "Running") -> dict[str, Any]:
    return {"user": user, "server": server, "profile": "cpu", "disk": disk, "state": {"state": state}}


def test_rows_are_the_users_own_with_state_runtime_use_and_snapshot() -> None:
    home = {
        "claim": "home-alice",
        "kind": "home",
        "size": "1Gi",
        "capacity": "1Gi",
        "state": "active",
        "usedBytes": 950,
        "capacityBytes": 1000,
        "freeBytes": 50,
        "inodesUsed": 3,
        "inodes": 64,
        "usageRatio": 0.95,
    }
    root = {"claim": "root-alice--vm", "kind": "root", "size": "40Gi", "capacity": None, "state": "retained"}
    root["retainUntil"] = "2026-12-09T00:00:00Z"
    items = [
        _item("alice", "vm", root, state="Retained"),
        _item("alice", "", home),
        _item("bob", "", {"claim": "home-bob", "kind": "home"}),
    ]
    answer = build_own_disks(
        "alice", items, [_snap("s1", "home-alice", "2026-12-01T10:00:00Z")], threshold=0.9
    )
    assert answer["user"] == "alice" and answer["threshold"] == 0.9
    first, second = answer["items"]
    assert (first["workspace"], first["runtime"], first["size"], first["usedBytes"], first["freeBytes"]) == (
        "",
        "container",
        "1Gi",
        950,
        50,
    )
    assert (first["inodesUsed"], first["inodes"], first["state"], first["measured"]) == (
        3,
        64,
        "active",
        True,
    )
    assert first["lastSnapshot"] == {"name": "s1", "time": "2026-12-01T10:00:00Z"}
    assert first["nearFull"] and "95% of its space" in first["nearFullReason"]
    assert (second["workspace"], second["runtime"], second["size"], second["state"], second["until"]) == (
        "vm",
        "vm",
        "40Gi",
        "retained",
        "2026-12-09T00:00:00Z",
    )
    assert second["measured"] is False and second["nearFull"] is False and second["lastSnapshot"] is None
    assert build_own_disks("carol", items, [], threshold=0.9)["items"] == []
