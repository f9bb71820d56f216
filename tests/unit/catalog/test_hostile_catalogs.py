"""Hostile catalogs: every bad file is a CatalogError naming the file and the place, never a crash.

test_fuzz.py throws junk at the loader and only checks the exception type; here each property plants
one known kind of damage (a duplicate slug, an unknown field, a wrong type, a bomb, a huge file) and
checks that the error points at it: the file, the profile and the dotted path in the document. The
last properties write hostile content into a watched catalog and check that CatalogSource keeps
serving the last good catalog after every bad write.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuworkspace_spawner.catalog import Catalog, CatalogError, CatalogProblem, CatalogSource, load_catalog
from gpuworkspace_spawner.catalog.files import MAX_FILE_BYTES
from gpuworkspace_spawner.catalog.parsing import MAX_ALIAS_VALUES, MAX_DEPTH, MAX_NODES
from gpuworkspace_spawner.catalog.schema import SCHEMAS
from gpuworkspace_spawner.catalog.units import MIG_RESOURCE_PATTERN

from .conftest import catalog_doc, gpu_doc, profile_doc, with_path, write_yaml

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLUGS = st.sampled_from(["cpu", "gpu", "big", "tiny", "lab"])
# Field names: letters and digits of any script, '-', '_' (no YAML syntax, so no merge keys).
NAMES = st.text(st.characters(categories=("L", "Nd", "Pd", "Pc")), min_size=1, max_size=24)


@contextlib.contextmanager
def catalog_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="hostile-") as root:
        yield Path(root)


def problems_of(path: Path) -> tuple[CatalogProblem, ...]:
    """The problems load_catalog reports; any other exception (or a load) fails the test."""
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    assert caught.value.problems, "a CatalogError without problems"
    return caught.value.problems


def located(found: tuple[CatalogProblem, ...], file: Path, profile: str | None, field: str) -> bool:
    return any(p.file == str(file) and p.profile == profile and p.field == field for p in found)


# ------------------------------------------------------------------------------- duplicate slugs
@FUZZ
@given(st.lists(st.lists(SLUGS, min_size=1, max_size=3), min_size=1, max_size=4))
def test_duplicate_slugs_across_files_are_each_named_with_the_first(files: list[list[str]]) -> None:
    with catalog_root() as root:
        write_yaml(root / "a-catalog.yaml", catalog_doc())
        paths = [write_yaml(root / f"f{i}.yaml", *map(profile_doc, slugs)) for i, slugs in enumerate(files)]
        first: dict[str, Path] = {}
        expected: set[tuple[str, str, str]] = set()  # (file, slug, where the first one is)
        for path, slugs in zip(paths, files, strict=True):
            for slug in slugs:
                if slug in first:
                    expected.add((str(path), slug, str(first[slug])))
                first.setdefault(slug, path)
        if not expected:
            assert sorted(p.slug for p in load_catalog(root).profiles) == sorted(first)
            return
        found = problems_of(root)
        duplicates = [p for p in found if p.field == "metadata.name"]
        assert len(duplicates) == sum(len(s) for s in files) - len(first), found
        assert all("duplicate profile name" in p.message for p in duplicates), found
        assert {(p.file, p.profile) for p in duplicates} == {(f, s) for f, s, _ in expected}
        for file, slug, origin in expected:
            assert any(p.file == file and p.profile == slug and origin in p.message for p in duplicates), (
                file,
                slug,
                origin,
                found,
            )


# -------------------------------------------------------------------------- unknown fields
# Every mapping level of the documents: (which document, dotted path, the fields allowed there).
PROFILE_LEVELS: list[tuple[str, frozenset[str]]] = [
    ("", frozenset({"apiVersion", "kind", "metadata", "spec"})),
    ("metadata", frozenset({"name"})),
    ("spec", frozenset()),  # many; a random name never collides with the ones below (checked)
    ("spec.resources", frozenset({"requests", "limits"})),
    ("spec.resources.requests", frozenset()),
    ("spec.resources.limits", frozenset()),
    ("spec.placement", frozenset({"nodePool", "gpuMode", "runtimeClassName"})),
    ("spec.storage", frozenset()),
    ("spec.storage.home", frozenset()),
    ("spec.storage.scratch", frozenset({"type", "sizeLimit", "mountPath"})),
    ("spec.storage.shm", frozenset({"sizeLimit"})),
    ("spec.storage.datasets", frozenset()),
    ("spec.session", frozenset({"idleTimeout", "maxDuration", "warnings"})),
    ("spec.security", frozenset()),
    ("spec.ide", frozenset({"default", "choices"})),
    ("spec.access", frozenset({"groups", "users"})),
]
CATALOG_LEVELS: list[tuple[str, frozenset[str]]] = [
    ("", frozenset({"apiVersion", "kind", "metadata", "spec"})),
    ("metadata", frozenset({"name"})),
    ("spec", frozenset({"version", "allowImageTags", "nodePools"})),
    ("spec.nodePools.gpu", frozenset({"nodeSelector", "tolerations"})),
]


def _property_names(schema: Any) -> Iterator[str]:
    """Every field name the schemas know, at any level (a random name must not be one of them)."""
    if isinstance(schema, dict):
        yield from schema.get("properties", {})
        for value in schema.values():
            yield from _property_names(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _property_names(value)


KNOWN_WORDS = frozenset(_property_names(SCHEMAS))
UNKNOWN = NAMES.filter(lambda n: n not in KNOWN_WORDS and not re.search(MIG_RESOURCE_PATTERN, n))


def _base_profile() -> dict[str, Any]:
    doc = gpu_doc("gpu", ide={"default": "jupyterlab", "choices": ["jupyterlab"]})
    doc["spec"]["storage"] = {"home": {"size": "10Gi"}, "datasets": {"claimName": "data"}}
    doc["spec"].update(session={"idleTimeout": "1h"}, security={"runAsUser": 1000}, access={"users": ["a"]})
    return doc


def _dotted(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _plant_key(doc: dict[str, Any], path: str, key: str) -> dict[str, Any]:
    target = doc
    for part in filter(None, path.split(".")):
        target = target.setdefault(part, {})
    target[key] = "surprise"
    return doc


@FUZZ
@given(st.sampled_from(PROFILE_LEVELS), UNKNOWN)
def test_an_unknown_profile_field_at_any_level_is_named(level: tuple[str, frozenset[str]], key: str) -> None:
    path, _ = level
    with catalog_root() as root:
        write_yaml(root / "catalog.yaml", catalog_doc())
        bad = write_yaml(root / "profile.yaml", _plant_key(_base_profile(), path, key))
        found = problems_of(root)
        assert located(found, bad, "gpu", _dotted(path, key)), found
        assert all(p.file == str(bad) for p in found), found
        assert any("unknown field" in p.message for p in found), found


@FUZZ
@given(st.sampled_from(CATALOG_LEVELS), UNKNOWN)
def test_an_unknown_catalog_field_at_any_level_is_named(level: tuple[str, frozenset[str]], key: str) -> None:
    path, allowed = level
    with catalog_root() as root:
        bad = write_yaml(root / "catalog.yaml", _plant_key(catalog_doc(), path, key))
        write_yaml(root / "profile.yaml", profile_doc("cpu"))
        found = problems_of(root)
        assert located(found, bad, None, _dotted(path, key)), found
        problem = next(p for p in found if p.field == _dotted(path, key))
        assert "unknown field" in problem.message
        assert all(name in problem.message for name in allowed), problem  # says what is allowed


# ------------------------------------------------------------------------------- wrong types
TEXT = st.text(max_size=30)
NUMBER = st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False))
LISTS = st.lists(st.integers(), max_size=3)
DICTS = st.dictionaries(st.sampled_from(["a", "b"]), st.integers(), min_size=1, max_size=2)
NOT_TEXT = st.one_of(st.none(), st.booleans(), NUMBER, LISTS, DICTS)
NOT_QUANTITY = st.one_of(st.none(), st.booleans(), LISTS, DICTS)
NOT_INT = st.one_of(
    st.none(), TEXT, LISTS, DICTS, st.floats(allow_nan=False).filter(lambda f: not f.is_integer())
)
NOT_BOOL = st.one_of(st.none(), TEXT, NUMBER, LISTS, DICTS)
NOT_LIST = st.one_of(st.none(), st.booleans(), TEXT, NUMBER, DICTS)
NOT_DICT = st.one_of(st.none(), st.booleans(), TEXT, NUMBER, LISTS)
# (dotted path in a profile, values of a wrong type for it)
PROFILE_FIELDS = [
    ("spec.displayName", NOT_TEXT),
    ("spec.description", NOT_TEXT),
    ("spec.image", NOT_TEXT),
    ("spec.costCenter", NOT_TEXT),
    ("spec.team", NOT_TEXT),
    ("spec.runtime", NOT_TEXT),
    ("spec.resources.limits.cpu", NOT_QUANTITY),
    ("spec.resources.requests.memory", NOT_QUANTITY),
    ("spec.resources.limits.[nvidia.com/gpu]", NOT_QUANTITY),
    ("spec.placement.gpuMode", NOT_TEXT),
    ("spec.placement.nodePool", NOT_TEXT),
    ("spec.storage.home.size", NOT_QUANTITY),
    ("spec.storage.home.mountPath", NOT_TEXT),
    ("spec.storage.teamDirectories", NOT_LIST),
    ("spec.session.idleTimeout", NOT_TEXT),
    ("spec.session.warnings", NOT_LIST),
    ("spec.security.runAsUser", NOT_INT),
    ("spec.security.serviceAccountToken", NOT_BOOL),
    ("spec.access.groups", NOT_LIST),
    ("spec.default", NOT_BOOL),
    ("spec.resources", NOT_DICT),
    ("spec.placement", NOT_DICT),
    ("spec.storage", NOT_DICT),
    ("spec", NOT_DICT),
    ("metadata", NOT_DICT),
    ("apiVersion", NOT_TEXT),
]
CATALOG_FIELDS = [
    ("spec.version", NOT_TEXT),
    ("spec.allowImageTags", NOT_BOOL),
    ("spec.nodePools", NOT_DICT),
    ("spec.nodePools.gpu", NOT_DICT),
    ("spec.nodePools.gpu.tolerations", NOT_LIST),
    ("spec.nodePools.gpu.nodeSelector", NOT_DICT),
]


def _field_of(dotted: str) -> str:
    return dotted.replace(".[", ".").replace("]", "")


def _names_the_place(found: tuple[CatalogProblem, ...], file: Path, profile: str | None, field: str) -> bool:
    """A problem in ``file`` for ``profile`` at ``field`` or inside it (a list's items, say)."""
    return any(
        p.file == str(file)
        and p.profile == profile
        and (p.field == field or p.field.startswith((f"{field}.", f"{field}[")))
        for p in found
    )


@FUZZ
@given(st.data(), st.sampled_from(PROFILE_FIELDS))
def test_a_wrong_type_in_a_profile_names_the_field(data: st.DataObject, case: tuple[str, Any]) -> None:
    dotted, wrong = case
    value = data.draw(wrong, label=dotted)
    with catalog_root() as root:
        write_yaml(root / "catalog.yaml", catalog_doc())
        bad = write_yaml(root / "profile.yaml", with_path(_base_profile(), dotted, value))
        found = problems_of(root)
        profile = None if dotted.startswith("metadata") else "gpu"  # no name to give without metadata
        assert _names_the_place(found, bad, profile, _field_of(dotted)), found


@FUZZ
@given(st.data(), st.sampled_from(CATALOG_FIELDS))
def test_a_wrong_type_in_the_catalog_document_names_the_field(
    data: st.DataObject, case: tuple[str, Any]
) -> None:
    dotted, wrong = case
    value = data.draw(wrong, label=dotted)
    with catalog_root() as root:
        bad = write_yaml(root / "catalog.yaml", with_path(catalog_doc(), dotted, value))
        write_yaml(root / "profile.yaml", profile_doc("cpu", placement={"gpuMode": "none"}))
        found = problems_of(root)
        assert _names_the_place(found, bad, None, dotted), found


def test_a_wrong_type_for_the_name_is_reported_without_a_profile(tmp_path: Path) -> None:
    bad = write_yaml(tmp_path / "p.yaml", catalog_doc(), with_path(profile_doc("p"), "metadata.name", 7))
    assert located(problems_of(bad), bad, None, "metadata.name")


# ---------------------------------------------------------------------- bombs and deep nesting
def _bomb(levels: int, fanout: int) -> str:
    """Billion laughs: each anchor a list of ``fanout`` aliases of the one before."""
    lines = ["apiVersion: gpuworkspace.dev/v1alpha1", "kind: WorkspaceProfile", "metadata: {name: lol}"]
    lines += ["spec:", "  l0: &l0 [lol]"]
    for i in range(1, levels + 1):
        lines.append(f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fanout)}]")
    return "\n".join(lines) + "\n"


