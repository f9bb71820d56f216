"""Simulated-cluster benchmark: pod start latency and memory, real single-user pods and lite pods.

Run as a script (``make bench`` or ``python -m tests.benchmarks.bench_sim_pods``); not a pytest test, no
pass/fail thresholds: it prints a table.

What it measures
  * ``DevCluster(state_dir, simulate=True, persist=False, topology=…)`` runs in a child process with its
    own event loop (``--in-process``: on this process's loop); the topology is the default one with
    ``pods: 500`` per node, so 1,000 pods fit (the pods tolerate the GPU nodes' taint).
  * Real pods: 20 pods of ``quay.io/jupyter/base-notebook:2024-12-02`` (``start-notebook.py`` without a
    hub → ``jupyter-server`` on the pod IP, token in ``JUPYTER_TOKEN``), created at once over HTTP with
    kubernetes_asyncio. Start latency = from the create call to the pod's server answering: the first
    watch event showing the pod's ``Ready`` condition True (a raw watch stream, not polling), then port
    8888 on the pod IP accepting a connection (tried every 0.1 s from then on). The pods declare no
    readinessProbe, so, as on a real cluster (the kubelet's ``UpdatePodStatus``), ``Ready`` means the
    container runs, not that its server listens; the note gives the Ready p50 too. RSS per pod = the summed VmRSS of the container's process tree
    (``kubelet.container_pids`` → ``/proc``), after all 20 are Ready.
  * Lite pods: 1,000 pods of ``gpuworkspace.dev/lite-singleuser:1`` created from 8 concurrent clients;
    same latency; RSS per pod = RSS of the distinct processes serving them (one shared lite pool process
    per node, ``sim/lite_pool.py``) / pods. The devcluster process's own RSS growth per pod is printed
    too (API objects, events, pod workers). ``/proc/meminfo``'s MemAvailable is checked first and the
    count reduced, with a note, when it is short.
  * Peers, measured in the same run on the same machine: ``jupyter-server`` started directly (a
    subprocess with the same arguments and token, until its port answers), alone and 20 at once; and one
    ``python -m …sim.lite_server`` process (what a lite pod costs as a process of its own). The ``x peer``
    columns divide the pod figures by the peer named in the row.
  * Cleanup: the pods are deleted (SIGTERM, grace period) and their disappearance timed through the
    watch; stopping the cluster then ends anything left; the peers' processes are killed and reaped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import platform
import shutil
import signal
import socket
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
import orjson
import yaml
from kubernetes_asyncio import client

from . import report as bench_report
from .bench_devcluster import make_clients, pct

NS = "gpu-workspaces"
NOTEBOOK_IMAGE = "quay.io/jupyter/base-notebook:2024-12-02"
LITE_IMAGE = "gpuworkspace.dev/lite-singleuser:1"
LITE_MODULE = "gpuworkspace_devcluster.sim.lite_server"
TOKEN = "bench-sim-pods-token"
REAL_PODS = 20
LITE_PODS = 1000
PODS_PER_NODE = 500
CONCURRENCY = 8
PORT = 8888
PORT_POLL_S = 0.1
# what one lite pod may cost (pool and devcluster), for the memory headroom check
LITE_BUDGET_BYTES = 1 << 20
HEADROOM_BYTES = 1 << 30  # kept free besides
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
MB = 1024 * 1024


# ---------------------------------------------------------------------------------------- /proc
def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def tree_rss(pid: int, kids: dict[int, list[int]]) -> int:
    """Summed VmRSS of ``pid`` and its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss_bytes(p)
        todo.extend(kids.get(p, []))
    return total


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


# ------------------------------------------------------------------------------------- topology
def bench_topology(path: Path) -> Path:
    from gpuworkspace_devcluster.sim.topology import DEFAULT_TOPOLOGY

    topo = yaml.safe_load(DEFAULT_TOPOLOGY.read_text())
    for node in topo["nodes"]:
        node["pods"] = PODS_PER_NODE
    path.write_text(yaml.safe_dump(topo))
    return path


