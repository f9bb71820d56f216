"""Retention precedence (profile over the hub's retention_days) and the policy stamped on a disk."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from gpuworkspace_spawner.catalog.model import HomeRetention, SnapshotSchedule
from gpuworkspace_spawner.lifecycle.diskpolicy import (
    ANN_KEEP_ON_DELETE,
    ANN_RETENTION_DAYS,
    ANN_RETENTION_SOURCE,
    ANN_SNAPSHOT_EVERY,
    ANN_SNAPSHOT_KEEP,
    build_policy_annotations,
    build_policy_patch,
    decide_retention,
    retention_of_disk,
    snapshot_schedule_of_disk,
    with_policy,
)

HUB = 30.0


@pytest.mark.parametrize(
    ("profile", "days", "keep", "source"),
    [
        pytest.param(None, 30, True, "hub", id="no-retention-in-profile-hub-days"),
        pytest.param(HomeRetention(), 30, True, "hub", id="empty-retention-hub-days"),
        pytest.param(HomeRetention(days=7), 7, True, "profile", id="profile-days-win"),
        pytest.param(HomeRetention(days=90), 90, True, "profile", id="profile-may-keep-longer"),
        pytest.param(HomeRetention(days=0), 0, True, "profile", id="profile-zero-days"),
        pytest.param(HomeRetention(keep_on_delete=False), 0, False, "profile", id="not-kept"),
        pytest.param(HomeRetention(days=None, keep_on_delete=True), 30, True, "hub", id="kept-hub-days"),
    ],
)
def test_retention_precedence(profile: HomeRetention | None, days: float, keep: bool, source: str) -> None:
    policy = decide_retention(profile, HUB)
    assert (policy.days, policy.keep_on_delete, policy.source) == (days, keep, source)
    assert policy.period == (timedelta(days=days) if keep else timedelta(0))
    assert policy.reason


@pytest.mark.parametrize("hub", [-1.0, float("nan"), float("inf")])
def test_a_nonsense_hub_setting_is_refused(hub: float) -> None:
    with pytest.raises(ValueError, match="retention_days"):
        decide_retention(None, hub)


def claim(annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "home-a--ws", "annotations": annotations}}


@pytest.mark.parametrize(
    ("annotations", "days", "keep", "source", "words"),
    [
        pytest.param({}, 30, True, "hub", "carries no", id="unstamped-disk-hub"),
        pytest.param(
            {ANN_RETENTION_DAYS: "7", ANN_KEEP_ON_DELETE: "true", ANN_RETENTION_SOURCE: "profile"},
            7,
            True,
            "profile",
            "7",
            id="stamped-profile-days",
        ),
        pytest.param(
            {ANN_RETENTION_DAYS: "0", ANN_KEEP_ON_DELETE: "false", ANN_RETENTION_SOURCE: "profile"},
            0,
            False,
            "profile",
            "false",
            id="stamped-not-kept",
        ),
        pytest.param(
            {ANN_RETENTION_DAYS: "soon", ANN_KEEP_ON_DELETE: "true"}, 30, True, "hub", "soon", id="bad-days"
        ),
        pytest.param({ANN_RETENTION_DAYS: "-3"}, 30, True, "hub", "-3", id="negative-days"),
        pytest.param(
            {ANN_RETENTION_DAYS: "1", ANN_KEEP_ON_DELETE: "nope"}, 30, True, "hub", "nope", id="bad-keep"
        ),
    ],
)
def test_retention_read_back_from_the_disk(
    annotations: dict[str, str], days: float, keep: bool, source: str, words: str
) -> None:
    policy = retention_of_disk(claim(annotations), HUB)
    assert (policy.days, policy.keep_on_delete, policy.source) == (days, keep, source)
    assert words in policy.reason


def test_stamp_round_trips_and_patches_only_what_changed() -> None:
    retention = decide_retention(HomeRetention(days=14), HUB)
    wanted = build_policy_annotations(retention, SnapshotSchedule(every_s=3600, keep=5))
    body = with_policy({"metadata": {"name": "c", "annotations": {"x": "1"}}}, wanted, patch=False)
    assert body["metadata"]["annotations"]["x"] == "1"
    assert retention_of_disk(body, HUB).days == 14
    schedule = snapshot_schedule_of_disk(body).schedule
    assert schedule == SnapshotSchedule(every_s=3600, keep=5)
    assert build_policy_patch(body, wanted) is None
    # the profile dropped its schedule: the patch removes it, a new body leaves it out
    dropped = build_policy_annotations(retention, None)
    assert build_policy_patch(body, dropped) == {
        "metadata": {"annotations": {ANN_SNAPSHOT_EVERY: None, ANN_SNAPSHOT_KEEP: None}}
    }
    assert (
        ANN_SNAPSHOT_EVERY
        not in with_policy({"metadata": {}}, dropped, patch=False)["metadata"]["annotations"]
    )


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        pytest.param({ANN_SNAPSHOT_EVERY: "1h", ANN_SNAPSHOT_KEEP: "3"}, "whole numbers", id="not-seconds"),
        pytest.param({ANN_SNAPSHOT_EVERY: "60"}, "whole numbers", id="keep-missing"),
        pytest.param({ANN_SNAPSHOT_EVERY: "60", ANN_SNAPSHOT_KEEP: "0"}, "more than 0", id="keep-zero"),
    ],
)
def test_a_malformed_schedule_is_a_problem_not_a_schedule(annotations: dict[str, str], problem: str) -> None:
    stamped = snapshot_schedule_of_disk(claim(annotations))
    assert stamped.schedule is None and problem in stamped.problem
