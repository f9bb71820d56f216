"""Attribution rules: who holds each GPU cell and how far each figure can be trusted (pure).

:func:`attribute` turns one :class:`.Observation` into cells, per-workspace figures and node summaries.
Each rule is its own function, table-tested:

- :func:`whole_card_cell`: a card given whole to a pod: its owner gets the device's values (MEASURED);
- :func:`mig_cell`: a MIG instance: its owner gets the instance's GR-engine activity (MEASURED), no power;
- :func:`shared_cell_by_process`: a time-sliced card on a node whose agent answered: each sharer gets
  its processes' SM utilisation and memory (PER_PROCESS), pods outside our workspaces are shown too;
- :func:`shared_cell_by_device`: a time-sliced card without agent data: every sharer is shown with the
  device value (SHARED) and says so;
- :func:`passthrough_cells`: GPUs passed through to VMs, invisible to DCGM: one cell per GPU (ALLOCATION);
- :func:`unseen_cell`: a workspace holding a GPU that no exporter names (yet): ALLOCATION, so the
  holder still shows up.

dcgm-exporter names one pod per time-sliced device unless ``--kubernetes-virtual-gpus`` is on, so the
sharers of a time-sliced card are the pods it names, the pods the agent found on it, plus the node's
other holders of a shared-GPU resource; with several shared cards on the node, such holders are listed
on each of them with the caveat :data:`ONE_OF_SHARED`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from .aggregate import NodeSummary, node_summaries
from .model import (
    Basis,
    CellKind,
    ContainerUsage,
    DeviceSample,
    GpuCell,
    GpuShare,
    Observation,
    ProcessSample,
    WorkspaceFigures,
    WorkspacePod,
)
from .parsing import MIB, MIG_PREFIX, is_shared_resource

Holder = WorkspacePod | str  # a workspace, or the label of a pod that is none ("(not a workspace) ns/pod")
H = TypeVar("H", WorkspacePod, str, Holder)

NOT_A_WORKSPACE = "(not a workspace)"
OTHER_PODS = "(other pods)"
HOST = "(host)"
ONE_OF_SHARED = "on one of the node's shared GPUs"
MIG_POWER = "card power not per instance"
PASSTHROUGH = "passed through to a VM: utilisation not visible on the host"
UNSEEN = "no GPU metrics name this pod (exporter not scraped, or the pod is newer than the scrape)"
MEMORY_FULL_RATIO = 0.95
MIG_SLICES = 7  # compute slices of a MIG-capable card: a "3g.40gb" instance is 3/7 of one
ROUNDING = 0.5  # percent: NVML per-process samples and DCGM's device value disagree by rounding

# Weakest first: a workspace's basis is the weakest of its shares'.
BASIS_ORDER = (Basis.NONE, Basis.ALLOCATION, Basis.SHARED, Basis.PER_PROCESS, Basis.MEASURED)


@dataclass(frozen=True)
class Attribution:
    """One cycle's result: the grid's cells, every workspace's figures, every node's summary."""

    cells: tuple[GpuCell, ...] = ()
    workspaces: tuple[WorkspaceFigures, ...] = ()
    nodes: tuple[NodeSummary, ...] = ()


@dataclass
class _Held:
    """What a workspace holds, as the rules find it: its shares and the card fraction of each."""

    shares: list[tuple[GpuCell, GpuShare, float]] = field(default_factory=list)


def abnormal(dev: DeviceSample) -> tuple[str, ...]:
    """A device's abnormal states: its last XID error, a full framebuffer."""
    out = []
    if dev.xid:
        out.append(f"XID {dev.xid}")
    if (
        dev.mem_used_mib is not None
        and dev.mem_total_mib
        and dev.mem_used_mib >= MEMORY_FULL_RATIO * dev.mem_total_mib
    ):
        out.append("GPU memory full")
    return tuple(out)


