"""Spawn benchmark: GPUWorkspaceSpawner against plain KubeSpawner, through JupyterHub, on one devcluster.

Run as a script (``make bench`` or ``python -m tests.benchmarks.bench_spawn``); not a pytest test, no
pass/fail thresholds: it prints a table and the ratios ours / KubeSpawner against the goals.

What it measures
  * One devcluster and one oidc-provider-mock (``tests/e2e/harness.py``) serve both spawners, in the
    same run. For each spawner in turn, JupyterHub starts with ``hub_config/jupyterhub_config.py``
    (``GPUWS_SPAWNER=kubespawner``: KubeSpawner with the config's ``cpu-small`` profile list entry;
    ``gpuworkspace``: ours with ``hub_config/catalog``'s ``cpu-small``), then runs one warm-up cycle
    (it creates the home disk; not counted) and N measured cycles (default 6) for one user's named
    server. This repeats for ``--rounds`` rounds (default 4: KubeSpawner, ours, ours, KubeSpawner, ...),
    each with a new hub and user, so the slow drift of a shared machine's load and a round's position
    fall on both spawners alike.
  * Spawn times are printed as a histogram too (0.5 s bins): KubeSpawner's start looks at its pod cache
    after jittered sleeps (``jupyterhub.utils.exponential_backoff``, full jitter, up to 5 s a step), so its
    starts fall in two humps; the median then flips with the mix and the mean is the steadier figure.
    Since JupyterHub then polls the server's URL with the same backoff, a start also waits for the
    server to listen. Ours wakes on the pod watch event that shows the container running, then connects
    to the server's port every 50 ms and ends the start on the first accepted connection.
  * A cycle: ``POST /hub/api/users/{u}/servers/s`` with ``{"profile": "cpu-small"}``, then polling
    ``GET /hub/api/users/{u}`` every 50 ms until the hub reports the server ``ready`` (spawn time = POST
    to ready, so at most 50 ms coarse); then ``DELETE`` and polling until the server is gone (stop time).
    The single-user server is a real ``jupyterhub-singleuser`` process in a devcluster pod.
  * Kubernetes API requests per cycle: the devcluster's request log is cleared before each cycle and
    read after it, without the harness's own calls. Split by verb (get, list, watch, create, patch,
    update, delete). Ours writes two audit Events per cycle by default (``audit_events = "all"``:
    started, stopped); the last request row leaves them out to compare the start's own work. ``repeat GET`` counts GETs of a single object beyond the first per object and
    cycle: a spawner that polls shows up there. A watch is logged when it ends, so a reflector's
    long-running watch lands in whichever cycle it happens to end in (noise of about one request).
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.benchmarks import report as bench_report
from tests.e2e.harness import REPO, Devcluster, Hub, OidcMock

PROFILE = "cpu-small"
VERBS = ("get", "list", "watch", "create", "patch", "update", "delete")
SPAWNERS = {"kubespawner": "KubeSpawner", "gpuworkspace": "GPUWorkspaceSpawner (ours)"}


@dataclass
class Cycle:
    spawn_s: float
    stop_s: float
    requests: list[dict[str, Any]]

    @property
    def by_verb(self) -> Counter[str]:
        return Counter(r["verb"] if r["verb"] in VERBS else "other" for r in self.requests)

    @property
    def driven(self) -> int:
        """Requests other than list and watch: what the start and stop themselves asked for."""
        return sum(1 for r in self.requests if r["verb"] not in ("list", "watch"))

    @property
    def audit_events(self) -> int:
        """Events the spawner wrote as audit records (``audit_events``, every start and stop by default)."""
        return sum(1 for r in self.requests if r["verb"] == "create" and r["resource"] == "events")

    @property
    def repeat_gets(self) -> int:
        gets = Counter(
            (r["resource"], r["namespace"], r["name"]) for r in self.requests if r["verb"] == "get"
        )
        return sum(n - 1 for n in gets.values())


@dataclass
class Result:
    spawner: str
    cycles: list[Cycle] = field(default_factory=list)
    error: str = ""

    def median(self, values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    @property
    def spawn_p50(self) -> float:
        return self.median([c.spawn_s for c in self.cycles])

    @property
    def spawn_mean(self) -> float:
        return statistics.fmean([c.spawn_s for c in self.cycles]) if self.cycles else float("nan")

    @property
    def requests_p50(self) -> float:
        return self.median([float(len(c.requests)) for c in self.cycles])

    @property
    def mechanics_p50(self) -> float:
        """Median requests without list and watch and without the audit Events: the start's own work."""
        return self.median([float(c.driven - c.audit_events) for c in self.cycles])

    @property
    def driven_p50(self) -> float:
        return self.median([float(c.driven) for c in self.cycles])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def run_cycle(hub: Hub, dc: Devcluster, user: str) -> Cycle:
    dc.requests_log(clear=True)
    started = time.perf_counter()
    hub.start_server(user, "s", {"profile": PROFILE})
    hub.wait_ready(user, "s", interval_s=0.05)
    ready = time.perf_counter()
    hub.stop_server(user, "s", interval_s=0.05)
    stopped = time.perf_counter()
    return Cycle(ready - started, stopped - ready, dc.requests_log())


