"""A one-process stand-in for ``jupyterhub-singleuser`` (image ``gpuworkspace.dev/lite-singleuser``).

Run as ``python -m gpuworkspace_devcluster.sim.lite_server [--ip=IP] [--port=N] [--base-url=/p/]``.
Standard library only, so a thousand of them start fast and stay small. It answers what JupyterHub and
its services ask a single-user server: ``{prefix}api`` (with ``X-JupyterHub-Version``, which the Hub's
readiness check reads), ``{prefix}api/status``, empty ``api/kernels``/``api/sessions``/``api/terminals``
and a small page at ``{prefix}``. No authentication, no kernels, no activity reports to the Hub.
Bind address and prefix come from the flags, else ``JUPYTERHUB_SERVICE_URL``/``JUPYTERHUB_SERVICE_PREFIX``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

SERVER_VERSION = "2.14.2"  # the jupyter_server version it claims
HUB_VERSION = os.environ.get("JUPYTERHUB_VERSION", "5.2.1")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_args(argv: list[str], env: dict[str, str]) -> tuple[str, int, str]:
    """(ip, port, base_url) from ``--ip``/``--port``/``--base-url`` (and ``--ServerApp.*``), else the env."""
    url = urlsplit(env.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:8888/"))
    ip, port = url.hostname or "0.0.0.0", url.port or 8888
    prefix = env.get("JUPYTERHUB_SERVICE_PREFIX") or url.path or "/"
    for arg in argv:
        flag, _, value = arg.partition("=")
        flag = flag.replace("--ServerApp.", "--").replace("--NotebookApp.", "--").replace("_", "-")
        if flag == "--ip":
            ip = value
        elif flag == "--port":
            port = int(value)
        elif flag == "--base-url":
            prefix = value
    return ip, port, "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"


class _Handler(BaseHTTPRequestHandler):
    server_version = "TornadoServer/6.4"
    prefix = "/"
    started = _now()

    def _send(self, code: int, body: object, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-JupyterHub-Version", HUB_VERSION)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if not path.startswith(self.prefix) and path + "/" != self.prefix:
            self._send(404, {"message": "Not Found", "reason": None})
            return
        rest = path[len(self.prefix) :].strip("/")
        if rest == "api":
            self._send(200, {"version": SERVER_VERSION})
        elif rest == "api/status":
            last = _now()
            self._send(200, {"started": self.started, "last_activity": last, "kernels": 0, "connections": 0})
        elif rest in ("api/kernels", "api/sessions", "api/terminals"):
            self._send(200, [])
        elif rest in ("", "lab", "tree"):
            self._send(200, b"<html><body>lite single-user server</body></html>", "text/html")
        else:
            self._send(404, {"message": "Not Found", "reason": None})

    do_HEAD = do_GET

    def log_message(self, format: str, *args: object) -> None:
        stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        sys.stderr.write(f"[I {stamp} LiteServer] {format % args}\n")


def main(argv: list[str] | None = None) -> None:
    ip, port, prefix = parse_args(list(sys.argv[1:] if argv is None else argv), dict(os.environ))
    _Handler.prefix = prefix
    httpd = ThreadingHTTPServer((ip, port), _Handler)
    httpd.daemon_threads = True

    def stop(signum: int, frame: object) -> None:
        sys.stderr.write(
            f"[C {time.strftime('%Y-%m-%d %H:%M:%S')} LiteServer] received signal {signum}, stopping\n"
        )
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    sys.stderr.write(
        f"[I {time.strftime('%Y-%m-%d %H:%M:%S')} LiteServer] serving at http://{ip}:{port}{prefix}\n"
    )
    sys.stderr.flush()
    httpd.serve_forever(poll_interval=0.5)
    httpd.server_close()


if __name__ == "__main__":
    main()
