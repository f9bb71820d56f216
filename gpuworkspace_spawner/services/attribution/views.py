"""The attribution API's JSON (pure): cells, nodes, workspaces, groups, top consumers.

Every GPU figure comes with its ``basis`` and ``caveat``. :func:`build_views` renders one cycle's full
lists once (the collector keeps them, serialised, in its snapshot); per request the API only picks from
:class:`Views` (a user's workspaces by name, one detail by ``(user, server)``), so answers stay cheap.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .aggregate import AccountEntry, GroupTotals, NodeSummary
from .charts import util_color
from .model import Basis, CellKind, GpuCell, GpuShare, WorkspaceFigures
from .rules import MIG_POWER, PASSTHROUGH, UNSEEN, Attribution

Json = dict[str, Any]
DEFAULT_SERVER_PATHS = ("~", "default")  # what the API accepts in a URL for the unnamed server


def _r(v: float | None, digits: int = 2) -> float | None:
    return None if v is None else round(v, digits)


def share_json(share: GpuShare) -> Json:
    """One owner of a cell, with the figures attributed to it."""
    return {
        "workspace": share.workspace,
        "user": share.user,
        "server": share.server,
        "util_percent": _r(share.util_percent),
        "mem_used_mib": _r(share.mem_used_mib),
        "power_w": _r(share.power_w),
        "basis": str(share.basis),
        "caveat": share.caveat,
        **({"job": share.job} if share.job else {}),
    }


def cell_basis(cell: GpuCell) -> tuple[Basis, str]:
    """The basis and caveat of a cell's own (device) figures."""
    if cell.kind is CellKind.PASSTHROUGH:
        return Basis.ALLOCATION, PASSTHROUGH
    if cell.uuid is None:
        return Basis.ALLOCATION, UNSEEN
    if cell.kind is CellKind.MIG:
        return Basis.MEASURED, MIG_POWER
    if cell.kind is CellKind.TIME_SLICED:
        n = len(cell.owners)
        return Basis.MEASURED, f"device value of a card shared by {n} owner{'s' if n != 1 else ''}"
    return Basis.MEASURED, ""


def cell_json(cell: GpuCell) -> Json:
    """A grid cell: the device's figures, its owners, its colour and abnormal states."""
    basis, caveat = cell_basis(cell)
    return {
        "node": cell.node,
        "gpu": cell.gpu,
        "kind": str(cell.kind),
        "model": cell.model,
        "uuid": cell.uuid,
        "mig_profile": cell.mig_profile,
        "util_percent": _r(cell.util_percent),
        "mem_used_mib": _r(cell.mem_used_mib),
        "mem_total_mib": _r(cell.mem_total_mib),
        "power_w": _r(cell.power_w),
        "xid": cell.xid,
        "basis": str(basis),
        "caveat": caveat,
        "free": not cell.owners,
        "color": util_color(cell.util_percent),
        "abnormal": list(cell.abnormal),
        "owners": [share_json(s) for s in cell.owners],
    }


def node_json(summary: NodeSummary, cells: Sequence[GpuCell]) -> Json:
    """A node with totals, idle capacity, abnormal states and its cells (``gpus``)."""
    return {
        "name": summary.name,
        "ready": summary.ready,
        "unschedulable": summary.unschedulable,
        "taints": list(summary.taints),
        "abnormal": list(summary.abnormal),
        "cpu": {
            "capacity": _r(summary.cpu_capacity),
            "allocatable": _r(summary.cpu_allocatable),
            "requested": _r(summary.cpu_requested),
            "used": _r(summary.cpu_used),
        },
        "memory": {
            "capacity": summary.memory_capacity,
            "allocatable": summary.memory_allocatable,
            "requested": summary.memory_requested,
            "used": summary.memory_used,
        },
        "gpu_totals": {
            "total": summary.gpus_total,
            "allocated": _r(summary.gpus_allocated),
            "free": _r(summary.gpus_free),
            "free_by_resource": dict(summary.free_by_resource),
            "util_percent": _r(summary.gpu_util_percent),
            "power_w": _r(summary.power_w),
            "basis": str(Basis.MEASURED),
            "caveat": "mean over the cards DCGM sees; passthrough GPUs are counted, not measured",
        },
        "gpus": [cell_json(c) for c in cells],
    }


