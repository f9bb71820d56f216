"""Whatever is in the files, load_catalog either returns a Catalog or raises CatalogError."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuworkspace_spawner.catalog import Catalog, CatalogError, load_catalog

from .conftest import catalog_doc, gpu_doc, profile_doc

YAML_BITS = st.sampled_from(
    [
        "apiVersion: gpuworkspace.dev/v1alpha1\n",
        "kind: WorkspaceProfile\n",
        "kind: WorkspaceCatalog\n",
        "metadata:\n  name: p\n",
        "spec:\n",
        "  displayName: x\n",
        "  image: a/b\n",
        "---\n",
        "- ",
        ": ",
        "&a ",
        "*a ",
        "!!binary ",
        "!!set ",
        "!!timestamp 2026-13-45 ",
        "2026-13-45",
        "{",
        "}",
        "[",
        "]",
        "? ",
        "|\n",
        "'",
        '"',
        "\t",
        "\n",
        "  ",
        "<<: *a\n",
        "0x1F",
        "1e999",
        ".nan",
        "~",
        "%YAML 1.1\n",
        "\\x00",
        "\ufeff",
    ]
)
JUNK = st.one_of(st.text(max_size=300), st.lists(YAML_BITS, max_size=40).map("".join))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(
        ["1", "0", "2Gi", "-1", "1e9999", "90m", "0s", "/data", "../x", "vm", "mig", "gpu", "jupyterlab"]
    ),
)
TREES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
PATHS = st.sampled_from(
    [
        ("spec",),
        ("metadata",),
        ("metadata", "name"),
        ("spec", "resources"),
        ("spec", "resources", "limits"),
        ("spec", "placement"),
        ("spec", "storage"),
        ("spec", "storage", "home"),
        ("spec", "session"),
        ("spec", "ide"),
        ("spec", "access"),
        ("spec", "vm"),
        ("spec", "storage", "teamDirectories"),
        ("spec", "security"),
        ("apiVersion",),
        ("kind",),
        ("spec", "nodePools"),
        ("spec", "version"),
        ("spec", "resources", "limits", "cpu"),
        ("spec", "resources", "requests", "nvidia.com/gpu"),
        ("spec", "session", "warnings"),
        ("spec", "session", "idleTimeout"),
        ("spec", "ide", "choices"),
        ("spec", "storage", "home", "size"),
        ("spec", "storage", "scratch", "mountPath"),
        ("spec", "storage", "datasets"),
        ("spec", "storage", "datasets", "subPath"),
        ("spec", "image"),
        ("spec", "placement", "gpuMode"),
        ("spec", "placement", "nodePool"),
        ("spec", "runtime"),
    ]
)


def _load(text: str) -> None:
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "c.yaml").write_text(text)
        try:
            assert isinstance(load_catalog(root), Catalog)
        except CatalogError as exc:
            assert exc.problems and all(str(p) for p in exc.problems)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JUNK)
def test_junk_text_only_raises_catalog_error(text: str) -> None:
    _load(text)


def _plant(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    target: Any = doc
    for key in path[:-1]:
        if not isinstance(target, dict):
            return doc
        target = target.setdefault(key, {})
    if isinstance(target, dict):
        target[path[-1]] = value
    return doc


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), PATHS, TREES), max_size=4))
def test_random_values_in_valid_documents_only_raise_catalog_error(
    plants: list[tuple[int, tuple[str, ...], Any]],
) -> None:
    docs: list[dict[str, Any]] = [
        catalog_doc(nodePools={"gpu": {}, "cpu": {}}),
        profile_doc("cpu"),
        gpu_doc("gpu"),
    ]
    for index, path, value in plants:
        _plant(docs[index], path, value)
    _load(yaml.safe_dump_all(docs))
