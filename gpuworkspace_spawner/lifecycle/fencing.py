"""Whether a personal RBD disk may start on a new node: the fencing verdict.

Pure; fail closed (ARCHITECTURE.md principle 4): anything not proven safe is refused, and the refusal
says exactly what is missing and what an administrator runs to provide it.

Why the check exists: an RBD image holds an ordinary filesystem, so mapping it on two nodes at once
corrupts it. Nothing in the storage path prevents that once a node stops answering:

- Ceph CSI's ControllerPublish/Unpublish (attach/detach) is a no-op, so a VolumeAttachment that
  disappeared proves nothing; the image may still be mapped and written on the old node.
- ``ReadWriteOncePod`` is enforced by the scheduler and the kubelet from the API's point of view; a
  partitioned node's kubelet never hears about it, so it is not fencing.

Proof that an unreachable old node can no longer write is either its Node object being gone (the
documented admin action after powering it off), or both the ``node.kubernetes.io/out-of-service``
taint (Kubernetes' non-graceful node shutdown: pods are force-deleted, volumes detached) and a
csi-addons NetworkFence in state ``Fenced`` whose ``status.result`` is ``Succeeded`` and whose CIDRs
cover every address of the node (Ceph blocklists those clients, so their I/O fails).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .spawning import is_ready

__all__ = [
    "FENCED",
    "FENCE_SUCCEEDED",
    "OUT_OF_SERVICE_TAINT",
    "ClaimConsumer",
    "FencingAction",
    "FencingVerdict",
    "claim_consumers",
    "decide_fencing",
    "refuse_shared_disk",
]

FencingAction = Literal["pass", "refuse"]

OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
OUT_OF_SERVICE_EFFECT = "NoExecute"
FENCED = "Fenced"
FENCE_SUCCEEDED = "Succeeded"

_ADDRESS_TYPES = ("InternalIP", "ExternalIP")
_SHARED_MODES = ("ReadWriteMany", "ReadOnlyMany")
_FINISHED = frozenset({"Succeeded", "Failed"})
_VMI = "VirtualMachineInstance"
_RUNBOOK = "see the fencing runbook (docs/how-to/fencing-runbook)"


@dataclass(frozen=True)
class FencingVerdict:
    action: FencingAction
    reason: str
    admin_hint: str = ""
    evidence: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class ClaimConsumer:
    kind: str
    name: str
    namespace: str
    uid: str
    node: str | None
    terminating: bool
    finished: bool
    own: bool

    @property
    def noun(self) -> str:
        return "VMI" if self.kind == _VMI else "pod"

    @property
    def label(self) -> str:
        state = "terminating " if self.terminating and not self.finished else ""
        return f"{state}{self.noun} {self.name}"

    def as_evidence(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
            "node": self.node,
            "terminating": self.terminating,
            "finished": self.finished,
            "own": self.own,
        }


# -- shared disks --------------------------------------------------------------------------------


def refuse_shared_disk(claim: Mapping[str, Any]) -> str | None:
    """Why ``claim`` must not be a personal home or root disk (a shared access mode), or None."""
    spec = claim.get("spec") or {}
    shared = [mode for mode in spec.get("accessModes") or [] if mode in _SHARED_MODES]
    if not shared:
        return None
    name = (claim.get("metadata") or {}).get("name", "?")
    return (
        f"claim {name} asks for {', '.join(shared)}; a personal home or root disk must be ReadWriteOnce "
        "or ReadWriteOncePod, because an RBD filesystem mounted on two nodes at once is corrupted"
    )


# -- reading the raw objects ---------------------------------------------------------------------


def _kind(obj: Mapping[str, Any]) -> str:
    """Pod or VirtualMachineInstance; list items carry no ``kind``, so a VMI is known by ``spec.domain``."""
    kind = obj.get("kind")
    if kind:
        return str(kind)
    return _VMI if "domain" in (obj.get("spec") or {}) else "Pod"


def _references(obj: Mapping[str, Any], claim: str) -> bool:
    for volume in (obj.get("spec") or {}).get("volumes") or []:
        if (volume.get("persistentVolumeClaim") or {}).get("claimName") == claim:
            return True
        if (volume.get("dataVolume") or {}).get("name") == claim:
            return True
    return False


def _consumer(obj: Mapping[str, Any], own_uids: frozenset[str], namespace: str) -> ClaimConsumer:
    meta = obj.get("metadata") or {}
    kind = _kind(obj)
    status = obj.get("status") or {}
    node = status.get("nodeName") if kind == _VMI else (obj.get("spec") or {}).get("nodeName")
    owners = {str(ref.get("uid")) for ref in meta.get("ownerReferences") or []}
    uid = str(meta.get("uid") or "")
    return ClaimConsumer(
        kind=kind,
        name=str(meta.get("name", "?")),
        namespace=str(meta.get("namespace") or namespace),
        uid=uid,
        node=str(node) if node else None,
        terminating=bool(meta.get("deletionTimestamp")),
        finished=status.get("phase") in _FINISHED,
        # A virt-launcher pod is owned by its VMI: the own VMI's launcher is own compute too.
        own=bool(uid and uid in own_uids) or bool(owners & own_uids),
    )


def claim_consumers(
    claim: Mapping[str, Any], objects: Sequence[Mapping[str, Any]], own_uids: frozenset[str] = frozenset()
) -> list[ClaimConsumer]:
    """The pods and VMIs among ``objects`` that use ``claim`` (by claim name, or DataVolume name)."""
    meta = claim.get("metadata") or {}
    name = meta.get("name")
    namespace = str(meta.get("namespace") or "")
    found = []
    for obj in objects:
        obj_ns = (obj.get("metadata") or {}).get("namespace")
        if namespace and obj_ns and obj_ns != namespace:
            continue
        if name and _references(obj, str(name)):
            found.append(_consumer(obj, own_uids, namespace))
    return sorted(found, key=lambda c: (c.kind, c.name, c.uid))


def _ready_status(node: Mapping[str, Any]) -> str:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status") or "Unknown")
    return "missing"


def _taints(node: Mapping[str, Any]) -> list[str]:
    out = []
    for taint in (node.get("spec") or {}).get("taints") or []:
        value = f"={taint['value']}" if taint.get("value") else ""
        out.append(f"{taint.get('key')}{value}:{taint.get('effect')}")
    return out


def _out_of_service(node: Mapping[str, Any]) -> bool:
    return any(
        taint.get("key") == OUT_OF_SERVICE_TAINT and taint.get("effect") == OUT_OF_SERVICE_EFFECT
        for taint in (node.get("spec") or {}).get("taints") or []
    )


def _addresses(node: Mapping[str, Any]) -> list[str]:
    addresses = (node.get("status") or {}).get("addresses") or []
    return sorted({str(a.get("address")) for a in addresses if a.get("type") in _ADDRESS_TYPES})


def _networks(fence: Mapping[str, Any]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    networks = []
    for cidr in (fence.get("spec") or {}).get("cidrs") or []:
        try:
            networks.append(ipaddress.ip_network(str(cidr).strip(), strict=False))
        except ValueError:
            continue  # an unparseable CIDR covers nothing
    return networks


def _covers(fence: Mapping[str, Any], address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in _networks(fence))


def _fence_name(fence: Mapping[str, Any]) -> str:
    return str((fence.get("metadata") or {}).get("name", "?"))


def _fence_problem(fence: Mapping[str, Any]) -> str | None:
    """Why ``fence`` does not prove its CIDRs fenced, or None when it does.

    ``status.result`` describes the last operation the controller reconciled; a fence flipped back to
    ``Fenced`` whose status still reports the unfence (or an older generation) proves nothing yet.
    """
    spec, status = fence.get("spec") or {}, fence.get("status") or {}
    state = spec.get("fenceState") or "not set"
    if state != FENCED:
        return f"has fenceState {state}, not {FENCED}"
    result = status.get("result") or "not set"
    message = str(status.get("message") or "")
    if result != FENCE_SUCCEEDED:
        return f"has not Succeeded (status.result {result}{f': {message}' if message else ''})"
    if "unfenc" in message.lower():
        return f"still reports the last unfence ({message}); wait for the fence to be reconciled"
    generation = (fence.get("metadata") or {}).get("generation")
    seen = [c.get("observedGeneration") for c in status.get("conditions") or []]
    stale = [g for g in seen if isinstance(g, int) and isinstance(generation, int) and g < generation]
    if stale:
        return f"reports generation {max(stale)}, not its current generation {generation}"
    return None


def _fence_ok(fence: Mapping[str, Any]) -> bool:
    return _fence_problem(fence) is None


def _fence_evidence(fence: Mapping[str, Any]) -> dict[str, Any]:
    spec, status = fence.get("spec") or {}, fence.get("status") or {}
    return {
        "name": _fence_name(fence),
        "fenceState": spec.get("fenceState"),
        "result": status.get("result"),
        "message": status.get("message"),
        "cidrs": [str(c) for c in spec.get("cidrs") or []],
    }


# -- one old node ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _NodeCheck:
    ok: bool
    why: str
    hint: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)


def _address_problem(address: str, fences: Sequence[Mapping[str, Any]], others: Sequence[str]) -> str | None:
    """What keeps ``address`` from being proven fenced, or None when a good fence covers it."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return f"its address {address!r} is not an IP address, so no fence can be shown to cover it"
    covering = [f for f in fences if _covers(f, address)]
    if any(_fence_ok(f) for f in covering):
        return None
    if covering:
        unfenced = [f for f in covering if (f.get("spec") or {}).get("fenceState") != FENCED]
        fence = (unfenced or covering)[0]
        return f"NetworkFence {_fence_name(fence)} covering {address} {_fence_problem(fence)}"
    partial = [f for f in fences if _fence_ok(f) and any(_covers(f, other) for other in others)]
    if partial:
        return f"NetworkFence {_fence_name(partial[0])} does not cover address {address}"
    return f"no NetworkFence covers address {address}"


