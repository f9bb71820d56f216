"""Pod logs and exec: ``GET .../pods/NAME/log`` and the WebSocket remote-command protocol of ``.../exec``.

:class:`PodIO` is the API server's part (container choice, option checks, the kubelet's error sentences);
a :class:`ContainerRuntime` says where logs are and how a command runs. :class:`LocalDirRuntime` keeps
both under a state directory and runs exec'd commands as local processes (no isolation: a dev tool).

Log files hold CRI-style lines ``<RFC3339Nano> <text>`` (full CRI ``<ts> stdout F <text>`` is read too);
responses strip the timestamp unless ``timestamps=true``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import re
import signal
import struct
import termios
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import WSMsgType, web

from . import errors

Pod = dict[str, Any]
TRUE = ("true", "True", "TRUE", "1", "t", "T")
WS_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")  # kubectl >= 1.30 asks for v5 only
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
DRAIN_AFTER_EXIT_S = 1.0  # output still coming from the command's background children, then they are killed
_TS = re.compile(rb"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ")
_CRI = re.compile(rb"(?:stdout|stderr) ([A-Z](?::[A-Z])*) ")


@dataclass(frozen=True)
class ExecContext:
    """Where an exec'd command runs: its working directory and environment."""

    cwd: Path
    env: dict[str, str]
    prefix: tuple[str, ...] = ()  # runs the command inside the container (nsenter into its mount namespace)
    root: Path | None = None  # the container's root as the host sees it (/proc/<pid>/root): PATH lookups


class ContainerRuntime(Protocol):
    def log_path(self, pod: Pod, container: str, previous: bool) -> Path | None:
        """The container's log file (its previous instance's with ``previous``); None when there is none."""
        ...

    def exec_context(self, pod: Pod, container: str) -> ExecContext | None:
        """How to run a command in the container; None when the container is not running."""
        ...


def container_status(pod: Pod, container: str) -> dict[str, Any] | None:
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or []:
            if cs.get("name") == container:
                return dict(cs)
    return None


def is_running(pod: Pod, container: str) -> bool:
    cs = container_status(pod, container)
    return cs is not None and (cs.get("state") or {}).get("running") is not None


def _containers(pod: Pod, key: str) -> list[dict[str, Any]]:
    return list((pod.get("spec") or {}).get(key) or [])


class LocalDirRuntime(ContainerRuntime):
    """Logs at ``DIR/pods/NS/POD/C.log`` (``C.previous.log``), a container's root at ``DIR/pods/NS/POD/C/root``.

    A container runs when its status says ``state.running``.
    """

    def __init__(self, state_dir: Path | str) -> None:
        self.state_dir = Path(state_dir)

    def pod_dir(self, namespace: str, pod: str) -> Path:
        return self.state_dir / "pods" / namespace / pod

    def log_file(self, namespace: str, pod: str, container: str, previous: bool = False) -> Path:
        return self.pod_dir(namespace, pod) / f"{container}{'.previous' if previous else ''}.log"

    def log_path(self, pod: Pod, container: str, previous: bool) -> Path | None:
        meta = pod["metadata"]
        path = self.log_file(meta.get("namespace", ""), meta["name"], container, previous)
        return path if path.exists() else None

    def exec_context(self, pod: Pod, container: str) -> ExecContext | None:
        if not is_running(pod, container):
            return None
        meta = pod["metadata"]
        root = self.pod_dir(meta.get("namespace", ""), meta["name"]) / container / "root"
        root.mkdir(parents=True, exist_ok=True)
        env = {"HOSTNAME": meta["name"], "HOME": str(root)}
        for c in _containers(pod, "containers") + _containers(pod, "initContainers"):
            if c.get("name") == container:  # literal values only; valueFrom needs the kubelet's lookups
                env.update(
                    {e["name"]: str(e.get("value", "")) for e in c.get("env") or [] if "valueFrom" not in e}
                )
        return ExecContext(root, env)

    def write_log(self, namespace: str, pod: str, container: str, text: str, **kw: Any) -> Path:
        """Append ``text``, one entry per line, stamped ``when_ns=`` or now (``previous=True``: the old log)."""
        path = self.log_file(namespace, pod, container, kw.get("previous", False))
        path.parent.mkdir(parents=True, exist_ok=True)
        stamp = format_rfc3339nano(kw.get("when_ns") or time.time_ns())
        with path.open("ab") as f:
            f.write(b"".join(f"{stamp} {line}\n".encode() for line in text.splitlines()))
        return path


