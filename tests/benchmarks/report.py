"""One table for every benchmark: the rows each ``bench_*.py`` emits, combined into Markdown.

Each benchmark still prints its own detailed table; next to it, it calls :func:`emit` with its headline
rows (the figures with a goal, and the key comparisons with a peer). :func:`emit` appends them as JSON
lines to the file named by ``GPUWS_BENCH_ROWS`` and does nothing when that is unset, so a benchmark run
on its own behaves as before. ``make bench`` sets it to a fresh file, runs every benchmark, then runs
this module, which prints one Markdown table (benchmark, figure, ours, peer, ratio, goal, met) and,
with ``--write PATH``, (re)generates ``docs/reference/benchmarks.md`` with a header saying when, where
and how the figures were measured::

    python -m tests.benchmarks.report ROWS [--expected bench_a bench_b ...] [--write PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ENV = "GPUWS_BENCH_ROWS"
COLUMNS = ("benchmark", "figure", "ours", "peer", "ratio", "goal", "met")


@dataclass(frozen=True)
class Row:
    """A headline figure of one benchmark. ``goal`` is the goal as text (``"<= 10 s"``), ``met`` the
    benchmark's own verdict on it; ``peer_name`` says what the peer figure is (listed under the table)."""

    benchmark: str
    figure: str
    ours: float
    peer: float | None = None
    unit: str = ""
    goal: str = ""
    met: bool | None = None
    peer_name: str = ""


def emit(rows: Iterable[Row]) -> None:
    """Append ``rows`` as JSON lines to ``$GPUWS_BENCH_ROWS``; nothing happens when it is unset."""
    path = os.environ.get(ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(asdict(row), allow_nan=True) + "\n")


def read_rows(path: Path) -> list[Row]:
    """The rows in a ``GPUWS_BENCH_ROWS`` file, in the order they were emitted (empty if it is absent)."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [Row(**json.loads(line)) for line in lines if line.strip()]


# ------------------------------------------------------------------------------------------ formatting
def number(v: float | None) -> str:
    """Three significant figures or so: ``1,234``, ``56.8``, ``5.77``, ``0.0123``; ``-`` when unknown."""
    if v is None or math.isnan(v):
        return "-"
    if math.isinf(v):
        return "inf"
    if float(v).is_integer() or abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) >= 0.1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def with_unit(v: float | None, unit: str) -> str:
    text = number(v)
    return f"{text} {unit}" if unit and text != "-" else text


def ratio(row: Row) -> str:
    if row.peer is None or not row.peer or math.isnan(row.peer) or math.isnan(row.ours):
        return ""
    return f"{number(row.ours / row.peer)}x"


def verdict(met: bool | None) -> str:
    return "" if met is None else ("yes" if met else "**no**")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[Row]) -> str:
    """One Markdown table of ``rows``; the benchmark's name is given on its first row only."""
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join(["---"] * 2 + ["---:"] * 3 + ["---"] * 2) + "|",
    ]
    previous = ""
    for r in rows:
        name = f"`{r.benchmark}`" if r.benchmark != previous else ""
        previous = r.benchmark
        peer = with_unit(r.peer, r.unit) if r.peer is not None else ""
        cells = [name, r.figure, with_unit(r.ours, r.unit), peer, ratio(r), r.goal, verdict(r.met)]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def peers(rows: Sequence[Row]) -> list[str]:
    """``benchmark: peer`` for every distinct peer named, in order."""
    seen: dict[tuple[str, str], None] = {}
    for r in rows:
        if r.peer_name:
            seen.setdefault((r.benchmark, r.peer_name), None)
    return [f"`{b}`: {p}" for b, p in seen]


def missing(rows: Sequence[Row], expected: Sequence[str]) -> list[str]:
    ran = {r.benchmark for r in rows}
    return [b for b in expected if b not in ran]


def summary(rows: Sequence[Row], expected: Sequence[str] = ()) -> str:
    """The table, the peers it compares against, goals missed and benchmarks without rows."""
    parts = [markdown_table(rows) if rows else "(no benchmark emitted a row)"]
    named = peers(rows)
    if named:
        parts.append(
            "Peers (the `peer` column; ratio = ours / peer):\n\n" + "\n".join(f"- {p}" for p in named)
        )
    failed = [r for r in rows if r.met is False]
    if failed:
        parts.append("Goals not met: " + "; ".join(f"`{r.benchmark}` {r.figure}" for r in failed) + ".")
    absent = missing(rows, expected)
    if absent:
        parts.append(
            "No rows from: "
            + ", ".join(f"`{b}`" for b in absent)
            + " (not run, or it failed before its table)."
        )
    return "\n\n".join(parts)


