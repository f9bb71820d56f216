"""The attribution service's tornado handlers: JSON API, ``/metrics`` and the dashboard page.

Every API answer is picked from the collector's latest :class:`.collector.Snapshot` (precomputed JSON
bytes) and filtered by :mod:`.access`; errors are ``{"status", "message"}`` like JupyterHub's API.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from jupyterhub.services.auth import HubOAuth
from tornado import web

from ..access import (
    may_use_service,
    reads_every_server,
    who,
)
from ..handling import ServiceHandler
from ..serving import ServiceError, login_url, metrics_registry, metrics_text, shown
from . import access, dashboard
from .aggregate import RANKINGS
from .availability import parse_need
from .collector import Collector, Snapshot
from .metrics import AttributionMetrics
from .offloading import off_loop
from .recent import recent_json
from .sources import PrometheusQueries
from .views import server_from_path, top_json

log = logging.getLogger("gpuworkspace.attribution")
SERVICE = "gpuworkspace-attribution"
WINDOW = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_WINDOW_S = 366 * 86400
DEFAULT_TRENDS = ("cluster:gpu_util", "cluster:gpus_allocated", "cluster:gpus_busy")


class Base(ServiceHandler):
    """Shared state; the kit's caller, access and JSON errors (:class:`..handling.ServiceHandler`)."""

    def initialize(self, state: State) -> None:
        self.state = state
        self.hub_auth = state.hub_auth

    @property
    def service_name(self) -> str:
        return str(self.state.service)

    def snapshot(self) -> Snapshot:
        snap = self.state.collector.snapshot
        if snap is None:
            raise ServiceError(503, "no data yet: the first collection cycle has not finished")
        return snap


class ApiHandler(Base):
    """JSON API: any hub token (or this service's OAuth cookie) identifies the caller; scopes decide."""

    def may_read_user(self, user: str) -> bool:
        return access.may_read_user(self.caller, user, service=self.state.service)

    def me(self) -> str | None:
        kind, name = self.caller.get("kind", "user"), self.caller.get("name")
        return str(name) if kind == "user" and name else None

    def compute_etag(self) -> None:
        """No ETag: answers are ``no-store`` and up to megabytes; hashing each cost more than sending it."""
        return None


class NodesHandler(ApiHandler):
    def get(self) -> None:
        snap = self.snapshot()
        show = self.state.show_owners_to_all or access.is_admin(self.caller)
        self.reply(snap.nodes_body if show else snap.nodes_anonymous_body)


class AvailabilityHandler(ApiHandler):
    """``GET api/v1/availability?resource=&count=&selector=key=value``: what is free now for one
    profile's GPU resource (counts only: never who holds them). Any logged-in user of the service.
    With ``login=1`` a browser without this service's login is sent through the hub's OAuth login
    (the spawn page's script), instead of a 403."""

    def check_xsrf_cookie(self) -> None:
        """No xsrf token for this read-only GET (as for the dashboard): the spawn page's ``fetch`` has
        none, and JupyterHub would then ignore the service's login cookie and log in again forever.
        Other sites cannot read the answer (no CORS headers)."""

    async def prepare(self) -> None:
        browser_login = self.get_argument("login", "") and isinstance(self.hub_auth, HubOAuth)
        if browser_login and not await self.hub_auth.get_user(self, sync=False):
            self.redirect(login_url(self, self.hub_auth))
            return
        await super().prepare()

    def get(self) -> None:
        if self._finished:
            return
        snap = self.snapshot()
        try:
            need = parse_need(
                self.get_argument("resource", ""),
                self.get_argument("count", "1"),
                self.get_arguments("selector"),
            )
        except ValueError as exc:
            raise ServiceError(400, str(exc)) from exc
        self.reply(snap.availability(need))


class WorkspacesHandler(ApiHandler):
    """``GET api/v1/workspaces[?user=]``: running workspaces (the caller's own, or everyone's for admins)."""

    what = "workspaces"

    def bodies(self, snap: Snapshot) -> tuple[bytes, Mapping[str, bytes]]:
        return snap.workspaces_body, snap.workspaces_by_user

    def get(self) -> None:
        snap = self.snapshot()
        every, by_user = self.bodies(snap)
        user = self.get_argument("user", None)
        if user is not None and not user:
            raise ServiceError(400, "user: empty; give a hub user name, or leave the parameter out")
        if user is None and reads_every_server(self.caller):
            self.reply(every or snap.empty_list())
            return
        user = user if user is not None else self.me()
        if user is None:
            self.reply(snap.empty_list())
            return
        if not self.may_read_user(user):
            raise ServiceError(403, f"{who(self.caller)} may not see the {self.what} of {user}")
        self.reply(by_user.get(user) or snap.empty_list())


