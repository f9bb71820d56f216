"""The dashboard page: what one caller sees of a snapshot, rendered with Jinja2 (templates/attribution/).

The node grid (a cell per card, MIG instance or passthrough slot, coloured by utilisation and labelled
with its owners and the basis of the figure), the caller's workspaces (admins: everyone's), the top
consumers among the users the caller may rank, trend charts (server-rendered SVG from :mod:`.charts`),
and for admins the sources that failed in the last cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jinja2 import Environment
from markupsafe import Markup

from ..handling import page_templates
from . import access
from .charts import bar_chart, line_chart, util_color
from .collector import Snapshot
from .history import History
from .model import Basis, GpuCell
from .views import cell_basis, grid_order

CHART_WINDOW_S = 6 * 3600
TOP_N = 10  # bars in the top consumers chart
MIB = 1024 * 1024
LEGEND: tuple[tuple[str, str], ...] = (
    (str(Basis.MEASURED), "the device's own counter, one owner (a whole card or a MIG instance)."),
    (
        str(Basis.PER_PROCESS),
        "a time-sliced card split by the node agent's per-process samples (NVML): each owner's own share.",
    ),
    (
        str(Basis.SHARED),
        "a time-sliced card without per-process data: every owner is shown with the whole card's value, "
        "which they share; the split between them is unknown.",
    ),
    (
        str(Basis.ALLOCATION),
        "only who holds the GPU is known: a GPU passed through to a VM is invisible to the host's DCGM, "
        "so its utilisation cannot be measured there.",
    ),
)


def environment() -> Environment:
    return page_templates("attribution")


def _svg(svg: str) -> Markup:
    """An SVG from :mod:`.charts` (which escapes its text), tagged ``class="chart"`` for the page."""
    return Markup(svg.replace("<svg ", '<svg class="chart" ', 1))  # charts.py escapes every text it draws


def owner_label(user: str, server: str, job: str = "") -> str:
    """How a holder is named: ``alice``, ``alice/train`` (a named server), ``alice: job train-x7k2q``."""
    if job:
        return f"{user}: job {job}"
    return f"{user}/{server}" if server else user


@dataclass(frozen=True)
class CellView:
    cell: GpuCell
    color: str
    basis: str
    caveat: str
    owners: tuple[tuple[str, str, str], ...]  # (label, basis, caveat)

    @property
    def title(self) -> str:
        c = self.cell
        parts = [f"{c.node} GPU {c.gpu} ({c.kind})", c.model or ""]
        if c.mig_profile:
            parts.append(f"MIG {c.mig_profile}")
        parts.append("utilisation " + ("not visible" if c.util_percent is None else f"{c.util_percent:.0f}%"))
        if c.mem_used_mib is not None and c.mem_total_mib:
            parts.append(f"memory {c.mem_used_mib:.0f} / {c.mem_total_mib:.0f} MiB")
        if c.power_w is not None:
            parts.append(f"{c.power_w:.0f} W")
        parts.extend(c.abnormal)
        if self.caveat:
            parts.append(self.caveat)
        return " · ".join(p for p in parts if p)


def _cell_view(cell: GpuCell, show_owners: bool) -> CellView:
    basis, caveat = cell_basis(cell)
    owners = tuple((owner_label(s.user, s.server, s.job), str(s.basis), s.caveat) for s in cell.owners)
    if not show_owners:
        owners = tuple(("(in use)", b, c) for _, b, c in owners)
    return CellView(cell, util_color(cell.util_percent), str(basis), caveat, owners)


def context(
    snap: Snapshot,
    history: History,
    caller: Mapping[str, Any],
    *,
    service: str,
    prefix: str,
    hub_prefix: str,
    show_owners_to_all: bool = True,
) -> dict[str, Any]:
    """Everything the template needs, filtered for ``caller`` (the hub's model of their token)."""
    admin = access.is_admin(caller)
    me = str(caller.get("name", "")) if caller.get("kind", "user") == "user" else ""
    cells_by_node: dict[str, list[CellView]] = {}
    for c in sorted(snap.attribution.cells, key=grid_order):
        cells_by_node.setdefault(c.node, []).append(_cell_view(c, show_owners_to_all or admin))
    mine = list(snap.attribution.workspaces) if admin else list(snap.figures_by_user.get(me, ()))
    ranked = snap.top("gpu", access.visible_users(caller, snap.groups_of_user), TOP_N)
    bars = [(owner_label(f.workspace.user, f.workspace.server, f.workspace.job), v) for f, v in ranked]
    since = snap.at - CHART_WINDOW_S
    charts = [
        line_chart(history.window("cluster:gpu_util", since), title="Cluster GPU utilisation (%)", y_max=100),
        line_chart(
            history.window("cluster:gpus_allocated", since), title="GPUs allocated (cards)", color="#34a853"
        ),
        line_chart(
            history.window("cluster:gpus_idle", since), title="GPUs allocated but idle", color="#ea4335"
        ),
    ]
    if me and access.may_read_series(caller, f"user:{me}:gpu_util", service=service):
        charts.append(
            line_chart(
                history.window(f"user:{me}:gpu_util", since), title=f"{me}: GPU utilisation (%)", y_max=100
            )
        )
    return {
        "prefix": prefix,
        "hub_prefix": hub_prefix,
        "user": me or str(caller.get("name", "")),
        "admin": admin,
        "at": snap.at,
        "nodes": [(n, cells_by_node.get(n.name, [])) for n in snap.attribution.nodes],
        "workspaces": [f for f in mine if not f.workspace.is_job],
        "jobs": [f for f in mine if f.workspace.is_job],
        "top": ranked,
        "top_chart": _svg(bar_chart(bars, title="Top consumers: GPUs held", unit=" GPUs")),
        "charts": [_svg(svg) for svg in charts],
        "failed_sources": snap.failed_sources if admin else (),
        "legend": LEGEND,
        "owner_label": owner_label,
        "mib": MIB,
    }


def render(env: Environment, name: str, ctx: Mapping[str, Any]) -> str:
    return env.get_template(name).render(**ctx)