def bench_spawner(
    spawner: str, workdir: Path, dc: Devcluster, oidc: OidcMock, cycles: int, result: Result
) -> Result:
    hub = Hub(workdir, dc, oidc, spawner=spawner, catalog=REPO / "hub_config" / "catalog")
    user = f"bench-{workdir.name}"
    try:
        hub.start()
        run_cycle(hub, dc, user)  # warm-up: creates the user's home disk
        for i in range(cycles):
            cycle = run_cycle(hub, dc, user)
            result.cycles.append(cycle)
            print(
                f"  .. {spawner:<13} cycle {i + 1}/{cycles}: spawn {cycle.spawn_s:5.2f} s, "
                f"stop {cycle.stop_s:5.2f} s, {len(cycle.requests)} API requests",
                flush=True,
            )
    except Exception as exc:  # report and carry on with the other spawner
        result.error = f"{type(exc).__name__}: {exc}"
        print(f"  .. {spawner}: FAILED: {result.error}\n{hub.proc.tail(40)}", flush=True)
    finally:
        hub.stop()
    return result


def print_table(results: list[Result]) -> None:
    head = (
        f"{'spawner':<27} {'n':>3} {'spawn p50':>9} {'p95':>6} {'stop p50':>8} {'req/cycle':>9} {'w/o l+w':>7} "
        + " ".join(f"{v:>6}" for v in VERBS)
        + f" {'repeat GET':>10}"
    )
    print()
    print(head)
    print("-" * len(head))
    for r in results:
        if not r.cycles:
            print(f"{SPAWNERS[r.spawner]:<27} {'-':>3}  {r.error or 'no cycles'}")
            continue
        spawn = [c.spawn_s for c in r.cycles]
        stop = [c.stop_s for c in r.cycles]
        n = len(r.cycles)
        verbs = " ".join(f"{sum(c.by_verb[v] for c in r.cycles) / n:>6.1f}" for v in VERBS)
        repeats = sum(c.repeat_gets for c in r.cycles) / n
        print(
            f"{SPAWNERS[r.spawner]:<27} {n:>3} {statistics.median(spawn):>8.2f}s {pct(spawn, 0.95):>5.2f}s "
            f"{statistics.median(stop):>7.2f}s {r.requests_p50:>9.1f} {r.driven_p50:>7.1f} {verbs} {repeats:>10.1f}"
        )
    print(
        "(seconds; req/cycle: median Kubernetes API requests per start+stop cycle, w/o l+w: the same without\n"
        " list and watch, which the reflectors repeat on their own schedule; verb columns: means per cycle)"
    )


