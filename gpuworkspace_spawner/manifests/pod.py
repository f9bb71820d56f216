"""The workspace pod: a pure patch applied to the pod KubeSpawner built (``super().get_pod_manifest()``).

Pure. KubeSpawner's ``make_pod`` stays the source of the container command, environment, hub token and
z2jh labels; this module applies the profile on top: resources, placement, the storage convention of seed
001 §11 and the pod hardening of seed 001 §17. The input is the camelCase API dict
(``ApiClient().sanitize_for_serialization(pod)``); the output is a new dict and the input is never changed.

Mounts (001 §11): ``home`` (the personal RBD claim, retained) at ``storage.home.mount_path``, ``scratch``
(emptyDir, wiped on stop), ``shm`` (memory-backed emptyDir at ``/dev/shm``), datasets and models
(read-only claims) and team directories (CephFS claims, read-only unless the profile says otherwise).
Any ``hostPath`` volume that came in is removed, with every mount of it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuworkspace_spawner.catalog.model import Placement, Resources, Security, SharedMount, Storage
from gpuworkspace_spawner.manifests.names import ANN_IDE, WorkspaceContext, dns_label

NOTEBOOK_CONTAINER = "notebook"  # KubeSpawner's name for the single-user server container
NOTEBOOK_PORT_NAME = "notebook-port"
HOME_VOLUME = "home"
SCRATCH_VOLUME = "scratch"
SHM_VOLUME = "shm"
SHM_PATH = "/dev/shm"
DATASETS_VOLUME = "datasets"
MODELS_VOLUME = "models"
TEAM_VOLUME_PREFIX = "team-"

# z2jh's NetworkPolicies select singleuser pods on these labels; the hub's ingress policy on the last one.
_Z2JH_LABELS = {"app": "jupyterhub", "component": "singleuser-server"}
_NETWORK_ACCESS_HUB = "hub.jupyter.org/network-access-hub"
_RUNTIME_DEFAULT = {"type": "RuntimeDefault"}


@dataclass(frozen=True)
class WorkspaceVolume:
    """One volume of the storage convention and its mount in the notebook container."""

    volume: Mapping[str, Any]
    mount: Mapping[str, Any]


def build_workspace_pod(pod: Mapping[str, Any], ws: WorkspaceContext) -> dict[str, Any]:
    """Apply ``ws.profile`` to KubeSpawner's pod dict; returns a new dict, ``pod`` is left untouched."""
    out: dict[str, Any] = copy.deepcopy(dict(pod))
    meta = out.setdefault("metadata", {})
    meta["labels"] = _labels(meta.get("labels") or {}, ws)
    meta["annotations"] = {**(meta.get("annotations") or {}), **ws.annotations, ANN_IDE: ws.ide}
    meta.pop("ownerReferences", None)  # nothing owns a workspace pod, and a pod never owns the home claim

    spec = out.setdefault("spec", {})
    ours = workspace_volumes(ws)
    dropped = _dropped_volume_names(spec, ours)
    spec["containers"] = [
        _notebook(c, ws, ours, dropped)
        if c.get("name") == NOTEBOOK_CONTAINER
        else _without_mounts(c, dropped)
        for c in spec.get("containers") or []
    ]
    if spec.get("initContainers"):
        spec["initContainers"] = [_without_mounts(c, dropped) for c in spec["initContainers"]]
    spec["volumes"] = _volumes(spec.get("volumes") or [], ours, dropped)
    spec.update(_security(spec.get("securityContext") or {}, ws.profile.security))
    spec.update(_placement(spec, ws.profile.placement))
    return out


def _labels(existing: Mapping[str, str], ws: WorkspaceContext) -> dict[str, str]:
    return {
        **existing,
        **ws.labels,
        **_Z2JH_LABELS,
        "release": ws.identity.release,
        _NETWORK_ACCESS_HUB: "true",
    }


def workspace_volumes(ws: WorkspaceContext) -> list[WorkspaceVolume]:
    """The volumes of the 001 §11 convention for this profile, in mount order."""
    storage = ws.profile.storage
    home = WorkspaceVolume(
        {"name": HOME_VOLUME, "persistentVolumeClaim": {"claimName": ws.home_claim}},
        {"name": HOME_VOLUME, "mountPath": storage.home.mount_path},
    )
    scratch = WorkspaceVolume(
        {"name": SCRATCH_VOLUME, "emptyDir": _empty_dir(storage.scratch.size_limit)},
        {"name": SCRATCH_VOLUME, "mountPath": storage.scratch.mount_path},
    )
    shm = WorkspaceVolume(
        {"name": SHM_VOLUME, "emptyDir": _empty_dir(storage.shm_size_limit, medium="Memory")},
        {"name": SHM_VOLUME, "mountPath": SHM_PATH},
    )
    return [home, scratch, shm, *_shared_volumes(storage)]


def _empty_dir(size_limit: str | None, *, medium: str | None = None) -> dict[str, str]:
    empty_dir = {"medium": medium} if medium else {}
    if size_limit is not None:
        empty_dir["sizeLimit"] = size_limit
    return empty_dir


def _shared_volumes(storage: Storage) -> list[WorkspaceVolume]:
    shared: list[tuple[str, SharedMount, bool]] = []
    if storage.datasets is not None:
        shared.append((DATASETS_VOLUME, storage.datasets, True))  # 001 §11: /data is read-only
    if storage.models is not None:
        shared.append((MODELS_VOLUME, storage.models, True))  # 001 §11: /models is read-only
    for team in storage.team_directories:
        shared.append((dns_label(TEAM_VOLUME_PREFIX + team.name), team, team.read_only))
    return [_shared_volume(name, mount, read_only) for name, mount, read_only in shared]


