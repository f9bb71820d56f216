"""The architecture page (docs/explanation/architecture.md) is drawn from the tree and stays so.

- Every path it names exists: a backticked path (``runtimes/vm.py``, ``k8s/``, ``services/*/app.py``,
  read from the repository root, the package or the devcluster's distribution; a glob must match
  something) and every file or folder name in its text diagram.
- It names every import-linter contract of ``setup.cfg`` and ``devcluster/setup.cfg`` by its id, so a
  contract added or renamed without the page fails here.
"""

from __future__ import annotations

import configparser
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "explanation" / "architecture.md"
CONFIGS = (REPO / "setup.cfg", REPO / "devcluster" / "setup.cfg")
# where a path on the page may be read from: the repository, the package, the devcluster's distribution
ROOTS = ("", "gpuworkspace_spawner", "devcluster", "devcluster/gpuworkspace_devcluster")
# not the tree: version control, environments, dependencies and build output
SKIPPED = {".git", ".venv", "node_modules", "jupyter-data", "build", "dist", "_build", "__pycache__"}

_CODE = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"^[\w.*-]+(?:/[\w.*-]+)*/?$")
_SUFFIXES = (".py", ".md", ".cfg", ".sh", ".html", ".yaml", ".toml", ".ts", ".json")
_FENCE = re.compile(r"^```text\n(.*?)^```", re.DOTALL | re.MULTILINE)
_DIAGRAM_NAME = re.compile(r"(?<![\w*/.-])[\w-]+(?:/[\w-]+)*(?:\.py|/)(?![\w*])")


def _names(repo: Path) -> set[str]:
    """Every file and folder name in the tree (what a bare ``container.py`` may refer to)."""
    names: set[str] = set()
    for _, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in SKIPPED]
        names.update(dirs, files)
    return names


def _is_path(code: str) -> bool:
    if not _PATH.match(code) or code.startswith(".") or code.endswith("."):
        return False
    return "/" in code or code.endswith(_SUFFIXES)


def _exists(path: str, repo: Path, names: set[str]) -> bool:
    if "/" not in path.rstrip("/"):
        return path.rstrip("/") in names
    return any(next((repo / root).glob(path.rstrip("/")), None) is not None for root in ROOTS)


def page_paths(text: str) -> list[tuple[int, str]]:
    """``(line, path)`` for every path the page names, in backticks or in a text diagram."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        found += [(number, code) for code in _CODE.findall(line) if _is_path(code)]
    for block in _FENCE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        for offset, line in enumerate(block.group(1).splitlines()):
            found += [(first + offset, name) for name in _DIAGRAM_NAME.findall(line)]
    return found


def missing_paths(text: str, repo: Path = REPO) -> list[str]:
    names = _names(repo)
    return [
        f"line {number}: {path} is not in the tree"
        for number, path in page_paths(text)
        if not _exists(path, repo, names)
    ]


def contract_ids(*configs: Path) -> list[str]:
    ids: list[str] = []
    for path in configs:
        parser = configparser.ConfigParser()
        parser.read(path, encoding="utf-8")
        ids += [s.removeprefix("importlinter:contract:") for s in parser.sections() if ":contract:" in s]
    return ids


def missing_contracts(text: str, ids: list[str]) -> list[str]:
    named = set(_CODE.findall(text))
    return [f"the page does not name the contract {cid}" for cid in ids if cid not in named]


def test_every_path_the_page_names_is_in_the_tree() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert len(page_paths(text)) >= 100  # the page names its components by path
    problems = missing_paths(text)
    assert not problems, "\n".join(problems)


def test_the_page_names_every_import_contract() -> None:
    ids = contract_ids(*CONFIGS)
    assert {"one-way-layers", "pure-core-layers", "devcluster-stands-alone"} <= set(ids)
    problems = missing_contracts(PAGE.read_text(encoding="utf-8"), ids)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("page", "problem"),
    [
        pytest.param("See `runtimes/batch.py`.\n", "line 1: runtimes/batch.py", id="backticked-module"),
        pytest.param("Intro.\n\nThe `services/kit/` folder.\n", "line 3: services/kit/", id="folder"),
        pytest.param("All of `services/*/kit.py`.\n", "line 1: services/*/kit.py", id="glob-without-match"),
        pytest.param("\n```text\n k8s/  gateway.py  watches.py\n```\n", "line 3: watches.py", id="diagram"),
    ],
)
def test_a_path_not_in_the_tree_is_reported_with_its_line(page: str, problem: str) -> None:
    problems = missing_paths(page)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_paths_in_the_tree_and_words_that_are_no_paths_pass() -> None:
    page = (
        "`runtimes/vm.py`, `k8s/`, `services/*/app.py`, `setup.cfg`, `sim/kubelet.py`, `choose_runtime`,\n"
        "`runStrategy: Halted`, `gpuworkspace.dev/disk=home`, `.venv/bin/python x`\n"
        "```text\n spawner.py ── spawnerports.py  services/*.py  lifecycle/ │ jobs/\n```\n"
    )
    assert missing_paths(page) == []


def test_a_contract_left_out_is_reported() -> None:
    assert missing_contracts("`one-way-layers` and one-way-layers-2", ["one-way-layers", "services"]) == [
        "the page does not name the contract services"
    ]
