"""What is free right now for a profile, from the attribution service's node view (pure).

The spawn page asks, for each profile card, whether the profile's GPU resource is free:
:func:`decide_availability` takes the profile's :class:`Need` (the extended resource, the count one
workspace takes, the node pool's selector) and the cycle's :class:`NodeCapacity` list (built by
:func:`node_capacities` from the nodes and the workspace pods the service watches) and returns an
:class:`Availability`: counts, whether a start can be placed now, and the reason when it cannot.

Only counts leave this module: who holds the GPUs is never part of an answer.

What it knows is what the service watches: nodes, and the pods of workspaces and jobs (labelled with
``gpuworkspace.dev/user``). GPUs taken by other pods are not seen, and taints are not matched: the
counts are an upper bound, and the scheduler has the last word.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from .model import NodeInfo, WorkspacePod

WHOLE_GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
PRODUCT_LABEL = "nvidia.com/gpu.product"  # set by GPU feature discovery, e.g. NVIDIA-H100-80GB-HBM3
ENDED_PHASES = frozenset({"Succeeded", "Failed"})
RESOURCE = re.compile(r"^nvidia\.com/[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
MAX_COUNT = 64
MAX_SELECTORS = 16

Reason = Literal["", "no-capacity", "no-node-fits", "no-nodes", "nodes-unavailable"]


@dataclass(frozen=True)
class Need:
    """What one workspace of a profile takes: ``count`` of ``resource`` on one node matching ``selector``."""

    resource: str  # an extended resource (nvidia.com/gpu, nvidia.com/mig-1g.10gb, nvidia.com/gpu.shared)
    count: int = 1
    selector: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeCapacity:
    """One node's GPU resources: what it offers and what running pods hold (no holder names)."""

    name: str
    schedulable: bool  # Ready and not cordoned
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    held: Mapping[str, int]

    def free(self, resource: str) -> int:
        return max(0, self.allocatable.get(resource, 0) - self.held.get(resource, 0))


@dataclass(frozen=True)
class Availability:
    """The verdict for one :class:`Need`: counts, whether a start fits now, and why not."""

    resource: str
    count: int
    free: int  # units free on schedulable matching nodes
    total: int  # units offered by schedulable matching nodes
    startable: bool  # some node has ``count`` free units
    reason: Reason  # "" when startable
    text: str  # "5 of 16 H100 free", "MIG 1g.10gb: 13 free", "shared card: 2 of 8 slots taken"
    why: str = ""  # a sentence for the user when not startable


def _gpu_resources(values: Mapping[str, float]) -> dict[str, int]:
    return {k: int(v) for k, v in values.items() if k.startswith("nvidia.com/") and v > 0}


def node_capacities(nodes: Iterable[NodeInfo], pods: Iterable[WorkspacePod]) -> tuple[NodeCapacity, ...]:
    """The node view: each node's allocatable GPU resources and what live pods on it hold."""
    held: dict[str, dict[str, int]] = {}
    for pod in pods:
        if pod.node is None or pod.phase in ENDED_PHASES:
            continue
        on_node = held.setdefault(pod.node, {})
        for resource, n in pod.gpu_resources.items():
            on_node[resource] = on_node.get(resource, 0) + int(n)
    return tuple(
        NodeCapacity(
            name=node.name,
            schedulable=node.ready and not node.unschedulable,
            labels=dict(node.labels),
            allocatable=_gpu_resources(node.allocatable),
            held=held.get(node.name, {}),
        )
        for node in nodes
    )


def _model(nodes: Iterable[NodeCapacity]) -> str:
    """``H100`` from ``NVIDIA-H100-80GB-HBM3`` when every node says the same; else ``GPU``."""
    products = {n.labels.get(PRODUCT_LABEL, "") for n in nodes}
    if len(products) != 1:
        return "GPU"
    words = [w for w in products.pop().replace(" ", "-").split("-") if w and w.upper() != "NVIDIA"]
    return words[0] if words else "GPU"


