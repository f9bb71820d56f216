"""Pod volumes on the simulated node: per-volume host directories and the container-path → host-dir map.

Each volume is a host directory; a :class:`MountTable` maps the container's paths to them (longest mount
prefix wins; anything else lands under the container's root dir ``pods/<ns>/<pod>/<c>/root``). When the
kubelet can make mount namespaces (root), ``sim/nslaunch.py`` binds each entry at its mountPath for the
container's process (``sim/mountns.py``); otherwise the table is passed as ``GPUWORKSPACE_MOUNTS`` (JSON) and
used to translate the working dir, ``HOME`` and a Jupyter root dir.

- secret, configMap, downwardAPI, projected (serviceAccountToken: a TokenRequest bound to the pod, by the
  kubelet's token manager, ``sim/tokenmanager.py``) →
  ``pods/<ns>/<pod>/volumes/<name>/``, written by the kubelet's atomic writer (``sim/atomicwriter.py``) at
  pod start and again whenever the source changes (:meth:`PodVolumes.refresh`); mounted read-only, as the
  kubelet does since 1.11;
- emptyDir → the same place; ``medium: Memory`` is a tmpfs there (``size=`` its ``sizeLimit``) when the
  kubelet runs as root;
- persistentVolumeClaim (and generic ephemeral volumes' ``<pod>-<volume>`` claims) → PVC → PV →
  ``spec.csi.volumeHandle`` → ``sim.csi.volume_dir``; PVs with ``hostPath``/``local`` use that path.
  ``readOnly`` (on the volume or the volumeMount) mounts it read-only. Volumes of attach-required drivers
  (RBD; for unknown drivers: RWO/RWOP volumes) wait until their VolumeAttachment to this node reports
  ``attached``, the pod staying ContainerCreating;
- hostPath → the host path itself. Other volume types are treated as emptyDir.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import posixpath
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..quantity import parse_quantity
from ..store import Obj, Store
from . import atomicwriter, podenv
from .base import rt_of
from .csi import DRIVERS
from .tokenmanager import TokenError

log = logging.getLogger(__name__)
PVCS = rt_of("", "persistentvolumeclaims")
PVS = rt_of("", "persistentvolumes")
ATTACHMENTS = rt_of("storage.k8s.io", "volumeattachments")
EXCLUSIVE_MODES = ("ReadWriteOnce", "ReadWriteOncePod")
_POD_LEVEL = ("emptyDir", "secret", "configMap", "downwardAPI", "projected")
API_VOLUMES = ("secret", "configMap", "downwardAPI", "projected")  # written by the kubelet, mounted read-only


class VolumeNotReady(Exception):
    """A volume cannot be set up yet. ``event`` (a FailedMount message) is empty for plain waits."""

    def __init__(self, message: str, *, event: str = "", unattached: str = "") -> None:
        super().__init__(message)
        self.message, self.event, self.unattached = message, event, unattached


@dataclass(frozen=True)
class MountTable:
    root: Path  # the container's "/" on the host
    mounts: dict[str, Path] = field(default_factory=dict)  # container path → host path
    readonly: frozenset[str] = frozenset()  # container paths mounted read-only

    def to_host(self, path: str) -> Path:
        path = posixpath.normpath("/" + path.lstrip("/"))  # not "//x": POSIX keeps a leading "//"
        best = ""
        for mount in self.mounts:
            if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best):
                best = mount
        if best:
            rest = path[len(best) :].lstrip("/")
            return self.mounts[best] / rest if rest else self.mounts[best]
        return self.root / path.lstrip("/")

    def as_env(self) -> str:
        return json.dumps({k: str(v) for k, v in sorted(self.mounts.items())})


def needs_attach(driver: str, modes: list[str]) -> bool:
    """Known drivers say (RBD attaches, CephFS does not); for others, RWO/RWOP volumes wait for attachment."""
    known = DRIVERS.get(driver)
    return known.attach_required if known is not None else any(m in EXCLUSIVE_MODES for m in modes)


def attachment_name(handle: str, driver: str, node: str) -> str:
    """The VolumeAttachment name the CSI attacher uses: ``csi-<sha256(handle+driver+node)>``."""
    return "csi-" + hashlib.sha256(f"{handle}{driver}{node}".encode()).hexdigest()


class PodVolumes:
    """Sets up a pod's volumes on node ``node``; ``volume_dir(handle)`` locates a CSI volume's data."""

    def __init__(
        self,
        store: Store,
        state_dir: Path,
        node: str,
        volume_dir: Callable[[str], Path],
        *,
        as_root: bool = False,
    ) -> None:
        self.store, self.state_dir, self.node, self.volume_dir = store, state_dir, node, volume_dir
        self.as_root = as_root  # tmpfs for medium: Memory

    def pod_dir(self, pod: Obj) -> Path:
        meta = pod["metadata"]
        return self.state_dir / "pods" / meta.get("namespace", "") / meta["name"]

    def pvs(self, pod: Obj) -> set[str]:
        """Names of the bound PVs the pod uses (to know which VolumeAttachments concern it)."""
        out = set()
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            claim = _claim_name(pod, vol)
            pvc = self.store.get(PVCS, pod["metadata"].get("namespace", ""), claim) if claim else None
            if pvc is not None and (pvc.get("spec") or {}).get("volumeName"):
                out.add(pvc["spec"]["volumeName"])
        return out

    def prepare(self, pod: Obj, sources: podenv.EnvSources) -> dict[str, Path]:
        """Every volume's host path, writing pod-level contents; raises :class:`VolumeNotReady`."""
        dirs: dict[str, Path] = {}
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            dirs[vol["name"]] = self._volume(pod, vol, sources)
        return dirs

    def _volume(self, pod: Obj, vol: Obj, sources: podenv.EnvSources) -> Path:
        name = vol["name"]
        claim = _claim_name(pod, vol)
        if claim:
            return self._pvc(pod, claim)
        if "hostPath" in vol:
            return _host_path(name, vol["hostPath"])
        target = self.pod_dir(pod) / "volumes" / name
        kind = next((k for k in _POD_LEVEL if k in vol), "emptyDir")
        if kind == "emptyDir":
            target.mkdir(parents=True, exist_ok=True)
            if (vol.get("emptyDir") or {}).get("medium") == "Memory" and self.as_root:
                _mount_tmpfs(name, target, (vol.get("emptyDir") or {}).get("sizeLimit"))
            return target
        self._write_api_volume(pod, vol, kind, target, sources)
        return target

    def _write_api_volume(
        self, pod: Obj, vol: Obj, kind: str, target: Path, sources: podenv.EnvSources
    ) -> bool:
        files = _contents(pod, vol["name"], kind, vol[kind], sources)
        try:
            return atomicwriter.write(target, files)
        except ValueError as exc:
            msg = f'MountVolume.SetUp failed for volume "{vol["name"]}" : {exc}'
            raise VolumeNotReady(msg, event=msg) from exc

    def refresh(self, pod: Obj, sources: podenv.EnvSources) -> list[str]:
        """Re-write the API volumes whose source changed (the kubelet's periodic remount); their names.

        A source that went away keeps the files last written (the kubelet logs the failed update).
        """
        updated = []
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            kind = next((k for k in API_VOLUMES if k in vol), "")
            if not kind or _claim_name(pod, vol):
                continue
            try:
                if self._write_api_volume(
                    pod, vol, kind, self.pod_dir(pod) / "volumes" / vol["name"], sources
                ):
                    updated.append(vol["name"])
            except VolumeNotReady as exc:
                log.debug("devcluster kubelet %s: volume %s not refreshed: %s", self.node, vol["name"], exc)
        return updated

    def _pvc(self, pod: Obj, claim: str) -> Path:
        ns = pod["metadata"].get("namespace", "")
        pvc = self.store.get(PVCS, ns, claim)
        if pvc is None:
            raise VolumeNotReady(f'persistentvolumeclaim "{claim}" not found')
        pv_name = (pvc.get("spec") or {}).get("volumeName")
        if not pv_name or (pvc.get("status") or {}).get("phase") != "Bound":
            raise VolumeNotReady(f"PVC {ns}/{claim} is not bound")
        pv = self.store.get(PVS, "", pv_name)
        if pv is None:
            raise VolumeNotReady(f'persistentvolume "{pv_name}" not found')
        spec = pv.get("spec") or {}
        if "csi" in spec:
            handle, driver = spec["csi"]["volumeHandle"], spec["csi"].get("driver", "")
            modes = spec.get("accessModes") or (pvc.get("spec") or {}).get("accessModes") or []
            if needs_attach(driver, modes) and not self.attached(pv_name, handle, driver):
                raise VolumeNotReady(
                    f'volume "{pv_name}" is not attached to node {self.node}', unattached=pv_name
                )
            path = self.volume_dir(handle)
        elif "hostPath" in spec or "local" in spec:
            path = Path((spec.get("hostPath") or spec.get("local") or {})["path"])
        else:
            raise VolumeNotReady(f'persistentvolume "{pv_name}" has no volume source this node can mount')
        path.mkdir(parents=True, exist_ok=True)
        return path

    def attached(self, pv_name: str, handle: str, driver: str) -> bool:
        va = self.store.get(ATTACHMENTS, "", attachment_name(handle, driver, self.node))
        candidates = [va] if va is not None else list(self.store.items(ATTACHMENTS))
        for obj in candidates:
            spec = obj.get("spec") or {}
            if (
                spec.get("nodeName") == self.node
                and (spec.get("source") or {}).get("persistentVolumeName") == pv_name
                and (obj.get("status") or {}).get("attached")
            ):
                return True
        return False

    def mounts(self, pod: Obj, container: Obj, dirs: dict[str, Path], env: dict[str, str]) -> MountTable:
        """The container's mount table; creates its root dir and subPath directories."""
        root = self.pod_dir(pod) / container["name"] / "root"
        root.mkdir(parents=True, exist_ok=True)
        table: dict[str, Path] = {}
        readonly: set[str] = set()
        specs = {v["name"]: v for v in (pod.get("spec") or {}).get("volumes") or []}
        for vm in container.get("volumeMounts") or []:
            host = dirs.get(vm["name"])
            if host is None:
                continue
            sub = vm.get("subPath") or podenv.expand(vm.get("subPathExpr") or "", env)
            if sub:
                host = host / sub.lstrip("/")
                if not host.exists() and not host.is_symlink():
                    host.mkdir(parents=True, exist_ok=True)
            path = posixpath.normpath("/" + vm["mountPath"].lstrip("/"))
            table[path] = host
            if vm.get("readOnly") or _read_only(specs.get(vm["name"]) or {}):
                readonly.add(path)
        return MountTable(root, table, frozenset(readonly))

    def cleanup(self, pod: Obj) -> None:
        """Remove the pod's kubelet-owned directories (volumes, roots, logs) once it is gone."""
        self.unmount_memory(pod)
        shutil.rmtree(self.pod_dir(pod), ignore_errors=True)

    def unmount_memory(self, pod: Obj) -> None:
        """Unmount the pod's ``medium: Memory`` tmpfs (pod gone, or the node going down: a reboot clears them)."""
        volumes = self.pod_dir(pod) / "volumes"
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            if (vol.get("emptyDir") or {}).get("medium") == "Memory" and (volumes / vol["name"]).is_mount():
                subprocess.run(["umount", "-l", str(volumes / vol["name"])], check=False, capture_output=True)


