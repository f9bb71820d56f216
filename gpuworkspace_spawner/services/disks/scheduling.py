"""The snapshot worker: takes each disk's scheduled VolumeSnapshots and prunes beyond its keep-count.

Runs inside the disk service (``gpuworkspace-disks``), with its ServiceAccount. The schedule is the one
the spawner stamped on the claim from the profile's ``storage.home.snapshots``
(:mod:`~gpuworkspace_spawner.lifecycle.diskpolicy`). Each pass lists the workspace disks and the
scheduled snapshots, asks :func:`~gpuworkspace_spawner.lifecycle.snapshotschedule.decide_snapshot_due`
per disk, takes the due snapshots (the same code path as an admin's snapshot: audited
``disk-snapshotted``), and only once a new snapshot is ready deletes the older scheduled ones that
:func:`~gpuworkspace_spawner.lifecycle.snapshotschedule.decide_prune` names (audited
``disk-snapshot-pruned``). Fail closed: a snapshot that fails or is not ready in time is audited
``disk-snapshot-failed`` (a Warning Event on the claim) and nothing is deleted. Between passes the
worker watches the disks (a start that stamps a new schedule wakes it) and sleeps until the next disk
is due; it never polls.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from ...k8s import Conflict, KubernetesError, NotFound, gateway, storage
from ...lifecycle.diskops import LABEL_SNAPSHOT_KIND, SNAPSHOT_SCHEDULED, snapshot_name, snapshot_progress
from ...lifecycle.diskpolicy import snapshot_schedule_of_disk
from ...lifecycle.snapshotschedule import DueVerdict, decide_prune, decide_snapshot_due, next_wake
from ..serving import ServiceError
from .operations import DISK_SELECTOR, DiskOperations

log = logging.getLogger("gpuworkspace.disks.snapshots")
Obj = dict[str, Any]
RETRY_S = 10.0


class SnapshotWorker:
    """One per disk service; ``run()`` until cancelled."""

    def __init__(self, ops: DiskOperations, *, resync_s: float = 300) -> None:
        self.ops, self.resync_s = ops, resync_s
        self.caller: Obj = {"kind": "service", "name": ops.settings.service_name}

    @property
    def _ns(self) -> str:
        return self.ops.settings.namespace

    async def _scheduled_snapshots(self) -> list[Obj]:
        listed = await storage.list_snapshots(
            self.ops.api,
            self._ns,
            f"{LABEL_SNAPSHOT_KIND}={SNAPSHOT_SCHEDULED}",
            request_timeout=self.ops._rt,
        )
        return list(listed.get("items") or [])

    async def run_once(self, now: datetime) -> tuple[list[DueVerdict], str]:
        """One pass: the verdicts (for the next wake-up) and the claims' list resourceVersion (to watch from)."""
        listed = await gateway.list_pvcs(self.ops.api, self._ns, DISK_SELECTOR, request_timeout=self.ops._rt)
        claims = list(listed.get("items") or [])
        snapshots = await self._scheduled_snapshots()
        verdicts = [decide_snapshot_due(c, snapshots, now=now) for c in claims]
        due = []
        for claim, verdict in zip(claims, verdicts, strict=True):
            if verdict.action == "invalid":
                log.warning("%s", verdict.reason)
            elif verdict.action == "snapshot":
                log.info("%s", verdict.reason)
                due.append(claim)
        await asyncio.gather(*(self.snapshot(claim, snapshots, now) for claim in due))
        version = str((listed.get("metadata") or {}).get("resourceVersion") or "")
        return verdicts, version

    async def snapshot(self, claim: Obj, snapshots: list[Obj], now: datetime) -> bool:
        """Take one scheduled snapshot of ``claim``; prune only once it is ready. Never raises."""
        name = str(claim["metadata"]["name"])
        snap_name = snapshot_name(name, now, SNAPSHOT_SCHEDULED)
        schedule = snapshot_schedule_of_disk(claim).schedule
        # never wait past the next one's due time: one slow snapshot must not hold the other disks back
        wait_s = min(self.ops.settings.snapshot_timeout_s, schedule.every_s if schedule else RETRY_S)
        try:
            snap, ready = await self.ops._take_snapshot(
                self.caller, claim, snap_name, SNAPSHOT_SCHEDULED, timeout_s=wait_s
            )
        except (ServiceError, KubernetesError) as exc:
            await self._failed(claim, snap_name, f"could not be created: {exc}")
            return False
        if not ready:
            await self._failed(claim, snap_name, f"was not ready in time: {snapshot_progress(snap)[1]}")
            return False
        if schedule is not None:
            for prune in decide_prune(name, [*snapshots, snap], keep=schedule.keep):
                await self._prune(claim, [*snapshots, snap], prune.name, prune.reason)
        return True

    async def _failed(self, claim: Obj, snap_name: str, why: str) -> None:
        message = f"Scheduled snapshot {snap_name} {why}; no older snapshot was deleted"
        log.warning("%s: %s", claim["metadata"]["name"], message)
        await self.ops.audit("disk-snapshot-failed", claim, message, self.caller, snapshot=snap_name)

    async def _prune(self, claim: Obj, snapshots: list[Obj], name: str, reason: str) -> None:
        uid = next(
            (str(s["metadata"].get("uid", "")) for s in snapshots if s["metadata"]["name"] == name), ""
        )
        try:
            await storage.delete_snapshot(self.ops.api, self._ns, name, uid=uid, request_timeout=self.ops._rt)
        except (Conflict, NotFound):
            return  # gone or replaced since the list: nothing of ours to delete
        except KubernetesError as exc:
            log.warning("Could not delete scheduled snapshot %s: %s", name, exc)
            return
        message = f"Scheduled snapshot {name} deleted: {reason}"
        await self.ops.audit("disk-snapshot-pruned", claim, message, self.caller, snapshot=name)

    async def run(self) -> None:
        """Pass, then watch the disks until a change or the next due time; errors are logged and retried."""
        while True:
            now = datetime.now(UTC)
            try:
                verdicts, version = await self.run_once(now)
                wait_s = next_wake(verdicts, datetime.now(UTC), at_most_s=self.resync_s)
                await gateway.wait_for_claim_change(
                    self.ops.api, self._ns, DISK_SELECTOR, version, max(1, round(wait_s))
                )
            except KubernetesError as exc:
                log.warning("Snapshot schedule pass failed (%s); retrying in %.0fs", exc, RETRY_S)
                await asyncio.sleep(RETRY_S)
            except Exception:  # a background task that died would stop every schedule, silently
                log.exception("Snapshot schedule pass failed; retrying in %.0fs", RETRY_S)
                await asyncio.sleep(RETRY_S)
