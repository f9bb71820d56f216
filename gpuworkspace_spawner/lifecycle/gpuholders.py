"""Who holds a GPU resource: the answer to "the shared GPUs are full" (seed 000 §11). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuworkspace_spawner.manifests.names import ANN_PROFILE, ANN_SERVERNAME, ANN_USERNAME


def describe_gpu_holders(pods: Sequence[Mapping[str, Any]], resource: str, *, exclude: str = "") -> str:
    """``alice/default (gpu-shared), bob/train (gpu-shared)``: workspaces whose running pods hold ``resource``."""
    held = []
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if meta.get("name") == exclude or not spec.get("nodeName") or meta.get("deletionTimestamp"):
            continue
        wanted = any(
            resource in ((c.get("resources") or {}).get("limits") or {}) for c in spec.get("containers") or []
        )
        annotations = meta.get("annotations") or {}
        if wanted:
            user = annotations.get(ANN_USERNAME) or meta.get("name")
            server = annotations.get(ANN_SERVERNAME) or "default"
            held.append(f"{user}/{server} ({annotations.get(ANN_PROFILE, '?')}) on {spec['nodeName']}")
    return ", ".join(sorted(held))
