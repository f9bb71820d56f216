"""Where a pod fits: kube-scheduler's default filters and its failure message, as pure functions.

``decide_placement(pod, nodes, pods_on_nodes, volume_pins)`` runs, in kube-scheduler's plugin order,
the PreFilter checks (claims exist and are bound, NodeAffinity's node-name restriction) and per node
the Filter plugins NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit,
VolumeRestrictions (ReadWriteOncePod) and VolumeBinding (PV node affinity; here also: an RWO volume
attached on a node pins its pods there). A node's status is its first failing plugin's, with that
plugin's reason strings and code; the message is ``FitError.Error()`` plus the DefaultPreemption
PostFilter's text (preemption itself is not simulated: no pod is ever a victim).
Among fitting nodes the least allocated (cpu, memory) wins, ties broken by name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ..quantity import QuantityError, parse_quantity

Obj = dict[str, Any]
Resources = dict[str, Decimal]
UNRESOLVABLE, UNSCHEDULABLE = "UnschedulableAndUnresolvable", "Unschedulable"
MSG_UNSCHEDULABLE_NODE = "node(s) were unschedulable"
MSG_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
MSG_NODE_NAME_AFFINITY = "node(s) didn't satisfy plugin(s) [NodeAffinity]"
MSG_TOO_MANY_PODS = "Too many pods"
MSG_RWOP = "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
MSG_VOLUME_CONFLICT = "node(s) had volume node affinity conflict"
MSG_UNBOUND = "pod has unbound immediate PersistentVolumeClaims"
MSG_NOT_HELPFUL = "Preemption is not helpful for scheduling"
MSG_NO_VICTIMS = "No preemption victims found for incoming pod"
MSG_NO_NODES = "no nodes available to schedule pods"
TERMINAL_PHASES = ("Succeeded", "Failed")
# What the node lifecycle controller taints a node with, from its conditions (NoSchedule effect).
CONDITION_TAINTS = (
    ("Ready", "False", "node.kubernetes.io/not-ready"),
    ("Ready", "Unknown", "node.kubernetes.io/unreachable"),
    ("MemoryPressure", "True", "node.kubernetes.io/memory-pressure"),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
    ("NetworkUnavailable", "True", "node.kubernetes.io/network-unavailable"),
)
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


@dataclass(frozen=True)
class ClaimState:
    """What the scheduler knows about one PersistentVolumeClaim a pod uses."""

    name: str
    exists: bool = True
    ephemeral: bool = False  # from a generic ephemeral volume
    bound: bool = True
    wait_for_first_consumer: bool = False
    selected_node: str = ""  # volume.kubernetes.io/selected-node
    access_modes: tuple[str, ...] = ("ReadWriteOnce",)
    pv_node_affinity: Obj | None = None  # the bound PV's spec.nodeAffinity.required
    attached_to: tuple[str, ...] = ()  # nodes with an attached VolumeAttachment for the PV
    rwop_users: tuple[str, ...] = ()  # other pods ("ns/name") using it, when it is ReadWriteOncePod

    @property
    def pins(self) -> bool:
        """A single-node volume: where it is attached, its pods must go."""
        modes = set(self.access_modes)
        return bool(modes & {"ReadWriteOnce", "ReadWriteOncePod"}) and not modes & {
            "ReadWriteMany",
            "ReadOnlyMany",
        }


@dataclass(frozen=True)
class NodeFit:
    ok: bool
    code: str = ""  # UNSCHEDULABLE (preemption might help) or UNRESOLVABLE
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Placement:
    node: str | None
    message: str = ""  # the FailedScheduling message when ``node`` is None
    fits: Mapping[str, NodeFit] = field(default_factory=dict)


# ----------------------------------------------------------------- requests
def _qty(value: Any) -> Decimal:
    try:
        return parse_quantity(value)
    except QuantityError:
        return Decimal(0)


def is_scalar_resource(name: str) -> bool:
    """Extended resources (``vendor.example/x``, not ``*kubernetes.io/*``), hugepages, attachable volumes."""
    extended = "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")
    return extended or name.startswith(("hugepages-", "attachable-volumes-"))


def _counted(name: str) -> bool:
    return name in ("cpu", "memory", "ephemeral-storage") or is_scalar_resource(name)


def container_requests(container: Obj) -> Resources:
    """Requests, each defaulting to its limit (what API defaulting does per resource)."""
    res = container.get("resources") or {}
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return {k: _qty(v) for k, v in merged.items() if _counted(k)}


def _add(a: Resources, b: Mapping[str, Decimal]) -> Resources:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, Decimal(0)) + v
    return out


def _max(a: Resources, b: Mapping[str, Decimal]) -> Resources:
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out.get(k, Decimal(0)), v)
    return out


def pod_requests(pod: Obj) -> Resources:
    """The pod's effective requests: containers summed, init containers' peak (sidecars stay running),
    plus ``spec.overhead`` — resourcehelper.PodRequests."""
    spec = pod.get("spec") or {}
    total: Resources = {}
    for c in spec.get("containers") or []:
        total = _add(total, container_requests(c))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for c in spec.get("initContainers") or []:
        req = container_requests(c)
        if c.get("restartPolicy") == "Always":
            total, sidecars = _add(total, req), _add(sidecars, req)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, _add(sidecars, req))
    total = _max(total, init_peak)
    overhead = {k: _qty(v) for k, v in (spec.get("overhead") or {}).items() if _counted(k)}
    return _add(total, overhead)


# ------------------------------------------------------ taints and affinity
def tolerates(toleration: Obj, taint: Obj) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def node_taints(node: Obj) -> list[Obj]:
    """spec.taints plus the taints the node lifecycle controller derives from conditions."""
    taints = list((node.get("spec") or {}).get("taints") or [])
    status = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    for ctype, value, key in CONDITION_TAINTS:
        if status.get(ctype) == value and not any(t.get("key") == key for t in taints):
            taints.append({"key": key, "effect": "NoSchedule"})
    return taints


def untolerated_taint(taints: Iterable[Obj], tolerations: Sequence[Obj]) -> Obj | None:
    """The first NoSchedule/NoExecute taint no toleration tolerates."""
    for taint in taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
            tolerates(t, taint) for t in tolerations
        ):
            return taint
    return None


def _expression(expr: Obj, value: str | None) -> bool:
    op, values = expr.get("operator"), expr.get("values") or []
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def selector_terms_match(selector: Obj | None, node: Obj) -> bool:
    """A NodeSelector (``nodeSelectorTerms``, ORed; expressions and fields in a term ANDed)."""
    if selector is None:
        return True
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
        if not exprs and not fields:
            continue  # an empty term matches nothing
        if all(_expression(e, labels.get(e.get("key"))) for e in exprs) and all(
            e.get("key") == "metadata.name" and _expression(e, meta.get("name")) for e in fields
        ):
            return True
    return False


def _required_affinity(pod: Obj) -> Obj | None:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    return affinity.get("requiredDuringSchedulingIgnoredDuringExecution")


def matches_node_affinity(pod: Obj, node: Obj) -> bool:
    """nodeSelector and required node affinity (NodeAffinity's Filter)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    return selector_terms_match(_required_affinity(pod), node)


def node_name_restriction(pod: Obj) -> set[str] | None:
    """NodeAffinity's PreFilter: when every required term names nodes (matchFields metadata.name In)."""
    required = _required_affinity(pod)
    if required is None:
        return None
    names: set[str] = set()
    for term in required.get("nodeSelectorTerms") or []:
        found = [
            set(e.get("values") or [])
            for e in term.get("matchFields") or []
            if e.get("key") == "metadata.name" and e.get("operator") == "In"
        ]
        if not found:
            return None
        names |= set.intersection(*found)
    return names


# ------------------------------------------------------------------ filters
def _allocatable(node: Obj) -> Resources:
    return {k: _qty(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}


def node_usage(
    pods: Iterable[Obj], requests_of: Callable[[Obj], Resources] = pod_requests
) -> tuple[Resources, int]:
    """Summed requests of the pods holding resources on a node, and their count."""
    used: Resources = {}
    count = 0
    for p in pods:
        if (p.get("status") or {}).get("phase") not in TERMINAL_PHASES:
            used = _add(used, requests_of(p))
            count += 1
    return used, count


def resource_reasons(req: Resources, allocatable: Resources, used: Resources, pod_count: int) -> list[str]:
    """NodeResourcesFit: every resource that does not fit (``Insufficient <name>``)."""
    reasons = []
    if pod_count + 1 > allocatable.get("pods", Decimal(0)):
        reasons.append(MSG_TOO_MANY_PODS)
    for name in sorted(req, key=lambda n: (n not in ("cpu", "memory", "ephemeral-storage"), n)):
        want = req[name]
        if want > 0 and want > allocatable.get(name, Decimal(0)) - used.get(name, Decimal(0)):
            reasons.append(f"Insufficient {name}")
    return reasons


def _volume_conflict(claims: Sequence[ClaimState], node: Obj) -> bool:
    name = (node.get("metadata") or {}).get("name")
    for c in claims:
        if c.bound:
            if c.pv_node_affinity and not selector_terms_match(c.pv_node_affinity, node):
                return True
            if c.pins and c.attached_to and name not in c.attached_to:
                return True
        elif c.wait_for_first_consumer and c.selected_node and c.selected_node != name:
            return True
    return False


def check_node(
    pod: Obj, node: Obj, req: Resources, used: Resources, pod_count: int, claims: Sequence[ClaimState] = ()
) -> NodeFit:
    """Run the Filter plugins in order; the first failure decides the node's status."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    if (node.get("spec") or {}).get("unschedulable") and not any(
        tolerates(t, UNSCHEDULABLE_TAINT) for t in tolerations
    ):
        return NodeFit(False, UNRESOLVABLE, (MSG_UNSCHEDULABLE_NODE,))
    taint = untolerated_taint(node_taints(node), tolerations)
    if taint is not None:
        reason = f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
        return NodeFit(False, UNRESOLVABLE, (reason,))
    if not matches_node_affinity(pod, node):
        return NodeFit(False, UNRESOLVABLE, (MSG_AFFINITY,))
    reasons = resource_reasons(req, _allocatable(node), used, pod_count)
    if reasons:
        return NodeFit(False, UNSCHEDULABLE, tuple(reasons))
    if any(c.rwop_users for c in claims if "ReadWriteOncePod" in c.access_modes):
        return NodeFit(False, UNSCHEDULABLE, (MSG_RWOP,))
    if _volume_conflict(claims, node):
        return NodeFit(False, UNRESOLVABLE, (MSG_VOLUME_CONFLICT,))
    return NodeFit(True)


def prefilter_message(claims: Sequence[ClaimState]) -> str:
    """VolumeRestrictions' and VolumeBinding's PreFilter rejections ("" when none)."""
    for c in claims:
        if not c.exists and not c.ephemeral:
            return f'persistentvolumeclaim "{c.name}" not found'
    for c in claims:
        if not c.exists:
            return f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{c.name}"'
    if any(not c.bound and not c.wait_for_first_consumer for c in claims):
        return MSG_UNBOUND
    return ""


def _histogram(reasons: Iterable[str]) -> str:
    return ", ".join(sorted(f"{n} {r}" for r, n in Counter(reasons).items()))


def fit_error_message(
    total: int, fits: Mapping[str, NodeFit], prefilter: str = "", preemption_never: bool = False
) -> str:
    """``FitError.Error()`` followed by the DefaultPreemption PostFilter message."""
    if total == 0:
        return MSG_NO_NODES
    msg = f"0/{total} nodes are available:"
    if prefilter:
        msg += f" {prefilter}."
    else:
        reasons = _histogram(r for f in fits.values() for r in f.reasons)
        msg += f" {reasons}." if reasons else ""
    if preemption_never:
        return msg + " preemption: not eligible due to preemptionPolicy=Never."
    codes = [
        MSG_NOT_HELPFUL if prefilter or f.code == UNRESOLVABLE else MSG_NO_VICTIMS for f in fits.values()
    ]
    return msg + f" preemption: 0/{total} nodes are available: {_histogram(codes)}."


def _score(req: Resources, allocatable: Resources, used: Resources) -> Decimal:
    """NodeResourcesFit's LeastAllocated over cpu and memory (0..100, higher is freer)."""
    total = Decimal(0)
    for name in ("cpu", "memory"):
        alloc = allocatable.get(name, Decimal(0))
        requested = used.get(name, Decimal(0)) + req.get(name, Decimal(0))
        if alloc > 0 and requested <= alloc:
            total += (alloc - requested) * 100 / alloc
    return total / 2


def decide_placement(
    pod: Obj,
    nodes: Sequence[Obj],
    pods_on_nodes: Mapping[str, Sequence[Obj]],
    volume_pins: Sequence[ClaimState] = (),
    *,
    requests_of: Callable[[Obj], Resources] = pod_requests,
) -> Placement:
    """Pick a node for ``pod`` or explain, in kube-scheduler's words, why none fits.

    ``pods_on_nodes``: node name → pods bound there (terminal ones are ignored);
    ``volume_pins``: the state of every claim the pod uses.
    """
    names = [n["metadata"]["name"] for n in nodes]
    never = (pod.get("spec") or {}).get("preemptionPolicy") == "Never"
    prefilter = prefilter_message(volume_pins)
    if prefilter:
        fits = {n: NodeFit(False, UNRESOLVABLE, (prefilter,)) for n in names}
        return Placement(None, fit_error_message(len(nodes), fits, prefilter, never), fits)
    req = requests_of(pod)
    allowed = node_name_restriction(pod)
    fits = {}
    scored: list[tuple[Decimal, str]] = []
    for node in nodes:
        name = node["metadata"]["name"]
        if allowed is not None and name not in allowed:
            fits[name] = NodeFit(False, UNRESOLVABLE, (MSG_NODE_NAME_AFFINITY,))
            continue
        used, count = node_usage(pods_on_nodes.get(name, ()), requests_of)
        fits[name] = check_node(pod, node, req, used, count, volume_pins)
        if fits[name].ok:
            scored.append((-_score(req, _allocatable(node), used), name))
    if not scored:
        return Placement(None, fit_error_message(len(nodes), fits, "", never), fits)
    return Placement(min(scored)[1], "", fits)
