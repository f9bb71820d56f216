"""A node's GPU trend from Prometheus, whichever label names the node: dcgm-exporter 4.5.x writes
``Hostname``, its main branch (after 4.5.3) ``hostname``, and a relabelled scrape ``node``."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.services.attribution.handlers import prometheus_trend
from gpuworkspace_spawner.services.attribution.parsing import NODE_LABELS


class FakePrometheus:
    """Answers a range query as Prometheus would for ``avg by (<labels>)``: one series per label set."""

    def __init__(self, series: list[dict[str, str]]) -> None:
        self.series, self.queries = series, []  # type: ignore[var-annotated]

    async def query_range(self, promql: str, since: float, until: float, step: float) -> dict[str, Any]:
        self.queries.append(promql)
        grouped = promql.split("by (", 1)[1].split(")", 1)[0].replace(" ", "").split(",")
        result = [
            {"metric": {k: v for k, v in s.items() if k in grouped}, "values": [[since, str(10 * (i + 1))]]}
            for i, s in enumerate(self.series)
        ]
        return {"status": "success", "data": {"resultType": "matrix", "result": result}}


@pytest.mark.parametrize(
    ("label", "node"),
    [("Hostname", "gpu-node-b"), ("hostname", "gpu-node-b"), ("node", "gpu-node-b")],
)
async def test_a_nodes_trend_is_found_by_any_node_label(label: str, node: str) -> None:
    prom = FakePrometheus([{label: "gpu-node-a", "gpu": "0"}, {label: node, "gpu": "0"}])
    points = await prometheus_trend(prom, f"node:{node}:gpu_util", 0.0, 600.0)  # type: ignore[arg-type]
    assert points == [(0.0, 20.0)], (label, prom.queries)
    assert all(name in prom.queries[0] for name in NODE_LABELS)
