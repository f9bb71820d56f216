"""The kubelet's eviction manager, for what pods themselves exceed (kubernetes ``pkg/kubelet/eviction``).

Every ``eviction_interval_s`` (the manager's 10 s monitoring period) the kubelet measures each running
pod's emptyDir volumes (``du``: allocated blocks, as the volume stats provider does) and evicts a pod
whose usage of one exceeds its ``sizeLimit`` (``emptyDirLimitEviction``, a local-storage eviction):
a Warning ``Evicted`` event, the containers killed with no grace period (``evictPod(pod, 0, ...)``), and
the pod left ``Failed`` with ``reason: Evicted`` and the message
``Usage of EmptyDir volume "<name>" exceeds the limit "<sizeLimit>". `` (``emptyDirMessageFmt``).
``medium: Memory`` volumes are a tmpfs sized to the limit, so they never get over it (writes fail first).
Node-pressure evictions are not simulated.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path

from ..quantity import QuantityError, parse_quantity
from ..store import Obj

REASON = "Evicted"
EMPTYDIR_MESSAGE = 'Usage of EmptyDir volume "{name}" exceeds the limit "{limit}". '


def limited_emptydirs(pod: Obj) -> dict[str, str]:
    """The pod's disk-backed emptyDir volumes with a positive ``sizeLimit``: name → the limit as written."""
    out = {}
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        empty = vol.get("emptyDir")
        if not isinstance(empty, dict) or empty.get("medium") == "Memory" or not empty.get("sizeLimit"):
            continue
        try:
            if parse_quantity(str(empty["sizeLimit"])) > 0:
                out[vol["name"]] = str(empty["sizeLimit"])
        except QuantityError:
            continue  # validation refuses such a pod; nothing to enforce
    return out


def decide_emptydir_eviction(pod: Obj, used: Mapping[str, int]) -> str | None:
    """``emptyDirLimitEviction``: the eviction message for the first emptyDir over its limit, else None.
    ``used`` maps volume names to their usage in bytes."""
    for name, limit in limited_emptydirs(pod).items():
        if used.get(name, 0) > parse_quantity(limit):
            return EMPTYDIR_MESSAGE.format(name=name, limit=limit)
    return None


def disk_usage(path: Path) -> int:
    """``du`` of a directory: bytes allocated to everything under it (0 if it is gone)."""
    total = 0
    for root, dirs, files in os.walk(path):
        for entry in (*dirs, *files):
            try:
                total += os.lstat(os.path.join(root, entry)).st_blocks * 512
            except OSError:
                continue
    return total


async def emptydir_message(pod: Obj, volumes_dir: Path) -> str | None:
    """Measure the pod's limited emptyDirs under ``volumes_dir`` (off the event loop) and decide."""
    limited = limited_emptydirs(pod)
    if not limited:
        return None
    used = {name: await asyncio.to_thread(disk_usage, volumes_dir / name) for name in limited}
    return decide_emptydir_eviction(pod, used)
