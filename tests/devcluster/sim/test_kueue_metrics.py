"""Kueue's own metrics from the devcluster's Kueue (sim/kueuemetrics.py): what the product's dashboards and
alerts read about jobs waiting and being admitted, with Kueue v0.19.2's names, labels and buckets, served
behind Kueue's metrics Service as a scrape would find it."""

from __future__ import annotations

from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.resources import find
from gpuworkspace_devcluster.sim.kueue import KueueController
from gpuworkspace_devcluster.sim.kueuemetrics import exponential_buckets, wait_started
from gpuworkspace_devcluster.sim.kueueobjs import workload_name

from .test_kueue import JOBS, NS, WLS, complete, cond, job, kueue, until  # noqa: F401 -- the fixture

SLICES = find("discovery.k8s.io", "v1", "endpointslices")
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(cluster: DevCluster) -> Samples:
    """Find Kueue's metrics endpoint as Prometheus would (the Service's EndpointSlice) and read it."""
    (found,) = [
        s
        for s in cluster.store.items(SLICES, "kueue-system")
        if s["metadata"]["labels"]["kubernetes.io/service-name"] == "kueue-controller-manager-metrics-service"
    ]
    ip, port = found["endpoints"][0]["addresses"][0], found["ports"][0]["port"]
    async with aiohttp.ClientSession() as session, session.get(f"http://{ip}:{port}/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "replica_role"))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def admitted(cluster: DevCluster, name: str, job_obj: dict[str, Any]) -> None:
    wl = workload_name(name, job_obj["metadata"]["uid"])
    await until(
        lambda: cond(cluster.store.get(WLS, NS, wl), "Admitted").get("status") == "True", f"{name} admitted"
    )


def q(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


async def test_waiting_and_admitted_workloads_and_the_wait_until_admission(
    kueue: tuple[DevCluster, KueueController],  # noqa: F811
) -> None:
    cluster, _ = kueue
    v, store = cluster.verbs, cluster.store
    first = v.create(JOBS, NS, job("first"))[0]
    await admitted(cluster, "first", first)
    second = v.create(JOBS, NS, job("second"))[0]
    second_wl = workload_name("second", second["metadata"]["uid"])
    await until(
        lambda: cond(store.get(WLS, NS, second_wl), "QuotaReserved").get("reason") == "Pending",
        "second waits",
    )
    seen = await scrape(cluster)
    assert seen[("kueue_pending_workloads", q(cluster_queue="training", status="inadmissible"))] == 1
    assert seen[("kueue_pending_workloads", q(cluster_queue="training", status="active"))] == 0
    assert seen[("kueue_admitted_active_workloads", q(cluster_queue="training"))] == 1
    low = q(cluster_queue="training", priority_class="low")
    assert seen[("kueue_admitted_workloads_total", low)] == 1
    assert seen[("kueue_admission_wait_time_seconds_count", low)] == 1
    assert ("kueue_admitted_workloads_created", low) not in seen  # Go's client serves no *_created

    complete(cluster, "first")  # its quota is released: the second is admitted after a measurable wait
    await until(
        lambda: cond(store.get(WLS, NS, second_wl), "Admitted").get("status") == "True", "second admitted"
    )
    seen = await scrape(cluster)
    assert seen[("kueue_admitted_workloads_total", low)] == 2
    assert seen[("kueue_admission_wait_time_seconds_count", low)] == 2
    waited = store.get(WLS, NS, second_wl)
    assert seen[("kueue_admission_wait_time_seconds_sum", low)] > 0, waited
    assert seen[("kueue_pending_workloads", q(cluster_queue="training", status="inadmissible"))] == 0
    assert seen[("kueue_admitted_active_workloads", q(cluster_queue="training"))] == 1  # the first finished


async def test_a_preemption_is_counted_as_an_eviction_of_the_preempted_workloads_queue(
    kueue: tuple[DevCluster, KueueController],  # noqa: F811
) -> None:
    cluster, _ = kueue
    v = cluster.verbs
    low = v.create(JOBS, NS, job("low", "low"))[0]
    await admitted(cluster, "low", low)
    high = v.create(JOBS, NS, job("high", "high"))[0]
    await admitted(cluster, "high", high)
    seen = await scrape(cluster)
    evicted = q(cluster_queue="training", reason="Preempted", underlying_cause="", priority_class="low")
    assert seen[("kueue_evicted_workloads_total", evicted)] == 1
    assert seen[("kueue_admitted_workloads_total", q(cluster_queue="training", priority_class="high"))] == 1


def test_buckets_and_the_wait_start_are_kueues() -> None:
    """``generateExponentialBuckets(16)``; the wait runs from the last requeue when there is one."""
    assert exponential_buckets(16)[:4] == [1.0, 2.5, 5.0, 10.0] and len(exponential_buckets(16)) == 16
    created = {"metadata": {"creationTimestamp": "2026-12-01T10:00:00Z"}}
    requeued: dict[str, Any] = {
        **created,
        "status": {
            "conditions": [
                {"type": "Requeued", "status": "True", "lastTransitionTime": "2026-12-01T10:05:00Z"}
            ]
        },
    }
    assert wait_started(requeued) - wait_started(created) == 300  # type: ignore[operator]
