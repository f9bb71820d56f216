"""DevCluster benchmark: create, get, list and watch fan-out over real HTTP at 1,000 / 5,000 / 10,000 pods.

Run as a script (``make bench`` or ``python -m tests.benchmarks.bench_devcluster``); it is not a pytest
test and it has no pass/fail thresholds: it prints a table, and whether the stated goal
("list of 5,000 pods with a label selector < 200 ms") is met on this machine.

How it measures
  * The DevCluster (``async with DevCluster(state_dir, persist=...)``) runs in a child process with its
    own event loop, as a real apiserver would; the clients run here. On a 2-core machine server and
    clients each get a core, so the figures are the server's, not the server's plus the client's on
    one loop. ``--in-process`` runs the cluster on this process's loop instead (server and clients
    then share one core).
  * Bulk data is seeded in the server process through ``c.verbs.create`` (no HTTP); the last 500 pods
    of the 1,000 and 10,000 sizes are created over HTTP and timed.
  * Clients are kubernetes_asyncio with ``_preload_content=False``: responses are read as bytes and not
    deserialised into models (that would measure kubernetes_asyncio, not the server). One side line
    shows what deserialising costs. Watches are raw aiohttp streaming GETs counting event lines.
  * The peer figure: the same client doing GET /version (the request floor), measured at the start
    and the end of the run; every figure is also printed in floor units ("x floor": how many
    /version round trips one operation costs), which is what to compare across machines.
  * "server ms" is the median handler time the cluster logged for those requests
    (``c.api.request_log``: routing, the verb, serialising the body; not the socket write).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import multiprocessing.connection
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client, config

from . import report as bench_report

NS = "bench"
GOAL_MS = 200.0
SEL_MIG = "gpuworkspace.dev/gpu-mode=mig"  # 1 in 10 pods
SEL_ALL = "component=singleuser-server"  # every pod
HTTP_CREATES = 500
CONCURRENCY = 8
WATCH_PATCHES = 1000


# ------------------------------------------------------------------------------------------ pod bodies
def pod_body(i: int) -> dict[str, Any]:
    """A pod as KubeSpawner makes it for user-N (about 2 KB of JSON); 1 in 10 asks for a MIG slice."""
    user = f"user-{i}"
    labels = {
        "app": "jupyterhub",
        "chart": "jupyterhub-4.1.0",
        "component": "singleuser-server",
        "heritage": "jupyterhub",
        "release": "gpuworkspace",
        "hub.jupyter.org/network-access-hub": "true",
        "hub.jupyter.org/servername": "",
        "hub.jupyter.org/username": user,
    }
    resources: dict[str, Any] = {
        "limits": {"cpu": "4", "memory": "16Gi"},
        "requests": {"cpu": "500m", "memory": "2Gi"},
    }
    if i % 10 == 0:
        labels["gpuworkspace.dev/gpu-mode"] = "mig"
        resources["limits"]["nvidia.com/mig-1g.10gb"] = "1"
    env = {
        "JUPYTERHUB_API_URL": "http://hub:8081/hub/api",
        "JUPYTERHUB_ACTIVITY_URL": f"http://hub:8081/hub/api/users/{user}/activity",
        "JUPYTERHUB_BASE_URL": "/",
        "JUPYTERHUB_CLIENT_ID": f"jupyterhub-user-{user}",
        "JUPYTERHUB_HOST": "",
        "JUPYTERHUB_OAUTH_CALLBACK_URL": f"/user/{user}/oauth_callback",
        "JUPYTERHUB_OAUTH_SCOPES": f'["access:servers!server={user}/"]',
        "JUPYTERHUB_SERVER_NAME": "",
        "JUPYTERHUB_SERVICE_PREFIX": f"/user/{user}/",
        "JUPYTERHUB_SERVICE_URL": "http://0.0.0.0:8888/user/" + user + "/",
        "JUPYTERHUB_USER": user,
        "JUPYTER_IMAGE_SPEC": "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07",
        "MEM_GUARANTEE": "2147483648",
        "MEM_LIMIT": "17179869184",
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"jupyter-{user}",
            "labels": labels,
            "annotations": {"hub.jupyter.org/username": user, "hub.jupyter.org/servername": ""},
        },
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "notebook",
                    "image": "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07",
                    "args": ["jupyterhub-singleuser"],
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "ports": [{"containerPort": 8888, "name": "notebook-port", "protocol": "TCP"}],
                    "resources": resources,
                    "securityContext": {"allowPrivilegeEscalation": False, "runAsUser": 1000},
                    "volumeMounts": [{"mountPath": "/home/jovyan", "name": "home"}],
                }
            ],
            "restartPolicy": "OnFailure",
            "schedulerName": "default-scheduler",
            "securityContext": {"fsGroup": 100},
            "tolerations": [
                {
                    "effect": "NoSchedule",
                    "key": "hub.jupyter.org/dedicated",
                    "operator": "Equal",
                    "value": "user",
                }
            ],
            "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": f"claim-{user}"}}],
        },
    }


# ------------------------------------------------------------------------------ the server's side
def _server_command(c: Any, cmd: str, args: tuple[Any, ...]) -> Any:
    """Runs in the cluster's process, on its loop: seeding, resourceVersion, the request log."""
    from gpuworkspace_devcluster import resources

    if cmd == "seed":  # create pods [start, stop) in-process through the verbs (no HTTP)
        start, stop = args
        pods = resources.find("", "v1", "pods")
        namespaces = resources.find("", "v1", "namespaces")
        if c.store.get(namespaces, "", NS) is None:
            c.verbs.create(namespaces, "", {"metadata": {"name": NS}})
        t0 = time.perf_counter()
        for i in range(start, stop):
            c.verbs.create(pods, NS, pod_body(i))
        return time.perf_counter() - t0
    if cmd == "rv":
        return c.store.rv
    if cmd == "cpu":  # CPU seconds the server's process has used
        return time.process_time()
    if cmd == "log_clear":
        c.api.request_log.clear()
        return None
    if cmd == "log_durations":  # handler seconds of the logged requests with this verb
        (verb,) = args
        return [r.duration_s for r in c.api.request_log if r.verb == verb and r.status < 400]
    raise ValueError(cmd)


