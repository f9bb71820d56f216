"""The pod watch cache remembers the last copy of a deleted pod: how an eviction is told from a delete."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from kubespawner.spawner import PodReflector

from gpuworkspace_spawner.k8s.reflectors import GONE_KEPT, LastSeen, remembering


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
