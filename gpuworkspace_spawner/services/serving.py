"""What every HTTP hub service here does the same way: JSON errors, where to listen, a bound on request
bodies, its log lines, running until a signal, and its ``/metrics`` (a registry of its own collectors,
rendered in the Prometheus text format)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from tornado import gen, httputil, web
from tornado.http1connection import HTTP1Connection
from tornado.httpserver import HTTPServer
from tornado.httputil import url_concat
from tornado.ioloop import IOLoop
from tornado.iostream import IOStream, StreamClosedError

if TYPE_CHECKING:
    from jupyterhub.services.auth import HubOAuth

DEFAULT_MAX_BODY_BYTES = 1 << 20  # the services' JSON bodies are a few hundred bytes
_HEADER_ROOM = 64 << 10  # read buffer room for the request line and headers, above the body limit
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST  # of what metrics_text renders
LINGER_S = 5.0  # after a 413: how long what the client still sends is read and dropped before closing


def login_url(handler: web.RequestHandler, hub_auth: HubOAuth) -> str:
    """The hub's OAuth authorize URL for this request, with the state cookie (and PKCE where the
    installed JupyterHub does it) set on ``handler``."""
    params: dict[str, str] = {}
    verifier = None
    if getattr(hub_auth, "pkce_enabled", False):
        verifier, challenge, method = hub_auth.generate_pkce_code_challenge()
        params |= {"code_challenge": challenge, "code_challenge_method": method}
    state = hub_auth.set_state_cookie(handler, next_url=handler.request.uri, code_verifier=verifier)
    return str(url_concat(hub_auth.login_url, {**params, "state": state}))


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


def shown(value: str, limit: int = 60) -> str:
    """A query value quoted for an error message, cut to ``limit`` characters (a 4 KB value is not echoed)."""
    return repr(value if len(value) <= limit else value[:limit] + "...")


def listen_address(listen: str | None, default_port: int) -> tuple[str, int]:
    """``--listen HOST:PORT`` if given, else the host and port of ``JUPYTERHUB_SERVICE_URL``."""
    if listen:
        host, _, port = listen.rpartition(":")
        return host or "127.0.0.1", int(port)
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL") or f"http://127.0.0.1:{default_port}")
    return url.hostname or "127.0.0.1", url.port or default_port


def log_as_a_service() -> None:
    """Every service's log lines: time, logger, level and message, from INFO up."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)


def run_service(
    serve: Coroutine[Any, Any, int], *, refusals: tuple[type[Exception], ...] = (), refused: str = ""
) -> int:
    """A service's ``main``: log as every service does and run ``serve`` to its exit status. An exception
    in ``refusals`` (an invalid catalog) ends the process with ``refused`` and its message, no traceback;
    a SIGINT (JupyterHub stops its managed services so) is a clean exit."""
    log_as_a_service()
    try:
        return asyncio.run(serve)
    except refusals as exc:
        raise SystemExit(f"{refused}:\n{exc}") from None
    except KeyboardInterrupt:
        return 0


async def until_stopped() -> None:
    """Return at the first SIGTERM or SIGINT (JupyterHub stops managed services with SIGTERM)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


class _BodyLimit(httputil.HTTPServerConnectionDelegate):
    """Refuses a request whose ``Content-Length`` is over ``limit`` with 413 before reading its body,
    then closes the connection (the only way not to read it; :func:`_linger`). A chunked body over
    the limit is cut by tornado's own ``max_body_size`` (400, connection closed)."""

    def __init__(self, app: web.Application, limit: int) -> None:
        self.app, self.limit = app, limit

    def start_request(
        self, server_conn: object, request_conn: httputil.HTTPConnection
    ) -> httputil.HTTPMessageDelegate:
        return _LimitedRequest(self.app.start_request(server_conn, request_conn), request_conn, self.limit)

    def on_close(self, server_conn: object) -> None:
        self.app.on_close(server_conn)