class JobsHandler(WorkspacesHandler):
    """``GET api/v1/jobs[?user=]``: the running pods of submitted jobs (kind ``job``), apart from workspaces."""

    what = "jobs"

    def bodies(self, snap: Snapshot) -> tuple[bytes, Mapping[str, bytes]]:
        return snap.jobs_body, snap.jobs_by_user


class WorkspaceHandler(ApiHandler):
    def get(self, user: str, server: str) -> None:
        snap = self.snapshot()
        if not self.may_read_user(user):
            raise ServiceError(403, f"{who(self.caller)} may not see the workspaces of {user}")
        body = snap.detail.get((user, server_from_path(server)))
        if body is None:
            name = server_from_path(server) or "(default server)"
            raise ServiceError(404, f"no running workspace {user}/{name}")
        self.reply(body)


class TopHandler(ApiHandler):
    def get(self) -> None:
        snap = self.snapshot()
        by = self.get_argument("by", "gpu")
        if by not in RANKINGS:
            raise ServiceError(400, f"by: unknown ranking {shown(by)}; one of {', '.join(RANKINGS)}")
        text = self.get_argument("limit", "10")
        # (at most 4 digits: int() refuses 4,300 of them with a ValueError of its own)
        if not (text.isascii() and text.isdigit() and len(text) <= 4 and 1 <= int(text) <= 1000):  # noqa: PLR2004
            raise ServiceError(400, f"limit must be an integer between 1 and 1000, not {shown(text)}")
        limit = int(text)
        users = access.visible_users(self.caller, snap.groups_of_user)
        scope = "all users" if users is None else "members of your groups and you"
        self.reply(
            {
                "by": by,
                "among": scope,
                "items": top_json(snap.top(by, users, limit), by),
                "at": snap.at,
            }
        )


class GroupsHandler(ApiHandler):
    def get(self) -> None:
        snap = self.snapshot()
        visible = access.visible_groups(self.caller, snap.groups_of_user)
        items = [snap.groups[g] for g in sorted(visible) if g in snap.groups]
        self.reply({"items": items, "at": snap.at})


def parse_window(text: str) -> float:
    """``90``, ``15m``, ``1h``, ``1d`` -> seconds."""
    m = WINDOW.match(text.strip())
    seconds = float(m.group(1)) * UNITS[m.group(2)] if m else 0.0
    if not 0 < seconds <= MAX_WINDOW_S:  # 1e999 is inf, which JSON cannot carry
        raise ServiceError(
            400, f"window {shown(text)}: a positive number with an optional unit s, m, h or d, at most 366d"
        )
    return seconds


class TrendsHandler(ApiHandler):
    async def get(self) -> None:
        snap = self.snapshot()
        window = parse_window(self.get_argument("window", "1h"))
        raw = self.get_argument("series", "")
        names = [n for n in raw.split(",") if n] if raw else list(DEFAULT_TRENDS)
        if not raw and self.me():
            names.append(f"user:{self.me()}:gpu_util")
        denied = [n for n in names if not access.may_read_series(self.caller, n, service=self.state.service)]
        if denied:
            raise ServiceError(403, f"{who(self.caller)} may not read {', '.join(denied)}")
        since = snap.at - window
        series: dict[str, list[list[float]]] = {}
        for name in names:
            points = await self.state.trend(name, since, snap.at)
            series[name] = [[round(t, 3), v] for t, v in points]
        source = "prometheus" if self.state.prometheus else "embedded"
        self.reply({"window_s": window, "source": source, "series": series, "at": snap.at})


class StatusHandler(ApiHandler):
    def get(self) -> None:
        snap, stats = self.state.collector.snapshot, self.state.collector.stats
        body: dict[str, Any] = {
            "at": snap.at if snap else None,
            "cycles": stats.cycles,
            "cycle_duration_s": round(stats.last_duration_s, 4),
            "interval_s": self.state.collector.interval_s,
            "mode": "prometheus" if self.state.prometheus else "direct",
        }
        if access.is_admin(self.caller):
            body["failed_sources"] = list(snap.failed_sources) if snap else []
            body["cycle_cpu_s"] = round(stats.last_cpu_s, 4)
        self.reply(body)


class MetricsHandler(ApiHandler):
    """Prometheus text; needs ``read:metrics`` unless started with ``--metrics-public``."""

    scrape = True

    def initialize(self, state: State) -> None:
        super().initialize(state)
        self.metrics_public = state.metrics_public

    async def get(self) -> None:
        self.send_metrics(await self.state.metrics_text())


