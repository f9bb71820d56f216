"""Names, label keys and the identity of one workspace: the vocabulary every builder and decision shares.

Pure. Kubernetes is the database (ARCHITECTURE.md): a workspace's objects are found again by the selector
labels built here, so their values must be valid label values for any JupyterHub user or server name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpuworkspace_spawner.catalog.model import Ide, WorkspaceProfile

_PREFIX = "gpuworkspace.dev/"

LABEL_USER = _PREFIX + "user"
LABEL_SERVER = _PREFIX + "server"
LABEL_PROFILE = _PREFIX + "profile"
LABEL_CATALOG_VERSION = _PREFIX + "catalog-version"
LABEL_GPU_MODE = _PREFIX + "gpu-mode"
LABEL_COST_CENTER = _PREFIX + "cost-center"
LABEL_TEAM = _PREFIX + "team"
# the first 16 hex digits of a pinned image's digest: a label cannot hold "sha256:" and 64 hex digits
LABEL_IMAGE_DIGEST_PREFIX = _PREFIX + "image-digest-prefix"
LABEL_RUNTIME = _PREFIX + "runtime"
LABEL_NETWORK_PROFILE = _PREFIX + "network-profile"
LABEL_DISK = _PREFIX + "disk"
LABEL_DISK_STATE = _PREFIX + "disk-state"
LABEL_KIND = _PREFIX + "kind"  # "job" on everything a job owns: attribution and the culler tell it apart
LABEL_JOB = _PREFIX + "job"  # the Job's name, on its pods, snapshot and code claim
KIND_JOB = "job"
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
ANN_TEAM = _PREFIX + "team"  # the exact team name behind the (possibly hashed) label value
ANN_IMAGE = _PREFIX + "image"  # a container profile's image reference, as the catalog names it
ANN_IMAGE_DIGEST = _PREFIX + "image-digest"  # sha256:<64 hex> when that reference is pinned by digest
ANN_DATA_SOURCE = _PREFIX + "data-source"  # a VM profile's image: its CDI DataSource, <namespace>/<name>
ANN_RETAIN_UNTIL = _PREFIX + "retain-until"
ANN_LAST_NODE = _PREFIX + "last-node"  # where the disk was last attached: a fencing-check input
ANN_RETAINED_AT = _PREFIX + "retained-at"
ANN_RETAINED_BY = _PREFIX + "retained-by"
# on a disk: the creation time of the hub user record that owns it (with ANN_USERNAME, the owner's stable
# identity: a user deleted and created again under the same name is a new record with a new time)
ANN_OWNER_CREATED = _PREFIX + "owner-created"
# set by an admin on a workspace pod (a VM: its template's annotations) to keep the idle culler away
ANN_CULL_EXEMPT = _PREFIX + "cull-exempt"

RETAINED_BY_SERVER_DELETED = "server-deleted"
RETAINED_BY_USER_DELETED = "user-deleted"
RETAINED_BY_TRANSFER = (
    "transfer-replaced"  # a server's disk set aside when an admin transferred another to it
)

DEFAULT_SERVER = "default"  # the selector value of JupyterHub's unnamed server ("")

# Set on a disk by the start that created or last adopted it; the adopt patch removes those it lacks.
PROVENANCE_LABELS = (LABEL_TEAM, LABEL_IMAGE_DIGEST_PREFIX)
PROVENANCE_ANNOTATIONS = (ANN_TEAM, ANN_IMAGE, ANN_IMAGE_DIGEST, ANN_DATA_SOURCE)

_LABEL_VALUE_MAX = 63
_DIGEST_PREFIX_LEN = 16
_IMAGE_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")
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


def image_digest(image: str | None) -> str:
    """``sha256:<64 hex>`` of an image reference pinned by digest (``repo@sha256:...``); else ``""``."""
    match = _IMAGE_DIGEST.search(image or "")
    return match.group(1) if match else ""


def dns_label(text: str, *, max_length: int = _LABEL_VALUE_MAX) -> str:
    """``text`` as a DNS-1123 label (volume names): lowercase alphanumerics and ``-``, hashed when changed."""
    if len(text) <= max_length and _DNS_LABEL.fullmatch(text):
        return text
    slug = _NOT_DNS_CHARS.sub("-", text.lower())[: max_length - _HASH_LEN - 1].strip("-")
    return f"{slug}-{_digest(text)}" if slug else _digest(text)


@dataclass(frozen=True)
class WorkspaceIdentity:
    """Whose workspace this is: a JupyterHub user's server (``server=""`` is the default server).

    ``owner`` is the stable identity of the user record (:func:`owner_key` of its creation time; empty
    when unknown): it is written on every disk, and a disk with another owner is never adopted.
    """

    user: str
    server: str
    namespace: str
    release: str = "jupyterhub"
    owner: str = ""

    @property
    def selector_labels(self) -> dict[str, str]:
        """The labels that find this workspace's pods and disks again; every object carries them."""
        return {
            LABEL_USER: label_value(self.user),
            LABEL_SERVER: label_value(self.server or DEFAULT_SERVER),
        }

    @property
    def name_annotations(self) -> dict[str, str]:
        """The exact user and server names: what ownership is decided on (labels may be hashed)."""
        return {ANN_USERNAME: self.user, ANN_SERVERNAME: self.server}

    def owns(self, meta: Mapping[str, Any] | None) -> bool:
        """Whether an object (its ``metadata``) belongs to this workspace: the selector labels match AND the
        exact-name annotations equal the user and server names.

        Labels are only an index: a hashed label value can equal another user's plain name
        (``alice@example.com`` and a user literally named ``alice-example.com-<hash>``), so a label match
        alone never decides ownership. An object without the name annotations is nobody's (fail closed).
        """
        meta = meta or {}
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        return all(labels.get(k) == v for k, v in self.selector_labels.items()) and all(
            annotations.get(k) == v for k, v in self.name_annotations.items()
        )


