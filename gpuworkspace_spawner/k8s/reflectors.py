"""Watches (KubeSpawner's ResourceReflector, so they share its client, resume and failure handling)."""

from __future__ import annotations

from kubespawner.reflector import ResourceReflector
from traitlets import default


class ClaimReflector(ResourceReflector):
    """PersistentVolumeClaims matching ``labels`` in one namespace, keyed ``namespace/name``.

    The spawner reads home-disk state from here instead of issuing a GET per start.
    """

    kind = "persistentvolumeclaims"
    list_method_name = "list_namespaced_persistent_volume_claim"

    # Home claims change a few times per workspace lifetime: KubeSpawner's 10 s watch timeout (made
    # for chatty pods and events) would re-list them every 10 s for nothing. Spawns that find the
    # cache stale recover through the API (409 on create, 404 on patch), so a longer watch is safe.
    @default("timeout_seconds")
    def _default_timeout_seconds(self) -> int:
        return 300

    @default("restart_seconds")
    def _default_restart_seconds(self) -> int:
        return 300

    @property
    def claims(self) -> dict[str, dict[str, object]]:
        return self.resources
