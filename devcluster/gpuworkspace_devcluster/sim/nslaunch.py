"""The container launcher: a private mount namespace in which a pod's volumes sit at their mountPaths.

Run by the simulated kubelet as ``python -I -S nslaunch.py`` (standard library only: it must start fast and
import nothing of this package) with the container spec as JSON in ``GPUWORKSPACE_NS_SPEC`` (removed before
the command runs). It does what runc does for a container's file system, on the host's own root:

1. ``unshare(CLONE_NEWNS)`` and make every mount private (nothing propagates back to the host);
2. a tmpfs at ``spec["scratch"]`` holds the container's writable layer: an overlay whose lower layer is the
   host's ``/`` (read through, never written: a write copies the file up into the tmpfs) becomes the new
   root, with ``/proc``, ``/dev`` and ``/sys`` bound in (they are other file systems);
3. ``pivot_root`` into it (runc's ``pivot_root(".", ".")`` order: the old root is reachable below
   ``/.oldroot`` until every volume is bound, then detached);
4. each volume is bind-mounted at its mountPath, shortest path first (a file for a file, made in the
   writable layer when the image does not have it); read-only ones are remounted ``MS_RDONLY``;
5. the working directory (made when missing, as runc does) and ``HOME`` are created, then ``execvpe``.

A failure before the exec prints ``devcluster launcher: …`` on stderr and exits 128 (a StartError); a
command that cannot be executed exits 127 with runc's message. ``--check`` only sets up an empty namespace
and exits 0: the kubelet's probe that mount namespaces work here.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sys
from typing import Any

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # the syscall numbers (asm/unistd_64.h, asm-generic/unistd.h)
SPEC_ENV = "GPUWORKSPACE_NS_SPEC"
_libc = ctypes.CDLL(None, use_errno=True)


class LaunchError(Exception):
    pass


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise LaunchError(f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [s.encode() if s is not None else None for s in (source, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {source} on {target}")


def _pivot_root(new_root: str, put_old: str) -> None:
    number = _PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise LaunchError(f"pivot_root: unknown syscall number on {os.uname().machine}")
    _check(_libc.syscall(number, new_root.encode(), put_old.encode()), "pivot_root")


def _mountpoint(path: str, is_file: bool) -> None:
    if os.path.lexists(path) and not os.path.islink(path):
        return
    os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
    if is_file:
        with open(path, "ab"):
            pass
    else:
        os.makedirs(path, exist_ok=True)


def setup(spec: dict[str, Any]) -> None:
    """Everything up to the exec (steps 1-5 above, less the exec)."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    scratch = str(spec["scratch"])
    _mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    upper, work, merged = (f"{scratch}/{d}" for d in ("upper", "work", "merged"))
    for d in (upper, work, merged):
        os.mkdir(d)
    _mount("overlay", merged, "overlay", 0, f"lowerdir=/,upperdir={upper},workdir={work}")
    for sub in ("proc", "dev", "sys"):
        if os.path.isdir(f"/{sub}"):
            _mount(f"/{sub}", f"{merged}/{sub}", None, MS_BIND | MS_REC)
    os.makedirs(f"{merged}/.oldroot", exist_ok=True)
    _pivot_root(merged, f"{merged}/.oldroot")
    os.chdir("/")
    mounts = sorted(spec.get("mounts") or [], key=lambda m: (m["path"].count("/"), m["path"]))
    for m in mounts:
        source = "/.oldroot" + m["source"]
        if not os.path.exists(source):
            raise LaunchError(f"volume source {m['source']} for {m['path']} does not exist")
        _mountpoint(m["path"], not os.path.isdir(source))
        _mount(source, m["path"], None, MS_BIND | MS_REC)
        if m.get("readOnly"):
            _mount(None, m["path"], None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    _check(_libc.umount2(b"/.oldroot", MNT_DETACH), "umount /.oldroot")
    os.rmdir("/.oldroot")
    for path in spec.get("mkdirs") or []:
        with contextlib.suppress(OSError):  # e.g. HOME below a read-only mount: the process finds out
            os.makedirs(str(path), exist_ok=True)
    cwd = str(spec.get("cwd") or "/")
    os.makedirs(cwd, exist_ok=True)  # runc makes a missing working dir
    os.chdir(cwd)


def main(argv: list[str]) -> int:
    if argv[1:2] == ["--check"]:
        spec: dict[str, Any] = {"scratch": argv[2], "mounts": [], "cwd": "/"}
        try:
            setup(spec)
        except (LaunchError, OSError) as exc:
            print(f"devcluster launcher: {exc}", file=sys.stderr)
            return 1
        return 0
    env = dict(os.environ)
    try:
        spec = json.loads(env.pop(SPEC_ENV))
        setup(spec)
    except (LaunchError, OSError, KeyError, ValueError) as exc:
        print(f"devcluster launcher: {exc}", file=sys.stderr, flush=True)
        return 128
    command = argv[1:]
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        why = "executable file not found in $PATH" if isinstance(exc, FileNotFoundError) else exc.strerror
        print(
            "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
            f'runc create failed: unable to start container process: exec: "{command[0]}": {why}: unknown',
            file=sys.stderr,
            flush=True,
        )
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv))