def describe_counts(resource: str, free: int, total: int, model: str = "GPU") -> str:
    """The card's line: ``5 of 16 H100 free``, ``MIG 1g.10gb: 13 free``, ``shared card: 2 of 8 slots taken``."""
    if resource == SHARED_GPU:
        return f"shared card: {total - free} of {total} slots taken"
    if resource.startswith(MIG_PREFIX):
        return f"MIG {resource[len(MIG_PREFIX) :]}: {free} free"
    if resource == WHOLE_GPU:
        return f"{free} of {total} {model} free"
    return f"{free} of {total} {resource} free"


def _matches(node: NodeCapacity, selector: Mapping[str, str]) -> bool:
    return all(node.labels.get(k) == v for k, v in selector.items())


def decide_availability(need: Need, nodes: Iterable[NodeCapacity]) -> Availability:
    """Counts of ``need.resource`` on the nodes ``need.selector`` picks, and whether one workspace
    (``need.count`` units on a single node) can be placed now."""
    pool = [n for n in nodes if _matches(n, need.selector) and n.allocatable.get(need.resource, 0) > 0]
    usable = [n for n in pool if n.schedulable]
    free = sum(n.free(need.resource) for n in usable)
    total = sum(n.allocatable[need.resource] for n in usable)
    text = describe_counts(need.resource, free, total, _model(usable or pool))
    reason: Reason = ""
    why = ""
    if not pool:
        reason, text = "no-nodes", "no node offers this GPU"
        why = f"No node of this profile's pool offers {need.resource}: ask an administrator."
    elif not usable:
        reason, text = "nodes-unavailable", "0 free: its nodes are not ready"
        why = "The nodes of this profile's pool are not ready or are cordoned: try again later."
    elif free == 0:
        reason = "no-capacity"
        why = "All of them are taken right now: a start would wait, then fail. Try again later."
    elif not any(n.free(need.resource) >= need.count for n in usable):
        reason = "no-node-fits"
        why = f"No single node has {need.count} free together: a start would wait, then fail."
    return Availability(
        resource=need.resource,
        count=need.count,
        free=free,
        total=total,
        startable=not reason,
        reason=reason,
        text=text,
        why=why,
    )


def parse_need(resource: str, count: str, selectors: Iterable[str]) -> Need:
    """A :class:`Need` from the API's query (``resource``, ``count``, ``selector=key=value`` repeated);
    :class:`ValueError` with a sentence for the caller when any part is wrong."""
    if not RESOURCE.match(resource):
        raise ValueError(
            f"resource: {resource[:80]!r} is not a GPU resource name like nvidia.com/gpu or nvidia.com/mig-1g.10gb"
        )
    if not (count.isascii() and count.isdigit() and len(count) <= 2 and 1 <= int(count) <= MAX_COUNT):  # noqa: PLR2004
        raise ValueError(f"count must be an integer between 1 and {MAX_COUNT}, not {count[:20]!r}")
    selector: dict[str, str] = {}
    for item in selectors:
        key, sep, value = item.partition("=")
        if not sep or not LABEL_KEY.match(key) or not LABEL_VALUE.match(value):
            raise ValueError(f"selector: {item[:80]!r} is not a node label key=value")
        selector[key] = value
    if len(selector) > MAX_SELECTORS:
        raise ValueError(f"selector: at most {MAX_SELECTORS} labels")
    return Need(resource=resource, count=int(count), selector=selector)


def availability_json(verdict: Availability, at: float) -> dict[str, object]:
    """The API's answer (``GET api/v1/availability``)."""
    return {
        "resource": verdict.resource,
        "count": verdict.count,
        "free": verdict.free,
        "total": verdict.total,
        "startable": verdict.startable,
        "reason": verdict.reason,
        "text": verdict.text,
        "why": verdict.why,
        "at": at,
    }