# ------------------------------------------------------------------------------------------ the doc page
def machine_facts(now: datetime.datetime | None = None) -> dict[str, Any]:
    when = now or datetime.datetime.now(datetime.UTC)
    return {
        "date": when.strftime("%Y-%m-%d %H:%M UTC"),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "cpus": os.cpu_count() or 0,
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
    }


PAGE_INTRO = """\
# Benchmarks

<!-- Generated by `python -m tests.benchmarks.report --write docs/reference/benchmarks.md`
     (`make bench BENCH_REPORT=docs/reference/benchmarks.md`); edit tests/benchmarks/report.py, not this file. -->

The headline figures of every benchmark in `tests/benchmarks/`, from one run of `make bench`: our
figure, the peer measured in the same run on the same machine, the ratio ours / peer, and the goal with
whether this run met it. Each benchmark also prints a fuller table of its own; its module docstring
says exactly what it measures.
"""

PAGE_HOW = """\
## How this page is generated

```console
$ make bench BENCH_REPORT=docs/reference/benchmarks.md
```

`make bench` points `GPUWS_BENCH_ROWS` at a fresh temporary file and runs every
`tests/benchmarks/bench_*.py` as `python -m tests.benchmarks.<name>`; each prints its own table and
appends its headline rows to that file (`tests.benchmarks.report.emit`). Then
`python -m tests.benchmarks.report` prints the combined Markdown table above; with `BENCH_REPORT` it
also rewrites this page. `make bench BENCHMARKS="tests/benchmarks/bench_culler.py"` runs a subset;
`BENCH_ROWS=FILE` keeps the rows, and `python -m tests.benchmarks.report FILE --write PATH` renders
them again. A benchmark that fails still lets the others run; `make bench` then exits non-zero and
the table names the benchmarks that gave no rows.
Several benchmarks start a devcluster, and only one may run per machine: on a shared machine add
`BENCH_LOCK=/tmp/gpuws-devcluster.lock`, which runs each benchmark under `flock` on that file.

Benchmarks have no pass/fail thresholds and `make test` never runs them. Figures from a shared,
noisy machine move by ±10 % or more between runs (the spawn benchmarks interleave their peer and
ours for that reason); compare the ratios, measured side by side, rather than absolute times.

## Concurrent spawns (P4)

`bench_concurrent_spawn` starts N servers (default 200, `--users`) through the hub at the same moment,
for KubeSpawner and then for ours, on one devcluster in one run: N threads each `POST
/hub/api/users/<u>/server`, one poll of `GET /hub/api/users` every 0.5 s sees them ready; it reports
p50, p95 and max time from POST to ready, failed spawns with the hub's reason, and the Kubernetes API
requests during the burst by verb. Goal: p95 at most 1.10x KubeSpawner's, no failures. Both spawners
run the devcluster's lite single-user image (one shared listener process per node instead of 200
jupyter-server processes) with 10m CPU / 64Mi requested on a node pool spanning every node (the CPU node
holds 110 pods); ours reads a catalog the benchmark writes into its work directory, KubeSpawner gets the
same profile as its `profile_list`. For the benchmark only, the hub's `concurrent_spawn_limit` and
`active_server_limit` are raised to N (JupyterHub's default of 100 concurrent spawns would refuse half of
the burst). Its module docstring has the details.
"""


def page(rows: Sequence[Row], expected: Sequence[str], facts: dict[str, Any], command: str) -> str:
    measured = (
        f"## This run\n\n"
        f"Measured {facts['date']} on {facts['platform']}, {facts['cpus']} CPUs, {facts['python']}, "
        "a shared machine whose other load is not controlled: read the figures as indications, and the "
        f"ratios (ours and peer measured in the same run) as the comparison.\nCommand: `{command}`.\n"
    )
    return "\n".join([PAGE_INTRO, measured, summary(rows, expected), "", PAGE_HOW])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests.benchmarks.report", description=__doc__.split("\n")[0])
    parser.add_argument("rows", type=Path, help=f"the JSON-lines file the benchmarks wrote (${ENV})")
    parser.add_argument(
        "--expected", nargs="*", default=[], help="benchmark names that should have rows (named if absent)"
    )
    parser.add_argument("--write", type=Path, help="also (re)generate this Markdown page")
    parser.add_argument("--command", default="make bench", help="the command named on the page")
    opts = parser.parse_args(argv)
    rows = read_rows(opts.rows)
    print(summary(rows, opts.expected))
    if opts.write:
        opts.write.write_text(page(rows, opts.expected, machine_facts(), opts.command), encoding="utf-8")
        print(f"\nbench report: wrote {opts.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