# ---------------------------------------------------------------------- log files
def format_rfc3339nano(ns: int) -> str:
    """Go's ``time.RFC3339Nano`` in UTC: the fraction's trailing zeros trimmed."""
    secs, frac = divmod(ns, 1_000_000_000)
    base = datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{frac:09d}".rstrip("0") + "Z" if frac else base + "Z"


def parse_rfc3339(text: bytes) -> int | None:
    """Nanoseconds since the epoch of the RFC 3339 time that starts ``text`` (then a space), or None."""
    m = _TS.match(text)
    if m is None:
        return None
    zone = m.group(3).decode()
    stamp = datetime.fromisoformat(m.group(1).decode() + ("+00:00" if zone == "Z" else zone))
    return int(stamp.timestamp()) * 1_000_000_000 + int((m.group(2) or b"0").ljust(9, b"0"))


def _parse_line(line: bytes, fallback_ns: int) -> tuple[int, bytes]:
    """(timestamp, output) of a log line without its newline; a CRI partial line (tag P) gets none back."""
    ns = parse_rfc3339(line)
    if ns is None:
        return fallback_ns, line + b"\n"
    rest = line[line.index(b" ") + 1 :]
    cri = _CRI.match(rest)
    if cri is None:
        return ns, rest + b"\n"
    return ns, rest[cri.end() :] + (b"" if cri.group(1).startswith(b"P") else b"\n")


class _LogReader:
    """Reads complete lines from a log file incrementally (the follow loop's tail)."""

    def __init__(self, path: Path | None) -> None:
        self.path, self.offset, self.partial = path, 0, b""

    def read(self, final: bool = False) -> list[tuple[int, bytes]]:
        try:
            with open(self.path or "", "rb") as f:
                st = os.fstat(f.fileno())
                if st.st_size < self.offset:  # truncated or replaced: start over
                    self.offset, self.partial = 0, b""
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        if final and self.partial:
            lines.append(self.partial)
            self.partial = b""
        return [_parse_line(line, st.st_mtime_ns) for line in lines]


class _LogOutput:
    """A log request's options, and the rendering under since/timestamps/limitBytes."""

    def __init__(self, request: web.Request, pod: Pod) -> None:
        q = request.query
        self.container = _choose_container(pod, q.get("container", ""), for_exec=False)
        self.follow, self.previous, self.timestamps = (
            q.get(k) in TRUE for k in ("follow", "previous", "timestamps")
        )
        self.tail, since_s, self.left = _int(q, "tailLines"), _int(q, "sinceSeconds"), _int(q, "limitBytes")
        causes = []
        if self.tail is not None and self.tail < 0:
            causes.append(
                _cause("tailLines", f"Invalid value: {self.tail}: must be greater than or equal to 0")
            )
        if self.left is not None and self.left < 1:
            causes.append(_cause("limitBytes", f"Invalid value: {self.left}: must be greater than 0"))
        if since_s is not None and "sinceTime" in q:
            forbidden = "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
            causes.append({"reason": "FieldValueForbidden", "message": forbidden, "field": ""})
        elif since_s is not None and since_s < 1:
            causes.append(_cause("sinceSeconds", f"Invalid value: {since_s}: must be greater than 0"))
        if causes:
            raise errors.invalid("PodLogOptions", pod["metadata"]["name"], causes)
        self.since_ns = None if since_s is None else time.time_ns() - since_s * 1_000_000_000
        if q.get("sinceTime"):
            self.since_ns = parse_rfc3339(q["sinceTime"].encode() + b" ")
            if self.since_ns is None:
                t = q["sinceTime"]
                raise errors.bad_request(
                    f'parsing time "{t}" as "2006-01-02T15:04:05Z07:00": cannot parse "{t}" as "2006"'
                )

    @property
    def full(self) -> bool:
        return self.left is not None and self.left <= 0

    def render(self, entries: list[tuple[int, bytes]]) -> bytes:
        stamps, since = self.timestamps, self.since_ns
        data = b"".join(
            (format_rfc3339nano(ns).encode() + b" " if stamps else b"") + text
            for ns, text in entries
            if since is None or ns >= since
        )
        if self.left is not None:
            data = data[: max(self.left, 0)]
            self.left -= len(data)
        return data


