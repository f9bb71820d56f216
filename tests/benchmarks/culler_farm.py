"""A farm for the culler benchmark: a fake JupyterHub REST API and N lightweight single-user servers.

One aiohttp app on one port, in its own process (:class:`Farm` starts it with the ``spawn`` context),
so that its CPU time is not the measured culler's. It plays:

* the hub at ``/hub/api/``, mirroring JupyterHub 6.1's ``apihandlers`` where a culler touches them:
  ``GET /hub/api/`` (the version, which jupyterhub-idle-culler reads to decide on ``state=ready``),
  ``GET /hub/api/user`` (the token's owner: the culler service's model and its scopes),
  ``GET /hub/api/users`` with ``state`` (``ready``/``active``/``inactive``), ``offset`` and ``limit``:
  users with an active server ordered by id, then post-filtered to ready ones (so a page of a user
  whose server is stopping is short, while ``total`` still counts it, as in JupyterHub); with the
  ``Accept: application/jupyterhub-pagination+json`` header the ``{"items", "_pagination"}`` envelope
  (default page 50, max 200, ``next.url`` the request's full URL with the next offset), without it a
  plain list of up to 200 (JupyterHub's ``api_page_max_limit``); ``GET /hub/api/users/{name}`` and
  the server models; ``DELETE /hub/api/users/{name}/server`` and ``/servers/{name}`` answer 202 (the
  stop is pending: the server stays ``active`` but not ``ready``) and the server is gone
  ``stop_s`` later. User models carry what the scopes ``list:users read:users:activity read:servers
  read:users:groups`` show (``kind name last_activity groups servers``).
* the single-user servers behind the proxy: ``/user/{name}/api/status``, ``api/kernels``,
  ``api/terminals``, ``api/sessions`` with jupyter_server's JSON shapes; a stopped server answers 503
  as the hub does for a route with no server.
* the attribution service: ``/services/gpuworkspace-attribution/api/v1/workspaces``, one row per
  running workspace in the shape of ``attribution.views.workspace_json`` (``{"at", "items"}``).

Each user has one default server. Their kind is seeded (deterministic): ``active`` (80 %: hub and
server activity within the last 20 minutes, an idle kernel), ``idle`` (10 %: activity 2-6 hours ago,
an idle kernel, GPU idle), ``busy`` (10 %: activity 2-6 hours ago, a *busy* kernel whose last message
is as old, GPU busy: a long training cell with the browser closed, idle-culler #55). Half of each
kind, seeded, hold a GPU (``exclusive`` in the attribution rows; the others ``none``). Times are set
relative to the moment of :meth:`FarmState.reset`.

Every request but ``/_bench/*`` is counted by kind with its arrival and finish times (monotonic clock,
shared by processes on Linux), and single-user GETs without ``no_track_activity`` (which jupyter_server
would record as the server's activity) apart, as ``tracked``; ``GET /_bench/stats`` returns the counts
and ``POST /_bench/reset`` restores the fresh state. ``POST /_bench/watch`` names the culler's pid: at
the first counted request the farm reads that process's CPU time from ``/proc``, so the benchmark can
subtract start-up.
Optional latencies (``asyncio.sleep``, not blocking) stand for the network hop and the hub's work.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import multiprocessing.connection
import os
import random
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuworkspace_spawner.probecredentials import STATE_KEY

TOKEN = "bench-culler-token"
SERVICE = "gpuworkspace-culler"
ATTRIBUTION_PREFIX = "/services/gpuworkspace-attribution/"
HUB_VERSION = "6.1.1"
PAGE_DEFAULT, PAGE_MAX = 50, 200  # JupyterHub's api_page_default_limit, api_page_max_limit
PAGINATION = "application/jupyterhub-pagination+json"
SCOPES = [
    "admin:server_state",
    "delete:servers",
    "list:users",
    "read:servers",
    "read:users:activity",
    "read:users:groups",
]
KINDS = ("active", "idle", "busy")
GPU_SHARE = 0.5  # of the servers of each kind hold a GPU (the attribution fleet: 1,088 of 2,000)
COUNTED = (
    "hub list",
    "hub stop",
    "hub other",
    "server status",
    "server kernels",
    "server terminals",
    "server sessions",
    "server checkpoint",
    "server other",
    "attribution",
    "unknown",
)


def isoformat(dt: datetime) -> str:
    """JupyterHub's and jupyter_server's timestamps: naive UTC + ``Z``."""
    return dt.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


@dataclass(frozen=True)
class FarmConfig:
    """The farm's size, mix and latencies (seconds)."""

    servers: int
    hub_latency_s: float = 0.005
    server_latency_s: float = 0.005
    stop_latency_s: float = 0.005  # a real hub answers a DELETE once the spawner stopped, or after 10 s
    stop_s: float = 1.0  # a stopped server leaves the list this long after its DELETE
    mix: tuple[float, float, float] = (0.8, 0.1, 0.1)  # active, idle, busy
    seed: int = 7


