"""VM root disks in the disk API, and no leaked disks: real hub, real tokens, devcluster CDI as CDI is.

The devcluster's CDI copies a DataVolume's labels and annotations onto the claim it creates (as CDI's
``newPersistentVolumeClaim`` does), so a VM's root disk is a workspace disk the disk service lists, resizes
and snapshots like a home disk. A server that ran as a container and then as a VM owns two disks; deleting
it retains both, and the reclaimer deletes both at expiry.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from .harness import HubStack, wait_for
from .test_disk_admin import call, disks, user_token  # noqa: F401  (disks: the service fixture)
from .test_vm_workspace import vm_objects
from .test_workspace_lifecycle import get_json, kubectl, start, write_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(480)]
VM = {"profile": "vm-workstation"}
CPU = {"profile": "cpu-small"}
STATE = "gpuworkspace.dev/disk-state"
UNTIL = "gpuworkspace.dev/retain-until"


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("VM root disks are this project's spawner's")


def test_owner_lists_resizes_and_snapshots_their_vm_root_disk(
    stack: HubStack,
    disks: tuple[str, float],  # noqa: F811
) -> None:
    base, _ = disks
    user, server = "vmbob", "vm"
    mine, admin = user_token(stack, user), stack.admin_token
    start(stack, user, server, VM)
    (root,) = vm_objects(stack, user)["datavolume"]

    # the owner's own view: GET …/workspaces/vmbob/vm is the VM's root disk
    status, own = call(base, mine, "GET", f"api/v1/workspaces/{user}/{server}")
    assert status == 200, own
    assert (own["user"], own["server"], own["profile"]) == (user, server, "vm-workstation")
    assert own["disk"]["claim"] == root and own["disk"]["kind"] == "root", own
    assert own["disk"]["state"] == "active" and own["disk"]["size"] == "40Gi", own
    assert own["state"]["state"] == "Running", own
    status, listed = call(base, mine, "GET", "api/v1/workspaces")
    assert status == 200 and [i["disk"]["claim"] for i in listed["items"]] == [root], listed
    status, everyone = call(base, admin, "GET", "api/v1/workspaces")
    assert status == 200 and root in [i["disk"]["claim"] for i in everyone["items"]], everyone

    # the owner grows it, within vm.rootDisk.maxSize 200Gi; another user may not
    other = user_token(stack, "vmeve")
    assert call(base, other, "POST", f"api/v1/disks/{root}/resize", {"size": "48Gi"})[0] == 403
    status, body = call(base, mine, "POST", f"api/v1/disks/{root}/resize", {"size": "300Gi"})
    assert status == 400 and "200Gi" in body["message"], body
    status, body = call(base, mine, "POST", f"api/v1/disks/{root}/resize", {"size": "48Gi"})
    assert status == 200 and body["result"] in ("resized", "pending-restart"), body
    assert get_json(stack, "pvc", root)["spec"]["resources"]["requests"]["storage"] == "48Gi"

    # the owner snapshots it and lists it; restore in place is refused with what to do
    assert call(base, other, "POST", f"api/v1/disks/{root}/snapshots", {"name": "x"})[0] == 403
    status, snap = call(base, mine, "POST", f"api/v1/disks/{root}/snapshots", {"name": f"{root}-e2e"})
    assert status == 201 and snap["readyToUse"] and snap["claim"] == root, snap
    status, snaps = call(base, mine, "GET", f"api/v1/disks/{root}/snapshots")
    assert status == 200 and [s["name"] for s in snaps["items"]] == [f"{root}-e2e"], snaps
    labels = get_json(stack, "volumesnapshot", f"{root}-e2e")["metadata"]["labels"]
    assert labels["gpuworkspace.dev/user"] == user and labels["gpuworkspace.dev/disk"] == "root", labels
    stack.hub.stop_server(user, server)
    wait_for(lambda: not vm_objects(stack, user)["vmi"], 60, "the VMI to be gone")
    status, body = call(base, admin, "POST", f"api/v1/disks/{root}/restore", {"snapshot": f"{root}-e2e"})
    assert status == 409 and "VM root disk" in body["message"], body
    assert get_json(stack, "dv", root)["metadata"]["labels"][STATE] == "active"  # nothing changed
    kubectl(stack, "delete", "volumesnapshot", f"{root}-e2e", "--wait=false", check=False)


def _workspace_disks(stack: HubStack, user: str) -> dict[str, dict[str, Any]]:
    """Every claim and DataVolume of ``user`` that is a workspace disk, by ``kind/name``."""
    selector = f"gpuworkspace.dev/user={user},gpuworkspace.dev/disk in (home,root)"
    out = {}
    for kind in ("pvc", "dv"):
        for item in get_json(stack, kind, "-l", selector)["items"]:
            out[f"{kind}/{item['metadata']['name']}"] = item
    return out


def test_a_server_that_ran_as_container_then_vm_retains_and_reclaims_both_disks(
    stack: HubStack,
    disks: tuple[str, float],  # noqa: F811
) -> None:
    base, _ = disks
    user, server = "switcher", "sw"
    home = f"home-{user}--{server}"
    start(stack, user, server, CPU)
    write_file(stack, user, server, "notes.txt", "from the container")
    stack.hub.stop_server(user, server)
    start(stack, user, server, VM)  # the same server, now a VM: a second disk, its root disk
    (root,) = vm_objects(stack, user)["datavolume"]
    stack.hub.stop_server(user, server)
    wait_for(lambda: not vm_objects(stack, user)["vmi"], 60, "the VMI to be gone")
    found = _workspace_disks(stack, user)
    assert set(found) == {f"pvc/{home}", f"pvc/{root}", f"dv/{root}"}, sorted(found)
    assert {f"{k}={v['metadata']['labels'][STATE]}" for k, v in found.items()} == {
        f"pvc/{home}=active",
        f"pvc/{root}=active",
        f"dv/{root}=active",
    }

    assert stack.hub.api("DELETE", f"/users/{user}/servers/{server}", {"remove": True})[0] in (202, 204)

    def all_retained() -> dict[str, dict[str, Any]] | None:
        now = _workspace_disks(stack, user)
        return now if all(v["metadata"]["labels"][STATE] == "retained" for v in now.values()) else None

    retained = wait_for(all_retained, 30, "both disks to be retained")
    assert set(retained) == {f"pvc/{home}", f"pvc/{root}", f"dv/{root}"}  # nothing left active
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 29 * 86400))
    for key, obj in retained.items():
        assert obj["metadata"]["annotations"][UNTIL] > soon, key  # the hub's 30 days
    assert vm_objects(stack, user)["vm"] == [] and vm_objects(stack, user)["service"] == []
    status, listed = call(base, stack.admin_token, "GET", "api/v1/workspaces")
    assert status == 200, listed
    mine = {i["disk"]["claim"]: i["disk"] for i in listed["items"] if i["user"] == user}
    assert set(mine) == {home, root}, mine
    assert all(d["state"] == "retained" and d["retainUntil"] for d in mine.values()), mine

    # lower the retention to a few seconds: the hub's reclaimer wakes at the earliest retain-until
    expiry = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 5))
    kubectl(stack, "annotate", "--overwrite", "pvc", home, f"{UNTIL}={expiry}")
    kubectl(stack, "annotate", "--overwrite", "dv", root, f"{UNTIL}={expiry}")
    kept = _workspace_disks(stack, user)
    assert set(kept) == {f"pvc/{home}", f"pvc/{root}", f"dv/{root}"}  # not before retain-until
    wait_for(lambda: not _workspace_disks(stack, user), 60, "both disks to be reclaimed")
    reasons = {
        (e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"])
        for e in get_json(stack, "events")["items"]
        if e["involvedObject"]["name"] in (home, root)
    }
    assert {
        ("PersistentVolumeClaim", home, "WorkspaceDiskRetained"),
        ("DataVolume", root, "WorkspaceDiskRetained"),
        ("PersistentVolumeClaim", home, "WorkspaceDiskReclaimed"),
        ("DataVolume", root, "WorkspaceDiskReclaimed"),
    } <= reasons, sorted(reasons)
