"""Watches (KubeSpawner's ResourceReflector, so they share its client, resume and failure handling)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException
from kubespawner.reflector import ResourceReflector
from traitlets import default, validate

from . import errors


class ClaimReflector(ResourceReflector):
    """PersistentVolumeClaims matching ``labels`` in one namespace, keyed ``namespace/name``.

    The spawner reads home-disk state from here instead of issuing a GET per start.
    """

    kind = "persistentvolumeclaims"
    list_method_name = "list_namespaced_persistent_volume_claim"

    # Home claims change a few times per workspace lifetime: KubeSpawner's 10 s watch timeout (made
    # for chatty pods and events) would re-list them every 10 s for nothing. Spawns that find the
    # cache stale recover through the API (409 on create, 404 on patch), so a longer watch is safe.
    @default("timeout_seconds")
    def _default_timeout_seconds(self) -> int:
        return 300

    @default("restart_seconds")
    def _default_restart_seconds(self) -> int:
        return 300

    @default("request_timeout")  # the client's read timeout: longer than the watch, or it fires first
    def _default_request_timeout(self) -> int:
        return 330

    @property
    def claims(self) -> dict[str, dict[str, object]]:
        claims: dict[str, dict[str, object]] = self.resources  # kubespawner's reflector: untyped
        return claims


_RETRYING: dict[type[ResourceReflector], type[ResourceReflector]] = {}


def retrying(reflector_class: type[ResourceReflector]) -> type[ResourceReflector]:
    """``reflector_class`` whose lists are repeated after 429/5xx (as the gateway's requests are).

    KubeSpawner fails a reflector whose first list gets an error, and with it the spawn that started
    it (or, with one namespace, exits the hub): one 429 must not cost a start, let alone the hub.
    """
    if reflector_class not in _RETRYING:

        class Retrying(reflector_class):
            async def _list_and_update(self, *args: Any, **kwargs: Any) -> Any:
                for delay in errors.RETRY_DELAYS_S:
                    try:
                        return await super()._list_and_update(*args, **kwargs)
                    except ApiException as exc:
                        if not isinstance(errors.map_api_exception(exc), errors.Unavailable):
                            raise
                        self.log.info("Listing %s: %s; again in %.1f s", self.kind, exc.status, delay)
                        await asyncio.sleep(delay)
                return await super()._list_and_update(*args, **kwargs)

        Retrying.__name__ = Retrying.__qualname__ = f"Retrying{reflector_class.__name__}"
        _RETRYING[reflector_class] = Retrying
    return _RETRYING[reflector_class]


GONE_KEPT = 256  # deleted objects remembered per reflector (the newest)


class Changes:
    """Wakes whoever waits for an object's next change in a watch cache (a watch event or a re-list).

    The waits are futures of the hub's event loop, the loop KubeSpawner's reflectors run their watches in.
    A start waits on its own pod's key, so one busy namespace wakes each waiter for its own pod only.
    """

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}

    def notify(self, key: str | None = None) -> None:
        """Wake the waiters for ``key``; all of them when ``key`` is None (a re-list replaced the cache)."""
        keys = list(self._waiters) if key is None else [key]
        for k in keys:
            for waiter in self._waiters.pop(k, ()):
                if not waiter.done():
                    waiter.set_result(None)

    async def next_change(self, key: str, limit_s: float) -> bool:
        """Wait until ``key`` changes: True, or False when ``limit_s`` seconds passed without a change."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, set()).add(waiter)
        try:
            # not ``asyncio.wait_for``: on Python 3.11 it returns the change and swallows a cancellation
            # that arrives in the same loop turn, so a cancelled waiter would go on waiting (a start hung)
            async with asyncio.timeout(limit_s):
                await waiter
            return True
        except TimeoutError:
            return False
        finally:
            waiting = self._waiters.get(key)
            if waiting is not None:
                waiting.discard(waiter)
                if not waiting:
                    del self._waiters[key]


class LastSeen(dict[str, Any]):
    """A reflector's cache that keeps the last copy of each object a DELETED watch event removes, and
    tells :class:`Changes` about every change (KubeSpawner's watch loop writes ``resources[key] = obj``
    and ``resources.pop(key)``; a re-list assigns a new cache).

    KubeSpawner's reflector drops a deleted object (``resources.pop(key)``); the copy it had (a pod with
    its ``deletionTimestamp`` and ``DisruptionTarget`` condition) is what tells an eviction from a plain
    delete. ``gone`` and ``changes`` are shared by the reflector's successive caches (each re-list builds a
    new one).
    """

    def __init__(
        self, items: dict[str, Any], gone: OrderedDict[str, Any], changes: Changes | None = None
    ) -> None:
        super().__init__(items)
        self.gone = gone
        self.changes = changes if changes is not None else Changes()

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self.changes.notify(key)

    def pop(self, key: str, *default: Any) -> Any:
        value = super().pop(key, *default)
        if value is not None:
            self.remember(key, value)
            self.changes.notify(key)
        return value

    def remember(self, key: str, value: Any) -> None:
        """Keep ``value`` as the last copy of the deleted object ``key`` (the newest GONE_KEPT)."""
        self.gone[key] = value
        self.gone.move_to_end(key)
        while len(self.gone) > GONE_KEPT:
            self.gone.popitem(last=False)


_REMEMBERING: dict[type[ResourceReflector], type[ResourceReflector]] = {}


def remembering(reflector_class: type[ResourceReflector]) -> type[ResourceReflector]:
    """``reflector_class`` whose cache is a :class:`LastSeen` (``reflector.resources.gone`` and
    ``.changes``)."""
    if reflector_class not in _REMEMBERING:

        class Remembering(reflector_class):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                self._gone: OrderedDict[str, Any] = OrderedDict()
                self._changes = Changes()
                super().__init__(*args, **kwargs)

            @validate("resources")
            def _remember(self, proposal: Any) -> LastSeen:
                # A re-list (KubeSpawner's watch re-lists at every reconnect) replaces the cache: an
                # object deleted between the old watch's end and the list never gets its DELETED event,
                # so the copy the old cache had is remembered here instead.
                before = self._trait_values.get("resources") or {}
                after = LastSeen(dict(proposal["value"]), self._gone, self._changes)
                for key in before.keys() - after.keys():
                    after.remember(key, before[key])
                self._changes.notify()  # woken waiters run after this assignment, and read the new cache
                return after

        Remembering.__name__ = Remembering.__qualname__ = f"Remembering{reflector_class.__name__}"
        _REMEMBERING[reflector_class] = Remembering
    return _REMEMBERING[reflector_class]
