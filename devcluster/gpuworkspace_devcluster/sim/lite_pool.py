"""Lite single-user pods served by one shared host process (image ``gpuworkspace.dev/lite-singleuser``).

A thousand ``sim.lite_server`` processes cost a thousand Python interpreters; this module lets one
process (per kubelet) listen on every lite pod's ``IP:port`` instead. Two halves:

- the **pool process**, ``python -m gpuworkspace_devcluster.sim.lite_pool``: asyncio, standard
  library only. It reads commands as JSON lines on stdin and answers as JSON lines on stdout:

  ``{"op": "add", "id": C, "ip": IP, "port": N, "prefix": "/user/x/"}`` opens a listener for container C
  (a bind failure reports ``{"id": C, "exit": 1}`` with the error logged);
  ``{"op": "signal", "id": C, "sig": N}`` delivers a signal as the per-pod process would take it: SIGTERM
  or SIGINT logs ``received signal N, stopping`` and exits 0, ignored signals (SIGCHLD, SIGCONT, SIGURG,
  SIGWINCH, SIGSTOP, SIGTSTP) do nothing, any other ends the container with 128+N. Ending closes the
  listener and every open connection of that container. Out: ``{"id": C, "log": TEXT}`` (a container log
  line: ``serving at …`` on start, the stop line) and ``{"id": C, "exit": CODE}``.
  It exits on EOF of stdin (its kubelet went away) or SIGTERM.

  Each listener answers what :mod:`.lite_server` answers (``{prefix}api`` with ``X-JupyterHub-Version``,
  ``api/status``, empty ``api/kernels``/``api/sessions``/``api/terminals``, a page at ``{prefix}``), one
  request per connection (HTTP/1.0 style, as ``lite_server``'s ``BaseHTTPRequestHandler``). Requests are
  not logged per pod (``lite_server`` logs each one to the container log).

- the **kubelet side**: :class:`LitePool` owns the process (started on the first lite container, with its
  stderr in ``log_path``) and :class:`LiteContainer` stands in for :class:`.procs.ContainerProcess` (same
  ``start``/``signal``/``stop``/``finish``/``kill_now``/``exited``/``returncode``/``pid`` surface, ``pid``
  being the pool's), so the pod worker runs, probes, stops and restarts it the same way. When the pool
  process dies every container it served exits with 137, as a killed process would.

:func:`is_lite` tells a lite server launch (``python -m …sim.lite_server …``) from anything else a lite
image may run (``sh -c``, ``python``), which still runs as a process of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import http
import json
import logging
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from .images import LITE_MODULE
from .lite_server import HUB_VERSION, SERVER_VERSION, parse_args
from .procs import MARKER

log = logging.getLogger(__name__)
POOL_MODULE = "gpuworkspace_devcluster.sim.lite_pool"
_IGNORED = {
    signal.SIGCHLD,
    signal.SIGCONT,
    signal.SIGURG,
    signal.SIGWINCH,
    signal.SIGSTOP,
    signal.SIGTSTP,
}
_GRACEFUL = {signal.SIGTERM, signal.SIGINT}
_MAX_HEAD = 65536


def is_lite(argv: list[str]) -> bool:
    """Whether a launch plan's argv is the lite server (what the pool can serve)."""
    return argv[1:3] == ["-m", LITE_MODULE]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _stamp(level: str = "I") -> str:
    return f"[{level} {time.strftime('%Y-%m-%d %H:%M:%S')} LiteServer]"


# ====================================================================== the pool process
def respond(prefix: str, started: str, method: str, target: str) -> tuple[int, bytes, str]:
    """(status, body, content type) for one request, as ``lite_server`` answers it."""
    if method not in ("GET", "HEAD"):
        return 501, json.dumps({"message": f"Unsupported method ({method!r})"}).encode(), "application/json"
    path = urlsplit(target).path
    if not path.startswith(prefix) and path + "/" != prefix:
        return 404, b'{"message": "Not Found", "reason": null}', "application/json"
    rest = path[len(prefix) :].strip("/")
    if rest == "api":
        return 200, json.dumps({"version": SERVER_VERSION}).encode(), "application/json"
    if rest == "api/status":
        body = {"started": started, "last_activity": _now(), "kernels": 0, "connections": 0}
        return 200, json.dumps(body).encode(), "application/json"
    if rest in ("api/kernels", "api/sessions", "api/terminals"):
        return 200, b"[]", "application/json"
    if rest in ("", "lab", "tree"):
        return 200, b"<html><body>lite single-user server</body></html>", "text/html"
    return 404, b'{"message": "Not Found", "reason": null}', "application/json"