class DashboardHandler(Base):
    """The HTML page (browser login through the hub's OAuth); ``?fragment=1`` is its content alone."""

    def check_xsrf_cookie(self) -> None:
        """No xsrf token for these read-only GETs: the page's 15-second refresh is a ``fetch`` without
        one, and JupyterHub would then ignore the login cookie and send every refresh round the OAuth
        login (the page never refreshed). Other sites cannot read the answer (no CORS headers)."""

    async def prepare(self) -> None:
        model = await self.hub_auth.get_user(self, sync=False)
        if not model:
            if isinstance(self.hub_auth, HubOAuth) and self.request.method == "GET":
                self.redirect(login_url(self, self.hub_auth))
                return
            raise web.HTTPError(403, "log in to the hub first")
        if not may_use_service(model, self.state.service):
            raise web.HTTPError(403, f"{who(model)} lacks access:services!service={self.state.service}")
        self.caller = model

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(f"{status_code}: {self._reason}")

    def get(self) -> None:
        if self._finished:
            return
        snap = self.state.collector.snapshot
        if snap is None:
            self.set_header("Refresh", "5")
            self.finish("Collecting the first figures; this page reloads in a few seconds.")
            return
        ctx = dashboard.context(
            snap,
            self.state.collector.history,
            self.caller,
            service=self.state.service,
            prefix=self.state.prefix,
            hub_prefix=self.state.hub_prefix,
            show_owners_to_all=self.state.show_owners_to_all,
        )
        name = "fragment.html" if self.get_argument("fragment", "") else "page.html"
        self.set_header("Cache-Control", "no-store")
        self.finish(dashboard.render(self.state.templates, name, ctx))


class WorkspaceHistoryHandler(ApiHandler):
    """``workspaces/<user>/<server>/history?window=1h``: one workspace's own last hour (its JupyterLab
    panel); the same access as its detail: that user (or their server's token) and admins."""

    def get(self, user: str, server: str) -> None:
        snap = self.snapshot()
        if not self.may_read_user(user):
            raise ServiceError(403, f"{who(self.caller)} may not see the workspaces of {user}")
        recent = self.state.collector.recent
        window = min(parse_window(self.get_argument("window", "1h")), recent.window_s)
        found = recent.get(user, server_from_path(server))
        if found is None:
            name = server_from_path(server) or "(default server)"
            raise ServiceError(404, f"no figures of a workspace {user}/{name} in the last hour")
        body = recent_json(found, since=snap.at - window)
        body.update({"user": user, "server": server_from_path(server), "window_s": window, "at": snap.at})
        self.reply(body)


class State:
    """What every handler shares."""

    def __init__(
        self,
        collector: Collector,
        hub_auth: Any,
        *,
        prefix: str,
        service: str = SERVICE,
        hub_prefix: str = "/hub/",
        show_owners_to_all: bool = True,
        metrics_public: bool = False,
        prometheus: PrometheusQueries | None = None,
    ) -> None:
        self.collector, self.hub_auth, self.prefix, self.service = collector, hub_auth, prefix, service
        self.hub_prefix, self.show_owners_to_all = hub_prefix, show_owners_to_all
        self.metrics_public, self.prometheus = metrics_public, prometheus
        self.templates = dashboard.environment()
        self.registry = metrics_registry(
            AttributionMetrics(lambda: collector.snapshot, lambda: collector.stats)
        )
        self._metrics: tuple[tuple[int, int], bytes] | None = None

    async def metrics_text(self) -> bytes:
        """``/metrics``, rendered once per cycle on a worker thread: 2,000 workspaces' gauges took
        ~0.1 s of the event loop per scrape."""
        key = (id(self.collector.snapshot), self.collector.stats.cycles)
        if self._metrics is None or self._metrics[0] != key:
            self._metrics = (key, await off_loop(metrics_text, self.registry))
        return self._metrics[1]

    async def trend(self, name: str, since: float, until: float) -> list[tuple[float, float]]:
        """Points of a series: Prometheus range queries for cluster/node GPU utilisation in that mode,
        else (and for everything else) the embedded ring buffer."""
        if self.prometheus is not None:
            points = await prometheus_trend(self.prometheus, name, since, until)
            if points is not None:
                return points
        return self.collector.history.window(name, since, until)


async def prometheus_trend(
    prom: PrometheusQueries, name: str, since: float, until: float
) -> list[tuple[float, float]] | None:
    """``cluster:gpu_util`` and ``node:<n>:gpu_util`` from Prometheus; None for other series (or on failure)."""
    from .parsing import PROMQL, prometheus_matrix_to_points  # noqa: PLC0415 - Prometheus mode only

    node = (
        name[len("node:") : -len(":gpu_util")]
        if name.startswith("node:") and name.endswith(":gpu_util")
        else None
    )
    if name != "cluster:gpu_util" and not node:
        return None
    query = PROMQL["trend:cluster:gpu_util"] if node is None else PROMQL["trend:node:gpu_util"]
    step = max(15.0, (until - since) / 240)
    try:
        matrix = prometheus_matrix_to_points(await prom.query_range(query, since, until, step))
    except Exception as exc:  # a failed range query falls back to the embedded history
        log.warning("Prometheus range query for %s failed: %s", name, exc)
        return None
    for labels, points in matrix:
        if node is None or node in labels.values():
            return points
    return []
