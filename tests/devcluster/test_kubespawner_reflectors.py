"""Conformance: KubeSpawner 7.x's own PodReflector/EventReflector against the devcluster."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from urllib.parse import parse_qs

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import Configuration
from kubespawner.spawner import EventReflector, PodReflector

from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.faults import FaultRule

from .test_api_verbs import NS, make_ns, pod

LABELS = {"component": "singleuser-server"}


async def eventually(check: Callable[[], bool], within_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not check():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


@pytest.fixture
async def reflector_config(cluster: DevCluster) -> AsyncIterator[None]:
    """KubeSpawner reflectors use the global default client configuration (set by load_config)."""
    saved = Configuration.get_default_copy()
    await config.load_kube_config(config_file=str(cluster.kubeconfig))
    yield
    Configuration.set_default(saved)


async def test_pod_reflector_sees_added_modified_deleted(
    api: client.ApiClient, cluster: DevCluster, reflector_config: None
) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod(NS, pod("before", **LABELS))
    await core.create_namespaced_pod(NS, pod("unrelated", component="other"))
    reflector = PodReflector(namespace=NS, labels=LABELS)
    await reflector.start()
    try:
        await reflector.first_load_future
        assert set(reflector.pods) == {f"{NS}/before"}
        await core.create_namespaced_pod(NS, pod("jupyter-alice", **LABELS))
        await eventually(lambda: f"{NS}/jupyter-alice" in reflector.pods)
        await core.patch_namespaced_pod_status("jupyter-alice", NS, {"status": {"phase": "Running"}})
        await eventually(lambda: reflector.pods[f"{NS}/jupyter-alice"]["status"]["phase"] == "Running")
        await core.delete_namespaced_pod("jupyter-alice", NS)
        await eventually(lambda: f"{NS}/jupyter-alice" not in reflector.pods)
    finally:
        await reflector.stop()


async def test_pod_reflector_resumes_after_watch_drop(
    api: client.ApiClient, cluster: DevCluster, reflector_config: None
) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    reflector = PodReflector(namespace=NS, labels=LABELS)
    await reflector.start()
    try:
        await reflector.first_load_future
        cluster.faults.add(FaultRule(verb="watch", resource="pods", watch_drop_after_events=1))
        for i in range(5):
            await core.create_namespaced_pod(NS, pod(f"p{i}", **LABELS))
            await eventually(lambda i=i: f"{NS}/p{i}" in reflector.pods)
        await core.delete_namespaced_pod("p0", NS)
        await eventually(lambda: f"{NS}/p0" not in reflector.pods)
        assert set(reflector.pods) == {f"{NS}/p{i}" for i in range(1, 5)}
    finally:
        await reflector.stop()
    # After each drop the reflector re-listed and watched again from a resourceVersion it had seen.
    watches = [r for r in cluster.api.request_log if r.verb == "watch" and r.resource == "pods"]
    assert len(watches) >= 3  # drops happened (a re-list may pick up several changes at once)
    resumed = [parse_qs(r.query).get("resourceVersion", [""])[0] for r in watches[1:]]
    assert all(rv not in ("", "0") for rv in resumed)


async def test_event_reflector_with_field_selector(
    api: client.ApiClient, cluster: DevCluster, reflector_config: None
) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    reflector = EventReflector(namespace=NS, fields={"involvedObject.kind": "Pod"})
    await reflector.start()
    try:
        await reflector.first_load_future
        for kind, name in (("Pod", "jupyter-alice"), ("PersistentVolumeClaim", "home")):
            await core.create_namespaced_event(
                NS,
                {
                    "metadata": {"name": f"{name}.1"},
                    "involvedObject": {"kind": kind, "name": name, "namespace": NS},
                    "reason": "Scheduled",
                    "message": f"{kind} event",
                    "type": "Normal",
                },
            )
        await eventually(lambda: len(reflector.events) == 1)
        assert reflector.events[0]["involvedObject"]["name"] == "jupyter-alice"
    finally:
        await reflector.stop()
