"""P4's pure parts (``tests/benchmarks/bench_concurrent_spawn.py``): fake bursts in, figures, table and rows
out; no hub, no devcluster, no timing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.benchmarks import bench_concurrent_spawn as p4
from tests.benchmarks.bench_concurrent_spawn import Burst, Spawn


def burst(spawner: str, times: list[float], failures: tuple[str, ...] = (), verbs: str = "") -> Burst:
    spawns = [Spawn(f"u{i}", t) for i, t in enumerate(times)]
    spawns += [Spawn(f"f{i}", None, why) for i, why in enumerate(failures)]
    return Burst(spawner, spawns, [{"verb": v} for v in verbs.split()])


KS = burst("kubespawner", [float(t) for t in range(1, 21)], verbs="create create get list watch")
OURS = burst(
    "gpuworkspace",
    [float(t) for t in range(2, 22)],
    failures=("POST answered 429: too many", "Spawn failed: timeout", "Spawn failed: timeout"),
    verbs="create get patch deletecollection",
)


def test_summary_percentiles_exclude_failures() -> None:
    s = p4.summarize(OURS)
    assert (s.n, s.failures, s.requests) == (23, 3, 4)
    assert s.p50 == 11.5  # the median of 2..21
    assert s.p95 == 20.0  # nearest rank of 20 values: index round(0.95 * 19) = 18
    assert s.max == 21.0


def test_summary_of_a_burst_with_nothing_ready_is_unknown_not_zero() -> None:
    s = p4.summarize(burst("gpuworkspace", [], failures=("x",)))
    assert math.isnan(s.p50) and math.isnan(s.p95) and math.isnan(s.max)
    assert s.failures == 1


def test_reasons_are_counted_most_frequent_first() -> None:
    assert p4.reasons(OURS) == ["2 x Spawn failed: timeout", "1 x POST answered 429: too many"]


def test_table_has_a_row_per_spawner_with_verbs_and_failure_reasons() -> None:
    lines = p4.table(
        [KS, OURS, Burst("gpuworkspace", error="RuntimeError: the hub did not start")]
    ).splitlines()
    assert lines[0].split() == ["spawner", "n", "p50", "p95", "max", "failed", "requests", *p4.VERBS]
    assert lines[2].split() == [
        "KubeSpawner",
        "20",
        "10.50s",
        "19.00s",
        "20.00s",
        "0",
        "5",
        "1",
        "1",
        "1",
        "2",
        "0",
        "0",
        "0",
    ]
    # deletecollection is not one of the columns: counted in the total only
    assert lines[3].split()[-10:] == ["21.00s", "3", "4", "1", "0", "0", "1", "1", "0", "0"]
    assert lines[4] == "    failed: 2 x Spawn failed: timeout"
    assert "RuntimeError: the hub did not start" in lines[6]


def test_ratios_judge_p95_and_failures() -> None:
    text = p4.ratios({"kubespawner": KS, "gpuworkspace": OURS})
    assert "p95 time to ready   x1.05" in text
    assert "NOT met" in text  # within 1.10 but 3 failures
    clean = burst("gpuworkspace", [float(t) for t in range(2, 22)])
    assert "(goal <= 1.10 and 0 failures: met)" in p4.ratios({"kubespawner": KS, "gpuworkspace": clean})
    assert p4.ratios({"kubespawner": KS}).startswith("ratios: need both")


def test_headline_rows_for_make_bench() -> None:
    rows = p4.headline({"kubespawner": KS, "gpuworkspace": OURS})
    assert [r.benchmark for r in rows] == [p4.NAME] * 5
    p95 = rows[0]
    assert (p95.figure, p95.ours, p95.peer, p95.unit) == (
        "p95 time to ready, 23 spawns at once",
        20.0,
        19.0,
        "s",
    )
    assert (p95.goal, p95.met) == ("<= 1.10x peer", True)
    failed = rows[3]
    assert (failed.ours, failed.peer, failed.met) == (3.0, 0.0, False)
    assert rows[4].ours == 4.0 and rows[4].peer == 5.0
    assert "KubeSpawner" in p95.peer_name
    assert p4.headline({"gpuworkspace": OURS}) == []


def test_catalog_and_kubespawner_profile_are_the_same_lite_workspace(tmp_path: Path) -> None:
    directory = p4.write_catalog(tmp_path / "catalog")
    profile = json.loads((directory / "profile.yaml").read_text())["spec"]
    pools = json.loads((directory / "catalog.yaml").read_text())["spec"]["nodePools"]
    override = p4.kubespawner_profile()["kubespawner_override"]
    assert profile["image"] == override["image"] == p4.LITE_IMAGE
    assert p4.LITE_IMAGE.startswith("gpuworkspace.dev/lite-singleuser@sha256:")
    assert pools[profile["placement"]["nodePool"]]["nodeSelector"] == override["node_selector"]
    assert profile["storage"]["home"]["size"] == override["storage_capacity"]


@pytest.mark.parametrize("spawner", ["kubespawner", "gpuworkspace"])
def test_extra_config_lifts_the_hub_limits_to_the_burst(spawner: str) -> None:
    config = p4.extra_config(spawner, 250)
    assert "c.JupyterHub.concurrent_spawn_limit = 250\n" in config
    assert "c.JupyterHub.active_server_limit = 250\n" in config
    assert "c.JupyterHub.api_page_max_limit = 260\n" in config
    # only KubeSpawner gets a profile_list: ours (a subclass) would otherwise inherit it
    assert ("c.KubeSpawner.profile_list" in config) == (spawner == "kubespawner")
    compile(config, "extra_config", "exec")


def test_requests_by_kind_counts_per_spawn() -> None:
    b = Burst("gpuworkspace", [Spawn("a", 1.0), Spawn("b", 2.0)])
    b.requests = [{"verb": "list", "resource": "pods"}] * 3 + [{"verb": "create", "resource": "pods"}]
    lines = p4.requests_by_kind(b).splitlines()
    assert lines[0] == "requests during the burst, GPUWorkspaceSpawner (ours) (count, per spawn):"
    assert lines[1].split() == ["3", "1.50", "list", "pods"]
    assert lines[2].split() == ["1", "0.50", "create", "pods"]
