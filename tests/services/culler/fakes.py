"""A fake hub API, fake single-user servers and a fake attribution service: one tornado app, one port.

Routes: ``/hub/api/users`` (paginated, ``state=ready``), ``DELETE /hub/api/users/<u>/server`` and
``/servers/<s>``, ``/user/<u>/[<s>/]api/{status,kernels,terminals,sessions}``,
``POST .../api/contents/<path>/checkpoints`` and ``/attribution/api/v1/workspaces``. Every request is
counted by kind (:attr:`FakeCluster.counts`); server API requests without ``no_track_activity`` also
in :attr:`FakeCluster.tracked` (jupyter_server would record them as activity). Each server's model
carries its probe token in ``state`` (as the hub shows it to ``admin:server_state``); a server answers
only its own probe token (403 otherwise), and every other credential sent to it is kept in
:attr:`FakeCluster.server_credentials` (the culler's own token must never be among them). With ``proxy_clock``
set, every request to a single-user server moves its hub ``last_activity`` to that clock's time, as
configurable-http-proxy and ``JupyterHub.update_last_activity`` do. A server is a small dataclass, so
thousands are cheap.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import unquote

from tornado import httpserver, web

from gpuworkspace_spawner.probecredentials import STATE_KEY

TOKEN = "fake-culler-token"


def iso(at: datetime | None) -> str | None:
    return at.isoformat().replace("+00:00", "Z") if at else None


@dataclass
class FakeServer:
    """One running single-user server and what its API answers."""

    user: str
    name: str = ""
    started: datetime | None = None
    hub_activity: datetime | None = None  # the hub's last_activity
    activity: datetime | None = None  # /api/status last_activity (None: the start)
    kernels: list[dict[str, Any]] = field(default_factory=list)  # {"id", "execution_state", "last_activity"}
    terminals: list[dict[str, Any]] = field(default_factory=list)  # {"name", "last_activity"}
    sessions: list[str] = field(default_factory=list)  # notebook paths open in sessions
    user_options: dict[str, Any] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)
    ready: bool = True  # False: starting or stopping (active, not ready)
    fail: int | None = None  # answer every server API request with this status
    delay: float = 0.0  # seconds before answering (a timeout when over the client's)
    has_probe_token: bool = True  # False: a server whose state holds no probe token (another spawner)
    raw_sessions: list[Any] = field(default_factory=list)  # session objects sent as they are (hostile)
    padding: int = 0  # bytes of filler in each answer (an oversized answer)

    @property
    def probe_token(self) -> str | None:
        return f"probe-{self.user}-{self.name}" if self.has_probe_token else None

    @property
    def url(self) -> str:
        return f"/user/{self.user}/{self.name}/" if self.name else f"/user/{self.user}/"

    def model(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ready": self.ready,
            "pending": None if self.ready else "stop",
            "started": iso(self.started),
            "last_activity": iso(self.hub_activity),
            "url": self.url,
            "user_options": self.user_options,
            "state": {STATE_KEY: self.probe_token} if self.probe_token else {},
        }


class FakeCluster:
    """The fakes, served on a free local port once :meth:`start` ran."""

    def __init__(self, *, page_limit: int = 200) -> None:
        self.servers: dict[tuple[str, str], FakeServer] = {}
        self.gpu: dict[tuple[str, str], dict[str, Any]] = {}  # attribution rows
        self.attribution_down = False
        self.stop_status = 202
        self.stop_delay = 0.0  # seconds each DELETE takes
        self.proxy_clock: Callable[[], datetime] | None = None  # set: proxied requests move hub activity
        self.tracked: Counter[str] = Counter()  # server GETs that would count as activity
        self.envelope = True  # False: a hub that answers plain lists, whatever the Accept header
        self.page_limit = page_limit
        self.counts: Counter[str] = Counter()
        self.deletes: list[tuple[str, bytes]] = []  # (path, body) of each DELETE
        self.checkpoints: list[str] = []
        self.server_credentials: list[str] = []  # the Authorization header of every server request
        self.port = 0
        self._server: httpserver.HTTPServer | None = None

    # --- setup
    def add(self, user: str, name: str = "", **kw: Any) -> FakeServer:
        server = FakeServer(user, name, **kw)
        self.servers[(user, name)] = server
        return server

    def add_gpu(
        self, user: str, name: str = "", *, util: float | None, mode: str = "exclusive", **kw: Any
    ) -> None:
        self.gpu[(user, name)] = {
            "user": user,
            "server": name,
            "profile": kw.get("profile"),
            "namespace": "workspaces",
            "gpu_mode": mode,
            "runtime": "container",
            "gpu": {"allocated": kw.get("allocated", 1.0), "util_percent": util},
            "accounting": {"idle_allocated_gpu_seconds": kw.get("idle_seconds", 0.0)},
            **({"cull_exempt": kw["cull_exempt"]} if "cull_exempt" in kw else {}),
        }

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def hub_api_url(self) -> str:
        return f"{self.base}/hub/api"

    @property
    def attribution_url(self) -> str:
        return f"{self.base}/attribution/"

    def requests(self, *kinds: str) -> int:
        return sum(self.counts[k] for k in kinds) if kinds else sum(self.counts.values())

    # --- serving
    def app(self) -> web.Application:
        args = {"fake": self}
        user = r"/user/([^/]+)/(?:([^/]+)/)?api"
        return web.Application(
            [
                (r"/hub/api/users", UsersHandler, args),
                (r"/hub/api/users/([^/]+)/server", StopHandler, args),
                (r"/hub/api/users/([^/]+)/servers/([^/]+)", StopHandler, args),
                (user + r"/(status|kernels|terminals|sessions)", ServerApiHandler, args),
                (user + r"/contents/(.+)/checkpoints", CheckpointHandler, args),
                (r"/attribution/api/v1/workspaces", AttributionHandler, args),
            ]
        )

    async def start(self) -> FakeCluster:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._server = httpserver.HTTPServer(self.app())
        self._server.add_sockets([sock])
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            await self._server.close_all_connections()


class Base(web.RequestHandler):
    def initialize(self, fake: FakeCluster) -> None:
        self.fake = fake

    def prepare(self) -> None:
        if self.request.headers.get("Authorization") != f"token {TOKEN}":
            raise web.HTTPError(403)

    def reply(self, body: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def check_xsrf_cookie(self) -> None:
        return None


class UsersHandler(Base):
    def get(self) -> None:
        fake = self.fake
        fake.counts["hub-list"] += 1
        assert self.get_argument("state") == "ready"
        offset = int(self.get_argument("offset", "0"))
        limit = min(int(self.get_argument("limit", "50")), fake.page_limit)
        users: dict[str, dict[str, Any]] = {}
        for s in fake.servers.values():
            u = users.setdefault(s.user, {"name": s.user, "groups": s.groups, "servers": {}})
            u["servers"][s.name] = s.model()
        names = sorted(users)
        # like JupyterHub: users with an active server are paged, then filtered to those with a ready one
        page = [
            users[n]
            for n in names[offset : offset + limit]
            if any(s["ready"] for s in users[n]["servers"].values())
        ]
        following = {"offset": offset + limit, "limit": limit} if offset + limit < len(names) else None
        if not fake.envelope or "jupyterhub-pagination" not in self.request.headers.get("Accept", ""):
            self.reply(page)
            return
        self.reply(
            {
                "items": page,
                "_pagination": {"offset": offset, "limit": limit, "total": len(names), "next": following},
            }
        )


class StopHandler(Base):
    async def delete(self, user: str, name: str = "") -> None:
        fake = self.fake
        fake.counts["hub-stop"] += 1
        fake.deletes.append((self.request.path, self.request.body))
        if fake.stop_delay:
            await asyncio.sleep(fake.stop_delay)
        if fake.servers.pop((unquote(user), unquote(name)), None) is None:
            self.reply({"status": 404, "message": "no such server"}, 404)
            return
        self.set_status(fake.stop_status)
        self.finish()


class ServerBase(Base):
    """A single-user server's API: only that server's own probe token opens it."""

    def prepare(self) -> None:
        user, name = (unquote(a) if a else "" for a in self.path_args[:2])
        credential = self.request.headers.get("Authorization", "")
        server = self.fake.servers.get((user, name))
        self.fake.server_credentials.append(credential)
        if server is None or not server.probe_token or credential != f"token {server.probe_token}":
            raise web.HTTPError(403)


class ServerApiHandler(ServerBase):
    async def get(self, user: str, name: str | None, kind: str) -> None:
        fake = self.fake
        fake.counts[kind] += 1
        if self.get_argument("no_track_activity", None) is None:
            fake.tracked[kind] += 1
        server = fake.servers.get((user, name or ""))
        if server is None:
            raise web.HTTPError(503)
        if fake.proxy_clock is not None:
            server.hub_activity = fake.proxy_clock()
        if server.delay:
            await asyncio.sleep(server.delay)
        if server.fail:
            raise web.HTTPError(server.fail)
        if kind == "status":
            body: Any = {
                "started": iso(server.started),
                "last_activity": iso(server.activity or server.started),
                "kernels": len(server.kernels),
                "connections": 0,
                **({"padding": "x" * server.padding} if server.padding else {}),
            }
        elif kind == "kernels":
            body = [
                {"connections": 0, **k, "last_activity": iso(k.get("last_activity"))} for k in server.kernels
            ]
        elif kind == "terminals":
            body = [{**t, "last_activity": iso(t.get("last_activity"))} for t in server.terminals]
        else:
            body = [{"path": p, "type": "notebook", "kernel": {}} for p in server.sessions]
            body += server.raw_sessions
        self.reply(body)


class CheckpointHandler(ServerBase):
    def post(self, user: str, name: str | None, path: str) -> None:
        self.fake.counts["checkpoint"] += 1
        self.fake.checkpoints.append(unquote(path))
        self.reply({"id": "checkpoint", "last_modified": "2025-01-01T00:00:00Z"}, 201)


class AttributionHandler(Base):
    def get(self) -> None:
        self.fake.counts["attribution"] += 1
        if self.fake.attribution_down:
            raise web.HTTPError(503)
        self.reply({"at": 0, "items": list(self.fake.gpu.values())})


class FakeClock:
    """The cycle's clock, moved by the test."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        from datetime import timedelta

        self.now += timedelta(**delta)
        return self.now


def make_culler(
    fake: FakeCluster,
    clock: FakeClock,
    policy: Any = None,
    *,
    dry_run: bool = False,
    gpu: bool = True,
    probe: bool = True,
    timeout: float = 5.0,
    **options: Any,
) -> Any:
    """A :class:`Culler` wired to ``fake``; close its ``hub.http`` when done."""
    from gpuworkspace_spawner.services.culler.cycle import Culler, Options
    from gpuworkspace_spawner.services.culler.gpusource import GpuSource
    from gpuworkspace_spawner.services.culler.hubapi import Http, HubApi
    from gpuworkspace_spawner.services.culler.model import Policy
    from gpuworkspace_spawner.services.culler.probes import ServerProber
    from gpuworkspace_spawner.services.culler.state import CullerState

    http = Http(TOKEN, timeout=timeout, max_clients=20)
    state = CullerState(policy=policy or Policy(), dry_run=dry_run)
    source = GpuSource(http, fake.attribution_url, started_at=clock()) if gpu else None
    return Culler(
        state,
        HubApi(http, fake.hub_api_url),
        prober=ServerProber(http, fake.base) if probe else None,
        gpu=source,
        options=Options(**options),
        clock=clock,
    )
