"""The disk operations: fetch from the cluster, ask :mod:`~gpuworkspace_spawner.lifecycle.diskops`, act, audit.

Stateless (Kubernetes is the database): every call reads what it needs. Each operation writes audit
records (JSON log line + Event on the claim) naming the caller, the workspace, profile, catalog version
and disk. Failures the caller can act on are :class:`ServiceError` with an HTTP status.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ...audit import Action, AuditRecord, write_audit
from ...catalog import CatalogSource
from ...k8s import Conflict, KubernetesError, NotFound, gateway, storage
from ...k8s.kinds import DATA_VOLUMES, VIRTUAL_MACHINES, Kind
from ...lifecycle.diskops import (
    DISK_KINDS,
    DISK_ROOT,
    LABEL_SNAPSHOT_OF,
    SNAPSHOT_MANUAL,
    SNAPSHOT_SAFETY,
    SizeLimit,
    SnapshotKind,
    Verdict,
    build_restored_claim,
    build_snapshot,
    claim_users,
    decide_reclaim_now,
    decide_resize,
    decide_resize_progress,
    decide_restore,
    disk_kind,
    ours,
    parse_size,
    snapshot_name,
    snapshot_progress,
)
from ...lifecycle.rootdisks import restore_refusal
from ...manifests.names import (
    ANN_CATALOG_VERSION,
    ANN_PROFILE,
    LABEL_DISK,
    LABEL_PROFILE,
    LABEL_USER,
    label_value,
)
from .. import access
from ..serving import ServiceError
from . import rootdisks
from .metrics import VolumeStats
from .views import Related, owner, snapshot_view, workspace_item

log = logging.getLogger("gpuworkspace.disks")
Obj = dict[str, Any]
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_STATUS = {"invalid": 400, "conflict": 409}
DISK_SELECTOR = f"{LABEL_DISK} in ({','.join(DISK_KINDS)})"  # every workspace disk


@dataclass(frozen=True)
class Settings:
    namespace: str = "gpu-workspaces"
    service_name: str = "gpuworkspace-disks"
    snapshot_class: str | None = None  # None: the cluster's default VolumeSnapshotClass
    max_factor: int = 4
    resize_timeout_s: float = 60
    snapshot_timeout_s: float = 300
    delete_timeout_s: float = 120
    bind_timeout_s: float = 300
    request_timeout_s: float = 30
    events: bool = True
    owner_snapshots_max: int = 10  # manual snapshots an owner may keep of one disk (admins: no limit)


class DiskOperations:
    def __init__(
        self, api: Any, settings: Settings, catalog: CatalogSource | None, stats: VolumeStats | None
    ) -> None:
        self.api, self.settings, self.catalog, self.stats = api, settings, catalog, stats

    # ------------------------------------------------------------------------ reading
    @property
    def _rt(self) -> float:
        return self.settings.request_timeout_s

    async def claims(self) -> list[Obj]:
        listed = await gateway.list_pvcs(
            self.api, self.settings.namespace, DISK_SELECTOR, request_timeout=self._rt
        )
        return sorted(listed["items"], key=lambda c: c["metadata"]["name"])

    async def _custom_list(self, kind: Kind) -> list[Obj]:
        return await storage.list_custom(self.api, self.settings.namespace, kind, request_timeout=self._rt)

    async def _related(self, claims: list[Obj]) -> Related:
        pods = await gateway.list_pods(self.api, self.settings.namespace, "", request_timeout=self._rt)
        vmis = await storage.list_vmis(self.api, self.settings.namespace, request_timeout=self._rt)
        vms, dvs = [], []
        if any(disk_kind(c) == DISK_ROOT for c in claims):
            vms, dvs = await self._custom_list(VIRTUAL_MACHINES), await self._custom_list(DATA_VOLUMES)
        return Related(pods=pods["items"], vms=vms, vmis=vmis, data_volumes=dvs)

    async def _users(self, claim: str) -> list[str]:
        pods = await gateway.list_pods(self.api, self.settings.namespace, "", request_timeout=self._rt)
        vmis = await storage.list_vmis(self.api, self.settings.namespace, request_timeout=self._rt)
        return claim_users(claim, pods["items"], vmis)

    async def refresh_stats(self) -> None:
        if self.stats is not None:
            try:
                await self.stats.refresh(await storage.list_nodes(self.api, request_timeout=self._rt))
            except KubernetesError as exc:
                log.warning("Cannot list nodes for volume stats: %s", exc)

    async def workspaces(self, caller: Obj, user: str | None = None, server: str | None = None) -> list[Obj]:
        """Every workspace disk the caller may see (optionally one user's, one server's)."""
        claims = await self.claims()
        if user is not None:
            claims = [c for c in claims if owner(c)[0] == user and (server is None or owner(c)[1] == server)]
        name = self.settings.service_name
        claims = [c for c in claims if access.may_read(caller, owner(c)[0], service=name)]
        await self.refresh_stats()
        related, now = await self._related(claims), datetime.now(UTC)
        usage = self.stats.usage if self.stats is not None else {}
        ns = self.settings.namespace
        return [workspace_item(c, related, usage.get((ns, c["metadata"]["name"])), now=now) for c in claims]

    async def claim(self, name: str) -> Obj:
        try:
            return await gateway.read_pvc(self.api, self.settings.namespace, name, request_timeout=self._rt)
        except NotFound:
            raise ServiceError(404, f"no claim {name} in namespace {self.settings.namespace}") from None

    async def readable_claim(self, caller: Obj, name: str) -> Obj:
        claim = await self.claim(name)
        if disk_kind(claim) is None or LABEL_USER not in (claim["metadata"].get("labels") or {}):
            raise ServiceError(404, f"claim {name} is not a workspace disk")
        if not access.may_read(caller, owner(claim)[0], service=self.settings.service_name):
            raise ServiceError(403, f"{access.who(caller)} may not see the disks of {owner(claim)[0]}")
        return claim

    async def changeable_claim(self, caller: Obj, name: str, doing: str) -> Obj:
        """The claim ``name`` if the caller may change it (an admin, or its owner): 404/403 first."""
        claim = await self.readable_claim(caller, name)
        who, service = owner(claim)[0], self.settings.service_name
        if not access.may_change(caller, who, service=service):
            raise ServiceError(
                403,
                f"{doing} {who}'s disk needs admin:servers or {who}'s own servers scope; "
                f"{access.who(caller)} lacks both",
            )
        return claim

    async def _refuse_owner_snapshot_beyond_limit(self, caller: Obj, claim: Obj) -> None:
        """An owner keeps at most ``owner_snapshots_max`` manual snapshots of a disk (admins: no limit)."""
        if access.is_admin(caller):
            return
        name, limit = claim["metadata"]["name"], self.settings.owner_snapshots_max
        manual = [s for s in await self.snapshots(caller, name) if s.get("kind") == SNAPSHOT_MANUAL]
        if len(manual) >= limit:
            raise ServiceError(
                409,
                f"{name} already has {len(manual)} manual snapshots, the most its owner may keep "
                f"({limit}); an admin can delete old ones",
            )

    def require_admin(self, caller: Obj, what: str) -> None:
        if not access.is_admin(caller):
            raise ServiceError(403, f"{what} needs the admin:servers scope; {access.who(caller)} lacks it")

    # ------------------------------------------------------------------------ audit
    def _record(self, action: Action, claim: Obj, message: str, caller: Obj, **details: Any) -> AuditRecord:
        meta = claim.get("metadata") or {}
        user, server = owner(claim)
        annotations = meta.get("annotations") or {}
        return AuditRecord(
            action=action,
            user=user,
            server=server,
            namespace=self.settings.namespace,
            kind="PersistentVolumeClaim",
            name=str(meta.get("name", "")),
            message=message,
            profile=str(annotations.get(ANN_PROFILE, "")),
            catalog_version=str(annotations.get(ANN_CATALOG_VERSION, "")),
            uid=str(meta.get("uid", "")),
            details={"disk": disk_kind(claim), **details},
            actor=access.who(caller),
        )

    async def audit(self, action: Action, claim: Obj, message: str, caller: Obj, **details: Any) -> None:
        record = self._record(action, claim, message, caller, **details)
        await write_audit(record, api=self.api if self.settings.events else None, request_timeout=self._rt)

    async def _refuse(self, verdict: Verdict, claim: Obj, caller: Obj, operation: str) -> ServiceError:
        await self.audit("disk-operation-refused", claim, f"{operation} refused: {verdict.reason}", caller)
        return ServiceError(_STATUS.get(verdict.refusal or "conflict", 409), verdict.reason)

    # ------------------------------------------------------------------------ resize
    def size_limit(self, claim: Obj) -> SizeLimit:
        profile_slug = (claim["metadata"].get("annotations") or {}).get(ANN_PROFILE) or (
            claim["metadata"].get("labels") or {}
        ).get(LABEL_PROFILE)
        profile = self.catalog.current().get(str(profile_slug)) if self.catalog and profile_slug else None
        if profile is None:
            return SizeLimit(None, None, self.settings.max_factor)
        if disk_kind(claim) == DISK_ROOT:
            vm = profile.vm
            size = getattr(vm, "root_disk_size", None)
            return SizeLimit(size, getattr(vm, "root_disk_max_size", None), self.settings.max_factor)
        home = profile.storage.home
        return SizeLimit(home.size, getattr(home, "max_size", None), self.settings.max_factor)

    async def _expandable(self, claim: Obj) -> bool | None:
        name = (claim.get("spec") or {}).get("storageClassName")
        if not name:
            return None
        try:
            sc = await storage.read_storage_class(self.api, name, request_timeout=self._rt)
        except NotFound:
            return None
        return bool(sc.get("allowVolumeExpansion"))

    async def resize(self, caller: Obj, name: str, size: str) -> Obj:
        claim = await self.changeable_claim(caller, name, "resizing")
        verdict = decide_resize(
            claim, size, limit=self.size_limit(claim), expandable=await self._expandable(claim)
        )
        if not verdict.allowed:
            raise await self._refuse(verdict, claim, caller, "resize")
        in_use = bool(await self._users(name))
        before = claim["spec"]["resources"]["requests"]["storage"]
        patch = {"spec": {"resources": {"requests": {"storage": size}}}}
        claim = await gateway.patch_pvc(
            self.api, self.settings.namespace, name, patch, request_timeout=self._rt
        )
        details = {"from": before, "to": size, "maxSize": verdict.max_size}
        await self.audit(
            "disk-resize-requested", claim, f"Disk resize {before} -> {size} requested", caller, **details
        )
        want = parse_size(size) or 0
        try:
            claim = (
                await storage.wait_for_claim(
                    self.api,
                    self.settings.namespace,
                    name,
                    lambda c: c is None or decide_resize_progress(c, want, in_use=in_use) != "waiting",
                    timeout_s=self.settings.resize_timeout_s,
                    request_timeout=self._rt,
                )
                or claim
            )
        except TimeoutError:
            return _resize_answer(
                claim, "in-progress", f"still resizing after {self.settings.resize_timeout_s:.0f}s"
            )
        progress = decide_resize_progress(claim, want, in_use=in_use)
        if progress == "done":
            message = f"Disk resized {before} -> {size}"
            await self.audit("disk-resized", claim, message, caller, **details)
            return _resize_answer(claim, "resized", message)
        message = f"Volume grown to {size}; the file system grows at the next start of the workspace"
        await self.audit("disk-resized", claim, message, caller, **details)
        return _resize_answer(claim, "pending-restart", message)

    # ------------------------------------------------------------------------ snapshots
    async def snapshots(self, caller: Obj, name: str) -> list[Obj]:
        await self.readable_claim(caller, name)
        listed = await storage.list_snapshots(
            self.api,
            self.settings.namespace,
            f"{LABEL_SNAPSHOT_OF}={label_value(name)}",
            request_timeout=self._rt,
        )
        items = [
            s
            for s in listed.get("items") or []
            if (s.get("spec") or {}).get("source", {}).get("persistentVolumeClaimName") == name
        ]
        return [
            snapshot_view(s) for s in sorted(items, key=lambda s: s["metadata"].get("creationTimestamp", ""))
        ]

    async def _take_snapshot(
        self, caller: Obj, claim: Obj, name: str, kind: SnapshotKind, timeout_s: float | None = None
    ) -> tuple[Obj, bool]:
        body = build_snapshot(
            claim, name=name, kind=kind, by=access.who(caller), snapshot_class=self.settings.snapshot_class
        )
        try:
            snap = await storage.create_snapshot(
                self.api, self.settings.namespace, body, request_timeout=self._rt
            )
        except Conflict:
            raise ServiceError(409, f"a snapshot named {name} already exists") from None
        try:
            snap = (
                await storage.wait_for_snapshot(
                    self.api,
                    self.settings.namespace,
                    name,
                    lambda s: s is None or snapshot_progress(s)[0] == "ready",
                    timeout_s=self.settings.snapshot_timeout_s if timeout_s is None else timeout_s,
                    request_timeout=self._rt,
                )
                or snap
            )
        except TimeoutError:
            return snap, False
        ready = snapshot_progress(snap)[0] == "ready"
        if ready:
            message = f"Snapshot {name} of the disk taken ({kind}), restore size {snap['status'].get('restoreSize')}"
            await self.audit("disk-snapshotted", claim, message, caller, snapshot=name, snapshotKind=kind)
        return snap, ready

    async def snapshot(self, caller: Obj, name: str, snapshot: str | None) -> tuple[Obj, bool]:
        claim = await self.changeable_claim(caller, name, "snapshotting")
        base = ours(claim)
        if not base.allowed:
            raise await self._refuse(base, claim, caller, "snapshot")
        await self._refuse_owner_snapshot_beyond_limit(caller, claim)
        snap_name = snapshot or snapshot_name(name, datetime.now(UTC), SNAPSHOT_MANUAL)
        if not _DNS_SUBDOMAIN.fullmatch(snap_name):
            raise ServiceError(400, f"snapshot name {snap_name!r} is not a valid object name (DNS subdomain)")
        snap, ready = await self._take_snapshot(caller, claim, snap_name, SNAPSHOT_MANUAL)
        return snapshot_view(snap), ready

    # ------------------------------------------------------------------------ restore
    async def _read_snapshot(self, name: str) -> Obj | None:
        try:
            return await storage.read_snapshot(
                self.api, self.settings.namespace, name, request_timeout=self._rt
            )
        except NotFound:
            return None

    async def restore(self, caller: Obj, name: str, snapshot: str) -> Obj:
        claim = await self.changeable_claim(caller, name, "restoring")
        root_refusal = restore_refusal(claim)
        if root_refusal:
            raise await self._refuse(Verdict(False, root_refusal, "conflict"), claim, caller, "restore")
        source = await self._read_snapshot(snapshot)
        verdict = decide_restore(claim, source, users=await self._users(name))
        if not verdict.allowed:
            if source is None:
                raise ServiceError(404, f"no snapshot {snapshot} in namespace {self.settings.namespace}")
            raise await self._refuse(verdict, claim, caller, "restore")
        assert source is not None
        safety_name = snapshot_name(name, datetime.now(UTC), SNAPSHOT_SAFETY)
        _, ready = await self._take_snapshot(caller, claim, safety_name, SNAPSHOT_SAFETY)
        if not ready:
            raise ServiceError(
                504, f"the safety snapshot {safety_name} was not ready in time; nothing was changed"
            )
        claim = await self.claim(name)  # again: a start may have begun meanwhile
        verdict = decide_restore(claim, source, users=await self._users(name))
        if not verdict.allowed:
            raise await self._refuse(verdict, claim, caller, "restore")
        details = {"snapshot": snapshot, "safetySnapshot": safety_name}
        message = (
            f"Restoring the disk from snapshot {snapshot}; its previous content is in snapshot {safety_name}"
        )
        await self.audit("disk-restore-started", claim, message, caller, **details)
        return await self._replace_claim(caller, claim, source, details)

    async def _replace_claim(self, caller: Obj, claim: Obj, source: Obj, details: dict[str, Any]) -> Obj:
        meta, ns, safety = claim["metadata"], self.settings.namespace, details["safetySnapshot"]
        try:
            await gateway.delete_pvc(
                self.api,
                ns,
                meta["name"],
                uid=meta["uid"],
                resource_version=meta["resourceVersion"],
                request_timeout=self._rt,
            )
        except (Conflict, NotFound) as exc:
            raise ServiceError(
                409,
                f"the claim changed before it could be replaced ({exc.message}); nothing was deleted; retry",
            ) from None
        try:
            await storage.wait_for_claim(
                self.api,
                ns,
                meta["name"],
                lambda c: c is None or c["metadata"].get("uid") != meta["uid"],
                timeout_s=self.settings.delete_timeout_s,
                request_timeout=self._rt,
            )
            body = build_restored_claim(claim, source, now=datetime.now(UTC), by=access.who(caller))
            new = await gateway.create_pvc(self.api, ns, body, request_timeout=self._rt)
            new = await self._wait_bound(new) or new
        except (KubernetesError, TimeoutError) as exc:
            message = f"Restore of {meta['name']} failed after the old claim was deleted: {exc}. The previous content is in snapshot {safety}: restore from it"
            await self.audit("disk-restore-failed", claim, message, caller, **details)
            raise ServiceError(500, message) from exc
        message = f"Disk restored from snapshot {source['metadata']['name']} (previous content in snapshot {safety})"
        await self.audit("disk-restored", new, message, caller, **details)
        return {
            "claim": meta["name"],
            "restoredFrom": source["metadata"]["name"],
            "safetySnapshot": safety,
            "phase": (new.get("status") or {}).get("phase"),
            "message": message,
        }

    async def _wait_bound(self, claim: Obj) -> Obj | None:
        class_name = (claim.get("spec") or {}).get("storageClassName")
        if class_name:
            with contextlib.suppress(NotFound):
                sc = await storage.read_storage_class(self.api, class_name, request_timeout=self._rt)
                if sc.get("volumeBindingMode") == "WaitForFirstConsumer":
                    return claim  # binds when the workspace starts
        return await storage.wait_for_claim(
            self.api,
            self.settings.namespace,
            claim["metadata"]["name"],
            lambda c: c is not None and (c.get("status") or {}).get("phase") == "Bound",
            timeout_s=self.settings.bind_timeout_s,
            request_timeout=self._rt,
        )

    # ------------------------------------------------------------------------ reclaim
    async def reclaim(self, caller: Obj, name: str) -> Obj:
        self.require_admin(caller, "reclaiming a disk")
        claim = await self.claim(name)
        if disk_kind(claim) == DISK_ROOT:
            return await rootdisks.reclaim(self, caller, claim)
        verdict = decide_reclaim_now(claim, users=await self._users(name))
        if not verdict.allowed:
            raise await self._refuse(verdict, claim, caller, "reclaim")
        meta = claim["metadata"]
        try:
            await gateway.delete_pvc(
                self.api,
                self.settings.namespace,
                name,
                uid=meta["uid"],
                resource_version=meta["resourceVersion"],
                request_timeout=self._rt,
            )
        except (Conflict, NotFound) as exc:
            raise ServiceError(
                409, f"claim {name} changed since the decision ({exc.message}); not deleted"
            ) from None
        message = f"Retained disk deleted by an administrator before its retention ended: {verdict.reason}"
        await self.audit("disk-reclaimed", claim, message, caller)
        return {"claim": name, "deleted": True, "message": message}


def _resize_answer(claim: Obj, result: str, message: str) -> Obj:
    return {
        "claim": claim["metadata"]["name"],
        "result": result,
        "size": claim["spec"]["resources"]["requests"]["storage"],
        "capacity": ((claim.get("status") or {}).get("capacity") or {}).get("storage"),
        "message": message,
    }
