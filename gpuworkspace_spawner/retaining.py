"""Server deletion: retain every disk the server owns (the thin shell around :mod:`.lifecycle.serverdisks`).

``GPUWorkspaceSpawner.delete_forever`` calls :func:`retain_server_disks`. It lists the namespace's home
claims and root DataVolumes carrying the workspace's selector labels (the API, not a watch cache: a
disk of a runtime this hub process never ran is found too), asks
:func:`~gpuworkspace_spawner.lifecycle.serverdisks.decide_server_disks` which are this server's, and
writes the retention patch on each: a home claim; a root DataVolume **and** the claim CDI made for it
(CDI copied the DataVolume's labels onto the claim once, at creation). When the server has a root disk,
its VM, Service and cloud-init Secret are deleted as well (compute, never a disk). Each disk's audit
record is written as soon as its retention is.

A removal cut short: JupyterHub runs ``delete_forever`` in a task it does not await (``DELETE
…/servers/<name>`` with ``remove`` answers once the *stop* is done), and a hub shutting down cancels
every pending task, that one included (``JupyterHub.shutdown_cancel_tasks``). Its database then still
has the server, stopped, and no trace of the removal asked for; nothing runs it again. This module cannot
finish a removal only the request knew of, so it reports it: a warning in the hub log names the server,
the disks retained so far and what to do (repeat the removal: disks already retained are skipped, their
retention not extended; the VM objects are deleted again if need be).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime
from typing import Any

from .k8s import NotFound, custom, gateway
from .k8s.kinds import DATA_VOLUMES, VIRTUAL_MACHINES
from .lifecycle.diskpolicy import retention_of_disk
from .lifecycle.retention import retain_until
from .lifecycle.serverdisks import ServerDisk, decide_server_disks, disks_to_retain, owns_a_vm_disk
from .manifests.names import DISK_HOME, DISK_ROOT, LABEL_DISK
from .manifests.pvc import build_retain_patch
from .manifests.vm import vm_names


def _selector(labels: dict[str, str], disk: str) -> str:
    return ",".join([*(f"{k}={v}" for k, v in sorted(labels.items())), f"{LABEL_DISK}={disk}"])


async def find_server_disks(
    spawner: Any, *, home_shared: bool
) -> tuple[list[ServerDisk], dict[tuple[str, str], dict[str, Any]]]:
    """What deleting ``spawner``'s server does with each disk found for it (decided from the objects),
    and the objects read, by (kind, name)."""
    identity, timeout = spawner._identity(), spawner.k8s_api_request_timeout
    claims = await gateway.list_pvcs(
        spawner.api,
        spawner.namespace,
        _selector(identity.selector_labels, DISK_HOME),
        request_timeout=timeout,
    )
    data_volumes = await custom.list_namespaced(
        custom.custom_api(),
        DATA_VOLUMES,
        spawner.namespace,
        label_selector=_selector(identity.selector_labels, DISK_ROOT),
        request_timeout=timeout,
    )
    items = claims.get("items") or []
    objects = {("PersistentVolumeClaim", c["metadata"]["name"]): c for c in items}
    objects |= {("DataVolume", dv["metadata"]["name"]): dv for dv in data_volumes}
    decisions = decide_server_disks(
        identity, claims=items, data_volumes=data_volumes, home_shared=home_shared
    )
    return decisions, objects


async def _retain(spawner: Any, disk: ServerDisk, patch: dict[str, Any]) -> dict[str, Any] | None:
    """Write ``patch`` on the disk (a root disk: its DataVolume, then its claim); None when it is gone."""
    timeout, ns = spawner.k8s_api_request_timeout, spawner.namespace
    try:
        if disk.kind == "PersistentVolumeClaim":
            claim: dict[str, Any] = await gateway.patch_pvc(
                spawner.api, ns, disk.name, patch, request_timeout=timeout
            )
            return claim
        dv: dict[str, Any] = await custom.patch(
            custom.custom_api(), DATA_VOLUMES, ns, disk.name, patch, request_timeout=timeout
        )
    except NotFound:
        return None
    # no claim yet: CDI copies the DataVolume's (now retained) labels when it creates it
    with contextlib.suppress(NotFound):
        await gateway.patch_pvc(spawner.api, ns, disk.name, patch, request_timeout=timeout)
    return dv


async def _delete_vm_compute(spawner: Any) -> None:
    names, timeout = vm_names(spawner._identity()), spawner.k8s_api_request_timeout
    await custom.delete_unconditionally(
        custom.custom_api(), VIRTUAL_MACHINES, spawner.namespace, names.vm, request_timeout=timeout
    )
    await custom.delete_core(spawner.namespace, "service", names.service, request_timeout=timeout)
    await custom.delete_core(spawner.namespace, "secret", names.secret, request_timeout=timeout)


async def retain_server_disks(
    spawner: Any, now: datetime, why: str, *, hub_days: float, home_shared: bool, vm: bool
) -> list[ServerDisk]:
    """Retain every disk of ``spawner``'s server, each for the retention stamped on it at its last start
    (the profile's) or the hub's ``hub_days``; the disks retained now.

    ``vm``: the server last ran as a VM (its VM objects are deleted even when no root disk is found)."""
    retained: list[ServerDisk] = []
    try:
        decisions, objects = await find_server_disks(spawner, home_shared=home_shared)
        for skipped in (d for d in decisions if d.action == "skip"):
            spawner.log.info(
                "Not retaining %s %s for %s: %s",
                skipped.kind,
                skipped.name,
                spawner._log_name,
                skipped.reason,
            )
        for disk in disks_to_retain(decisions):
            retention = retention_of_disk(objects.get((disk.kind, disk.name)), hub_days)
            spawner.log.info("Retention of %s %s: %s", disk.kind, disk.name, retention.reason)
            until = retain_until(now, retention.period)
            obj = await _retain(spawner, disk, build_retain_patch(retain_until=until, now=now, why=why))
            if obj is None:
                spawner.log.info("%s %s of %s was deleted meanwhile", disk.kind, disk.name, spawner._log_name)
                continue
            retained.append(disk)
            what = "Root disk" if disk.disk == DISK_ROOT else "Home disk"
            message = f"{what} retained until {until:%Y-%m-%d %H:%M:%S} UTC"
            if disk.disk == DISK_ROOT:
                message += "; its VM, Service and Secret are deleted next"
            await spawner._audit("disk-retained", disk.kind, disk.name, message, obj)
        if vm or owns_a_vm_disk(decisions):
            await _delete_vm_compute(spawner)
    except asyncio.CancelledError:
        spawner.log.warning(removal_cut_short(spawner._log_name, retained))
        raise
    if not retained:
        spawner.log.info("No disk of %s to retain", spawner._log_name)
    return retained


def removal_cut_short(server: str, retained: list[ServerDisk]) -> str:
    """The hub log's report of a removal cancelled mid-way (the hub shutting down)."""
    done = ", ".join(f"{d.kind} {d.name}" for d in retained) or "none"
    return (
        f"The removal of {server} was cut short (the hub is shutting down): JupyterHub keeps the server, "
        f"stopped, and will not finish the removal. Disks retained so far: {done}. Delete the server "
        "again (DELETE .../servers/<name> with remove): it is safe to repeat; disks already retained keep "
        "their date"
    )
