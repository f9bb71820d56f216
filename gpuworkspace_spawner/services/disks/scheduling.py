"""The snapshot worker: takes each disk's scheduled VolumeSnapshots and prunes beyond its keep-count.

Runs inside the disk service (``gpuworkspace-disks``), with its ServiceAccount. The schedule is the one
the spawner stamped on the claim from the profile's ``storage.home.snapshots``
(:mod:`~gpuworkspace_spawner.lifecycle.diskpolicy`). It keeps the workspace disks and the scheduled
snapshots in watch caches (listed once, then watched: a pass per new disk used to list both, so 200 starts
at once made 200 growing lists, issue 19's P4). Each pass asks :func:`~gpuworkspace_spawner.lifecycle.snapshotschedule.decide_snapshot_due`
per disk, takes the due snapshots (the same code path as an admin's snapshot: audited
``disk-snapshotted``), and only once a new snapshot is ready deletes the older scheduled ones that
:func:`~gpuworkspace_spawner.lifecycle.snapshotschedule.decide_prune` names (audited
``disk-snapshot-pruned``). Fail closed: a snapshot that fails or is not ready in time is audited
``disk-snapshot-failed`` (a Warning Event on the claim) and nothing is deleted. Between passes the
worker waits for a change of a disk (a start that stamps a new schedule wakes it) or the next disk's due
time; it never polls.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from ...k8s import Conflict, KubernetesError, NotFound, storage
from ...k8s.kinds import VOLUME_SNAPSHOTS
from ...k8s.observing import ObjectWatch, custom_watch
from ...lifecycle.diskops import LABEL_SNAPSHOT_KIND, SNAPSHOT_SCHEDULED, snapshot_name, snapshot_progress
from ...lifecycle.diskpolicy import snapshot_schedule_of_disk
from ...lifecycle.snapshotschedule import DueVerdict, decide_prune, decide_snapshot_due, next_wake
from ..serving import ServiceError
from .operations import DISK_SELECTOR, DiskOperations

log = logging.getLogger("gpuworkspace.disks.snapshots")
Obj = dict[str, Any]
RETRY_S = 10.0
SCHEDULED_SELECTOR = f"{LABEL_SNAPSHOT_KIND}={SNAPSHOT_SCHEDULED}"


class SnapshotWorker:
    """One per disk service; ``run()`` until cancelled."""

    def __init__(self, ops: DiskOperations, *, resync_s: float = 300) -> None:
        self.ops, self.resync_s = ops, resync_s
        self.caller: Obj = {"kind": "service", "name": ops.settings.service_name}

    @property
    def _ns(self) -> str:
        return self.ops.settings.namespace

    def _watches(self) -> tuple[ObjectWatch, ObjectWatch]:
        """The disks and the scheduled snapshots, each listed once and then watched."""
        claims = ObjectWatch(
            "list_namespaced_persistent_volume_claim", log, args=(self._ns,), label_selector=DISK_SELECTOR
        )
        return claims, custom_watch(log, VOLUME_SNAPSHOTS, self._ns, SCHEDULED_SELECTOR)

    async def pass_over(
        self, claims: list[Obj], snapshots: dict[str, Obj], now: datetime
    ) -> list[DueVerdict]:
        """One pass over the disks: the verdicts (for the next wake-up). ``snapshots`` (the watch cache, keyed
        ``namespace/name``) gets the snapshots this pass took and loses those it pruned, so the next pass
        does not take a disk's snapshot again before the watch has shown it."""
        known = list(snapshots.values())
        verdicts = [decide_snapshot_due(c, known, now=now) for c in claims]
        due = []
        for claim, verdict in zip(claims, verdicts, strict=True):
            if verdict.action == "invalid":
                log.warning("%s", verdict.reason)
            elif verdict.action == "snapshot":
                log.info("%s", verdict.reason)
                due.append(claim)
        taken = await asyncio.gather(*(self.snapshot(claim, known, now) for claim in due))
        for made, pruned in taken:
            if made is not None:
                snapshots[f"{self._ns}/{made['metadata']['name']}"] = made
            for name in pruned:
                snapshots.pop(f"{self._ns}/{name}", None)
        return verdicts

    async def snapshot(self, claim: Obj, snapshots: list[Obj], now: datetime) -> tuple[Obj | None, list[str]]:
        """Take one scheduled snapshot of ``claim``; prune only once it is ready. Never raises. The snapshot
        taken (None when none was) and the names pruned."""
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
            return None, []
        if not ready:
            await self._failed(claim, snap_name, f"was not ready in time: {snapshot_progress(snap)[1]}")
            return snap, []
        pruned = []
        if schedule is not None:
            for prune in decide_prune(name, [*snapshots, snap], keep=schedule.keep):
                if await self._prune(claim, [*snapshots, snap], prune.name, prune.reason):
                    pruned.append(prune.name)
        return snap, pruned

    async def _failed(self, claim: Obj, snap_name: str, why: str) -> None:
        message = f"Scheduled snapshot {snap_name} {why}; no older snapshot was deleted"
        log.warning("%s: %s", claim["metadata"]["name"], message)
        await self.ops.audit("disk-snapshot-failed", claim, message, self.caller, snapshot=snap_name)

    async def _prune(self, claim: Obj, snapshots: list[Obj], name: str, reason: str) -> bool:
        uid = next(
            (str(s["metadata"].get("uid", "")) for s in snapshots if s["metadata"]["name"] == name), ""
        )
        try:
            await storage.delete_snapshot(self.ops.api, self._ns, name, uid=uid, request_timeout=self.ops._rt)
        except (Conflict, NotFound):
            return False  # gone or replaced since the list: nothing of ours to delete
        except KubernetesError as exc:
            log.warning("Could not delete scheduled snapshot %s: %s", name, exc)
            return False
        message = f"Scheduled snapshot {name} deleted: {reason}"
        await self.ops.audit("disk-snapshot-pruned", claim, message, self.caller, snapshot=name)
        return True

    async def run(self) -> None:
        """Pass over the disks at every change of one (a start that stamps a new schedule) and when the next
        is due, from watch caches: a burst of new disks costs no list each. Errors are logged and retried."""
        claims, snapshots = self._watches()
        try:
            while True:
                try:
                    await claims.ready(self.ops._rt)
                    await snapshots.ready(self.ops._rt)
                    seen = claims.changes
                    verdicts = await self.pass_over(
                        list(claims.objects.values()), snapshots.objects, datetime.now(UTC)
                    )
                    wait_s = next_wake(verdicts, datetime.now(UTC), at_most_s=self.resync_s)
                    await claims.next_change(seen, wait_s)
                except KubernetesError as exc:
                    log.warning("Snapshot schedule pass failed (%s); retrying in %.0fs", exc, RETRY_S)
                    await asyncio.sleep(RETRY_S)
                except Exception:  # a background task that died would stop every schedule, silently
                    log.exception("Snapshot schedule pass failed; retrying in %.0fs", RETRY_S)
                    await asyncio.sleep(RETRY_S)
        finally:
            await asyncio.gather(claims.stop(), snapshots.stop())
