"""Sums over the attribution: per node, top consumers, per group, and allocation-vs-use accounting (pure).

:func:`node_summaries` gives each node's totals, idle capacity and abnormal states; :func:`top_consumers`
ranks workspaces; :func:`group_totals` sums them per JupyterHub group; :class:`Accounting` integrates
allocated, used and idle-allocated GPU-seconds per workspace over the collector's cycles (the counters
a cost report needs), forgetting a workspace an hour after it is gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ...catalog.units import GPU_RESOURCE, SHARED_GPU_RESOURCE
from .model import CellKind, GpuCell, NodeInfo, WorkspaceFigures
from .parsing import NVIDIA_PREFIX, is_dcgm_resource

NOT_A_WORKSPACE_PREFIX = "(not a workspace) "
NODE_TAINT_PREFIX = "node.kubernetes.io/"
CORDON_TAINT = "node.kubernetes.io/unschedulable"


@dataclass(frozen=True)
class NodeSummary:
    """A node's totals, idle capacity and abnormal states."""

    name: str
    ready: bool
    unschedulable: bool = False
    taints: tuple[str, ...] = ()
    cpu_capacity: float = 0.0  # cores
    cpu_allocatable: float = 0.0
    cpu_requested: float = 0.0  # by workspaces
    cpu_used: float | None = None  # by workspaces
    memory_capacity: float = 0.0  # bytes
    memory_allocatable: float = 0.0
    memory_requested: float = 0.0
    memory_used: float | None = None
    gpus_total: int = 0  # physical cards: those DCGM sees plus passthrough-only ones
    gpus_allocated: float = 0.0  # cards (fractions for MIG instances and time-slices)
    gpus_free: float = 0.0
    free_by_resource: Mapping[str, int] = field(default_factory=dict)  # allocatable minus allocated
    gpu_util_percent: float | None = None  # mean over the cells with a known utilisation
    power_w: float | None = None  # sum of the cards' power
    abnormal: tuple[str, ...] = ()


def node_abnormal(node: NodeInfo, cells: Iterable[GpuCell]) -> tuple[str, ...]:
    """``NotReady``, ``cordoned``, ``tainted <key>`` (node.kubernetes.io/ taints), GPU states per cell."""
    out = [] if node.ready else ["NotReady"]
    if node.unschedulable:
        out.append("cordoned")
    for taint in node.taints:
        key = taint.split(":", 1)[0].split("=", 1)[0]
        if key.startswith(NODE_TAINT_PREFIX) and key != CORDON_TAINT:
            out.append(f"tainted {key}")
    for cell in cells:
        out.extend(f"{state} on GPU {cell.gpu}" for state in cell.abnormal)
    return tuple(dict.fromkeys(out))


def _resource_of(cell: GpuCell) -> str:
    if cell.kind is CellKind.MIG:
        return f"{NVIDIA_PREFIX}mig-{cell.mig_profile}"
    return SHARED_GPU_RESOURCE if cell.kind is CellKind.TIME_SLICED else GPU_RESOURCE


def _card(cell: GpuCell) -> str:
    return cell.gpu.split("/", 1)[0]


def _visible(cell: GpuCell) -> bool:
    return cell.kind is not CellKind.PASSTHROUGH and not cell.gpu.startswith("unseen-")


