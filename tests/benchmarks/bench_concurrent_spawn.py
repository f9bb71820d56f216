"""P4, concurrent spawns: N users start a server through the hub at the same moment, ours against KubeSpawner.

Run as a script (``make bench`` or ``python -m tests.benchmarks.bench_concurrent_spawn [--users N]``); no
pass/fail thresholds: it prints a table per spawner and the ratios ours / KubeSpawner against the goals
(p95 time to ready <= 1.10x KubeSpawner's, no failures).

What it measures
  * One devcluster and one oidc-provider-mock (``tests/e2e/harness.py``) serve both spawners, in the
    same run, one after the other (``--spawners``, default KubeSpawner first). For each, JupyterHub
    starts with ``hub_config/jupyterhub_config.py`` (``GPUWS_SPAWNER=kubespawner`` or ``gpuworkspace``)
    and N users (default 200) are created in one batch through the admin API (not timed).
  * The burst: N threads, released together by a barrier, each ``POST /hub/api/users/{u}/server`` with
    ``{"profile": "p4-lite"}`` through the proxy. One poller asks ``GET /hub/api/users`` (one request
    for all the benchmark's users, ``name_filter``) every ``--interval`` seconds (default 0.5). Time to
    ready = from that user's POST until a poll (or a 201 answer) shows the server ``ready``, so it is
    coarse by up to the interval. A spawn fails when the POST is refused, or when its server vanishes
    from the hub's model (the hub's reason is read from ``/server/progress``: ``Spawn failed: ...``),
    or when it is not ready by ``--deadline`` (default 600 s; a finding, never a hang).
  * Kubernetes API requests during the burst (from its first POST until the last spawn settled): the
    devcluster's request log, cleared before the burst, without the harness's own calls, by verb. This
    includes everything that talks to the API meanwhile: for ours, the hub services of the config
    (attribution's 15 s cycle, the reclaimer's and disk service's watches) as well as the spawner.
  * Then every server is stopped (DELETE, then polled until gone within ``--deadline``; not timed) before
    the other spawner's turn. Users are distinct per spawner (``p4-ks-NNN``, ``p4-gw-NNN``), so each
    server also creates its own home disk (a PVC on ``ceph-rbd``) in its start, for both.

Lightweight pods: both spawners run the devcluster's lite single-user image
(``gpuworkspace.dev/lite-singleuser``, served by ``sim/lite_server.py`` listeners in one shared process
per node), so 200 servers fit on a 2-core machine where 200 jupyter-server processes would not.
  * Ours reads a catalog written into the work directory (``GPUWS_CATALOG``): one WorkspaceCatalog with a
    node pool spanning every node (the built-in topology has 110 pods per node and one CPU node: 200 need
    the GPU nodes too, so the pool tolerates their ``nvidia.com/gpu`` taint) and one profile ``p4-lite``
    with that image (pinned by digest), 10m CPU / 64Mi requested and a 1Gi home disk. The shipped
    ``hub_config/catalog`` is not used or changed.
  * KubeSpawner gets the same as its ``profile_list`` (one entry shaped like the config's ``cpu-small``
    entry, with ``kubespawner_override`` image, resources, node selector, tolerations and home size).

Benchmark-only hub settings (the harness's ``extra_config``, appended to the generated wrapper config):
``c.JupyterHub.concurrent_spawn_limit`` and ``c.JupyterHub.active_server_limit`` = N (JupyterHub's
defaults, 100 and unlimited, would refuse half of a 200 burst with 429), ``c.JupyterHub.api_page_max_limit``
>= N (one poll lists every user), and ``GPUWS_MAX_DISKS_TOTAL`` large enough for N home disks. Everything
else (start_timeout 120 s, http_timeout 60 s, the services) is the config's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.benchmarks import report as bench_report
from tests.benchmarks.bench_spawn import pct
from tests.e2e.harness import Devcluster, Hub, OidcMock, http

NAME = "bench_concurrent_spawn"
PROFILE = "p4-lite"
LITE_IMAGE = "gpuworkspace.dev/lite-singleuser@sha256:" + hashlib.sha256(b"p4-lite").hexdigest()
REQUESTS = {"cpu": "10m", "memory": "64Mi"}
LIMITS = {"cpu": "100m", "memory": "256Mi"}
HOME_SIZE = "1Gi"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ANY_NODE = {"topology.kubernetes.io/region": "devcluster"}  # every node of the built-in topology
VERBS = ("get", "list", "watch", "create", "patch", "update", "delete")
SPAWNERS = {"kubespawner": "KubeSpawner", "gpuworkspace": "GPUWorkspaceSpawner (ours)"}
TAGS = {"kubespawner": "ks", "gpuworkspace": "gw"}
P95_GOAL = 1.10
VANISHED = "the server vanished from the hub's model"


# ------------------------------------------------------------------------------------ pure: results
@dataclass
class Spawn:
    """One user's start: ``ready_s`` from its POST to the hub reporting it ready, else ``failure``."""

    user: str
    ready_s: float | None = None
    failure: str = ""


