"""Watches (KubeSpawner's ResourceReflector, so they share its client, resume and failure handling)."""

from __future__ import annotations

from kubespawner.reflector import ResourceReflector


class ClaimReflector(ResourceReflector):
    """PersistentVolumeClaims matching ``labels`` in one namespace, keyed ``namespace/name``.

    The spawner reads home-disk state from here instead of issuing a GET per start.
    """

    kind = "persistentvolumeclaims"
    list_method_name = "list_namespaced_persistent_volume_claim"

    @property
    def claims(self) -> dict[str, dict[str, object]]:
        return self.resources
