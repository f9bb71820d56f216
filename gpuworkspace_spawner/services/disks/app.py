"""``gpuworkspace-disks``: the disk admin service's HTTP API (tornado) and its command line.

Run by JupyterHub as a managed service (hub_config/jupyterhub_config.py) or anywhere with the
environment a JupyterHub service gets: ``JUPYTERHUB_SERVICE_PREFIX`` (routes), ``JUPYTERHUB_SERVICE_URL``
(where to listen), ``JUPYTERHUB_API_URL`` and ``JUPYTERHUB_API_TOKEN`` (token checks), and Kubernetes
access from the in-cluster ServiceAccount or ``KUBECONFIG``. API reference: docs/reference/disk-api.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jupyterhub.services.auth import HubAuth, HubOAuth, HubOAuthCallbackHandler
from jupyterhub.utils import url_path_join
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from tornado import web

from ...catalog import CatalogError, CatalogSource
from ...k8s import KubernetesError, Unavailable, gateway
from ...manifests.names import WorkspaceIdentity
from ..kubelets import KubeletAccess
from ..serving import (
    JsonErrors,
    ServiceError,
    add_body_limit_argument,
    http_server,
    listen_address,
    login_url,
    until_stopped,
)
from . import access, transfer
from .metrics import DiskMetrics, VolumeStats
from .mine import own_disks
from .operations import DiskOperations, Settings
from .page import SnapshotPageHandler, environment
from .scheduling import SnapshotWorker

log = logging.getLogger("gpuworkspace.disks")
MAX_BODY = 16 * 1024
DEFAULT_SERVER_PATH = ("~", "default")  # path segments meaning JupyterHub's unnamed server ("")


class ApiHandler(JsonErrors):
    """JSON in and out; errors as ``{"status", "message"}`` like JupyterHub's own API."""

    hub_auth: Any
    caller: dict[str, Any]
    needs_service_access = True  # refuse a token that grants nothing here (access.grants_anything_here)

    def initialize(self, ops: DiskOperations, hub_auth: Any) -> None:
        self.ops, self.hub_auth = ops, hub_auth

    def check_xsrf_cookie(self) -> None:
        """Changes need a token (Authorization header), never only a cookie: no cross-site writes."""

    async def prepare(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        model = await self.hub_auth.get_user(self, sync=False)
        if not model:
            raise ServiceError(403, "missing or invalid credentials: send 'Authorization: token <hub token>'")
        if self.needs_service_access and not access.grants_anything_here(
            model, self.ops.settings.service_name
        ):
            raise ServiceError(403, access.access_refused(model, self.ops.settings.service_name))
        token_auth = getattr(self, "_token_authenticated", False)
        if self.request.method not in ("GET", "HEAD") and not token_auth:
            raise ServiceError(403, "changes need a token in the Authorization header, not a cookie")
        self.caller = model

    def body(self, allowed: dict[str, type], required: Sequence[str] = ()) -> dict[str, Any]:
        raw = self.request.body or b"{}"
        if len(raw) > MAX_BODY:
            raise ServiceError(413, f"request body over {MAX_BODY} bytes")
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise ServiceError(400, f"request body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ServiceError(400, "request body must be a JSON object")
        unknown = sorted(set(body) - set(allowed))
        if unknown:
            raise ServiceError(
                400, f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(allowed) or 'none'}"
            )
        for key in required:
            if key not in body:
                raise ServiceError(400, f"field {key!r} is required")
        for key, kind in allowed.items():
            if key in body and body[key] is not None and not isinstance(body[key], kind):
                raise ServiceError(400, f"field {key!r} must be a {kind.__name__}")
        return body

    def reply(self, obj: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(obj, sort_keys=True))

    def error_message(self, exc: BaseException | None) -> str:
        if isinstance(exc, KubernetesError):
            return f"Kubernetes API: {exc}"
        return super().error_message(exc)

    def _handle_request_exception(self, e: BaseException) -> None:
        if isinstance(e, KubernetesError):
            log.warning("%s %s: %s", self.request.method, self.request.path, e)
            self.send_error(
                502 if isinstance(e, Unavailable) else 500, exc_info=(type(e), e, e.__traceback__)
            )
            return
        super()._handle_request_exception(e)


def _server(segment: str) -> str:
    return "" if segment in DEFAULT_SERVER_PATH else segment


class WorkspacesHandler(ApiHandler):
    async def get(self) -> None:
        self.reply({"items": await self.ops.workspaces(self.caller)})


class WorkspaceHandler(ApiHandler):
    async def get(self, user: str, server: str) -> None:
        items = await self.ops.workspaces(self.caller, user, _server(server))
        if not items:
            if not access.may_read(self.caller, user, service=self.ops.settings.service_name):
                raise ServiceError(403, f"{access.who(self.caller)} may not see the workspaces of {user}")
            raise ServiceError(404, f"no workspace disk for {user}/{_server(server)}")
        items.sort(key=lambda i: i["disk"]["kind"] != "home")
        self.reply(items[0])


class ResizeHandler(ApiHandler):
    async def post(self, claim: str) -> None:
        body = self.body({"size": str}, required=["size"])
        self.reply(await self.ops.resize(self.caller, claim, body["size"]))


class SnapshotsHandler(ApiHandler):
    async def get(self, claim: str) -> None:
        self.reply({"items": await self.ops.snapshots(self.caller, claim)})

    async def post(self, claim: str) -> None:
        body = self.body({"name": str})
        snapshot, ready = await self.ops.snapshot(self.caller, claim, body.get("name"))
        self.reply(snapshot, 201 if ready else 202)


class RestoreHandler(ApiHandler):
    async def post(self, claim: str) -> None:
        body = self.body({"snapshot": str}, required=["snapshot"])
        self.reply(await self.ops.restore(self.caller, claim, body["snapshot"]))


class ReclaimHandler(ApiHandler):
    async def post(self, claim: str) -> None:
        self.body({})
        self.reply(await self.ops.reclaim(self.caller, claim))


class TransferHandler(ApiHandler):
    """Admin only: give a disk to another owner (``{"user": ..., "server": ""}``; lifecycle/ownership.py)."""

    async def post(self, claim: str) -> None:
        body = self.body({"user": str, "server": str}, required=["user"])
        if not body["user"]:
            raise ServiceError(400, "field 'user' must name a hub user")
        self.ops.require_admin(self.caller, "transferring a disk")  # before any call to the hub
        token = self.hub_auth.get_token(self, in_cookie=False) or ""
        owner = await transfer.hub_user_owner(
            self.hub_auth.api_url, token, body["user"], timeout_s=self.ops.settings.request_timeout_s
        )
        target = WorkspaceIdentity(
            user=body["user"],
            server=body.get("server") or "",
            namespace=self.ops.settings.namespace,
            owner=owner,
        )
        self.reply(await transfer.transfer(self.ops, self.caller, claim, target))


class UserDisksHandler(ApiHandler):
    """A user's disks: size, use, free space, inodes, state, last snapshot, near full (mine.py).

    The hub home page's script fetches it with the user's hub login: a browser without this service's
    login cookie goes round the hub's OAuth authorize (no page: ``oauth_no_confirm``) and back here, as
    the idle culler's notices do."""

    def initialize(self, ops: DiskOperations, hub_auth: Any, threshold: float) -> None:  # type: ignore[override]
        super().initialize(ops, hub_auth)
        self.threshold = threshold

    async def prepare(self) -> None:
        browser = self.request.method == "GET" and "Authorization" not in self.request.headers
        if (
            browser
            and isinstance(self.hub_auth, HubOAuth)
            and not await self.hub_auth.get_user(self, sync=False)
        ):
            self.redirect(login_url(self, self.hub_auth))
            return
        await super().prepare()

    async def get(self, user: str) -> None:
        self.reply(await own_disks(self.ops, self.caller, user, threshold=self.threshold))


class MetricsHandler(ApiHandler):
    needs_service_access = False  # a scraper's token needs read:metrics only (checked below)

    """Prometheus text; needs a token with ``read:metrics`` unless started with ``--metrics-public``."""

    def initialize(  # type: ignore[override]  # tornado passes the route's keyword arguments
        self,
        ops: DiskOperations,
        hub_auth: Any,
        registry: CollectorRegistry,
        collector: DiskMetrics,
        public: bool,
    ) -> None:
        super().initialize(ops, hub_auth)
        self.registry, self.collector, self.public = registry, collector, public

    async def prepare(self) -> None:
        if not self.public:
            await super().prepare()
            if not access.may_read_metrics(self.caller):
                raise ServiceError(403, f"{access.who(self.caller)} lacks the read:metrics scope")

    async def get(self) -> None:
        self.collector.claims = {
            (c["metadata"]["namespace"], c["metadata"]["name"]): c for c in await self.ops.claims()
        }
        await self.ops.refresh_stats()  # on each scrape
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(generate_latest(self.registry))


def make_app(
    ops: DiskOperations,
    hub_auth: Any,
    prefix: str,
    collector: DiskMetrics,
    *,
    metrics_public: bool,
    warn_threshold: float = 0.9,
) -> web.Application:
    registry = CollectorRegistry()
    registry.register(collector)
    common = {"ops": ops, "hub_auth": hub_auth}
    api = url_path_join(prefix, "api/v1")
    claim = r"([a-z0-9][-a-z0-9.]*)"
    routes: list[Any] = [
        (url_path_join(api, "workspaces"), WorkspacesHandler, common),
        (url_path_join(api, r"workspaces/([^/]+)/([^/]+)"), WorkspaceHandler, common),
        (url_path_join(api, rf"disks/{claim}/resize"), ResizeHandler, common),
        (url_path_join(api, rf"disks/{claim}/snapshots"), SnapshotsHandler, common),
        (url_path_join(api, rf"disks/{claim}/restore"), RestoreHandler, common),
        (url_path_join(api, rf"disks/{claim}/reclaim"), ReclaimHandler, common),
        (url_path_join(api, rf"disks/{claim}/transfer"), TransferHandler, common),
        (
            url_path_join(prefix, "snapshots"),
            SnapshotPageHandler,
            common | {"prefix": prefix, "templates": environment()},
        ),
        (
            url_path_join(api, r"users/([^/]+)/disks"),
            UserDisksHandler,
            common | {"threshold": warn_threshold},
        ),
        (
            url_path_join(prefix, "metrics"),
            MetricsHandler,
            common | {"registry": registry, "collector": collector, "public": metrics_public},
        ),
    ]
    if isinstance(hub_auth, HubOAuth):
        routes.append((url_path_join(prefix, "oauth_callback"), HubOAuthCallbackHandler))
    return web.Application(routes, hub_auth=hub_auth, cookie_secret=os.urandom(32))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuworkspace-disks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", default="gpu-workspaces", help="namespace of the workspace disks")
    parser.add_argument(
        "--catalog", default="", help="the WorkspaceProfile catalog (file or directory): size limits"
    )
    parser.add_argument(
        "--snapshot-class", default=None, help="VolumeSnapshotClass (default: the cluster's default)"
    )
    parser.add_argument(
        "--max-factor",
        type=int,
        default=4,
        help="without a profile max size: at most this times the profile's size",
    )
    parser.add_argument(
        "--owner-snapshots-max",
        type=int,
        default=10,
        help="manual snapshots an owner may keep of one disk (admins: no limit)",
    )
    parser.add_argument(
        "--alert-threshold",
        type=float,
        default=float(os.environ.get("GPUWS_DISK_ALERT_THRESHOLD") or 0.9),
        help="used/capacity ratio at which gpuworkspace_disk_capacity_alert is 1",
    )
    parser.add_argument(
        "--warn-threshold",
        type=float,
        default=float(os.environ.get("GPUWS_DISK_WARN_THRESHOLD") or 0.9),
        help="used/total ratio (bytes or inodes) at which a user's home page warns that a disk is near full",
    )
    parser.add_argument(
        "--kubelet-scheme",
        choices=("https", "http"),
        default="https",
        help="how to reach kubelets' :10250/metrics: https (verified, with the service's token) or http "
        "(no token; test clusters)",
    )
    parser.add_argument("--kubelet-port", type=int, default=10250)
    parser.add_argument(
        "--kubelet-ca",
        default=None,
        help="CA file that signs the kubelets' serving certificates (default: the cluster CA); the token is "
        "sent only to kubelets it verifies",
    )
    parser.add_argument(
        "--metrics-public", action="store_true", help="serve /metrics without a read:metrics token"
    )
    parser.add_argument(
        "--timeout", type=float, default=300, help="seconds to wait for a snapshot, a resize or a bind"
    )
    parser.add_argument(
        "--snapshot-schedules",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="take the scheduled snapshots that profiles ask for (storage.home.snapshots); "
        "--no-snapshot-schedules where another instance of this service does",
    )
    parser.add_argument(
        "--snapshot-resync",
        type=float,
        default=300,
        help="seconds at most between two passes of the snapshot worker (it also wakes on disk changes)",
    )
    parser.add_argument(
        "--listen", default="", help="host:port (default: from JUPYTERHUB_SERVICE_URL, else 127.0.0.1:10101)"
    )
    add_body_limit_argument(parser)
    return parser


def _listen(args: argparse.Namespace) -> tuple[str, int]:
    return listen_address(args.listen, 10101)


async def serve(args: argparse.Namespace) -> int:
    api = await gateway.connect()
    catalog = None
    if args.catalog:
        catalog = CatalogSource(
            args.catalog, on_reload_error=lambda e: log.error("Invalid catalog change: %s", e)
        )
        catalog.current()
    timeout = args.timeout
    settings = Settings(
        namespace=args.namespace,
        service_name=os.environ.get("JUPYTERHUB_SERVICE_NAME") or "gpuworkspace-disks",
        snapshot_class=args.snapshot_class,
        max_factor=args.max_factor,
        owner_snapshots_max=args.owner_snapshots_max,
        resize_timeout_s=min(timeout, 60),
        snapshot_timeout_s=timeout,
        delete_timeout_s=timeout,
        bind_timeout_s=timeout,
    )
    ca = Path(args.kubelet_ca) if args.kubelet_ca else None
    stats = VolumeStats(KubeletAccess(args.kubelet_scheme, args.kubelet_port, ca))
    ops = DiskOperations(api, settings, catalog, stats)
    # the instance HubOAuthCallbackHandler uses too: the OAuth state (PKCE verifier, next URL) is in it
    hub_auth = HubOAuth.instance() if os.environ.get("JUPYTERHUB_CLIENT_ID") else HubAuth()
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX") or "/services/gpuworkspace-disks/"
    app = make_app(
        ops,
        hub_auth,
        prefix,
        DiskMetrics(stats, args.alert_threshold),
        metrics_public=args.metrics_public,
        warn_threshold=args.warn_threshold,
    )
    host, port = _listen(args)
    server = http_server(app, max_body_bytes=args.max_body_bytes)
    server.listen(port, host)
    log.info("gpuworkspace-disks on http://%s:%s%s (namespace %s)", host, port, prefix, args.namespace)
    worker = None
    if args.snapshot_schedules:
        worker = asyncio.ensure_future(SnapshotWorker(ops, resync_s=args.snapshot_resync).run())
    try:
        await until_stopped()
    finally:
        if worker is not None:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
        server.stop()
        await api.api_client.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return asyncio.run(serve(args))
    except CatalogError as exc:
        raise SystemExit(f"gpuworkspace-disks: invalid catalog {args.catalog}:\n{exc}") from None


if __name__ == "__main__":
    raise SystemExit(main())
