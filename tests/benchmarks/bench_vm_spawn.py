"""VM workspace benchmark: VM start latency against a container start, and API writes per VM cycle.

Run as a script (``make bench`` or ``python -m tests.benchmarks.bench_vm_spawn``); no thresholds, it prints.

One devcluster, one JupyterHub with GPUWorkspaceSpawner. For each profile (``cpu-small``: a container;
``vm-workstation``: a KubeVirt VM on a CDI-cloned root disk) one user's named server goes through a
first cycle (creates the disk; for the VM the clone, reported on its own) and N measured start→ready→stop
cycles through the hub REST API, as ``bench_spawn.py`` does. Requests come from the devcluster's request
log: writes (create, update, patch, delete) per cycle, and ``repeat GET`` (GETs of one object beyond
the first in a cycle: what polling would look like). Goal for VMs: at most 6 writes per start+stop cycle
and no polling GETs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.benchmarks import report as bench_report
from tests.benchmarks.bench_spawn import Cycle, pct
from tests.e2e.harness import REPO, Devcluster, Hub, OidcMock

PROFILES = {"cpu-small": "container (cpu-small)", "vm-workstation": "VM (vm-workstation)"}
WRITES = ("create", "update", "patch", "delete")


def cycle(hub: Hub, dc: Devcluster, user: str, profile: str) -> Cycle:
    dc.requests_log(clear=True)
    started = time.perf_counter()
    hub.start_server(user, "s", {"profile": profile})
    hub.wait_ready(user, "s", interval_s=0.05)
    ready = time.perf_counter()
    hub.stop_server(user, "s", interval_s=0.05)
    return Cycle(ready - started, time.perf_counter() - ready, dc.requests_log())


def writes(c: Cycle) -> int:
    return sum(1 for r in c.requests if r["verb"] in WRITES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_vm_spawn", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cycles", type=int, default=5, help="measured cycles per profile (default: 5)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="gpuws-bench-vm-"))
    dc, oidc = Devcluster(workdir / "devcluster", workdir / "logs"), OidcMock(workdir / "logs")
    hub = Hub(workdir / "hub", dc, oidc, spawner="gpuworkspace", catalog=REPO / "hub_config" / "catalog")
    firsts: dict[str, Cycle] = {}
    results: dict[str, list[Cycle]] = {}
    try:
        dc.start()
        oidc.start()
        hub.start()
        for profile in PROFILES:
            user = f"bench-{profile}"
            firsts[profile] = cycle(hub, dc, user, profile)
            results[profile] = []
            for i in range(args.cycles):
                c = cycle(hub, dc, user, profile)
                results[profile].append(c)
                print(
                    f"  .. {profile:<15} cycle {i + 1}/{args.cycles}: start {c.spawn_s:5.2f} s, {writes(c)} writes"
                )
    finally:
        hub.stop()
        oidc.stop()
        dc.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    head = f"{'workspace':<24} {'n':>3} {'start p50':>9} {'p95':>6} {'stop p50':>8} {'writes':>6} {'repeat GET':>10}"
    print(f"\n{head}\n{'-' * len(head)}")
    for profile, cycles in results.items():
        spawn = [c.spawn_s for c in cycles]
        print(
            f"{PROFILES[profile]:<24} {len(cycles):>3} {statistics.median(spawn):>8.2f}s {pct(spawn, 0.95):>5.2f}s "
            f"{statistics.median(c.stop_s for c in cycles):>7.2f}s "
            f"{statistics.median(writes(c) for c in cycles):>6.0f} {sum(c.repeat_gets for c in cycles):>10}"
        )
    for profile, first in firsts.items():
        kinds = sorted(f"{r['verb']} {r['resource']}" for r in first.requests if r["verb"] in WRITES)
        print(
            f"first cycle, {PROFILES[profile]}: start {first.spawn_s:.2f} s, {writes(first)} writes: {kinds}"
        )
        later = sorted(
            f"{r['verb']} {r['resource']}" for r in results[profile][-1].requests if r["verb"] in WRITES
        )
        print(f"  a later cycle: {later}")
    vm, ct = results["vm-workstation"], results["cpu-small"]
    ratio = statistics.median(c.spawn_s for c in vm) / statistics.median(c.spawn_s for c in ct)
    worst = max(writes(c) for c in vm)
    first = writes(firsts["vm-workstation"])
    print(f"\nVM start / container start   x{ratio:.2f}")
    print(
        f"VM writes per start+stop     {worst} (max over measured cycles; goal <= 6: {'met' if worst <= 6 else 'NOT met'})"
    )
    print(
        f"VM writes, first cycle       {first} (creates the disk, Secret, Service and VM, and records the disk's"
        f" node for the fencing check; goal <= 6: {'met' if first <= 6 else 'NOT met'})"
    )
    polls = sum(c.repeat_gets for c in vm)
    print(f"VM repeat GETs (polling)     {polls}  (goal 0: {'met' if polls == 0 else 'NOT met'})")
    bench_report.emit(
        [
            bench_report.Row(
                "bench_vm_spawn",
                f"VM start p50 (hub REST, n={len(vm)})",
                statistics.median(c.spawn_s for c in vm),
                statistics.median(c.spawn_s for c in ct),
                "s",
                peer_name="a container workspace (cpu-small) on the same devcluster and hub",
            ),
            bench_report.Row(
                "bench_vm_spawn", "VM writes per start+stop (max)", worst, None, "", "<= 6", worst <= 6
            ),
            bench_report.Row("bench_vm_spawn", "VM writes, first cycle", first, None, "", "<= 6", first <= 6),
            bench_report.Row("bench_vm_spawn", "VM repeat GETs (polling)", polls, None, "", "0", polls == 0),
        ]
    )
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
