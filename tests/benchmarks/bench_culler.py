"""Culler benchmark: ``gpuworkspace-culler``'s cycles against jupyterhub-idle-culler's at 1,000 servers.

Run as a script (``make bench`` or ``python -m tests.benchmarks.bench_culler``); not a pytest test,
no pass/fail thresholds: it prints a table with the issue's goals (at most 10 s per cycle, at most 2
HTTP requests per running server) and whether this machine met them. ``--servers 100 --rounds 1`` is
a quick run. No devcluster is needed.

How it measures
  * The world: :mod:`.culler_farm`, in its own process (aiohttp, one port): a fake JupyterHub REST API
    that mirrors JupyterHub 6.1's user list (``state=ready``, offset/limit pagination with the
    ``application/jupyterhub-pagination+json`` envelope, pages of 50 by default and 200 at most) and
    stop (``DELETE .../server`` answers 202; the server is gone ``--stop-s`` later), ``--servers``
    lightweight single-user servers behind the "proxy" on the same port (``/user/{name}/api/status``,
    ``kernels``, ``terminals``, ``sessions`` in jupyter_server's shapes), and the attribution
    service's ``api/v1/workspaces``. Each user has one running default server, seeded: 80 % active
    (activity in the last 20 minutes), 10 % idle (2-6 hours, idle kernel, idle GPU), 10 % busy (a busy
    kernel whose last message is 2-6 hours old, GPU busy; ``--mix`` changes the shares); half of
    each kind hold a GPU. Every hub request waits ``--hub-latency-ms`` (5), every single-user
    request ``--server-latency-ms`` (5) and every DELETE ``--stop-latency-ms`` (as the hub's)
    (``asyncio.sleep``: a network hop and the other side's work, so that concurrency matters; a real
    hub answers a DELETE only once the spawner stopped, or with 202 after 10 s, so raise
    ``--stop-latency-ms`` to see what sequential stops cost). The idle timeout is ``--idle-timeout``
    (1 h) for both, so the idle and busy servers are past it.
  * The cullers, each as a subprocess against a freshly reset farm, at the same ``--concurrency``
    (10) and the same latencies; ``--rounds`` rounds (default 3) of every variant in turn, median
    per figure:
      - peer: ``python -m jupyterhub_idle_culler --url=<farm>/hub/api --timeout=3600
        --cull-every=86400 --concurrency=10`` with ``JUPYTERHUB_API_TOKEN``; it culls once at start
        (then would wait a day). It only reads the hub: ``GET /hub/api/`` (version), the user list
        page by page, then a DELETE per server past the timeout; it awaits users one by one, so its
        DELETEs are sequential whatever ``--concurrency`` says. Its cycle has no end marker in its log
        at INFO level, so the end is read from the farm: every DELETE it is expected to make (the
        servers whose hub ``last_activity`` is past the timeout) has been answered, nothing is in
        flight, and ``--quiet-s`` (1 s) passed with no request; if it makes fewer DELETEs, a quiet
        of 5 s ends the cycle instead. The process is then terminated.
      - ours: ``python -m gpuworkspace_spawner.services.culler.app --once --concurrency 10
        --idle-timeout 3600 --proxy-url <farm> ...`` with ``JUPYTERHUB_API_URL`` and
        ``JUPYTERHUB_API_TOKEN``; it runs one cycle, prints its JSON report and exits. A fresh
        process remembers nothing, so its first cycle asks every server (``api/status``) whose start
        is older than the idle timeout less the first lead time: the hub's ``last_activity`` no longer
        spares that request, because in a real deployment our own probes move it (the proxy). That
        first cycle is the costly one; the rows below say which cycle each figure is. Variants: with
        ``--warn-before=none`` (no staged warnings, so that it stops in this one cycle, like the peer:
        the comparison row); the same with the attribution source on (one more request per cycle; but
        in a fresh process's first cycle every GPU workspace counts as GPU-active since the process
        started, by design of ``culler.gpusource``, so it probes and stops only the CPU-only servers);
        and with the default staged warnings, run for ``--cycles`` (2) cycles ``--stop-s`` + 0.5 s
        apart (``--cycles N --interval S``): the first only warns; a later one is the steady state,
        where a server is asked again only when what it showed before no longer keeps it (here: the
        warned idle servers, one ``api/status`` each). Its figures are per cycle, from its own reports
        (``"cycles"`` in the ``--once`` JSON), since the farm's counts span all its cycles.
  * Cycle time (the goal's figure): from the farm's arrival of the culler's first request to the
    end of its last answer (the same clock and rule for both; process start-up and imports are not
    in it). Ours also reports its own ``finished_at - started_at``, shown apart.
  * Requests: every request the farm answered during the run, by kind, divided by the running
    servers at the start (all of them are ready). "hub only" leaves out the single-user servers and
    the attribution service. "server GETs counted as activity": single-user GETs without
    ``no_track_activity``, which jupyter_server would record as the server's activity (must be 0).
  * Stops: the DELETEs made, by the server's seeded kind: a stop of a *busy* server is the false stop
    of idle-culler #55 (the hub's ``last_activity`` alone says idle).
  * CPU: the culler process's utime + stime (``/proc/<pid>/stat``; for ours, which exits, the waited
    child's rusage) minus the value the farm read at its first request, so start-up is left out.

This machine has few cores: the farm, the culler and this script share them, as they do for the peer.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import report as bench_report
from .culler_farm import ATTRIBUTION_PREFIX, TOKEN, Farm, FarmConfig, proc_cpu_s

GOAL_CYCLE_S, GOAL_REQUESTS = 10.0, 2.0
PEER = "peer"
OURS, OURS_ATTR, OURS_WARN = "ours", "ours+attribution", "ours, staged warnings"
LABELS = {
    PEER: "jupyterhub-idle-culler",
    OURS: "ours (no warnings: stops now)",
    OURS_ATTR: "ours + attribution (no warnings)",
    OURS_WARN: "ours, default staged warnings",
}
APP = "gpuworkspace_spawner.services.culler.app"
SERVER_KINDS = (
    "server status",
    "server kernels",
    "server terminals",
    "server sessions",
    "server checkpoint",
    "server other",
)
HUB_KINDS = ("hub list", "hub stop", "hub other")


# ------------------------------------------------------------------------------------------ a run
@dataclass
class Run:
    variant: str
    servers: int
    cycle_s: float  # farm: first request's arrival to the last answer's end
    counts: dict[str, int]
    stopped: dict[str, int]
    cpu_cycle_s: float | None
    cpu_total_s: float | None
    report: dict[str, Any] = field(default_factory=dict)  # ours: the --once JSON
    other_paths: dict[str, int] = field(default_factory=dict)
    note: str = ""
    command: str = ""
    tracked: int = 0  # single-user GETs the server would count as activity (no no_track_activity)
    cycles: list[dict[str, Any]] = field(default_factory=list)  # ours: each cycle's own report

    def cycle(self, n: int, figure: str) -> float | None:
        """A figure of cycle ``n`` (0: the first, -1: the last) by ours' own report."""
        if not self.cycles or n >= len(self.cycles):
            return None
        value = self.cycles[n].get(figure)
        return float(value) if isinstance(value, int | float) else None

    @property
    def requests(self) -> int:
        return sum(self.counts.values())

    @property
    def hub_requests(self) -> int:
        return sum(self.counts.get(k, 0) for k in HUB_KINDS)

    @property
    def stops(self) -> int:
        return sum(self.stopped.values())

    @property
    def reported_s(self) -> float | None:
        start, end = self.report.get("started_at"), self.report.get("finished_at")
        if not (start and end):
            return None
        from datetime import datetime

        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


