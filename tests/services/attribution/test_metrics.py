"""The service's /metrics: counters for cost reports never go backwards; no duplicate series."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuworkspace_spawner.services.attribution.aggregate import AccountEntry
from gpuworkspace_spawner.services.attribution.collector import CycleStats
from gpuworkspace_spawner.services.attribution.metrics import AttributionMetrics
from gpuworkspace_spawner.services.attribution.model import Basis, WorkspaceFigures, WorkspacePod


def pod(name: str, user: str = "ana") -> WorkspacePod:
    return WorkspacePod(
        namespace="ns", pod=name, uid=name, user=user, server="w", profile="gpu", gpu_mode="exclusive",
        runtime="container", node="n1", gpu_resources={"nvidia.com/gpu": 1},
    )  # fmt: skip


def figures(p: WorkspacePod, util: float) -> WorkspaceFigures:
    return WorkspaceFigures(p, 1.0, 2**30, 1.0, util, 100.0, 200.0, Basis.MEASURED)


def entry(p: WorkspacePod, allocated: float) -> AccountEntry:
    return AccountEntry(
        p.key, p.user, p.server, allocated_gpu_seconds=allocated, used_gpu_seconds=allocated / 2
    )


def scrape(metrics: AttributionMetrics) -> dict[str, list[tuple[dict[str, str], float]]]:
    registry = CollectorRegistry()
    registry.register(metrics)
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def snapshot(at: float, live: list[tuple[WorkspacePod, float]], accounting: list[AccountEntry]) -> Any:
    return SimpleNamespace(
        at=at,
        attribution=SimpleNamespace(workspaces=tuple(figures(p, u) for p, u in live)),
        accounting={e.workspace: e for e in accounting},
    )


def test_allocated_seconds_never_decrease_when_a_pod_is_replaced() -> None:
    old, new = pod("jupyter-ana--w"), pod("jupyter-ana--w-2")
    snaps = [
        snapshot(100, [(old, 50)], [entry(old, 600)]),
        # the pod is replaced: both pods exist for a moment (same labels: one series, summed)
        snapshot(115, [(old, 50), (new, 10)], [entry(old, 615), entry(new, 15)]),
        # the old pod's entry is forgotten: the sum of live entries drops, the counter must not
        snapshot(4000, [(new, 10)], [entry(new, 3900)]),
    ]
    current: list[Any] = [snaps[0]]
    metrics = AttributionMetrics(lambda: current[0], CycleStats)
    seen = []
    for snap in snaps:
        current[0] = snap
        got = scrape(metrics)
        (labels, value), *rest = got["gpuworkspace_gpu_allocated_seconds_total"]
        assert not rest and labels == {
            "user": "ana",
            "server": "w",
            "profile": "gpu",
            "gpu_mode": "exclusive",
            "kind": "workspace",
        }
        seen.append(value)
        gauges = got["gpuworkspace_workspace_gpus_allocated"]
        assert len(gauges) == 1  # never two series with one label set
    assert seen == [600, 630, 4515]  # 615 + 15, then + (3900 - 15)
    util = scrape(metrics)["gpuworkspace_workspace_gpu_utilization_percent"]
    assert [v for _, v in util] == [10]
