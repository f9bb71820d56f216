"""``gpuworkspace-disks``: the disk admin service's HTTP API (tornado) and its command line.

Run by JupyterHub as a managed service (hub_config/jupyterhub_config.py) or anywhere with the
environment a JupyterHub service gets: ``JUPYTERHUB_SERVICE_PREFIX`` (routes), ``JUPYTERHUB_SERVICE_URL``
(where to listen), ``JUPYTERHUB_API_URL`` and ``JUPYTERHUB_API_TOKEN`` (token checks), and Kubernetes
access from the in-cluster ServiceAccount or ``KUBECONFIG``. API reference: docs/reference/disk-api.md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jupyterhub.services.auth import HubAuth, HubOAuth
from jupyterhub.utils import url_path_join
from prometheus_client import CollectorRegistry
from tornado import web

from ...catalog import CatalogError, CatalogSource
from ...k8s import gateway
from ...manifests.names import WorkspaceIdentity
from .. import access
from ..handling import ApiHandler, service_app
from ..kubelets import KubeletAccess
from ..serving import (
    ServiceError,
    add_body_limit_argument,
    http_server,
    listen_address,
    metrics_registry,
    metrics_text,
    run_service,
    until_stopped,
)
from . import transfer
from .metrics import DiskMetrics, VolumeStats
from .mine import own_disks
from .operations import DiskOperations, Settings
from .page import SnapshotPageHandler, environment
from .scheduling import SnapshotWorker

log = logging.getLogger("gpuworkspace.disks")
DEFAULT_SERVER_PATH = ("~", "default")  # path segments meaning JupyterHub's unnamed server ("")


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

    browser_login = True

    def initialize(self, ops: DiskOperations, hub_auth: Any, threshold: float) -> None:  # type: ignore[override]
        super().initialize(ops, hub_auth)
        self.threshold = threshold

    async def get(self, user: str) -> None:
        self.reply(await own_disks(self.ops, self.caller, user, threshold=self.threshold))


class MetricsHandler(ApiHandler):
    """Prometheus text; needs a token with ``read:metrics`` unless started with ``--metrics-public``."""

    scrape = True

    def initialize(  # type: ignore[override]  # tornado passes the route's keyword arguments
        self,
        ops: DiskOperations,
        hub_auth: Any,
        registry: CollectorRegistry,
        collector: DiskMetrics,
        public: bool,
    ) -> None:
        super().initialize(ops, hub_auth)
        self.registry, self.collector, self.metrics_public = registry, collector, public

    async def get(self) -> None:
        self.collector.claims = {
            (c["metadata"]["namespace"], c["metadata"]["name"]): c for c in await self.ops.claims()
        }
        await self.ops.refresh_stats()  # on each scrape
        self.send_metrics(metrics_text(self.registry))


def make_app(
    ops: DiskOperations,
    hub_auth: Any,
    prefix: str,
    collector: DiskMetrics,
    *,
    metrics_public: bool,
    warn_threshold: float = 0.9,
) -> web.Application:
    registry = metrics_registry(collector)
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
    return service_app(routes, hub_auth=hub_auth, prefix=prefix)


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
    invalid = f"gpuworkspace-disks: invalid catalog {args.catalog}"
    return run_service(serve(args), refusals=(CatalogError,), refused=invalid)


if __name__ == "__main__":
    raise SystemExit(main())