class Culler:
    """A culler subprocess in its own process group, logging to a file; killed on any exit path."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        self.cmd, self.log_path = cmd, log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self._out = open(log.with_suffix(".out"), "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=self._out, stderr=self._log, start_new_session=True
        )

    def wait_rusage_cpu(self, timeout_s: float) -> float:
        """Wait for the exit; the CPU seconds of the process (and its waited children)."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.proc.wait(timeout_s)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(10)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()
        self._out.close()

    def stdout(self) -> str:
        return self.log_path.with_suffix(".out").read_text(errors="replace")

    def tail(self, n: int = 25) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


def wait_until(cond: Callable[[], bool], limit_s: float, what: str, culler: Culler) -> None:
    t0 = time.monotonic()
    while not cond():
        if culler.proc.poll() is not None and culler.proc.returncode != 0:
            raise RuntimeError(f"{what}: the culler exited {culler.proc.returncode}:\n{culler.tail()}")
        if time.monotonic() - t0 > limit_s:
            raise RuntimeError(f"{what}: not within {limit_s:.0f} s:\n{culler.tail()}")
        time.sleep(0.05)


def run_peer(farm: Farm, opts: argparse.Namespace, tmp: Path, k: int) -> Run:
    fresh = farm.reset()
    expected = fresh["kinds"].get("idle", 0) + fresh["kinds"].get("busy", 0)
    cmd = [
        sys.executable,
        "-m",
        "jupyterhub_idle_culler",
        f"--url={farm.base}/hub/api",
        f"--timeout={opts.idle_timeout}",
        "--cull-every=86400",
        f"--concurrency={opts.concurrency}",
    ]
    env = {**os.environ, "JUPYTERHUB_API_TOKEN": TOKEN}
    culler = Culler(cmd, env, tmp, tmp / f"peer-{k}.log")
    try:
        farm.watch(culler.proc.pid)
        st: dict[str, Any] = {}

        def done() -> bool:
            nonlocal st
            st = farm.stats()
            if st["first"] is None or st["in_flight"]:
                return False
            quiet = st["now"] - st["last_end"]
            stops = sum(st["stopped"].values())
            return (stops >= expected and quiet >= opts.quiet_s) or quiet >= max(5.0, opts.quiet_s)

        wait_until(done, opts.limit_s, "peer cycle", culler)
        cpu_end = proc_cpu_s(culler.proc.pid)
    finally:
        culler.stop()
    note = "" if sum(st["stopped"].values()) >= expected else f"made fewer stops than the {expected} expected"
    return Run(
        PEER,
        st["servers"],
        st["last_end"] - st["first"],
        st["counts"],
        st["stopped"],
        _minus(cpu_end, st["cpu_at_first"]),
        cpu_end,
        other_paths=st["other_paths"],
        note=note,
        command=shown(culler.cmd),
    )


