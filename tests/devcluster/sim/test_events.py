"""Events as client-go's EventRecorder writes them: a repeat bumps ``count`` and ``lastTimestamp``.

The real correlator (k8s.io/client-go ``tools/record/events_cache.go``, ``eventLogger.eventObserve``)
keys an event by its source, involved object, type, reason and message; a repeat within the cache's
life is a PATCH of ``count`` and ``lastTimestamp`` on the same Event, not a new one. The spawner orders a
pod's events by ``lastTimestamp`` (``lifecycle/spawning.py``), so a repeated "Back-off" or
"FailedScheduling" must carry the time it was last seen.
"""

from __future__ import annotations

import asyncio

from kubernetes_asyncio import client

from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.resources import find
from gpuworkspace_devcluster.sim.events import record_event

EVENTS = find("", "v1", "events")
NS = "default"


async def test_a_repeated_event_is_one_event_with_its_count_and_last_time(
    cluster: DevCluster, api: client.ApiClient
) -> None:
    core = client.CoreV1Api(api)
    pod = await core.create_namespaced_pod(
        NS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    )
    involved = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": "p", "namespace": NS, "uid": pod.metadata.uid},
    }
    first = record_event(
        cluster.verbs, involved, "Warning", "BackOff", "Back-off pulling image", component="kubelet"
    )
    await asyncio.sleep(1.1)  # Event times are whole seconds
    record_event(cluster.verbs, involved, "Normal", "Pulling", 'Pulling image "busybox"', component="kubelet")
    again = record_event(
        cluster.verbs, involved, "Warning", "BackOff", "Back-off pulling image", component="kubelet"
    )

    listed = await core.list_namespaced_event(NS, field_selector=f"involvedObject.uid={pod.metadata.uid}")
    assert sorted((e.reason, e.count) for e in listed.items) == [("BackOff", 2), ("Pulling", 1)]
    assert again["metadata"]["name"] == first["metadata"]["name"]
    assert again["firstTimestamp"] == first["firstTimestamp"] < again["lastTimestamp"]