def _share(
    holder: Holder, basis: Basis, util: float | None, mem: float | None, power: float | None, caveat: str
) -> GpuShare:
    if isinstance(holder, str):
        return GpuShare(holder, "", "", basis, util, mem, power, caveat)
    return GpuShare(holder.key, holder.user, holder.server, basis, util, mem, power, caveat, holder.job)


def _cell(dev: DeviceSample, kind: CellKind, owners: Iterable[GpuShare]) -> GpuCell:
    return GpuCell(
        node=dev.node,
        gpu=dev.entity,
        kind=kind,
        model=dev.model,
        uuid=dev.uuid,
        mig_profile=dev.mig_profile,
        util_percent=dev.util_percent,
        mem_used_mib=dev.mem_used_mib,
        mem_total_mib=dev.mem_total_mib,
        power_w=dev.power_w,
        xid=dev.xid,
        owners=tuple(owners),
        abnormal=abnormal(dev),
    )


def whole_card_cell(dev: DeviceSample, holders: Sequence[Holder]) -> GpuCell:
    """A card given whole: its holder gets the device's own values. No holder: a free card."""
    shares = [_share(h, Basis.MEASURED, dev.util_percent, dev.mem_used_mib, dev.power_w, "") for h in holders]
    return _cell(dev, CellKind.WHOLE, shares)


def mig_cell(dev: DeviceSample, holders: Sequence[Holder]) -> GpuCell:
    """A MIG instance: its holder gets the instance's activity and memory, no power (the cell keeps the
    card's power, which is not per instance)."""
    shares = [_share(h, Basis.MEASURED, dev.util_percent, dev.mem_used_mib, None, MIG_POWER) for h in holders]
    return _cell(dev, CellKind.MIG, shares)


def _plural(n: int) -> str:
    return f"{n} workspace" if n == 1 else f"{n} workspaces"


def shared_cell_by_device(
    dev: DeviceSample, sharers: Sequence[Holder], uncertain: Iterable[Holder] = ()
) -> GpuCell:
    """A time-sliced card without per-process data: each sharer is shown with the device value."""
    maybe = {holder_key(h) for h in uncertain}
    base = f"device value, shared by {_plural(len(sharers))} (no per-process data)"
    shares = [
        _share(
            h,
            Basis.SHARED,
            dev.util_percent,
            None,
            None,
            f"{base}; {ONE_OF_SHARED}" if holder_key(h) in maybe else base,
        )
        for h in sharers
    ]
    return _cell(dev, CellKind.TIME_SLICED, shares)


def shared_cell_by_process(
    dev: DeviceSample,
    sharers: Sequence[Holder],
    processes: Sequence[ProcessSample],
    uncertain: Iterable[Holder] = (),
) -> GpuCell:
    """A time-sliced card split by the agent's per-process samples (summed per pod on this card).

    Processes of pods that are not among the sharers show up as the named non-workspace pod (when the
    exporter named exactly one), else :data:`OTHER_PODS`; processes outside any pod as :data:`HOST`. When
    the processes add up to more than the device's utilisation (different sampling windows), every part
    is scaled down so the parts add up to the device value; power is split in proportion to utilisation.
    """
    maybe = {holder_key(h) for h in uncertain}
    util_of: dict[str, float] = {}
    mem_of: dict[str, float] = {}
    for p in processes:
        util_of[p.pod_uid] = util_of.get(p.pod_uid, 0.0) + p.sm_util_percent
        mem_of[p.pod_uid] = mem_of.get(p.pod_uid, 0.0) + p.mem_used_bytes
    workspaces = [h for h in sharers if isinstance(h, WorkspacePod)]
    named_others = [h for h in sharers if isinstance(h, str)]
    known = {w.uid for w in workspaces}
    parts: list[tuple[Holder, float, float | None, str]] = [
        (w, util_of.get(w.uid, 0.0), mem_of.get(w.uid, 0.0) / MIB, ONE_OF_SHARED if w.key in maybe else "")
        for w in workspaces
    ]
    other_uids = [u for u in util_of if u and u not in known]
    other_label = named_others[0] if len(named_others) == 1 else OTHER_PODS
    if other_uids or named_others:
        parts.append(
            (other_label, sum(util_of[u] for u in other_uids), sum(mem_of[u] for u in other_uids) / MIB, "")
        )
    if "" in util_of:
        parts.append((HOST, util_of[""], mem_of[""] / MIB, ""))
    total = sum(p[1] for p in parts)
    scale = (
        dev.util_percent / total
        if dev.util_percent is not None and total > dev.util_percent + ROUNDING
        else 1.0
    )

    def power(util: float) -> float | None:
        if dev.power_w is None:
            return None
        return dev.power_w * util / total if total > 0 else dev.power_w / len(parts)

    shares = [_share(h, Basis.PER_PROCESS, u * scale, m, power(u), c) for h, u, m, c in parts]
    return _cell(dev, CellKind.TIME_SLICED, shares)


