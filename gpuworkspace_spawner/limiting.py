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

The spawn form says the same before the click: :func:`form_refusals` lists the disks once when the
form is rendered, and each profile card whose start would create a disk past a limit says why. The
check at the create stays the one that holds (a disk may be made or deleted in between).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from .compat import SpawnException
from .k8s import custom, gateway
from .k8s.custom import DATA_VOLUMES
from .k8s.errors import is_unavailable
from .lifecycle.limits import DiskLimits, decide_new_disk, start_refusals
from .manifests.names import DISK_HOME, DISK_ROOT, LABEL_DISK, LABEL_USER
from .manifests.vm import vm_names

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


async def form_refusals(spawner: Any) -> dict[str, str]:
    """Runtime ("container"/"vm") -> why a start of that runtime for this server would be refused by a
    disk limit now, for the spawn form's cards. Nothing when no limit is set, or when the disks cannot
    be listed (the form still renders; the check at the create still applies)."""
    limits = DiskLimits(per_user=spawner.max_disks_per_user, total=spawner.max_disks_total)
    if not (limits.per_user or limits.total):
        return {}
    identity = spawner._identity()
    try:
        disks = await list_disks(
            spawner.api, spawner.namespace, request_timeout=spawner.k8s_api_request_timeout
        )
    except Exception as e:
        if not (is_unavailable(e) or isinstance(e, OSError | TimeoutError)):
            raise
        spawner.log.warning(
            "Spawn form for %s: disks not listed (%s); no disk-limit notice shown", identity, e
        )
        return {}
    new_disks = {
        "container": spawner._expand_user_properties(spawner.pvc_name_template),
        "vm": vm_names(identity).disk,
    }
    return start_refusals(
        disks,
        user=identity.user,
        user_label=identity.selector_labels[LABEL_USER],
        new_disks=new_disks,
        limits=limits,
    )
