"""VM root disks in the disk API: reclaiming one deletes its DataVolume (the I/O around
:mod:`~gpuworkspace_spawner.lifecycle.rootdisks`).

A claim deleted under its DataVolume is not a reclaimed disk (real CDI may create it again for the
DataVolume); the DataVolume is deleted instead and the garbage collector deletes the claim it owns.
"""

from __future__ import annotations

from typing import Any

from ...k8s import Conflict, NotFound, custom
from ...k8s.kinds import DATA_VOLUMES
from ...lifecycle.diskops import DISK_ROOT, decide_reclaim_now
from ...lifecycle.rootdisks import with_lifecycle_of
from ...manifests.names import LABEL_DISK
from ..serving import ServiceError

Obj = dict[str, Any]


async def read_data_volume(ops: Any, name: str) -> Obj | None:
    dvs = await custom.list_namespaced(
        custom.custom_api(ops.api),
        DATA_VOLUMES,
        ops.settings.namespace,
        label_selector=f"{LABEL_DISK}={DISK_ROOT}",
        request_timeout=ops.settings.request_timeout_s,
    )
    return next((dv for dv in dvs if dv["metadata"]["name"] == name), None)


async def reclaim(ops: Any, caller: Obj, claim: Obj) -> Obj:
    """Delete a retained VM root disk now: its DataVolume (uid + resourceVersion preconditions); the
    garbage collector deletes the claim. Decided on the DataVolume's lifecycle, like the reclaimer."""
    name = claim["metadata"]["name"]
    dv = await read_data_volume(ops, name)
    if dv is None:
        raise ServiceError(409, f"claim {name} is a VM root disk without its DataVolume {name}; not deleted")
    verdict = decide_reclaim_now(with_lifecycle_of(claim, dv), users=await ops._users(name))
    if not verdict.allowed:
        raise await ops._refuse(verdict, claim, caller, "reclaim")
    meta = dv["metadata"]
    try:
        await custom.delete(
            custom.custom_api(ops.api),
            DATA_VOLUMES,
            ops.settings.namespace,
            name,
            uid=meta["uid"],
            resource_version=meta["resourceVersion"],
            request_timeout=ops.settings.request_timeout_s,
        )
    except (Conflict, NotFound) as exc:
        raise ServiceError(
            409, f"DataVolume {name} changed since the decision ({exc.message}); not deleted"
        ) from None
    message = (
        f"Retained VM root disk (DataVolume {name} and its claim) deleted by an administrator before its "
        f"retention ended: {verdict.reason}"
    )
    await ops.audit("disk-reclaimed", claim, message, caller)
    return {"claim": name, "deleted": True, "message": message}
