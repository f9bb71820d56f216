"""VM mode: the root-disk DataVolume, the cloud-init Secret, the VirtualMachine and its Service.

Pure. Seed 000 §8: the root disk is cloned by CDI from the profile's golden DataSource and created on its
own (no ``dataVolumeTemplates``, never an ownerReference), so deleting or rebuilding the VM never takes the
user's disk with it; the VM only references it. The VM is created ``Halted`` and started and stopped by
merge patches of ``runStrategy``. The hub's API token lives only in the cloud-init Secret: cloud-init writes
it to ``/etc/gpuworkspace/singleuser.env`` in the guest, where the golden image's single-user service reads
it (``KEY=VALUE`` lines, values shell-quoted).

Names are derived from the workspace (``vm_names``); ``WorkspaceContext.home_claim`` must be the root
disk's name (``VmNames.disk``): the DataVolume's PVC is the disk the retention lifecycle tracks.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from gpuworkspace_spawner.catalog.model import NodePool, Resources, VmSpec
from gpuworkspace_spawner.manifests.conventions import cloud_init_files
from gpuworkspace_spawner.manifests.names import (
    ANN_IDE,
    DEFAULT_SERVER,
    DISK_ACTIVE,
    DISK_ROOT,
    LABEL_DISK,
    LABEL_DISK_STATE,
    LABEL_VM,
    WorkspaceContext,
    WorkspaceIdentity,
)
from gpuworkspace_spawner.manifests.pod import NOTEBOOK_PORT_NAME

NOTEBOOK_PORT = 8888  # the guest's single-user server (SINGLEUSER_PORT's default in the golden image)
ROOT_DISK = "rootdisk"
CLOUD_INIT_DISK = "cloudinitdisk"
USERDATA_KEY = "userdata"  # the key KubeVirt's cloudInitNoCloud.secretRef reads
ENV_FILE = "/etc/gpuworkspace/singleuser.env"
TERMINATION_GRACE_S = 60
ANN_CDI_DELETE_AFTER_COMPLETION = "cdi.kubevirt.io/storage.deleteAfterCompletion"
RUN_ALWAYS = "Always"
RUN_HALTED = "Halted"

# z2jh's NetworkPolicies select singleuser pods on these labels; the hub's ingress policy on the last one.
_Z2JH_LABELS = {"app": "jupyterhub", "component": "singleuser-server"}
_NETWORK_ACCESS_HUB = "hub.jupyter.org/network-access-hub"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# str.splitlines() breaks lines at all of these (the guest reads the file line by line), and NUL
_LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029\0")
_NAME_MAX = 63
_LONGEST_SUFFIX = "-cloudinit"
_BASE_MAX = _NAME_MAX - len(_LONGEST_SUFFIX)
_PLAIN_PREFIX = "ws-"
_HASHED_PREFIX = "wsx-"  # never a plain name: those start with "ws-"
_HASH_LEN = 12


@dataclass(frozen=True)
class VmNames:
    """The names of one workspace's VM objects (all DNS-1123 labels of at most 63 characters)."""

    vm: str  # the VirtualMachine (and so its VMI)
    disk: str  # the root-disk DataVolume and the PVC CDI creates for it
    secret: str  # the cloud-init Secret
    service: str  # the ClusterIP Service in front of the guest's port 8888


def vm_names(identity: WorkspaceIdentity) -> VmNames:
    """Names for ``identity``'s VM: ``ws-<user>--<server>`` when that is plainly a DNS label, else hashed.

    Plain names are used only when the user and server names are DNS labels and the user name has no
    ``--``, so ``(user, server)`` can be read back from them; every other workspace gets
    ``wsx-<slug>-<12 hex digits of SHA-256 over user and server>``. The two forms never meet, so two
    workspaces never share a name. The default server is ``default``; a server named ``default`` is hashed.
    """
    user, server = identity.user, identity.server
    plain = f"{_PLAIN_PREFIX}{user}--{server or DEFAULT_SERVER}"
    readable = (
        _DNS_LABEL.fullmatch(user) is not None
        and "--" not in user
        and server != DEFAULT_SERVER
        and (not server or _DNS_LABEL.fullmatch(server) is not None)
    )
    if not readable or len(plain) > _BASE_MAX:
        digest = hashlib.sha256(f"{user}\0{server}".encode("utf-8", "surrogatepass")).hexdigest()
        slug = re.sub(r"[^a-z0-9-]+", "-", f"{user}--{server or DEFAULT_SERVER}".lower())
        slug = slug[: _BASE_MAX - len(_HASHED_PREFIX) - _HASH_LEN - 1].strip("-")
        plain = (
            f"{_HASHED_PREFIX}{slug}-{digest[:_HASH_LEN]}"
            if slug
            else f"{_HASHED_PREFIX}{digest[:_HASH_LEN]}"
        )
    return VmNames(vm=plain, disk=f"{plain}-root", secret=f"{plain}{_LONGEST_SUFFIX}", service=plain)