async def _child_loop(conn: multiprocessing.connection.Connection, state_dir: str, persist: bool) -> None:
    from gpuworkspace_devcluster.cluster import DevCluster

    loop = asyncio.get_running_loop()
    async with DevCluster(state_dir, persist=persist) as c:
        conn.send((c.url, str(c.kubeconfig), c.admin_token))
        while True:
            cmd, args = await loop.run_in_executor(None, conn.recv)
            if cmd == "stop":
                break
            try:
                conn.send(("ok", _server_command(c, cmd, args)))
            except Exception as exc:
                conn.send(("error", repr(exc)))
    conn.send(("ok", None))


def _child_main(conn: multiprocessing.connection.Connection, state_dir: str, persist: bool) -> None:
    asyncio.run(_child_loop(conn, state_dir, persist))


class Server:
    """A DevCluster in a child process (default) or on this loop (``in_process``), behind one interface."""

    def __init__(self, state_dir: Path, *, persist: bool, in_process: bool) -> None:
        self.state_dir, self.persist, self.in_process = state_dir, persist, in_process
        self.url = self.kubeconfig = self.token = ""
        self._cluster: Any = None
        self._proc: Any = None
        self._conn: multiprocessing.connection.Connection | None = None

    async def __aenter__(self) -> Server:
        if self.in_process:
            from gpuworkspace_devcluster.cluster import DevCluster

            self._cluster = DevCluster(self.state_dir, persist=self.persist)
            await self._cluster.start()
            c = self._cluster
            self.url, self.kubeconfig, self.token = c.url, str(c.kubeconfig), c.admin_token
            return self
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_child_main, args=(child, str(self.state_dir), self.persist), daemon=True
        )
        self._proc.start()
        child.close()
        ready = await asyncio.get_running_loop().run_in_executor(None, self._conn.recv)
        self.url, self.kubeconfig, self.token = ready
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._cluster is not None:
            await self._cluster.stop()
        elif self._proc is not None and self._conn is not None:
            await self.call("stop")
            self._proc.join(15)
            self._conn.close()

    async def call(self, cmd: str, *args: Any) -> Any:
        if self._cluster is not None:
            return _server_command(self._cluster, cmd, args)
        conn = self._conn
        assert conn is not None

        def rpc() -> Any:
            conn.send((cmd, args))
            return conn.recv()

        status, value = await asyncio.get_running_loop().run_in_executor(None, rpc)
        if status != "ok":
            raise RuntimeError(f"server command {cmd} failed: {value}")
        return value

    async def server_ms(self, verb: str) -> float | None:
        durations = await self.call("log_durations", verb)
        return statistics.median(durations) * 1000 if durations else None


