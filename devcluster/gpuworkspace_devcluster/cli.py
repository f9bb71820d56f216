"""``gpuworkspace-devcluster up --state-dir DIR [--port N]``: run the devcluster in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

from .addresses import INSTANCE_ENV, MAX_INSTANCES, check_instance, instance_from_env
from .cluster import DevCluster

log = logging.getLogger("gpuworkspace_devcluster")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuworkspace-devcluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="serve the Kubernetes API until SIGINT/SIGTERM")
    up.add_argument(
        "--state-dir",
        required=True,
        type=Path,
        help="where objects persist (like etcd) and DIR/kubeconfig is written",
    )
    up.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    up.add_argument("--port", type=int, default=0, help="port to listen on (default: a free port)")
    up.add_argument("--auth", action="store_true", help="require bearer tokens from the written kubeconfigs")
    up.add_argument("--no-tls", action="store_true", help="serve plain HTTP (kubectl then sends no tokens)")
    up.add_argument(
        "--no-sim", action="store_true", help="serve the API only: no nodes, scheduler or kubelets"
    )
    up.add_argument("--topology", default=None, help="topology YAML (default: the built-in GPU cluster)")
    up.add_argument("--rbac", action="store_true", help="authorize requests with the stored RBAC objects")
    up.add_argument(
        "--instance",
        type=int,
        default=None,
        help=f"which loopback ranges pods, nodes and ClusterIPs use, 0 to {MAX_INSTANCES - 1}: devclusters "
        f"with different instances run side by side (default: ${INSTANCE_ENV}, else 0)",
    )
    up.add_argument("--seed", type=int, default=0, help="seed for fault injection (default: %(default)s)")
    up.add_argument("--log-level", default="INFO", help="logging level (default: %(default)s)")
    return parser


async def _serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with DevCluster(
        args.state_dir,
        host=args.host,
        port=args.port,
        auth=args.auth,
        rbac_enabled=args.rbac,
        seed=args.seed,
        tls=not args.no_tls,
        simulate=not args.no_sim,
        topology=args.topology,
        instance=args.instance,
    ) as cluster:
        print(f"devcluster: API at {cluster.url}; KUBECONFIG={cluster.kubeconfig}", flush=True)
        await stop.wait()
        log.info("devcluster: stopping")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        args.instance = (
            instance_from_env() if args.instance is None else check_instance(args.instance, "--instance")
        )
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
