"""Disk usage from the kubelets' volume stats, and the capacity alert metrics built from it.

Every kubelet serves ``kubelet_volume_stats_capacity_bytes``, ``…_used_bytes``, ``…_available_bytes``,
``…_inodes`` and ``…_inodes_used`` (labels ``namespace``, ``persistentvolumeclaim``;
``pkg/kubelet/metrics/collectors/volume_stats.go``) on ``:10250/metrics`` for the volumes mounted on
its node. :class:`VolumeStats` scrapes every node's InternalIP (from the API's node list) and keeps the
last result (the service's token goes only to kubelets whose certificate verifies: :mod:`..kubelets`); :class:`DiskMetrics` turns it into ``gpuworkspace_disk_used_ratio`` and
``gpuworkspace_disk_capacity_alert`` per workspace claim. Only mounted disks have stats: a stopped
workspace's disk has no usage until it runs again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from ...lifecycle.diskops import decide_capacity_alert, usage_ratio
from ..kubelets import (
    KubeletAccess,
    KubeletTrustError,
    Trust,
    describe_failure,
    kubelet_request,
    resolve_trust,
)
from .views import Usage, owner

log = logging.getLogger("gpuworkspace.disks")
CAPACITY, USED = "kubelet_volume_stats_capacity_bytes", "kubelet_volume_stats_used_bytes"
AVAILABLE, INODES, INODES_USED = (
    "kubelet_volume_stats_available_bytes",
    "kubelet_volume_stats_inodes",
    "kubelet_volume_stats_inodes_used",
)
_FAMILIES = (CAPACITY, USED, AVAILABLE, INODES, INODES_USED)
Key = tuple[str, str]  # (namespace, claim)


def parse_volume_stats(text: str) -> dict[Key, Usage]:
    """(namespace, claim) → usage from a kubelet's ``/metrics`` text (other families ignored)."""
    values: dict[Key, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in _FAMILIES:
            continue
        for sample in family.samples:
            if sample.name != family.name:
                continue
            key = (sample.labels.get("namespace", ""), sample.labels.get("persistentvolumeclaim", ""))
            values.setdefault(key, {})[family.name] = sample.value
    return {
        k: Usage(v[USED], v[CAPACITY], v.get(AVAILABLE), v.get(INODES_USED), v.get(INODES))
        for k, v in values.items()
        if USED in v and CAPACITY in v
    }


def node_address(node: Mapping[str, Any]) -> str | None:
    addresses = (node.get("status") or {}).get("addresses") or []
    return next((a.get("address") for a in addresses if a.get("type") == "InternalIP"), None)


@dataclass
class VolumeStats:
    """The last scrape of all kubelets (refreshed at most every ``min_age_s``)."""

    access: KubeletAccess
    min_age_s: float = 5.0
    usage: dict[Key, Usage] = field(default_factory=dict)
    failed_nodes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # why, per node, as "node: reason"
    scraped_at: float = 0.0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def refresh(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        async with self._lock:
            if time.monotonic() - self.scraped_at < self.min_age_s:
                return
            targets = [(n["metadata"]["name"], node_address(n)) for n in nodes]
            errors = {name: "no InternalIP" for name, ip in targets if not ip}
            named = [(name, ip) for name, ip in targets if ip]
            usage: dict[Key, Usage] = {}
            try:
                trust = await resolve_trust(self.access)
            except KubeletTrustError as exc:  # fail closed: nothing is sent, every node's usage is unknown
                log.error("Cannot read volume stats: %s", exc)
                errors.update((name, str(exc)) for name, _ in named)
                named = []
            results = await asyncio.gather(*(self._one(name, ip, trust) for name, ip in named))
            for (name, _), result in zip(named, results, strict=True):
                if isinstance(result, str):
                    errors[name] = result
                else:
                    usage.update(result)
            self.usage, self.scraped_at = usage, time.monotonic()
            self.failed_nodes = sorted(errors)
            self.errors = [f"{name}: {why}" for name, why in sorted(errors.items())]

    async def _one(self, node: str, ip: str, trust: Trust) -> dict[Key, Usage] | str:
        """The node's volume stats, or why not."""
        try:
            response = await AsyncHTTPClient().fetch(kubelet_request(self.access, trust, ip, "/metrics"))
            return parse_volume_stats(response.body.decode())
        except (HTTPClientError, OSError, ValueError) as exc:
            why = describe_failure(exc, trust)
            log.warning("Cannot read volume stats from the kubelet of %s at %s: %s", node, ip, why)
            return why


class DiskMetrics(Collector):
    """``gpuworkspace_disk_*`` gauges for the workspace claims the last scrape saw."""

    def __init__(self, stats: VolumeStats, threshold: float) -> None:
        self.stats, self.threshold = stats, threshold
        self.claims: dict[Key, Mapping[str, Any]] = {}  # the workspace claims, set before each scrape

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["namespace", "claim", "user", "server"]
        ratio = GaugeMetricFamily(
            "gpuworkspace_disk_used_ratio", "Used bytes / capacity of a workspace disk", labels=labels
        )
        alert = GaugeMetricFamily(
            "gpuworkspace_disk_capacity_alert",
            f"1 when a workspace disk's used ratio is at least {self.threshold}",
            labels=labels,
        )
        used = GaugeMetricFamily(
            "gpuworkspace_disk_used_bytes", "Used bytes of a workspace disk", labels=labels
        )
        capacity = GaugeMetricFamily(
            "gpuworkspace_disk_capacity_bytes", "Capacity of a workspace disk's file system", labels=labels
        )
        for key, usage in sorted(self.stats.usage.items()):
            claim = self.claims.get(key)
            if claim is None:
                continue
            values = [key[0], key[1], *owner(claim)]
            ratio.add_metric(values, usage_ratio(usage.used, usage.capacity) or 0.0)
            flag = decide_capacity_alert(usage.used, usage.capacity, threshold=self.threshold)
            alert.add_metric(values, 1.0 if flag else 0.0)
            used.add_metric(values, usage.used)
            capacity.add_metric(values, usage.capacity)
        failures = GaugeMetricFamily(
            "gpuworkspace_disk_stats_failed_nodes", "Nodes whose kubelet did not answer the last scrape"
        )
        failures.add_metric([], len(self.stats.failed_nodes))
        yield from (ratio, alert, used, capacity, failures)
