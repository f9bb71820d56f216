"""The fidelity ledger (docs/explanation/devcluster-fidelity.md) cites its sources and names real tests.

Every table on the page whose first column is "Behaviour the product relies on" is a ledger table. Each
of its rows must

- cite the real component in "Checked against": a repository as ``owner/name`` and at least one file in
  backticks (``pkg/kubelet/kubelet_pods.go``, ``Dockerfile``);
- name the product code and the devcluster modules that exist in this tree (backticked ``*.py`` /
  ``*.yaml`` paths);
- name at least one test as ``tests/….py::test_name`` in "Held by", and every named test must be a
  function (module level or in a class) of that file.

"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LEDGER = REPO / "docs" / "explanation" / "devcluster-fidelity.md"
HEADER = "Behaviour the product relies on"
COLUMNS = (HEADER, "Product", "Checked against", "Simulated by", "Held by")
COMPONENTS = (
    "API server",
    "Scheduler",
    "Kubelet",
    "kube-controller-manager",
    "CSI",
    "CDI",
    "KubeVirt",
    "Kueue",
    "NetworkFence",
    "dcgm-exporter",
    "JupyterHub and KubeSpawner",
)

_REPO_NAME = re.compile(r"(?<![\w./-])[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(?![\w/])")
_CODE = re.compile(r"`([^`]+)`")
_SOURCE_FILE = re.compile(r"^[\w.+/-]*(?:\.[A-Za-z]{1,6}|Dockerfile)$")
_OUR_PATH = re.compile(r"^[\w./-]+\.(?:py|ya?ml)$")
_TEST = re.compile(r"`(tests/[\w./-]+\.py)::(\w+)`")


@dataclass(frozen=True)
class Row:
    line: int
    section: str
    cells: dict[str, str]

    @property
    def tests(self) -> list[tuple[str, str]]:
        return _TEST.findall(self.cells["Held by"])


def _split(line: str) -> list[str]:
    """The cells of a Markdown table line (``\\|`` is a literal bar inside a cell)."""
    inner = line.strip().removeprefix("|").removesuffix("|")
    return [cell.replace("\\|", "|").strip() for cell in re.split(r"(?<!\\)\|", inner)]


def ledger_rows(text: str) -> list[Row]:
    """Every row of every ledger table, with its line number and the ``##`` section it is in."""
    rows: list[Row] = []
    section, header = "", None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("## "):
            section, header = line[3:].strip(), None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = _split(line)
        if header is None:
            header = cells if cells and cells[0] == HEADER else []
            if header and tuple(header) != COLUMNS:
                raise ValueError(f"line {number}: a ledger table needs the columns {COLUMNS}, not {header}")
            continue
        if not header or set("".join(cells)) <= set("-: "):
            continue
        if len(cells) != len(header):
            raise ValueError(f"line {number}: {len(cells)} cells where the header has {len(header)}")
        rows.append(Row(number, section, dict(zip(header, cells, strict=True))))
    return rows


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


def _our_file(path: str, column: str) -> Path:
    if column == "Simulated by":
        return REPO / "devcluster" / "gpuworkspace_devcluster" / path
    if path.startswith(("hub_config/", "helm-values/", "tests/")):
        return REPO / path
    return REPO / "gpuworkspace_spawner" / path


def row_problems(row: Row, repo: Path = REPO) -> list[str]:
    """What is wrong with one ledger row, each naming the line; empty when the row is sound."""
    where = f"line {row.line} ({row.section}: {row.cells[HEADER][:60]!r})"
    problems: list[str] = []
    source = row.cells["Checked against"]
    if not _REPO_NAME.search(_CODE.sub("", source)):
        problems.append(f"{where}: 'Checked against' names no repository (owner/name)")
    if not any(_SOURCE_FILE.match(code) for code in _CODE.findall(source)):
        problems.append(f"{where}: 'Checked against' names no file in backticks")
    for column in ("Product", "Simulated by"):
        for code in _CODE.findall(row.cells[column]):
            if _OUR_PATH.match(code) and not _our_file(code, column).exists():
                problems.append(f"{where}: {column} names {code}, which is not in the tree")
    if not row.tests:
        problems.append(f"{where}: 'Held by' names no test as `tests/<file>.py::<function>`")
    for file, function in row.tests:
        path = repo / file
        if not path.exists():
            problems.append(f"{where}: {file} does not exist")
            continue
        if function not in _functions(path):
            problems.append(f"{where}: {file} has no function {function}")
    return problems


def test_every_ledger_row_cites_its_source_and_names_tests_that_exist() -> None:
    rows = ledger_rows(LEDGER.read_text(encoding="utf-8"))
    problems = [problem for row in rows for problem in row_problems(row)]
    assert not problems, "\n".join(problems)


def test_the_ledger_covers_every_component_and_is_in_the_explanation_toctree() -> None:
    rows = ledger_rows(LEDGER.read_text(encoding="utf-8"))
    covered = {component for component in COMPONENTS for row in rows if row.section.startswith(component)}
    assert covered == set(COMPONENTS)
    assert len(rows) >= 60  # one row per relied-on behaviour; the page lists 68
    toctree = (REPO / "docs" / "explanation" / "index.md").read_text(encoding="utf-8")
    assert "\ndevcluster-fidelity\n" in toctree


_GOOD_SOURCE = "kubernetes/kubernetes `pkg/kubelet/kubelet_pods.go` `makeMounts`"
_TABLE = "## Kubelet\n\n| " + " | ".join(COLUMNS) + " |\n|---|---|---|---|---|\n"


def _row(behaviour: str = "Volumes at their mountPath", source: str = _GOOD_SOURCE, held: str = "") -> str:
    held = (
        held
        or "`tests/test_docs_fidelity.py::test_every_ledger_row_cites_its_source_and_names_tests_that_exist`"
    )
    return f"| {behaviour} | `manifests/pod.py` | {source} | `sim/nslaunch.py` | {held} |\n"


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        pytest.param(
            _row(source="the kubelet's `pkg/kubelet/kubelet_pods.go`"),
            "names no repository",
            id="no-repository",
        ),
        pytest.param(_row(source="kubernetes/kubernetes, makeMounts"), "names no file", id="no-file"),
        pytest.param(_row(held="`tests/devcluster/sim/test_pod_mounts.py`"), "names no test", id="no-test"),
        pytest.param(
            _row(held="`tests/devcluster/sim/test_nope.py::test_x`"), "does not exist", id="missing-file"
        ),
        pytest.param(
            _row(held="`tests/test_docs_fidelity.py::test_not_there`"),
            "has no function test_not_there",
            id="missing-test",
        ),
        pytest.param(
            _row().replace("`sim/nslaunch.py`", "`sim/no_such_module.py`"),
            "is not in the tree",
            id="unknown-module",
        ),
    ],
)
def test_the_check_names_what_is_wrong(row: str, problem: str) -> None:
    (parsed,) = ledger_rows(_TABLE + row)
    problems = row_problems(parsed)
    assert len(problems) == 1 and problem in problems[0] and "line 5 (Kubelet" in problems[0]


def test_a_malformed_table_is_refused_with_its_line() -> None:
    with pytest.raises(ValueError, match="line 5: 4 cells where the header has 5"):
        ledger_rows(_TABLE + "| a | b | c | d |\n")
    with pytest.raises(ValueError, match="line 3: a ledger table needs the columns"):
        ledger_rows("## X\n\n| " + HEADER + " | Source |\n|---|---|\n")