def accounting_json(entry: AccountEntry | None) -> Json | None:
    if entry is None:
        return None
    return {
        "allocated_gpu_seconds": _r(entry.allocated_gpu_seconds, 1),
        "used_gpu_seconds": _r(entry.used_gpu_seconds, 1),
        "idle_allocated_gpu_seconds": _r(entry.idle_allocated_gpu_seconds, 1),
        "unknown_gpu_seconds": _r(entry.unknown_gpu_seconds, 1),
        "basis": "allocation x utilisation; unknown: allocated while the utilisation was not visible",
    }


def workspace_json(figures: WorkspaceFigures, accounting: AccountEntry | None = None) -> Json:
    """A workspace's row: allocation next to use, GPU figures with basis and caveat."""
    w = figures.workspace
    return {
        "kind": w.kind,
        **({"job": w.job} if w.is_job else {}),
        "user": w.user,
        "server": w.server,
        "workspace": w.key,
        "namespace": w.namespace,
        "pod": w.pod,
        "profile": w.profile,
        "gpu_mode": w.gpu_mode,
        "runtime": w.runtime,
        "node": w.node,
        "phase": w.phase,
        "cost_center": w.cost_center,
        "started_at": w.started_at,
        "cull_exempt": w.cull_exempt,
        "cpu": {"request": _r(w.cpu_request), "limit": _r(w.cpu_limit), "used": _r(figures.cpu_cores, 3)},
        "memory": {"request": w.memory_request, "limit": w.memory_limit, "used": figures.memory_bytes},
        "gpu": {
            "allocated": _r(figures.gpus_allocated, 3),
            "resources": dict(w.gpu_resources),
            "util_percent": _r(figures.gpu_util_percent),
            "mem_used_mib": _r(figures.gpu_mem_used_mib),
            "power_w": _r(figures.power_w),
            "basis": str(figures.basis),
            "caveat": figures.caveat,
            "idle": figures.gpu_idle,
            "cells": list(figures.cells),
        },
        "accounting": accounting_json(accounting),
    }


def workspace_detail_json(
    figures: WorkspaceFigures, cells: Iterable[GpuCell], accounting: AccountEntry | None = None
) -> Json:
    """:func:`workspace_json` plus each share with the cell it is on (device values next to the share)."""
    out = workspace_json(figures, accounting)
    shares = []
    for cell in cells:
        for s in cell.owners:
            if s.workspace == figures.workspace.key:
                basis, caveat = cell_basis(cell)
                device = {"util_percent": _r(cell.util_percent), "basis": str(basis), "caveat": caveat}
                shares.append(
                    {
                        "cell": f"{cell.node}/{cell.gpu}",
                        "kind": str(cell.kind),
                        "model": cell.model,
                        "device": device,
                        **share_json(s),
                    }
                )
    out["shares"] = shares
    return out


def group_json(t: GroupTotals) -> Json:
    return {
        "group": t.group,
        "users": list(t.users),
        "workspaces": t.workspaces,
        "gpus_allocated": _r(t.gpus_allocated, 3),
        "gpus_busy": _r(t.gpus_busy, 3),
        "gpus_idle": _r(t.gpus_idle, 3),
        "cpu_cores": _r(t.cpu_cores, 3),
        "memory_bytes": t.memory_bytes,
        "power_w": _r(t.power_w),
        "basis": "sum over the members' workspaces (each with its own basis)",
        "caveat": "busy counts only workspaces whose GPU utilisation is visible",
    }


def top_json(ranked: Sequence[tuple[WorkspaceFigures, float]], by: str) -> list[Json]:
    """Rows of :func:`.aggregate.top_consumers`."""
    return [
        {
            "rank": i + 1,
            "user": f.workspace.user,
            "server": f.workspace.server,
            "workspace": f.workspace.key,
            "by": by,
            "value": _r(v, 3),
            "basis": str(f.basis),
            "caveat": f.caveat,
        }
        for i, (f, v) in enumerate(ranked)
    ]