def ours_command(farm: Farm, opts: argparse.Namespace, variant: str) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        APP,
        "--once",
        f"--concurrency={opts.concurrency}",
        f"--idle-timeout={opts.idle_timeout}",
        f"--proxy-url={farm.base}",
    ]
    if variant != OURS_WARN:
        cmd.append("--warn-before=none")
    else:  # then a steady-state cycle (or more), once the first cycle's stops are done
        cmd += [f"--cycles={opts.cycles}", f"--interval={opts.stop_s + 0.5:g}"]
    attribution = f"{farm.base}{ATTRIBUTION_PREFIX}" if variant == OURS_ATTR else ""
    cmd.append(f"--attribution-url={attribution}")
    return cmd + list(opts.ours_arg)


def run_ours(farm: Farm, opts: argparse.Namespace, tmp: Path, k: int, variant: str) -> Run:
    farm.reset()
    env = {
        **os.environ,
        "JUPYTERHUB_API_URL": f"{farm.base}/hub/api",
        "JUPYTERHUB_API_TOKEN": TOKEN,
        "JUPYTERHUB_SERVICE_NAME": "gpuworkspace-culler",
    }
    slug = variant.replace(" ", "").replace(",", "-").replace("+", "-")
    culler = Culler(ours_command(farm, opts, variant), env, tmp, tmp / f"{slug}-{k}.log")
    try:
        farm.watch(culler.proc.pid)
        try:
            cpu_total = culler.wait_rusage_cpu(opts.limit_s)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{variant}: no exit within {opts.limit_s:.0f} s:\n{culler.tail()}") from None
        if culler.proc.returncode != 0:
            raise RuntimeError(f"{variant}: exit {culler.proc.returncode}:\n{culler.tail()}")
        st = farm.stats()
        printed = last_json(culler.stdout())
        report = printed.get("report") or printed
    finally:
        culler.stop()
    if st["first"] is None:
        raise RuntimeError(f"{variant}: it made no request:\n{culler.tail()}")
    return Run(
        variant,
        st["servers"],
        st["last_end"] - st["first"],
        st["counts"],
        st["stopped"],
        _minus(cpu_total, st["cpu_at_first"]),
        cpu_total,
        report=report,
        other_paths=st["other_paths"],
        command=shown(culler.cmd),
        tracked=st["tracked"],
        cycles=list(printed.get("cycles") or []),
    )