def _node_evidence(
    node: Mapping[str, Any], fences: Sequence[Mapping[str, Any]], ready: str
) -> dict[str, Any]:
    addresses = _addresses(node)
    return {
        "present": True,
        "ready": ready,
        "taints": _taints(node),
        "outOfService": _out_of_service(node),
        "addresses": addresses,
        "fences": [_fence_evidence(f) for f in fences if any(_covers(f, a) for a in addresses)],
    }


def _cidr(address: str) -> str:
    try:
        return f"{address}/{ipaddress.ip_address(address).max_prefixlen}"
    except ValueError:
        return address


def _unreachable_hint(name: str, tainted: bool, addresses: Sequence[str], fenced: bool) -> str:
    steps = []
    if not tainted:
        steps.append(f"`kubectl taint node {name} {OUT_OF_SERVICE_TAINT}=nodeshutdown:NoExecute`")
    if not fenced:
        cidrs = ", ".join(_cidr(a) for a in addresses) or "<the node's addresses>"
        steps.append(
            f"create a NetworkFence with fenceState: Fenced for cidrs [{cidrs}] and wait for Succeeded"
        )
    return (
        f"Make sure node {name} is powered off or isolated, then either "
        + " and ".join(steps)
        + f"; or, after powering it off, `kubectl delete node {name}` ({_RUNBOOK})"
    )