@dataclass
class Server:
    user: str
    kind: str  # active | idle | busy
    started: datetime
    last_activity: datetime  # hub and server activity (the hub learns it from the server)
    kernel_state: str
    terminals: int
    gpu: bool  # holds a GPU (the attribution service lists its utilisation)
    gpu_util: float
    ready: bool = True
    stop_at: float | None = None  # monotonic time the pending stop completes
    gone: bool = False


@dataclass
class FarmState:
    config: FarmConfig
    servers: list[Server] = field(default_factory=list)
    by_name: dict[str, Server] = field(default_factory=dict)
    stopping: list[Server] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    stopped: Counter[str] = field(default_factory=Counter)  # DELETEs by the server's kind
    other_paths: Counter[str] = field(default_factory=Counter)
    tracked: int = 0  # single-user GETs without no_track_activity: jupyter_server counts them as activity
    first: float | None = None
    last_end: float | None = None
    in_flight: int = 0
    watch_pid: int | None = None
    cpu_at_first: float | None = None

    def reset(self) -> None:
        n = self.config.servers
        rng = random.Random(self.config.seed)
        now = datetime.now(UTC)
        shares = dict(zip(KINDS, self.config.mix, strict=True))
        kinds = [k for k in KINDS for _ in range(round(n * shares[k] / sum(self.config.mix)))][:n]
        kinds += ["active"] * (n - len(kinds))
        rng.shuffle(kinds)
        self.servers = []
        for i, kind in enumerate(kinds):
            if kind == "active":
                ago = timedelta(seconds=rng.uniform(0, 1200))
            else:
                ago = timedelta(seconds=rng.uniform(2 * 3600, 6 * 3600))
            started = now - ago - timedelta(seconds=rng.uniform(600, 3 * 3600))
            self.servers.append(
                Server(
                    user=f"user-{i:04d}",
                    kind=kind,
                    started=started,
                    last_activity=now - ago,
                    kernel_state="busy" if kind == "busy" else "idle",
                    terminals=1 if rng.random() < 0.2 else 0,
                    gpu=rng.random() < GPU_SHARE,
                    gpu_util={"active": rng.uniform(0, 100), "idle": 0.0, "busy": 95.0}[kind],
                )
            )
        self.by_name = {s.user: s for s in self.servers}
        self.counts = Counter()
        self.stopped = Counter()
        self.other_paths = Counter()
        self.tracked = 0
        self.first = self.last_end = self.cpu_at_first = None
        self.in_flight = 0
        self.watch_pid = None
        self.stopping = []

    def tick(self) -> None:
        """Complete the stops whose time has come."""
        t = time.monotonic()
        while self.stopping and t >= (self.stopping[0].stop_at or 0.0):
            self.stopping.pop(0).gone = True

    def stats(self) -> dict[str, Any]:
        self.tick()
        return {
            "servers": self.config.servers,
            "counts": {k: self.counts.get(k, 0) for k in COUNTED},
            "stopped": {k: self.stopped.get(k, 0) for k in KINDS},
            "kinds": dict(Counter(s.kind for s in self.servers)),
            "other_paths": dict(self.other_paths.most_common(20)),
            "tracked": self.tracked,
            "first": self.first,
            "last_end": self.last_end,
            "in_flight": self.in_flight,
            "now": time.monotonic(),
            "cpu_at_first": self.cpu_at_first,
            "ready": sum(1 for s in self.servers if s.ready),
        }


# ---------------------------------------------------------------------------------------- models
def server_model(s: Server) -> dict[str, Any]:
    return {
        "name": "",
        "display_name": "",
        "full_name": f"{s.user}/",
        "last_activity": isoformat(s.last_activity),
        "started": isoformat(s.started),
        "pending": None if s.ready else "stop",
        "ready": s.ready,
        "stopped": False,
        "url": f"/user/{s.user}/",
        "user_options": {"profile": "gpu-small" if s.gpu else "cpu-small"},
        "progress_url": f"/hub/api/users/{s.user}/server/progress",
        "full_url": None,
        "full_progress_url": None,
        # the spawner's per-server probe token, shown to admin:server_state (the culler's role)
        "state": {STATE_KEY: probe_token(s.user)},
    }


