"""Attribution benchmark: the real ``gpuworkspace-attribution`` process at 64 nodes x 8 GPUs, 2,000 workspaces.

Run as a script (``make bench`` or ``python -m tests.benchmarks.bench_attribution``); not a pytest test,
no pass/fail thresholds: it prints a table with the issue's goals (API p99 < 20 ms, RSS < 200 MiB) and
whether this machine met them. ``--nodes 8 --workspaces 250`` is a quick run.

How it measures
  * The world, in one child process with its own event loop (not the process measured): the
    devcluster's API emulator without simulation (``DevCluster(state_dir, persist=False)``), seeded
    in-process through ``c.verbs.create`` (+ the status subresource) with the synthetic fleet of
    :mod:`.attribution_fleet` (64 Nodes with InternalIPs 127.200.x.1, 2,000 workspace pods with our
    labels, the Service ``gpu-operator/nvidia-dcgm-exporter`` and its EndpointSlice as
    :func:`~gpuworkspace_devcluster.sim.resourcemetrics.discovery_objects` shapes them); the
    scrape targets (one aiohttp app, a TCPSite per node IP for dcgm-exporter's ``:9400/metrics`` and
    the kubelet's ``:10250/metrics/resource``, fixed texts rendered by the devcluster's renderers); and
    a fake hub API (``GET /hub/api/user`` answering each token's model, ``GET /hub/api/groups``
    paginated like JupyterHub's) for HubAuth, which caches token lookups as in production.
  * The service: ``python -m gpuworkspace_spawner.services.attribution --interval 5
    --kubelet-scheme http --agent-service none`` as a subprocess with a hub service's environment and
    ``KUBECONFIG``. The interval is 5 s, not the production 15 s, so that the load phase spans several
    cycles in a short run; a cycle's work does not depend on the interval.
  * Collector cycle: after the first cycle (the API answers 503 until then), ``--cycles`` idle cycles
    (no API load) are read from the service's ``/metrics``
    (``gpuworkspace_attribution_cycle_cpu_seconds`` = the process's CPU time during the cycle, and
    ``_cycle_duration_seconds``); median and max. Peer: ``prometheus_client``'s parser alone over the
    same dcgm-exporter and kubelet texts in this process (the parse floor; median of 3).
  * RSS: VmRSS and VmHWM from ``/proc/<pid>/status`` of the service and any children, after the idle
    cycles and again after the load. Peer: a Python process that only imports the service's modules.
  * API latency (the goal's figure): requests at a fixed mean rate (``--rate``, 100/s: far more than
    a hub's dashboards make; Poisson arrivals, open loop) over nine endpoints in a weighted
    round-robin that follows who polls what (issue 18): 3 in 15 a spawn page's availability for whole
    GPUs as a user, 3 in 15 one workspace's detail as its user (JupyterLab's status bar), 1 in 15 each
    that workspace's last hour (JupyterLab's usage panel), the user's trends, status, workspaces as a
    user, nodes, workspaces as admin (every row) and top as admin; for at least ``--open-s`` (20) seconds and ``--load-cycles``
    (2) collector cycles. Latency counts from each request's scheduled send time (no coordinated
    omission). Requests that overlapped a cycle's wall window (polled from ``api/v1/status``) are
    shown apart (p50 and p99 during and between cycles, and each endpoint's p99 during cycles): the
    goal is < 20 ms during a cycle too. Peer: the same load against a
    static tornado handler in its own process returning bytes of the same sizes (the HTTP floor).
  * Throughput: ``--clients`` (8) clients back to back until every endpoint had ``--requests`` (1,000)
    answers; req/s against the same peer, and the p99 at that saturation (queueing, not a goal).
  * Trends history: the service cannot run for a day here, so the same ``History`` is filled in this
    process with a full 24 h window of this fleet's series and measured with tracemalloc; the last row
    adds it to the service's RSS peak.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import multiprocessing.connection
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from . import report as bench_report

SERVICE = "gpuworkspace-attribution"
PREFIX = f"/services/{SERVICE}/"
DCGM_PORT, KUBELET_PORT = 9400, 10250
GOAL_P99_MS, GOAL_RSS_MIB = 20.0, 200.0
ADMIN_TOKEN, USER_TOKEN, SERVICE_TOKEN = "bench-admin-token", "bench-user-token", "bench-service-token"
AVAILABILITY = "resource=nvidia.com/gpu&count=1&selector=gpuworkspace.dev/pool=gpu"  # the demo whole-GPU card
GROUP_SIZE = 100
MIB = 1024 * 1024


# ------------------------------------------------------------------------------------- the world
def _hub_models(user: str) -> dict[str, dict[str, Any]]:
    access = f"access:services!service={SERVICE}"
    return {
        ADMIN_TOKEN: {
            "kind": "user",
            "name": "admin",
            "admin": True,
            "groups": [],
            "scopes": ["admin:servers", "admin:users", "read:metrics", "list:groups", "read:groups", access],
        },
        USER_TOKEN: {
            "kind": "user",
            "name": user,
            "admin": False,
            "groups": ["team-000"],
            "scopes": [access, f"read:servers!user={user}", f"read:users:groups!user={user}", "read:metrics"],
        },
        SERVICE_TOKEN: {
            "kind": "service",
            "name": SERVICE,
            "scopes": ["list:groups", "read:groups", "list:users", "read:users"],
        },
    }


def _groups(users: Sequence[str]) -> list[dict[str, Any]]:
    return [
        {"kind": "group", "name": f"team-{g:03d}", "users": list(users[i : i + GROUP_SIZE]), "properties": {}}
        for g, i in enumerate(range(0, len(users), GROUP_SIZE))
    ]


def _hub_routes(
    app: Any, models: dict[str, dict[str, Any]], groups: list[dict[str, Any]], calls: dict[str, int]
) -> None:
    """The fake hub API: ``GET /hub/api/user`` (the token's model) and ``GET /hub/api/groups``."""
    from aiohttp import web

    async def hub_user(request: web.Request) -> web.Response:
        calls["user"] += 1
        token = request.headers.get("Authorization", "").partition(" ")[2]
        model = models.get(token)
        if model is None:
            return web.json_response({"status": 403, "message": "invalid token"}, status=403)
        return web.json_response(model)

    async def hub_groups(request: web.Request) -> web.Response:
        calls["groups"] += 1
        offset, limit = int(request.query.get("offset", 0)), int(request.query.get("limit", 200))
        items = groups[offset : offset + limit]
        if "jupyterhub-pagination" not in request.headers.get("Accept", ""):
            return web.json_response(items)
        following = offset + limit < len(groups)
        nxt = {"offset": offset + limit, "limit": limit, "url": ""} if following else None
        page = {"offset": offset, "limit": limit, "total": len(groups), "next": nxt}
        return web.json_response({"items": items, "_pagination": page})

    app.router.add_get("/hub/api/user", hub_user)
    app.router.add_get("/hub/api/groups", hub_groups)


def _seed(c: Any, fleet: Any) -> float:
    """Nodes, pods (with status) and the dcgm-exporter discovery objects, through ``c.verbs``."""
    from gpuworkspace_devcluster import resources
    from gpuworkspace_devcluster.sim.resourcemetrics import discovery_objects

    from .attribution_fleet import NS, node_ip

    find = resources.find
    rt_ns, rt_node, rt_pod = find("", "v1", "namespaces"), find("", "v1", "nodes"), find("", "v1", "pods")
    t0 = time.perf_counter()
    c.verbs.create(rt_ns, "", {"metadata": {"name": NS}})
    for node in fleet.nodes:
        c.verbs.create(rt_node, "", {k: v for k, v in node.items() if k != "status"})
        c.verbs.update(rt_node, "", node["metadata"]["name"], node, subresource="status")
    for pod in fleet.pods:
        body = {k: v for k, v in pod.items() if k != "status"}
        body["metadata"] = {k: v for k, v in pod["metadata"].items() if k != "uid"}
        c.verbs.create(rt_pod, NS, body)
        c.verbs.update(rt_pod, NS, pod["metadata"]["name"], pod, subresource="status")
    addresses = [(n["metadata"]["name"], node_ip(i), True) for i, n in enumerate(fleet.nodes)]
    for rt, body in discovery_objects(addresses, DCGM_PORT):
        meta = body["metadata"]
        if c.store.get(rt, meta.get("namespace", ""), meta["name"]) is None:
            c.verbs.create(rt, meta.get("namespace", ""), body)
    return time.perf_counter() - t0


async def _world(
    conn: multiprocessing.connection.Connection, state_dir: str, nodes: int, workspaces: int
) -> None:
    from aiohttp import web

    from gpuworkspace_devcluster.cluster import DevCluster

    from .attribution_fleet import build_fleet, node_ip

    loop = asyncio.get_running_loop()
    fleet = build_fleet(nodes, workspaces)
    users = sorted({p["metadata"]["labels"]["gpuworkspace.dev/user"] for p in fleet.pods})
    bench_user = fleet.pods[0]["metadata"]["labels"]["gpuworkspace.dev/user"]
    hub_calls = {"user": 0, "groups": 0}

    def local_ip(request: web.Request) -> str:
        return str(request.transport.get_extra_info("sockname")[0]) if request.transport else ""

    dcgm = {ip: t.encode() for ip, t in fleet.dcgm.items()}
    kubelet = {ip: t.encode() for ip, t in fleet.kubelet.items()}
    ctype = "text/plain; version=0.0.4; charset=utf-8"

    async def dcgm_metrics(request: web.Request) -> web.Response:
        return web.Response(body=dcgm[local_ip(request)], headers={"Content-Type": ctype})

    async def kubelet_metrics(request: web.Request) -> web.Response:
        return web.Response(body=kubelet[local_ip(request)], headers={"Content-Type": ctype})

    targets = web.Application()
    targets.router.add_get("/metrics", dcgm_metrics)
    targets.router.add_get("/metrics/resource", kubelet_metrics)
    _hub_routes(targets, _hub_models(bench_user), _groups(users), hub_calls)
    runner = web.AppRunner(targets, access_log=None)
    await runner.setup()
    hub_site = web.TCPSite(runner, "127.0.0.1", 0)
    await hub_site.start()
    hub_port = hub_site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    for i in range(nodes):
        for port in (DCGM_PORT, KUBELET_PORT):
            await web.TCPSite(runner, node_ip(i), port).start()

    async with DevCluster(state_dir, persist=False) as c:
        seed_s = _seed(c, fleet)
        conn.send(
            {
                "kubeconfig": str(c.kubeconfig),
                "hub_api": f"http://127.0.0.1:{hub_port}/hub/api",
                "user": bench_user,
                "server": fleet.pods[0]["metadata"]["annotations"]["gpuworkspace.dev/servername"],
                "seed_s": seed_s,
                "gpu_workspaces": fleet.gpu_workspaces,
                "dcgm_bytes": sum(len(t) for t in dcgm.values()),
                "kubelet_bytes": sum(len(t) for t in kubelet.values()),
            }
        )
        while True:
            cmd = await loop.run_in_executor(None, conn.recv)
            if cmd == "stop":
                break
            if cmd == "texts":
                conn.send((list(fleet.dcgm.values()), list(fleet.kubelet.values())))
            elif cmd == "hub_calls":
                conn.send(dict(hub_calls))
    await runner.cleanup()
    conn.send("stopped")


def _world_main(
    conn: multiprocessing.connection.Connection, state_dir: str, nodes: int, workspaces: int
) -> None:
    asyncio.run(_world(conn, state_dir, nodes, workspaces))


class World:
    def __init__(self, state_dir: Path, nodes: int, workspaces: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_world_main, args=(child, str(state_dir), nodes, workspaces), daemon=True
        )
        self.proc.start()
        child.close()
        if not self.conn.poll(300):
            raise RuntimeError("the world process did not start in 300 s")
        self.info: dict[str, Any] = self.conn.recv()

    def call(self, cmd: str) -> Any:
        self.conn.send(cmd)
        return self.conn.recv()

    def stop(self) -> None:
        try:
            self.conn.send("stop")
            self.conn.poll(15)
        finally:
            self.proc.join(15)
            if self.proc.is_alive():
                self.proc.kill()


# ------------------------------------------------------------------------------ the HTTP floor
def _peer_main(conn: multiprocessing.connection.Connection, bodies: dict[str, bytes]) -> None:
    from tornado import httpserver, ioloop, web

    class Static(web.RequestHandler):
        def get(self) -> None:
            self.set_header("Content-Type", "application/json")
            self.set_header("Cache-Control", "no-store")
            self.finish(bodies[self.request.path])

    async def run() -> None:
        app = web.Application([(path, Static) for path in bodies])
        server = httpserver.HTTPServer(app, xheaders=True)
        sockets = __import__("tornado.netutil", fromlist=["bind_sockets"]).bind_sockets(0, "127.0.0.1")
        server.add_sockets(sockets)
        conn.send(sockets[0].getsockname()[1])
        await ioloop.IOLoop.current().run_in_executor(None, conn.recv)
        server.stop()

    asyncio.run(run())


# --------------------------------------------------------------------------------- the service
def _proc_tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return out


def rss_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MiB summed over ``pid`` and its descendants."""
    rss = hwm = 0.0
    for p in _proc_tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith(("VmRSS:", "VmHWM:")):
                        kib = float(line.split()[1])
                        if line.startswith("VmRSS:"):
                            rss += kib / 1024
                        else:
                            hwm += kib / 1024
        except OSError:
            continue
    return rss, hwm


def proc_cpu_s(pid: int) -> float:
    """utime+stime (with reaped children) of ``pid`` and its live descendants, in seconds."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for p in _proc_tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / tick
        except (OSError, IndexError, ValueError):
            continue
    return total


class Service:
    def __init__(self, world: dict[str, Any], port: int, interval: float, log_path: Path) -> None:
        env = {
            **os.environ,
            "KUBECONFIG": world["kubeconfig"],
            "JUPYTERHUB_API_URL": world["hub_api"],
            "JUPYTERHUB_API_TOKEN": SERVICE_TOKEN,
            "JUPYTERHUB_SERVICE_PREFIX": PREFIX,
            "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}{PREFIX}",
            "JUPYTERHUB_SERVICE_NAME": SERVICE,
            "JUPYTERHUB_BASE_URL": "/",
        }
        cmd = [
            sys.executable,
            "-m",
            "gpuworkspace_spawner.services.attribution",
            "--interval",
            str(interval),
            "--kubelet-scheme",
            "http",
            "--agent-service",
            "none",
        ]
        self.command = " ".join(cmd[1:])
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{port}{PREFIX}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"token {token}"}