# -------------------------------------------------------------------------------- the server side
def _server_command(c: Any, cmd: str, args: tuple[Any, ...]) -> Any:
    """Runs in the cluster's process, on its loop."""
    if cmd == "pids":  # pod name → pids of its running containers
        ns, names = args
        ctx = c.simulation.ctx
        pods = {p["metadata"]["name"]: p for p in c.store.items(_pods_rt(), ns)}
        out: dict[str, list[int]] = {}
        for name in names:
            node = (pods.get(name, {}).get("spec") or {}).get("nodeName", "")
            kubelet = ctx.components.get(f"kubelet:{node}")
            out[name] = list(kubelet.container_pids(ns, name).values()) if kubelet is not None else []
        return out
    if cmd == "pid":
        return os.getpid()
    raise ValueError(cmd)


def _pods_rt() -> Any:
    from gpuworkspace_devcluster import resources

    return resources.find("", "v1", "pods")


async def _child_loop(conn: multiprocessing.connection.Connection, state_dir: str, topology: str) -> None:
    from gpuworkspace_devcluster.cluster import DevCluster

    loop = asyncio.get_running_loop()
    async with DevCluster(state_dir, persist=False, simulate=True, topology=topology) as c:
        conn.send((str(c.kubeconfig), c.admin_token, c.url))
        while True:
            cmd, args = await loop.run_in_executor(None, conn.recv)
            if cmd == "stop":
                break
            try:
                conn.send(("ok", _server_command(c, cmd, args)))
            except Exception as exc:
                conn.send(("error", repr(exc)))
    conn.send(("ok", None))


def _child_main(conn: multiprocessing.connection.Connection, state_dir: str, topology: str) -> None:
    asyncio.run(_child_loop(conn, state_dir, topology))


class Server:
    """A simulated DevCluster in a child process (default) or on this loop."""

    def __init__(self, state_dir: Path, topology: Path, *, in_process: bool) -> None:
        self.state_dir, self.topology, self.in_process = state_dir, topology, in_process
        self.kubeconfig = self.token = self.url = ""
        self._cluster: Any = None
        self._proc: Any = None
        self._conn: multiprocessing.connection.Connection | None = None

    async def __aenter__(self) -> Server:
        if self.in_process:
            from gpuworkspace_devcluster.cluster import DevCluster

            self._cluster = DevCluster(
                self.state_dir, persist=False, simulate=True, topology=str(self.topology)
            )
            await self._cluster.start()
            c = self._cluster
            self.kubeconfig, self.token, self.url = str(c.kubeconfig), c.admin_token, c.url
            return self
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_child_main, args=(child, str(self.state_dir), str(self.topology)), daemon=True
        )
        self._proc.start()
        child.close()
        ready = await asyncio.get_running_loop().run_in_executor(None, self._conn.recv)
        self.kubeconfig, self.token, self.url = ready
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._cluster is not None:
            await self._cluster.stop()
        elif self._proc is not None and self._conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.call("stop"), 60)
            self._proc.join(15)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(5)
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


# ------------------------------------------------------------------------------------------ pods
def notebook_pod(i: int) -> dict[str, Any]:
    container = {
        "name": "notebook",
        "image": NOTEBOOK_IMAGE,  # default CMD start-notebook.py: jupyter-server without a hub
        "env": [{"name": "JUPYTER_TOKEN", "value": TOKEN}],
        "ports": [{"containerPort": PORT, "name": "notebook-port"}],
    }
    return _pod(f"real-{i}", "real", container)


def lite_pod(i: int) -> dict[str, Any]:
    container = {
        "name": "notebook",
        "image": LITE_IMAGE,
        "args": ["jupyterhub-singleuser"],
        "env": [
            {"name": "JUPYTERHUB_SERVICE_URL", "value": f"http://0.0.0.0:{PORT}/user/user-{i}/"},
            {"name": "JUPYTERHUB_SERVICE_PREFIX", "value": f"/user/user-{i}/"},
        ],
        "ports": [{"containerPort": PORT, "name": "notebook-port"}],
    }
    return _pod(f"lite-{i}", "lite", container)


def _pod(name: str, kind: str, container: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": kind}},
        "spec": {
            "containers": [container],
            "terminationGracePeriodSeconds": 5,
            "tolerations": [GPU_TOLERATION],
        },
    }


