"""``GET …/api/v1/users/<name>/disks`` (app.py's ``UserDisksHandler``): a user's own disks, for the
hub home page and for scripts; the rows are :func:`.owndisks.build_own_disks`'s."""

from __future__ import annotations

from typing import Any

from ...k8s import storage
from ...lifecycle.diskops import LABEL_SNAPSHOT_OF
from ...manifests.names import label_value
from .. import access
from ..serving import ServiceError
from .operations import DiskOperations
from .owndisks import build_own_disks


async def own_disks(ops: DiskOperations, caller: dict[str, Any], user: str, *, threshold: float) -> Any:
    """``user``'s disk rows as ``caller`` may see them (403 when they may not)."""
    if not access.may_read(caller, user, service=ops.settings.service_name):
        raise ServiceError(403, f"{access.who(caller)} may not see the disks of {user}")
    items = await ops.workspaces(caller, user)
    snapshots: list[Any] = []
    for claim in sorted({str(i["disk"]["claim"]) for i in items}):
        listed = await storage.list_snapshots(
            ops.api,
            ops.settings.namespace,
            f"{LABEL_SNAPSHOT_OF}={label_value(claim)}",
            request_timeout=ops.settings.request_timeout_s,
        )
        snapshots += listed.get("items") or []
    return build_own_disks(user, items, snapshots, threshold=threshold)