def _vm_spec(ws: WorkspaceContext, names: VmNames) -> VmSpec:
    if ws.profile.vm is None:
        raise ValueError(f"profile {ws.profile.slug!r} is not a VM profile (runtime: {ws.profile.runtime})")
    if ws.home_claim != names.disk:
        raise ValueError(f"home_claim {ws.home_claim!r} is not the VM's root disk {names.disk!r}")
    return ws.profile.vm


def build_root_disk(ws: WorkspaceContext, names: VmNames) -> dict[str, Any]:
    """The root-disk DataVolume: a CDI clone of the profile's DataSource, RWO, never owned by anything.

    The access mode is explicit because CDI's StorageProfile default for Ceph RBD is RWX Block. CDI
    garbage-collects completed DataVolumes unless told not to; the VM references the DataVolume, so it
    is kept (``storage.deleteAfterCompletion: "false"``).
    """
    vm = _vm_spec(ws, names)
    storage: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": vm.root_disk_size}},
    }
    if vm.root_disk_class is not None:
        storage["storageClassName"] = vm.root_disk_class
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {
            "name": names.disk,
            "namespace": ws.identity.namespace,
            "labels": {
                **ws.identity.selector_labels,
                LABEL_DISK: DISK_ROOT,
                LABEL_DISK_STATE: DISK_ACTIVE,
                **ws.profile_labels,
                **ws.provenance_labels,
            },
            "annotations": {**ws.disk_annotations, ANN_CDI_DELETE_AFTER_COMPLETION: "false"},
        },
        "spec": {
            "sourceRef": {
                "kind": "DataSource",
                "name": vm.data_source_name,
                "namespace": vm.data_source_namespace,
            },
            "storage": storage,
        },
    }


def env_file(env: Mapping[str, str]) -> str:
    """``KEY=VALUE`` lines, values shell-quoted, keys sorted; refuses keys and values a line cannot hold."""
    lines = []
    for key in sorted(env):
        value = env[key]
        if not _ENV_KEY.fullmatch(key):
            raise ValueError(f"{key!r} is not an environment variable name")
        if any(c in _LINE_BREAKS for c in value):
            raise ValueError(f"the value of {key} has a line break or NUL; it cannot go in {ENV_FILE}")
        lines.append(f"{key}={shlex.quote(value)}\n")
    return "".join(lines)


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings as ``|`` blocks (PyYAML falls back to quoting where a block cannot hold one)."""


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_BlockDumper.add_representer(str, _str)


def build_cloud_init_secret(ws: WorkspaceContext, names: VmNames, env: Mapping[str, str]) -> dict[str, Any]:
    """The cloud-init NoCloud user data as a Secret: writes the single-user environment (hub token
    included) to ``/etc/gpuworkspace/singleuser.env``, readable by root only. The only object that
    holds the token."""
    _vm_spec(ws, names)
    entry = {"path": ENV_FILE, "permissions": "0600", "content": env_file(env)}
    config = {"write_files": [entry, *cloud_init_files(ws)]}  # the guide: manifests/conventions.py
    userdata = "#cloud-config\n" + yaml.dump(config, Dumper=_BlockDumper, sort_keys=False)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": names.secret,
            "namespace": ws.identity.namespace,
            "labels": ws.labels,
            "annotations": ws.annotations,
        },
        "type": "Opaque",
        "stringData": {USERDATA_KEY: userdata},
    }


def build_vm(ws: WorkspaceContext, names: VmNames) -> dict[str, Any]:
    """The VirtualMachine, created ``Halted``: the guest's shape, the root disk and cloud-init by
    reference, the notebook port, passthrough GPUs and the node pool's placement."""
    vm = _vm_spec(ws, names)
    template_labels = {
        **ws.labels,
        LABEL_VM: names.vm,
        **_Z2JH_LABELS,
        "release": ws.identity.release,
        _NETWORK_ACCESS_HUB: "true",
    }
    spec: dict[str, Any] = {
        "domain": _domain(vm, ws.profile.resources),
        "networks": [{"name": "default", "pod": {}}],
        "volumes": [
            {"name": ROOT_DISK, "dataVolume": {"name": names.disk}},
            {"name": CLOUD_INIT_DISK, "cloudInitNoCloud": {"secretRef": {"name": names.secret}}},
        ],
        # RWO RBD disks cannot live-migrate: a drained node shuts the VM down (the disk is kept).
        "evictionStrategy": "None",
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
        **_placement(ws.profile.placement.node_pool),
    }
    template_meta = {"labels": template_labels, "annotations": {**ws.annotations, ANN_IDE: ws.ide}}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": names.vm,
            "namespace": ws.identity.namespace,
            "labels": ws.labels,
            "annotations": {**ws.annotations, ANN_IDE: ws.ide},
        },
        "spec": {"runStrategy": RUN_HALTED, "template": {"metadata": template_meta, "spec": spec}},
    }