def passthrough_cells(node: str, vms: Sequence[WorkspacePod]) -> list[GpuCell]:
    """One cell per GPU passed through to each VM on ``node``: held, but invisible to the host."""
    cells: list[GpuCell] = []
    for vm in sorted(vms, key=lambda w: w.key):
        for name, count in sorted(vm.gpu_resources.items()):
            model = name.split("/", 1)[-1].replace("_", " ")
            for _ in range(count):
                share = _share(vm, Basis.ALLOCATION, None, None, None, PASSTHROUGH)
                cells.append(
                    GpuCell(node, f"pt-{len(cells)}", CellKind.PASSTHROUGH, model=model, owners=(share,))
                )
    return cells


def _kind_of(ws: WorkspacePod) -> CellKind:
    if ws.gpu_mode == "mig" or any(n.startswith(MIG_PREFIX) for n in ws.gpu_resources):
        return CellKind.MIG
    if ws.gpu_mode == "time-sliced" or any(is_shared_resource(n) for n in ws.gpu_resources):
        return CellKind.TIME_SLICED
    return CellKind.WHOLE


def unseen_cell(ws: WorkspacePod, index: int) -> GpuCell:
    """A holder no exporter names: shown by allocation so "who holds the GPUs" stays complete."""
    share = _share(ws, Basis.ALLOCATION, None, None, None, UNSEEN)
    return GpuCell(ws.node or "", f"unseen-{index}", _kind_of(ws), owners=(share,))


def allocated_cards(ws: WorkspacePod, replicas: int = 1) -> float:
    """Cards a workspace's GPU resources amount to when no cell tells: MIG ``Ng`` = N/7, a replica 1/replicas."""
    total = 0.0
    for name, count in ws.gpu_resources.items():
        if name.startswith(MIG_PREFIX):
            g = name[len(MIG_PREFIX) :].split("g", 1)[0].split("c.")[-1]
            total += count * (int(g) if g.isdigit() else 1) / MIG_SLICES
        elif is_shared_resource(name):
            total += count / max(1, replicas)
        else:
            total += count
    return total


def weakest(bases: Iterable[Basis]) -> Basis:
    """The least trustworthy basis among ``bases`` (NONE when there are none)."""
    found = [b for b in bases if b is not Basis.NONE]
    return min(found, key=BASIS_ORDER.index) if found else Basis.NONE