# -------------------------------------------------------------------------- PodIO
class PodIO:
    """Serves pods/log and pods/exec for the API server, over a :class:`ContainerRuntime`.

    ``get_pod(namespace, name)`` (the current pod or None) lets ``follow`` end when the container stops
    or the pod is gone; without it a follow lasts until the client disconnects.
    """

    def __init__(
        self,
        runtime: ContainerRuntime,
        *,
        get_pod: Callable[[str, str], Pod | None] | None = None,
        poll_interval_s: float = 0.1,
        recheck_pod_s: float = 0.5,
    ) -> None:
        self.runtime = runtime
        self.get_pod = get_pod
        self.poll_interval_s = poll_interval_s
        self.recheck_pod_s = recheck_pod_s

    async def log(self, request: web.Request, pod: Pod) -> web.StreamResponse:
        out = _LogOutput(request, pod)
        if not (pod.get("spec") or {}).get("nodeName"):
            return web.Response(body=b"", content_type="text/plain")  # unscheduled: empty, as upstream
        path = self.runtime.log_path(pod, out.container, out.previous)
        if path is None and out.previous:
            name = pod["metadata"]["name"]
            raise errors.bad_request(
                f'previous terminated container "{out.container}" in pod "{name}" not found'
            )
        if path is None:
            _check_loggable(pod, out.container)
        reader = _LogReader(path)
        follow = out.follow and not out.previous and is_running(pod, out.container)
        entries = reader.read(final=not follow)
        if out.tail is not None:
            entries = entries[len(entries) - out.tail :] if out.tail else []
        first = out.render(entries)
        if not follow or out.full:
            return web.Response(body=first, content_type="text/plain")
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        with contextlib.suppress(ConnectionError):  # the client went away
            await resp.write(first)
            await self._follow(request, resp, reader, out, pod)
            await resp.write_eof()
        return resp

    async def _follow(
        self, request: web.Request, resp: web.StreamResponse, reader: _LogReader, out: _LogOutput, pod: Pod
    ) -> None:
        """Tail the file until the container stops, the pod goes, the client leaves or limitBytes is spent."""
        meta = pod["metadata"]
        next_check = time.monotonic() + self.recheck_pod_s
        while not out.full:
            reader.path = reader.path or self.runtime.log_path(pod, out.container, False)
            chunk = out.render(reader.read())
            if chunk:
                await resp.write(chunk)
                continue
            if request.transport is None or request.transport.is_closing():
                return
            if self.get_pod is not None and time.monotonic() >= next_check:
                next_check = time.monotonic() + self.recheck_pod_s
                now = self.get_pod(meta.get("namespace", ""), meta["name"])
                if (
                    now is None
                    or now["metadata"].get("uid") != meta.get("uid")
                    or not is_running(now, out.container)
                ):
                    await resp.write(out.render(reader.read(final=True)))
                    return
            await asyncio.sleep(self.poll_interval_s)

    async def exec(self, request: web.Request, pod: Pod) -> web.StreamResponse:
        q, name = request.query, pod["metadata"]["name"]
        container = _choose_container(pod, q.get("container", ""), for_exec=True)
        command = q.getall("command", [])
        stdin, stdout, stderr, tty = (q.get(k) in TRUE for k in ("stdin", "stdout", "stderr", "tty"))
        stderr = stderr and not tty  # a terminal merges stderr into stdout
        if not command:
            raise errors.bad_request("you must specify at least 1 command")
        if not (stdin or stdout or stderr):
            raise errors.bad_request("you must specify at least 1 of stdin, stdout, stderr")
        if not (pod.get("spec") or {}).get("nodeName"):
            raise errors.bad_request(f"pod {name} does not have a host assigned")
        ctx = self.runtime.exec_context(pod, container)
        if ctx is None:
            raise errors.bad_request(f'unable to upgrade connection: container not found ("{container}")')
        upgrade = request.headers.get("Upgrade", "").lower()
        if upgrade != "websocket":
            raise errors.bad_request(
                "unable to upgrade connection: this devcluster serves exec over WebSockets (v5.channel.k8s.io) "
                "only, not SPDY"
                if "spdy" in upgrade
                else "Upgrade request required"
            )
        ws = web.WebSocketResponse(protocols=WS_PROTOCOLS, max_msg_size=0)
        ready = ws.can_prepare(request)
        if not ready.ok or ready.protocol is None:
            offered = request.headers.get("Sec-WebSocket-Protocol", "")
            raise errors.bad_request(
                f"unable to upgrade: requested protocol(s) are not supported: [{offered}]; "
                f"supports [{' '.join(WS_PROTOCOLS)}]"
            )
        await ws.prepare(request)
        await _ExecSession(ws, ready.protocol == WS_PROTOCOLS[0], stdin, stdout, stderr, tty).run(
            command, ctx
        )
        return ws


