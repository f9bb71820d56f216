"""Attribution rules: decision tables per GPU mode, and properties over arbitrary observations."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuworkspace_spawner.services.attribution.model import (
    Basis,
    CellKind,
    ContainerUsage,
    GpuCell,
    Observation,
    WorkspacePod,
)
from gpuworkspace_spawner.services.attribution.rules import (
    HOST,
    ONE_OF_SHARED,
    OTHER_PODS,
    PASSTHROUGH,
    UNSEEN,
    Attribution,
    allocated_cards,
    attribute,
    weakest,
)

from .conftest import NODE, dev, node, proc, ws

NOW = 1_750_000_000.0


def _run(*devices, workspaces=(), processes=(), agent=(), usage=(), nodes=None) -> Attribution:
    return attribute(
        Observation(
            now=NOW,
            nodes=tuple(nodes if nodes is not None else [node()]),
            workspaces=tuple(workspaces),
            devices=tuple(devices),
            processes=tuple(processes),
            agent_nodes=frozenset(agent),
            usage=tuple(usage),
        )
    )


def _cell(result: Attribution, gpu: str, node_name: str = NODE) -> GpuCell:
    return next(c for c in result.cells if c.gpu == gpu and c.node == node_name)


def _owners(cell: GpuCell) -> list[tuple[str, str, float | None, float | None, float | None]]:
    return [(s.workspace, str(s.basis), s.util_percent, s.mem_used_mib, s.power_w) for s in cell.owners]


def _fig(result: Attribution, user: str):
    return next(f for f in result.workspaces if f.workspace.user == user)


def test_exclusive_card_is_measured_for_its_owner() -> None:
    alice = ws("alice")
    result = _run(dev("0", alice, util=70.0, mem=4000.0, power=400.0), dev("1", util=0.0), workspaces=[alice])
    cell = _cell(result, "0")
    assert cell.kind is CellKind.WHOLE
    assert _owners(cell) == [(alice.key, "measured", 70.0, 4000.0, 400.0)]
    assert _cell(result, "1").owners == ()  # a free card
    fig = _fig(result, "alice")
    assert (fig.gpus_allocated, fig.gpu_util_percent, fig.basis, fig.gpu_idle) == (
        1.0,
        70.0,
        Basis.MEASURED,
        False,
    )
    assert fig.cells == (f"{NODE}/0",)


def test_mig_owner_per_instance_without_power() -> None:
    bob, carol = (
        ws("bob", resources={"nvidia.com/mig-1g.10gb": 1}),
        ws("carol", resources={"nvidia.com/mig-1g.10gb": 1}),
    )
    devices = [
        dev("7", bob, mig="7", profile="1g.10gb", util=81.0, mem=500.0, total=9856.0),
        dev("7", carol, mig="8", profile="1g.10gb", util=2.0, mem=10.0, total=9856.0),
        *(dev("7", mig=str(i), profile="1g.10gb", util=0.0, total=9856.0) for i in range(9, 14)),
    ]
    result = _run(*devices, workspaces=[bob, carol])
    cell = _cell(result, "7/mig-7")
    assert cell.kind is CellKind.MIG and cell.power_w == 300.0  # the card's
    assert _owners(cell) == [(bob.key, "measured", 81.0, 500.0, None)]
    assert "card power not per instance" in cell.owners[0].caveat
    assert _fig(result, "bob").gpus_allocated == pytest.approx(1 / 7)
    assert _fig(result, "carol").gpu_idle


def test_time_sliced_without_agent_lists_every_sharer_with_the_device_value() -> None:
    """The "shared GPU fully occupied" row: 4 replicas held, the exporter names only the last pod."""
    sharers = [ws(u, resources={"nvidia.com/gpu.shared": 1}) for u in ("a", "b", "c", "d")]
    result = _run(dev("6", sharers[-1], util=90.0), workspaces=sharers)
    cell = _cell(result, "6")
    assert cell.kind is CellKind.TIME_SLICED
    assert sorted(s.user for s in cell.owners) == ["a", "b", "c", "d"]
    assert {(s.basis, s.util_percent, s.mem_used_mib, s.power_w) for s in cell.owners} == {
        (Basis.SHARED, 90.0, None, None)
    }
    assert all("shared by 4 workspaces (no per-process data)" in s.caveat for s in cell.owners)
    for u in "abcd":
        fig = _fig(result, u)
        assert (fig.gpus_allocated, fig.basis, fig.gpu_util_percent) == (0.25, Basis.SHARED, 90.0)


def test_time_sliced_with_agent_splits_per_process() -> None:
    a, b, c = (ws(u, resources={"nvidia.com/gpu.shared": 1}) for u in "abc")
    card = dev("6", b, util=50.0, mem=6000.0, power=200.0)
    procs = [proc(card, a, 30.0, 1000.0), proc(card, b, 10.0, 2000.0), proc(card, "uid-foreign", 10.0, 500.0)]
    result = _run(card, workspaces=[a, b, c], processes=procs, agent=[NODE])
    owners = {s.workspace: s for s in _cell(result, "6").owners}
    assert set(owners) == {a.key, b.key, c.key, OTHER_PODS}
    assert (owners[a.key].util_percent, owners[a.key].mem_used_mib, owners[a.key].power_w) == (
        30.0,
        1000.0,
        120.0,
    )
    assert (owners[b.key].util_percent, owners[b.key].power_w) == (10.0, 40.0)
    assert (owners[c.key].util_percent, owners[c.key].mem_used_mib) == (
        0.0,
        0.0,
    )  # holds a replica, runs nothing
    assert owners[OTHER_PODS].util_percent == 10.0
    assert all(s.basis is Basis.PER_PROCESS for s in owners.values())
    assert _fig(result, "c").gpu_idle and not _fig(result, "a").gpu_idle


def test_per_process_parts_are_scaled_to_the_device_value() -> None:
    a, b = (ws(u, resources={"nvidia.com/gpu.shared": 1}) for u in "ab")
    card = dev("6", a, util=40.0, power=None)
    procs = [proc(card, a, 60.0), proc(card, b, 20.0), proc(card, "", 0.0)]
    owners = {
        s.workspace: s
        for s in _cell(_run(card, workspaces=[a, b], processes=procs, agent=[NODE]), "6").owners
    }
    assert owners[a.key].util_percent == pytest.approx(30.0)
    assert owners[b.key].util_percent == pytest.approx(10.0)
    assert owners[HOST].util_percent == 0.0 and owners[a.key].power_w is None


def test_several_shared_cards_list_unplaced_holders_on_each() -> None:
    a, b, c, d = (ws(u, resources={"nvidia.com/gpu.shared": 1}) for u in "abcd")
    result = _run(dev("5", b, util=20.0), dev("6", d, util=60.0), workspaces=[a, b, c, d])
    five, six = _cell(result, "5"), _cell(result, "6")
    assert {s.user for s in five.owners} == {"a", "b", "c"}
    assert {s.user for s in six.owners} == {"a", "c", "d"}
    maybe = {s.user for s in five.owners if ONE_OF_SHARED in s.caveat}
    assert maybe == {"a", "c"}
    # Listed on two cards, a holder still counts once: 1/3 on each card, halved.
    assert _fig(result, "a").gpus_allocated == pytest.approx(1 / 3)
    assert _fig(result, "b").gpus_allocated == pytest.approx(1 / 3)


def test_agent_places_holders_on_their_card() -> None:
    a, b, c, d = (ws(u, resources={"nvidia.com/gpu.shared": 1}) for u in "abcd")
    five, six = dev("5", b, util=20.0), dev("6", d, util=60.0)
    procs = [proc(five, a, 5.0), proc(six, c, 40.0)]
    result = _run(five, six, workspaces=[a, b, c, d], processes=procs, agent=[NODE])
    assert {s.user for s in _cell(result, "5").owners} == {"a", "b"}
    assert {s.user for s in _cell(result, "6").owners} == {"c", "d"}
    assert not any(ONE_OF_SHARED in s.caveat for c_ in result.cells for s in c_.owners)


def test_passthrough_vm_is_attributed_by_allocation() -> None:
    vm = ws(
        "vera", resources={"nvidia.com/GH100_H100_SXM5_80GB": 2}, runtime="vm", pod="virt-launcher-vera-abc"
    )
    result = _run(dev("0", util=0.0), workspaces=[vm])
    pts = [c for c in result.cells if c.kind is CellKind.PASSTHROUGH]
    assert [c.gpu for c in pts] == ["pt-0", "pt-1"]
    assert all(c.util_percent is None and c.uuid is None for c in pts)
    assert [(s.basis, s.caveat) for c in pts for s in c.owners] == [(Basis.ALLOCATION, PASSTHROUGH)] * 2
    fig = _fig(result, "vera")
    assert (fig.gpus_allocated, fig.gpu_util_percent, fig.basis, fig.gpu_idle) == (
        2.0,
        None,
        Basis.ALLOCATION,
        False,
    )
    assert len(result.cells) == 3  # the visible free card and two passthrough slots: nothing invented


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({"xid": 79}, ("XID 79",), id="xid"),
        pytest.param({"mem": 80000.0, "total": 81559.0}, ("GPU memory full",), id="memory-full"),
        pytest.param({"xid": 48, "mem": 81559.0, "total": 81559.0}, ("XID 48", "GPU memory full"), id="both"),
        pytest.param({"mem": 70000.0, "total": 81559.0}, (), id="healthy"),
        pytest.param({"mem": None, "total": None}, (), id="unknown-memory"),
    ],
)
def test_abnormal_cells(kwargs: dict, expected: tuple[str, ...]) -> None:
    result = _run(dev("3", **kwargs))
    assert _cell(result, "3").abnormal == expected
    summary = result.nodes[0]
    assert summary.abnormal == tuple(f"{s} on GPU 3" for s in expected)


def test_a_pod_that_is_not_a_workspace() -> None:
    result = _run(dev("2", ("kube-system", "nccl-test"), util=99.0))
    (owner,) = _cell(result, "2").owners
    assert (owner.workspace, owner.user, owner.basis) == (
        "(not a workspace) kube-system/nccl-test",
        "",
        Basis.MEASURED,
    )
    assert result.nodes[0].gpus_allocated == 1.0


def test_a_pod_that_vanished_between_sources() -> None:
    """The exporter still names a deleted pod; a new workspace is not in the scrape yet."""
    new = ws("nina")
    result = _run(dev("0", ("gpu-workspaces", "jupyter-gone"), util=10.0), workspaces=[new])
    assert _cell(result, "0").owners[0].workspace == "(not a workspace) gpu-workspaces/jupyter-gone"
    unseen = _cell(result, "unseen-0")
    assert unseen.kind is CellKind.WHOLE and unseen.uuid is None
    assert [(s.workspace, s.basis, s.caveat) for s in unseen.owners] == [(new.key, Basis.ALLOCATION, UNSEEN)]
    assert _fig(result, "nina").gpus_allocated == 1.0


def test_cpu_and_memory_come_from_usage() -> None:
    cpu_only = ws("cora", resources={})
    result = _run(workspaces=[cpu_only], usage=[ContainerUsage(cpu_only.namespace, cpu_only.pod, 1.5, 3e9)])
    fig = _fig(result, "cora")
    assert (fig.cpu_cores, fig.memory_bytes, fig.gpus_allocated, fig.basis, fig.cells) == (
        1.5,
        3e9,
        0.0,
        Basis.NONE,
        (),
    )
    assert not fig.gpu_idle


def test_helpers() -> None:
    assert weakest([Basis.MEASURED, Basis.SHARED, Basis.PER_PROCESS]) is Basis.SHARED
    assert weakest([]) is Basis.NONE
    assert allocated_cards(
        ws("x", resources={"nvidia.com/mig-3g.40gb": 2, "nvidia.com/gpu": 1})
    ) == pytest.approx(1 + 6 / 7)
    assert allocated_cards(ws("x", resources={"nvidia.com/gpu.shared": 1}), replicas=4) == 0.25


# --------------------------------------------------------------------------------- properties
RESOURCES = st.sampled_from(
    [
        {},
        {"nvidia.com/gpu": 1},
        {"nvidia.com/gpu": 2},
        {"nvidia.com/gpu.shared": 1},
        {"nvidia.com/mig-1g.10gb": 1},
        {"nvidia.com/GH100_H100_SXM5_80GB": 1},
    ]
)


@st.composite
def observations(draw: st.DrawFn) -> Observation:
    nodes = ["n0", "n1"]
    workspaces: list[WorkspacePod] = []
    for i in range(draw(st.integers(0, 8))):
        res = draw(RESOURCES)
        vm = "GH100_H100_SXM5_80GB" in str(res)
        workspaces.append(
            ws(f"u{i}", resources=res, node=draw(st.sampled_from(nodes)), runtime="vm" if vm else "container")
        )
    devices = []
    for n in nodes:
        for g in range(draw(st.integers(0, 3))):
            named = draw(
                st.lists(
                    st.sampled_from([*workspaces, ("other", "pod")])
                    if workspaces
                    else st.just(("other", "pod")),
                    max_size=3,
                )
            )
            named = [w for w in named if not isinstance(w, WorkspacePod) or w.node == n]
            mig = draw(st.sampled_from([None, "7", "8"]))
            util = draw(st.one_of(st.none(), st.floats(0, 100)))
            devices.append(dev(str(g), *named, node=n, util=util, mig=mig, profile="1g.10gb"))
    agent = draw(st.sets(st.sampled_from(nodes)))
    processes = []
    for d in devices:
        for owner in draw(
            st.lists(st.sampled_from([*workspaces, "", "uid-x"]) if workspaces else st.just(""), max_size=3)
        ):
            processes.append(proc(d, owner, draw(st.floats(0, 100)), draw(st.floats(0, 1000))))
    return Observation(
        now=NOW,
        nodes=tuple(node(n) for n in nodes),
        workspaces=tuple(workspaces),
        devices=tuple(devices),
        processes=tuple(processes),
        agent_nodes=frozenset(agent),
    )


@settings(max_examples=300, deadline=None)
@given(observations())
def test_every_holder_is_shown_and_every_share_is_grounded(obs: Observation) -> None:
    result = attribute(obs)
    owners = {s.workspace for c in result.cells for s in c.owners}
    for w in obs.workspaces:
        if any(v > 0 for v in w.gpu_resources.values()):
            assert w.key in owners, w
    for c in result.cells:
        for s in c.owners:
            assert s.basis is not Basis.NONE
            if s.basis is Basis.PER_PROCESS:
                assert s.util_percent is not None and s.util_percent >= 0
        per_process = [s.util_percent or 0.0 for s in c.owners if s.basis is Basis.PER_PROCESS]
        if per_process and c.util_percent is not None:
            assert sum(per_process) <= c.util_percent + 0.5 + 1e-9
    assert len(result.workspaces) == len(obs.workspaces)
    for f in result.workspaces:
        assert f.gpus_allocated >= 0
        assert (f.basis is Basis.NONE) == (not f.cells)