def shown(cmd: Sequence[str]) -> str:
    return " ".join(["python", *cmd[1:]])


def last_json(text: str) -> dict[str, Any]:
    """The last JSON object in ``text`` (the --once report; a whole document or the last line)."""
    try:
        doc = json.loads(text)
        return doc if isinstance(doc, dict) else {}
    except ValueError:
        pass
    for raw in reversed(text.splitlines()):
        line = raw.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    return {}


def _minus(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


# ------------------------------------------------------------------------------------ the figures
def med(values: Sequence[float | None]) -> float:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else math.nan


@dataclass
class Row:
    figure: str
    ours: float
    peer: float | None
    unit: str
    goal: float | None = None  # an upper bound (inclusive)

    def cells(self) -> list[str]:
        ok = self.peer and not math.isnan(self.peer) and not math.isnan(self.ours)
        ratio = f"{self.ours / self.peer:.2f}x" if ok else ""  # type: ignore[operator]
        peer = _num(self.peer) if self.peer is not None else ""
        goal = f"<= {self.goal:g} {self.unit}" if self.goal is not None else ""
        met = ("yes" if self.ours <= self.goal else "NO") if self.goal is not None else ""
        return [self.figure, f"{_num(self.ours)} {self.unit}".strip(), peer, ratio, goal, met]


def _num(v: float) -> str:
    if math.isnan(v):
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 or float(v).is_integer() else f"{v:.2f}"


def print_table(rows: Sequence[Row]) -> None:
    head = ["figure", "ours", "peer", "ratio", "goal", "met?"]
    table = [head, *(r.cells() for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    print()
    for n, line in enumerate(table):
        cells = zip(line, widths, strict=True)
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(cells)))
        if n == 0:
            print("-" * (sum(widths) + 2 * (len(widths) - 1)))


class Rows:
    """Rows of the table: a figure of one of our variants (median over rounds) next to the peer's."""

    def __init__(self, runs: dict[str, list[Run]]) -> None:
        self.runs = runs
        self.rows: list[Row] = []
        self.peer = runs.get(PEER, [])

    def add(
        self,
        label: str,
        variant: str,
        get: Callable[[Run], float | None],
        unit: str = "",
        goal: float | None = None,
        *,
        peer: bool = True,
    ) -> None:
        if not self.runs.get(variant):
            return
        theirs = med([get(r) for r in self.peer]) if peer and self.peer else None
        self.rows.append(Row(label, med([get(r) for r in self.runs[variant]]), theirs, unit, goal))


def _count(kind: str) -> Callable[[Run], float]:
    return lambda r: r.counts.get(kind, 0)


def _stopped(kind: str) -> Callable[[Run], float]:
    return lambda r: r.stopped.get(kind, 0)


def _later(figure: str, per: float, n: int = -1) -> Callable[[Run], float | None]:
    """A figure of cycle ``n`` (default: the last, the steady state) by its own report, over ``per``."""

    def get(r: Run) -> float | None:
        value = r.cycle(n, figure)
        return None if value is None or len(r.cycles) < (2 if n == -1 else 1) else value / per

    return get


def build_rows(runs: dict[str, list[Run]], servers: int) -> list[Row]:
    t = Rows(runs)
    n = len(runs.get(OURS, []))
    t.add(f"cycle time, median of {n}", OURS, lambda r: r.cycle_s, "s", GOAL_CYCLE_S)
    t.add("  with attribution", OURS_ATTR, lambda r: r.cycle_s, "s", GOAL_CYCLE_S)
    t.add("  by its own report", OURS, lambda r: r.reported_s, "s", peer=False)
    t.add(
        "  staged warnings, 1st cycle (own report)",
        OURS_WARN,
        lambda r: r.cycle(0, "seconds"),
        "s",
        peer=False,
    )
    t.add(
        "  staged warnings, later cycle (own report)",
        OURS_WARN,
        _later("seconds", 1.0),
        "s",
        GOAL_CYCLE_S,
        peer=False,
    )
    t.add("requests per running server", OURS, lambda r: r.requests / servers, "", GOAL_REQUESTS)
    t.add("  with attribution", OURS_ATTR, lambda r: r.requests / servers, "", GOAL_REQUESTS)
    t.add(
        "  staged warnings, 1st cycle",
        OURS_WARN,
        _later("requests", servers, 0),
        "",
        GOAL_REQUESTS,
        peer=False,
    )
    t.add(
        "  staged warnings, later cycle",
        OURS_WARN,
        _later("requests", servers),
        "",
        GOAL_REQUESTS,
        peer=False,
    )
    t.add("  hub only", OURS, lambda r: r.hub_requests / servers)
    t.add("server GETs counted as activity", OURS, lambda r: r.tracked, peer=False)
    t.add("  staged warnings, all cycles", OURS_WARN, lambda r: r.tracked, peer=False)
    t.add("requests per cycle", OURS, lambda r: r.requests)
    for kind in (*HUB_KINDS, *SERVER_KINDS):
        if any(r.counts.get(kind) for rs in runs.values() for r in rs):
            t.add(f"  {kind}", OURS, _count(kind))
    t.add("  attribution (with it on)", OURS_ATTR, lambda r: r.counts.get("attribution", 0))
    t.add(f"stops made (of {servers} running)", OURS, lambda r: r.stops)
    for kind in ("idle", "busy", "active"):
        t.add(f"  {kind} servers stopped", OURS, _stopped(kind))
    t.add("  stops, with staged warnings", OURS_WARN, lambda r: r.stops)
    t.add("  warned, staged warnings, 1st cycle", OURS_WARN, lambda r: r.cycle(0, "warned"), peer=False)
    t.add("  servers asked, staged, later cycle", OURS_WARN, _later("probed", 1.0), peer=False)
    t.add("culler CPU in the cycle", OURS, lambda r: r.cpu_cycle_s, "s")
    t.add("  with attribution", OURS_ATTR, lambda r: r.cpu_cycle_s, "s")
    t.add("culler CPU incl. start-up", OURS, lambda r: r.cpu_total_s, "s")
    return t.rows


def print_peer_only(runs: list[Run], servers: int) -> None:
    print(f"\npeer only ({LABELS[PEER]}), median of {len(runs)}:")
    print(f"  cycle time             {med([r.cycle_s for r in runs]):.2f} s")
    print(f"  requests / server      {med([r.requests / servers for r in runs]):.3f} (all hub)")
    for kind in HUB_KINDS:
        print(f"    {kind:<20} {med([r.counts.get(kind, 0) for r in runs]):.0f}")
    stops = {k: med([r.stopped.get(k, 0) for r in runs]) for k in ("idle", "busy", "active")}
    print(
        f"  stops                  {sum(stops.values()):.0f} ({', '.join(f'{k} {v:.0f}' for k, v in stops.items())})"
    )
    print(f"  CPU in the cycle       {med([r.cpu_cycle_s for r in runs]):.2f} s")


HEADLINE = ("  busy servers stopped", "culler CPU in the cycle")  # shown with the rows that have goals


def emit_headline(rows: Sequence[Row], servers: int) -> None:
    """The rows with a goal and the key peer comparisons, for ``make bench``'s combined table."""
    out, parent = [], ""
    for r in rows:
        parent = r.figure if not r.figure.startswith(" ") else parent
        if r.goal is None and r.figure not in HEADLINE:
            continue
        figure = f"{r.figure}, {servers:,} servers" if r.figure == parent else f"{parent}: {r.figure.strip()}"
        met = None if r.goal is None or math.isnan(r.ours) else r.ours <= r.goal
        goal = f"<= {r.goal:g} {r.unit}".strip() if r.goal is not None else ""
        out.append(
            bench_report.Row(
                "bench_culler",
                figure,
                r.ours,
                r.peer,
                r.unit,
                goal,
                met,
                f"{LABELS[PEER]} on the same farm, same concurrency" if r.peer is not None else "",
            )
        )
    bench_report.emit(out)


# -------------------------------------------------------------------------------------------- main
def ours_available() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(APP) is not None
    except ModuleNotFoundError:
        return False


def bench(opts: argparse.Namespace, tmp: Path) -> int:
    variants = [PEER]
    if ours_available():
        variants += [v for v in (OURS, OURS_ATTR, OURS_WARN) if v != OURS_WARN or opts.with_warnings]
    else:
        print(f"bench_culler: {APP} does not exist yet; measuring the peer only")
    stop_ms = opts.hub_latency_ms if opts.stop_latency_ms is None else opts.stop_latency_ms
    print(
        f"culler benchmark: python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"{opts.servers} running servers, concurrency {opts.concurrency}, idle timeout {opts.idle_timeout} s, "
        f"latency hub {opts.hub_latency_ms:g} ms / single-user {opts.server_latency_ms:g} ms / "
        f"DELETE {stop_ms:g} ms, {opts.rounds} rounds",
        flush=True,
    )
    farm = Farm(
        FarmConfig(
            opts.servers,
            hub_latency_s=opts.hub_latency_ms / 1000,
            server_latency_s=opts.server_latency_ms / 1000,
            stop_latency_s=stop_ms / 1000,
            stop_s=opts.stop_s,
            mix=opts.mix,
        )
    )
    runs: dict[str, list[Run]] = {v: [] for v in variants}
    failed: list[str] = []
    try:
        kinds = farm.stats()["kinds"]
        print(
            "farm: " + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items())) + f" on {farm.base}",
            flush=True,
        )
        for k in range(opts.rounds):
            for variant in variants:
                if variant in failed:
                    continue
                try:
                    run = (
                        run_peer(farm, opts, tmp, k)
                        if variant == PEER
                        else run_ours(farm, opts, tmp, k, variant)
                    )
                except RuntimeError as exc:
                    print(f"  .. {LABELS[variant]}: FAILED: {exc}", flush=True)
                    failed.append(variant)
                    continue
                runs[variant].append(run)
                stops = ", ".join(f"{kk} {v}" for kk, v in run.stopped.items() if v)
                print(
                    f"  .. round {k + 1}/{opts.rounds} {LABELS[variant]:<32} cycle {run.cycle_s:6.2f} s, "
                    f"{run.requests:5d} requests ({run.requests / run.servers:.2f}/server), "
                    f"stops {run.stops} ({stops or 'none'}), CPU {_num(run.cpu_cycle_s or math.nan)} s"
                    + (f"; {run.note}" if run.note else ""),
                    flush=True,
                )
    finally:
        farm.stop()
        if opts.keep_logs:
            shutil.copytree(tmp, opts.keep_logs, dirs_exist_ok=True)
    if runs.get(OURS):
        rows = build_rows(runs, opts.servers)
        print_table(rows)
        emit_headline(rows, opts.servers)
    if runs.get(PEER):
        print_peer_only(runs[PEER], opts.servers)
    print_notes(runs)
    return 1 if failed else 0