def _check_unreachable(
    name: str, node: Mapping[str, Any], fences: Sequence[Mapping[str, Any]], ready: str
) -> _NodeCheck:
    tainted = _out_of_service(node)
    addresses = _addresses(node)
    problems = [] if tainted else [f"it lacks the taint {OUT_OF_SERVICE_TAINT}:{OUT_OF_SERVICE_EFFECT}"]
    if not addresses:
        problems.append(
            "it reports no InternalIP or ExternalIP address, so no fence can be shown to cover it"
        )
    address_problems = [
        p
        for a in addresses
        if (p := _address_problem(a, fences, [o for o in addresses if o != a])) is not None
    ]
    problems += address_problems
    evidence = _node_evidence(node, fences, ready)
    if not problems:
        return _NodeCheck(True, f"node {name} is NotReady, out-of-service and network-fenced", "", evidence)
    why = f"node {name} is not Ready (Ready={ready}) and not proven fenced: " + "; ".join(problems)
    fenced = bool(addresses) and not address_problems
    return _NodeCheck(False, why, _unreachable_hint(name, tainted, addresses, fenced), evidence)


def _check_node(
    name: str,
    node: Mapping[str, Any] | None,
    users: Sequence[ClaimConsumer],
    fences: Sequence[Mapping[str, Any]],
) -> _NodeCheck:
    if node is None:
        return _NodeCheck(
            True, f"node {name} no longer exists (removed after power-off)", "", {"present": False}
        )
    ready = _ready_status(node)
    if ready != "True":
        return _check_unreachable(name, node, fences, ready)
    evidence = _node_evidence(node, fences, ready)
    active = [c for c in users if not c.finished]
    if not active:
        return _NodeCheck(True, f"node {name} is Ready and nothing there uses the disk", "", evidence)
    names = ", ".join(c.label for c in active)
    return _NodeCheck(
        False,
        f"the disk is in use by {names} on node {name}",
        f"stop the workspace that uses it, or `kubectl delete {active[0].kind.lower()} {active[0].name} "
        f"-n {active[0].namespace}`, then start again",
        evidence,
    )


# -- the verdict -------------------------------------------------------------------------------------