# ----------------------------------------------------------------------------------------- results
def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


@dataclass
class Row:
    pods: str
    what: str
    value: float
    unit: str  # "obj/s", "req/s", "ev/s" (rates) or "ms" (latency)
    floor_x: float | None = None  # cost in /version round trips
    p95: float | None = None
    server_ms: float | None = None
    note: str = ""


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    floor_ms: float = 0.0  # one sequential /version round trip
    floor_conc_rps: float = 0.0

    def add(self, row: Row) -> Row:
        if self.floor_ms:
            if row.unit == "ms":
                row.floor_x = row.value / self.floor_ms
            elif row.unit.endswith("/s") and row.value:
                concurrent = "x8" in row.what or "watch" in row.what or "patch" in row.what
                per_op_ms = 1000 / row.value
                ref = 1000 / self.floor_conc_rps if concurrent and self.floor_conc_rps else self.floor_ms
                row.floor_x = per_op_ms / ref
        self.rows.append(row)
        extra = f" (p95 {row.p95:.1f})" if row.p95 is not None else ""
        print(f"  .. {row.pods:>6} {row.what:<44} {_num(row.value)} {row.unit}{extra}", flush=True)
        return row

    def print_table(self) -> None:
        head = f"{'pods':>6}  {'measurement':<46} {'value':>10} {'unit':<6} {'p95':>8} {'x floor':>8} {'server ms':>9}  note"
        print()
        print(head)
        print("-" * len(head))
        for r in self.rows:
            p95 = f"{r.p95:8.1f}" if r.p95 is not None else " " * 8
            fx = f"{r.floor_x:8.1f}" if r.floor_x is not None else " " * 8
            sm = f"{r.server_ms:9.2f}" if r.server_ms is not None else " " * 9
            print(f"{r.pods:>6}  {r.what:<46} {_num(r.value):>10} {r.unit:<6} {p95} {fx} {sm}  {r.note}")
        print()
        for n in self.notes:
            print(n)


def _num(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.2f}"


# ------------------------------------------------------------------------------------------ clients
async def make_clients(kubeconfig: str, n: int) -> list[client.ApiClient]:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    return [client.ApiClient(cfg) for _ in range(n)]


async def _read(resp: Any) -> bytes:
    """Body of a ``_preload_content=False`` response (an aiohttp ClientResponse), checking the status."""
    try:
        data: bytes = await resp.read()
        if not 200 <= resp.status < 300:
            raise RuntimeError(f"HTTP {resp.status}: {data[:300]!r}")
        return data
    finally:
        resp.release()


async def run_seq(op: Callable[[int], Awaitable[Any]], n: int) -> tuple[float, list[float]]:
    """(wall seconds, per-call latencies in ms) for n sequential calls of op(i)."""
    lat: list[float] = []
    t0 = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        await op(i)
        lat.append((time.perf_counter() - t) * 1000)
    return time.perf_counter() - t0, lat


async def run_conc(ops: Sequence[Callable[[int], Awaitable[Any]]], per_client: int) -> float:
    """Wall seconds for len(ops) clients each making per_client sequential calls, concurrently."""

    async def worker(k: int, op: Callable[[int], Awaitable[Any]]) -> None:
        for i in range(per_client):
            await op(k * per_client + i)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(k, op) for k, op in enumerate(ops)))
    return time.perf_counter() - t0


