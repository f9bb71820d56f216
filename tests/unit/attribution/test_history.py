"""The trends ring buffer and the series one cycle records."""

from __future__ import annotations

import itertools

import pytest

from gpuworkspace_spawner.services.attribution.history import History, series_of
from gpuworkspace_spawner.services.attribution.model import Observation
from gpuworkspace_spawner.services.attribution.rules import attribute

from .conftest import dev, node, ws

T0 = 1_750_000_020.0


def test_one_point_per_step_and_a_bounded_window() -> None:
    h = History(capacity=3, step_s=60)
    h.record(T0, {"cluster:gpu_util": 10})
    h.record(T0 + 15, {"cluster:gpu_util": 20})  # same step: replaces
    for i in range(1, 5):
        h.record(T0 + 60 * i, {"cluster:gpu_util": 30 + i})
    assert h.window("cluster:gpu_util", 0) == [(T0 + 120, 32), (T0 + 180, 33), (T0 + 240, 34)]
    assert h.window("cluster:gpu_util", T0 + 150, T0 + 200) == [(T0 + 180, 33)]
    assert h.window("nope", 0) == []
    h.record(T0 + 100, {"cluster:gpu_util": 1})  # back in time: ignored
    assert h.window("cluster:gpu_util", 0)[-1] == (T0 + 240, 34)


def test_series_of_gone_users_expire_and_the_count_is_capped() -> None:
    h = History(capacity=10, step_s=60, max_series=3)
    h.record(T0, {"user:old:gpus": 1, "cluster:gpus_allocated": 1})
    h.record(T0 + 601, {"cluster:gpus_allocated": 2})
    assert h.names() == ["cluster:gpus_allocated"]  # not recorded for a whole window: dropped
    h.record(T0 + 660, {"user:a:gpus": 1, "user:b:gpus": 1, "node:n:gpu_util": 3})
    assert len(h) == 3
    assert (
        h.names("user:") == ["user:a:gpus"]
        or h.names("user:") == ["user:b:gpus"]
        or len(h.names("user:")) == 1
    )
    assert "cluster:gpus_allocated" in h.names() and "node:n:gpu_util" in h.names()
    with pytest.raises(ValueError):
        History(capacity=0)


def test_series_of_a_cycle() -> None:
    a, b = ws("a"), ws("b", resources={"nvidia.com/GH100": 1}, runtime="vm", pod="virt-launcher-b")
    result = attribute(
        Observation(
            now=T0,
            nodes=(node(),),
            workspaces=(a, b),
            devices=(dev("0", a, util=60.0, power=400.0), dev("1", util=20.0, power=100.0)),
        )
    )
    s = series_of(result.cells, result.workspaces)
    assert s["cluster:gpu_util"] == 40.0
    assert s["cluster:gpus_allocated"] == 2.0
    assert s["cluster:gpus_busy"] == 0.6
    assert s["cluster:power_w"] == 500.0
    assert s["user:a:gpu_util"] == 60.0 and s["user:a:gpus"] == 1.0
    assert "user:b:gpu_util" not in s and s["user:b:gpus"] == 1.0  # passthrough: use unknown
    assert s["node:gpu-node-a:gpu_util"] == 40.0 and s["node:gpu-node-a:gpus_allocated"] == 2.0


def test_a_full_day_is_bounded_and_user_series_are_coarser() -> None:
    h = History(capacity=1440, step_s=60)
    for k in range(3000):  # two days and more of cycles, one a minute
        h.record(T0 + 60 * k, {"cluster:gpu_util": k % 100, "user:a:gpus": 1.5})
    cluster, user = h.window("cluster:gpu_util", 0), h.window("user:a:gpus", 0)
    assert len(cluster) == 1440 and cluster[-1] == (T0 + 60 * 2999, 2999 % 100)
    spacing = {b[0] - a[0] for a, b in itertools.pairwise(user[:-1])}  # the last: still filling
    assert len(user) == 144 and spacing == {600}
    assert user[-1][1] == 1.5 and user[-1][0] >= T0 + 60 * 2999 - 600