def _shared_volume(name: str, shared: SharedMount, read_only: bool) -> WorkspaceVolume:
    claim: dict[str, Any] = {"claimName": shared.claim_name}
    mount: dict[str, Any] = {"name": name, "mountPath": shared.mount_path, "readOnly": read_only}
    if read_only:
        claim["readOnly"] = True
    if shared.sub_path:
        mount["subPath"] = shared.sub_path
    return WorkspaceVolume({"name": name, "persistentVolumeClaim": claim}, mount)


def _kept_mounts(
    container: Mapping[str, Any], dropped: frozenset[str], our_paths: frozenset[str]
) -> list[dict[str, Any]]:
    """A container's mounts minus dropped volumes; the notebook also loses mounts at our paths."""
    shadowed = our_paths if container.get("name") == NOTEBOOK_CONTAINER else frozenset()
    return [
        dict(m)
        for m in container.get("volumeMounts") or []
        if m["name"] not in dropped and m.get("mountPath") not in shadowed
    ]


def _dropped_volume_names(spec: Mapping[str, Any], ours: list[WorkspaceVolume]) -> frozenset[str]:
    """Volumes that must go: hostPath ones, ours (rebuilt), and any left orphaned by a mount we replace.

    z2jh's own home volume (``volume-{username}`` at ``/home/jovyan``) is the typical orphan: its claim
    would otherwise still be required by the pod although nothing mounts it.
    """
    volumes = spec.get("volumes") or []
    dropped = frozenset({v["name"] for v in volumes if "hostPath" in v} | {v.volume["name"] for v in ours})
    our_paths = _paths(ours)
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    before = {m["name"] for c in containers for m in c.get("volumeMounts") or []}
    after = {m["name"] for c in containers for m in _kept_mounts(c, dropped, our_paths)}
    return dropped | (before - after)


def _paths(ours: list[WorkspaceVolume]) -> frozenset[str]:
    return frozenset(v.mount["mountPath"] for v in ours)


def _without_mounts(container: Mapping[str, Any], dropped: frozenset[str]) -> dict[str, Any]:
    out = dict(container)
    if "volumeMounts" in out:
        out["volumeMounts"] = _kept_mounts(container, dropped, frozenset())
    return out


def _volumes(
    existing: list[Mapping[str, Any]], ours: list[WorkspaceVolume], dropped: frozenset[str]
) -> list[dict[str, Any]]:
    kept = [dict(v) for v in existing if v["name"] not in dropped]
    return kept + [copy.deepcopy(dict(v.volume)) for v in ours]


def _notebook(
    container: Mapping[str, Any], ws: WorkspaceContext, ours: list[WorkspaceVolume], dropped: frozenset[str]
) -> dict[str, Any]:
    profile = ws.profile
    kept = _kept_mounts(container, dropped, _paths(ours))
    out = dict(container)
    out["resources"] = _resources(profile.resources)
    out["ports"] = _ports(container.get("ports") or [])
    out["securityContext"] = _container_security(profile.security)
    out["volumeMounts"] = kept + [copy.deepcopy(dict(v.mount)) for v in ours]
    out["workingDir"] = profile.storage.home.mount_path
    if profile.placement.gpu_mode == "none":
        # CUDA images set NVIDIA_VISIBLE_DEVICES=all; on a GPU node without a GPU request the NVIDIA
        # runtime would otherwise expose every GPU of the node to a CPU-only workspace.
        env = [e for e in container.get("env") or [] if e.get("name") != "NVIDIA_VISIBLE_DEVICES"]
        out["env"] = [*env, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    return out


def _resources(resources: Resources) -> dict[str, dict[str, str]]:
    out = {}
    if resources.requests:
        out["requests"] = dict(resources.requests)
    if resources.limits:
        out["limits"] = dict(resources.limits)
    return out


def _ports(ports: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Keep the ports; the server port (the one KubeSpawner named, else the first) is ``notebook-port``."""
    out = [dict(p) for p in ports]
    if out and not any(p.get("name") == NOTEBOOK_PORT_NAME for p in out):
        out[0]["name"] = NOTEBOOK_PORT_NAME
    return out


def _container_security(security: Security) -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": security.run_as_user,
        "runAsGroup": security.run_as_group,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": dict(_RUNTIME_DEFAULT),
    }


def _security(existing: Mapping[str, Any], security: Security) -> dict[str, Any]:
    """Pod-level hardening (001 §17): no host namespaces, no service account token unless asked for."""
    return {
        "automountServiceAccountToken": security.service_account_token,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "enableServiceLinks": False,
        "securityContext": {
            **existing,
            "fsGroup": security.fs_group,
            # A large home is not chown'ed recursively on every start, only when its root is wrong.
            "fsGroupChangePolicy": "OnRootMismatch",
            "runAsNonRoot": True,
            "seccompProfile": dict(_RUNTIME_DEFAULT),
        },
    }


def _placement(spec: Mapping[str, Any], placement: Placement) -> dict[str, Any]:
    pool = placement.node_pool
    out: dict[str, Any] = {}
    if pool is not None:
        out["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **pool.node_selector}
        tolerations: list[dict[str, Any]] = []
        for toleration in [*(spec.get("tolerations") or []), *pool.tolerations]:
            if dict(toleration) not in tolerations:
                tolerations.append(dict(toleration))
        out["tolerations"] = tolerations
    if placement.runtime_class_name:
        out["runtimeClassName"] = placement.runtime_class_name
    return out