def probe_token(user: str) -> str:
    """The server's own probe token: the only credential a single-user server accepts here."""
    return f"probe-{user}"


def user_model(s: Server) -> dict[str, Any]:
    """What ``list:users read:users:activity read:servers read:users:groups`` show of a user."""
    return {
        "kind": "user",
        "name": s.user,
        "last_activity": isoformat(s.last_activity),
        "groups": [f"team-{int(s.user[5:]) // 100:02d}"],
        "servers": {} if s.gone else {"": server_model(s)},
    }


def kernel_model(s: Server) -> dict[str, Any]:
    return {
        "id": f"{int(s.user[5:]):08d}-0000-4000-8000-000000000000",
        "name": "python3",
        "last_activity": isoformat(s.last_activity),
        "execution_state": s.kernel_state,
        "connections": 1 if s.kind == "active" else 0,
    }


def status_model(s: Server) -> dict[str, Any]:
    return {
        "started": isoformat(s.started),
        "last_activity": isoformat(s.last_activity),
        "kernels": 1,
        "connections": 1 if s.kind == "active" else 0,
    }


def session_model(s: Server) -> dict[str, Any]:
    return {
        "id": f"{int(s.user[5:]):08d}-0000-4000-8000-00000000000a",
        "path": "train.ipynb",
        "name": "train.ipynb",
        "type": "notebook",
        "kernel": kernel_model(s),
        "notebook": {"path": "train.ipynb", "name": "train.ipynb"},
    }


def attribution_row(s: Server) -> dict[str, Any]:
    """A row in the shape of ``attribution.views.workspace_json``."""
    gpu = s.gpu
    return {
        "user": s.user,
        "server": "",
        "workspace": f"gpu-workspaces/jupyter-{s.user}",
        "namespace": "gpu-workspaces",
        "pod": f"jupyter-{s.user}",
        "profile": "gpu-small" if gpu else "cpu-small",
        "gpu_mode": "exclusive" if gpu else "none",
        "runtime": "container",
        "node": f"gpu-node-{int(s.user[5:]) % 64:03d}",
        "phase": "Running",
        "cost_center": "",
        "started_at": s.started.timestamp(),
        "cull_exempt": False,
        "cpu": {"request": 2.0, "limit": 4.0, "used": 0.5},
        "memory": {"request": 8 * 2**30, "limit": 16 * 2**30, "used": 2 * 2**30},
        "gpu": {
            "allocated": 1.0 if gpu else 0.0,
            "resources": {"nvidia.com/gpu": 1} if gpu else {},
            "util_percent": round(s.gpu_util, 1) if gpu else None,
            "mem_used_mib": 1024.0 if gpu else None,
            "power_w": 120.0 if gpu else None,
            "basis": "exclusive" if gpu else "none",
            "caveat": "",
            "idle": gpu and s.gpu_util < 10,
            "cells": [f"gpu-node-{int(s.user[5:]) % 64:03d}/0"] if gpu else [],
        },
        "accounting": {
            "allocated_gpu_seconds": 3600.0 if gpu else 0.0,
            "used_gpu_seconds": 36.0 * s.gpu_util if gpu else 0.0,
            "idle_allocated_gpu_seconds": 3600.0 - 36.0 * s.gpu_util if gpu else 0.0,
            "unknown_gpu_seconds": 0.0,
            "basis": "allocation x utilisation; unknown: allocated while the utilisation was not visible",
        },
    }


# ----------------------------------------------------------------------------------------- the app
def classify(method: str, path: str) -> str:
    if path.startswith("/hub/api/"):
        if method == "DELETE" and path.startswith("/hub/api/users/"):
            return "hub stop"
        if method == "GET" and path.rstrip("/") == "/hub/api/users":
            return "hub list"
        return "hub other"
    if path.startswith("/user/"):
        tail = path.split("/", 3)[3] if path.count("/") >= 3 else ""
        return {
            "api/status": "server status",
            "api/kernels": "server kernels",
            "api/terminals": "server terminals",
            "api/sessions": "server sessions",
        }.get(tail.rstrip("/"), "server checkpoint" if tail.endswith("/checkpoints") else "server other")
    if path.startswith(ATTRIBUTION_PREFIX):
        return "attribution"
    return "unknown"


