"""Disk limits at start time: the thin shell around :func:`~gpuworkspace_spawner.lifecycle.limits.decide_new_disk`.

A start that is about to create a new disk (a container home claim, a VM root DataVolume) holds
:func:`new_disk_guard` around the create. With no limit configured it does nothing. Otherwise it takes
the namespace's disks from the spawner's watch caches of home claims and root DataVolumes (an API list
for a kind this hub does not watch yet), asks the decision, and either lets the create run or refuses
with a ``SpawnException`` (HTTP 403, reason ``disk-limit``) before anything is written: the refusal is
logged as an audit record but not written as an Event, and the start is marked rejected so that the
hub's clean-up ``stop()`` writes nothing either.

The read, the decision and the create run under one lock per namespace, so concurrent starts in this
hub cannot both take the last free place. A disk this hub created under the lock counts until a read
under the lock shows it (for at most PENDING_KEPT_S), so a watch cache a moment behind the create cannot
let the next start past the limit. Reading the caches costs no request, so 200 first starts at once do
not take turns at an API list each (issue 19's P4 found exactly that: 10 s of a start spent queueing
behind the lock). Root DataVolumes are listed under the lock once, by the first start that creates a
disk, and watched from then on where CDI is installed (a VM start watches them too); where it is not,
there is none to count. (One hub process per release, as z2jh runs it.)

The spawn form says the same before the click: :func:`form_refusals` lists the disks once when the
form is rendered, and each profile card whose start would create a disk past a limit says why. The
check at the create stays the one that holds (a disk may be made or deleted in between).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from .compat import SpawnException
from .k8s import custom, gateway
from .k8s.errors import is_unavailable
from .k8s.kinds import DATA_VOLUMES
from .lifecycle.limits import DiskLimits, decide_new_disk, pending_disk, start_refusals, with_pending_disks
from .manifests.names import DISK_HOME, DISK_ROOT, LABEL_DISK, LABEL_USER
from .manifests.vm import vm_names
from .runtimes.vm import ROOT_DISKS_WATCH, start_custom_watch

HOME_SELECTOR = f"{LABEL_DISK}={DISK_HOME}"
ROOT_SELECTOR = f"{LABEL_DISK}={DISK_ROOT}"
PENDING_KEPT_S = 60.0  # a disk created here that no watch or list has shown: counted this long
_LOCKS: dict[str, asyncio.Lock] = {}
_PENDING: dict[str, dict[str, tuple[float, Mapping[str, Any]]]] = {}  # namespace -> name -> (at, disk)


async def list_home_claims(api: Any, namespace: str, *, request_timeout: float) -> list[dict[str, Any]]:
    """Every home claim in ``namespace`` (an API list)."""
    claims = await gateway.list_pvcs(api, namespace, HOME_SELECTOR, request_timeout=request_timeout)
    return list(claims.get("items") or [])


async def list_root_disks(api: Any, namespace: str, *, request_timeout: float) -> list[dict[str, Any]]:
    """Every VM root DataVolume in ``namespace`` (an API list; no CDI installed: none)."""
    return await list_root_disks_if_served(namespace, request_timeout=request_timeout) or []


async def list_root_disks_if_served(namespace: str, *, request_timeout: float) -> list[dict[str, Any]] | None:
    """Every VM root DataVolume in ``namespace``, or None when the cluster has no CDI (an API list)."""
    return await custom.list_if_served(
        custom.custom_api(),
        DATA_VOLUMES,
        namespace,
        label_selector=ROOT_SELECTOR,
        request_timeout=request_timeout,
    )


async def list_disks(api: Any, namespace: str, *, request_timeout: float) -> list[dict[str, Any]]:
    """Every home claim and VM root DataVolume in ``namespace``."""
    claims = await list_home_claims(api, namespace, request_timeout=request_timeout)
    return [*claims, *await list_root_disks(api, namespace, request_timeout=request_timeout)]


def _watched(spawner: Any, key: str) -> list[dict[str, Any]] | None:
    """The objects of the spawner's watch cache ``key`` (shared by every server of the hub), or None."""
    reflector = spawner.reflectors.get(spawner._get_reflector_key(key))  # KubeSpawner's class attribute
    return None if reflector is None else list(reflector.resources.values())


async def current_disks(spawner: Any) -> list[dict[str, Any]]:
    """Home claims and root DataVolumes: from the watch caches the runtimes keep (the container start
    watches ``home-claims`` before its disk guard, a VM start ``datavolumes``), else listed."""
    ns, timeout = spawner.namespace, spawner.k8s_api_request_timeout
    claims = _watched(spawner, "home-claims")
    if claims is None:
        claims = await list_home_claims(spawner.api, ns, request_timeout=timeout)
    key, kind, labels = ROOT_DISKS_WATCH  # kind: DATA_VOLUMES
    roots = _watched(spawner, key)
    if roots is None:
        served = await list_root_disks_if_served(ns, request_timeout=timeout)
        roots = served or []
        if served is not None:  # CDI is installed: from now on the limits read a watch cache, as VMs do
            await start_custom_watch(spawner._ports.watch, key, kind, labels)
    return [*claims, *roots]


@contextlib.asynccontextmanager
async def new_disk_guard(spawner: Any, kind: str, disk_name: str) -> AsyncIterator[None]:
    """Around the create of ``spawner``'s new disk ``disk_name`` (``kind``: PersistentVolumeClaim or
    DataVolume): refuses past ``max_disks_per_user`` / ``max_disks_total``, else runs the block."""
    limits = DiskLimits(per_user=spawner.max_disks_per_user, total=spawner.max_disks_total)
    if not (limits.per_user or limits.total):
        yield
        return
    identity = spawner._identity()
    user_label = identity.selector_labels[LABEL_USER]
    async with _LOCKS.setdefault(spawner.namespace, asyncio.Lock()):
        seen = await current_disks(spawner)  # read under the lock: every earlier create has returned
        now = time.monotonic()
        pending = _PENDING.setdefault(spawner.namespace, {})
        disks, still_pending = with_pending_disks(seen, pending, now=now, kept_s=PENDING_KEPT_S)
        pending.clear()
        pending.update(still_pending)
        verdict = decide_new_disk(
            disks, user=identity.user, user_label=user_label, disk_name=disk_name, limits=limits
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
        disk_kind = DISK_ROOT if kind == "DataVolume" else DISK_HOME
        pending[disk_name] = (now, pending_disk(disk_name, disk_kind, identity.user, user_label))


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
