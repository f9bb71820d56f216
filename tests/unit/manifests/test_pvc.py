"""The home claim and the merge patches of its retention lifecycle."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from gpuworkspace_spawner.catalog.model import HomeStorage, Storage
from gpuworkspace_spawner.manifests import names
from gpuworkspace_spawner.manifests.pvc import (
    build_adopt_patch,
    build_home_pvc,
    build_retain_patch,
    format_time,
    parse_time,
)
from tests.unit.manifests.golden import assert_golden, validate
from tests.unit.manifests.scenarios import CPU, CUDA_DIGEST, GPU_EXCLUSIVE, context

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("golden", "ws"),
    [
        pytest.param("pvc-home.yaml", context(GPU_EXCLUSIVE), id="rwop-ceph-rbd"),
        pytest.param(
            "pvc-home-default-class.yaml",
            context(replace(CPU, storage=Storage(home=HomeStorage(size="10Gi")))),
            id="default-storage-class",
        ),
    ],
)
def test_home_pvc_golden(golden: str, ws: names.WorkspaceContext) -> None:
    pvc = build_home_pvc(ws)
    validate(pvc)
    assert_golden(golden, pvc)


def test_home_pvc_is_never_owned_and_omits_a_missing_class() -> None:
    pvc = build_home_pvc(context(replace(CPU, storage=Storage())))
    assert "ownerReferences" not in pvc["metadata"]
    assert "storageClassName" not in pvc["spec"]
    assert pvc["metadata"]["labels"][names.LABEL_DISK] == names.DISK_HOME
    assert pvc["metadata"]["labels"][names.LABEL_DISK_STATE] == names.DISK_ACTIVE


def test_retain_patch() -> None:
    patch = build_retain_patch(
        retain_until=NOW + timedelta(days=30), now=NOW, why=names.RETAINED_BY_USER_DELETED
    )
    assert patch == {
        "metadata": {
            "labels": {names.LABEL_DISK_STATE: "retained"},
            "annotations": {
                names.ANN_RETAIN_UNTIL: "2026-03-31T12:00:00Z",
                names.ANN_RETAINED_AT: "2026-03-01T12:00:00Z",
                names.ANN_RETAINED_BY: "user-deleted",
            },
        }
    }
    with pytest.raises(ValueError, match="why"):
        build_retain_patch(retain_until=NOW, now=NOW, why="")


def test_adopt_patch_clears_retention_and_updates_profile() -> None:
    patch = build_adopt_patch(context(CPU))
    assert patch["metadata"]["labels"] == {
        names.LABEL_DISK_STATE: "active",
        names.LABEL_PROFILE: "cpu-small",
        names.LABEL_CATALOG_VERSION: "2026.03.1",
        # CPU has no team and a tag, not a digest: what an earlier start recorded is removed
        names.LABEL_TEAM: None,
        names.LABEL_IMAGE_DIGEST_PREFIX: None,
    }
    annotations = patch["metadata"]["annotations"]
    assert annotations[names.ANN_RETAIN_UNTIL] is None
    assert annotations[names.ANN_RETAINED_AT] is None
    assert annotations[names.ANN_RETAINED_BY] is None
    assert annotations[names.ANN_PROFILE] == "cpu-small"
    assert annotations[names.ANN_IMAGE] == CPU.image
    assert annotations[names.ANN_IMAGE_DIGEST] is None
    assert annotations[names.ANN_TEAM] is None


def test_adopt_patch_records_the_team_and_digest_of_the_adopting_start() -> None:
    claim = build_home_pvc(context(CPU))  # created by a start of a profile without team or digest
    patch = build_adopt_patch(context(GPU_EXCLUSIVE))
    labels = {**claim["metadata"]["labels"], **patch["metadata"]["labels"]}
    annotations = {**claim["metadata"]["annotations"], **patch["metadata"]["annotations"]}
    assert labels[names.LABEL_TEAM] == "nlp"
    assert labels[names.LABEL_IMAGE_DIGEST_PREFIX] == CUDA_DIGEST.removeprefix("sha256:")[:16]
    assert annotations[names.ANN_IMAGE_DIGEST] == CUDA_DIGEST
    assert annotations[names.ANN_IMAGE] == GPU_EXCLUSIVE.image


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2026-12-31T10:00:00Z", datetime(2026, 12, 31, 10, tzinfo=UTC), id="zulu"),
        pytest.param("2026-12-31T12:00:00+02:00", datetime(2026, 12, 31, 10, tzinfo=UTC), id="offset"),
        pytest.param(
            "2026-12-31T10:00:00.123456Z", datetime(2026, 12, 31, 10, 0, 0, 123456, tzinfo=UTC), id="micro"
        ),
        pytest.param("2026-12-31T10:00:00", None, id="naive-refused"),
        pytest.param("2026-12-31", None, id="date-only"),
        pytest.param("next tuesday", None, id="garbage"),
        pytest.param("", None, id="empty"),
        pytest.param(None, None, id="none"),
        pytest.param(12345, None, id="number"),
    ],
)
def test_parse_time(text: object, expected: datetime | None) -> None:
    assert parse_time(text) == expected


def test_format_time_round_trips_and_refuses_naive() -> None:
    local = datetime(2026, 12, 31, 12, 0, 30, 999, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(local) == "2026-12-31T10:00:30Z"
    assert parse_time(format_time(NOW)) == NOW
    with pytest.raises(ValueError, match="timezone-aware"):
        format_time(datetime(2026, 1, 1))