def workspace_figures(
    ws: WorkspacePod,
    held: Sequence[tuple[GpuCell, GpuShare, float]],
    usage: ContainerUsage | None,
    *,
    idle_util_percent: float = 5.0,
) -> WorkspaceFigures:
    """A workspace's figures from its shares (cell, share, card fraction) and its CPU/memory use."""
    utils = [s.util_percent for _, s, _ in held if s.util_percent is not None]
    mems = [s.mem_used_mib for _, s, _ in held if s.mem_used_mib is not None]
    powers = [s.power_w for _, s, _ in held if s.power_w is not None]
    allocated = sum(f for _, _, f in held)
    util = sum(utils) / len(utils) if utils else None
    caveats = list(dict.fromkeys(s.caveat for _, s, _ in held if s.caveat))
    return WorkspaceFigures(
        workspace=ws,
        cpu_cores=usage.cpu_cores if usage else None,
        memory_bytes=usage.memory_bytes if usage else None,
        gpus_allocated=allocated,
        gpu_util_percent=util,
        gpu_mem_used_mib=sum(mems) if mems else None,
        power_w=sum(powers) if powers else None,
        basis=weakest(s.basis for _, s, _ in held),
        caveat="; ".join(caveats),
        cells=tuple(dict.fromkeys(f"{c.node}/{c.gpu}" for c, _, _ in held)),
        gpu_idle=allocated > 0 and util is not None and util < idle_util_percent,
    )


class _Index:
    """Lookups over one observation."""

    def __init__(self, obs: Observation) -> None:
        self.by_ref = {(w.namespace, w.pod): w for w in obs.workspaces}
        self.by_uid = {w.uid: w for w in obs.workspaces if w.uid}
        self.procs: dict[tuple[str, str], list[ProcessSample]] = {}
        for p in obs.processes:
            self.procs.setdefault((p.node, p.gpu_uuid), []).append(p)
        self.agent_nodes = obs.agent_nodes

    def holder(self, ref: tuple[str, str]) -> Holder:
        ws = self.by_ref.get(ref)
        return ws if ws is not None else f"{NOT_A_WORKSPACE} {ref[0]}/{ref[1]}"

    def agent_holders(self, dev: DeviceSample) -> list[WorkspacePod]:
        if dev.node not in self.agent_nodes:
            return []
        found = (self.by_uid.get(p.pod_uid) for p in self.procs.get((dev.node, dev.uuid), ()))
        return _unique(w for w in found if w is not None and not w.passthrough)


def holder_key(h: Holder) -> str:
    """A holder's identity: the workspace key, or the non-workspace label."""
    return h if isinstance(h, str) else h.key


def _unique(holders: Iterable[H]) -> list[H]:
    seen: dict[str, H] = {}
    for h in holders:
        seen.setdefault(holder_key(h), h)
    return list(seen.values())


def _is_shared_holder(ws: WorkspacePod) -> bool:
    return not ws.passthrough and _kind_of(ws) is CellKind.TIME_SLICED


def _node_cells(
    node: str, devices: Sequence[DeviceSample], node_ws: Sequence[WorkspacePod], ix: _Index
) -> list[GpuCell]:
    """The cells of one node's dcgm-visible devices."""
    cells: list[GpuCell] = []
    cards: list[tuple[DeviceSample, list[Holder]]] = []
    for dev in devices:
        holders: list[Holder] = _unique(ix.holder(r) for r in dev.pods)
        if dev.mig_instance is not None:
            cells.append(mig_cell(dev, holders))
            continue
        named = {holder_key(h) for h in holders}
        holders += [w for w in ix.agent_holders(dev) if w.key not in named and _is_shared_holder(w)]
        cards.append((dev, holders))

    def shared(holders: Sequence[Holder]) -> bool:
        return len(holders) > 1 or any(isinstance(h, WorkspacePod) and _is_shared_holder(h) for h in holders)

    shared_cards = [(d, h) for d, h in cards if shared(h)]
    placed = {holder_key(h) for _, hs in cards for h in hs}
    unplaced: list[Holder] = [w for w in node_ws if _is_shared_holder(w) and w.key not in placed]
    uncertain = unplaced if len(shared_cards) > 1 else []
    for dev, holders in cards:
        if not shared(holders):
            cells.append(whole_card_cell(dev, holders))
            continue
        here = {holder_key(h) for h in holders}
        sharers = holders + [u for u in unplaced if holder_key(u) not in here]
        if node in ix.agent_nodes:
            cells.append(shared_cell_by_process(dev, sharers, ix.procs.get((node, dev.uuid), []), uncertain))
        else:
            cells.append(shared_cell_by_device(dev, sharers, uncertain))
    return cells