def print_requests(result: Result) -> None:
    """What one cycle asked the API, by verb and resource (the cycle with the median request count)."""
    if not result.cycles:
        return
    cycle = sorted(result.cycles, key=lambda c: len(c.requests))[len(result.cycles) // 2]
    kinds = Counter(f"{r['verb']:<7} {r['resource']}" for r in cycle.requests)
    print(f"\nrequests of a median cycle, {SPAWNERS[result.spawner]}:")
    for kind, n in sorted(kinds.items()):
        print(f"  {n:>3}  {kind}")


def print_spread(results: list[Result], bin_s: float = 0.5) -> None:
    """Spawn times in ``bin_s`` bins, one line per spawner: a two-humped start time shows here."""
    times = [c.spawn_s for r in results for c in r.cycles]
    if not times:
        return
    first = int(min(times) / bin_s)
    bins = range(first, int(max(times) / bin_s) + 1)
    print(
        f"\nspawn times, {bin_s:g} s bins from {first * bin_s:.1f} s: one digit per bin (count; + for 10 or more)"
    )
    for r in results:
        counts = Counter(int(c.spawn_s / bin_s) for c in r.cycles)
        print(f"  {SPAWNERS[r.spawner]:<27} " + "".join(_digit(counts[b]) for b in bins))


def _digit(count: int) -> str:
    return "." if count == 0 else str(count) if count < 10 else "+"


def print_ratios(results: dict[str, Result]) -> None:
    ks, ours = results.get("kubespawner"), results.get("gpuworkspace")
    if not (ks and ours and ks.cycles and ours.cycles):
        print("\nratios: need both spawners measured")
        return
    spawn = ours.spawn_p50 / ks.spawn_p50
    print("\nours / KubeSpawner")
    print(
        f"  median spawn time          x{spawn:.2f}  (goal <= 1.05: {'met' if spawn <= 1.05 else 'NOT met'})"
    )
    print(f"  mean spawn time            x{ours.spawn_mean / ks.spawn_mean:.2f}")
    for what, a, b in (
        ("API requests/cycle", ours.requests_p50, ks.requests_p50),
        ("  without list and watch", ours.driven_p50, ks.driven_p50),
        ("  and without audit Events", ours.mechanics_p50, ks.mechanics_p50),
    ):
        ratio = a / b if b else float("inf")
        print(f"  {what:<26} x{ratio:.2f}  (goal <= 1.00: {'met' if ratio <= 1.0 else 'NOT met'})")


def emit_headline(results: dict[str, Result]) -> None:
    """Ours against KubeSpawner with the goals, for ``make bench``'s combined table."""
    ks, ours = results.get("kubespawner"), results.get("gpuworkspace")
    if not (ks and ours and ks.cycles and ours.cycles):
        return
    peer = "KubeSpawner (the config's cpu-small entry), same devcluster, interleaved rounds"

    def row(figure: str, a: float, b: float, unit: str, goal: float | None) -> bench_report.Row:
        met = None if goal is None else (a / b if b else float("inf")) <= goal
        text = f"<= {goal:.2f}x peer" if goal is not None else ""
        return bench_report.Row("bench_spawn", figure, a, b, unit, text, met, peer)

    n = len(ours.cycles)
    repeats = [sum(c.repeat_gets for c in r.cycles) / len(r.cycles) for r in (ours, ks)]
    bench_report.emit(
        [
            row(f"median spawn time (hub REST, n={n})", ours.spawn_p50, ks.spawn_p50, "s", 1.05),
            row(f"mean spawn time (hub REST, n={n})", ours.spawn_mean, ks.spawn_mean, "s", None),
            row("API requests per start+stop cycle", ours.requests_p50, ks.requests_p50, "", 1.0),
            row("API requests per cycle without list and watch", ours.driven_p50, ks.driven_p50, "", 1.0),
            row(
                "API requests per cycle without list, watch and audit Events",
                ours.mechanics_p50,
                ks.mechanics_p50,
                "",
                1.0,
            ),
            row("repeat GETs per cycle (polling)", repeats[0], repeats[1], "", None),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_spawn", description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--cycles", type=int, default=6, help="measured cycles per spawner and round (default: 6)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=4,
        help=(
            "rounds of all spawners in turn, the order reversed every other round (default: 4), so slow "
            "drift on a shared machine and a round's position hit both alike"
        ),
    )
    parser.add_argument(
        "--spawners",
        default="kubespawner,gpuworkspace",
        help="comma-separated, in order (default: kubespawner,gpuworkspace; ours is skipped when absent)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (state and logs)")
    args = parser.parse_args(argv)
    spawners = [s for s in args.spawners.split(",") if s]
    if "gpuworkspace" in spawners and importlib.util.find_spec("gpuworkspace_spawner.spawner") is None:
        print("bench_spawn: gpuworkspace_spawner.spawner does not exist yet; measuring KubeSpawner only")
        spawners.remove("gpuworkspace")
    print(
        f"bench_spawn: {platform.python_implementation()} {platform.python_version()}, "
        f"{args.rounds} rounds x {args.cycles} cycles per spawner"
    )
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="gpuws-bench-spawn-"))
    dc, oidc = Devcluster(workdir / "devcluster", workdir / "logs"), OidcMock(workdir / "logs")
    results: dict[str, Result] = {}
    try:
        dc.start()
        oidc.start()
        for round_ in range(args.rounds):
            for spawner in spawners if round_ % 2 == 0 else spawners[::-1]:
                result = results.setdefault(spawner, Result(spawner))
                bench_spawner(spawner, workdir / f"{spawner}-{round_}", dc, oidc, args.cycles, result)
    finally:
        oidc.stop()
        dc.stop()
        if args.keep:
            print(f"bench_spawn: work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print_table(list(results.values()))
    print_spread(list(results.values()))
    for result in results.values():
        print_requests(result)
    print_ratios(results)
    emit_headline(results)
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s")
    return 1 if any(r.error for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
