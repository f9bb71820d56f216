"""CatalogSource: cheap when unchanged, picks up valid changes, keeps the last good catalog otherwise."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_spawner.catalog import Catalog, CatalogError, CatalogSource

from .conftest import catalog_doc, profile_doc, write_yaml

_tick = [1_700_000_000]


def rewrite(path: Path, *docs: Any) -> None:
    """Write and give the file a new mtime, so the change is seen even within one clock tick."""
    write_yaml(path, *docs)
    _tick[0] += 10
    os.utime(path, (_tick[0], _tick[0]))


def broken(path: Path, text: str = "spec: [unclosed\n") -> None:
    path.write_text(text)
    _tick[0] += 10
    os.utime(path, (_tick[0], _tick[0]))


class Recorder:
    def __init__(self) -> None:
        self.errors: list[CatalogError] = []
        self.reloads: list[Catalog] = []


@pytest.fixture
def watched(catalog_dir: Path) -> tuple[CatalogSource, Recorder]:
    recorder = Recorder()
    source = CatalogSource(
        catalog_dir, on_reload_error=recorder.errors.append, on_reload=recorder.reloads.append
    )
    return source, recorder


def test_constructor_refuses_an_invalid_catalog(tmp_path: Path) -> None:
    broken(tmp_path / "c.yaml")
    with pytest.raises(CatalogError):
        CatalogSource(tmp_path)


def test_unchanged_files_are_not_read(
    watched: tuple[CatalogSource, Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, recorder = watched
    first = source.current()

    def no_reading(*args: object) -> None:
        raise AssertionError("read_files called although nothing changed")

    monkeypatch.setattr("gpuworkspace_spawner.catalog.source.read_files", no_reading)
    assert source.current() is first
    assert recorder.reloads == [] and source.reload_failures == 0


def test_valid_change_is_picked_up(watched: tuple[CatalogSource, Recorder], catalog_dir: Path) -> None:
    source, recorder = watched
    rewrite(catalog_dir / "profiles.yaml", profile_doc("cpu", default=True), profile_doc("new"))
    catalog = source.current()
    assert [p.slug for p in catalog.profiles] == ["cpu", "new"]
    assert recorder.reloads == [catalog]


def test_touch_without_change_does_not_reload(
    watched: tuple[CatalogSource, Recorder], catalog_dir: Path
) -> None:
    source, recorder = watched
    before = source.current()
    os.utime(catalog_dir / "profiles.yaml", (1, 1))
    assert source.current() is before and recorder.reloads == []


def test_invalid_change_keeps_last_good_and_counts_once(
    watched: tuple[CatalogSource, Recorder], catalog_dir: Path
) -> None:
    source, recorder = watched
    good = source.current()
    broken(catalog_dir / "profiles.yaml")
    for _ in range(3):
        assert source.current() is good
    assert source.reload_failures == 1 and len(recorder.errors) == 1
    assert source.last_error is recorder.errors[0]
    assert "not valid YAML" in str(source.last_error)

    broken(catalog_dir / "profiles.yaml")  # same broken content, new mtime: not reported again
    assert source.current() is good and source.reload_failures == 1

    broken(catalog_dir / "profiles.yaml", "kind: Nope\n")  # different broken content: reported
    assert source.current() is good and source.reload_failures == 2 and len(recorder.errors) == 2

    rewrite(catalog_dir / "profiles.yaml", profile_doc("fixed"))
    fixed = source.current()
    assert [p.slug for p in fixed.profiles] == ["fixed"]
    assert source.last_error is None and source.reload_failures == 2
    assert recorder.reloads == [fixed]


def test_removed_directory_keeps_last_good(
    watched: tuple[CatalogSource, Recorder], catalog_dir: Path
) -> None:
    source, _ = watched
    good = source.current()
    for child in catalog_dir.iterdir():
        child.unlink()
    catalog_dir.rmdir()
    assert source.current() is good
    assert source.current() is good
    assert source.reload_failures == 1


def test_configmap_swap_is_picked_up(tmp_path: Path) -> None:
    root = tmp_path / "cm"
    old = root / "..2026_01_01"
    write_yaml(old / "catalog.yaml", catalog_doc(), profile_doc("cpu"))
    os.symlink(old.name, root / "..data")
    os.symlink("..data/catalog.yaml", root / "catalog.yaml")
    source = CatalogSource(root)
    assert [p.slug for p in source.current().profiles] == ["cpu"]
    new = root / "..2026_01_02"
    write_yaml(new / "catalog.yaml", catalog_doc(version="2"), profile_doc("cpu"), profile_doc("gpu"))
    os.symlink(new.name, root / "..data_tmp")
    os.replace(root / "..data_tmp", root / "..data")  # what the kubelet does
    catalog = source.current()
    assert catalog.version == "2" and [p.slug for p in catalog.profiles] == ["cpu", "gpu"]


def test_reload_forces_a_read(watched: tuple[CatalogSource, Recorder], catalog_dir: Path) -> None:
    source, _ = watched
    write_yaml(catalog_dir / "profiles.yaml", profile_doc("other"))
    assert [p.slug for p in source.reload().profiles] == ["other"]
    broken(catalog_dir / "profiles.yaml")
    with pytest.raises(CatalogError):
        source.reload()
    assert [p.slug for p in source.current().profiles] == ["other"]