def vm_outdated(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """True when the stored VM lacks something the profile now builds: its template (CPU, memory, GPUs,
    placement, disks), labels or annotations (profile, GPU mode, catalog version). A profile edit, or a
    server switched to another VM profile, then takes effect at the next start instead of never.

    Fields the API server added (KubeVirt's defaults) do not count: only what ``wanted`` says is compared.
    """
    for key in ("labels", "annotations"):
        if not _covers((current.get("metadata") or {}).get(key) or {}, wanted["metadata"].get(key) or {}):
            return True
    return not _covers((current.get("spec") or {}).get("template") or {}, wanted["spec"]["template"])


def _covers(have: Any, want: Any) -> bool:
    """``have`` holds every value of ``want`` (dicts: the keys ``want`` has; lists: item by item)."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(k in have and _covers(have[k], v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(map(_covers, have, want))
    return bool(have == want)


def _domain(vm: VmSpec, resources: Resources) -> dict[str, Any]:
    devices: dict[str, Any] = {
        "disks": [
            {"name": ROOT_DISK, "bootOrder": 1, "disk": {"bus": "virtio"}},
            {"name": CLOUD_INIT_DISK, "disk": {"bus": "virtio"}},
        ],
        "interfaces": [
            {
                "name": "default",
                "masquerade": {},
                "ports": [{"name": NOTEBOOK_PORT_NAME, "port": NOTEBOOK_PORT, "protocol": "TCP"}],
            }
        ],
    }
    if vm.gpus:
        devices["gpus"] = [{"name": g.name, "deviceName": g.device_name} for g in vm.gpus]
    domain: dict[str, Any] = {
        "cpu": {"cores": vm.cores, "sockets": vm.sockets, "threads": vm.threads},
        "memory": {"guest": vm.guest_memory},
        "devices": devices,
    }
    # requests without limits: the guest bursts to its vCPUs when the node is idle (seed 001 §6)
    wanted = {"requests": dict(resources.requests), "limits": dict(resources.limits)}
    if any(wanted.values()):
        domain["resources"] = {k: v for k, v in wanted.items() if v}
    return domain


def _placement(pool: NodePool | None) -> dict[str, Any]:
    if pool is None:
        return {}
    out: dict[str, Any] = {}
    if pool.node_selector:
        out["nodeSelector"] = dict(pool.node_selector)
    if pool.tolerations:
        out["tolerations"] = [dict(t) for t in pool.tolerations]
    return out


def build_vm_service(ws: WorkspaceContext, names: VmNames) -> dict[str, Any]:
    """A ClusterIP Service for the guest's port 8888, selecting the VM's template label (KubeVirt puts
    ``kubevirt.io/domain`` on the virt-launcher pod only as an annotation)."""
    _vm_spec(ws, names)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.service,
            "namespace": ws.identity.namespace,
            "labels": ws.labels,
            "annotations": ws.annotations,
        },
        "spec": {
            "type": "ClusterIP",
            "selector": {LABEL_VM: names.vm},
            "ports": [
                {
                    "name": NOTEBOOK_PORT_NAME,
                    "port": NOTEBOOK_PORT,
                    "targetPort": NOTEBOOK_PORT,
                    "protocol": "TCP",
                }
            ],
        },
    }


def build_start_patch() -> dict[str, Any]:
    """JSON merge patch: start the VM (KubeVirt creates the VMI)."""
    return {"spec": {"runStrategy": RUN_ALWAYS}}


def build_stop_patch() -> dict[str, Any]:
    """JSON merge patch: stop the VM (the VMI goes; the VM, disk and Secret stay)."""
    return {"spec": {"runStrategy": RUN_HALTED}}
