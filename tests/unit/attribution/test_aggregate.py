"""Node summaries, top consumers, group totals and the allocation-vs-use accounting."""

from __future__ import annotations

import pytest

from gpuworkspace_spawner.services.attribution.aggregate import Accounting, group_totals, top_consumers
from gpuworkspace_spawner.services.attribution.model import ContainerUsage, Observation
from gpuworkspace_spawner.services.attribution.rules import attribute

from .conftest import NODE, dev, node, ws

NOW = 1_750_000_000.0


def _cluster():
    alice = ws("alice")
    bob = ws("bob", resources={"nvidia.com/mig-1g.10gb": 1})
    sharers = [ws(u, resources={"nvidia.com/gpu.shared": 1}) for u in ("c1", "c2")]
    vm = ws("vera", resources={"nvidia.com/GH100_H100_SXM5_80GB": 1}, runtime="vm", pod="virt-launcher-vera")
    idle = ws("ivan")
    devices = [
        dev("0", alice, util=80.0, power=500.0),
        dev("1", idle, util=1.0, power=80.0),
        dev("2", util=0.0, xid=79, power=70.0),
        dev("6", sharers[1], util=40.0, power=200.0),
        *(
            dev("7", *([bob] if i == 7 else []), mig=str(i), profile="1g.10gb", util=50.0 if i == 7 else 0.0)
            for i in range(7, 14)
        ),
    ]
    info = node(
        allocatable={
            "cpu": 127.5,
            "memory": 1020 * 2**30,
            "nvidia.com/gpu": 5,
            "nvidia.com/gpu.shared": 4,
            "nvidia.com/mig-1g.10gb": 7,
            "nvidia.com/GH100_H100_SXM5_80GB": 1,
        },
        taints=["nvidia.com/gpu=present:NoSchedule", "node.kubernetes.io/out-of-service:NoExecute"],
        ready=False,
    )
    workspaces = [alice, bob, *sharers, vm, idle]
    usage = [ContainerUsage(w.namespace, w.pod, 1.0, 2e9) for w in workspaces]
    obs = Observation(
        now=NOW,
        nodes=(info, node("cpu-node-a", allocatable={"cpu": 31.5})),
        workspaces=tuple(workspaces),
        devices=tuple(devices),
        usage=tuple(usage),
    )
    return attribute(obs)


def test_node_summary() -> None:
    result = _cluster()
    cpu, gpu = result.nodes  # by name
    assert (gpu.name, cpu.name) == (NODE, "cpu-node-a")
    assert gpu.gpus_total == 6  # cards 0, 1, 2, 6, 7 and one passthrough-only card
    # alice 1 + ivan 1 + bob 1/7 + two sharers 1/2 each + the VM's card
    assert gpu.gpus_allocated == pytest.approx(4 + 1 / 7)
    assert gpu.gpus_free == pytest.approx(6 - 4 - 1 / 7)
    assert gpu.free_by_resource == {
        "nvidia.com/GH100_H100_SXM5_80GB": 0,
        "nvidia.com/gpu": 3,
        "nvidia.com/gpu.shared": 2,
        "nvidia.com/mig-1g.10gb": 6,
    }
    assert gpu.abnormal == ("NotReady", "tainted node.kubernetes.io/out-of-service", "XID 79 on GPU 2")
    assert gpu.cpu_requested == 12.0 and gpu.cpu_used == 6.0 and gpu.memory_used == 12e9
    assert gpu.power_w == pytest.approx(500 + 80 + 70 + 200 + 300)  # the MIG card's power counted once
    assert (cpu.gpus_total, cpu.abnormal, cpu.cpu_used) == (0, (), None)


def test_top_consumers() -> None:
    figures = _cluster().workspaces
    assert [(f.workspace.user, v) for f, v in top_consumers(figures, "gpu_util", 3)] == [
        ("alice", 80.0),
        ("bob", 50.0),
        ("c1", 40.0),
    ]
    by_gpu = top_consumers(figures, "gpu", 10)
    assert [f.workspace.user for f, _ in by_gpu][:3] == ["alice", "ivan", "vera"]
    assert "vera" not in [
        f.workspace.user for f, _ in top_consumers(figures, "power", 10)
    ]  # unknown: left out
    assert top_consumers(figures, "cpu", 0) == []
    with pytest.raises(ValueError, match="unknown ranking"):
        top_consumers(figures, "disk")


def test_group_totals() -> None:
    figures = _cluster().workspaces
    totals = group_totals(
        figures, {"alice": ["ml", "all"], "ivan": ["ml"], "c1": ["all"], "nobody": ["empty"]}
    )
    assert list(totals) == ["all", "ml"]
    ml = totals["ml"]
    assert (ml.users, ml.workspaces, ml.gpus_allocated, ml.gpus_idle, ml.cpu_cores) == (
        ("alice", "ivan"),
        2,
        2.0,
        1.0,
        2.0,
    )
    assert ml.gpus_busy == pytest.approx(0.8 + 0.01)
    assert totals["all"].gpus_allocated == pytest.approx(1.5)


def test_accounting_advances_and_forgets() -> None:
    figures = _cluster().workspaces
    acc = Accounting(forget_after_s=3600)
    acc.advance(figures, now=NOW, dt=0)
    acc.advance(figures, now=NOW + 60, dt=60)
    alice, ivan, vera = (acc.get(ws(u).key) for u in ("alice", "ivan", "vera"))
    assert alice is not None and ivan is not None
    assert (alice.allocated_gpu_seconds, alice.used_gpu_seconds, alice.idle_allocated_gpu_seconds) == (
        60.0,
        48.0,
        0.0,
    )
    assert ivan.idle_allocated_gpu_seconds == 60.0
    assert acc.get("gpu-workspaces/virt-launcher-vera") is not None
    assert acc.get("gpu-workspaces/virt-launcher-vera").unknown_gpu_seconds == 60.0  # type: ignore[union-attr]
    assert vera is None  # (ws("vera") names another pod)
    only_alice = [f for f in figures if f.workspace.user == "alice"]
    acc.advance(only_alice, now=NOW + 60 + 3600, dt=15)
    assert len(acc) == 6  # gone for exactly an hour: still kept
    acc.advance(only_alice, now=NOW + 60 + 3601, dt=1)
    assert [e.user for e in acc.entries()] == ["alice"]
    assert acc.entries()[0].allocated_gpu_seconds == 76.0
