"""A stand-in for code-server: answers HTTP on the port (or Unix socket) code-server would, nothing more.

code-server cannot be installed on the machines that run the devcluster, so an image or golden VM image
that declares the ``code-server`` editor runs this instead (``standin-bin/code-server`` on its ``PATH``).
It accepts the command lines jupyter-vscode-proxy and the VM image contract use (``--bind-addr
HOST:PORT``, ``--port N`` / ``--port=N``, ``--socket PATH``; ``--auth``, ``--socket-mode`` and other flags
are accepted and ignored) and
answers every GET/HEAD with a page naming itself (``MARKER``), the path asked for and the folder, so a
test can tell the editor's answer from the hub's login page. It checks nothing: like code-server run
with ``--auth none``, it relies on whatever fronts it (the single-user server's hub authentication).
"""

from __future__ import annotations

import argparse
import html
import os
import socket
import socketserver
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MARKER = "code-server (devcluster stand-in)"
DEFAULT_BIND = "127.0.0.1:8080"  # code-server's own default


def page(path: str, folder: str) -> bytes:
    return (
        f"<!doctype html><html><head><title>{MARKER}</title></head><body>"
        f"<h1>{MARKER}</h1><p>path: {html.escape(path)}</p><p>folder: {html.escape(folder)}</p>"
        "</body></html>"
    ).encode()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="code-server", add_help=False, allow_abbrev=False)
    parser.add_argument("--bind-addr", default=None)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--socket", default=None)
    for valued in ("--auth", "--socket-mode", "--extensions-dir", "--user-data-dir", "--telemetry-level"):
        parser.add_argument(valued)  # code-server's flags that take a value: not the folder
    parser.add_argument("folder", nargs="?", default=".")
    args, _ignored = parser.parse_known_args(argv)
    return args


def _handler(folder: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "code-server-standin/1"

        def _answer(self, body: bool) -> None:
            data = page(self.path, folder)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer(True)

        def do_HEAD(self) -> None:
            self._answer(False)

        def log_message(self, format: str, *args: object) -> None:
            sys.stderr.write("code-server stand-in: " + (format % args) + "\n")

    return Handler


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        request, _ = super().get_request()
        return request, ("unix", 0)  # BaseHTTPRequestHandler logs client_address[0]


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    folder = os.path.abspath(args.folder)
    handler = _handler(folder)
    if args.socket:
        if os.path.exists(args.socket):
            os.unlink(args.socket)
        server: socketserver.BaseServer = _UnixServer(args.socket, handler)
        where = args.socket
    else:
        host, _, port = (args.bind_addr or DEFAULT_BIND).rpartition(":")
        bind = (host or "127.0.0.1", args.port if args.port is not None else int(port))
        server = ThreadingHTTPServer(bind, handler)
        where = f"http://{bind[0]}:{bind[1]}/"
    print(f"code-server stand-in: serving {folder} on {where}", flush=True)
    server.serve_forever()  # until SIGTERM, as jupyter-server-proxy stops it
    return 0


if __name__ == "__main__":
    sys.exit(main())
