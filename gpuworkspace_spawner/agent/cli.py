"""``gpuworkspace-agent``: serve the node's per-pod GPU process metrics on ``/metrics``.

    gpuworkspace-agent --listen 0.0.0.0:9500 --node-name "$NODE_NAME" --proc-root /proc

``--nvml-module`` names the pynvml-compatible module to load (default ``pynvml``, from the
``nvidia-ml-py`` package: ``pip install gpuworkspace-spawner[agent]``). SIGTERM and SIGINT stop it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import socket
from collections.abc import Sequence
from types import ModuleType

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from tornado import httpserver, web

from .collector import AgentCollector
from .nvml import NvmlReader

log = logging.getLogger("gpuworkspace_spawner.agent")
DEFAULT_PORT = 9500


def parse_listen(value: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``:port`` (all addresses)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 2**16:
        raise argparse.ArgumentTypeError(f"not host:port: {value!r}")
    return host.strip("[]"), int(port)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuworkspace-agent", description=__doc__.split("\n")[0])
    p.add_argument("--listen", type=parse_listen, default=("0.0.0.0", DEFAULT_PORT), help="host:port")
    p.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME") or socket.gethostname(),
        help="the node label of every series (default: $NODE_NAME, else the host name)",
    )
    p.add_argument("--proc-root", default="/proc", help="where /proc/<pid>/cgroup is read (hostPID: /proc)")
    p.add_argument("--nvml-module", default="pynvml", help="pynvml-compatible module (default: pynvml)")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    return p


def load_nvml(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        hint = " (pip install 'gpuworkspace-spawner[agent]')" if name == "pynvml" else ""
        raise SystemExit(f"gpuworkspace-agent: cannot import {name}: {exc}{hint}") from exc


class MetricsHandler(web.RequestHandler):
    def initialize(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    async def get(self) -> None:
        encoder, content_type = choose_encoder(self.request.headers.get("Accept", ""))
        # NVML calls block (and a fake NVML does HTTP): off the event loop
        body = await asyncio.get_running_loop().run_in_executor(None, encoder, self.registry)
        self.set_header("Content-Type", content_type)
        self.finish(body)


class RootHandler(web.RequestHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish("gpuworkspace-agent: per-pod GPU process metrics on /metrics\n")


def make_app(reader: NvmlReader, node: str) -> web.Application:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(AgentCollector(reader, node))
    return web.Application([(r"/metrics", MetricsHandler, {"registry": registry}), (r"/", RootHandler)])


async def serve(args: argparse.Namespace) -> None:
    reader = NvmlReader(load_nvml(args.nvml_module), args.proc_root)
    first = await asyncio.to_thread(reader.read)
    if first.up:
        log.info("NVML: %d devices: %s", len(first.devices), ", ".join(d.device.gpu for d in first.devices))
    else:
        log.warning("NVML is not answering (retried at every scrape): %s", first.error)
    server = httpserver.HTTPServer(make_app(reader, args.node_name), xheaders=False)
    host, port = args.listen
    server.listen(port, address=host or None)
    log.info("gpuworkspace-agent for node %s on %s:%d/metrics", args.node_name, host or "*", port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping")
    server.stop()
    await server.close_all_connections()
    await asyncio.to_thread(reader.close)


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(args))