def print_notes(runs: dict[str, list[Run]]) -> None:
    print()
    print(
        "cycle time: the farm's clock, from the culler's first request to the end of its last answer; "
        "requests: all the farm answered in that run (hub + single-user servers + attribution)."
    )
    print(
        "with attribution, a first cycle holds every GPU workspace (GPU last-busy starts at the process "
        "start), so it probes and stops only CPU-only servers: fewer requests, not one more."
    )
    print(
        "peer: jupyterhub-idle-culler reads only the hub's last_activity, so it stops the busy kernels "
        "too (idle-culler #55); its DELETEs are sequential (it awaits users one by one)."
    )
    print(
        "ours asks each server what it did (never from the hub's last_activity, which its own probes "
        "move through the proxy): a fresh process's first cycle asks nearly every server; a later cycle "
        "(staged warnings, its own report) asks only those whose earlier answers no longer keep them. "
        "The peer's later cycles would be its hub list alone, so no peer figure is shown for them."
    )
    for variant, rs in runs.items():
        if rs and rs[-1].other_paths:
            shown = ", ".join(f"{p} x{n}" for p, n in rs[-1].other_paths.items())
            print(f"{LABELS[variant]}: other requests: {shown}")
        if rs and rs[-1].report:
            rep = {k: v for k, v in rs[-1].report.items() if k != "decisions"}
            print(f"{LABELS[variant]}: its report: {json.dumps(rep)[:400]}")
    for variant, rs in runs.items():
        if rs:
            print(f"{LABELS[variant]}: {rs[-1].command}")