async def wait_first_cycle(session: aiohttp.ClientSession, svc: Service, limit_s: float = 180) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        if svc.proc.poll() is not None:
            raise RuntimeError(f"the service exited ({svc.proc.returncode}):\n{svc.tail()}")
        try:
            async with session.get(svc.base + "api/v1/status", headers=_auth(ADMIN_TOKEN)) as r:
                if r.status == 200 and (await r.json()).get("cycles", 0) >= 1:
                    return time.perf_counter() - t0
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.25)
    raise RuntimeError(f"no first cycle in {limit_s:.0f} s:\n{svc.tail()}")


async def read_metrics(session: aiohttp.ClientSession, svc: Service) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    async with session.get(svc.base + "metrics", headers=_auth(ADMIN_TOKEN)) as r:
        text = await r.text()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if (
                s.name.startswith("gpuworkspace_attribution_cycle")
                or s.name == "gpuworkspace_attribution_cycles_total"
            ):
                out[s.name] = float(s.value)
    return out


async def status(session: aiohttp.ClientSession, svc: Service) -> dict[str, Any]:
    async with session.get(svc.base + "api/v1/status", headers=_auth(ADMIN_TOKEN)) as r:
        return dict(await r.json())


@dataclass
class CycleSample:
    at: float  # wall clock at the cycle's start (the service's ``at``)
    duration_s: float
    cpu_s: float | None = None