def _attachments(attachments: Sequence[Mapping[str, Any]], pv: str | None) -> list[dict[str, Any]]:
    found = []
    for va in attachments:
        spec = va.get("spec") or {}
        if pv is None or (spec.get("source") or {}).get("persistentVolumeName") != pv:
            continue
        found.append(
            {
                "name": (va.get("metadata") or {}).get("name"),
                "node": spec.get("nodeName"),
                "attached": bool((va.get("status") or {}).get("attached")),
                "deleting": bool((va.get("metadata") or {}).get("deletionTimestamp")),
            }
        )
    return sorted(found, key=lambda a: (str(a["node"]), str(a["name"])))


def decide_fencing(
    *,
    claim: Mapping[str, Any],
    pv_name: str | None,
    attachments: Sequence[Mapping[str, Any]],
    consumers: Sequence[Mapping[str, Any]],
    nodes: Mapping[str, Mapping[str, Any] | None],
    fences: Sequence[Mapping[str, Any]],
    own_uids: frozenset[str] = frozenset(),
    last_node: str | None = None,
) -> FencingVerdict:
    """Whether compute for ``claim`` may start now, wherever it lands; refuse unless proven safe.

    ``last_node``: where the workspace last ran (the disk's ``gpuworkspace.dev/last-node``
    annotation). It counts as an old node even with no VolumeAttachment left: the attach/detach
    controller force-detaches after six minutes on an unreachable node, and Ceph CSI's detach is a
    no-op, so a vanished VolumeAttachment proves nothing.

    ``attachments``: storage.k8s.io/v1 VolumeAttachments (any; those of ``pv_name`` are used).
    ``consumers``: every pod and VMI of the namespace (those using the claim are picked here).
    ``nodes``: the complete node list by name (a successful list); a name mapped to ``None`` or absent
    is a Node that no longer exists. ``fences``: every NetworkFence (cluster-scoped).
    ``own_uids``: the compute being started now (and pods owned by it), which is ignored.
    """
    pv = pv_name or (claim.get("spec") or {}).get("volumeName")
    fences = sorted(fences, key=_fence_name)
    found = claim_consumers(claim, consumers, own_uids)
    vas = _attachments(attachments, pv)
    evidence: dict[str, Any] = {
        "claim": (claim.get("metadata") or {}).get("name"),
        "namespace": (claim.get("metadata") or {}).get("namespace"),
        "pv": pv,
        "attachments": vas,
        "consumers": [c.as_evidence() for c in found],
        "nodes": {},
    }
    shared = refuse_shared_disk(claim)
    if shared is not None:
        hint = "recreate the disk ReadWriteOnce, or point the profile at a claim that is"
        return FencingVerdict("refuse", shared, hint, evidence)
    others = [c for c in found if not c.own]
    pending = [c for c in others if c.node is None and not c.finished]
    if pending:
        names = ", ".join(f"pending {c.noun} {c.name}" for c in pending)
        hint = "stop the workspace that uses the disk (or delete the pending pod/VMI), then start again"
        return FencingVerdict("refuse", f"the disk is in use by {names} (not yet scheduled)", hint, evidence)
    old = sorted(
        {str(va["node"]) for va in vas if va["node"]}
        | {c.node for c in others if c.node}
        | ({last_node} if last_node else set())
    )
    if last_node:
        evidence["lastNode"] = last_node
    if not old:
        return FencingVerdict("pass", "the disk is not attached anywhere", "", evidence)
    checks = {
        name: _check_node(name, nodes.get(name), [c for c in others if c.node == name], fences)
        for name in old
    }
    evidence["nodes"] = {
        name: {**check.evidence, "ok": check.ok, "why": check.why} for name, check in checks.items()
    }
    failed = [check for check in checks.values() if not check.ok]
    if failed:
        reason = "; ".join(check.why for check in failed)
        hint = " | ".join(check.hint for check in failed if check.hint)
        return FencingVerdict("refuse", reason, hint, evidence)
    reason = "the disk may move: " + "; ".join(check.why for check in checks.values())
    return FencingVerdict("pass", reason, "", evidence)


def evidence_needed(
    pv_name: str | None, attachments: Sequence[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]]
) -> bool:
    """Whether a start must gather the full evidence for :func:`decide_fencing`.

    Not when the disk has no volume yet, or when no VolumeAttachment names it and every node is Ready:
    then no node can hold it unseen (an unreachable node, where a force-detach would hide an attachment,
    makes this True).
    """
    if not pv_name:
        return False
    attached = any(
        ((a.get("spec") or {}).get("source") or {}).get("persistentVolumeName") == pv_name
        for a in attachments
    )
    return attached or not all(is_ready(n) for n in nodes)
