"""The Eviction subresource marks the pod before it deletes it, as the real API server does.

kubernetes ``pkg/registry/core/pod/storage/eviction.go`` ``addConditionAndDeletePod``
(PodDisruptionConditions, GA in 1.31): the ``DisruptionTarget`` condition with reason
``EvictionByEvictionAPI`` is written, then the pod is deleted. Watchers (the spawner's self-healing,
which tells an eviction or a node drain from a plain delete) see both.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client, watch

from .test_api_verbs import NS, make_ns, pod


async def test_eviction_sets_disruption_target_then_deletes(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await make_ns(api)
    created = await core.create_namespaced_pod(NS, pod("evictee"))
    seen: list[tuple[str, Any]] = []

    async def observe() -> None:
        version = created.metadata.resource_version
        async with watch.Watch().stream(
            core.list_namespaced_pod, NS, resource_version=version, _request_timeout=10
        ) as stream:
            async for event in stream:
                seen.append((event["type"], event["object"]))
                if event["type"] == "DELETED":
                    return

    watcher = asyncio.ensure_future(observe())
    await asyncio.sleep(0.2)
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "evictee", "namespace": NS}}
    await core.create_namespaced_pod_eviction("evictee", NS, body)
    await asyncio.wait_for(watcher, 10)

    def disruption(obj: Any) -> list[tuple[str, str]]:
        return [(c.reason, c.status) for c in obj.status.conditions or [] if c.type == "DisruptionTarget"]

    assert [kind for kind, _ in seen][-1] == "DELETED"
    marked = [obj for kind, obj in seen if kind == "MODIFIED" and disruption(obj)]
    assert marked, [kind for kind, _ in seen]
    assert disruption(marked[0]) == [("EvictionByEvictionAPI", "True")]