def _read_only(vol: Obj) -> bool:
    """API volumes are always read-only; a claim is when its volume source says ``readOnly``."""
    return any(k in vol for k in API_VOLUMES) or bool(
        (vol.get("persistentVolumeClaim") or {}).get("readOnly")
    )


def _mount_tmpfs(name: str, target: Path, size_limit: str | None) -> None:
    """``medium: Memory``: a tmpfs at the emptyDir's directory, ``size=`` its ``sizeLimit`` (kubelet's empty_dir.go)."""
    if target.is_mount():
        return
    options = "mode=0777" + (f",size={int(parse_quantity(size_limit))}" if size_limit else "")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        msg = f'MountVolume.SetUp failed for volume "{name}" : mount failed: {done.stderr.strip()}'
        raise VolumeNotReady(msg, event=msg)


def _claim_name(pod: Obj, vol: Obj) -> str:
    if "persistentVolumeClaim" in vol:
        return str(vol["persistentVolumeClaim"].get("claimName", ""))
    if "ephemeral" in vol:
        return f"{pod['metadata']['name']}-{vol['name']}"
    return ""


def _host_path(name: str, spec: Obj) -> Path:
    path, kind = Path(spec["path"]), spec.get("type", "")
    if kind == "DirectoryOrCreate":
        path.mkdir(parents=True, exist_ok=True)
    elif kind == "Directory" and not path.is_dir():
        msg = f'MountVolume.SetUp failed for volume "{name}" : hostPath type check failed: {path} is not a directory'
        raise VolumeNotReady(msg, event=msg)
    return path