def summarize_node(
    node: NodeInfo, cells: Sequence[GpuCell], figures: Sequence[WorkspaceFigures]
) -> NodeSummary:
    """One node's summary from its cells and the figures of the workspaces on it."""
    visible = [c for c in cells if _visible(c)]
    cards = {_card(c) for c in visible}
    passthrough_capacity = max(
        int(
            sum(
                v
                for n, v in node.allocatable.items()
                if n.startswith(NVIDIA_PREFIX) and not is_dcgm_resource(n)
            )
        ),
        sum(1 for c in cells if c.kind is CellKind.PASSTHROUGH),
    )
    label_count = node.labels.get("nvidia.com/gpu.count", "")
    total = (len(cards) or (int(label_count) if label_count.isdigit() else 0)) + passthrough_capacity
    mig_per_card: dict[str, int] = {}
    for c in visible:
        if c.kind is CellKind.MIG:
            mig_per_card[_card(c)] = mig_per_card.get(_card(c), 0) + 1
    held: dict[str, float] = {}
    foreign = 0.0  # cards held by pods that are not workspaces
    for c in cells:
        for s in c.owners:
            if s.workspace.startswith(NOT_A_WORKSPACE_PREFIX):
                res = _resource_of(c)
                held[res] = held.get(res, 0) + 1
                if c.kind is CellKind.MIG:
                    foreign += 1 / mig_per_card.get(_card(c), 1)
                else:
                    foreign += 1 / len(c.owners) if c.kind is CellKind.TIME_SLICED else 1
    for f in figures:
        for name, count in f.workspace.gpu_resources.items():
            held[name] = held.get(name, 0) + count
    allocated = sum(f.gpus_allocated for f in figures) + foreign
    utils = [c.util_percent for c in visible if c.util_percent is not None]
    powers = {(_card(c)): c.power_w for c in visible if c.power_w is not None}
    used_cpu = [f.cpu_cores for f in figures if f.cpu_cores is not None]
    used_mem = [f.memory_bytes for f in figures if f.memory_bytes is not None]
    return NodeSummary(
        name=node.name,
        ready=node.ready,
        unschedulable=node.unschedulable,
        taints=node.taints,
        cpu_capacity=node.capacity.get("cpu", 0.0),
        cpu_allocatable=node.allocatable.get("cpu", 0.0),
        cpu_requested=sum(f.workspace.cpu_request for f in figures),
        cpu_used=sum(used_cpu) if used_cpu else None,
        memory_capacity=node.capacity.get("memory", 0.0),
        memory_allocatable=node.allocatable.get("memory", 0.0),
        memory_requested=sum(f.workspace.memory_request for f in figures),
        memory_used=sum(used_mem) if used_mem else None,
        gpus_total=total,
        gpus_allocated=allocated,
        gpus_free=max(0.0, total - allocated),
        free_by_resource={
            n: max(0, int(v - held.get(n, 0)))
            for n, v in sorted(node.allocatable.items())
            if n.startswith(NVIDIA_PREFIX)
        },
        gpu_util_percent=sum(utils) / len(utils) if utils else None,
        power_w=sum(powers.values()) if powers else None,
        abnormal=node_abnormal(node, cells),
    )


def node_summaries(
    nodes: Iterable[NodeInfo], cells: Iterable[GpuCell], figures: Iterable[WorkspaceFigures]
) -> tuple[NodeSummary, ...]:
    """Every listed node's summary, by name."""
    cells_by: dict[str, list[GpuCell]] = {}
    for c in cells:
        cells_by.setdefault(c.node, []).append(c)
    figs_by: dict[str, list[WorkspaceFigures]] = {}
    for f in figures:
        figs_by.setdefault(f.workspace.node or "", []).append(f)
    return tuple(
        summarize_node(n, cells_by.get(n.name, []), figs_by.get(n.name, []))
        for n in sorted(nodes, key=lambda n: n.name)
    )


# --------------------------------------------------------------------------------- top and groups
def _gpu_busy(f: WorkspaceFigures) -> float | None:
    return None if f.gpu_util_percent is None else f.gpus_allocated * f.gpu_util_percent / 100


RANKINGS: Mapping[str, Callable[[WorkspaceFigures], float | None]] = {
    "gpu": lambda f: f.gpus_allocated or None,
    "gpu_util": lambda f: f.gpu_util_percent,
    "gpu_busy": _gpu_busy,
    "gpu_memory": lambda f: f.gpu_mem_used_mib,
    "cpu": lambda f: f.cpu_cores,
    "memory": lambda f: f.memory_bytes,
    "power": lambda f: f.power_w,
}


def top_consumers(
    figures: Iterable[WorkspaceFigures], by: str = "gpu", limit: int = 10
) -> list[tuple[WorkspaceFigures, float]]:
    """The ``limit`` largest consumers ``by`` one of :data:`RANKINGS` (``gpu`` = cards held), unknowns left out.

    Raises ValueError for an unknown ranking.
    """
    if by not in RANKINGS:
        raise ValueError(f"unknown ranking {by!r}; one of {', '.join(RANKINGS)}")
    key = RANKINGS[by]
    ranked = [(f, v) for f in figures if (v := key(f)) is not None]
    ranked.sort(key=lambda item: (-item[1], item[0].workspace.user, item[0].workspace.key))
    return ranked[: max(0, limit)]


