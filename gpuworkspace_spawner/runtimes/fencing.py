"""The fencing check before compute starts on a disk (both runtimes): the I/O around
:func:`~gpuworkspace_spawner.lifecycle.fencing.decide_fencing`.

Fast path from two cluster-wide watch caches (VolumeAttachments, Nodes): a disk attached nowhere while
every node is reachable passes without a request. Otherwise the evidence is listed (pods and VMIs using
the claim, nodes, NetworkFences) and the pure verdict decides; a refusal is audited with its evidence.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ..compat import SpawnException
from ..k8s import NotFound, Unavailable, custom, gateway
from ..k8s.custom import ClusterWatch
from ..k8s.kinds import NETWORK_FENCES, VM_INSTANCES
from ..lifecycle.fencing import decide_fencing, evidence_needed, refuse_shared_disk
from .context import Ports, RuntimeContext

CLUSTER_WATCH_READY_S = 30.0  # a fencing check waits this long for the first list of nodes/attachments
_CLUSTER_WATCHES: dict[str, ClusterWatch] = {}  # one per hub process, shared by every spawner
log = logging.getLogger("gpuworkspace.catalog")


async def cluster_watch(kind: str) -> ClusterWatch:
    """The hub's watch of ``volumeattachments`` or ``nodes``, once it has listed them."""
    if kind not in _CLUSTER_WATCHES:
        api, method = (
            ("StorageV1Api", "list_volume_attachment")
            if kind == "volumeattachments"
            else ("CoreV1Api", "list_node")
        )
        _CLUSTER_WATCHES[kind] = ClusterWatch(api, method, log)
    await _CLUSTER_WATCHES[kind].ready(timeout_s=CLUSTER_WATCH_READY_S)
    return _CLUSTER_WATCHES[kind]


async def check_fencing(
    ctx: RuntimeContext,
    ports: Ports,
    claim_name: str,
    *,
    claim: dict[str, Any] | None,
    last_node: str | None,
    own_uids: frozenset[str],
) -> None:
    """Refuse (reason 'fencing') to start compute on a disk another node may still write to.

    ``claim``: the claim from a watch cache, if there is one (else it is read); ``last_node``: where the
    disk was last attached (the disk's annotation)."""
    timeout, namespace = ctx.request_timeout, ctx.identity.namespace
    if claim is None:
        try:
            claim = await gateway.read_pvc(ports.api, namespace, claim_name, request_timeout=timeout)
        except NotFound:
            return  # not provisioned yet: attached nowhere
    shared = refuse_shared_disk(claim)
    if shared:
        raise SpawnException(shared, reason="disk", status_code=409)
    pv_name = (claim.get("spec") or {}).get("volumeName")
    try:
        attachments, nodes = await cluster_watch("volumeattachments"), await cluster_watch("nodes")
    except Unavailable as exc:  # fail closed: no evidence, no start
        raise SpawnException(
            f"Cannot check where disk {claim_name} is attached ({exc}); try again shortly",
            reason="fencing",
            status_code=503,
        ) from None
    if not evidence_needed(pv_name, list(attachments.objects.values()), nodes.objects.values()):
        return  # the fast path: attached nowhere and every node reachable (read from watch caches)
    assert pv_name  # evidence_needed is False without a volume
    pods = await custom.list_all_pods(namespace, request_timeout=timeout)
    api = custom.custom_api()
    vmis = await custom.list_namespaced(api, VM_INSTANCES, namespace, request_timeout=timeout)
    verdict = decide_fencing(
        claim=claim,
        pv_name=pv_name,
        attachments=attachments.attached(pv_name),
        consumers=[*pods, *vmis],
        nodes=await custom.list_nodes(request_timeout=timeout),
        fences=await custom.list_cluster(api, NETWORK_FENCES, request_timeout=timeout),
        own_uids=own_uids,
        last_node=last_node,
    )
    message = f"{verdict.reason} Evidence: {json.dumps(verdict.evidence, sort_keys=True)}"
    if verdict.action != "pass":
        await ports.audit("disk-refused", "PersistentVolumeClaim", claim_name, message, claim)
        raise SpawnException(
            f"Your disk may still be in use on another node, so it was not attached again: {verdict.reason}. "
            "An administrator has been told what to check.",
            reason="fencing",
            log_message=f"fencing check refused {claim_name}: {verdict.reason}; admin: {verdict.admin_hint}",
            status_code=409,
        )
    ports.log_record("disk-adopted", "PersistentVolumeClaim", claim_name, f"fencing check passed: {message}")