def _alias_crossing(levels: int, fanout: int) -> tuple[int, int] | None:
    """Where, in document order, the aliases of ``_bomb(levels, fanout)`` have repeated more than
    MAX_ALIAS_VALUES values: (level, index of the alias in its list), or None if they never do."""
    sizes = [2]  # values under l0 after expanding aliases: the list and its scalar
    added = 0
    for level in range(1, levels + 1):
        for index in range(fanout):
            added += sizes[-1]
            if added > MAX_ALIAS_VALUES:
                return level, index
        sizes.append(1 + fanout * sizes[-1])
    return None


@FUZZ
@given(st.integers(1, 60), st.integers(2, 12))
def test_alias_bombs_are_refused_at_the_alias_that_crosses_the_limit(levels: int, fanout: int) -> None:
    """Up to 12**60 values: refused from the node graph, whose size the measure does not depend on."""
    crossing = _alias_crossing(levels, fanout)
    with catalog_root() as root:
        bad = root / "bomb.yaml"
        bad.write_text(_bomb(levels, fanout))
        found = problems_of(bad)
    if crossing is not None:
        level, index = crossing
        (problem,) = (p for p in found if "YAML aliases" in p.message)
        assert (problem.file, problem.profile, problem.field) == (str(bad), "lol", f"spec.l{level}[{index}]")
        assert problem.message.startswith(f"line {5 + level}: YAML aliases and merge keys repeat more than")
    else:  # small enough to copy: the schema speaks instead, about the fields it does not know
        assert located(found, bad, "lol", "spec.l0"), found
        assert not any("more than" in p.message for p in found), found