Files = dict[str, tuple[bytes, int]]  # relative path → (content, mode)


def _contents(pod: Obj, name: str, kind: str, spec: Obj, sources: podenv.EnvSources) -> Files:
    """The files of a secret/configMap/downwardAPI/projected volume."""
    default_mode = int(spec.get("defaultMode", 0o644))
    if kind == "projected":
        files: Files = {}
        for src in spec.get("sources") or []:
            if "serviceAccountToken" in src:
                files[src["serviceAccountToken"]["path"]] = (_token(pod, name, src, sources), default_mode)
            for sub in ("secret", "configMap", "downwardAPI"):
                if sub in src:
                    files.update(
                        _contents(pod, name, sub, {"defaultMode": default_mode, **src[sub]}, sources)
                    )
        return files
    if kind == "downwardAPI":
        out: Files = {}
        for item in spec.get("items") or []:
            if "fieldRef" in item:
                value = podenv.field_value(pod, item["fieldRef"]["fieldPath"])
            else:
                container = _container(pod, (item.get("resourceFieldRef") or {}).get("containerName", ""))
                value = podenv.resource_value(
                    pod, container, item["resourceFieldRef"], sources.node_allocatable
                )
            out[item["path"]] = (value.encode(), int(item.get("mode", default_mode)))
        return out
    return _keyed(pod, name, kind, spec, sources, default_mode)