async def idle_cycles(session: aiohttp.ClientSession, svc: Service, n: int) -> list[CycleSample]:
    """The next ``n`` cycles with no API load, from /metrics read right after each."""
    out: list[CycleSample] = []
    seen = (await status(session, svc))["cycles"]
    while len(out) < n:
        await asyncio.sleep(0.2)
        st = await status(session, svc)
        if st["cycles"] > seen:
            seen = st["cycles"]
            m = await read_metrics(session, svc)
            out.append(
                CycleSample(
                    st["at"],
                    m["gpuworkspace_attribution_cycle_duration_seconds"],
                    m["gpuworkspace_attribution_cycle_cpu_seconds"],
                )
            )
            print(
                f"  .. idle cycle {len(out)}/{n}: cpu {out[-1].cpu_s:.2f} s, wall {out[-1].duration_s:.2f} s",
                flush=True,
            )
    return out


# ---------------------------------------------------------------------------------------- load
@dataclass
class Endpoint:
    name: str
    path: str  # under the prefix
    token: str
    size: int = 0
    weight: int = 1  # turns in each round of the mix


def mix(endpoints: Sequence[Endpoint]) -> list[Endpoint]:
    """One round of the weighted round-robin: each endpoint ``weight`` times, interleaved."""
    most = max(e.weight for e in endpoints)
    return [e for k in range(most) for e in endpoints if e.weight > k]


