"""``gpuworkspace-jobs``: the platform API that hands a notebook or script from a workspace to the
cluster's queue (Kueue), and its command line. API reference: docs/reference/jobs-api.md.

Run by JupyterHub as a managed service (hub_config/jupyterhub_config.py) with the environment a
JupyterHub service gets (``JUPYTERHUB_SERVICE_PREFIX``, ``JUPYTERHUB_SERVICE_URL``, ``JUPYTERHUB_API_URL``,
``JUPYTERHUB_API_TOKEN``) and Kubernetes access from its own ServiceAccount (least privilege:
helm-values/extra-manifests/63-gpuworkspace-jobs.yaml) or ``KUBECONFIG``. Callers use their own hub
token; no Kubernetes credential is ever in a workspace.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from jupyterhub.services.auth import HubAuth
from jupyterhub.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from ...catalog import CatalogError, CatalogSource
from ...k8s import gateway
from .. import serving
from ..handling import ApiHandler, service_app
from ..serving import ServiceError, add_body_limit_argument, http_server, listen_address, until_stopped
from .operations import JobOperations, Settings

log = logging.getLogger("gpuworkspace.jobs")
MAX_BODY = 64 * 1024
NAME = r"([a-z0-9][-a-z0-9]{0,62})"


class JobsApiHandler(ApiHandler):
    ops: JobOperations
    max_body = MAX_BODY  # a submission's parameters


class JobsHandler(JobsApiHandler):
    async def get(self) -> None:
        self.reply({"items": await self.ops.jobs(self.caller)})

    async def post(self) -> None:
        self.reply(await self.ops.submit(self.caller, self.json_body()), 201)


class JobHandler(JobsApiHandler):
    async def get(self, name: str) -> None:
        self.reply(await self.ops.job(self.caller, name))

    async def delete(self, name: str) -> None:
        self.reply(await self.ops.cancel(self.caller, name))


class ProfilesHandler(JobsApiHandler):
    async def get(self) -> None:
        self.reply({"items": await self.ops.profiles(self.caller)})


class LogsHandler(JobsApiHandler):
    async def get(self, name: str) -> None:
        text = await self.ops.logs(self.caller, name)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(text)


def make_app(ops: JobOperations, hub_auth: Any, prefix: str) -> web.Application:
    common = {"ops": ops, "hub_auth": hub_auth}
    api = url_path_join(prefix, "api/v1")
    routes: list[Any] = [
        (url_path_join(api, "jobs"), JobsHandler, common),
        (url_path_join(api, rf"jobs/{NAME}"), JobHandler, common),
        (url_path_join(api, rf"jobs/{NAME}/logs"), LogsHandler, common),
        (url_path_join(api, "profiles"), ProfilesHandler, common),
    ]
    return service_app(routes, hub_auth=hub_auth, prefix=prefix)


def hub_groups(api_url: str, token: str, *, timeout_s: float) -> Any:
    """``groups_of`` for :class:`JobOperations`: a user's groups read from the hub with this service's
    token (its role's only scope: ``read:users:groups``), for caller tokens whose model lacks them."""

    async def groups_of(user: str) -> frozenset[str]:
        url = f"{api_url.rstrip('/')}/users/{quote(user, safe='')}"
        request = HTTPRequest(url, headers={"Authorization": f"token {token}"}, request_timeout=timeout_s)
        try:
            answer = await AsyncHTTPClient().fetch(request, raise_error=False)
        except OSError as exc:
            raise ServiceError(502, f"cannot reach the hub API to read {user!r}'s groups: {exc}") from None
        if answer.code != HTTPStatus.OK:
            raise ServiceError(502, f"the hub answered {answer.code} reading {user!r}'s groups")
        return frozenset(json.loads(answer.body).get("groups") or [])

    return groups_of


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuworkspace-jobs", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--namespace", default="gpu-workspaces", help="namespace of the workspaces and their jobs"
    )
    parser.add_argument(
        "--catalog", required=True, help="the catalog (file or directory) with the JobProfiles"
    )
    parser.add_argument("--snapshot-class", default=None, help="VolumeSnapshotClass (default: the cluster's)")
    parser.add_argument(
        "--identity",
        default=os.environ.get("GPUWS_JOBS_IDENTITY") or "system:serviceaccount:jhub:gpuworkspace-jobs",
        help="the Kubernetes identity that creates the Jobs, as audit records name it",
    )
    parser.add_argument(
        "--timeout", type=float, default=300, help="seconds to wait for the home disk's snapshot"
    )
    parser.add_argument(
        "--ttl-after-finished",
        type=int,
        default=7 * 24 * 3600,
        help="seconds a finished Job (and its code claim and snapshot) is kept before Kubernetes deletes it",
    )
    parser.add_argument(
        "--listen", default="", help="host:port (default: from JUPYTERHUB_SERVICE_URL, else 127.0.0.1:10105)"
    )
    add_body_limit_argument(parser)
    return parser


async def serve(args: argparse.Namespace) -> int:
    api = await gateway.connect()
    catalog = CatalogSource(
        args.catalog, on_reload_error=lambda e: log.error("Invalid catalog change: %s", e)
    )
    catalog.current()
    settings = Settings(
        namespace=args.namespace,
        service_name=os.environ.get("JUPYTERHUB_SERVICE_NAME") or "gpuworkspace-jobs",
        identity=args.identity,
        snapshot_class=args.snapshot_class,
        snapshot_timeout_s=args.timeout,
        ttl_after_finished_s=args.ttl_after_finished,
    )
    hub_auth = HubAuth()
    groups_of = hub_groups(hub_auth.api_url, hub_auth.api_token or "", timeout_s=settings.request_timeout_s)
    ops = JobOperations(api, settings, catalog, groups_of)
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX") or "/services/gpuworkspace-jobs/"
    host, port = listen_address(args.listen, 10105)
    server = http_server(make_app(ops, hub_auth, prefix), max_body_bytes=args.max_body_bytes)
    server.listen(port, host)
    log.info("gpuworkspace-jobs on http://%s:%s%s (namespace %s)", host, port, prefix, args.namespace)
    try:
        await until_stopped()
    finally:
        server.stop()
        await api.api_client.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    invalid = f"gpuworkspace-jobs: invalid catalog {args.catalog}"
    return serving.run_service(serve(args), refusals=(CatalogError,), refused=invalid)


if __name__ == "__main__":
    raise SystemExit(main())