def _merge_bomb(lines: int) -> str:
    """Merge keys only: each line's mapping merges the previous one twice over, doubling it."""
    text = ["apiVersion: gpuworkspace.dev/v1alpha1", "kind: WorkspaceProfile", "metadata: {name: merge}"]
    text += ["spec:", "  m0: &m0 {a: 1, b: 2}"]
    text += [f"  m{i}: &m{i} {{x: {{<<: *m{i - 1}}}, y: {{<<: *m{i - 1}}}}}" for i in range(1, lines)]
    return "\n".join(text) + "\n"


@pytest.mark.parametrize("lines", [16, 40, 400])
def test_a_merge_key_bomb_is_refused_before_anything_is_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: int
) -> None:
    """The issue's case (557 bytes, 0.9 s, doubling per line): refused with the line, having
    constructed no value at all, however many lines double it (400 lines: 2**400 values)."""
    from gpuworkspace_spawner.catalog import parsing

    constructed = [0]
    original = yaml.constructor.BaseConstructor.construct_object

    def counting(self: Any, node: Any, deep: bool = False) -> Any:
        constructed[0] += 1
        return original(self, node, deep)

    monkeypatch.setattr(parsing._Loader, "construct_object", counting)
    bad = tmp_path / "merge.yaml"
    bad.write_text(_merge_bomb(lines))
    found = problems_of(bad)
    (problem,) = (p for p in found if "YAML aliases" in p.message)
    # m_i stands for 3 + 2 * |m_(i-1)| values (|m0| = 3); each of its two merges repeats |m_(i-1)|
    size, added, level = 3, 0, 0
    while added + 2 * size <= MAX_ALIAS_VALUES:
        added, size, level = added + 2 * size, 3 + 2 * size, level + 1
    side = "x" if added + size > MAX_ALIAS_VALUES else "y"
    assert (level + 1, side) == (10, "y")  # m10's second merge, on line 15
    assert (problem.file, problem.profile, problem.field) == (
        str(bad),
        "merge",
        f"spec.m{level + 1}.{side}.<<",
    )
    assert problem.message.startswith(f"line {5 + level + 1}: YAML aliases and merge keys repeat more than")
    assert constructed[0] == 0