class _Pod:
    def __init__(self, cid: str, prefix: str) -> None:
        self.cid, self.prefix, self.started = cid, prefix, _now()
        self.server: asyncio.Server | None = None
        self.conns: set[asyncio.Transport] = set()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for transport in list(self.conns):
            transport.abort()
        self.conns.clear()


class _Conn(asyncio.Protocol):
    def __init__(self, pod: _Pod) -> None:
        self.pod, self.buf = pod, b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.pod.conns.add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.pod.conns.discard(self.transport)

    def data_received(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            end = self.buf.find(b"\n\n")
        if end < 0:
            if len(self.buf) > _MAX_HEAD:
                self.transport.close()
            return
        parts = self.buf[:end].split(b"\n", 1)[0].decode("latin-1").split()
        if len(parts) < 2:  # noqa: PLR2004 - method and target
            code, body, ctype, method = 400, b'{"message": "Bad Request"}', "application/json", "GET"
        else:
            method = parts[0]
            code, body, ctype = respond(self.pod.prefix, self.pod.started, method, parts[1])
        head = (
            f"HTTP/1.0 {code} {http.HTTPStatus(code).phrase}\r\n"
            "Server: TornadoServer/6.4\r\n"
            f"Date: {email.utils.formatdate(usegmt=True)}\r\n"
            f"Content-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"X-JupyterHub-Version: {HUB_VERSION}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        self.transport.write(head if method == "HEAD" else head + body)
        self.transport.close()


class _PoolServer:
    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.pods: dict[str, _Pod] = {}
        self.done = asyncio.Event()

    def send(self, msg: Mapping[str, Any]) -> None:
        try:
            self.out.write(json.dumps(msg).encode() + b"\n")
            self.out.flush()
        except (BrokenPipeError, ValueError):
            self.done.set()

    async def handle(self, msg: Mapping[str, Any]) -> None:
        op, cid = msg.get("op"), str(msg.get("id", ""))
        if op == "add":
            await self._add(cid, str(msg["ip"]), int(msg["port"]), str(msg.get("prefix") or "/"))
        elif op == "signal":
            self._signal(cid, int(msg["sig"]))

    async def _add(self, cid: str, ip: str, port: int, prefix: str) -> None:
        pod = _Pod(cid, prefix)
        loop = asyncio.get_running_loop()
        try:
            pod.server = await loop.create_server(lambda: _Conn(pod), ip, port, reuse_address=True)
        except OSError as exc:
            self.send({"id": cid, "log": f"OSError: [Errno {exc.errno}] {exc.strerror}\n"})
            self.send({"id": cid, "exit": 1})
            return
        self.pods[cid] = pod
        self.send({"id": cid, "log": f"{_stamp()} serving at http://{ip}:{port}{prefix}\n"})

    def _signal(self, cid: str, sig: int) -> None:
        pod = self.pods.get(cid)
        if pod is None or sig in _IGNORED:
            return
        if sig in _GRACEFUL:
            self.send({"id": cid, "log": f"{_stamp('C')} received signal {sig}, stopping\n"})
        del self.pods[cid]
        pod.close()
        self.send({"id": cid, "exit": 0 if sig in _GRACEFUL else 128 + sig})

    def close_all(self) -> None:
        for pod in self.pods.values():
            pod.close()
        self.pods.clear()


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt the protocol
    pool = _PoolServer(out)
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, pool.done.set)

    async def commands() -> None:
        while line := await reader.readline():
            try:
                await pool.handle(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                print(f"lite pool: bad command {line[:200]!r}: {exc}", file=sys.stderr, flush=True)
        pool.done.set()  # EOF: the kubelet is gone

    task = asyncio.create_task(commands())
    await pool.done.wait()
    task.cancel()
    pool.close_all()


def main() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a listener per pod
    asyncio.run(_serve())


# ====================================================================== the kubelet side
class LitePool:
    """The kubelet's handle on its pool process; started on the first :meth:`add`, ended by :meth:`close`."""

    def __init__(self, python: str, name: str, log_path: Path | None = None) -> None:
        self.python, self.name, self.log_path = python, name, log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.containers: dict[str, LiteContainer] = {}
        self._buf = b""

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None and self.proc.returncode is None else 0

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self.proc is not None and self.proc.poll() is None:
            return self.proc
        self._gone()
        stderr: Any = subprocess.DEVNULL
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            stderr = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        try:
            proc = subprocess.Popen(
                [self.python, "-m", POOL_MODULE],
                env={**os.environ, MARKER: f"lite-pool-{self.name}"},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            if stderr is not subprocess.DEVNULL:
                stderr.close()
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        asyncio.get_running_loop().add_reader(proc.stdout.fileno(), self._read)
        self.proc, self._buf = proc, b""
        return proc

    def send(self, msg: Mapping[str, Any]) -> None:
        proc = self.proc
        if proc is None or proc.stdin is None:
            raise BrokenPipeError("lite pool not running")
        proc.stdin.write(json.dumps(msg).encode() + b"\n")
        proc.stdin.flush()

    def add(self, container: LiteContainer) -> None:
        self._ensure()
        self.containers[container.container_id] = container
        msg = {"op": "add", "id": container.container_id, "ip": container.ip, "port": container.port}
        try:
            self.send({**msg, "prefix": container.prefix})
        except OSError:
            self.containers.pop(container.container_id, None)
            self._gone()
            raise

    def signal(self, container: LiteContainer, sig: int) -> None:
        try:
            self.send({"op": "signal", "id": container.container_id, "sig": int(sig)})
        except OSError:
            self._gone()

    def _read(self) -> None:
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        try:
            data = os.read(proc.stdout.fileno(), 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._gone()
            return
        lines = (self._buf + data).split(b"\n")
        self._buf = lines.pop()
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            container = self.containers.get(str(msg.get("id")))
            if container is None:
                continue
            if "log" in msg:
                container.emit(str(msg["log"]))
            if "exit" in msg:
                container.exit(int(msg["exit"]))

    def _gone(self) -> None:
        """The process ended (or is being replaced): every container it served exits as killed."""
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.stdout is not None:
                with contextlib.suppress(ValueError, RuntimeError, OSError):
                    asyncio.get_running_loop().remove_reader(proc.stdout.fileno())
                proc.stdout.close()
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            if proc.poll() is None:  # never signal a reaped pid: it may be reused
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        for container in list(self.containers.values()):
            container.exit(137)
        self.containers.clear()

    def forget(self, container: LiteContainer) -> None:
        if self.containers.get(container.container_id) is container:
            del self.containers[container.container_id]

    def close(self) -> None:
        """End the pool process (EOF on its stdin, then SIGKILL); its containers exit."""
        proc = self.proc
        if proc is not None and proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2)
        self._gone()


class LiteContainer:
    """A lite server container served by a :class:`LitePool`; the interface of ``ContainerProcess``."""

    def __init__(
        self,
        pool: LitePool,
        argv: list[str],
        env: Mapping[str, str],
        cwd: Path,
        container_id: str,
        write: Callable[[str], None],
    ) -> None:
        self.pool, self.argv, self.cwd, self.container_id, self._write = pool, argv, cwd, container_id, write
        self.env = {**env, MARKER: container_id}
        self.ip, self.port, self.prefix = parse_args(argv[3:], dict(env))
        self.exited = asyncio.Event()
        self.returncode: int | None = None
        self.started_ns = 0
        self.finished_ns = 0
        self._added = False

    @property
    def pid(self) -> int:
        return self.pool.pid if self.running else 0

    @property
    def running(self) -> bool:
        return self._added and not self.exited.is_set()

    def start(self) -> None:
        """Ask the pool to listen; raises OSError when the pool process cannot start."""
        self.pool.add(self)
        self._added = True
        self.started_ns = time.time_ns()

    def emit(self, text: str) -> None:
        try:
            self._write(text)
        except OSError as exc:  # the pod's directory went away under us
            log.debug("devcluster kubelet: log write failed: %s", exc)

    def exit(self, code: int) -> None:
        if self.exited.is_set():
            return
        self.returncode = code
        self.finished_ns = time.time_ns()
        self.exited.set()
        self.pool.forget(self)

    def signal(self, sig: int) -> None:
        if self.running:
            self.pool.signal(self, sig)

    async def stop(self, grace_s: float) -> int:
        """SIGTERM, up to ``grace_s`` to exit, then SIGKILL; returns the exit code."""
        self.signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.exited.wait(), max(grace_s, 0.0))
        await self.finish()
        return self.returncode if self.returncode is not None else 137

    async def finish(self) -> None:
        """SIGKILL what is left and wait (briefly) for the pool to confirm."""
        if not self.running:
            return
        self.signal(signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.exited.wait(), 5.0)
        self.exit(137)

    def kill_now(self) -> None:
        """Synchronous teardown for shutdown paths: close the listener now, without waiting."""
        if self.running:
            self.pool.signal(self, signal.SIGKILL)
        self.exit(137)


if __name__ == "__main__":
    main()