@dataclass
class Burst:
    spawner: str
    spawns: list[Spawn] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    error: str = ""  # the run itself broke (the hub did not start, ...)

    @property
    def ready(self) -> list[float]:
        return sorted(s.ready_s for s in self.spawns if s.ready_s is not None)

    @property
    def failures(self) -> list[Spawn]:
        return [s for s in self.spawns if s.ready_s is None]

    @property
    def by_verb(self) -> Counter[str]:
        return Counter(r["verb"] if r["verb"] in VERBS else "other" for r in self.requests)


@dataclass(frozen=True)
class Summary:
    n: int
    p50: float
    p95: float
    max: float
    failures: int
    requests: int


def summarize(burst: Burst) -> Summary:
    ready = burst.ready
    return Summary(
        n=len(burst.spawns),
        p50=statistics.median(ready) if ready else math.nan,
        p95=pct(ready, 0.95),
        max=ready[-1] if ready else math.nan,
        failures=len(burst.failures),
        requests=len(burst.requests),
    )


def reasons(burst: Burst, limit: int = 5) -> list[str]:
    """The distinct failure reasons, most frequent first, with their counts."""
    counts = Counter(s.failure for s in burst.failures)
    return [f"{n} x {reason}" for reason, n in counts.most_common(limit)]


def table(bursts: Sequence[Burst]) -> str:
    head = (
        f"{'spawner':<27} {'n':>4} {'p50':>7} {'p95':>7} {'max':>7} {'failed':>6} {'requests':>8} "
        + " ".join(f"{v:>6}" for v in VERBS)
    )
    lines = [head, "-" * len(head)]
    for b in bursts:
        name = SPAWNERS.get(b.spawner, b.spawner)
        if b.error and not b.spawns:
            lines.append(f"{name:<27} {'-':>4}  {b.error}")
            continue
        s, verbs = summarize(b), b.by_verb
        lines.append(
            f"{name:<27} {s.n:>4} {s.p50:>6.2f}s {s.p95:>6.2f}s {s.max:>6.2f}s {s.failures:>6} {s.requests:>8} "
            + " ".join(f"{verbs[v]:>6}" for v in VERBS)
        )
        lines += [f"    failed: {r}" for r in reasons(b)]
    lines.append(
        "(seconds from each POST to the hub reporting the server ready, failures excluded; requests: the\n"
        " devcluster's API requests during the burst, all clients but the benchmark, by verb)"
    )
    return "\n".join(lines)


def requests_by_kind(burst: Burst, limit: int = 12) -> str:
    """The burst's API requests by verb and resource, most frequent first, with the count per spawn."""
    kinds = Counter(f"{r['verb']} {r.get('resource') or '-'}" for r in burst.requests)
    n = max(1, len(burst.spawns))
    lines = [f"requests during the burst, {SPAWNERS.get(burst.spawner, burst.spawner)} (count, per spawn):"]
    lines += [f"  {c:>6} {c / n:>6.2f}  {kind}" for kind, c in kinds.most_common(limit)]
    return "\n".join(lines)


def ratios(bursts: Mapping[str, Burst]) -> str:
    ks, ours = bursts.get("kubespawner"), bursts.get("gpuworkspace")
    if not (ks and ours and ks.ready and ours.ready):
        return "ratios: need both spawners with servers ready"
    a, b = summarize(ours), summarize(ks)
    p95 = a.p95 / b.p95
    met = p95 <= P95_GOAL and a.failures == 0
    return "\n".join(
        [
            "ours / KubeSpawner",
            f"  p95 time to ready   x{p95:.2f}  (goal <= {P95_GOAL:.2f} and 0 failures: {'met' if met else 'NOT met'})",
            f"  p50 time to ready   x{a.p50 / b.p50:.2f}",
            f"  max time to ready   x{a.max / b.max:.2f}",
            f"  failures            {a.failures} / {b.failures}",
            f"  API requests        x{a.requests / b.requests if b.requests else math.inf:.2f}",
        ]
    )