@dataclass
class Ctx:
    server: Server
    clients: list[client.ApiClient]
    report: Report
    scale: float  # repetition scale (--quick < 1)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.clients[0])

    def reps(self, n: int) -> int:
        return max(3, int(n * self.scale))


# ------------------------------------------------------------------------------------ measurements
async def measure_floor(ctx: Ctx, label: str) -> tuple[float, float]:
    """Sequential and 8-client GET /version: the request floor of this client on this machine."""
    apis = [client.VersionApi(a) for a in ctx.clients]

    def op(k: int) -> Callable[[int], Awaitable[bytes]]:
        async def call(_i: int) -> bytes:
            return await _read(await apis[k].get_code(_preload_content=False))

        return call

    await run_seq(op(0), 50)  # warm up connections
    n = ctx.reps(1000)
    wall, lat = await run_seq(op(0), n)
    conc_wall = await run_conc([op(k) for k in range(CONCURRENCY)], ctx.reps(250))
    conc_rps = CONCURRENCY * ctx.reps(250) / conc_wall
    seq_ms = statistics.median(lat)
    ctx.report.add(
        Row("-", f"floor GET /version seq ({label})", n / wall, "req/s", note=f"median {seq_ms:.3f} ms")
    )
    ctx.report.add(Row("-", f"floor GET /version x8 clients ({label})", conc_rps, "req/s"))
    return seq_ms, conc_rps


async def measure_creates(ctx: Ctx, pods: str, start: int, label: str = "") -> None:
    """HTTP creates of pods [start, start+500), sequential, one client (as a spawner creates them)."""
    core = ctx.core

    async def create(i: int) -> bytes:
        return await _read(await core.create_namespaced_pod(NS, pod_body(start + i), _preload_content=False))

    await ctx.server.call("log_clear")
    wall, lat = await run_seq(create, HTTP_CREATES)
    ctx.report.add(
        Row(
            pods,
            f"create over HTTP, {HTTP_CREATES} seq{label}",
            HTTP_CREATES / wall,
            "obj/s",
            p95=None,
            server_ms=await ctx.server.server_ms("create"),
            note=f"latency median {statistics.median(lat):.2f} ms, p95 {pct(lat, 0.95):.2f} ms",
        )
    )


async def seed(ctx: Ctx, pods: str, start: int, stop: int, label: str = "") -> None:
    secs = await ctx.server.call("seed", start, stop)
    ctx.report.add(
        Row(
            pods,
            f"seed in-process verbs.create{label}",
            (stop - start) / secs,
            "obj/s",
            note=f"{stop - start} pods in {secs:.2f} s (no HTTP; not in floor units)",
        )
    )
    ctx.report.rows[-1].floor_x = None


async def measure_gets(ctx: Ctx, pods: str, n_pods: int) -> None:
    cores = [client.CoreV1Api(a) for a in ctx.clients]
    stride = 7919  # a prime: spreads reads over the key space

    def op(k: int) -> Callable[[int], Awaitable[bytes]]:
        async def call(i: int) -> bytes:
            name = f"jupyter-user-{(i * stride) % n_pods}"
            return await _read(await cores[k].read_namespaced_pod(name, NS, _preload_content=False))

        return call

    await ctx.server.call("log_clear")
    n = ctx.reps(1000)
    wall, lat = await run_seq(op(0), n)
    server_ms = await ctx.server.server_ms("get")
    ctx.report.add(
        Row(
            pods,
            "get seq, 1 client",
            n / wall,
            "req/s",
            server_ms=server_ms,
            note=f"latency median {statistics.median(lat):.2f} ms, p95 {pct(lat, 0.95):.2f} ms",
        )
    )
    await ctx.server.call("log_clear")
    per = ctx.reps(250)
    wall = await run_conc([op(k) for k in range(CONCURRENCY)], per)
    ctx.report.add(
        Row(
            pods,
            f"get x{CONCURRENCY} concurrent clients",
            CONCURRENCY * per / wall,
            "req/s",
            server_ms=await ctx.server.server_ms("get"),
        )
    )