def _ready(pod: dict[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


class PodWatch:
    """A raw watch on the bench pods of one kind: when each pod was first seen Ready, when its server
    first accepted a connection after that, and when it was deleted."""

    def __init__(self, server: Server, kind: str) -> None:
        self.server, self.kind = server, kind
        self.ready_at: dict[str, float] = {}
        self.answered_at: dict[str, float] = {}
        self._dials: set[asyncio.Task[None]] = set()
        self.deleted_at: dict[str, float] = {}
        self.seen: set[str] = set()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> PodWatch:
        self._session = aiohttp.ClientSession()
        headers = {"Authorization": f"Bearer {self.server.token}"}
        base = f"{self.server.url}/api/v1/namespaces/{NS}/pods?labelSelector=bench%3D{self.kind}"
        async with self._session.get(base, headers=headers) as resp:
            rv = orjson.loads(await resp.read())["metadata"]["resourceVersion"]
        connected = asyncio.Event()
        self._task = asyncio.create_task(self._run(f"{base}&watch=true&resourceVersion={rv}", connected))
        await asyncio.wait_for(connected.wait(), 30)
        return self

    async def _run(self, url: str, connected: asyncio.Event) -> None:
        assert self._session is not None
        headers = {"Authorization": f"Bearer {self.server.token}"}
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with self._session.get(url, headers=headers, timeout=timeout) as resp:
            connected.set()
            buf = b""
            async for chunk in resp.content.iter_any():
                now = time.perf_counter()
                lines = (buf + chunk).split(b"\n")
                buf = lines.pop()
                for line in lines:
                    if not line.strip():
                        continue
                    event = orjson.loads(line)
                    name = event["object"].get("metadata", {}).get("name", "")
                    self.seen.add(name)
                    if event["type"] == "DELETED":
                        self.deleted_at.setdefault(name, now)
                    elif (
                        event["type"] in ("ADDED", "MODIFIED")
                        and _ready(event["object"])
                        and name not in self.ready_at
                    ):
                        self.ready_at[name] = now
                        self._dial(name, event["object"]["status"]["podIP"])
                self._changed.set()

    def _dial(self, name: str, ip: str) -> None:
        async def until_it_answers() -> None:
            while True:
                try:
                    _, writer = await asyncio.wait_for(asyncio.open_connection(ip, PORT), 1.0)
                except (OSError, TimeoutError):
                    await asyncio.sleep(PORT_POLL_S)
                    continue
                self.answered_at[name] = time.perf_counter()
                self._changed.set()
                writer.close()
                return

        task = asyncio.create_task(until_it_answers())
        self._dials.add(task)
        task.add_done_callback(self._dials.discard)

    async def wait(self, done: Any, limit_s: float) -> bool:
        deadline = time.monotonic() + limit_s
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return True

    async def __aexit__(self, *exc: object) -> None:
        for dial in list(self._dials):  # servers that never answered within the phase's limit
            dial.cancel()
        await asyncio.gather(*self._dials, return_exceptions=True)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._session is not None:
            await self._session.close()


async def create_pods(
    apis: Sequence[client.ApiClient], bodies: list[dict[str, Any]], concurrency: int
) -> dict[str, float]:
    """Create over HTTP from ``concurrency`` clients; returns pod name → perf_counter when its create began."""
    cores = [client.CoreV1Api(a) for a in apis]
    began: dict[str, float] = {}
    queue = list(reversed(bodies))

    async def worker(k: int) -> None:
        while queue:
            body = queue.pop()
            began[body["metadata"]["name"]] = time.perf_counter()
            resp: Any = await cores[k % len(cores)].create_namespaced_pod(NS, body, _preload_content=False)
            try:
                data = await resp.read()
                if resp.status >= 300:
                    raise RuntimeError(
                        f"create {body['metadata']['name']}: HTTP {resp.status}: {data[:300]!r}"
                    )
            finally:
                resp.release()

    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    return began


async def delete_pods(apis: Sequence[client.ApiClient], kind: str) -> None:
    core = client.CoreV1Api(apis[0])
    resp: Any = await core.delete_collection_namespaced_pod(
        NS, label_selector=f"bench={kind}", _preload_content=False
    )
    try:
        await resp.read()
    finally:
        resp.release()


# ------------------------------------------------------------------------------------- the peers
def _free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return int(s.getsockname()[1])


async def _port_open(ip: str, port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection(ip, port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def start_direct(
    argvs: list[list[str]], envs: list[dict[str, str]], addrs: list[tuple[str, int]], limit_s: float
) -> tuple[list[float], list[int], list[subprocess.Popen[bytes]]]:
    """Start processes at once; per process: seconds until its port answers (polled every 20 ms), RSS."""
    procs: list[subprocess.Popen[bytes]] = []
    began: list[float] = []
    for argv, env in zip(argvs, envs, strict=True):
        began.append(time.perf_counter())
        procs.append(
            subprocess.Popen(  # noqa: ASYNC220 - returns at exec; the clock starts just before
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
    ready: list[float] = [0.0] * len(procs)
    deadline = time.monotonic() + limit_s
    todo = set(range(len(procs)))
    while todo and time.monotonic() < deadline:
        for i in list(todo):
            if await _port_open(*addrs[i]):
                ready[i] = time.perf_counter() - began[i]
                todo.discard(i)
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.5)  # let the last ones settle before RSS is read, as for the pods
    kids = children_map()
    rss = [tree_rss(p.pid, kids) for p in procs]
    return [r for r in ready if r], rss, procs


def stop_direct(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(10)


def jupyter_argv(ip: str, port: int, root: Path) -> list[str]:
    exe = Path(sys.executable).parent / "jupyter-server"
    argv = [str(exe) if exe.exists() else (shutil.which("jupyter-server") or "jupyter-server")]
    argv += [f"--ip={ip}", f"--port={port}", f"--ServerApp.root_dir={root}"]
    return argv + (["--allow-root"] if os.geteuid() == 0 else [])


def jupyter_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JUPYTERHUB"))}
    return {**env, "HOME": str(home), "JUPYTER_TOKEN": TOKEN, "LANG": "C.UTF-8"}


# ---------------------------------------------------------------------------------------- report
@dataclass
class Row:
    what: str
    n: int
    p50_s: float | None
    p95_s: float | None
    rss_pod: float | None  # bytes
    rss_total: float | None  # bytes
    peer: Row | None = None
    note: str = ""


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        lat = f"p50 {row.p50_s:.3f} s p95 {row.p95_s:.3f} s" if row.p50_s is not None else ""
        rss = f"RSS/pod {row.rss_pod / MB:.1f} MB" if row.rss_pod is not None else ""
        print(f"  .. {row.what:<44} n={row.n:<5} {lat} {rss}", flush=True)
        return row

    def print_table(self) -> None:
        head = (
            f"{'measurement':<44} {'n':>5} {'start p50':>9} {'p95':>7} {'x peer':>7} "
            f"{'RSS/pod MB':>10} {'x peer':>7} {'RSS total MB':>12}  note"
        )
        print()
        print(head)
        print("-" * len(head))
        for r in self.rows:
            p50 = f"{r.p50_s:9.3f}" if r.p50_s is not None else " " * 9
            p95 = f"{r.p95_s:7.3f}" if r.p95_s is not None else " " * 7
            x_lat = x_rss = " " * 7
            if r.peer is not None and r.peer.p50_s and r.p50_s is not None:
                x_lat = f"{r.p50_s / r.peer.p50_s:7.2f}"
            if r.peer is not None and r.peer.rss_pod and r.rss_pod is not None:
                x_rss = f"{r.rss_pod / r.peer.rss_pod:7.3f}"
            rp = f"{r.rss_pod / MB:10.2f}" if r.rss_pod is not None else " " * 10
            rt = f"{r.rss_total / MB:12.1f}" if r.rss_total is not None else " " * 12
            note = (f"vs {r.peer.what}; " if r.peer is not None else "") + r.note
            print(f"{r.what:<44} {r.n:>5} {p50} {p95} {x_lat} {rp} {x_rss} {rt}  {note}")
        print()
        for n in self.notes:
            print(n)


def _lat(values: Sequence[float]) -> tuple[float | None, float | None]:
    return (statistics.median(values), pct(values, 0.95)) if values else (None, None)


# ---------------------------------------------------------------------------------------- phases
async def peers(report: Report, base: Path, real: int) -> tuple[Row, Row, Row]:
    root = base / "peer-root"
    root.mkdir(parents=True, exist_ok=True)
    # one jupyter-server alone
    ip = "127.0.0.1"
    port = _free_port(ip)
    ready, rss, procs = await start_direct(
        [jupyter_argv(ip, port, root)], [jupyter_env(base / "peer-home-0")], [(ip, port)], 60
    )
    stop_direct(procs)
    p50, p95 = _lat(ready)
    one = report.add(
        Row("peer: jupyter-server direct, alone", 1, p50, p95, rss[0], rss[0], note="subprocess")
    )
    # the same, `real` at once (the same contention as the pods' burst), each on its own loopback IP
    addrs = [(f"127.201.0.{i + 1}", PORT) for i in range(real)]
    ready, rss, procs = await start_direct(
        [jupyter_argv(a[0], a[1], root) for a in addrs],
        [jupyter_env(base / f"peer-home-{i + 1}") for i in range(real)],
        addrs,
        120,
    )
    stop_direct(procs)
    p50, p95 = _lat(ready)
    burst = report.add(
        Row(
            f"peer: jupyter-server direct, {real} at once",
            len(ready),
            p50,
            p95,
            statistics.mean(rss),
            float(sum(rss)),
            note="subprocesses started together",
        )
    )
    # one lite_server process (what a lite pod costs as a process of its own)
    port = _free_port(ip)
    env = {**os.environ, "JUPYTERHUB_SERVICE_URL": f"http://{ip}:{port}/user/peer/"}
    ready, rss, procs = await start_direct(
        [[sys.executable, "-m", LITE_MODULE, f"--ip={ip}", f"--port={port}"]], [env], [(ip, port)], 30
    )
    stop_direct(procs)
    p50, p95 = _lat(ready)
    lite = report.add(
        Row("peer: lite_server direct, one process", 1, p50, p95, rss[0], rss[0], note="subprocess")
    )
    return one, burst, lite


async def phase_pods(
    report: Report,
    server: Server,
    apis: list[client.ApiClient],
    kind: str,
    bodies: list[dict[str, Any]],
    peer: Row,
    limit_s: float,
    concurrency: int,
) -> Row:
    n = len(bodies)
    names = [b["metadata"]["name"] for b in bodies]
    server_pid = await server.call("pid")
    cluster_rss0 = rss_bytes(server_pid) if not server.in_process else 0
    async with PodWatch(server, kind) as watch:
        t0 = time.perf_counter()
        began = await create_pods(apis, bodies, concurrency)
        created_s = time.perf_counter() - t0
        ok = await watch.wait(lambda: len(watch.answered_at) >= n, limit_s)
        wall = max(watch.answered_at.values(), default=t0) - t0
        lat = [watch.answered_at[name] - began[name] for name in names if name in watch.answered_at]
        ready_lat = [watch.ready_at[name] - began[name] for name in names if name in watch.ready_at]
        ready_p50 = f"{statistics.median(ready_lat):.2f} s" if ready_lat else "none"
        await asyncio.sleep(0.5)  # the last servers settle before RSS is read
        pids = await server.call("pids", NS, names)
        kids = children_map()
        distinct = {pid for ps in pids.values() for pid in ps}
        total = float(sum(tree_rss(pid, kids) for pid in distinct))
        cluster_rss1 = rss_bytes(server_pid) if not server.in_process else 0
        p50, p95 = _lat(lat)
        what = "real pods: base-notebook → jupyter-server" if kind == "real" else "lite pods: lite-singleuser"
        shared = f", served by {len(distinct)} shared process(es)" if len(distinct) < len(lat) else ""
        note = (
            f"create → Ready via watch → port {PORT} answering; {len(lat)}/{n} answering, last after "
            f"{wall:.1f} s ({len(lat) / wall if wall else 0:.1f} pods/s; creates took {created_s:.1f} s; "
            f"Ready, i.e. the container running, p50 {ready_p50}){shared}"
        )
        if not ok:
            note += f"; TIMED OUT after {limit_s:.0f} s"
        row = report.add(Row(what, n, p50, p95, total / max(len(lat), 1), total, peer, note))
        if not server.in_process:
            growth = cluster_rss1 - cluster_rss0
            report.add(
                Row(
                    f"  devcluster process growth, {kind} pods",
                    n,
                    None,
                    None,
                    growth / n,
                    float(growth),
                    None,
                    f"API objects, events, pod workers (RSS {cluster_rss0 / MB:.0f} → {cluster_rss1 / MB:.0f} MB)",
                )
            )
        t1 = time.perf_counter()
        await delete_pods(apis, kind)
        gone = await watch.wait(lambda: len(watch.deleted_at) >= len(watch.seen), 90)
        report.notes.append(
            f"{kind} pods: delete of {len(watch.seen)} (SIGTERM, grace 5 s) until every DELETED event: "
            f"{time.perf_counter() - t1:.1f} s{'' if gone else ' (TIMED OUT: the cluster stop ends the rest)'}"
        )
    return row


def lite_count(wanted: int, report: Report) -> int:
    avail = mem_available()
    fits = max(0, (avail - HEADROOM_BYTES) // LITE_BUDGET_BYTES)
    if fits >= wanted:
        return wanted
    report.notes.append(
        f"lite pods reduced from {wanted} to {fits}: MemAvailable {avail / MB:.0f} MB, budget "
        f"{LITE_BUDGET_BYTES / MB:.0f} MB per pod plus {HEADROOM_BYTES / MB:.0f} MB headroom"
    )
    print(f"  .. NOTE {report.notes[-1]}", flush=True)
    return int(fits)


def emit_headline(report: Report) -> None:
    """Start p50 and RSS per pod of the real and lite pods against their peers, for ``make bench``."""
    out = []
    for r in report.rows:
        if r.peer is None:
            continue
        peer_name = f"{r.peer.what.removeprefix('peer: ')} (started directly, same run)"
        what = f"{r.what.split(':')[0]} x{r.n:,}"
        if r.p50_s is not None:
            out.append(
                bench_report.Row(
                    "bench_sim_pods", f"{what}: start p50", r.p50_s, r.peer.p50_s, "s", peer_name=peer_name
                )
            )
        if r.rss_pod is not None:
            out.append(
                bench_report.Row(
                    "bench_sim_pods",
                    f"{what}: RSS per pod",
                    r.rss_pod / MB,
                    r.peer.rss_pod / MB if r.peer.rss_pod is not None else None,
                    "MiB",
                    peer_name=peer_name,
                )
            )
    bench_report.emit(out)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--in-process", action="store_true", help="run the cluster on this process's loop")
    parser.add_argument("--real", type=int, default=REAL_PODS, help="real single-user pods (default 20)")
    parser.add_argument("--lite", type=int, default=LITE_PODS, help="lite pods (default 1000)")
    opts = parser.parse_args(argv)
    started = time.perf_counter()
    mode = "in-process (same loop as the clients)" if opts.in_process else "child process (own loop)"
    print(
        f"simulated pods benchmark: python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"MemAvailable {mem_available() / MB:,.0f} MB, cluster in {mode}, persist=False, "
        f"topology: default with pods: {PODS_PER_NODE} per node"
    )
    report = Report()
    with tempfile.TemporaryDirectory(prefix="bench-sim-pods-") as tmp:
        base = Path(tmp)
        one, burst, lite_peer = await peers(report, base, opts.real)
        topology = bench_topology(base / "topology.yaml")
        t = time.perf_counter()
        async with Server(base / "state", topology, in_process=opts.in_process) as server:
            report.notes.append(
                f"cluster start (API, simulation, 3 kubelets): {time.perf_counter() - t:.1f} s"
            )
            apis = await make_clients(server.kubeconfig, CONCURRENCY)
            try:
                real = [notebook_pod(i) for i in range(opts.real)]
                row = await phase_pods(report, server, apis, "real", real, burst, 150, len(real) or 1)
                if row.p50_s and one.p50_s:
                    row.note += f"; p50 is {row.p50_s / one.p50_s:.1f}x a jupyter-server started alone"
                n = lite_count(opts.lite, report)
                if n:
                    lite = [lite_pod(i) for i in range(n)]
                    await phase_pods(report, server, apis, "lite", lite, lite_peer, 150, CONCURRENCY)
            finally:
                for a in apis:
                    await a.close()
    report.print_table()
    emit_headline(report)
    print(f"total wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
