"""What every HTTP hub service here does the same way: where to listen, and running until a signal."""

from __future__ import annotations

import asyncio
import os
import signal
from urllib.parse import urlparse


def listen_address(listen: str | None, default_port: int) -> tuple[str, int]:
    """``--listen HOST:PORT`` if given, else the host and port of ``JUPYTERHUB_SERVICE_URL``."""
    if listen:
        host, _, port = listen.rpartition(":")
        return host or "127.0.0.1", int(port)
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL") or f"http://127.0.0.1:{default_port}")
    return url.hostname or "127.0.0.1", url.port or default_port


async def until_stopped() -> None:
    """Return at the first SIGTERM or SIGINT (JupyterHub stops managed services with SIGTERM)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