async def time_list(ctx: Ctx, selector: str | None, runs: int) -> tuple[list[float], int, int]:
    """Latencies (ms) of ``runs`` lists (after one warm-up), the item count and the body size."""
    core = ctx.core
    kwargs: dict[str, Any] = {"label_selector": selector} if selector else {}
    body = await _read(await core.list_namespaced_pod(NS, _preload_content=False, **kwargs))
    items = len(orjson.loads(body)["items"])
    await ctx.server.call("log_clear")
    lat = []
    for _ in range(runs):
        t = time.perf_counter()
        await _read(await core.list_namespaced_pod(NS, _preload_content=False, **kwargs))
        lat.append((time.perf_counter() - t) * 1000)
    return lat, items, len(body)


async def measure_list(ctx: Ctx, pods: str, selector: str | None, runs: int, label: str) -> float:
    lat, items, size = await time_list(ctx, selector, ctx.reps(runs))
    med = statistics.median(lat)
    ctx.report.add(
        Row(
            pods,
            label,
            med,
            "ms",
            p95=pct(lat, 0.95),
            server_ms=await ctx.server.server_ms("list"),
            note=f"{items} items, {size / 1e6:.1f} MB, n={len(lat)}",
        )
    )
    return med


async def deserialising_note(ctx: Ctx, n_pods: int) -> None:
    """What kubernetes_asyncio's model deserialisation would add (why the rest reads raw bytes)."""
    core = ctx.core
    n = ctx.reps(200)
    t0 = time.perf_counter()
    for i in range(n):
        await core.read_namespaced_pod(f"jupyter-user-{i % n_pods}", NS)
    model_get = (time.perf_counter() - t0) * 1000 / n
    t0 = time.perf_counter()
    for i in range(n):
        await _read(await core.read_namespaced_pod(f"jupyter-user-{i % n_pods}", NS, _preload_content=False))
    raw_get = (time.perf_counter() - t0) * 1000 / n
    t0 = time.perf_counter()
    await core.list_namespaced_pod(NS)
    model_list = (time.perf_counter() - t0) * 1000
    lat, _, _ = await time_list(ctx, None, 1)
    ctx.report.notes.append(
        f"client-side cost, {n_pods} pods: get {raw_get:.2f} ms raw vs {model_get:.2f} ms deserialised "
        f"into V1Pod; list {lat[0]:.0f} ms raw vs {model_list:.0f} ms deserialised into V1PodList. "
        "Everything else reads raw bytes (_preload_content=False) so the figures are the server's."
    )


async def _watcher(
    session: aiohttp.ClientSession, url: str, token: str, expected: int, connected: asyncio.Queue[int]
) -> tuple[float, int, bytes]:
    """Streams a watch, counting event lines; returns (time it saw event #expected, count, last line)."""
    headers = {"Authorization": f"Bearer {token}"}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    count, tail = 0, b""
    async with session.get(url, headers=headers, timeout=timeout) as resp:
        if resp.status != 200:
            raise RuntimeError(f"watch: HTTP {resp.status}: {(await resp.read())[:300]!r}")
        connected.put_nowait(1)
        async for chunk in resp.content.iter_any():
            count += chunk.count(b"\n")
            tail = chunk[-16384:] if len(chunk) >= 16384 else (tail + chunk)[-16384:]
            if count >= expected:
                done = time.perf_counter()
                return done, count, tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    return math.inf, count, b""