def headline(bursts: Mapping[str, Burst]) -> list[bench_report.Row]:
    """Ours against KubeSpawner with the goals, for ``make bench``'s combined table."""
    ks, ours = bursts.get("kubespawner"), bursts.get("gpuworkspace")
    if not (ks and ours and ks.spawns and ours.spawns):
        return []
    a, b = summarize(ours), summarize(ks)
    peer = f"KubeSpawner, the same {b.n} lite-image spawns at once on the same devcluster, same run"

    def row(figure: str, mine: float, theirs: float, unit: str = "", goal: str = "", met: Any = None) -> Any:
        return bench_report.Row(NAME, figure, mine, theirs, unit, goal, met, peer)

    p95_met = None if math.isnan(a.p95) or math.isnan(b.p95) else a.p95 / b.p95 <= P95_GOAL
    return [
        row(
            f"p95 time to ready, {a.n} spawns at once", a.p95, b.p95, "s", f"<= {P95_GOAL:.2f}x peer", p95_met
        ),
        row(f"p50 time to ready, {a.n} spawns at once", a.p50, b.p50, "s"),
        row(f"max time to ready, {a.n} spawns at once", a.max, b.max, "s"),
        row("failed spawns", float(a.failures), float(b.failures), "", "0", a.failures == 0),
        row("API requests during the burst", float(a.requests), float(b.requests)),
    ]


# ------------------------------------------------------------------------------- the hub's settings
def write_catalog(directory: Path) -> Path:
    """A catalog of one lite profile on a pool spanning every node (JSON is YAML)."""
    directory.mkdir(parents=True, exist_ok=True)
    catalog = {
        "apiVersion": "gpuworkspace.dev/v1alpha1",
        "kind": "WorkspaceCatalog",
        "metadata": {"name": "p4-bench"},
        "spec": {
            "version": "p4-bench.1",
            "nodePools": {"any": {"nodeSelector": ANY_NODE, "tolerations": [GPU_TOLERATION]}},
        },
    }
    profile = {
        "apiVersion": "gpuworkspace.dev/v1alpha1",
        "kind": "WorkspaceProfile",
        "metadata": {"name": PROFILE},
        "spec": {
            "displayName": "Lite single-user server (P4 benchmark)",
            "default": True,
            "image": LITE_IMAGE,
            "resources": {"requests": REQUESTS, "limits": LIMITS},
            "placement": {"nodePool": "any", "gpuMode": "none"},
            "storage": {"home": {"class": "ceph-rbd", "size": HOME_SIZE}},
            "ide": "jupyterlab",
        },
    }
    (directory / "catalog.yaml").write_text(json.dumps(catalog, indent=2) + "\n")
    (directory / "profile.yaml").write_text(json.dumps(profile, indent=2) + "\n")
    return directory


def kubespawner_profile() -> dict[str, Any]:
    """The same profile as a KubeSpawner profile_list entry (shaped like the config's cpu-small)."""
    return {
        "display_name": "Lite single-user server (P4 benchmark)",
        "slug": PROFILE,
        "default": True,
        "kubespawner_override": {
            "image": LITE_IMAGE,
            "cpu_guarantee": 0.01,
            "cpu_limit": 0.1,
            "mem_guarantee": "64M",  # KubeSpawner's M means MiB
            "mem_limit": "256M",
            "node_selector": ANY_NODE,
            "tolerations": [GPU_TOLERATION],
            "storage_capacity": HOME_SIZE,
        },
    }


def extra_config(spawner: str, users: int) -> str:
    lines = [
        "# bench_concurrent_spawn: the burst must not meet JupyterHub's own limits",
        f"c.JupyterHub.concurrent_spawn_limit = {users}",
        f"c.JupyterHub.active_server_limit = {users}",
        f"c.JupyterHub.api_page_max_limit = {max(200, users + 10)}",
    ]
    if spawner == "kubespawner":
        lines.append(f"c.KubeSpawner.profile_list = [{kubespawner_profile()!r}]")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------ the I/O shell