def _mix(text: str) -> tuple[float, float, float]:
    parts = [float(p) for p in text.split(",")]
    if len(parts) != 3 or min(parts) < 0 or not sum(parts):
        raise argparse.ArgumentTypeError(f"three non-negative shares active,idle,busy, not {text!r}")
    return parts[0], parts[1], parts[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_culler", description=__doc__.split("\n")[0])
    parser.add_argument("--servers", type=int, default=1000, help="running servers (default 1,000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every culler in turn (default 3)")
    parser.add_argument(
        "--concurrency", type=int, default=10, help="both cullers' --concurrency (default 10)"
    )
    parser.add_argument(
        "--idle-timeout", type=int, default=3600, help="both cullers' idle timeout, s (default 3600)"
    )
    parser.add_argument(
        "--server-latency-ms", type=float, default=5.0, help="added to each single-user request (default 5)"
    )
    parser.add_argument(
        "--hub-latency-ms", type=float, default=5.0, help="added to each hub request (default 5)"
    )
    parser.add_argument(
        "--stop-latency-ms",
        type=float,
        default=None,
        help="added to each DELETE (default: --hub-latency-ms; a real hub answers once the spawner "
        "stopped, or with 202 after its slow_stop_timeout of 10 s)",
    )
    parser.add_argument(
        "--mix",
        type=_mix,
        default=(0.8, 0.1, 0.1),
        help="shares of active,idle,busy servers (default 0.8,0.1,0.1)",
    )
    parser.add_argument(
        "--stop-s", type=float, default=1.0, help="a stopped server is gone after (default 1 s)"
    )
    parser.add_argument(
        "--quiet-s",
        type=float,
        default=1.0,
        help="the peer's cycle ends after this long without a request (default 1)",
    )
    parser.add_argument(
        "--limit-s", type=float, default=300.0, help="give up on a cycle after (default 300 s)"
    )
    parser.add_argument(
        "--no-warnings-variant",
        dest="with_warnings",
        action="store_false",
        help="skip ours with the default staged warnings",
    )
    parser.add_argument(
        "--cycles",
        type=int,
        default=2,
        help="cycles of ours with staged warnings, --stop-s + 0.5 s apart; the last is the steady "
        "state (default 2)",
    )
    parser.add_argument(
        "--ours-arg", action="append", default=[], help="an extra argument for our culler (repeatable)"
    )
    parser.add_argument("--keep-logs", default="", help="copy the cullers' logs into this directory")
    opts = parser.parse_args(argv)
    # SIGTERM (make, CI) unwinds like Ctrl-C, so the finally blocks stop the culler and the farm
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-culler-") as tmp:
        try:
            rc = bench(opts, Path(tmp))
        except KeyboardInterrupt:
            print("bench_culler: interrupted; the cullers and the farm were stopped")
            return 130
    print(f"total wall time {time.perf_counter() - started:.0f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
