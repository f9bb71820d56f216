"""Conformance: watch semantics through kubernetes_asyncio (resume, 410, bookmarks, selectors, timeouts)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import aiohttp
from kubernetes_asyncio import client, watch

from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.faults import FaultRule
from gpuworkspace_devcluster.resources import find
from gpuworkspace_devcluster.store import Store
from gpuworkspace_devcluster.watching import WatchRequest, WatchStream

from .test_api_verbs import NS, make_ns, pod


async def collect(api: client.ApiClient, n: int, **kwargs) -> list[tuple[str, str, str]]:
    """The first ``n`` (type, name, resourceVersion) events of a pod watch."""
    core = client.CoreV1Api(api)
    out: list[tuple[str, str, str]] = []
    w = watch.Watch()
    kwargs.setdefault("timeout_seconds", 10)
    async with w.stream(core.list_namespaced_pod, NS, **kwargs) as stream:
        async for event in stream:
            obj = event["raw_object"]
            out.append((event["type"], obj["metadata"].get("name", ""), obj["metadata"]["resourceVersion"]))
            if len(out) == n:
                break
    return out


async def test_watch_from_resource_version_replays_history(api: client.ApiClient) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    start = (await core.list_namespaced_pod(NS)).metadata.resource_version
    await core.create_namespaced_pod(NS, pod("a"))
    await core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"x": "1"}}})
    await core.delete_namespaced_pod("a", NS)
    events = await collect(api, 3, resource_version=start)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    rvs = [int(rv) for _, _, rv in events]
    assert rvs == sorted(rvs) and rvs[0] > int(start)


async def test_watch_without_resource_version_starts_with_current_state(api: client.ApiClient) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod(NS, pod("a"))
    await core.create_namespaced_pod(NS, pod("b"))
    events = await collect(api, 2)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "a"), ("ADDED", "b")]


async def test_live_events_reach_watchers(api: client.ApiClient) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    rv = (await core.list_namespaced_pod(NS)).metadata.resource_version
    watcher = asyncio.create_task(collect(api, 2, resource_version=rv))
    await asyncio.sleep(0.2)
    await core.create_namespaced_pod(NS, pod("a"))
    await core.create_namespaced_pod(NS, pod("b"))
    events = await asyncio.wait_for(watcher, 10)
    assert [n for _, n, _ in events] == ["a", "b"]


async def test_label_selector_transitions(api: client.ApiClient) -> None:
    """A pod whose labels stop matching is DELETED for that watcher; one that starts matching is ADDED."""
    await make_ns(api)
    core = client.CoreV1Api(api)
    rv = (await core.list_namespaced_pod(NS)).metadata.resource_version
    await core.create_namespaced_pod(NS, pod("a", app="nb"))
    await core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"app": "other"}}})
    await core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"app": "nb"}}})
    events = await collect(api, 3, resource_version=rv, label_selector="app=nb")
    assert [t for t, _, _ in events] == ["ADDED", "DELETED", "ADDED"]


async def test_too_old_resource_version_is_410(api: client.ApiClient, cluster: DevCluster) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    rv = (await core.list_namespaced_pod(NS)).metadata.resource_version
    await core.create_namespaced_pod(NS, pod("a"))
    cluster.store.compact()
    cfg = api.configuration
    url = f"{cfg.host}/api/v1/namespaces/{NS}/pods?watch=true&resourceVersion={rv}"
    headers = {"Authorization": cfg.api_key["BearerToken"]}
    async with aiohttp.ClientSession(headers=headers) as session, session.get(url) as resp:
        assert resp.status == 200
        line = json.loads(await resp.content.readline())
    assert line["type"] == "ERROR"
    assert line["object"]["code"] == 410 and line["object"]["reason"] == "Expired"
    assert "too old resource version" in line["object"]["message"]


async def test_bookmarks_and_timeout(api: client.ApiClient, cluster: DevCluster) -> None:
    await make_ns(api)
    rv = cluster.store.rv
    cfg = api.configuration
    url = (
        f"{cfg.host}/api/v1/namespaces/{NS}/pods?watch=True&allowWatchBookmarks=true"
        f"&resourceVersion={rv}&timeoutSeconds=2"
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    headers = {"Authorization": cfg.api_key["BearerToken"]}
    async with aiohttp.ClientSession(headers=headers) as session, session.get(url) as resp:
        lines = [json.loads(raw) async for raw in resp.content if raw.strip()]
    assert 1.5 < loop.time() - started < 10  # the server ended the watch at timeoutSeconds
    assert lines and all(e["type"] == "BOOKMARK" for e in lines)
    assert (
        lines[0]["object"]["kind"] == "Pod" and int(lines[0]["object"]["metadata"]["resourceVersion"]) >= rv
    )


async def test_injected_watch_drop_then_resume_loses_nothing(
    api: client.ApiClient, cluster: DevCluster
) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    rv = (await core.list_namespaced_pod(NS)).metadata.resource_version
    for i in range(6):
        await core.create_namespaced_pod(NS, pod(f"p{i}"))
    cluster.faults.add(FaultRule(verb="watch", resource="pods", watch_drop_after_events=2))
    seen: list[str] = []
    while len(seen) < 6:
        batch = await collect(api, 6, resource_version=rv)  # the server drops after 2 events
        assert len(batch) <= 2
        seen += [n for _, n, _ in batch]
        rv = batch[-1][2]
    assert seen == [f"p{i}" for i in range(6)]


async def test_a_watch_the_client_closes_is_still_logged(api: client.ApiClient, cluster: DevCluster) -> None:
    """A real apiserver ends a watch as soon as its client disconnects (a hub that stops closes its long
    watches), and its audit log records it: the request log does too, promptly, not at the timeout."""
    await make_ns(api)
    core = client.CoreV1Api(api)
    rv = (await core.list_namespaced_pod(NS)).metadata.resource_version
    # never gets 5 events; its timeout (300 s) is far away
    watcher = asyncio.create_task(collect(api, 5, resource_version=rv, timeout_seconds=300))
    await asyncio.sleep(0.3)
    assert not [r for r in cluster.api.request_log if r.verb == "watch"]  # logged when it ends
    watcher.cancel()  # the client goes away mid-watch
    await asyncio.gather(watcher, return_exceptions=True)
    for _ in range(150):  # within 3 s
        closed = [r for r in cluster.api.request_log if r.verb == "watch" and r.resource == "pods"]
        if closed:
            break
        await asyncio.sleep(0.02)
    assert closed and closed[-1].status in (200, 499) and closed[-1].namespace == NS, closed
    assert closed[-1].duration_s < 5


class _RecordingResponse:
    def __init__(self) -> None:
        self.lines: list[dict] = []

    async def write(self, data: bytes) -> None:
        self.lines += [json.loads(line) for line in data.splitlines()]
        await asyncio.sleep(0)


class _OpenRequest:
    transport = SimpleNamespace(is_closing=lambda: False)


async def test_an_event_queued_when_a_bookmark_is_due_is_still_delivered() -> None:
    """Regression: an event that arrived just as a bookmark fell due was held back until the watch's
    timeout (kubectl wait then timed out on a loaded machine); it must go out before the bookmark."""
    store = Store()
    pods = find("", "v1", "pods")
    req = WatchRequest(pods, NS, None, None, "0", timeout_s=0.5, bookmarks=True, send_initial_events=None)
    stream = WatchStream(store, req, bookmark_interval_s=0.0)  # a bookmark is due at every turn
    sub = store.subscribe(pods)
    store.put(pods, {"metadata": {"name": "p0", "namespace": NS}})
    resp = _RecordingResponse()
    await stream._follow(resp, sub, lambda obj: obj is not None, _OpenRequest())  # type: ignore[arg-type]
    assert resp.lines[0]["type"] == "ADDED" and resp.lines[0]["object"]["metadata"]["name"] == "p0"
    assert {line["type"] for line in resp.lines[1:]} == {"BOOKMARK"}
