"""Availability per profile: counts, whether a start fits now, and why not (decision table)."""

from __future__ import annotations

import json

import pytest

from gpuworkspace_spawner.services.attribution.availability import (
    Need,
    NodeCapacity,
    availability_json,
    decide_availability,
    node_capacities,
    parse_need,
)
from gpuworkspace_spawner.services.attribution.model import NodeInfo, WorkspacePod

GPU, MIG, SHARED = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"
POOL = {"gpuworkspace.dev/pool": "gpu"}
H100 = {**POOL, "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def node(
    name: str, held: dict[str, int] | None = None, *, ok: bool = True, labels: dict[str, str] | None = None
) -> NodeCapacity:
    return NodeCapacity(
        name=name,
        schedulable=ok,
        labels=H100 if labels is None else labels,
        allocatable={GPU: 8, MIG: 7, SHARED: 4},
        held=held or {},
    )


def need(resource: str = GPU, count: int = 1) -> Need:
    return Need(resource=resource, count=count, selector=POOL)


@pytest.mark.parametrize(
    ("the_need", "nodes", "free", "total", "reason", "text"),
    [
        pytest.param(need(), [node("a", {GPU: 3}), node("b", {GPU: 8})], 5, 16, "", "5 of 16 H100 free", id="whole-some-free"),
        pytest.param(need(), [node("a", {GPU: 6})], 2, 8, "", "2 of 8 H100 free", id="six-of-eight-held"),
        pytest.param(need(), [node("a", {GPU: 8}), node("b", {GPU: 8})], 0, 16, "no-capacity", "0 of 16 H100 free", id="all-held"),
        pytest.param(need(MIG), [node("a", {MIG: 1}), node("b")], 13, 14, "", "MIG 1g.10gb: 13 free", id="mig"),
        pytest.param(need(SHARED), [node("a", {SHARED: 2}), node("b")], 6, 8, "", "shared card: 2 of 8 slots taken", id="shared"),
        pytest.param(need(SHARED), [node("a", {SHARED: 4})], 0, 4, "no-capacity", "shared card: 4 of 4 slots taken", id="shared-full"),
        pytest.param(need(GPU, 4), [node("a", {GPU: 5}), node("b", {GPU: 5})], 6, 16, "no-node-fits", "6 of 16 H100 free", id="free-but-split"),
        pytest.param(need(GPU, 4), [node("a", {GPU: 5}), node("b", {GPU: 4})], 7, 16, "", "7 of 16 H100 free", id="fits-on-one"),
        pytest.param(need(), [node("a", ok=False), node("b", {GPU: 2})], 6, 8, "", "6 of 8 H100 free", id="cordoned-node-not-counted"),
        pytest.param(need(), [node("a", ok=False)], 0, 0, "nodes-unavailable", "0 free: its nodes are not ready", id="no-ready-node"),
        pytest.param(need(), [node("a", labels={"gpuworkspace.dev/pool": "cpu"})], 0, 0, "no-nodes", "no node offers this GPU", id="other-pool"),
        pytest.param(need("nvidia.com/mig-3g.40gb"), [node("a")], 0, 0, "no-nodes", "no node offers this GPU", id="resource-not-offered"),
        pytest.param(need(), [node("a", {GPU: 9})], 0, 8, "no-capacity", "0 of 8 H100 free", id="overcommitted-is-zero"),
        pytest.param(need(), [node("a", labels=POOL)], 8, 8, "", "8 of 8 GPU free", id="no-product-label"),
    ],
)  # fmt: skip
def test_decide_availability(
    the_need: Need, nodes: list[NodeCapacity], free: int, total: int, reason: str, text: str
) -> None:
    verdict = decide_availability(the_need, nodes)
    assert (verdict.free, verdict.total, verdict.reason, verdict.text) == (free, total, reason, text)
    assert verdict.startable is (reason == "")
    assert bool(verdict.why) is (reason != "")


def test_node_view_counts_live_pods_only_and_names_no_holder() -> None:
    nodes = [NodeInfo(name="a", ready=True, allocatable={GPU: 8.0, "cpu": 128.0}, labels=H100)]
    pods = [
        WorkspacePod("ns", f"p{i}", f"u{i}", "alice", "", "gpu", "exclusive", "container", "a", gpu_resources={GPU: 2})
        for i in range(3)
    ] + [
        WorkspacePod("ns", "done", "u9", "bob", "", "gpu", "exclusive", "container", "a", phase="Succeeded", gpu_resources={GPU: 8}),
        WorkspacePod("ns", "pending", "u8", "bob", "", "gpu", "exclusive", "container", None, gpu_resources={GPU: 8}),
    ]  # fmt: skip
    (capacity,) = node_capacities(nodes, pods)
    assert capacity.allocatable == {GPU: 8} and capacity.held == {GPU: 6}
    body = json.dumps(availability_json(decide_availability(need(), [capacity]), at=1.0))
    assert "2 of 8 H100 free" in body
    assert "alice" not in body and "bob" not in body


@pytest.mark.parametrize(
    ("resource", "count", "selectors", "message"),
    [
        pytest.param("cpu", "1", [], "not a GPU resource", id="not-gpu"),
        pytest.param(GPU, "0", [], "between 1 and 64", id="zero"),
        pytest.param(GPU, "1e3", [], "between 1 and 64", id="not-integer"),
        pytest.param(GPU, "9" * 5000, [], "between 1 and 64", id="huge"),
        pytest.param(GPU, "1", ["pool"], "not a node label key=value", id="no-equals"),
        pytest.param(GPU, "1", ["bad key=x"], "not a node label key=value", id="bad-key"),
        pytest.param(GPU, "1", [f"k{i}=v" for i in range(17)], "at most 16", id="too-many"),
    ],
)
def test_parse_need_refuses_with_a_sentence(
    resource: str, count: str, selectors: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        parse_need(resource, count, selectors)


def test_parse_need() -> None:
    assert parse_need(MIG, "2", ["gpuworkspace.dev/pool=gpu"]) == Need(MIG, 2, POOL)
