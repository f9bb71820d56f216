"""The disk API's view of a VM root disk: the claim CDI made (labels copied at creation), the lifecycle of
its DataVolume (the object the reclaimer deletes)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuworkspace_spawner.manifests import names
from gpuworkspace_spawner.manifests.names import WorkspaceIdentity
from gpuworkspace_spawner.services.disks.views import Related, workspace_item

BOB = WorkspaceIdentity(user="bob", server="vm", namespace="gpu-workspaces")
NOW = datetime(2026, 12, 2, tzinfo=UTC)


def meta(state: str, **annotations: str) -> dict[str, Any]:
    labels = {**BOB.selector_labels, names.LABEL_DISK: names.DISK_ROOT, names.LABEL_DISK_STATE: state}
    return {
        "name": "ws-bob--vm-root",
        "namespace": "gpu-workspaces",
        "uid": "dv-uid",
        "labels": labels,
        "annotations": {**BOB.name_annotations, **annotations},
    }


def claim(state: str) -> dict[str, Any]:
    owner = {"kind": "DataVolume", "name": "ws-bob--vm-root", "uid": "dv-uid", "controller": True}
    body = meta(state) | {"uid": "claim-uid", "ownerReferences": [owner]}
    spec = {"resources": {"requests": {"storage": "40Gi"}}, "storageClassName": "ceph-rbd"}
    return {"metadata": body, "spec": spec, "status": {"phase": "Bound"}}


def test_a_root_claim_created_active_shows_its_retained_datavolume() -> None:
    dv = {"metadata": meta(names.DISK_RETAINED, **{names.ANN_RETAIN_UNTIL: "2027-01-01T00:00:00Z"})}
    item = workspace_item(claim(names.DISK_ACTIVE), Related(data_volumes=[dv]), None, now=NOW)
    assert (item["user"], item["server"]) == ("bob", "vm")
    disk = item["disk"]
    assert (disk["claim"], disk["kind"], disk["size"]) == ("ws-bob--vm-root", "root", "40Gi")
    assert (disk["state"], disk["retainUntil"]) == ("retained", "2027-01-01T00:00:00Z")
    assert item["state"]["state"] == "Retained", item["state"]


def test_without_its_datavolume_the_claims_own_labels_are_shown() -> None:
    item = workspace_item(claim(names.DISK_ACTIVE), Related(), None, now=NOW)
    assert (item["disk"]["state"], item["disk"]["retainUntil"]) == ("active", None)