def build_app(state: FarmState) -> Any:  # noqa: C901
    from aiohttp import web

    def json_response(body: Any, status: int = 200) -> web.Response:
        return web.Response(body=json.dumps(body), status=status, content_type="application/json")

    def error(status: int, message: str) -> web.Response:
        return json_response({"status": status, "message": message}, status)

    @web.middleware
    async def count(request: web.Request, handler: Any) -> web.StreamResponse:
        path = request.path
        if path.startswith("/_bench/"):
            return await handler(request)
        t0 = time.monotonic()
        if state.first is None:
            state.first = t0
            if state.watch_pid is not None:
                state.cpu_at_first = proc_cpu_s(state.watch_pid)
        kind = classify(request.method, path)
        state.counts[kind] += 1
        if request.method == "GET" and kind.startswith("server") and "no_track_activity" not in request.query:
            state.tracked += 1
        state.in_flight += 1
        try:
            if kind != "attribution" and not _authorized(request, kind):
                return error(403, "missing or invalid token")
            cfg = state.config
            latency = cfg.hub_latency_s
            if kind.startswith("server"):
                latency = cfg.server_latency_s
            elif kind == "hub stop":
                latency = cfg.stop_latency_s
            if latency:
                await asyncio.sleep(latency)
            state.tick()
            response = await handler(request)
            if response.status == 404 or kind in ("hub other", "server other", "unknown"):
                state.other_paths[f"{request.method} {_shape(path)} -> {response.status}"] += 1
            return response
        finally:
            state.in_flight -= 1
            state.last_end = time.monotonic()

    def _authorized(request: web.Request, kind: str) -> bool:
        """The hub takes the service token; a server only its own probe token (never the service's)."""
        token = TOKEN
        if kind.startswith("server"):
            parts = request.path.split("/")
            token = probe_token(parts[2]) if len(parts) > 2 else ""  # /user/<name>/api/...
        return request.headers.get("Authorization", "") in (f"token {token}", f"Bearer {token}")

    async def root(request: web.Request) -> web.Response:
        return json_response({"version": HUB_VERSION})

    async def whoami(request: web.Request) -> web.Response:
        return json_response(
            {
                "kind": "service",
                "name": SERVICE,
                "admin": False,
                "roles": [f"{SERVICE}-role"],
                "scopes": SCOPES,
                "token_id": "a1",
                "session_id": None,
            }
        )

    async def users(request: web.Request) -> web.Response:
        q = request.query
        paginated = PAGINATION in {s.strip().lower() for s in request.headers.get("Accept", "").split(",")}
        try:
            offset = abs(int(q.get("offset", 0)))
            limit = min(max(abs(int(q.get("limit", PAGE_DEFAULT if paginated else PAGE_MAX))), 1), PAGE_MAX)
        except ValueError:
            return error(400, "Invalid argument type, offset and limit must be integers")
        st = q.get("state")
        if st in ("active", "ready"):
            rows = [s for s in state.servers if not s.gone]
        elif st == "inactive":
            rows = [s for s in state.servers if s.gone]
        elif st:
            return error(400, f"Unrecognized state filter: {st!r}")
        else:
            rows = state.servers
        page = rows[offset : offset + limit]
        items = [user_model(s) for s in page if st != "ready" or s.ready]
        if not paginated:
            return json_response(items)
        nxt = None
        if offset + limit < len(rows):
            url = request.url.update_query({"offset": offset + limit, "limit": limit})
            nxt = {"offset": offset + limit, "limit": limit, "url": str(url)}
        pagination = {"offset": offset, "limit": limit, "total": len(rows), "next": nxt}
        return json_response({"items": items, "_pagination": pagination})

    def find(request: web.Request) -> Server | None:
        return state.by_name.get(request.match_info["name"])

    async def user(request: web.Request) -> web.Response:
        s = find(request)
        return json_response(user_model(s)) if s else error(404, "No such user")

    async def server_get(request: web.Request) -> web.Response:
        s = find(request)
        if s is None or request.match_info.get("server", ""):
            return error(404, "No such server")
        return json_response(server_model(s)) if not s.gone else error(404, "No such server")

    async def server_delete(request: web.Request) -> web.Response:
        s = find(request)
        if s is None:
            return error(404, "No such user")
        if request.match_info.get("server", ""):
            return error(404, f"{s.user} has no server named {request.match_info['server']!r}")
        body = await request.read()
        if body and json.loads(body).get("remove"):
            state.other_paths["DELETE with remove=true"] += 1
        if s.gone:
            return web.Response(status=204)
        if s.ready:
            s.ready = False
            s.stop_at = time.monotonic() + state.config.stop_s
            state.stopped[s.kind] += 1
            state.stopping.append(s)
        return web.Response(status=202)

    def running(request: web.Request) -> Server | web.Response:
        s = find(request)
        if s is None or s.gone:
            return error(503, "Service Unavailable: the server is not running")
        return s

    async def su_status(request: web.Request) -> web.Response:
        s = running(request)
        return s if isinstance(s, web.Response) else json_response(status_model(s))

    async def su_kernels(request: web.Request) -> web.Response:
        s = running(request)
        return s if isinstance(s, web.Response) else json_response([kernel_model(s)])

    async def su_terminals(request: web.Request) -> web.Response:
        s = running(request)
        if isinstance(s, web.Response):
            return s
        return json_response([{"name": "1", "last_activity": isoformat(s.last_activity)}] * s.terminals)

    async def su_sessions(request: web.Request) -> web.Response:
        s = running(request)
        return s if isinstance(s, web.Response) else json_response([session_model(s)])

    async def su_checkpoint(request: web.Request) -> web.Response:
        s = running(request)
        if isinstance(s, web.Response):
            return s
        return json_response({"id": "checkpoint", "last_modified": isoformat(datetime.now(UTC))}, 201)

    async def su_other(request: web.Request) -> web.Response:
        s = running(request)
        return s if isinstance(s, web.Response) else error(404, "Not Found")

    async def workspaces(request: web.Request) -> web.Response:
        rows = [attribution_row(s) for s in state.servers if not s.gone]
        return json_response({"at": time.time(), "items": rows})

    async def stats(request: web.Request) -> web.Response:
        return json_response(state.stats())

    async def reset(request: web.Request) -> web.Response:
        state.reset()
        return json_response(state.stats())

    async def watch(request: web.Request) -> web.Response:
        state.watch_pid = int((await request.json())["pid"])
        return json_response({"pid": state.watch_pid})

    async def not_found(request: web.Request) -> web.Response:
        return error(404, "Not Found")

    app = web.Application(middlewares=[count])
    r = app.router
    r.add_get("/hub/api/", root)
    r.add_get("/hub/api", root)
    r.add_get("/hub/api/user", whoami)
    r.add_get("/hub/api/users", users)
    r.add_get("/hub/api/users/{name}", user)
    for path in ("/hub/api/users/{name}/server", "/hub/api/users/{name}/servers/{server}"):
        r.add_get(path, server_get)
        r.add_delete(path, server_delete)
    r.add_get("/user/{name}/api/status", su_status)
    r.add_get("/user/{name}/api/kernels", su_kernels)
    r.add_get("/user/{name}/api/terminals", su_terminals)
    r.add_get("/user/{name}/api/sessions", su_sessions)
    r.add_post("/user/{name}/api/contents/{path:.+}/checkpoints", su_checkpoint)
    r.add_route("*", "/user/{name}/{tail:.*}", su_other)
    r.add_get(ATTRIBUTION_PREFIX + "api/v1/workspaces", workspaces)
    r.add_get("/_bench/stats", stats)
    r.add_post("/_bench/reset", reset)
    r.add_post("/_bench/watch", watch)
    r.add_route("*", "/{tail:.*}", not_found)
    return app


