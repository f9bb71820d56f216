"""Workspace invariants (seed 000 §10) as pure checks over what the cluster says.

ONE_ACTIVE: a user's workspace has at most one active pod. Two pods of one workspace would mount the same
RBD home twice (RWO allows two pods on one node; across nodes it is a Multi-Attach error at best and a
corrupted filesystem at worst), so any extra pod is deleted before a new one starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuworkspace_spawner.manifests.names import WorkspaceIdentity

ONE_ACTIVE = "one-active"  # the invariant's name, for audit records and log lines


def decide_extra_pods(
    pods: Sequence[Mapping[str, Any]], identity: WorkspaceIdentity, keep_name: str
) -> list[str]:
    """Names of this workspace's pods other than ``keep_name`` that are not already terminating, sorted.

    A pod belongs to the workspace when it carries the identity's selector labels and exact-name
    annotations (and, when it says, lives in the identity's namespace): a label match alone is not enough,
    since a hashed label value can equal another user's plain name. The caller deletes the names returned.
    """
    extra = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = meta.get("name")
        if not name or name == keep_name or meta.get("deletionTimestamp"):
            continue
        if meta.get("namespace", identity.namespace) != identity.namespace:
            continue
        if identity.owns(meta):
            extra.append(str(name))
    return sorted(extra)