def grid_order(cell: GpuCell) -> tuple[int, int, str]:
    """Cards in index order (a MIG card's instances under it, in id order), then other cells."""
    card, _, rest = cell.gpu.partition("/")
    return (int(card), len(rest), rest) if card.isdigit() else (1 << 16, len(cell.gpu), cell.gpu)


def server_from_path(segment: str) -> str:
    """The server name in a URL: ``~`` or ``default`` mean JupyterHub's unnamed server ("")."""
    return "" if segment in DEFAULT_SERVER_PATHS else segment


@dataclass(frozen=True)
class Views:
    """One cycle's rendered JSON, indexed for per-request picks."""

    nodes: list[Json] = field(default_factory=list)
    workspaces: list[Json] = field(default_factory=list)  # every workspace's row (jobs' pods not among them)
    by_user: Mapping[str, list[Json]] = field(default_factory=dict)  # the same rows per user
    details: Mapping[tuple[str, str], Json] = field(default_factory=dict)  # (user, server) → detail
    jobs: list[Json] = field(default_factory=list)  # every job pod's row (kind "job")
    jobs_by_user: Mapping[str, list[Json]] = field(default_factory=dict)

    def workspaces_of(self, user: str) -> list[Json]:
        return self.by_user.get(user, [])

    def jobs_of(self, user: str) -> list[Json]:
        return self.jobs_by_user.get(user, [])

    def detail(self, user: str, server_segment: str) -> Json | None:
        return self.details.get((user, server_from_path(server_segment)))


def _cells_by(attribution: Attribution) -> tuple[dict[str, list[GpuCell]], dict[str, list[GpuCell]]]:
    """Cells in grid order per node name, and per workspace key they have a share on."""
    cells_by_node: dict[str, list[GpuCell]] = {}
    cells_by_ws: dict[str, list[GpuCell]] = {}
    for c in sorted(attribution.cells, key=grid_order):
        cells_by_node.setdefault(c.node, []).append(c)
        for s in c.owners:
            cells_by_ws.setdefault(s.workspace, []).append(c)
    return cells_by_node, cells_by_ws


def node_views(attribution: Attribution) -> list[Json]:
    cells_by_node, _ = _cells_by(attribution)
    return [node_json(n, cells_by_node.get(n.name, [])) for n in attribution.nodes]


def workspace_views(
    attribution: Attribution, accounting: Mapping[str, AccountEntry] | None = None
) -> Iterator[tuple[WorkspaceFigures, Json, Json]]:
    """Each workspace's row and detail, one workspace at a time (a caller that serialises them as they
    come never holds every workspace's dicts at once)."""
    accounting = accounting or {}
    _, cells_by_ws = _cells_by(attribution)
    for f in attribution.workspaces:
        key = f.workspace.key
        row = workspace_json(f, accounting.get(key))
        yield f, row, workspace_detail_json(f, cells_by_ws.get(key, []), accounting.get(key))


def build_views(attribution: Attribution, accounting: Mapping[str, AccountEntry] | None = None) -> Views:
    """Render every view of one cycle once; ``accounting`` maps workspace keys to their counters."""
    rows: list[Json] = []
    by_user: dict[str, list[Json]] = {}
    details: dict[tuple[str, str], Json] = {}
    jobs: list[Json] = []
    jobs_by_user: dict[str, list[Json]] = {}
    for f, row, detail in workspace_views(attribution, accounting):
        if f.workspace.is_job:  # a job's pod: the user's, but not the workspace of that (user, server)
            jobs.append(row)
            jobs_by_user.setdefault(f.workspace.user, []).append(row)
            continue
        rows.append(row)
        by_user.setdefault(f.workspace.user, []).append(row)
        details[(f.workspace.user, f.workspace.server)] = detail
    return Views(node_views(attribution), rows, by_user, details, jobs, jobs_by_user)


def nodes_without_owners(nodes: Sequence[Json]) -> list[Json]:
    """The node list with owners reduced to a count (when owners are not shown to every user)."""
    out = []
    for n in nodes:
        gpus = [{**c, "owners": [], "owner_count": len(c["owners"])} for c in n["gpus"]]
        out.append({**n, "gpus": gpus})
    return out