class _ExecSession:
    """One exec over an upgraded WebSocket: channels 0 stdin, 1 stdout, 2 stderr, 3 status, 4 resize.

    Every binary message is one channel byte then data; v5 adds ``[255, channel]``, the client's half-close.
    At the end the status goes to channel 3 and the socket closes normally, which the client reads as EOF.
    """

    def __init__(self, ws: web.WebSocketResponse, v5: bool, *streams: bool) -> None:
        self.ws, self.v5 = ws, v5
        self.stdin, self.stdout, self.stderr, self.tty = streams
        self.lock = asyncio.Lock()
        self.proc: asyncio.subprocess.Process | None = None
        self.master: int | None = None  # the pty's master side, with tty
        self.aborted = False

    async def send(self, channel: int, data: bytes) -> None:
        async with self.lock:
            await self.ws.send_bytes(bytes((channel,)) + data)

    async def run(self, command: list[str], ctx: ExecContext) -> None:
        reader: asyncio.Task[None] | None = None
        try:
            # As the kubelet does: an empty frame on the lowest writable channel says the streams are ready.
            await self.send(STDOUT if self.stdout else STDERR if self.stderr else ERROR, b"")
            try:
                pumping = asyncio.gather(*await self._spawn(command, ctx))
            except OSError as exc:
                await self.send(ERROR, orjson.dumps(_spawn_error(command[0], exc)))
                return
            assert self.proc is not None
            reader = asyncio.create_task(self._read_client())
            code = await self.proc.wait()
            if not (await asyncio.wait({pumping}, timeout=DRAIN_AFTER_EXIT_S))[0]:
                self._kill()  # background children still hold the output open
            await pumping
            if not self.aborted:
                await self.send(ERROR, orjson.dumps(_exit_status(command, 128 - code if code < 0 else code)))
        except ConnectionError:
            self.aborted = True
        finally:
            self._kill()
            if self.master is not None:
                os.close(self.master)
            with contextlib.suppress(ConnectionError, asyncio.TimeoutError):
                await self.ws.close()
            if reader is not None:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader

    async def _spawn(self, command: list[str], ctx: ExecContext) -> list[Coroutine[Any, Any, None]]:
        host_path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        env = {**ctx.env, "PATH": f"{ctx.env['PATH']}:{host_path}" if ctx.env.get("PATH") else host_path}
        pipe, null = asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL
        stdio: dict[str, Any] = {
            "stdin": pipe if self.stdin else null,
            "stdout": pipe if self.stdout else null,
            "stderr": pipe if self.stderr else null,
        }
        slave = None
        if self.tty:
            env.setdefault("TERM", "xterm")
            self.master, slave = pty.openpty()
            os.set_blocking(self.master, False)
            stdio = {"stdin": slave, "stdout": slave, "stderr": slave, "preexec_fn": _take_controlling_tty}
        if ctx.root is not None and not _found_in(ctx.root, command[0], ctx.env.get("PATH", "")):
            raise FileNotFoundError(command[0])
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *ctx.prefix, *command, cwd=ctx.cwd, env=env, start_new_session=True, **stdio
            )
        finally:
            if slave is not None:
                os.close(slave)
        if self.tty:
            return [self._pump_pty()]
        pairs = ((self.proc.stdout, STDOUT), (self.proc.stderr, STDERR))
        return [self._pump(stream, ch) for stream, ch in pairs if stream is not None]

    async def _pump(self, stream: asyncio.StreamReader, channel: int) -> None:
        try:
            while chunk := await stream.read(65536):
                await self.send(channel, chunk)
        except ConnectionError:
            self.aborted = True
            self._kill()

    async def _pump_pty(self) -> None:
        assert self.master is not None
        loop = asyncio.get_running_loop()
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except BlockingIOError:
                ready: asyncio.Future[None] = loop.create_future()
                loop.add_reader(self.master, _resolve, ready)
                try:
                    await ready
                finally:
                    loop.remove_reader(self.master)
                continue
            except OSError:  # EIO: the last process holding the terminal has gone
                return
            if not chunk:
                return
            try:
                await self.send(STDOUT, chunk)
            except ConnectionError:
                self.aborted = True
                self._kill()

    async def _read_client(self) -> None:
        async for msg in self.ws:
            if msg.type is not WSMsgType.BINARY or not msg.data:
                continue
            channel, data = msg.data[0], msg.data[1:]
            if channel == STDIN and self.stdin:
                await self._write_stdin(data)
            elif channel == RESIZE and self.master is not None:
                with contextlib.suppress(ValueError, TypeError, AttributeError, OSError):
                    size = orjson.loads(data)
                    winsize = struct.pack("HHHH", int(size["Height"]), int(size["Width"]), 0, 0)
                    fcntl.ioctl(self.master, termios.TIOCSWINSZ, winsize)
            elif channel == CLOSE and self.v5 and data[:1] == bytes((STDIN,)):
                self._close_stdin()
        if self.proc is not None and self.proc.returncode is None:  # the client hung up mid-command
            self.aborted = True
            self._kill()

    async def _write_stdin(self, data: bytes) -> None:
        if self.master is not None:
            with contextlib.suppress(OSError):
                os.write(self.master, data)
        elif self.proc is not None and self.proc.stdin is not None and not self.proc.stdin.is_closing():
            with contextlib.suppress(ConnectionError):
                self.proc.stdin.write(data)
                await self.proc.stdin.drain()

    def _close_stdin(self) -> None:
        if self.master is not None:
            with contextlib.suppress(OSError):
                os.write(self.master, b"\x04")  # a terminal's end of input
        elif self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()

    def _kill(self) -> None:
        """End the command's whole process group (it runs in a session of its own)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _take_controlling_tty() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _failure(message: str, reason: str, causes: list[dict[str, str]], **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        **extra,
        "details": {"causes": causes},
    }


def _exit_status(command: list[str], code: int) -> dict[str, Any]:
    """The kubelet's exec Status: Success, or NonZeroExitCode with the code as an ExitCode cause."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    message = f"error executing command [{' '.join(command)}], exit code {code}"
    causes = [{"reason": "ExitCode", "message": str(code)}]
    return _failure(f"command terminated with non-zero exit code: {message}", "NonZeroExitCode", causes)