def _api(hub: Hub, method: str, path: str, body: Any = None, timeout: float = 60) -> tuple[int, Any]:
    headers = {"Authorization": f"token {hub.admin_token}"}
    status, raw = http(method, hub.api_url + path, body, headers=headers, timeout=timeout)
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def servers(hub: Hub, prefix: str, users: int) -> dict[str, dict[str, Any] | None]:
    """Each of the benchmark's users and its default server's model (None: no server), in one request."""
    status, body = _api(hub, "GET", f"/users?name_filter={prefix}&limit={users + 10}")
    if status != 200 or not isinstance(body, list):
        raise RuntimeError(f"GET /users answered {status}: {str(body)[:300]}")
    return {u["name"]: (u.get("servers") or {}).get("") for u in body}


def wait_until(done: Callable[[], bool], deadline: float, interval_s: float) -> bool:
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)
    return True


def failure_reason(hub: Hub, user: str) -> str:
    """The hub's own words for a failed start (``/server/progress``'s failed event), else a pointer."""
    try:
        status, raw = http(
            "GET",
            f"{hub.api_url}/users/{user}/server/progress",
            headers={"Authorization": f"token {hub.admin_token}"},
            timeout=15,
        )
    except OSError as exc:
        return f"the server vanished (progress unreadable: {exc})"
    for line in raw.decode(errors="replace").splitlines():
        if line.startswith("data:"):
            event = json.loads(line[5:])
            if event.get("failed"):
                return str(event.get("message") or "Spawn failed")
    return f"the server vanished (progress answered {status}); see the hub log"


class Burster:
    """Fires the N POSTs together and follows them until each is ready, failed or past the deadline."""

    def __init__(self, hub: Hub, users: list[str], prefix: str, interval_s: float, deadline_s: float) -> None:
        self.hub, self.users, self.prefix = hub, users, prefix
        self.interval_s, self.deadline_s = interval_s, deadline_s
        self.posted: dict[str, float] = {}  # user -> perf_counter at its POST
        self.answered: dict[str, tuple[int, Any]] = {}  # user -> the POST's answer
        self.spawns = {u: Spawn(u) for u in users}
        self._gate = threading.Barrier(len(users))

    def _post(self, user: str) -> None:
        self._gate.wait()
        self.posted[user] = time.perf_counter()
        try:
            answer = _api(self.hub, "POST", f"/users/{user}/server", {"profile": PROFILE}, timeout=300)
        except OSError as exc:
            answer = (0, f"{type(exc).__name__}: {exc}")
        if answer[0] == 201 and self.spawns[user].ready_s is None:
            self.spawns[user].ready_s = time.perf_counter() - self.posted[user]
        self.answered[user] = answer

    def _settled(self, user: str) -> bool:
        spawn = self.spawns[user]
        return spawn.ready_s is not None or bool(spawn.failure)

    def _poll(self) -> None:
        answered = dict(self.answered)  # before the request: a POST answered later may not be in its model
        models = servers(self.hub, self.prefix, len(self.users))
        now = time.perf_counter()
        for user, spawn in self.spawns.items():
            if self._settled(user) or user not in self.posted:
                continue
            model, answer = models.get(user), answered.get(user)
            if model is not None and model.get("ready"):
                spawn.ready_s = now - self.posted[user]
            elif answer is not None and answer[0] not in (201, 202):
                spawn.failure = f"POST answered {answer[0]}: {str(answer[1])[:200]}"
            elif answer is not None and model is None:
                spawn.failure = VANISHED  # the hub's reason is read after the burst, not while timing

    def run(self) -> list[Spawn]:
        pool = ThreadPoolExecutor(max_workers=len(self.users), thread_name_prefix="p4-post")
        try:
            for user in self.users:
                pool.submit(self._post, user)
            deadline = time.monotonic() + self.deadline_s
            finished = wait_until(self._tick, deadline, self.interval_s)
            if not finished:
                models = servers(self.hub, self.prefix, len(self.users))
                for user, spawn in self.spawns.items():
                    if not self._settled(user):
                        model = models.get(user) or {}
                        spawn.failure = (
                            f"not ready after the {self.deadline_s:.0f} s deadline "
                            f"(hub: pending={model.get('pending')!r}, POST answered={user in self.answered})"
                        )
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        for spawn in self.spawns.values():
            if spawn.failure == VANISHED:
                spawn.failure = failure_reason(self.hub, spawn.user)
        return list(self.spawns.values())

    def _tick(self) -> bool:
        self._poll()
        return all(self._settled(u) for u in self.users)


