"""The API's JSON: every GPU figure with basis and caveat; per-user picks from precomputed views."""

from __future__ import annotations

import json
import time

from gpuworkspace_spawner.services.attribution.aggregate import Accounting, group_totals, top_consumers
from gpuworkspace_spawner.services.attribution.model import Observation
from gpuworkspace_spawner.services.attribution.rules import attribute
from gpuworkspace_spawner.services.attribution.views import (
    build_views,
    cell_json,
    group_json,
    nodes_without_owners,
    server_from_path,
    top_json,
)

from .conftest import dev, node, ws

NOW = 1_750_000_000.0


def _result():
    alice, alice2 = ws("alice"), ws("alice", "big", resources={"nvidia.com/gpu.shared": 1})
    vm = ws("vera", resources={"nvidia.com/GH100": 1}, runtime="vm", pod="virt-launcher-vera")
    devices = (dev("0", alice, util=70.0), dev("6", alice2, util=30.0), dev("1", util=None))
    return attribute(Observation(now=NOW, nodes=(node(),), workspaces=(alice, alice2, vm), devices=devices))


def _gpu_figures(obj: object) -> list[dict]:
    """Every dict that carries a GPU utilisation figure."""
    found = []
    if isinstance(obj, dict):
        if "util_percent" in obj:
            found.append(obj)
        for v in obj.values():
            found.extend(_gpu_figures(v))
    elif isinstance(obj, list):
        for v in obj:
            found.extend(_gpu_figures(v))
    return found


def test_every_gpu_figure_has_basis_and_caveat() -> None:
    result = _result()
    acc = Accounting()
    acc.advance(result.workspaces, now=NOW, dt=15)
    views = build_views(result, {e.workspace: e for e in acc.entries()})
    payload = {"nodes": views.nodes, "workspaces": views.workspaces, "details": list(views.details.values())}
    figures = _gpu_figures(payload)
    assert len(figures) > 10
    for f in figures:
        assert "basis" in f and "caveat" in f, f
    json.dumps(payload)  # plain JSON


def test_views_pick_per_user_and_detail() -> None:
    views = build_views(_result())
    assert [w["server"] for w in views.workspaces_of("alice")] == ["", "big"]
    assert views.workspaces_of("nobody") == []
    detail = views.detail("alice", "~")
    assert detail is not None and views.detail("alice", "default") == detail
    (share,) = detail["shares"]
    assert (
        share["cell"] == "gpu-node-a/0"
        and share["basis"] == "measured"
        and share["device"]["basis"] == "measured"
    )
    shared = views.detail("alice", "big")
    assert shared is not None and shared["gpu"]["basis"] == "shared"
    assert "no per-process data" in shared["gpu"]["caveat"]
    assert views.detail("alice", "nope") is None
    vm = views.detail("vera", "")
    assert vm is not None and vm["gpu"]["basis"] == "allocation" and vm["gpu"]["util_percent"] is None
    assert server_from_path("~") == "" and server_from_path("x") == "x"


def test_node_and_cell_json() -> None:
    result = _result()
    (n,) = build_views(result).nodes
    assert n["name"] == "gpu-node-a" and n["gpu_totals"]["total"] == 4
    cells = {c["gpu"]: c for c in n["gpus"]}
    assert set(cells) == {"0", "1", "6", "pt-0"}
    assert cells["1"]["free"] and cells["1"]["color"] == "#9e9e9e"
    assert cells["pt-0"]["basis"] == "allocation" and "passed through" in cells["pt-0"]["caveat"]
    assert cells["0"]["owners"][0]["user"] == "alice"
    (anon,) = nodes_without_owners([n])
    assert all(c["owners"] == [] for c in anon["gpus"])
    assert {c["gpu"]: c["owner_count"] for c in anon["gpus"]}["0"] == 1
    assert cell_json(result.cells[0])["node"] == "gpu-node-a"


def test_top_and_groups_json() -> None:
    result = _result()
    rows = top_json(top_consumers(result.workspaces, "gpu_util", 5), "gpu_util")
    assert [(r["rank"], r["user"], r["value"], r["basis"]) for r in rows] == [
        (1, "alice", 70.0, "measured"),
        (2, "alice", 30.0, "shared"),
    ]
    g = group_json(group_totals(result.workspaces, {"alice": ["ml"]})["ml"])
    assert g["workspaces"] == 2 and "basis" in g and "caveat" in g


def test_a_full_cluster_cycle_renders_quickly() -> None:
    """64 nodes x 8 GPUs and 2,000 workspaces: attribution and views well within a cycle."""
    nodes, workspaces, devices = [], [], []
    for n in range(64):
        name = f"n{n:02d}"
        nodes.append(node(name))
        for g in range(8):
            holders = [
                ws(f"u{n}-{g}-{k}", node=name, resources={"nvidia.com/gpu.shared": 1}) for k in range(4)
            ]
            workspaces.extend(holders)
            devices.append(dev(str(g), holders[-1], node=name, util=float(g * 10)))
    workspaces = workspaces[:2000]
    obs = Observation(now=NOW, nodes=tuple(nodes), workspaces=tuple(workspaces), devices=tuple(devices))
    started = time.perf_counter()
    views = build_views(attribute(obs))
    elapsed = time.perf_counter() - started
    assert len(views.workspaces) == 2000 and len(views.nodes) == 64
    assert elapsed < 5.0, elapsed
    started = time.perf_counter()
    for i in range(1000):
        views.workspaces_of(f"u{i % 64}-0-0")
        views.detail(f"u{i % 64}-0-0", "~")
    assert time.perf_counter() - started < 0.05  # per-request picks are lookups
