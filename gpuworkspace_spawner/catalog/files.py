"""Finding and reading the catalog's files: one file, or a directory of ``*.yaml``/``*.yml`` files.

A directory may be a ConfigMap volume: its top-level entries are symlinks into ``..data``, which is
itself a symlink to a timestamped directory swapped atomically on update. Names starting with ``.``
are skipped, symlinks are followed, subdirectories are ignored.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass

from .errors import CatalogError, CatalogProblem

MAX_FILE_BYTES = 1024 * 1024
YAML_SUFFIXES = (".yaml", ".yml")

# What a cheap look at the catalog's files sees: per file (name, device, inode, size, mtime), or
# the error that stopped us looking. Equal fingerprints: nothing to reload.
Fingerprint = tuple[tuple[str, int, int, int, int] | tuple[str, str], ...]


@dataclass(frozen=True)
class CatalogFile:
    name: str  # as shown in messages: the catalog path joined with the file name
    text: str


@dataclass(frozen=True)
class CatalogFiles:
    files: tuple[CatalogFile, ...]
    digest: str  # sha256 hex over every file's name and content, in order


def _problem(name: str, message: str) -> CatalogProblem:
    return CatalogProblem(file=name, profile=None, field="", message=message)


def _describe(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def list_files(path: str | os.PathLike[str]) -> list[str]:
    """The catalog's files in the order they are read; raises CatalogError when there are none."""
    root = os.fspath(path)
    try:
        if not os.path.isdir(root):
            os.stat(root)  # raises when missing
            return [root]
        names = sorted(os.listdir(root))
    except OSError as exc:
        raise CatalogError([_problem(root, f"cannot read the catalog: {_describe(exc)}")]) from exc
    files = [
        os.path.join(root, name)
        for name in names
        if not name.startswith(".")
        and name.endswith(YAML_SUFFIXES)
        and os.path.isfile(os.path.join(root, name))
    ]
    if not files:
        raise CatalogError([_problem(root, "the directory holds no *.yaml or *.yml files")])
    return files


def fingerprint(path: str | os.PathLike[str]) -> Fingerprint:
    """Names, inodes, sizes and mtimes of the catalog's files; reads no content, never raises."""
    try:
        names = list_files(path)
    except CatalogError as exc:
        return (("<error>", str(exc)),)
    entries: list[tuple[str, int, int, int, int] | tuple[str, str]] = []
    for name in names:
        try:
            st = os.stat(name)
        except OSError as exc:
            entries.append((name, _describe(exc)))
        else:
            entries.append((name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(entries)


def _read_one(name: str) -> tuple[bytes | None, CatalogProblem | None]:
    too_big = _problem(name, f"the file is larger than {MAX_FILE_BYTES // 1024} KiB; split the catalog")
    try:
        with open(name, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None, _problem(name, "not a regular file")
            if os.fstat(handle.fileno()).st_size > MAX_FILE_BYTES:
                return None, too_big
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        return None, _problem(name, f"cannot read the file: {_describe(exc)}")
    if len(data) > MAX_FILE_BYTES:
        return None, too_big
    return data, None


def read_files(path: str | os.PathLike[str]) -> CatalogFiles:
    """Every catalog file's text; raises CatalogError (all unreadable files at once)."""
    problems: list[CatalogProblem] = []
    files: list[CatalogFile] = []
    digest = hashlib.sha256()
    for name in list_files(path):
        data, problem = _read_one(name)
        if problem is not None or data is None:
            problems.append(problem or _problem(name, "cannot read the file"))
            continue
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            problems.append(_problem(name, f"not UTF-8 text (byte {exc.start})"))
            continue
        digest.update(os.path.basename(name).encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
        files.append(CatalogFile(name=name, text=text))
    if problems:
        raise CatalogError(problems)
    return CatalogFiles(files=tuple(files), digest=digest.hexdigest())