def stop_all(hub: Hub, prefix: str, users: list[str], deadline_s: float) -> str:
    """DELETE every server, then wait until the hub lists none; '' or what was left at the deadline."""
    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(lambda u: _api(hub, "DELETE", f"/users/{u}/server", timeout=120), users))
    refused = [a for a in answers if a[0] not in (202, 204, 400, 404)]
    left: list[str] = []

    def gone() -> bool:
        left[:] = [u for u, m in servers(hub, prefix, len(users)).items() if m is not None]
        return not left

    if not wait_until(gone, time.monotonic() + deadline_s, 1.0):
        return f"{len(left)} servers still there {deadline_s:.0f} s after the stop (e.g. {left[:3]})"
    return f"{len(refused)} DELETEs refused (e.g. {refused[0]})" if refused else ""


def bench_spawner(
    spawner: str, workdir: Path, dc: Devcluster, oidc: OidcMock, args: argparse.Namespace
) -> Burst:
    burst = Burst(spawner)
    prefix = f"p4-{TAGS[spawner]}-"
    users = [f"{prefix}{i:03d}" for i in range(args.users)]
    env = {"GPUWS_MAX_DISKS_TOTAL": str(max(500, 4 * args.users))}
    catalog = write_catalog(workdir / "catalog")
    hub = Hub(workdir, dc, oidc, spawner, catalog, env, extra_config=extra_config(spawner, args.users))
    try:
        hub.start()
        status, body = _api(hub, "POST", "/users", {"usernames": users})
        if status != 201:
            raise RuntimeError(
                f"creating {len(users)} users: POST /users answered {status}: {str(body)[:300]}"
            )
        print(f"  .. {spawner}: {len(users)} users created; the burst", flush=True)
        dc.requests_log(clear=True)
        started = time.perf_counter()
        burst.spawns = Burster(hub, users, prefix, args.interval, args.deadline).run()
        burst.wall_s = time.perf_counter() - started
        burst.requests = dc.requests_log()
        s = summarize(burst)
        print(
            f"  .. {spawner}: {s.n - s.failures}/{s.n} ready in {burst.wall_s:.1f} s, p95 {s.p95:.2f} s; stopping",
            flush=True,
        )
        stopped = time.perf_counter()
        left = stop_all(hub, prefix, users, args.deadline)
        print(f"  .. {spawner}: stopped in {time.perf_counter() - stopped:.1f} s {left}", flush=True)
        clients = Counter(str(r.get("user_agent", ""))[:40] for r in burst.requests)
        print(f"  .. {spawner}: API requests during the burst by client: {dict(clients.most_common(6))}")
    except Exception as exc:  # report and carry on with the other spawner
        burst.error = f"{type(exc).__name__}: {exc}"
        print(f"  .. {spawner}: FAILED: {burst.error}\n{hub.proc.tail(40)}", flush=True)
    finally:
        hub.stop()
    return burst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=NAME, description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--users", type=int, default=200, help="users starting at once (default: 200)")
    parser.add_argument(
        "--spawners",
        default="kubespawner,gpuworkspace",
        help="comma-separated, in order (default: %(default)s)",
    )
    parser.add_argument(
        "--interval", type=float, default=0.5, help="seconds between polls of the hub (default: %(default)s)"
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=600,
        help="seconds a burst or a stop may take (default: %(default)s)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (state and logs)")
    args = parser.parse_args(argv)
    spawners = [s for s in args.spawners.split(",") if s]
    unknown = [s for s in spawners if s not in SPAWNERS]
    if unknown or args.users < 1:
        parser.error(f"--spawners takes {', '.join(SPAWNERS)} (not {unknown}); --users at least 1")
    print(
        f"{NAME}: {platform.python_implementation()} {platform.python_version()}, {args.users} users at once"
    )
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="gpuws-bench-p4-"))
    dc, oidc = Devcluster(workdir / "devcluster", workdir / "logs"), OidcMock(workdir / "logs")
    bursts: dict[str, Burst] = {}
    try:
        dc.start()
        oidc.start()
        for spawner in spawners:
            bursts[spawner] = bench_spawner(spawner, workdir / spawner, dc, oidc, args)
    finally:
        oidc.stop()
        dc.stop()
        if args.keep:
            print(f"{NAME}: work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(table(list(bursts.values())))
    for b in bursts.values():
        print()
        print(requests_by_kind(b))
    print()
    print(ratios(bursts))
    bench_report.emit(headline(bursts))
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s")
    return 1 if any(b.error for b in bursts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