@dataclass(frozen=True)
class GroupTotals:
    """A JupyterHub group's workspaces summed."""

    group: str
    users: tuple[str, ...] = ()  # members with running workspaces
    workspaces: int = 0
    gpus_allocated: float = 0.0
    gpus_busy: float = 0.0  # allocated x utilisation, over workspaces whose utilisation is known
    gpus_idle: float = 0.0  # allocated to workspaces whose GPUs are idle
    cpu_cores: float = 0.0
    memory_bytes: float = 0.0
    power_w: float = 0.0


def group_totals(
    figures: Iterable[WorkspaceFigures], groups_of_user: Mapping[str, Sequence[str]]
) -> dict[str, GroupTotals]:
    """Totals per group; a user in several groups counts in each. Groups without workspaces are absent."""
    acc: dict[str, GroupTotals] = {}
    for f in figures:
        for group in groups_of_user.get(f.workspace.user, ()):
            t = acc.get(group) or GroupTotals(group)
            acc[group] = replace(
                t,
                users=t.users if f.workspace.user in t.users else (*t.users, f.workspace.user),
                workspaces=t.workspaces + 1,
                gpus_allocated=t.gpus_allocated + f.gpus_allocated,
                gpus_busy=t.gpus_busy + (_gpu_busy(f) or 0.0),
                gpus_idle=t.gpus_idle + (f.gpus_allocated if f.gpu_idle else 0.0),
                cpu_cores=t.cpu_cores + (f.cpu_cores or 0.0),
                memory_bytes=t.memory_bytes + (f.memory_bytes or 0.0),
                power_w=t.power_w + (f.power_w or 0.0),
            )
    return {g: replace(t, users=tuple(sorted(t.users))) for g, t in sorted(acc.items())}


# ------------------------------------------------------------------------------------- accounting
@dataclass
class AccountEntry:
    """One workspace's counters (GPU-seconds: cards x seconds)."""

    workspace: str  # namespace/pod
    user: str
    server: str
    cost_center: str = ""
    allocated_gpu_seconds: float = 0.0
    used_gpu_seconds: float = 0.0  # allocated x utilisation, only while the utilisation is known
    idle_allocated_gpu_seconds: float = 0.0  # allocated while the GPUs were idle
    unknown_gpu_seconds: float = 0.0  # allocated while the utilisation was unknown (passthrough)
    last_seen: float = 0.0


class Accounting:
    """Allocation-vs-use counters per workspace, advanced once per cycle by the cycle's length.

    Entries of workspaces gone for ``forget_after_s`` are dropped (bounded cardinality); the caller
    passes ``now``, nothing here reads a clock.
    """

    def __init__(self, forget_after_s: float = 3600.0) -> None:
        self.forget_after_s = forget_after_s
        self._entries: dict[str, AccountEntry] = {}

    def advance(self, figures: Iterable[WorkspaceFigures], *, now: float, dt: float) -> None:
        """Add ``dt`` seconds of the current figures to every listed workspace; forget long-gone ones."""
        dt = max(0.0, dt)
        for f in figures:
            w = f.workspace
            e = self._entries.get(w.key)
            if e is None:
                e = self._entries[w.key] = AccountEntry(w.key, w.user, w.server, w.cost_center)
            e.last_seen = now
            e.allocated_gpu_seconds += f.gpus_allocated * dt
            if f.gpu_util_percent is None:
                e.unknown_gpu_seconds += f.gpus_allocated * dt
            else:
                e.used_gpu_seconds += f.gpus_allocated * f.gpu_util_percent / 100 * dt
            if f.gpu_idle:
                e.idle_allocated_gpu_seconds += f.gpus_allocated * dt
        for key in [k for k, e in self._entries.items() if now - e.last_seen > self.forget_after_s]:
            del self._entries[key]

    def get(self, workspace: str) -> AccountEntry | None:
        return self._entries.get(workspace)

    def entries(self) -> list[AccountEntry]:
        """All kept entries, by workspace key (copies: the caller may keep them across cycles)."""
        return [replace(e) for _, e in sorted(self._entries.items())]

    def __len__(self) -> int:
        return len(self._entries)
