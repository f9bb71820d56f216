"""A pod's surroundings for a service process started on this machine: a Kubernetes API server (a TLS
stub that records each request and answers every list with no items), the ServiceAccount's token and
CA files, and a hub API stub. ``in_pod.py`` runs a ``python3 -m <module>`` command with the token and
CA read from a temporary directory instead of ``/var/run/secrets/kubernetes.io/serviceaccount``.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import trustme

IN_POD = Path(__file__).resolve().parent / "in_pod.py"


@dataclass
class Recorder:
    """The requests a stub server received: (method, path with query, Authorization header)."""

    requests: list[tuple[str, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, method: str, path: str, authorization: str) -> None:
        with self.lock:
            self.requests.append((method, path, authorization))

    def seen(self) -> list[tuple[str, str, str]]:
        with self.lock:
            return list(self.requests)


def _handler(recorder: Recorder, answer: Callable[[str], Any]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            recorder.add(self.command, self.path, self.headers.get("Authorization", ""))
            body = json.dumps(answer(self.path)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _list_answer(path: str) -> dict[str, Any]:
    """Every list is empty; a watch (the same answer, ended) makes the client list again."""
    return {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": []}


@contextmanager
def _serving(server: ThreadingHTTPServer) -> Iterator[int]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Cluster:
    """The fake in-cluster setup: ``environ`` is what the kubelet puts in every container."""

    environ: dict[str, str]
    service_account_dir: Path
    token: str
    api: Recorder


@contextmanager
def fake_cluster(tmp: Path) -> Iterator[Cluster]:
    """A TLS Kubernetes API stub on 127.0.0.1 and a ServiceAccount directory (token, ca.crt) for it."""
    ca = trustme.CA(organization_name="gpuworkspace in-cluster stub")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "kubernetes.default.svc").configure_cert(context)
    sa_dir = tmp / "serviceaccount"
    sa_dir.mkdir()
    token = secrets.token_urlsafe(16)
    (sa_dir / "token").write_text(token)
    ca.cert_pem.write_to_path(str(sa_dir / "ca.crt"))
    (sa_dir / "namespace").write_text("jhub")
    recorder = Recorder()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(recorder, _list_answer))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with _serving(server) as port:
        environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(port)}
        yield Cluster(environ, sa_dir, token, recorder)


# Whom any token belongs to, for a service asking the hub (HubAuth: GET /hub/api/user).
HUB_ADMIN = {
    "kind": "user",
    "name": "admin",
    "admin": True,
    "groups": [],
    "scopes": ["access:services", "admin:servers", "read:servers", "admin:users"],
}


def _hub_answer(path: str) -> Any:
    return HUB_ADMIN if urlparse(path).path.rstrip("/").endswith("/hub/api/user") else []


@contextmanager
def hub_api_stub() -> Iterator[tuple[str, Recorder]]:
    """A hub API on 127.0.0.1: every token is an admin's, every list is empty. (its origin, its requests)"""
    recorder = Recorder()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(recorder, _hub_answer))
    with _serving(server) as port:
        yield f"http://127.0.0.1:{port}", recorder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local_command(command: list[str], sa_dir: Path, mounts: Mapping[str, Path]) -> tuple[list[str], int]:
    """``python3 -m module args`` as this machine runs it: this interpreter, through in_pod.py (the token
    and CA from ``sa_dir``), a path the pod mounts (``mounts``) where this machine has it, and
    ``--listen`` on a free loopback port (the pod's port may be taken here; where a service listens is
    not what is tested). Also returns that port (0 without ``--listen``)."""
    assert command[:2] == ["python3", "-m"], command
    args = [str(mounts.get(arg, arg)) for arg in command[2:]]
    port = 0
    if "--listen" in args:
        port = free_port()
        args[args.index("--listen") + 1] = f"127.0.0.1:{port}"
    return [sys.executable, str(IN_POD), str(sa_dir), "-m", *args], port


def run_until(
    argv: list[str],
    env: Mapping[str, str],
    done: Callable[[], bool],
    log: Path,
    poke: Callable[[], None] = lambda: None,
    timeout_s: float = 60,
) -> tuple[bool, str]:
    """Start ``argv`` with exactly ``env``; True once ``done()`` (then stop it), False if it exited or
    the time ran out. ``poke`` runs between checks (a caller's request). Also returns its output."""
    with log.open("w") as out:
        proc = subprocess.Popen(argv, env=dict(env), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None:
            if done():
                return True, log.read_text()
            poke()
            time.sleep(0.2)
        return done(), log.read_text()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def image_environment() -> dict[str, str]:
    """What the hub image's own environment gives a container: PATH, and the package (installed in
    the image; here, this checkout through PYTHONPATH when the tests run that way)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def poke(url: str) -> Callable[[], None]:
    """GET ``url`` with a token (errors ignored: the service may not listen yet)."""

    def get() -> None:
        request = urllib.request.Request(url, headers={"Authorization": "token caller-token"})
        with suppress(OSError):
            urllib.request.urlopen(request, timeout=5).close()

    return get