@dataclass(frozen=True)
class WorkspaceContext:
    """Everything a builder needs to know about one start of one workspace."""

    identity: WorkspaceIdentity
    profile: WorkspaceProfile
    catalog_version: str
    ide: Ide
    home_claim: str  # the home PersistentVolumeClaim's name
    team: str = ""  # provenance.decide_team; "" when neither the catalog nor a group names one
    team_source: str = ""  # where the team came from: "catalog" or "group <name>"

    @property
    def profile_labels(self) -> dict[str, str]:
        """Profile and catalog version labels (they change when a retained disk is adopted)."""
        return {
            LABEL_PROFILE: label_value(self.profile.slug),
            LABEL_CATALOG_VERSION: label_value(self.catalog_version),
        }

    @property
    def labels(self) -> dict[str, str]:
        """Selector labels plus profile, catalog version, GPU mode, runtime, cost centre, network profile,
        team and image digest prefix (the last four only when known)."""
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
        return {**labels, **self.provenance_labels}

    @property
    def provenance_labels(self) -> dict[str, str]:
        """Team and image digest prefix, each only when known (also on disks: see PROVENANCE_LABELS)."""
        labels = {LABEL_TEAM: label_value(self.team)} if self.team else {}
        digest = image_digest(self.profile.image)
        if digest:
            labels[LABEL_IMAGE_DIGEST_PREFIX] = digest.removeprefix("sha256:")[:_DIGEST_PREFIX_LEN]
        return labels

    @property
    def provenance_annotations(self) -> dict[str, str]:
        """The exact team, the image (a container's reference and digest, a VM's DataSource), when known."""
        profile = self.profile
        annotations = {ANN_TEAM: self.team} if self.team else {}
        if profile.image:
            annotations[ANN_IMAGE] = profile.image
        digest = image_digest(profile.image)
        if digest:
            annotations[ANN_IMAGE_DIGEST] = digest
        if profile.vm is not None:
            annotations[ANN_DATA_SOURCE] = f"{profile.vm.data_source_namespace}/{profile.vm.data_source_name}"
        return annotations

    @property
    def annotations(self) -> dict[str, str]:
        """The raw names behind the (possibly hashed) label values (ownership checks read them), and the
        image and team of this start."""
        return {
            **self.identity.name_annotations,
            ANN_PROFILE: self.profile.slug,
            ANN_CATALOG_VERSION: self.catalog_version,
            **self.provenance_annotations,
        }

    @property
    def disk_annotations(self) -> dict[str, str]:
        """A disk's annotations: the names, profile and version, plus the owner's stable identity."""
        owner = {ANN_OWNER_CREATED: self.identity.owner} if self.identity.owner else {}
        return {**self.annotations, **owner}


def workspace_names(meta: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(user, server) of a workspace object from its exact-name annotations; None when it has none.

    Never from the labels: a hashed label value can equal another user's plain name, so an object
    without the annotations is attributed to nobody (fail closed).
    """
    annotations = (meta or {}).get("annotations") or {}
    user = annotations.get(ANN_USERNAME)
    if not isinstance(user, str) or not user:
        return None
    server = annotations.get(ANN_SERVERNAME) or ""
    return user, str(server)


def owner_key(created: datetime | str | None) -> str:
    """The stable identity of a hub user record: its creation time as RFC 3339 UTC with microseconds.

    ``created`` is ``User.created`` (a naive UTC datetime in the hub's database) or the ``created`` string
    of the hub's REST API user model; both give the same key. Empty when unknown (None, unparseable).
    The hub's numeric user id is not used: the REST API does not expose it and SQLite hands the highest
    id out again after that user is deleted.
    """
    if isinstance(created, str):
        try:
            created = datetime.fromisoformat(created.strip().replace("Z", "+00:00"))
        except ValueError:
            return ""
    if not isinstance(created, datetime):
        return ""
    if created.tzinfo is not None:
        created = created.astimezone(UTC).replace(tzinfo=None)
    return created.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
