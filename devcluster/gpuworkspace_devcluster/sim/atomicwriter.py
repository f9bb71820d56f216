"""The kubelet's atomic writer for ConfigMap, Secret, downward API and projected volumes.

Follows kubernetes ``pkg/volume/util/atomic_writer.go`` (``AtomicWriter.Write``): the payload is written
into a fresh timestamped directory ``..2006_01_02_15_04_05.<random>``, a ``..data_tmp`` symlink to it is
renamed over ``..data`` (one atomic ``rename``), and each top-level entry of the payload is a symlink
``<name> -> ..data/<name>``; then the previous timestamped directory and user-visible links no longer in the
payload are removed. A process that reads ``<mount>/<key>`` therefore sees either the whole old payload or
the whole new one. A ``subPath`` mount binds the file the link resolved to when the container started, so
it never sees an update (the old directory is removed, its inode stays with the mount), as on a node.

Nothing is written when the payload equals what ``..data`` holds (``shouldWritePayload``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

Payload = dict[str, tuple[bytes, int]]  # relative path → (content, file mode)
DATA_DIR, DATA_TMP = "..data", "..data_tmp"


def current(target: Path) -> Payload | None:
    """What ``..data`` holds now (None when the volume was never written)."""
    data = target / DATA_DIR
    if not data.is_dir():
        return None
    out: Payload = {}
    for dirpath, _, files in os.walk(data, followlinks=True):
        for name in files:
            path = Path(dirpath) / name
            out[str(path.relative_to(data))] = (path.read_bytes(), path.stat().st_mode & 0o7777)
    return out


def _check_paths(payload: Payload) -> None:
    """``validatePayload``: relative paths, no ``..`` element, none starting with ``..``."""
    for rel in payload:
        parts = Path(rel).parts
        if not rel or rel.startswith("/") or ".." in parts or parts[0].startswith(".."):
            raise ValueError(f"invalid path {rel!r}: must be relative, without '..' and not start with '..'")


def write(target: Path, payload: Payload) -> bool:
    """Make ``target`` hold exactly ``payload``; returns whether anything was written."""
    _check_paths(payload)
    target.mkdir(parents=True, exist_ok=True)
    if current(target) == payload:
        return False
    data = target / DATA_DIR
    old = os.readlink(data) if data.is_symlink() else ""
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    fresh = Path(tempfile.mkdtemp(prefix=stamp, dir=target))
    fresh.chmod(0o755)
    for rel, (content, mode) in payload.items():
        path = fresh / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(mode)
    tmp = target / DATA_TMP
    if tmp.is_symlink():
        tmp.unlink()
    tmp.symlink_to(fresh.name)
    tmp.replace(data)  # the atomic step
    visible = {Path(rel).parts[0] for rel in payload}
    for name in visible:
        link = target / name
        if not link.is_symlink():
            _remove(link)
            link.symlink_to(f"{DATA_DIR}/{name}")
    for entry in target.iterdir():
        stale_dir = entry.name == old and old != fresh.name
        if (entry.name.startswith("..") and stale_dir) or not (
            entry.name.startswith("..") or entry.name in visible
        ):
            _remove(entry)
    return True


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