def _shape(path: str) -> str:
    """A path with the user's name folded, to group the uncounted kinds."""
    parts = path.split("/")
    return "/".join("{name}" if p.startswith("user-") else p for p in parts)


def proc_cpu_s(pid: int) -> float | None:
    """utime + stime of one process (``/proc/<pid>/stat``), in seconds; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------------- the process
def _farm_main(conn: multiprocessing.connection.Connection, config: FarmConfig) -> None:
    from aiohttp import web

    async def run() -> None:
        state = FarmState(config)
        state.reset()
        runner = web.AppRunner(build_app(state), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        conn.send(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        await runner.cleanup()

    asyncio.run(run())


class Farm:
    """The farm in a child process; the benchmark talks to it over HTTP (``/_bench/*``)."""

    def __init__(self, config: FarmConfig) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.config = config
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_farm_main, args=(child, config), daemon=True, name="culler-farm")
        self.proc.start()
        child.close()
        if not self.conn.poll(60):
            self.proc.kill()
            raise RuntimeError("the farm did not start in 60 s")
        self.port: int = self.conn.recv()
        self.base = f"http://127.0.0.1:{self.port}"

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        req = urllib.request.Request(self.base + path, data=data, method=method)
        with urllib.request.urlopen(req, timeout=30) as r:
            return dict(json.loads(r.read()))

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/_bench/stats")

    def reset(self) -> dict[str, Any]:
        return self._call("POST", "/_bench/reset")

    def watch(self, pid: int) -> None:
        self._call("POST", "/_bench/watch", {"pid": pid})

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send("stop")
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