def test_aliases_that_share_a_little_still_load(tmp_path: Path) -> None:
    good = tmp_path / "catalog.yaml"
    write_yaml(good, catalog_doc())
    good.write_text(
        good.read_text()
        + "---\n"
        + yaml.safe_dump(profile_doc("cpu"), sort_keys=False)
        .replace(
            "requests:\n      cpu: '1'\n      memory: 2Gi",
            "requests: &requests\n      cpu: '1'\n      memory: 2Gi",
        )
        .replace("limits:\n      cpu: '2'\n      memory: 4Gi", "limits: {<<: *requests, cpu: '2'}")
    )
    assert "&requests" in good.read_text() and "<<: *requests" in good.read_text()
    (profile,) = load_catalog(good).profiles
    assert profile.slug == "cpu"


@FUZZ
@given(st.integers(MAX_DEPTH - 5, MAX_DEPTH + 60), st.booleans())
def test_deep_nesting_is_refused_at_the_place_it_goes_too_deep(depth: int, flow: bool) -> None:
    if flow:
        nested = "[" * depth + "x" + "]" * depth
    else:
        nested = "".join(f"\n{'  ' * (i + 1)}- " for i in range(depth)).replace("- \n", "-\n") + "x"
    text = f"apiVersion: gpuworkspace.dev/v1alpha1\nkind: WorkspaceProfile\nmetadata: {{name: deep}}\nspec:\n  deep: {nested}\n"
    with catalog_root() as root:
        bad = root / "deep.yaml"
        bad.write_text(text)
        found = problems_of(bad)
        assert all(p.file in (str(bad), str(bad)) for p in found), found
        too_deep = [p for p in found if "levels deep" in p.message]
        if depth + 2 > MAX_DEPTH:  # spec.deep plus the lists
            (problem,) = too_deep
            assert problem.profile == "deep" and problem.field.startswith("spec.deep[0]"), problem
        else:
            assert not too_deep and located(found, bad, "deep", "spec.deep"), found


