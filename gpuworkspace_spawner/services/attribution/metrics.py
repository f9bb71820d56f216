"""The service's own ``/metrics``: per-workspace gauges, allocation-vs-use counters, the collector's health.

Label sets are bounded by the running workspaces (``user``, ``server``, ``profile``, ``gpu_mode``,
``node``, ``kind``); a workspace's series go away with it (its counters an hour later, with its accounting).
``kind`` is ``workspace``, or ``job`` for the pods of a job the user submitted (``profile`` is then the job
profile): a job's GPU use is its user's, never their workspace's.
The counters are what cost reports need: GPU-seconds allocated, GPU-seconds actually used (allocated x
utilisation, only where utilisation is known) and GPU-seconds allocated while idle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .model import WorkspaceFigures

if TYPE_CHECKING:
    from .collector import CycleStats, Snapshot

MIB = 1024 * 1024
WORKSPACE_LABELS = ["user", "server", "profile", "gpu_mode", "node", "kind"]
ACCOUNT_LABELS = ["user", "server", "profile", "gpu_mode", "kind"]

_GAUGES: tuple[tuple[str, str, Callable[[WorkspaceFigures], float | None]], ...] = (
    (
        "gpuworkspace_workspace_gpu_utilization_percent",
        "GPU utilisation of a workspace (mean over its GPUs; basis in the API)",
        lambda f: f.gpu_util_percent,
    ),
    (
        "gpuworkspace_workspace_gpu_memory_used_bytes",
        "GPU memory used by a workspace",
        lambda f: None if f.gpu_mem_used_mib is None else f.gpu_mem_used_mib * MIB,
    ),
    ("gpuworkspace_workspace_gpu_power_watts", "GPU power attributed to a workspace", lambda f: f.power_w),
    ("gpuworkspace_workspace_cpu_cores", "CPU cores a workspace uses (rate)", lambda f: f.cpu_cores),
    (
        "gpuworkspace_workspace_memory_working_set_bytes",
        "Memory working set of a workspace",
        lambda f: f.memory_bytes,
    ),
    (
        "gpuworkspace_workspace_gpus_allocated",
        "GPUs a workspace holds (a MIG instance or time-slice counts as a fraction of a card)",
        lambda f: f.gpus_allocated,
    ),
    (
        "gpuworkspace_workspace_gpu_idle",
        "1 when a workspace holds a GPU whose known utilisation is under the idle threshold",
        lambda f: 1.0 if f.gpu_idle else 0.0,
    ),
)
_COUNTERS = (
    ("gpuworkspace_gpu_allocated_seconds", "GPU-seconds allocated to a workspace", "allocated_gpu_seconds"),
    ("gpuworkspace_gpu_used_seconds", "GPU-seconds used (allocated x utilisation)", "used_gpu_seconds"),
    (
        "gpuworkspace_gpu_idle_allocated_seconds",
        "GPU-seconds allocated while the workspace's GPU was idle",
        "idle_allocated_gpu_seconds",
    ),
)


_NOT_ADDITIVE = {"gpuworkspace_workspace_gpu_utilization_percent", "gpuworkspace_workspace_gpu_idle"}


def _labels(f: WorkspaceFigures) -> list[str]:
    w = f.workspace
    return [w.user, w.server, w.profile, w.gpu_mode, w.node or "", w.kind]


class AttributionMetrics(Collector):
    """Reads the collector's latest snapshot and cycle statistics at each scrape."""

    def __init__(
        self,
        snapshot: Callable[[], Snapshot | None],
        stats: Callable[[], CycleStats],
        *,
        forget_after_s: float = 3600.0,
    ) -> None:
        self.snapshot, self.stats = snapshot, stats
        self.forget_after_s = forget_after_s
        # Counters per label set only ever grow: each workspace adds what its entry grew by since the
        # last scrape, so a workspace that ends (or a replacement pod) never makes a sum go backwards.
        self._seen: dict[str, tuple[float, float, float]] = {}  # workspace → its entry's last values
        self._labels: dict[str, tuple[str, str, str, str, str]] = {}  # workspace → label set
        self._totals: dict[
            tuple[str, str, str, str, str], list[float]
        ] = {}  # label set → 3 totals + last growth

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot()
        if snap is not None:
            yield from self._workspaces(snap)
            yield from self._accounting(snap)
        yield from self._health(self.stats())

    def _workspaces(self, snap: Snapshot) -> Iterator[Metric]:
        for name, doc, value in _GAUGES:
            family = GaugeMetricFamily(name, doc, labels=WORKSPACE_LABELS)
            # two pods of one workspace on one node (a terminating pod and its replacement) share a label
            # set: one series each, summed (utilisation and the idle flag: the larger)
            merged: dict[tuple[str, ...], float] = {}
            for f in snap.attribution.workspaces:
                v = value(f)
                if v is None:
                    continue
                key = tuple(_labels(f))
                if key in merged:
                    v = max(merged[key], v) if name in _NOT_ADDITIVE else merged[key] + v
                merged[key] = v
            for key, v in merged.items():
                family.add_metric(list(key), v)
            yield family

    def _accounting(self, snap: Snapshot) -> Iterator[Metric]:
        now = snap.at
        for f in snap.attribution.workspaces:
            w = f.workspace
            self._labels[w.key] = (w.user, w.server, w.profile, w.gpu_mode, w.kind)
        for key, entry in snap.accounting.items():
            labels = self._labels.get(key)
            if labels is None:
                continue
            current = (entry.allocated_gpu_seconds, entry.used_gpu_seconds, entry.idle_allocated_gpu_seconds)
            last = self._seen.get(key, (0.0, 0.0, 0.0))
            if any(c < p for c, p in zip(current, last, strict=True)):
                last = (0.0, 0.0, 0.0)  # the entry started again (forgotten, then seen anew)
            grew = [c - p for c, p in zip(current, last, strict=True)]
            total = self._totals.setdefault(labels, [0.0, 0.0, 0.0, now])
            for i, g in enumerate(grew):
                total[i] += g
            if any(grew):
                total[3] = now
            self._seen[key] = current
        live = set(snap.accounting)
        self._seen = {k: v for k, v in self._seen.items() if k in live}
        self._labels = {k: v for k, v in self._labels.items() if k in live}
        self._totals = {k: t for k, t in self._totals.items() if now - t[3] <= self.forget_after_s}
        for i, (name, doc, _attr) in enumerate(_COUNTERS):
            family = CounterMetricFamily(name, doc, labels=ACCOUNT_LABELS)
            for labels, total in sorted(self._totals.items()):
                family.add_metric(list(labels), total[i])
            yield family

    def _health(self, stats: CycleStats) -> Iterator[Metric]:
        duration = GaugeMetricFamily(
            "gpuworkspace_attribution_cycle_duration_seconds", "Wall time of the last collector cycle"
        )
        duration.add_metric([], stats.last_duration_s)
        cpu = GaugeMetricFamily(
            "gpuworkspace_attribution_cycle_cpu_seconds", "Process CPU time during the last collector cycle"
        )
        cpu.add_metric([], stats.last_cpu_s)
        cycles = CounterMetricFamily("gpuworkspace_attribution_cycles", "Collector cycles run")
        cycles.add_metric([], stats.cycles)
        cpu_total = CounterMetricFamily(
            "gpuworkspace_attribution_cpu_seconds", "Process CPU time spent in collector cycles"
        )
        cpu_total.add_metric([], stats.cpu_total_s)
        failing = GaugeMetricFamily(
            "gpuworkspace_attribution_source_failures",
            "Sources that failed in the last cycle, by kind (dcgm, kubelet, agent, kubernetes, prometheus)",
            labels=["source"],
        )
        for kind, n in sorted(stats.last_failures.items()):
            failing.add_metric([kind], n)
        failures_total = CounterMetricFamily(
            "gpuworkspace_attribution_source_errors",
            "Source failures since start, by kind",
            labels=["source"],
        )
        for kind, n in sorted(stats.failures_total.items()):
            failures_total.add_metric([kind], n)
        age = GaugeMetricFamily(
            "gpuworkspace_attribution_last_cycle_timestamp_seconds", "When the last cycle finished (epoch)"
        )
        age.add_metric([], stats.last_at)
        yield from (duration, cpu, cycles, cpu_total, failing, failures_total, age)
