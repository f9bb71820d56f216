"""The disk reclaimer's own ``/metrics``: its passes, their failures, and the disks it deletes or keeps.

``gpuworkspace-reclaimer --metrics-listen :9502`` serves them (off by default). The alerts of
``helm-values/monitoring/`` read them: a pass that ends with a Kubernetes error
(``gpuworkspace_reclaimer_pass_failures_total``), no successful pass for hours
(``gpuworkspace_reclaimer_last_success_timestamp_seconds``) and retained disks past their
``retain-until`` that are still there (``gpuworkspace_reclaimer_overdue_disks``). Counters start at 0
when the process starts; the gauges describe the last successful pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from tornado import web

from .serving import metrics_app, metrics_registry

__all__ = ["ReclaimStats", "ReclaimerMetrics", "count_overdue", "make_metrics_app"]


class _Outcome(Protocol):
    @property
    def action(self) -> str: ...
    @property
    def retain_until(self) -> datetime | None: ...


def count_overdue(outcomes: Sequence[_Outcome], now: datetime) -> int:
    """Disks the pass did not delete although their retention had ended (in use, changed, or unclear)."""
    return sum(
        1
        for o in outcomes
        if o.action in ("kept", "changed") and o.retain_until is not None and o.retain_until <= now
    )


@dataclass
class ReclaimStats:
    """What the reclaimer has done since it started (mutated only by the reclaim loop)."""

    passes: int = 0
    pass_failures: int = 0
    deleted: int = 0
    retained: int = 0
    overdue: int = 0
    last_success: float = 0.0  # Unix time of the last pass that finished; 0 before the first

    def record_pass(self, outcomes: Sequence[_Outcome], now: datetime) -> None:
        self.passes += 1
        self.deleted += sum(1 for o in outcomes if o.action == "deleted")
        self.retained = sum(1 for o in outcomes if o.action != "deleted")
        self.overdue = count_overdue(outcomes, now)
        self.last_success = now.timestamp()

    def record_failure(self) -> None:
        self.passes += 1
        self.pass_failures += 1


class ReclaimerMetrics(Collector):
    """``gpuworkspace_reclaimer_*`` from a :class:`ReclaimStats`."""

    def __init__(self, stats: ReclaimStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self.stats
        counters: tuple[tuple[str, str, float], ...] = (
            ("gpuworkspace_reclaimer_passes", "Reclaim passes run (successful or not)", s.passes),
            (
                "gpuworkspace_reclaimer_pass_failures",
                "Reclaim passes that ended with a Kubernetes error (retried after a pause)",
                s.pass_failures,
            ),
            (
                "gpuworkspace_reclaimer_disks_deleted",
                "Retained disks deleted at the end of retention",
                s.deleted,
            ),
        )
        for name, doc, value in counters:
            counter = CounterMetricFamily(name, doc)
            counter.add_metric([], value)
            yield counter
        gauges: tuple[tuple[str, str, float], ...] = (
            ("gpuworkspace_reclaimer_retained_disks", "Retained disks the last pass kept", s.retained),
            (
                "gpuworkspace_reclaimer_overdue_disks",
                "Retained disks past their retain-until that the last pass did not delete",
                s.overdue,
            ),
            (
                "gpuworkspace_reclaimer_last_success_timestamp_seconds",
                "When the last successful pass finished (Unix time; 0 before the first)",
                s.last_success,
            ),
        )
        for name, doc, value in gauges:
            gauge = GaugeMetricFamily(name, doc)
            gauge.add_metric([], value)
            yield gauge


def make_metrics_app(stats: ReclaimStats) -> web.Application:
    """``GET /metrics`` (the Prometheus text format) and nothing else."""
    return metrics_app(metrics_registry(ReclaimerMetrics(stats)))
