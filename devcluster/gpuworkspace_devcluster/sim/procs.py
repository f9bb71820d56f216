"""Container processes on the simulated node: spawn, log, signal, reap, and leave nothing behind.

Each container instance is a process in a session of its own (so its process group is the container),
with ``GPUWORKSPACE_CONTAINER_ID`` in its environment: descendants that start sessions of their own
(Jupyter kernels do) or outlive their parent still carry it, which is how :func:`kill_marked` finds every
process of a container. Exit is noticed through a pidfd (no thread per child); stdout and stderr are read
non-blocking and appended to the container log as ``<RFC3339Nano> <line>`` via ``write``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)
MARKER = "GPUWORKSPACE_CONTAINER_ID"
NS_SPEC_ENV = (
    "GPUWORKSPACE_NS_SPEC"  # the launcher's spec (mountns.SPEC_ENV), not part of the container's env
)
_CHUNK = 65536


def exit_code(returncode: int) -> int:
    """A container's exit code: a death by signal N reads 128+N, as runc reports it."""
    return 128 - returncode if returncode < 0 else returncode


class ContainerProcess:
    """One running container instance. ``exited`` is set once the main process is reaped."""

    def __init__(
        self,
        argv: list[str],
        env: Mapping[str, str],
        cwd: Path,
        container_id: str,
        write: Callable[[str], None],
        *,
        namespaced: bool = False,
    ) -> None:
        self.argv, self.cwd, self.container_id, self._write = argv, cwd, container_id, write
        self.namespaced = namespaced  # started by sim/nslaunch.py: cwd is the container's, in its namespace
        self._launch_env = {**env, MARKER: container_id}
        self.env = {k: v for k, v in self._launch_env.items() if k != NS_SPEC_ENV}  # what exec sees
        self.proc: subprocess.Popen[bytes] | None = None
        self.exited = asyncio.Event()
        self.returncode: int | None = None
        self.oom_killed = False  # killed as the kernel's OOM killer would: the runtime says OOMKilled
        self.started_ns = 0
        self.finished_ns = 0
        self._partial: dict[int, bytes] = {}
        self._streams: dict[int, IO[bytes]] = {}
        self._pidfd: int | None = None
        self._poll: asyncio.TimerHandle | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def start(self) -> None:
        """Spawn; raises OSError when the executable cannot run (the caller reports StartError)."""
        loop = asyncio.get_running_loop()
        self.proc = subprocess.Popen(  # returns at exec; reaping is asynchronous (pidfd)
            self.argv,
            cwd="/" if self.namespaced else self.cwd,
            env=self._launch_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
        self.started_ns = time.time_ns()
        for stream in (self.proc.stdout, self.proc.stderr):
            assert stream is not None
            fd = stream.fileno()
            os.set_blocking(fd, False)
            self._streams[fd] = stream
            loop.add_reader(fd, self._read, fd)
        try:
            self._pidfd = os.pidfd_open(self.proc.pid)
            loop.add_reader(self._pidfd, self._reap)
        except (AttributeError, OSError):  # no pidfd (old kernel): poll
            self._poll = loop.call_later(0.1, self._reap)

    def _read(self, fd: int) -> None:
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close_stream(fd)
            return
        buf = self._partial.pop(fd, b"") + data
        lines, _, rest = buf.rpartition(b"\n")
        if rest:
            self._partial[fd] = rest
        if lines or not rest:
            self._emit(lines)

    def _emit(self, data: bytes) -> None:
        if data:
            try:
                self._write(data.decode(errors="replace"))
            except OSError as exc:  # the pod's directory went away under us
                log.debug("devcluster kubelet: log write failed: %s", exc)

    def _close_stream(self, fd: int) -> None:
        stream = self._streams.pop(fd, None)
        if stream is None:
            return
        with contextlib.suppress(ValueError, RuntimeError):
            asyncio.get_running_loop().remove_reader(fd)
        self._emit(self._partial.pop(fd, b""))
        stream.close()

    def _reap(self) -> None:
        assert self.proc is not None
        code = self.proc.poll()
        if code is None:
            if self._pidfd is None:
                self._poll = asyncio.get_running_loop().call_later(0.1, self._reap)
            return
        if self._pidfd is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        self.returncode = exit_code(code)
        self.finished_ns = time.time_ns()
        self.exited.set()

    def enter_prefix(self) -> list[str]:
        """What runs a command inside this container's mount namespace and working dir (nothing when it has none)."""
        if not self.namespaced or self.proc is None:
            return []
        return ["nsenter", f"--target={self.proc.pid}", "--mount", "--root", f"--wdns={self.cwd}", "--"]

    @property
    def running(self) -> bool:
        return self.proc is not None and not self.exited.is_set()

    def signal(self, sig: int) -> None:
        """Signal the container's process group (what ``runc kill`` does to the init process)."""
        if self.proc is not None and not self.exited.is_set():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    async def stop(self, grace_s: float) -> int:
        """SIGTERM, up to ``grace_s`` to exit, then SIGKILL; returns the exit code."""
        self.signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.exited.wait(), max(grace_s, 0.0))
        await self.finish()
        return self.returncode if self.returncode is not None else 137

    async def finish(self) -> None:
        """Kill whatever is left of the container (the group and marked strays) and close its pipes."""
        self.signal(signal.SIGKILL)
        kill_marked({self.container_id})
        if self.proc is not None and not self.exited.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.exited.wait(), 5.0)
        for fd in list(self._streams):
            self._read_rest(fd)
            self._close_stream(fd)
        if self._poll is not None:
            self._poll.cancel()

    def _read_rest(self, fd: int) -> None:
        with contextlib.suppress(OSError):
            while data := os.read(fd, _CHUNK):
                buf = self._partial.pop(fd, b"") + data
                lines, _, rest = buf.rpartition(b"\n")
                if rest:
                    self._partial[fd] = rest
                self._emit(lines)

    def kill_now(self) -> None:
        """Synchronous teardown for shutdown paths: SIGKILL the group and strays, reap, close pipes."""
        self.signal(signal.SIGKILL)
        kill_marked({self.container_id})
        if self.proc is not None and self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
            if self.proc.returncode is not None:
                self._reap()
        for fd in list(self._streams):
            self._close_stream(fd)
        if self._poll is not None:
            self._poll.cancel()


def marked_processes(ids: Iterable[str]) -> dict[int, str]:
    """pid → container id for every process whose environment carries one of ``ids``."""
    wanted = {f"{MARKER}={i}".encode() for i in ids}
    if not wanted:
        return {}
    me = os.getpid()
    found: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        for item in environ.split(b"\0"):
            if item in wanted:
                found[int(entry.name)] = item.split(b"=", 1)[1].decode()
                break
    return found


def kill_marked(ids: Iterable[str]) -> int:
    """SIGKILL every process of the given containers, however it detached; returns how many."""
    pids = marked_processes(ids)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


async def run_once(argv: list[str], env: Mapping[str, str], cwd: Path, limit_s: float) -> tuple[int, str]:
    """Run a command to completion in a container's context (exec probes): (exit code, combined output)."""
    child = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = await asyncio.wait_for(child.communicate(), limit_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        await child.wait()
        raise
    return exit_code(child.returncode or 0), out.decode(errors="replace")


def start_error(executable: str, exc: OSError) -> str:
    """runc's message for a process that cannot start (the container's StartError)."""
    why = (exc.strerror or str(exc)).lower()
    if isinstance(exc, FileNotFoundError):
        why = "executable file not found in $PATH"
    return (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
        f'failed: unable to start container process: exec: "{executable}": {why}: unknown'
    )
