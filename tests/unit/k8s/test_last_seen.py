"""The pod watch cache remembers the last copy of a deleted pod: how an eviction is told from a delete."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from kubespawner.spawner import PodReflector

from gpuworkspace_spawner.k8s.reflectors import GONE_KEPT, Changes, LastSeen, remembering


def test_a_deleted_object_is_kept_in_gone() -> None:
    gone: OrderedDict[str, Any] = OrderedDict()
    cache = LastSeen({"ns/a": {"v": 1}, "ns/b": {"v": 2}}, gone)
    cache["ns/a"] = {"v": 3, "deletionTimestamp": "now"}
    assert cache.pop("ns/a", None) == {"v": 3, "deletionTimestamp": "now"}
    assert cache.pop("ns/missing", None) is None
    assert dict(cache) == {"ns/b": {"v": 2}}
    assert dict(gone) == {"ns/a": {"v": 3, "deletionTimestamp": "now"}}
    relisted = LastSeen({}, gone)  # a re-list builds a new cache: what was gone stays known
    assert relisted.gone["ns/a"]["v"] == 3


def test_gone_is_bounded_to_the_newest() -> None:
    cache = LastSeen({f"ns/{i}": {"i": i} for i in range(GONE_KEPT + 10)}, OrderedDict())
    for i in range(GONE_KEPT + 10):
        cache.pop(f"ns/{i}")
    assert len(cache.gone) == GONE_KEPT
    assert next(iter(cache.gone)) == "ns/10"


async def test_remembering_reflector_keeps_what_its_watch_deleted() -> None:
    cls = remembering(PodReflector)
    assert remembering(PodReflector) is cls  # one class per reflector class (KubeSpawner keys them)
    reflector = cls(namespace="ns")
    reflector.resources = {"ns/a": {"metadata": {"uid": "1"}}}  # what a list assigns
    assert isinstance(reflector.resources, LastSeen)
    reflector.resources.pop("ns/a", None)  # what a DELETED watch event does
    reflector.resources = {}  # the next re-list
    assert reflector.resources.gone["ns/a"] == {"metadata": {"uid": "1"}}


async def test_an_object_deleted_between_two_watches_is_remembered_from_the_re_list() -> None:
    reflector = remembering(PodReflector)(namespace="ns")
    reflector.resources = {"ns/a": {"metadata": {"uid": "1"}}, "ns/b": {"metadata": {"uid": "2"}}}
    reflector.resources = {"ns/b": {"metadata": {"uid": "2"}}}  # a re-list: "a" went with no DELETED event
    assert reflector.resources.gone["ns/a"] == {"metadata": {"uid": "1"}}
    assert "ns/b" not in reflector.resources.gone


# ------------------------------------------------------------------ the cache tells who waits for a change
async def test_a_watch_event_for_an_object_wakes_its_waiter_only() -> None:
    cache = LastSeen({}, OrderedDict())
    mine = asyncio.ensure_future(cache.changes.next_change("ns/a", 5))
    other = asyncio.ensure_future(cache.changes.next_change("ns/b", 0.2))
    await asyncio.sleep(0)
    cache["ns/a"] = {"status": {"phase": "Running"}}  # what a MODIFIED watch event does
    assert await mine is True
    assert await other is False  # "ns/b" did not change: its wait ends at its limit
    assert cache.changes._waiters == {}  # nothing left behind


async def test_a_deletion_and_a_re_list_wake_waiters() -> None:
    reflector = remembering(PodReflector)(namespace="ns")
    reflector.resources = {"ns/a": {"metadata": {"uid": "1"}}}
    deleted = asyncio.ensure_future(reflector.resources.changes.next_change("ns/a", 5))
    await asyncio.sleep(0)
    reflector.resources.pop("ns/a", None)  # a DELETED watch event
    assert await deleted is True
    relisted = asyncio.ensure_future(reflector.resources.changes.next_change("ns/c", 5))
    await asyncio.sleep(0)
    reflector.resources = {"ns/c": {"metadata": {"uid": "3"}}}  # a re-list after a watch reconnect
    assert await relisted is True
    assert reflector.resources["ns/c"]["metadata"]["uid"] == "3"


async def test_a_cancelled_wait_leaves_no_waiter() -> None:
    changes = Changes()
    wait = asyncio.ensure_future(changes.next_change("ns/a", 5))
    await asyncio.sleep(0)
    wait.cancel()
    await asyncio.gather(wait, return_exceptions=True)
    assert changes._waiters == {}
    changes.notify("ns/a")  # and a later change finds nobody to wake
