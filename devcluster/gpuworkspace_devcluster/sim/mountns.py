"""Containers in a private mount namespace: what the kubelet hands ``sim/nslaunch.py``, and how to enter it.

Pure, apart from :func:`available` (runs the launcher's ``--check`` once per interpreter). The container's
process sees:

- the host's file system as the lower layer of an overlay: readable, never written (a write lands in the
  container's own writable layer, a tmpfs that goes away with the container, as a new container of an image
  starts from the image again);
- every volumeMount bound at its mountPath (``subPath``: the file or directory itself), read-only where
  the mount or its volume says so;
- its working dir (made when missing, as runc does) and ``HOME`` at the container's own paths.

Exec (``kubectl exec``, exec probes) joins the namespace with ``nsenter --mount --root --wdns``
(``procs.ContainerProcess.enter_prefix``).
"""

from __future__ import annotations

import functools
import logging
import os
import posixpath
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .podvolumes import MountTable
from .procs import NS_SPEC_ENV

log = logging.getLogger(__name__)
LAUNCHER = str(Path(__file__).with_name("nslaunch.py"))
SPEC_ENV = NS_SPEC_ENV  # where the launcher finds its spec (nslaunch.SPEC_ENV); removed before the exec


def spec(table: MountTable, cwd: str, mkdirs: list[str]) -> dict[str, Any]:
    """The launcher's spec: the writable layer's tmpfs (on the container's root dir), mounts, cwd."""
    mounts = [
        {"path": path, "source": str(host), **({"readOnly": True} if path in table.readonly else {})}
        for path, host in sorted(table.mounts.items())
    ]
    return {"scratch": str(table.root), "mounts": mounts, "cwd": cwd, "mkdirs": mkdirs}


def launcher_argv(python: str, argv: list[str]) -> list[str]:
    """``python -I -S nslaunch.py ARGV…``: the launcher execs ARGV once the namespace is set up."""
    return [python, "-I", "-S", LAUNCHER, *argv]


def command_of(argv: list[str]) -> list[str]:
    """The container's own argv inside a :func:`launcher_argv`."""
    return argv[4:] if argv[2:4] == ["-S", LAUNCHER] else argv


def container_path_exists(table: MountTable, path: str, exists: Callable[[str], bool]) -> bool:
    """Whether ``path`` (a container path) exists in the container's view: in a volume, or on the host."""
    path = posixpath.normpath("/" + path.lstrip("/"))
    if any(path == m or path.startswith(m.rstrip("/") + "/") for m in table.mounts):
        return exists(str(table.to_host(path)))
    return exists(path)


def find_executable(
    table: MountTable, exe: str, env: Mapping[str, str], is_exe: Callable[[str], bool]
) -> bool:
    """Whether the container's PATH lookup (``execvp``) would find ``exe``."""
    if "/" in exe:
        return container_path_exists(table, exe, is_exe)
    for directory in (env.get("PATH") or "").split(":"):
        if directory and container_path_exists(table, posixpath.join(directory, exe), is_exe):
            return True
    return False


def is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


@functools.cache
def available(python: str) -> tuple[bool, str]:
    """Whether this host can run containers in mount namespaces (root, unshare, overlay); why not."""
    if os.geteuid() != 0:
        return False, "the kubelet does not run as root"
    with tempfile.TemporaryDirectory(prefix="gpuws-nscheck-") as scratch:
        try:
            done = subprocess.run(
                [python, "-I", "-S", LAUNCHER, "--check", scratch],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, str(exc)
    if done.returncode != 0:
        return False, done.stderr.strip() or f"exit code {done.returncode}"
    return True, ""
