"""Each workspace's last hour (the JupyterLab panel's series): one point per step, an hour kept."""

from __future__ import annotations

from dataclasses import replace

from gpuworkspace_spawner.services.attribution.model import Basis, WorkspaceFigures
from gpuworkspace_spawner.services.attribution.recent import RecentUsage, recent_json

from .conftest import ws

T0 = 1_750_000_020.0
ALICE = replace(ws("alice", "lab"), cpu_limit=4.0, memory_limit=16 * 2**30)


def figures(
    util: float | None, *, workspace: object = ALICE, basis: Basis = Basis.MEASURED
) -> WorkspaceFigures:
    return WorkspaceFigures(
        workspace=workspace,  # type: ignore[arg-type]
        cpu_cores=1.5,
        memory_bytes=2.0 * 2**30,
        gpus_allocated=1.0,
        gpu_util_percent=util,
        gpu_mem_used_mib=4096.0 if util is not None else None,
        power_w=None,
        basis=basis,
    )


def test_one_point_per_step_the_newest_value_wins_and_an_hour_is_kept() -> None:
    r = RecentUsage(window_s=3600, step_s=30)
    r.record(T0, [figures(10)])
    r.record(T0 + 5, [figures(20)])  # the same step: replaces
    for i in range(1, 200):
        r.record(T0 + 30 * i, [figures(30 + i % 50)])
    found = r.get("alice", "lab")
    assert found is not None
    assert found.points[-1][1] == 30 + 199 % 50
    assert found.points[0][0] >= T0 + 30 * 199 - 3600  # older than an hour: gone
    assert len(found.points) == 121
    assert (found.basis, found.gpu_mode, found.cpu_limit) == ("measured", "exclusive", 4.0)


def test_json_series_leave_unknown_values_out_and_honour_the_window() -> None:
    r = RecentUsage()
    r.record(T0, [figures(55)])
    r.record(T0 + 60, [figures(None, basis=Basis.ALLOCATION)])
    found = r.get("alice", "lab")
    assert found is not None
    body = recent_json(found, since=T0)
    assert body["basis"] == "allocation"  # the latest cycle's basis
    assert body["series"]["gpu_util_percent"] == [[T0, 55.0]]  # the unknown value is not a zero
    assert body["series"]["cpu_cores"] == [[T0, 1.5], [T0 + 60, 1.5]]
    assert body["limits"] == {"cpu_cores": 4.0, "memory_bytes": 16 * 2**30}
    assert recent_json(found, since=T0 + 30)["series"]["cpu_cores"] == [[T0 + 60, 1.5]]


def test_jobs_are_not_workspaces_and_gone_workspaces_expire() -> None:
    job = replace(ws("alice", "lab"), pod="alice-job-1", kind="job", job="alice-job")
    r = RecentUsage(window_s=600, step_s=30)
    r.record(T0, [figures(97, workspace=job)])
    assert r.get("alice", "lab") is None  # a job's pod never speaks for the workspace it came from
    r.record(T0 + 30, [figures(40)])
    r.record(T0 + 300, [])
    assert r.get("alice", "lab") is not None  # a missed cycle does not lose the hour
    r.record(T0 + 700, [])
    assert r.get("alice", "lab") is None and len(r) == 0