class _LimitedRequest(httputil.HTTPMessageDelegate):
    def __init__(
        self, inner: httputil.HTTPMessageDelegate, conn: httputil.HTTPConnection, limit: int
    ) -> None:
        self.inner, self.conn, self.limit = inner, conn, limit
        self.refused = False

    def headers_received(
        self,
        start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
        headers: httputil.HTTPHeaders,
    ) -> Awaitable[None] | None:
        length = headers.get("Content-Length", "")
        if not (length.isdigit() and int(length) > self.limit):
            return self.inner.headers_received(start_line, headers)
        self.refused = True
        return self._refuse(int(length))

    async def _refuse(self, length: int) -> None:
        message = f"the request body ({length} bytes) is over the limit of {self.limit} bytes"
        body = json.dumps({"status": 413, "message": message}).encode()
        headers = httputil.HTTPHeaders(
            {"Content-Type": "application/json", "Content-Length": str(len(body)), "Connection": "close"}
        )
        start = httputil.ResponseStartLine("HTTP/1.1", 413, "Content Too Large")
        await self.conn.write_headers(start, headers, body)
        if isinstance(self.conn, HTTP1Connection):
            await _linger(self.conn.detach(), self.limit)  # no more HTTP on it: the body is never parsed
        else:
            self.conn.finish()

    def data_received(self, chunk: bytes) -> Awaitable[None] | None:
        return None if self.refused else self.inner.data_received(chunk)

    def finish(self) -> None:
        if not self.refused:
            self.inner.finish()

    def on_connection_close(self) -> None:
        if not self.refused:
            self.inner.on_connection_close()


async def _linger(stream: IOStream, max_bytes: int) -> None:
    """Close as web servers do after refusing an unread body (nginx's lingering close): stop sending,
    read and drop what the client still sends for up to :data:`LINGER_S` (at most ``max_bytes``),
    then close. Closing at once with unread data makes the kernel reset the connection, and the
    client may lose the answer before reading it."""
    try:
        stream.socket.shutdown(socket.SHUT_WR)
        deadline = IOLoop.current().time() + LINGER_S
        dropped = 0
        while dropped <= max_bytes:
            dropped += len(await gen.with_timeout(deadline, stream.read_bytes(64 << 10, partial=True)))
    except (StreamClosedError, TimeoutError, OSError):
        pass  # the client closed, or took too long
    finally:
        stream.close()


def add_body_limit_argument(parser: argparse.ArgumentParser) -> None:
    """``--max-body-bytes`` (default ``$GPUWS_MAX_BODY_BYTES`` or 1 MiB)."""
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=int(os.environ.get("GPUWS_MAX_BODY_BYTES") or DEFAULT_MAX_BODY_BYTES),
        help="refuse request bodies larger than this with 413, unread (default 1 MiB)",
    )


def http_server(app: web.Application, *, max_body_bytes: int) -> HTTPServer:
    """The server for a service's ``app`` behind the hub's proxy (``X-Forwarded-*`` trusted): request
    bodies over ``max_body_bytes`` are refused (413, unread) and no more than that is buffered.
    Call ``listen(port, host)`` on it."""
    return HTTPServer(
        _BodyLimit(app, max_body_bytes),
        xheaders=True,
        max_body_size=max_body_bytes,
        max_buffer_size=max_body_bytes + _HEADER_ROOM,
    )


def metrics_registry(*collectors: Collector) -> CollectorRegistry:
    """A registry of the service's own collectors only (no process or platform defaults), as every
    service's ``/metrics`` serves."""
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    return registry


def metrics_text(registry: CollectorRegistry) -> bytes:
    """The Prometheus text format of ``registry`` (served with :data:`METRICS_CONTENT_TYPE`)."""
    return generate_latest(registry)


def finish_metrics(handler: web.RequestHandler, text: bytes) -> None:
    """Answer ``handler``'s request with ``text``, a :func:`metrics_text`."""
    handler.set_header("Content-Type", METRICS_CONTENT_TYPE)
    handler.finish(text)


class MetricsOnly(web.RequestHandler):
    """``GET /metrics`` with no authentication, for a service that listens on a private address only
    (the reclaimer's ``--metrics-listen``); the hub services serve theirs through ``ServiceHandler``."""

    def initialize(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def get(self) -> None:
        finish_metrics(self, metrics_text(self.registry))


def metrics_app(registry: CollectorRegistry) -> web.Application:
    """``GET /metrics`` (the Prometheus text format) and nothing else."""
    return web.Application([(r"/metrics", MetricsOnly, {"registry": registry})])