def _token(pod: Obj, name: str, src: Obj, sources: podenv.EnvSources) -> bytes:
    """A projected serviceAccountToken: a TokenRequest bound to the pod (``sim/tokenmanager.py``)."""
    try:
        if sources.token is None:
            raise TokenError("failed to fetch token: this node has no token manager")
        return sources.token(pod, src["serviceAccountToken"])
    except TokenError as exc:
        msg = f'MountVolume.SetUp failed for volume "{name}" : {exc}'
        raise VolumeNotReady(msg, event=msg) from exc


def _keyed(pod: Obj, name: str, kind: str, spec: Obj, sources: podenv.EnvSources, mode: int) -> Files:
    ns = pod["metadata"].get("namespace", "")
    secret = kind == "secret"
    obj_name = spec.get("secretName" if secret else "name", "")
    obj = (sources.secret if secret else sources.config_map)(ns, obj_name)
    if obj is None:
        if spec.get("optional"):
            return {}
        what = "secret" if secret else "configmap"
        msg = f'MountVolume.SetUp failed for volume "{name}" : {what} "{obj_name}" not found'
        raise VolumeNotReady(msg, event=msg)
    raw: dict[str, bytes] = (
        {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()} if secret else {}
    )
    if not secret:
        raw = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
        raw.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    items = spec.get("items")
    if not items:
        return {k: (v, mode) for k, v in raw.items()}
    out: Files = {}
    for item in items:
        if item["key"] not in raw:
            if spec.get("optional"):
                continue
            what = "secret" if secret else "configmap"
            key = "key" if secret else "config key"
            msg = f'MountVolume.SetUp failed for volume "{name}" : {what} references non-existent {key}: {item["key"]}'
            raise VolumeNotReady(msg, event=msg)
        out[item["path"]] = (raw[item["key"]], int(item.get("mode", mode)))
    return out


def _container(pod: Obj, name: str) -> dict[str, Any]:
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name") == name or not name:
            return dict(c)
    return {}
