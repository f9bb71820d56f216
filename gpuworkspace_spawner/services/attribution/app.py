"""``gpuworkspace-attribution``: who uses which GPU, CPU and memory; HTTP API, dashboard and command line.

Run by JupyterHub as a managed service (hub_config/jupyterhub_config.py) or anywhere with the
environment a JupyterHub service gets (``JUPYTERHUB_SERVICE_PREFIX``, ``JUPYTERHUB_SERVICE_URL``,
``JUPYTERHUB_API_URL``, ``JUPYTERHUB_API_TOKEN``) and Kubernetes access from the in-cluster
ServiceAccount or ``KUBECONFIG``. Routes under the service prefix: the dashboard (``""``), ``api/v1/nodes``,
``api/v1/workspaces[?user=]``, ``api/v1/workspaces/<user>/<server>``, ``api/v1/top``, ``api/v1/groups``,
``api/v1/trends``, ``api/v1/availability``, ``api/v1/status`` and ``metrics``.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jupyterhub.services.auth import HubAuth, HubOAuth
from jupyterhub.utils import url_path_join
from tornado import web

from ...k8s.observing import load_config
from ..handling import service_app
from ..serving import (
    add_body_limit_argument,
    http_server,
    hub_prefix,
    listen_address,
    run_service,
    until_stopped,
)
from .collector import Collector, hub_groups_from_env
from .handlers import (
    SERVICE,
    AvailabilityHandler,
    DashboardHandler,
    GroupsHandler,
    JobsHandler,
    MetricsHandler,
    NodesHandler,
    State,
    StatusHandler,
    TopHandler,
    TrendsHandler,
    WorkspaceHandler,
    WorkspaceHistoryHandler,
    WorkspacesHandler,
)
from .history import History
from .sources import KubernetesSource, Settings

log = logging.getLogger("gpuworkspace.attribution")
DEFAULT_PORT = 10102
SWITCH_INTERVAL_S = 0.001
M_ARENA_MAX = -8  # glibc's mallopt parameters
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 256 * 1024


def make_app(state: State) -> web.Application:
    prefix = state.prefix
    api = url_path_join(prefix, "api/v1")
    common = {"state": state}
    routes: list[Any] = [
        (prefix, DashboardHandler, common),
        (url_path_join(api, "nodes"), NodesHandler, common),
        (url_path_join(api, "availability"), AvailabilityHandler, common),
        (url_path_join(api, "workspaces"), WorkspacesHandler, common),
        (url_path_join(api, "jobs"), JobsHandler, common),
        (url_path_join(api, r"workspaces/([^/]+)/([^/]+)"), WorkspaceHandler, common),
        (url_path_join(api, r"workspaces/([^/]+)/([^/]+)/history"), WorkspaceHistoryHandler, common),
        (url_path_join(api, "top"), TopHandler, common),
        (url_path_join(api, "groups"), GroupsHandler, common),
        (url_path_join(api, "trends"), TrendsHandler, common),
        (url_path_join(api, "status"), StatusHandler, common),
        (url_path_join(prefix, "metrics"), MetricsHandler, common),
    ]
    return service_app(routes, hub_auth=state.hub_auth, prefix=prefix)


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


def _positive_int(text: str) -> int:
    if not (text.isascii() and text.isdigit() and 0 < len(text) <= 4 and int(text) > 0):  # noqa: PLR2004
        raise argparse.ArgumentTypeError(f"a whole number from 1 to 9999, not {text[:20]!r}")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = argparse.ArgumentParser(prog=SERVICE, description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--interval",
        type=float,
        default=_env_float("GPUWS_ATTRIBUTION_INTERVAL", 15.0),
        help="seconds between collection cycles (env GPUWS_ATTRIBUTION_INTERVAL)",
    )
    p.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="a namespace of workspace pods (repeatable; default: all namespaces)",
    )
    p.add_argument(
        "--dcgm-service",
        default=env("GPUWS_ATTRIBUTION_DCGM_SERVICE") or "gpu-operator/nvidia-dcgm-exporter",
        help="namespace/name of dcgm-exporter's Service (its EndpointSlices list the exporters)",
    )
    p.add_argument("--dcgm-port-name", default="gpu-metrics", help="the Service port to scrape")
    p.add_argument(
        "--agent-service",
        default=env("GPUWS_ATTRIBUTION_AGENT_SERVICE") or "gpuworkspace-system/gpuworkspace-agent",
        help="namespace/name of the node agent's Service; 'none' to not look for agents",
    )
    p.add_argument("--agent-port-name", default="metrics")
    p.add_argument(
        "--kubelet-scheme",
        choices=("https", "http"),
        default=env("GPUWS_ATTRIBUTION_KUBELET_SCHEME") or "https",
        help="how to reach kubelets' :10250/metrics/resource: https (verified, with the service's token) "
        "or http (no token; test clusters)",
    )
    p.add_argument("--kubelet-port", type=int, default=10250)
    p.add_argument(
        "--kubelet-ca",
        default=env("GPUWS_ATTRIBUTION_KUBELET_CA") or None,
        help="CA file that signs the kubelets' serving certificates (default: the cluster CA); the token is "
        "sent only to kubelets it verifies",
    )
    p.add_argument(
        "--prometheus-url",
        default=env("GPUWS_ATTRIBUTION_PROMETHEUS_URL") or "",
        help="read GPU, agent and CPU/memory figures from this Prometheus instead of scraping",
    )
    p.add_argument(
        "--prometheus-token-file", default="", help="a file holding a bearer token for the Prometheus API"
    )
    p.add_argument("--scrape-timeout", type=float, default=5.0, help="seconds per scrape or query")
    p.add_argument(
        "--scrape-concurrency",
        type=_positive_int,
        default=8,
        help="scrapes in flight at once (more: a cycle's answers arrive together and API requests wait "
        "for the event loop meanwhile; fewer: longer cycles when nodes are slow to answer)",
    )
    p.add_argument(
        "--idle-threshold",
        type=float,
        default=_env_float("GPUWS_ATTRIBUTION_IDLE_PERCENT", 5.0),
        help="GPU utilisation (percent) under which an allocated GPU counts as idle",
    )
    p.add_argument(
        "--history-step", type=float, default=60.0, help="seconds between points of the embedded trends"
    )
    p.add_argument("--history-points", type=int, default=1440, help="points kept per trend series")
    p.add_argument("--groups-refresh", type=float, default=60.0, help="seconds between hub group reads")
    p.add_argument(
        "--hide-owners",
        action="store_true",
        help="show GPU owners in the node grid to admins only (default: to every logged-in user)",
    )
    p.add_argument(
        "--metrics-public", action="store_true", help="serve /metrics without a read:metrics token"
    )
    p.add_argument(
        "--listen",
        default="",
        help=f"host:port (default: from JUPYTERHUB_SERVICE_URL, else 127.0.0.1:{DEFAULT_PORT})",
    )
    add_body_limit_argument(p)
    return p


def _pair(text: str, what: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name:
        raise SystemExit(f"{SERVICE}: {what} must be namespace/name, not {text!r}")
    return namespace, name


def settings_from(args: argparse.Namespace) -> Settings:
    token = ""
    if args.prometheus_token_file:
        with open(args.prometheus_token_file) as f:
            token = f.read().strip()
    return Settings(
        namespaces=tuple(args.namespace),
        dcgm_service=_pair(args.dcgm_service, "--dcgm-service"),
        dcgm_port_name=args.dcgm_port_name,
        agent_service=None if args.agent_service == "none" else _pair(args.agent_service, "--agent-service"),
        agent_port_name=args.agent_port_name,
        kubelet_scheme=args.kubelet_scheme,
        kubelet_port=args.kubelet_port,
        kubelet_ca=Path(args.kubelet_ca) if args.kubelet_ca else None,
        timeout_s=args.scrape_timeout,
        scrape_concurrency=args.scrape_concurrency,
        prometheus_url=args.prometheus_url,
        prometheus_token=token,
    )


def _tune_malloc() -> None:
    """Two glibc settings that keep freed memory from staying in the process (no-ops without glibc):

    - one arena: a second one, for the collector's thread, kept ~30 MiB of freed snapshot memory;
    - a fixed mmap threshold: glibc raises it to 32 MiB after the first large block is freed, after
      which the API's megabyte bodies and the snapshots' buffers came from the heap and stayed there
      (~30 MiB after a burst of requests); at 256 KiB they are mapped and unmapped again.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_ARENA_MAX, 1)
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    except (OSError, AttributeError):
        log.debug("not glibc: malloc arenas left as they are")


