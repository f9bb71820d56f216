"""Kueue's own Prometheus metrics, as its controller manager serves them, for the devcluster's Kueue.

What the product's dashboards and alerts read about jobs waiting and being admitted comes from Kueue
itself, never from a copy of ours. The families, names, label sets and buckets are Kueue v0.19.2's
(``pkg/metrics/metrics.go``), for the metrics the simulation can honestly produce:

- ``kueue_pending_workloads{cluster_queue,status,replica_role}`` (gauge, ``ReportPendingWorkloads``): the
  ClusterQueue's workloads without quota, ``active`` (not tried yet) or ``inadmissible`` (an admission
  attempt failed: their QuotaReserved condition is False);
- ``kueue_admitted_active_workloads{cluster_queue,replica_role}`` (gauge): admitted and not finished;
- ``kueue_admitted_workloads_total{cluster_queue,priority_class,replica_role}`` (counter) and
  ``kueue_admission_wait_time_seconds{cluster_queue,priority_class,replica_role}`` (histogram, buckets
  ``generateExponentialBuckets(16)`` = 1, then 2.5·2^k): both from ``AdmittedWorkload``, at each
  admission, the wait measured from the workload's creation or its last requeue;
- ``kueue_evicted_workloads_total{cluster_queue,reason,underlying_cause,priority_class,replica_role}``
  (counter, ``ReportEvictedWorkloads``): here only ``reason="Preempted"``, the one eviction simulated.

``replica_role`` is ``standalone`` (one controller manager, no leader election). The gauges are computed
at each scrape from the API's objects; the counters and the histogram count what this process saw since
it started, as a restarted controller manager does. Real Kueue serves them on
``kueue-system/kueue-controller-manager-metrics-service:8443`` over HTTPS with authentication; the devcluster
serves plain HTTP on loopback (:mod:`.kueue` publishes the Service and its EndpointSlice).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ..resources import ResourceType
from ..store import Obj
from ..verbs import Verbs
from .base import rt_of
from .resourcemetrics import ensure_object

ROLE = "standalone"
NAMESPACE, SERVICE, PORT_NAME = "kueue-system", "kueue-controller-manager-metrics-service", "https"
SERVICE_PORT = 8443
_NAMESPACES, _SERVICES = rt_of("", "namespaces"), rt_of("", "services")
_SLICES = rt_of("discovery.k8s.io", "endpointslices")
PENDING_ACTIVE, PENDING_INADMISSIBLE = "active", "inadmissible"


def exponential_buckets(count: int) -> list[float]:
    """Kueue's ``generateExponentialBuckets``: 1, then ``count - 1`` buckets from 2.5 doubling."""
    return [1.0, *(2.5 * 2**i for i in range(count - 1))]