async def measure_watch(ctx: Ctx, pods: str, watchers: int, round_no: int) -> None:
    """K watchers on all pods of the namespace, then 1,000 label patches from 8 concurrent clients."""
    rv = await ctx.server.call("rv")
    url = f"{ctx.server.url}/api/v1/namespaces/{NS}/pods?watch=true&resourceVersion={rv}"
    connected: asyncio.Queue[int] = asyncio.Queue()
    cores = [client.CoreV1Api(a) for a in ctx.clients]
    n = WATCH_PATCHES
    patch = {"metadata": {"labels": {"bench.gpuworkspace.dev/round": f"r{round_no}"}}}

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = [
            asyncio.create_task(_watcher(session, url, ctx.server.token, n, connected))
            for _ in range(watchers)
        ]
        for _ in range(watchers):
            await asyncio.wait_for(connected.get(), 30)
        await ctx.server.call("log_clear")
        cpu0 = (await ctx.server.call("cpu"), time.process_time())

        def op(k: int) -> Callable[[int], Awaitable[bytes]]:
            async def call(i: int) -> bytes:
                name = f"jupyter-user-{i}"
                # a dict body: kubernetes_asyncio sends it as a strategic merge patch, like kubectl label
                return await _read(
                    await cores[k].patch_namespaced_pod(name, NS, patch, _preload_content=False)
                )

            return call

        t0 = time.perf_counter()
        patch_wall = await run_conc([op(k) for k in range(CONCURRENCY)], n // CONCURRENCY)
        t_patched = t0 + patch_wall
        last_rv = await ctx.server.call("rv")
        try:
            results = await asyncio.wait_for(asyncio.gather(*tasks), 120)
        except TimeoutError:
            for t in tasks:
                t.cancel()
            ctx.report.notes.append(
                f"watch x{watchers} at {pods} pods: not every watcher saw {n} events in 120 s"
            )
            return
        cpu1 = (await ctx.server.call("cpu"), time.process_time())
    t_all = max(r[0] for r in results)
    server_cpu, client_cpu = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    if ctx.server.in_process:
        cpu = f"CPU {client_cpu:.1f} s (server and clients share the process)"
    else:
        cpu = f"CPU: server {server_cpu:.1f} s, clients {client_cpu:.1f} s"
    got = sum(r[1] for r in results)
    ok = all(orjson.loads(r[2])["object"]["metadata"]["resourceVersion"] == str(last_rv) for r in results)
    ctx.report.add(
        Row(
            pods,
            f"patch over HTTP x{CONCURRENCY} clients (K={watchers} watching)",
            n / patch_wall,
            "obj/s",
            server_ms=await ctx.server.server_ms("patch"),
        )
    )
    ctx.report.add(
        Row(
            pods,
            f"watch K={watchers}: events delivered, all watchers",
            got / (t_all - t0),
            "ev/s",
            note=f"{got} events; last event {'verified' if ok else 'MISMATCH'} in every stream",
        )
    )
    row = ctx.report.add(
        Row(
            pods,
            f"watch K={watchers}: until every watcher saw last",
            (t_all - t0) * 1000,
            "ms",
            note=f"{(t_all - t_patched) * 1000:.0f} ms after the last patch returned; {cpu}",
        )
    )
    row.floor_x = None  # a wall time for 1,000 patches, not one operation


# ------------------------------------------------------------------------------------------ phases
async def phase_small(ctx: Ctx) -> None:
    await seed(ctx, "1000", 0, 1000 - HTTP_CREATES)
    await measure_creates(ctx, "1000", 1000 - HTTP_CREATES)
    await measure_gets(ctx, "1000", 1000)
    await measure_list(ctx, "1000", None, 30, "list all (full)")
    await measure_list(ctx, "1000", SEL_MIG, 30, f"list {SEL_MIG} (10%)")
    await deserialising_note(ctx, 1000)
    for k in (10, 100):
        await measure_watch(ctx, "1000", k, k)


async def phase_goal(ctx: Ctx) -> None:
    await seed(ctx, "5000", 1000, 5000)
    med = await measure_list(ctx, "5000", SEL_ALL, 15, f"list {SEL_ALL} (all)")
    med10 = await measure_list(ctx, "5000", SEL_MIG, 20, f"list {SEL_MIG} (10%)")
    verdict = "met" if med < GOAL_MS else "NOT met"
    ctx.report.notes.append(
        f"goal list(5000, selector) < {GOAL_MS:.0f} ms: {verdict} (median {med:.1f} ms, "
        f"selector {SEL_ALL} matching all 5,000; the 10% selector: median {med10:.1f} ms; "
        "raw bytes over HTTP, kubernetes_asyncio client)"
    )


async def phase_large(ctx: Ctx) -> None:
    await seed(ctx, "10000", 5000, 10000 - HTTP_CREATES)
    await measure_creates(ctx, "10000", 10000 - HTTP_CREATES)
    await measure_gets(ctx, "10000", 10000)
    await measure_list(ctx, "10000", None, 8, "list all (full)")
    await measure_list(ctx, "10000", SEL_MIG, 15, f"list {SEL_MIG} (10%)")
    for k in (10, 100):
        await measure_watch(ctx, "10000", k, 1000 + k)


async def phase_persist(report: Report, base: Path, in_process: bool, scale: float) -> None:
    """Create throughput with the on-disk journal (persist=True), at 1,000 pods."""
    async with Server(base / "persist", persist=True, in_process=in_process) as server:
        clients = await make_clients(server.kubeconfig, 1)
        ctx = Ctx(server, clients, report, scale)
        try:
            await seed(ctx, "1000", 0, 1000 - HTTP_CREATES, " (persist)")
            await measure_creates(ctx, "1000", 1000 - HTTP_CREATES, " (persist)")
        finally:
            for a in clients:
                await a.close()
    size = (base / "persist" / "objects.jsonl").stat().st_size
    report.notes.append(f"persist=True: journal objects.jsonl is {size / 1e6:.1f} MB after 1,000 pods")


HEADLINE = (  # (pods, measurement): the goal's row and the key figures at the largest size
    ("5000", f"list {SEL_ALL} (all)"),
    ("5000", f"list {SEL_MIG} (10%)"),
    ("10000", f"create over HTTP, {HTTP_CREATES} seq"),
    ("10000", "get seq, 1 client"),
    ("10000", f"get x{CONCURRENCY} concurrent clients"),
    ("10000", "list all (full)"),
    ("10000", "watch K=100: events delivered, all watchers"),
)


def emit_headline(report: Report) -> None:
    """The goal's row and the key figures, against the /version floor, for ``make bench``'s table."""
    out = []
    for r in report.rows:
        if (r.pods, r.what) not in HEADLINE:
            continue
        peer = None  # the floor in this row's unit, from its cost in floor round trips
        if r.floor_x:
            peer = r.value / r.floor_x if r.unit == "ms" else r.value * r.floor_x
        goal = (r.pods, r.what) == HEADLINE[0]
        out.append(
            bench_report.Row(
                "bench_devcluster",
                f"{r.what}, {int(r.pods):,} pods",
                r.value,
                peer,
                r.unit,
                f"< {GOAL_MS:g} ms" if goal else "",
                r.value < GOAL_MS if goal else None,
                "GET /version on the same server and client (the request floor), at the start of the run"
                if peer
                else "",
            )
        )
    bench_report.emit(out)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--in-process", action="store_true", help="run the cluster on this process's loop")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    opts = parser.parse_args(argv)
    scale = 0.2 if opts.quick else 1.0
    started = time.perf_counter()
    mode = "in-process (same loop as the clients)" if opts.in_process else "child process (own loop and core)"
    print(
        f"devcluster benchmark: python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"cluster in {mode}, persist=False unless marked"
    )
    print("seeding: in-process through c.verbs.create; the last 500 pods at 1,000 and 10,000 over HTTP")
    print("clients: kubernetes_asyncio, _preload_content=False (raw bytes, no model deserialisation)")
    report = Report()
    with tempfile.TemporaryDirectory(prefix="bench-devcluster-") as tmp:
        base = Path(tmp)
        async with Server(base / "main", persist=False, in_process=opts.in_process) as server:
            clients = await make_clients(server.kubeconfig, CONCURRENCY)
            ctx = Ctx(server, clients, report, scale)
            try:
                report.floor_ms, report.floor_conc_rps = await measure_floor(ctx, "start")
                await phase_small(ctx)
                await phase_goal(ctx)
                await phase_large(ctx)
                end_ms, _ = await measure_floor(ctx, "end")
                report.notes.insert(
                    0,
                    f"floor drift: /version median {report.floor_ms:.3f} ms at the start, {end_ms:.3f} ms "
                    "at the end (ratios use the start)",
                )
            finally:
                for a in clients:
                    await a.close()
        await phase_persist(report, base, opts.in_process, scale)
    report.print_table()
    emit_headline(report)
    print(f"total wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