def _listen(args: argparse.Namespace) -> tuple[str, int]:
    return listen_address(args.listen, DEFAULT_PORT)


async def serve(args: argparse.Namespace) -> int:
    await load_config()
    settings = settings_from(args)
    source = KubernetesSource(settings)
    await source.start()
    collector = Collector(
        source,
        interval_s=args.interval,
        idle_util_percent=args.idle_threshold,
        history=History(capacity=args.history_points, step_s=args.history_step),
        groups=hub_groups_from_env(args.groups_refresh),
    )
    # the instance HubOAuthCallbackHandler uses too: the OAuth state (PKCE verifier, next URL) is in it
    hub_auth = HubOAuth.instance() if os.environ.get("JUPYTERHUB_CLIENT_ID") else HubAuth()
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX") or f"/services/{SERVICE}/"
    state = State(
        collector,
        hub_auth,
        prefix=prefix,
        service=os.environ.get("JUPYTERHUB_SERVICE_NAME") or SERVICE,
        hub_prefix=hub_prefix(hub_auth),
        show_owners_to_all=not args.hide_owners,
        metrics_public=args.metrics_public,
        prometheus=source.prometheus,
    )
    host, port = _listen(args)
    server = http_server(make_app(state), max_body_bytes=args.max_body_bytes)
    server.listen(port, host)
    # the collector's pure work runs on a thread: hand the GIL back to the API's loop every 1 ms, not 5
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    _tune_malloc()
    collector.start()
    mode = f"Prometheus {settings.prometheus_url}" if settings.prometheus_url else "direct scrapes"
    log.info("%s on http://%s:%s%s (%s, every %ss)", SERVICE, host, port, prefix, mode, args.interval)
    try:
        await until_stopped()
    finally:
        server.stop()
        await collector.stop()
        await source.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return run_service(serve(args))


if __name__ == "__main__":
    raise SystemExit(main())
