"""The combined benchmark table (``tests/benchmarks/report.py``): rows in, Markdown out; no benchmark runs."""

from __future__ import annotations

import datetime
import math
from pathlib import Path

import pytest

from tests.benchmarks import report
from tests.benchmarks.report import Row

SPAWN = Row("bench_spawn", "median spawn time", 5.77, 6.44, "s", "<= 1.05x peer", True, "KubeSpawner")
CULL = Row("bench_culler", "requests per running server", 2.5, 0.23, "", "<= 2", False, "idle-culler")
RSS = Row("bench_attribution", "RSS peak", 123.456, None, "MiB", "< 200 MiB", True)


@pytest.fixture
def rows_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "rows.jsonl"
    monkeypatch.setenv(report.ENV, str(path))
    return path


def test_emit_is_a_no_op_without_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(report.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    report.emit([SPAWN])
    assert list(tmp_path.iterdir()) == []


def test_emit_appends_and_read_rows_round_trips(rows_file: Path) -> None:
    report.emit([SPAWN, CULL])
    report.emit(r for r in [RSS, Row("bench_x", "nan", math.nan)])
    rows = report.read_rows(rows_file)
    assert rows[:3] == [SPAWN, CULL, RSS]
    assert math.isnan(rows[3].ours)
    assert report.read_rows(rows_file.with_name("absent.jsonl")) == []


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(None, "-", id="unknown"),
        pytest.param(math.nan, "-", id="nan"),
        pytest.param(12345.6, "12,346", id="thousands"),
        pytest.param(123.4, "123", id="hundreds"),
        pytest.param(56.78, "56.8", id="tens"),
        pytest.param(5.772, "5.77", id="units"),
        pytest.param(0.01234, "0.0123", id="small"),
        pytest.param(3.0, "3", id="integer"),
        pytest.param(math.inf, "inf", id="inf"),
    ],
)
def test_number(value: float | None, text: str) -> None:
    assert report.number(value) == text


def test_ratio_is_ours_over_peer_and_empty_without_a_peer() -> None:
    assert report.ratio(SPAWN) == "0.90x"
    assert report.ratio(Row("b", "f", 0.05, 20.0)) == "0.0025x"
    assert report.ratio(RSS) == ""
    assert report.ratio(Row("b", "f", 1.0, 0.0)) == ""
    assert report.ratio(Row("b", "f", math.nan, 2.0)) == ""


def test_markdown_table() -> None:
    two = Row("bench_spawn", "requests | cycle", 40.0, 41.0)
    lines = report.markdown_table([SPAWN, two, CULL, RSS]).splitlines()
    assert lines[0] == "| benchmark | figure | ours | peer | ratio | goal | met |"
    assert lines[1] == "|---|---|---:|---:|---:|---|---|"
    assert lines[2] == "| `bench_spawn` | median spawn time | 5.77 s | 6.44 s | 0.90x | <= 1.05x peer | yes |"
    assert lines[3] == "|  | requests \\| cycle | 40 | 41 | 0.98x |  |  |"  # name once; pipes escaped
    assert (
        lines[4] == "| `bench_culler` | requests per running server | 2.50 | 0.23 | 10.9x | <= 2 | **no** |"
    )
    assert lines[5] == "| `bench_attribution` | RSS peak | 123 MiB |  |  | < 200 MiB | yes |"


def test_summary_names_peers_missed_goals_and_missing_benchmarks() -> None:
    text = report.summary([SPAWN, CULL, RSS], expected=["bench_spawn", "bench_culler", "bench_vm_spawn"])
    assert "- `bench_spawn`: KubeSpawner\n- `bench_culler`: idle-culler" in text
    assert "Goals not met: `bench_culler` requests per running server." in text
    assert "No rows from: `bench_vm_spawn`" in text
    assert report.summary([]).startswith("(no benchmark emitted a row)")


def test_page_says_when_where_and_how() -> None:
    facts = report.machine_facts(datetime.datetime(2025, 1, 2, 3, 4, tzinfo=datetime.UTC))
    text = report.page([SPAWN], ["bench_spawn"], facts, "make bench BENCH_REPORT=x.md")
    assert text.startswith("# Benchmarks\n")
    assert "Measured 2025-01-02 03:04 UTC" in text
    assert f"{facts['cpus']} CPUs" in text
    assert facts["python"] in text
    assert "Command: `make bench BENCH_REPORT=x.md`" in text
    assert "| `bench_spawn` | median spawn time |" in text
    assert "## How this page is generated" in text


def test_main_prints_the_table_and_writes_the_page(
    rows_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report.emit([SPAWN])
    page = tmp_path / "benchmarks.md"
    assert report.main([str(rows_file), "--expected", "bench_spawn", "--write", str(page)]) == 0
    out = capsys.readouterr().out
    assert "| `bench_spawn` | median spawn time | 5.77 s |" in out
    assert f"wrote {page}" in out
    assert "| `bench_spawn` | median spawn time | 5.77 s |" in page.read_text()
