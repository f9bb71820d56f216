"""Seed 000 §11, "compute node unreachable": the disk moves to another node only after fencing.

A container workspace on a GPU node; the node stops answering and its pod is force-deleted (what an
impatient admin, or a pod GC, does). Plain KubeSpawner would create the new pod at once and the disk
would wait for the attach/detach controller's six-minute force-detach from a node that may still be
writing. The spawner refuses with reason ``fencing`` until the node is tainted out-of-service and a
NetworkFence has fenced it; then the workspace starts elsewhere on the same disk, and no Multi-Attach
error is ever recorded.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from .harness import HubStack, wait_for
from .test_workspace_lifecycle import get_json, kubectl, read_file, start, write_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

PROFILE = {"profile": "gpu-shared"}


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("the fencing check is this project's spawner's")


def test_start_elsewhere_is_refused_until_the_old_node_is_fenced(stack: HubStack) -> None:
    user, server = "fenced", "ws"
    stack.hub.api("POST", f"/users/{user}")
    start(stack, user, server, PROFILE)
    write_file(stack, user, server, "thesis.txt", "do not corrupt me")
    pod = get_json(stack, "pod", f"jupyter-{user}--{server}")
    node = pod["spec"]["nodeName"]
    claim = f"home-{user}--{server}"

    status, body = stack.devcluster.control("/_devcluster/sim/node", {"node": node, "action": "not-ready"})
    assert status == 200, body
    kubectl(stack, "wait", "--for=condition=Ready=Unknown", f"node/{node}", "--timeout=30s")
    kubectl(stack, "delete", "pod", pod["metadata"]["name"], "--force", "--grace-period=0")
    wait_for(lambda: stack.hub.server(user, server) is None, 60, "the hub to see the pod gone")

    got, answer = stack.hub.api("POST", f"/users/{user}/servers/{server}", PROFILE)
    assert got == 409, answer
    assert "disk may still be in use on another node" in answer["message"]
    assert node in answer["message"]
    refused = [e for e in _events(stack, claim) if e["reason"] == "WorkspaceDiskRefused"]
    assert refused and "Evidence" in refused[-1]["message"]  # the audit record carries the evidence
    wait_for(lambda: stack.hub.server(user, server) is None, 30, "the refused start to be cleaned up")

    fence(stack, node)  # the admin's runbook

    start(stack, user, server, PROFILE)
    moved = get_json(stack, "pod", f"jupyter-{user}--{server}")
    assert moved["spec"]["nodeName"] != node
    assert read_file(stack, user, server, "thesis.txt") == "do not corrupt me"
    multi = [e for e in get_json(stack, "events")["items"] if "Multi-Attach" in e.get("message", "")]
    assert multi == []
    stack.hub.stop_server(user, server)
    # The repaired node comes back: unfence, clear out-of-service, and wait until it takes pods again.
    kubectl(stack, "delete", "networkfence", f"fence-{node}", check=False)
    kubectl(stack, "taint", "node", node, "node.kubernetes.io/out-of-service-", check=False)
    status, body = stack.devcluster.control("/_devcluster/sim/node", {"node": node, "action": "recover"})
    assert status == 200, body
    kubectl(stack, "wait", "--for=condition=Ready=True", f"node/{node}", "--timeout=30s")

    def untainted() -> bool:
        taints = get_json(stack, "node", node)["spec"].get("taints") or []
        return not [t for t in taints if t["key"].startswith("node.kubernetes.io/")]

    wait_for(untainted, 30, f"{node} to lose its unreachable taints")


def fence(stack: HubStack, node: str) -> None:
    """The admin's runbook: fence the node's addresses, then declare it out of service."""
    node_obj = get_json(stack, "node", node)
    address = next(a["address"] for a in node_obj["status"]["addresses"] if a["type"] == "InternalIP")
    fence = {
        "apiVersion": "csiaddons.openshift.io/v1alpha1",
        "kind": "NetworkFence",
        "metadata": {"name": f"fence-{node}"},
        "spec": {
            "driver": "rbd.csi.ceph.com",
            "fenceState": "Fenced",
            "cidrs": [f"{address}/32"],
            "secret": {"name": "rook-csi-rbd-provisioner", "namespace": "rook-ceph"},
            "parameters": {"clusterID": "devcluster-ceph"},
        },
    }
    kubectl(stack, "apply", "-f", "-", input_text=json.dumps(fence))
    kubectl(
        stack,
        "wait",
        "--for=jsonpath={.status.result}=Succeeded",
        f"networkfence/fence-{node}",
        "--timeout=30s",
    )
    kubectl(stack, "taint", "node", node, "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute")


def _events(stack: HubStack, name: str) -> list[dict[str, Any]]:
    return [e for e in get_json(stack, "events")["items"] if e["involvedObject"]["name"] == name]