def _found_in(root: Path, exe: str, path: str) -> bool:
    """Whether ``execvp(exe)`` finds an executable in the container whose root the host sees at ``root``."""
    candidates = [exe] if "/" in exe else [f"{d}/{exe}" for d in path.split(":") if d]
    for candidate in candidates:
        full = root / candidate.lstrip("/")
        if full.is_file() and os.access(full, os.X_OK):
            return True
    return False


def _spawn_error(executable: str, exc: OSError) -> dict[str, Any]:
    """What runc reports for a command that cannot start, as an InternalError Status."""
    why = (exc.strerror or "").lower()
    if isinstance(exc, FileNotFoundError):
        why = "executable file not found in $PATH"
    err = (
        "error executing command in container: failed to exec in container: OCI runtime exec failed: exec failed: "
        f'unable to start container process: exec: "{executable}": {why}: unknown'
    )
    return _failure(f"Internal error occurred: {err}", "InternalError", [{"message": err}], code=500)


# ------------------------------------------------------------------------ helpers
def _choose_container(pod: Pod, container: str, *, for_exec: bool) -> str:
    """The API server's container defaulting and validation for log and exec."""
    name = pod["metadata"]["name"]
    main, init, eph = (
        [c["name"] for c in _containers(pod, k)]
        for k in ("containers", "initContainers", "ephemeralContainers")
    )
    if container:
        if container not in (*main, *init, *eph):
            raise errors.bad_request(f"container {container} is not valid for pod {name}")
        return container
    if len(main) == 1:
        return str(main[0])
    text = f"a container name must be specified for pod {name}"
    if main and for_exec:
        text += f", choose one of: [{' '.join(main)}]" + (
            f" or one of the init containers: [{' '.join(init)}]" if init else ""
        )
    elif main:
        text += f", choose one of: [{' '.join(init + main + eph)}]"
    raise errors.bad_request(text)


def _check_loggable(pod: Pod, container: str) -> None:
    """The kubelet's refusal for a container with no log file (``validateContainerLogStatus``)."""
    where = f'container "{container}" in pod "{pod["metadata"]["name"]}"'
    cs = container_status(pod, container)
    if cs is None:
        raise errors.bad_request(f"{where} is not available")
    state, last = cs.get("state") or {}, cs.get("lastState") or {}
    if state.get("running") is not None or state.get("terminated") is not None or last.get("terminated"):
        return  # it ran but wrote nothing: an empty log
    if state.get("waiting") is None:
        raise errors.bad_request(f"{where} is waiting to start - no logs yet")
    reason = state["waiting"].get("reason", "")
    pulls = {"ErrImagePull": "image can't be pulled", "ImagePullBackOff": "trying and failing to pull image"}
    raise errors.bad_request(f"{where} is waiting to start: {pulls.get(reason, reason)}")


def _int(query: Any, key: str) -> int | None:
    if key not in query:
        return None
    try:
        return int(query[key])
    except ValueError as exc:
        raise errors.bad_request(f'strconv.ParseInt: parsing "{query[key]}": invalid syntax') from exc


def _cause(field: str, message: str) -> dict[str, str]:
    return {"reason": "FieldValueInvalid", "message": message, "field": field}
