"""describe_gpu_holders: the refused user learns who holds the GPUs they asked for."""

from __future__ import annotations

from typing import Any

from gpuworkspace_spawner.lifecycle.gpuholders import describe_gpu_holders


def pod(
    name: str, user: str, resource: str, *, node: str | None = "gpu-node-a", gone: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "annotations": {
            "gpuworkspace.dev/username": user,
            "gpuworkspace.dev/servername": "",
            "gpuworkspace.dev/profile": "gpu-shared",
        },
    }
    if gone:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    spec = {"containers": [{"name": "notebook", "resources": {"limits": {resource: "1"}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec}


def test_lists_running_holders_of_the_resource_only() -> None:
    pods = [
        pod("jupyter-bob", "bob", "nvidia.com/gpu.shared"),
        pod("jupyter-alice", "alice", "nvidia.com/gpu.shared", node="gpu-node-b"),
        pod("jupyter-carol", "carol", "nvidia.com/gpu"),  # another resource
        pod("jupyter-dave", "dave", "nvidia.com/gpu.shared", node=None),  # still pending
        pod("jupyter-erin", "erin", "nvidia.com/gpu.shared", gone=True),  # terminating
        pod("jupyter-me", "me", "nvidia.com/gpu.shared"),  # the refused pod itself
    ]
    text = describe_gpu_holders(pods, "nvidia.com/gpu.shared", exclude="jupyter-me")
    assert text == "alice/default (gpu-shared) on gpu-node-b, bob/default (gpu-shared) on gpu-node-a"


def test_nobody_holds_it() -> None:
    assert describe_gpu_holders([], "nvidia.com/gpu") == ""