@pytest.mark.parametrize("flow", [True, False], ids=["flow", "block"])
def test_nesting_deeper_than_python_recursion_names_the_file(tmp_path: Path, flow: bool) -> None:
    """Thousands of levels: PyYAML's recursive composer hits RecursionError; still a CatalogError."""
    depth = 3000 if flow else 700  # block style: indentation grows the file quadratically
    if flow:
        text = "spec: " + "[" * depth + "]" * depth + "\n"
    else:
        text = "spec:\n" + "".join(f"{'  ' * (i + 1)}k:\n" for i in range(depth)) + f"{'  ' * (depth + 1)}x\n"
    bad = tmp_path / "deep.yaml"
    bad.write_text(text)
    assert len(text) < MAX_FILE_BYTES
    (problem,) = (p for p in problems_of(bad) if "not valid YAML" in p.message)
    assert problem.file == str(bad), problem


def test_nesting_deeper_than_python_recursion_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "deep.yaml"
    bad.write_text("metadata: {name: deep}\nspec:\n  deep: " + "[" * 3000 + "]" * 3000 + "\n")
    (problem,) = (p for p in problems_of(bad) if "not valid YAML" in p.message)
    assert "line 3" in problem.message or problem.field.startswith("spec.deep"), problem


# ------------------------------------------------------------------------------------ huge files
def test_a_5_mb_file_is_refused_by_size_without_being_parsed(tmp_path: Path) -> None:
    bad = tmp_path / "huge.yaml"
    doc = yaml.safe_dump(profile_doc("huge"))
    bad.write_text(doc + "# " + "x" * (5 * 1024 * 1024) + "\n")
    write_yaml(tmp_path / "ok.yaml", catalog_doc(), profile_doc("cpu"))
    started = time.monotonic()
    found = problems_of(tmp_path)
    assert time.monotonic() - started < 1
    assert [(p.file, p.profile, p.field) for p in found] == [(str(bad), None, "")]
    assert f"larger than {MAX_FILE_BYTES // 1024} KiB" in found[0].message


@pytest.mark.parametrize("extra", [0, 1], ids=["at-the-limit", "one-byte-over"])
def test_the_size_limit_is_exact(tmp_path: Path, extra: int) -> None:
    head = yaml.safe_dump_all([catalog_doc(), profile_doc("cpu")])
    padding = MAX_FILE_BYTES - len(head.encode()) - 2 + extra
    path = tmp_path / "c.yaml"
    path.write_text(head + "#" + "x" * padding + "\n")
    assert path.stat().st_size == MAX_FILE_BYTES + extra
    if extra:
        assert "larger than" in problems_of(path)[0].message
    else:
        assert [p.slug for p in load_catalog(path).profiles] == ["cpu"]


def test_many_plain_values_under_the_size_limit_hit_the_value_budget(tmp_path: Path) -> None:
    bad = tmp_path / "wide.yaml"
    values = ",".join(["0"] * (MAX_NODES + 10))
    bad.write_text(f"kind: WorkspaceProfile\nmetadata: {{name: wide}}\nspec: {{x: [{values}]}}\n")
    found = problems_of(bad)
    (problem,) = (p for p in found if "more than" in p.message)
    assert (problem.file, problem.profile) == (str(bad), "wide")
    assert re.fullmatch(r"spec\.x\[\d+\]", problem.field), problem


