"""Names, label keys and the identity of one workspace: the vocabulary every builder and decision shares.

Pure. Kubernetes is the database (ARCHITECTURE.md): a workspace's objects are found again by the selector
labels built here, so their values must be valid label values for any JupyterHub user or server name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuworkspace_spawner.catalog.model import Ide, WorkspaceProfile

_PREFIX = "gpuworkspace.dev/"

LABEL_USER = _PREFIX + "user"
LABEL_SERVER = _PREFIX + "server"
LABEL_PROFILE = _PREFIX + "profile"
LABEL_CATALOG_VERSION = _PREFIX + "catalog-version"
LABEL_GPU_MODE = _PREFIX + "gpu-mode"
LABEL_COST_CENTER = _PREFIX + "cost-center"
LABEL_RUNTIME = _PREFIX + "runtime"
LABEL_NETWORK_PROFILE = _PREFIX + "network-profile"
LABEL_DISK = _PREFIX + "disk"
LABEL_DISK_STATE = _PREFIX + "disk-state"
LABEL_VM = _PREFIX + "vm"  # on a VM's template: the virt-launcher pod's label its Service selects

DISK_HOME = "home"
DISK_ROOT = "root"  # a VM's root disk (DataVolume and its PVC)
DISK_ACTIVE = "active"
DISK_RETAINED = "retained"

ANN_USERNAME = _PREFIX + "username"
ANN_SERVERNAME = _PREFIX + "servername"
ANN_PROFILE = _PREFIX + "profile"
ANN_CATALOG_VERSION = _PREFIX + "catalog-version"
ANN_IDE = _PREFIX + "ide"
ANN_RETAIN_UNTIL = _PREFIX + "retain-until"
ANN_LAST_NODE = _PREFIX + "last-node"  # where the disk was last attached: a fencing-check input
ANN_RETAINED_AT = _PREFIX + "retained-at"
ANN_RETAINED_BY = _PREFIX + "retained-by"
# set by an admin on a workspace pod (a VM: its template's annotations) to keep the idle culler away
ANN_CULL_EXEMPT = _PREFIX + "cull-exempt"

RETAINED_BY_SERVER_DELETED = "server-deleted"
RETAINED_BY_USER_DELETED = "user-deleted"

DEFAULT_SERVER = "default"  # the selector value of JupyterHub's unnamed server ("")

_LABEL_VALUE_MAX = 63
_HASH_LEN = 8
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_NOT_LABEL_CHARS = re.compile(r"[^-A-Za-z0-9_.]+")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_NOT_DNS_CHARS = re.compile(r"[^a-z0-9-]+")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LEN]


def label_value(text: str) -> str:
    """``text`` as a valid Kubernetes label value: unchanged when it already is one.

    Otherwise a readable slug (invalid characters become ``-``, trimmed to alphanumeric ends) plus ``-``
    and 8 hex digits of the SHA-256 of the original, so two different names never share a value
    (``alice@example.com`` → ``alice-example.com-<hash>``).
    """
    if len(text) <= _LABEL_VALUE_MAX and _LABEL_VALUE.fullmatch(text):
        return text
    digest = _digest(text)
    slug = _NOT_LABEL_CHARS.sub("-", text)[: _LABEL_VALUE_MAX - _HASH_LEN - 1]
    slug = slug.strip("-_.")
    return f"{slug}-{digest}" if slug else digest


def dns_label(text: str, *, max_length: int = _LABEL_VALUE_MAX) -> str:
    """``text`` as a DNS-1123 label (volume names): lowercase alphanumerics and ``-``, hashed when changed."""
    if len(text) <= max_length and _DNS_LABEL.fullmatch(text):
        return text
    slug = _NOT_DNS_CHARS.sub("-", text.lower())[: max_length - _HASH_LEN - 1].strip("-")
    return f"{slug}-{_digest(text)}" if slug else _digest(text)


@dataclass(frozen=True)
class WorkspaceIdentity:
    """Whose workspace this is: a JupyterHub user's server (``server=""`` is the default server)."""

    user: str
    server: str
    namespace: str
    release: str = "jupyterhub"

    @property
    def selector_labels(self) -> dict[str, str]:
        """The labels that find this workspace's pods and disks again; every object carries them."""
        return {
            LABEL_USER: label_value(self.user),
            LABEL_SERVER: label_value(self.server or DEFAULT_SERVER),
        }

    def owns(self, labels: Mapping[str, Any] | None) -> bool:
        """Whether an object's ``metadata.labels`` carry this workspace's selector labels."""
        labels = labels or {}
        return all(labels.get(key) == value for key, value in self.selector_labels.items())


@dataclass(frozen=True)
class WorkspaceContext:
    """Everything a builder needs to know about one start of one workspace."""

    identity: WorkspaceIdentity
    profile: WorkspaceProfile
    catalog_version: str
    ide: Ide
    home_claim: str  # the home PersistentVolumeClaim's name

    @property
    def profile_labels(self) -> dict[str, str]:
        """Profile and catalog version labels (they change when a retained disk is adopted)."""
        return {
            LABEL_PROFILE: label_value(self.profile.slug),
            LABEL_CATALOG_VERSION: label_value(self.catalog_version),
        }

    @property
    def labels(self) -> dict[str, str]:
        """Selector labels plus profile, catalog version, GPU mode, runtime, cost centre, network profile."""
        profile = self.profile
        labels = {
            **self.identity.selector_labels,
            **self.profile_labels,
            LABEL_GPU_MODE: label_value(profile.placement.gpu_mode),
            LABEL_RUNTIME: label_value(profile.runtime),
        }
        if profile.cost_center:
            labels[LABEL_COST_CENTER] = label_value(profile.cost_center)
        if profile.security.network_profile:
            labels[LABEL_NETWORK_PROFILE] = label_value(profile.security.network_profile)
        return labels

    @property
    def annotations(self) -> dict[str, str]:
        """The raw names behind the (possibly hashed) label values, for people and audit."""
        return {
            ANN_USERNAME: self.identity.user,
            ANN_SERVERNAME: self.identity.server,
            ANN_PROFILE: self.profile.slug,
            ANN_CATALOG_VERSION: self.catalog_version,
        }