@dataclass
class Sample:
    endpoint: str
    start: float  # wall clock
    end: float
    ms: float


@dataclass
class Load:
    samples: list[Sample] = field(default_factory=list)
    wall_s: float = 0.0
    cycles: list[CycleSample] = field(default_factory=list)


async def run_load(
    base: str,
    endpoints: Sequence[Endpoint],
    *,
    clients: int,
    per_endpoint: int,
    svc: Service | None = None,
    min_cycles: int = 0,
) -> Load:
    """``clients`` workers, each round-robin over ``endpoints``, until each endpoint had ``per_endpoint``
    answers (and, with ``svc``, at least ``min_cycles`` cycles ran meanwhile)."""
    load = Load()
    counts = dict.fromkeys((e.name for e in endpoints), 0)
    endpoints = mix(endpoints)
    cycles_done = asyncio.Event()
    if not min_cycles:
        cycles_done.set()
    connector = aiohttp.TCPConnector(limit=clients + 2)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def poll_cycles() -> None:
            seen = (await status(session, svc))["cycles"] if svc else 0
            start_cycles = seen
            while True:
                await asyncio.sleep(0.5)
                st = await status(session, svc)  # type: ignore[arg-type]
                if st["cycles"] > seen:
                    seen = st["cycles"]
                    load.cycles.append(CycleSample(st["at"], st["cycle_duration_s"], st.get("cycle_cpu_s")))
                    if seen - start_cycles >= min_cycles + 1:  # the first may have begun before the load
                        cycles_done.set()

        async def worker(k: int) -> None:
            i = k
            while True:
                e = endpoints[i % len(endpoints)]
                i += 1
                if (
                    counts[e.name] >= per_endpoint
                    and all(c >= per_endpoint for c in counts.values())
                    and cycles_done.is_set()
                ):
                    return
                t0, w0 = time.perf_counter(), time.time()
                async with session.get(base + e.path, headers=_auth(e.token)) as r:
                    body = await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"{e.path}: HTTP {r.status}: {body[:200]!r}")
                t1 = time.perf_counter()
                load.samples.append(Sample(e.name, w0, w0 + (t1 - t0), (t1 - t0) * 1000))
                counts[e.name] += 1

        poller = asyncio.create_task(poll_cycles()) if svc else None
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(clients)))
        load.wall_s = time.perf_counter() - t0
        if poller:
            poller.cancel()
            await asyncio.gather(poller, return_exceptions=True)
    return load


