"""``storage.home.snapshots`` and ``storage.home.retention``: the model, errors naming file/profile/field,
and what the spawn card tells the user."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_spawner.catalog import CatalogError, load_catalog
from gpuworkspace_spawner.catalog.model import HomeRetention, SnapshotSchedule
from gpuworkspace_spawner.catalog.rendering import build_card

from .conftest import catalog_doc, profile_doc, write_yaml

HOME = {"class": "ceph-rbd", "size": "10Gi"}


def load_home(tmp_path: Path, **home: Any) -> Any:
    doc = profile_doc("p", storage={"home": {**HOME, **home}})
    return load_catalog(write_yaml(tmp_path / "c.yaml", catalog_doc(), doc)).profiles[0]


def test_schedule_and_retention_in_the_model(tmp_path: Path) -> None:
    profile = load_home(tmp_path, snapshots={"every": "6h", "keep": 7}, retention={"days": 14})
    assert profile.storage.home.snapshots == SnapshotSchedule(every_s=6 * 3600, keep=7)
    assert profile.storage.home.retention == HomeRetention(days=14, keep_on_delete=True)
    plain = load_home(tmp_path)
    assert plain.storage.home.snapshots is None and plain.storage.home.retention is None
    gone = load_home(tmp_path, retention={"keepOnDelete": False})
    assert gone.storage.home.retention == HomeRetention(days=None, keep_on_delete=False)


@pytest.mark.parametrize(
    ("home", "field", "words"),
    [
        pytest.param(
            {"snapshots": {"every": "6h"}},
            "spec.storage.home.snapshots.keep",
            "required field is missing",
            id="keep-missing",
        ),
        pytest.param(
            {"snapshots": {"every": "hourly", "keep": 3}},
            "spec.storage.home.snapshots.every",
            "duration",
            id="every-not-a-duration",
        ),
        pytest.param(
            {"snapshots": {"every": "5s", "keep": 3}},
            "spec.storage.home.snapshots.every",
            "shorter than 10s",
            id="every-too-short",
        ),
        pytest.param(
            {"snapshots": {"every": "1h", "keep": 0}},
            "spec.storage.home.snapshots.keep",
            "minimum",
            id="keep-zero",
        ),
        pytest.param(
            {"snapshots": {"every": "1h", "keep": 3, "cron": "* * * * *"}},
            "spec.storage.home.snapshots.cron",
            "allowed here: every, keep",
            id="unknown-field",
        ),
        pytest.param(
            {"retention": {"days": -1}}, "spec.storage.home.retention.days", "minimum", id="negative-days"
        ),
        pytest.param(
            {"retention": {"days": "forever"}},
            "spec.storage.home.retention.days",
            "forever",
            id="days-not-a-number",
        ),
        pytest.param(
            {"retention": {"keepOnDelete": "no"}},
            "spec.storage.home.retention.keepOnDelete",
            "no",
            id="keep-not-a-boolean",
        ),
        pytest.param(
            {"retention": {"days": 7, "keepOnDelete": False}},
            "spec.storage.home.retention.days",
            "keepOnDelete is false",
            id="days-without-keeping",
        ),
    ],
)
def test_errors_name_file_profile_and_field(
    tmp_path: Path, home: dict[str, Any], field: str, words: str
) -> None:
    doc = profile_doc("broken", storage={"home": {**HOME, **home}})
    file = write_yaml(tmp_path / "c.yaml", catalog_doc(), profile_doc("fine"), doc)
    with pytest.raises(CatalogError) as caught:
        load_catalog(file)
    found = caught.value.problems
    assert any(p.field == field and words in p.message for p in found), found
    assert all(p.file == str(file) and p.profile == "broken" for p in found), found


@pytest.mark.parametrize(
    ("home", "phrases", "absent"),
    [
        pytest.param(
            {"snapshots": {"every": "6h", "keep": 7}, "retention": {"days": 14}},
            ["snapshotted every 6 h", "newest 7 are kept", "restore one yourself", "kept 14 day(s) after"],
            [],
            id="schedule-and-days",
        ),
        pytest.param(
            {"retention": {"keepOnDelete": False}},
            ["deleting the server deletes it"],
            ["Snapshots:"],
            id="not-kept",
        ),
        pytest.param({}, ["until the retention period ends"], ["Snapshots:"], id="hub-default"),
    ],
)
def test_the_card_says_what_is_kept_and_snapshotted(
    tmp_path: Path, home: dict[str, Any], phrases: list[str], absent: list[str]
) -> None:
    card = build_card(load_home(tmp_path, **home))
    for phrase in phrases:
        assert phrase in card, card
    for phrase in absent:
        assert phrase not in card, card
