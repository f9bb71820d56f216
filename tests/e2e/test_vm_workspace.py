"""VM workspaces through the hub: a whole Linux machine whose root disk survives stop, VM rebuild and deletion.

Real JupyterHub + proxy + devcluster (KubeVirt/CDI simulation: the guest's ``/`` is the root disk's
directory, its Jupyter server serves that root) and the spawner's ``runtime: vm`` profile ``vm-workstation``.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from .harness import HubStack, wait_for
from .test_workspace_lifecycle import contents, get_json, kubectl, read_file, start, write_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]

PROFILE = {"profile": "vm-workstation"}
FILES = {"etc/gpuws-e2e.conf": "etc", "opt/tool/VERSION": "opt", "usr/local/bin/hello": "usr-local"}


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("VM workspaces are this project's spawner's")


def vm_objects(stack: HubStack, user: str) -> dict[str, list[str]]:
    selector = f"gpuworkspace.dev/user={user}"
    out = {}
    for kind in ("vm", "vmi", "datavolume", "service", "pods"):
        items = get_json(stack, kind, "-l", selector)["items"]
        out[kind] = [i["metadata"]["name"] for i in items]
    return out


def mkdirs(stack: HubStack, user: str, server: str, path: str) -> None:
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        contents(stack, user, server, "/".join(parts[:i]), {"type": "directory"})


def test_vm_root_disk_survives_stop_rebuild_and_delete(stack: HubStack) -> None:
    user, server = "vmuser", "ws"
    stack.hub.api("POST", f"/users/{user}")
    start(stack, user, server, PROFILE)
    objects = vm_objects(stack, user)
    assert len(objects["vm"]) == 1 and len(objects["vmi"]) == 1 and len(objects["datavolume"]) == 1
    (vm,) = objects["vm"]
    (disk,) = objects["datavolume"]
    claim_uid = get_json(stack, "pvc", disk)["metadata"]["uid"]
    for path, text in FILES.items():
        mkdirs(stack, user, server, path)
        write_file(stack, user, server, path, text)
    write_file(stack, user, server, "root/notes.txt", "home")

    stack.hub.stop_server(user, server)
    wait_for(lambda: not vm_objects(stack, user)["vmi"], 60, "the VMI to be gone")
    stopped = vm_objects(stack, user)
    assert stopped["vm"] == [vm] and stopped["datavolume"] == [disk]
    assert stopped["pods"] == []  # the virt-launcher pod is gone: CPU, memory (and GPUs) released
    assert get_json(stack, "vm", vm)["spec"]["runStrategy"] == "Halted"
    assert get_json(stack, "pvc", disk)["metadata"]["uid"] == claim_uid

    start(stack, user, server, PROFILE)
    for path, text in FILES.items():
        assert read_file(stack, user, server, path) == text
    stack.hub.stop_server(user, server)
    wait_for(lambda: not vm_objects(stack, user)["vmi"], 60, "the VMI to be gone")

    kubectl(stack, "delete", "vm", vm, "--wait=true")  # an admin deletes the VM object
    assert get_json(stack, "pvc", disk)["metadata"]["uid"] == claim_uid  # no cascade to the disk
    start(stack, user, server, PROFILE)
    assert read_file(stack, user, server, "root/notes.txt") == "home"
    assert get_json(stack, "pvc", disk)["metadata"]["uid"] == claim_uid
    token = _token_from_secret(stack, user)
    stack.hub.stop_server(user, server)
    _assert_token_only_in_its_secret(stack, token)

    assert stack.hub.api("DELETE", f"/users/{user}/servers/{server}", {"remove": True})[0] in (202, 204)
    dv = wait_for(lambda: _retained(stack, disk), 30, "the root disk to be retained")
    assert dv["metadata"]["annotations"]["gpuworkspace.dev/retain-until"]
    left = vm_objects(stack, user)
    assert left["vm"] == [] and left["service"] == [] and left["datavolume"] == [disk]

    kubectl(
        stack, "annotate", "--overwrite", "dv", disk, "gpuworkspace.dev/retain-until=2020-01-01T00:00:00Z"
    )
    # the hub's managed gpuworkspace-reclaimer deletes the DataVolume by watch (CDI's claim goes with it)
    wait_for(lambda: kubectl(stack, "get", "pvc", disk, check=False).returncode != 0, 30, "the claim to go")
    assert kubectl(stack, "get", "dv", disk, check=False).returncode != 0


def _retained(stack: HubStack, name: str) -> dict[str, Any] | None:
    dv: dict[str, Any] = get_json(stack, "dv", name)
    return dv if dv["metadata"]["labels"].get("gpuworkspace.dev/disk-state") == "retained" else None


def _token_from_secret(stack: HubStack, user: str) -> str:
    (secret,) = get_json(stack, "secret", "-l", f"gpuworkspace.dev/user={user}")["items"]
    userdata = base64.b64decode(secret["data"]["userdata"]).decode()
    for line in userdata.splitlines():
        key, _, value = line.strip().partition("=")
        if key == "JUPYTERHUB_API_TOKEN":
            return value.strip("'\"")
    raise AssertionError("no JUPYTERHUB_API_TOKEN in the cloud-init secret")


def _assert_token_only_in_its_secret(stack: HubStack, token: str) -> None:
    """Every object in the namespace, every Event and every log of the run: the token is only in the Secret."""
    assert len(token) >= 32
    kinds = "vm,vmi,dv,pvc,pods,services,configmaps,events,secrets,endpoints"
    items = get_json(stack, kinds)["items"]
    holders = [f"{i['kind']}/{i['metadata']['name']}" for i in items if token in json.dumps(i)]
    secrets_with_token = [
        i["metadata"]["name"]
        for i in items
        if i["kind"] == "Secret"
        and token in base64.b64decode(i["data"].get("userdata", "")).decode(errors="replace")
    ]
    assert holders == [] and len(secrets_with_token) == 1, (holders, secrets_with_token)
    for proc in stack.logs():
        assert token not in proc.log_path.read_text(errors="replace"), proc.log_path