async def run_open_load(
    base: str,
    endpoints: Sequence[Endpoint],
    *,
    rate: float,
    min_s: float,
    svc: Service | None,
    min_cycles: int,
) -> Load:
    """Requests at a fixed mean ``rate`` (Poisson arrivals, seeded), whatever the answers' pace (open
    loop), for at least ``min_s`` and ``min_cycles`` cycles. Latency counts from each request's scheduled
    send time, so a stalled server is not hidden by clients that wait for it (coordinated omission)."""
    load = Load()
    rng = random.Random(7)
    endpoints = mix(endpoints)
    connector = aiohttp.TCPConnector(limit=256)
    async with aiohttp.ClientSession(connector=connector) as session:
        start_cycles = (await status(session, svc))["cycles"] if svc else 0
        seen = start_cycles
        tasks: list[asyncio.Task[None]] = []

        async def one(e: Endpoint, due: float) -> None:
            w0 = time.time() + (due - time.perf_counter())
            async with session.get(base + e.path, headers=_auth(e.token)) as r:
                body = await r.read()
                if r.status != 200:
                    raise RuntimeError(f"{e.path}: HTTP {r.status}: {body[:200]!r}")
            ms = (time.perf_counter() - due) * 1000
            load.samples.append(Sample(e.name, w0, w0 + ms / 1000, ms))

        t0 = next_poll = time.perf_counter()
        due, i = t0, 0
        while True:
            now = time.perf_counter()
            if svc is not None and now >= next_poll:
                next_poll = now + 0.5
                st = await status(session, svc)
                if st["cycles"] > seen:
                    seen = st["cycles"]
                    load.cycles.append(CycleSample(st["at"], st["cycle_duration_s"], st.get("cycle_cpu_s")))
            if now - t0 >= min_s and (svc is None or seen - start_cycles >= min_cycles + 1):
                break
            if due > now:
                wake = due if svc is None else min(due, next_poll)
                await asyncio.sleep(max(0.0, wake - now))
                continue
            tasks.append(asyncio.ensure_future(one(endpoints[i % len(endpoints)], due)))
            i += 1
            due += rng.expovariate(rate)
        await asyncio.gather(*tasks)
        load.wall_s = time.perf_counter() - t0
    return load


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)] if s else math.nan


def during_cycle(s: Sample, cycles: Sequence[CycleSample]) -> bool:
    return any(s.start < c.at + c.duration_s and s.end > c.at for c in cycles)


# ------------------------------------------------------------------------------------- figures
def parse_floor(dcgm: Sequence[str], kubelet: Sequence[str], runs: int = 3) -> float:
    """CPU seconds of ``prometheus_client``'s parser alone over every text (median of ``runs``)."""
    from prometheus_client.parser import text_string_to_metric_families

    times = []
    for _ in range(runs):
        t0 = time.process_time()
        for text in (*dcgm, *kubelet):
            for family in text_string_to_metric_families(text):
                for _s in family.samples:
                    pass
        times.append(time.process_time() - t0)
    return statistics.median(times)


def full_history_mib(nodes: int, workspaces: int) -> float:
    """Memory of the trends history once a whole window (24 h) of this fleet's cycles is recorded: the
    service cannot be run for a day here, so the same :class:`History` is filled in this process with
    the fleet's own series (``series_of`` of its attribution) and measured with tracemalloc."""
    import tracemalloc

    from gpuworkspace_spawner.services.attribution import parsing
    from gpuworkspace_spawner.services.attribution.history import History, series_of
    from gpuworkspace_spawner.services.attribution.model import Observation
    from gpuworkspace_spawner.services.attribution.rules import attribute

    from .attribution_fleet import build_fleet, node_ip

    fleet = build_fleet(nodes, workspaces)
    devices = [
        d
        for i, n in enumerate(fleet.nodes)
        for d in parsing.parse_dcgm(fleet.dcgm[node_ip(i)], n["metadata"]["name"])
    ]
    found = (parsing.workspace_pod(p) for p in fleet.pods)
    obs = Observation(
        now=time.time(),
        nodes=tuple(parsing.node_info(n) for n in fleet.nodes),
        workspaces=tuple(w for w in found if w is not None),
        devices=tuple(devices),
    )
    result = attribute(obs)
    series = series_of(result.cells, result.workspaces)
    history = History()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for k in range(history.capacity + 10):
        history.record(obs.now + history.step_s * k, series)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return used / MIB


