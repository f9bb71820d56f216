"""The spawner's side of the runtimes' ports (:class:`~gpuworkspace_spawner.runtimes.context.Ports`).

A thin adapter over the GPUWorkspaceSpawner: KubeSpawner's API client, reflectors and pod machinery,
the spawner's audit records (a JSON log line, and an Event as ``audit_events`` asks), its disk limits (:mod:`.limiting`) and disk retention (:mod:`.retaining`). It
holds no state of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .audit import START_ACTIONS, Action, AuditRecord, log_audit, write_audit
from .lifecycle.spawning import containers_running
from .limiting import new_disk_guard
from .manifests.provenance import build_start_details
from .retaining import retain_server_disks

if TYPE_CHECKING:
    from .spawner import GPUWorkspaceSpawner


class SpawnerPorts:
    """What a runtime may use of ``spawner``."""

    def __init__(self, spawner: GPUWorkspaceSpawner) -> None:
        self._spawner = spawner

    @property
    def api(self) -> Any:
        return self._spawner.api

    @property
    def log(self) -> Any:
        return self._spawner.log

    def _record(
        self, action: Action, kind: str, name: str, message: str, obj: dict[str, Any] | None = None
    ) -> AuditRecord:
        spawner = self._spawner
        selection = spawner._selection
        return AuditRecord(
            action=action,
            user=spawner.user.name,
            server=spawner.name or "",
            namespace=spawner.namespace,
            kind=kind,
            name=name,
            message=message,
            profile=selection.profile.slug if selection else "",
            catalog_version=spawner._catalog_version,
            uid=str(((obj or {}).get("metadata") or {}).get("uid", "")),
            details=build_start_details(spawner._context()) if selection and action in START_ACTIONS else {},
        )

    def log_record(self, action: Action, kind: str, name: str, message: str) -> None:
        log_audit(self._record(action, kind, name, message), now=datetime.now(UTC), logger=self.log)

    async def audit(
        self, action: Action, kind: str, name: str, message: str, obj: dict[str, Any] | None = None
    ) -> None:
        """Log the record; write it as an Event too when ``audit_events`` asks (failures only logged)."""
        spawner = self._spawner
        record = self._record(action, kind, name, message, obj)
        disk_record = kind == "PersistentVolumeClaim" or action == "duplicate-pod-removed"
        events = spawner.audit_events == "all" or (spawner.audit_events == "disk" and disk_record)
        await write_audit(
            record,
            api=self.api if events else None,
            request_timeout=spawner.k8s_api_request_timeout,
            logger=self.log,
        )

    def rejected(self) -> bool:
        return bool(self._spawner._rejected)

    async def watch(self, key: str, reflector_class: Any, **kwargs: Any) -> Any:
        return await self._spawner._start_reflector(kind=key, reflector_class=reflector_class, **kwargs)

    def _reflector(self, key: str) -> Any:
        spawner = self._spawner
        if key == "pods":
            return spawner.pod_reflector
        return spawner.__class__.reflectors.get(spawner._get_reflector_key(key))

    def watching(self, key: str) -> bool:
        return self._reflector(key) is not None

    def cached(self, key: str, name: str) -> dict[str, Any] | None:
        reflector = self._reflector(key)
        if reflector is None:
            return None
        found: dict[str, Any] | None = reflector.resources.get(f"{self._spawner.namespace}/{name}")
        return found

    async def watch_pods(self) -> None:
        await self._spawner._start_watching_pods()

    def pods(self) -> list[dict[str, Any]]:
        reflector = self._spawner.pod_reflector
        return list(reflector.pods.values()) if reflector else []

    def events_of(self, pod_name: str) -> list[dict[str, Any]]:
        reflector = getattr(self._spawner, "event_reflector", None)
        if reflector is None:
            return []
        return [e for e in reflector.events if e["involvedObject"].get("name") == pod_name]

    def env(self) -> dict[str, str]:
        return self._spawner.get_env()

    def new_disk_guard(self, kind: str, name: str) -> AbstractAsyncContextManager[None]:
        return new_disk_guard(self._spawner, kind, name)

    def use_home_claim(self, name: str, *, ensured: bool = False) -> None:
        self._spawner.pvc_name = name
        if ensured:
            self._spawner._pvc_exists = True

    def home_claim_base(self) -> str:
        spawner = self._spawner
        return str(spawner._expand_user_properties(spawner.pvc_name_template))

    async def start_pod(self) -> Any:
        return await self._spawner._start_pod()

    async def next_pod_change(self, limit_s: float) -> bool:
        spawner = self._spawner
        changes = getattr(getattr(spawner.pod_reflector, "resources", None), "changes", None)
        if changes is None:  # a cache that tells no one (not the self-healing reflector): the timeout
            await asyncio.sleep(limit_s)
            return False
        return bool(await changes.next_change(f"{spawner.namespace}/{spawner.pod_name}", limit_s))

    def started_pod_url(self, *, not_uid: str | None) -> str | None:
        spawner = self._spawner
        if spawner.internal_ssl or spawner.services_enabled or spawner.after_pod_created_hook:
            return None
        pod = self.cached("pods", spawner.pod_name)
        uid = ((pod or {}).get("metadata") or {}).get("uid")
        if uid is None or uid == not_uid or not containers_running(pod):
            return None
        spawner.pod_id = uid  # as KubeSpawner's start sets it
        return str(spawner._get_pod_url(pod))

    async def accepts_connections(self, url: str, limit_s: float) -> bool:
        parts = urlsplit(url)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, parts.port), limit_s)
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True

    async def stop_pod(self, now: bool) -> None:
        await self._spawner._stop_pod(now)

    async def poll_pod(self) -> int | None:
        return await self._spawner._poll_pod()

    def pod_events(self) -> list[dict[str, Any]]:
        return list(self._spawner.events)

    def remember_pod(self, pod: dict[str, Any] | None) -> None:
        self._spawner._remember_pod(pod)

    async def retain_disks(self, now: datetime, why: str, *, home_shared: bool, vm: bool) -> None:
        spawner = self._spawner
        await retain_server_disks(
            spawner, now, why, hub_days=spawner.retention_days, home_shared=home_shared, vm=vm
        )
