"""What every HTTP hub service here does the same way: JSON errors, where to listen, running until a signal."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any
from urllib.parse import urlparse

from tornado import web


def hub_prefix(hub_auth: Any) -> str:
    """The hub's URL prefix (``/hub/``) as the service's HubAuth knows it, with a trailing slash."""
    prefix = getattr(hub_auth, "hub_prefix", "") or "/hub/"
    return prefix if prefix.endswith("/") else prefix + "/"


class ServiceError(Exception):
    """A refusal the caller should read: answered as ``{"status": status, "message": message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class JsonErrors(web.RequestHandler):
    """Errors as JSON ``{"status", "message"}`` like JupyterHub's own API; :class:`ServiceError` as given."""

    def error_message(self, exc: BaseException | None) -> str:
        """The message for ``exc``; handlers with errors of their own extend it."""
        if isinstance(exc, ServiceError):
            return exc.message
        if isinstance(exc, web.HTTPError) and exc.log_message:
            return exc.log_message % exc.args if exc.args else exc.log_message
        return self._reason

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = (kwargs.get("exc_info") or (None, None, None))[1]
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": status_code, "message": self.error_message(exc)}))

    def _handle_request_exception(self, e: BaseException) -> None:
        if isinstance(e, ServiceError):
            self.send_error(e.status, exc_info=(type(e), e, e.__traceback__))
            return
        super()._handle_request_exception(e)


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