def test_the_value_budget_stops_the_parser_early(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuworkspace_spawner.catalog import parsing

    composed = [0]
    original = yaml.composer.Composer.compose_node

    def counting(self: Any, parent: Any, index: Any) -> Any:
        composed[0] += 1
        return original(self, parent, index)

    monkeypatch.setattr(parsing._Loader, "compose_node", counting)
    bad = tmp_path / "wide.yaml"
    bad.write_text(f"spec: {{x: [{','.join(['0'] * (MAX_NODES + 500))}]}}\n")
    problems_of(bad)
    assert composed[0] <= MAX_NODES + 100, f"composed {composed[0]} nodes for a budget of {MAX_NODES}"


# ------------------------------------------------------------------ CatalogSource: last good wins
def _junk(n: int) -> str:
    return "spec: [unclosed\n" + f"# {n}\n"


HOSTILE = st.sampled_from(["junk", "unknown-field", "wrong-type", "duplicate", "bomb", "huge", "deep"])


def _write_hostile(root: Path, kind: str, n: int) -> None:
    """Break the catalog in one of several ways; ``n`` makes the content unique."""
    profiles = root / "profiles.yaml"
    if kind == "junk":
        profiles.write_text(_junk(n))
    elif kind == "unknown-field":
        write_yaml(profiles, with_path(profile_doc("cpu"), "spec.colour", f"red-{n}"))
    elif kind == "wrong-type":
        write_yaml(profiles, with_path(profile_doc("cpu"), "spec.resources.limits.cpu", [n]))
    elif kind == "duplicate":
        write_yaml(profiles, profile_doc("cpu"), profile_doc("cpu", description=str(n)))
    elif kind == "bomb":
        profiles.write_text(_bomb(8, 10) + f"# {n}\n")
    elif kind == "huge":
        profiles.write_text(f"# {n}\n" + "#" * (MAX_FILE_BYTES + 1) + "\n")
    else:
        profiles.write_text(f"spec: {'[' * 50}x{']' * 50}\n# {n}\n")


def _write_good(root: Path, slugs: list[str], n: int = 0) -> None:
    write_yaml(root / "profiles.yaml", *(profile_doc(s, description=f"write {n}") for s in slugs))


class _Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000

    def touch(self, root: Path) -> None:
        """A new mtime, so the change is seen even within one clock tick."""
        self.now += 10
        for path in root.iterdir():
            os.utime(path, (self.now, self.now))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.one_of(HOSTILE, st.lists(SLUGS, min_size=1, max_size=3, unique=True)), min_size=1, max_size=6)
)
def test_catalog_source_serves_the_last_good_catalog_after_every_bad_write(
    writes: list[str | list[str]],
) -> None:
    with catalog_root() as root:
        write_yaml(root / "catalog.yaml", catalog_doc())
        _write_good(root, ["cpu"])
        errors: list[CatalogError] = []
        source = CatalogSource(root, on_reload_error=errors.append)
        good: Catalog = source.current()
        clock, bad_writes = _Clock(), 0
        for n, write in enumerate(writes):
            if isinstance(write, str):
                _write_hostile(root, write, n)
                bad_writes += 1
            else:  # new content each time: going back to the served content is the test below
                _write_good(root, write, n)
            clock.touch(root)
            served = source.current()
            if isinstance(write, str):
                assert served is good, write
                assert source.last_error is errors[-1]
                assert any(p.file == str(root / "profiles.yaml") for p in errors[-1].problems), errors[-1]
            else:
                assert [p.slug for p in served.profiles] == write and source.last_error is None
                good = served
            assert source.reload_failures == len(errors) == bad_writes
            assert source.current() is served  # asking again changes nothing


def test_reverting_a_bad_change_clears_the_error_and_rearms_reporting(catalog_dir: Path) -> None:
    errors: list[CatalogError] = []
    source = CatalogSource(catalog_dir, on_reload_error=errors.append)
    good = source.current()
    profiles = catalog_dir / "profiles.yaml"
    original, clock = profiles.read_text(), _Clock()
    for _ in range(2):  # break it, revert it; then the same bad change again
        profiles.write_text(_junk(0))
        clock.touch(catalog_dir)
        assert source.current() is good
        profiles.write_text(original)
        clock.touch(catalog_dir)
        assert source.current() is good
        assert source.last_error is None, "a reverted catalog still has a last_error"
    assert len(errors) == source.reload_failures == 2, "the second identical bad change was not reported"