def _condition(wl: Obj, kind: str) -> Obj | None:
    return next((c for c in (wl.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _stamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def wait_started(wl: Obj) -> float | None:
    """When the workload's current wait began: its last requeue, else its creation (epoch seconds)."""
    requeued = _condition(wl, "Requeued")
    if requeued is not None and requeued.get("status") == "True":
        at = _stamp(requeued.get("lastTransitionTime"))
        if at is not None:
            return at
    return _stamp((wl.get("metadata") or {}).get("creationTimestamp"))


def priority_class(wl: Obj) -> str:
    return str(((wl.get("spec") or {}).get("priorityClassRef") or {}).get("name") or "")


def queue_counts(workloads: Iterable[tuple[str, Obj]]) -> dict[str, tuple[int, int, int]]:
    """Per ClusterQueue: (pending active, pending inadmissible, admitted active) from ``(queue, workload)``
    pairs of live (unfinished) workloads."""
    counts: dict[str, list[int]] = {}
    for queue, wl in workloads:
        row = counts.setdefault(queue, [0, 0, 0])
        admitted = _condition(wl, "Admitted")
        reserved = _condition(wl, "QuotaReserved")
        if admitted is not None and admitted.get("status") == "True":
            row[2] += 1
        elif reserved is not None and reserved.get("status") == "False":
            row[1] += 1  # an admission attempt failed
        else:
            row[0] += 1
    return {q: (a, i, r) for q, (a, i, r) in counts.items()}


class KueueMetrics(Collector):
    """What the devcluster's Kueue reports (``admitted``, ``evicted``) and the gauges read at each scrape;
    ``render()`` is the ``/metrics`` body. Counters are kept here rather than in prometheus_client's own
    classes, which would add ``*_created`` series that Kueue (Go's client) does not serve."""

    def __init__(self, live: Callable[[], Iterable[tuple[str, Obj]]]) -> None:
        self.live = live
        self.buckets = exponential_buckets(16)
        self._admitted: dict[tuple[str, str], int] = {}  # (cluster_queue, priority_class) -> count
        self._waits: dict[tuple[str, str], list[float]] = {}  # the same keys -> [per-bucket counts..., sum]
        self._evicted: dict[tuple[str, str, str], int] = {}  # (cluster_queue, reason, priority_class)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def admitted(self, cluster_queue: str, wl: Obj, now: float) -> None:
        began = wait_started(wl)
        waited = max(0.0, now - began) if began is not None else 0.0
        key = (cluster_queue, priority_class(wl))
        self._admitted[key] = self._admitted.get(key, 0) + 1
        row = self._waits.setdefault(key, [0.0] * (len(self.buckets) + 2))  # buckets, +Inf, sum
        for i, bound in enumerate(self.buckets):
            if waited <= bound:
                row[i] += 1
        row[-2] += 1
        row[-1] += waited

    def evicted(self, cluster_queue: str, wl: Obj, reason: str) -> None:
        key = (cluster_queue, reason, priority_class(wl))
        self._evicted[key] = self._evicted.get(key, 0) + 1

    def collect(self) -> Iterator[Metric]:
        pending = GaugeMetricFamily(
            "kueue_pending_workloads",
            "The number of pending workloads, per 'cluster_queue' and 'status'.",
            labels=["cluster_queue", "status", "replica_role"],
        )
        active = GaugeMetricFamily(
            "kueue_admitted_active_workloads",
            "The number of admitted Workloads that are active, per 'cluster_queue'",
            labels=["cluster_queue", "replica_role"],
        )
        for queue, (waiting, inadmissible, admitted) in sorted(queue_counts(self.live()).items()):
            pending.add_metric([queue, PENDING_ACTIVE, ROLE], waiting)
            pending.add_metric([queue, PENDING_INADMISSIBLE, ROLE], inadmissible)
            active.add_metric([queue, ROLE], admitted)
        labels = ["cluster_queue", "priority_class", "replica_role"]
        total = CounterMetricFamily(
            "kueue_admitted_workloads",
            "The total number of admitted workloads per 'cluster_queue'",
            labels=labels,
        )
        wait = HistogramMetricFamily(
            "kueue_admission_wait_time_seconds",
            "The time between a workload was created or requeued until admission, per 'cluster_queue'",
            labels=labels,
        )
        for (queue, priority), n in sorted(self._admitted.items()):
            total.add_metric([queue, priority, ROLE], n)
            row = self._waits[(queue, priority)]
            bounds = [*(f"{b:g}" for b in self.buckets), "+Inf"]
            wait.add_metric([queue, priority, ROLE], list(zip(bounds, row[:-1], strict=True)), row[-1])
        evicted = CounterMetricFamily(
            "kueue_evicted_workloads",
            "The number of evicted workloads per 'cluster_queue'",
            labels=["cluster_queue", "reason", "underlying_cause", "priority_class", "replica_role"],
        )
        for (queue, reason, priority), n in sorted(self._evicted.items()):
            evicted.add_metric([queue, reason, "", priority, ROLE], n)
        yield from (pending, active, total, wait, evicted)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def discovery_objects(ip: str, port: int) -> list[tuple[ResourceType, Obj]]:
    """Kueue's metrics Service (``config/default/metrics_service.yaml`` under the ``kueue-`` prefix and the
    ``kueue-system`` namespace) and, as the EndpointSlice controller would publish it, the devcluster's
    address for it. The Service selects no pod (the controller manager runs in the devcluster's process)."""
    labels = {"control-plane": "controller-manager", "app.kubernetes.io/name": "kueue"}
    svc_port = {"name": PORT_NAME, "port": SERVICE_PORT, "protocol": "TCP", "targetPort": SERVICE_PORT}
    slice_labels = {
        **labels,
        "kubernetes.io/service-name": SERVICE,
        "endpointslice.kubernetes.io/managed-by": "devcluster.gpuworkspace.dev",
    }
    return [
        (_NAMESPACES, {"metadata": {"name": NAMESPACE}}),
        (
            _SERVICES,
            {
                "metadata": {"name": SERVICE, "namespace": NAMESPACE, "labels": labels},
                "spec": {"ports": [svc_port]},
            },
        ),
        (
            _SLICES,
            {
                "metadata": {"name": f"{SERVICE}-devcluster", "namespace": NAMESPACE, "labels": slice_labels},
                "addressType": "IPv4",
                "endpoints": [
                    {"addresses": [ip], "conditions": {"ready": True, "serving": True, "terminating": False}}
                ],
                "ports": [{"name": PORT_NAME, "port": port, "protocol": "TCP"}],
            },
        ),
    ]


class MetricsEndpoint:
    """``/metrics`` of the devcluster's Kueue on loopback, published as Kueue's metrics Service."""

    def __init__(self, metrics: KueueMetrics, verbs: Verbs, ip: str = "127.0.0.1", port: int = 0) -> None:
        self.metrics, self.verbs, self.ip, self.port = metrics, verbs, ip, port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        async def handler(_request: web.Request) -> web.Response:
            return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        app.router.add_get("/metrics", handler)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, self.ip, self.port, reuse_address=True)
        await site.start()
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        for rt, body in discovery_objects(self.ip, self.port):
            ensure_object(self.verbs, rt, body, compare=("spec", "endpoints", "ports"))

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port}/metrics"
