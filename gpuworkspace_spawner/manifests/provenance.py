"""Who a workspace is for and what it runs: its team, and the details a start's audit record carries.

Pure. The team (:func:`~gpuworkspace_spawner.catalog.options.decide_team`, beside the profile's
selection) comes from the catalog profile (``spec.team``) when it names one, else from the user's
groups: the first group, in sorted order, whose name starts with the hub's ``team_group_prefix``
(``team-nlp`` → ``nlp``); else there is none. The start details say which image (reference and digest, or
a VM's DataSource), which mounts (volume, path, claim) and which GPUs (resource, count, mode) a start
asked for, so an audit log answers seed 001 §18 without reading the catalog of that day.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuworkspace_spawner.catalog.model import WorkspaceProfile
from gpuworkspace_spawner.catalog.options import decide_team
from gpuworkspace_spawner.manifests.conventions import convention_mounts
from gpuworkspace_spawner.manifests.names import WorkspaceContext, image_digest
from gpuworkspace_spawner.manifests.pod import workspace_volumes
from gpuworkspace_spawner.manifests.vm import ROOT_DISK

__all__ = ["build_start_details", "decide_team"]  # the team is decided with the selection (catalog.options)

_GPU_PREFIX = "nvidia.com/"


def build_start_details(ws: WorkspaceContext) -> dict[str, Any]:
    """What a start record adds to its profile and catalog version: image, team, mounts, GPU request.

    JSON-ready (strings, lists, dicts). ``image_digest`` is ``""`` when the image is not pinned by
    digest; a VM's image is its DataSource (``data_source``), its one mount the root disk.
    """
    profile = ws.profile
    details: dict[str, Any] = {
        "runtime": profile.runtime,
        "ide": ws.ide,
        "team": ws.team,
        "team_source": ws.team_source,
        "cost_center": profile.cost_center or "",
        "gpu": _gpu_request(profile),
    }
    if profile.vm is not None:
        data_source = f"{profile.vm.data_source_namespace}/{profile.vm.data_source_name}"
        mount = {"volume": ROOT_DISK, "mount_path": "/", "claim": ws.home_claim, "read_only": False}
        return {**details, "image": "", "image_digest": "", "data_source": data_source, "mounts": [mount]}
    volumes = list(workspace_volumes(ws))
    by_name = {v.volume["name"]: v.volume for v in volumes}
    ours = convention_mounts(ws)  # as apply_conventions puts them: they replace mounts at their paths
    paths = {m["mountPath"] for m in ours}
    mounts = [_mount(v.volume, v.mount) for v in volumes if v.mount["mountPath"] not in paths]
    mounts += [_mount(by_name.get(m["name"], {}), m) for m in ours]
    image = profile.image or ""
    return {**details, "image": image, "image_digest": image_digest(image), "mounts": mounts}


def _mount(volume: Mapping[str, Any], mount: Mapping[str, Any]) -> dict[str, Any]:
    claim = (volume.get("persistentVolumeClaim") or {}).get("claimName", "")
    out = {
        "volume": mount["name"],
        "mount_path": mount["mountPath"],
        "claim": claim,  # "" for an emptyDir (scratch, /dev/shm)
        "read_only": bool(mount.get("readOnly", False)),
    }
    if mount.get("subPath"):
        out["sub_path"] = mount["subPath"]
    return out


def _gpu_request(profile: WorkspaceProfile) -> dict[str, Any]:
    """GPU mode and resources: ``{"mode": "mig", "resources": {"nvidia.com/mig-1g.10gb": "1"}}``.

    A container's ``nvidia.com/*`` resources (the limit where both are set); a VM's passthrough devices, counted by name.
    """
    resources: dict[str, str] = {}
    if profile.vm is not None:
        for gpu in profile.vm.gpus:
            resources[gpu.device_name] = str(int(resources.get(gpu.device_name, "0")) + 1)
    else:
        named = {**profile.resources.requests, **profile.resources.limits}
        resources = {k: str(v) for k, v in sorted(named.items()) if k.startswith(_GPU_PREFIX)}
    return {"mode": profile.placement.gpu_mode, "resources": resources}
