"""Disk limits at start time: the thin shell around :func:`~gpuworkspace_spawner.lifecycle.limits.decide_new_disk`.

A start that is about to create a new disk (a container home claim, a VM root DataVolume) holds
:func:`new_disk_guard` around the create. With no limit configured it does nothing. Otherwise it lists
the namespace's disks (one list of home claims, one of root DataVolumes; an API list, not a watch
cache, so a disk created a moment ago counts), asks the decision, and either lets the create run or
refuses with a ``SpawnException`` (HTTP 403, reason ``disk-limit``) before anything is written: the
refusal is logged as an audit record but not written as an Event, and the start is marked rejected
so that the hub's clean-up ``stop()`` writes nothing either.

The list, the decision and the create run under one lock per namespace, so concurrent starts in
this hub cannot both take the last free place. (One hub process per release, as z2jh runs it.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from .compat import SpawnException
from .k8s import custom, gateway
from .k8s.custom import DATA_VOLUMES
from .lifecycle.limits import DiskLimits, decide_new_disk
from .manifests.names import DISK_HOME, DISK_ROOT, LABEL_DISK, LABEL_USER

HOME_SELECTOR = f"{LABEL_DISK}={DISK_HOME}"
ROOT_SELECTOR = f"{LABEL_DISK}={DISK_ROOT}"
_LOCKS: dict[str, asyncio.Lock] = {}


async def list_disks(api: Any, namespace: str, *, request_timeout: float) -> list[dict[str, Any]]:
    """Every home claim and VM root DataVolume in ``namespace`` (no CDI installed: no root disks)."""
    claims = await gateway.list_pvcs(api, namespace, HOME_SELECTOR, request_timeout=request_timeout)
    roots = await custom.list_namespaced(
        custom.custom_api(),
        DATA_VOLUMES,
        namespace,
        label_selector=ROOT_SELECTOR,
        request_timeout=request_timeout,
    )
    return [*(claims.get("items") or []), *roots]


@contextlib.asynccontextmanager
async def new_disk_guard(spawner: Any, kind: str, disk_name: str) -> AsyncIterator[None]:
    """Around the create of ``spawner``'s new disk ``disk_name`` (``kind``: PersistentVolumeClaim or
    DataVolume): refuses past ``max_disks_per_user`` / ``max_disks_total``, else runs the block."""
    limits = DiskLimits(per_user=spawner.max_disks_per_user, total=spawner.max_disks_total)
    if not (limits.per_user or limits.total):
        yield
        return
    identity = spawner._identity()
    async with _LOCKS.setdefault(spawner.namespace, asyncio.Lock()):
        disks = await list_disks(
            spawner.api, spawner.namespace, request_timeout=spawner.k8s_api_request_timeout
        )
        verdict = decide_new_disk(
            disks,
            user=identity.user,
            user_label=identity.selector_labels[LABEL_USER],
            disk_name=disk_name,
            limits=limits,
        )
        if verdict.action == "refuse":
            spawner._rejected = True  # nothing was written: stop() has nothing to clean up
            why = (
                f"{verdict.limit} disk limit (max_disks_per_user={limits.per_user}, "
                f"max_disks_total={limits.total}; user has {verdict.user_disks}, "
                f"namespace {verdict.total_disks}): no disk {disk_name} created"
            )
            spawner._log_record("disk-refused", kind, disk_name, why)
            raise SpawnException(verdict.reason, reason="disk-limit", status_code=403, log_message=why)
        yield