def _fraction(cell: GpuCell, mig_instances: Mapping[tuple[str, str], int], uncertain_on: int) -> float:
    if cell.kind is CellKind.MIG:
        return 1.0 / max(1, mig_instances.get((cell.node, cell.gpu.split("/")[0]), 1))
    if cell.kind is CellKind.TIME_SLICED:
        return 1.0 / max(1, len(cell.owners)) / max(1, uncertain_on)
    return 1.0


def attribute(obs: Observation, *, idle_util_percent: float = 5.0) -> Attribution:
    """Cells, workspace figures and node summaries for one observation (see the module's rules)."""
    ix = _Index(obs)
    devices_by_node: dict[str, list[DeviceSample]] = {}
    for dev in obs.devices:
        devices_by_node.setdefault(dev.node, []).append(dev)
    ws_by_node: dict[str, list[WorkspacePod]] = {}
    for w in obs.workspaces:
        ws_by_node.setdefault(w.node or "", []).append(w)
    cells: list[GpuCell] = []
    for node in sorted(set(devices_by_node) | set(ws_by_node)):
        node_ws = ws_by_node.get(node, [])
        cells.extend(_node_cells(node, devices_by_node.get(node, []), node_ws, ix))
        cells.extend(passthrough_cells(node, [w for w in node_ws if w.passthrough]))
    mig_instances: dict[tuple[str, str], int] = {}
    for c in cells:
        if c.kind is CellKind.MIG and not c.gpu.startswith("unseen-"):
            key = (c.node, c.gpu.split("/")[0])
            mig_instances[key] = mig_instances.get(key, 0) + 1
    held: dict[str, _Held] = {w.key: _Held() for w in obs.workspaces}
    for c in cells:
        for s in c.owners:
            if s.workspace in held:
                held[s.workspace].shares.append((c, s, 0.0))
    unseen: dict[str, int] = {}
    for w in obs.workspaces:
        h = held[w.key]
        if not h.shares and any(n > 0 for n in w.gpu_resources.values()):
            node = w.node or ""
            cell = unseen_cell(w, unseen.get(node, 0))
            unseen[node] = unseen.get(node, 0) + 1
            cells.append(cell)
            replicas = int(_node_label(obs, node, "nvidia.com/gpu.replicas") or 1)
            h.shares.append((cell, cell.owners[0], allocated_cards(w, replicas)))
            continue
        maybe = sum(1 for _, s, _ in h.shares if ONE_OF_SHARED in s.caveat)
        h.shares[:] = [
            (c, s, _fraction(c, mig_instances, maybe if ONE_OF_SHARED in s.caveat else 1))
            for c, s, _ in h.shares
        ]
    usage = {(u.namespace, u.pod): u for u in obs.usage}
    figures = tuple(
        workspace_figures(
            w, held[w.key].shares, usage.get((w.namespace, w.pod)), idle_util_percent=idle_util_percent
        )
        for w in sorted(obs.workspaces, key=lambda w: (w.user, w.server, w.key))
    )
    all_cells = tuple(cells)
    return Attribution(all_cells, figures, node_summaries(obs.nodes, all_cells, figures))


def _node_label(obs: Observation, node: str, label: str) -> str | None:
    info = next((n for n in obs.nodes if n.name == node), None)
    value = info.labels.get(label) if info else None
    return value if value and value.isdigit() else None


__all__ = [
    "Attribution",
    "abnormal",
    "allocated_cards",
    "attribute",
    "mig_cell",
    "passthrough_cells",
    "shared_cell_by_device",
    "shared_cell_by_process",
    "unseen_cell",
    "weakest",
    "whole_card_cell",
    "workspace_figures",
]