def imports_only_rss() -> float:
    code = (
        "from gpuworkspace_spawner.services import lean_imports\n"
        "lean_imports.install()  # as the service's __main__ does\n"
        "import gpuworkspace_spawner.services.attribution.app\n"
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS:')][0])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip()) / 1024


@dataclass
class Row:
    figure: str
    ours: float
    peer: float | None
    unit: str
    goal: float | None = None  # an upper bound

    def cells(self) -> list[str]:
        ratio = f"{self.ours / self.peer:.1f}x" if self.peer else ""
        peer = _num(self.peer) if self.peer is not None else ""
        goal = f"< {self.goal:g} {self.unit}" if self.goal is not None else ""
        met = ("yes" if self.ours < self.goal else "NO") if self.goal is not None else ""
        return [self.figure, f"{_num(self.ours)} {self.unit}", peer, ratio, goal, met]


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"


def print_table(rows: Sequence[Row]) -> None:
    head = ["figure", "ours", "peer", "ratio", "goal", "met?"]
    table = [head, *(r.cells() for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    print()
    for n, line in enumerate(table):
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(line, widths, strict=True))
            )
        )
        if n == 0:
            print("-" * (sum(widths) + 2 * (len(widths) - 1)))


HEADLINE = ("throughput,", "cycle CPU, median", "cycle wall, median")  # shown with the rows that have goals
PEERS = {
    "ms": "the same load against a static tornado handler returning bytes of the same sizes",
    "req/s": "the same load against a static tornado handler returning bytes of the same sizes",
    "s": "prometheus_client's parser alone over the same dcgm-exporter and kubelet texts (CPU s)",
    "MiB": "a python process that only imports the service's modules",
}


def emit_headline(rows: Sequence[Row], nodes: int, workspaces: int) -> None:
    """The rows with a goal and the key peer comparisons, for ``make bench``'s combined table."""
    scale = f" ({nodes} nodes x 8 GPUs, {workspaces:,} workspaces)"
    bench_report.emit(
        bench_report.Row(
            "bench_attribution",
            r.figure.strip() + (scale if i == 0 else ""),
            r.ours,
            r.peer,
            r.unit,
            f"< {r.goal:g} {r.unit}" if r.goal is not None else "",
            None if r.goal is None else r.ours < r.goal,
            PEERS.get(r.unit, "") if r.peer else "",
        )
        for i, r in enumerate(rows)
        if r.goal is not None or r.figure.startswith(HEADLINE)
    )


def cycle_rows(steady: Load, floor_open: Load, endpoints: Sequence[Endpoint]) -> list[Row]:
    """The open-loop latencies of requests that overlapped a collection cycle, and of the others."""

    def lat(load: Load, name: str | None = None, q: float = 0.99) -> float:
        return pct([s.ms for s in load.samples if name is None or s.endpoint == name], q)

    rows: list[Row] = []
    in_cycle = [s.ms for s in steady.samples if during_cycle(s, steady.cycles)]
    between = [s.ms for s in steady.samples if not during_cycle(s, steady.cycles)]
    if in_cycle:
        rows.append(Row("  p50 during a cycle", pct(in_cycle, 0.5), lat(floor_open, q=0.5), "ms"))
        rows.append(
            Row(
                f"  p99 during a cycle (n={len(in_cycle)})",
                pct(in_cycle, 0.99),
                lat(floor_open),
                "ms",
                GOAL_P99_MS,
            )
        )
        rows.append(Row("  max during a cycle", max(in_cycle), max(s.ms for s in floor_open.samples), "ms"))
        for e in endpoints:
            mine = [s.ms for s in steady.samples if s.endpoint == e.name and during_cycle(s, steady.cycles)]
            if mine:
                rows.append(
                    Row(f"    p99 {e.name} during cycles (n={len(mine)})", pct(mine, 0.99), None, "ms")
                )
    if between:
        rows.append(
            Row(
                f"  p99 between cycles (n={len(between)})",
                pct(between, 0.99),
                lat(floor_open),
                "ms",
                GOAL_P99_MS,
            )
        )
        rows.append(Row("  p50 between cycles", pct(between, 0.5), lat(floor_open, q=0.5), "ms"))
    return rows


