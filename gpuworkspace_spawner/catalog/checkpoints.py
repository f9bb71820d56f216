"""Cross-field checks of ``spec.storage.checkpoints`` and of the workspace conventions' paths (pure).

``/workspace`` (the Git working tree, on the home disk) and ``/checkpoints`` (the durable target) are
the conventions every workspace gets (manifests/conventions.py); a profile cannot mount something else
there. ``checkpoints`` names exactly one target: ``teamDirectory`` (a writable entry of
``teamDirectories``, containers only: VMs get no shared mounts yet) with an optional relative
``subPath``, or ``objectStore`` (``url`` and an optional ``endpoint``; no mount, the address is in the
environment).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping
from typing import Any

Finding = tuple[str, str]
WORKSPACE_PATH = "/workspace"
CHECKPOINTS_PATH = "/checkpoints"
CONVENTION_PATHS = (WORKSPACE_PATH, CHECKPOINTS_PATH)
FIELD = "spec.storage.checkpoints"


def _user_mount_paths(storage: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for section in ("home", "scratch", "datasets", "models"):
        path = (storage.get(section) or {}).get("mountPath")
        if path is not None:
            yield f"spec.storage.{section}.mountPath", path
    for index, team in enumerate(storage.get("teamDirectories") or []):
        yield f"spec.storage.teamDirectories[{index}].mountPath", team.get("mountPath", "")


def _convention_clash(path: str) -> str | None:
    normal = posixpath.normpath(path) if path else path
    for reserved in CONVENTION_PATHS:
        if normal == reserved or normal.startswith(reserved + "/"):
            return (
                f"{path!r} is {reserved}, which every workspace gets by convention (docs: workspace storage)"
            )
    return None


def _team_directory_findings(
    checkpoints: Mapping[str, Any], storage: Mapping[str, Any], runtime: str
) -> Iterator[Finding]:
    name = checkpoints["teamDirectory"]
    if runtime == "vm":
        yield (
            f"{FIELD}.teamDirectory",
            "a VM gets no shared mounts yet: give its checkpoints an objectStore instead",
        )
        return
    teams = list(storage.get("teamDirectories") or [])
    index = next((i for i, t in enumerate(teams) if t.get("name") == name), None)
    if index is None:
        names = ", ".join(repr(t.get("name")) for t in teams) or "none"
        yield (
            f"{FIELD}.teamDirectory",
            f"{name!r} is not in spec.storage.teamDirectories (its names: {names})",
        )
    elif teams[index].get("readOnly", True):
        yield (
            f"{FIELD}.teamDirectory",
            f"checkpoints are written: spec.storage.teamDirectories[{index}] ({name!r}) is read-only; "
            "set its readOnly: false",
        )
    sub_path = checkpoints.get("subPath", "")
    if ".." in sub_path.split("/") or sub_path.startswith("/"):
        yield f"{FIELD}.subPath", "must be relative and must not contain '..'"


def check_checkpoints(spec: Mapping[str, Any], settings: Any) -> Iterator[Finding]:
    """Problems of ``storage.checkpoints``, and mounts at the conventions' paths."""
    storage = spec.get("storage") or {}
    for field, path in _user_mount_paths(storage):
        clash = _convention_clash(path)
        if clash is not None:
            yield field, clash
    checkpoints = storage.get("checkpoints")
    if checkpoints is None:
        return
    team, store = "teamDirectory" in checkpoints, "objectStore" in checkpoints
    if team == store:
        yield (
            FIELD,
            "give exactly one target: teamDirectory (a team CephFS directory of teamDirectories) or "
            "objectStore (an object-store prefix, e.g. {url: s3://bucket/team/})",
        )
        return
    if store and "subPath" in checkpoints:
        yield f"{FIELD}.subPath", "subPath is a directory of a teamDirectory; put it in objectStore.url"
    if team:
        yield from _team_directory_findings(checkpoints, storage, spec.get("runtime", "container"))