# ---------------------------------------------------------------------------------------- main
async def bench(opts: argparse.Namespace, tmp: Path) -> int:
    print(
        f"attribution benchmark: python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"{opts.nodes} nodes x 8 GPUs, {opts.workspaces} workspaces; service --interval {opts.interval}"
    )
    t0 = time.perf_counter()
    world = World(tmp / "cluster", opts.nodes, opts.workspaces)
    info = world.info
    print(
        f"world: fleet built and seeded in {time.perf_counter() - t0:.1f} s (seeding {info['seed_s']:.1f} s); "
        f"{info['gpu_workspaces']} GPU workspaces; scrape texts per cycle: dcgm "
        f"{info['dcgm_bytes'] / 1e6:.1f} MB, kubelet {info['kubelet_bytes'] / 1e6:.1f} MB",
        flush=True,
    )
    rows: list[Row] = []
    notes: list[str] = []
    svc = Service(info, _free_port(), opts.interval, tmp / "service.log")
    try:
        async with aiohttp.ClientSession() as session:
            first_s = await wait_first_cycle(session, svc)
            print(f"service: first cycle done {first_s:.1f} s after start (pid {svc.proc.pid})", flush=True)
            cpu_before = proc_cpu_s(svc.proc.pid)
            wall_before = time.perf_counter()
            idle = await idle_cycles(session, svc, opts.cycles)
            idle_cpu_rate = (proc_cpu_s(svc.proc.pid) - cpu_before) / (time.perf_counter() - wall_before)
            rss_idle = rss_mib(svc.proc.pid)
            user, server = info["user"], info["server"] or "default"
            endpoints = [
                Endpoint("nodes (admin)", "api/v1/nodes", ADMIN_TOKEN),
                Endpoint("workspaces (admin, all rows)", "api/v1/workspaces", ADMIN_TOKEN),
                Endpoint("workspaces (a user)", "api/v1/workspaces", USER_TOKEN),
                # what JupyterLab's status bar polls (issue 18), through the server extension
                Endpoint(
                    "workspace detail (a user)", f"api/v1/workspaces/{user}/{server}", USER_TOKEN, weight=3
                ),
                Endpoint("top (admin)", "api/v1/top", ADMIN_TOKEN),
                # what a spawn page polls for each GPU profile's card (issue 18)
                Endpoint(
                    "availability (a user)", f"api/v1/availability?{AVAILABILITY}", USER_TOKEN, weight=3
                ),
                # the JupyterLab panel's last hour, and the service's status
                Endpoint(
                    "trends (a user, 1 h)",
                    f"api/v1/trends?series=user:{user}:gpu_util,user:{user}:gpus&window=1h",
                    USER_TOKEN,
                ),
                Endpoint("status (a user)", "api/v1/status", USER_TOKEN),
                # the JupyterLab usage panel's plots: this workspace's last hour, while the panel is open
                Endpoint(
                    "workspace history (a user, 1 h)",
                    f"api/v1/workspaces/{user}/{server}/history",
                    USER_TOKEN,
                ),
            ]
            for e in endpoints:
                async with session.get(svc.base + e.path, headers=_auth(e.token)) as r:
                    e.size = len(await r.read())
                    if r.status != 200:
                        raise RuntimeError(f"{e.path}: HTTP {r.status}")
        print(
            "load: " + ", ".join(f"{e.name} {e.size / 1e3:.1f} kB" for e in endpoints),
            flush=True,
        )
        ours = await run_load(
            svc.base,
            endpoints,
            clients=opts.clients,
            per_endpoint=opts.requests,
            svc=svc,
            min_cycles=opts.load_cycles,
        )
        rss_load = rss_mib(svc.proc.pid)
        steady = await run_open_load(
            svc.base, endpoints, rate=opts.rate, min_s=opts.open_s, svc=svc, min_cycles=opts.load_cycles
        )
        print(
            f"  .. open-loop load on the service: {len(steady.samples)} requests at {opts.rate:g}/s "
            f"in {steady.wall_s:.1f} s, {len(steady.cycles)} cycles",
            flush=True,
        )
        rss_load = max(rss_load, rss_mib(svc.proc.pid), key=lambda r: r[0])
        hub_calls = world.call("hub_calls")
    finally:
        svc.stop()
        if opts.keep_log:
            shutil.copyfile(svc.log_path, opts.keep_log)
    print(
        f"  .. load on the service: {len(ours.samples)} requests in {ours.wall_s:.1f} s, {len(ours.cycles)} cycles",
        flush=True,
    )

    # the HTTP floor: same sizes, static bytes, own process
    ctx = multiprocessing.get_context("spawn")
    conn, child = ctx.Pipe()
    bodies = {PREFIX + e.path.partition("?")[0]: b"x" * e.size for e in endpoints}  # routes: no query
    peer_proc = ctx.Process(target=_peer_main, args=(child, bodies), daemon=True)
    peer_proc.start()
    peer_port = conn.recv()
    try:
        floor = await run_load(
            f"http://127.0.0.1:{peer_port}{PREFIX}",
            endpoints,
            clients=opts.clients,
            per_endpoint=opts.requests,
        )
        floor_open = await run_open_load(
            f"http://127.0.0.1:{peer_port}{PREFIX}",
            endpoints,
            rate=opts.rate,
            min_s=min(opts.open_s, 10.0),
            svc=None,
            min_cycles=0,
        )
    finally:
        conn.send("stop")
        peer_proc.join(15)
    print(f"  .. load on the static peer: {len(floor.samples)} requests in {floor.wall_s:.1f} s", flush=True)

    dcgm_texts, kubelet_texts = world.call("texts")
    world.stop()
    parse_s = parse_floor(dcgm_texts, kubelet_texts)
    base_rss = imports_only_rss()
    history_mib = full_history_mib(opts.nodes, opts.workspaces)

    # ---------------------------------------------------------------------------- the table
    def lat(load: Load, name: str | None = None, q: float = 0.99) -> float:
        return pct([s.ms for s in load.samples if name is None or s.endpoint == name], q)

    rows.append(
        Row(f"API p99 at {opts.rate:g} req/s (open loop)", lat(steady), lat(floor_open), "ms", GOAL_P99_MS)
    )
    rows.append(Row(f"API p50 at {opts.rate:g} req/s", lat(steady, q=0.5), lat(floor_open, q=0.5), "ms"))
    for e in endpoints:
        rows.append(Row(f"  p99 {e.name}", lat(steady, e.name), lat(floor_open, e.name), "ms", GOAL_P99_MS))
    in_cycle = [s.ms for s in steady.samples if during_cycle(s, steady.cycles)]
    rows.extend(cycle_rows(steady, floor_open, endpoints))
    rows.append(
        Row(
            f"throughput, {opts.clients} clients back to back",
            len(ours.samples) / ours.wall_s,
            len(floor.samples) / floor.wall_s,
            "req/s",
        )
    )
    rows.append(Row(f"  p99 at that saturation (x{opts.clients} clients)", lat(ours), lat(floor), "ms"))
    saturated_in_cycle = [s.ms for s in ours.samples if during_cycle(s, ours.cycles)]
    if saturated_in_cycle:
        rows.append(
            Row("  p99 at saturation during a cycle", pct(saturated_in_cycle, 0.99), lat(floor), "ms")
        )
    cpu = [c.cpu_s or 0.0 for c in idle]
    wall = [c.duration_s for c in idle]
    rows.append(Row(f"cycle CPU, median of {len(idle)} idle cycles", statistics.median(cpu), parse_s, "s"))
    rows.append(Row("cycle CPU, max", max(cpu), parse_s, "s"))
    rows.append(Row("cycle wall, median", statistics.median(wall), parse_s, "s"))
    rows.append(Row("cycle wall, max", max(wall), parse_s, "s"))
    if ours.cycles:
        rows.append(
            Row("cycle wall under API load, max", max(c.duration_s for c in ours.cycles), parse_s, "s")
        )
    rows.append(Row("RSS (VmRSS) after idle cycles", rss_idle[0], base_rss, "MiB", GOAL_RSS_MIB))
    rows.append(Row("RSS (VmRSS) after the load", rss_load[0], base_rss, "MiB", GOAL_RSS_MIB))
    peak = max(rss_idle[1], rss_load[1])
    rows.append(Row("RSS peak (VmHWM)", peak, base_rss, "MiB", GOAL_RSS_MIB))
    rows.append(Row("  + trends history at a full 24 h window", history_mib, 0.0, "MiB"))
    rows.append(
        Row("RSS peak at a full window (peak + history)", peak + history_mib, base_rss, "MiB", GOAL_RSS_MIB)
    )
    print_table(rows)
    emit_headline(rows, opts.nodes, opts.workspaces)
    print()
    print(
        "peers: API = the same client and request mix against a static tornado handler (own process) "
        "returning bytes of the same sizes; cycle = prometheus_client's parser alone over the same "
        f"{info['dcgm_bytes'] / 1e6:.1f} MB dcgm + {info['kubelet_bytes'] / 1e6:.1f} MB kubelet texts "
        "(CPU s, in this process); RSS = a python process that only imports the service's modules."
    )
    notes.append(
        f"service process CPU over the idle cycles (/proc utime+stime): {idle_cpu_rate * 100:.0f}% of a core "
        f"at --interval {opts.interval}"
    )
    notes.append(
        f"load: {len(ours.samples)} requests in {ours.wall_s:.1f} s ({len(ours.samples) / ours.wall_s:,.0f} req/s) "
        f"over {len(ours.cycles)} cycles; {len(in_cycle)} requests overlapped a cycle. "
        f"Floor: {len(floor.samples) / floor.wall_s:,.0f} req/s."
    )
    notes.append(
        f"fake hub calls: GET /user {hub_calls['user']} (HubAuth caches token lookups), "
        f"GET /groups {hub_calls['groups']}"
    )
    for n in notes:
        print(n)
    print(f"command: {svc.command}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=64, help="GPU nodes (8 GPUs each; default 64)")
    parser.add_argument("--workspaces", type=int, default=2000, help="workspace pods (default 2,000)")
    parser.add_argument("--interval", type=float, default=5.0, help="the service's --interval (default 5 s)")
    parser.add_argument("--cycles", type=int, default=4, help="idle cycles measured (default 4)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent API clients (default 8)")
    parser.add_argument("--requests", type=int, default=1000, help="requests per endpoint (default 1,000)")
    parser.add_argument(
        "--load-cycles", type=int, default=2, help="cycles the API load spans at least (default 2)"
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=100.0,
        help="open-loop request rate for the latency goal (default 100/s)",
    )
    parser.add_argument(
        "--open-s", type=float, default=20.0, help="seconds of open-loop load at least (default 20)"
    )
    parser.add_argument("--keep-log", default="", help="copy the service's log to this file")
    opts = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-attribution-") as tmp:
        rc = asyncio.run(bench(opts, Path(tmp)))
    print(f"total wall time {time.perf_counter() - started:.0f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
