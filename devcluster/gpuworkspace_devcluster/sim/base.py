"""The shape every simulated controller shares: react to store changes through a keyed work queue.

A controller names the resource types it watches; every change to one of them enqueues a key
(type, namespace, name); ``reconcile`` reads the current state from the store and acts through
:class:`Verbs` (so every write gets real API semantics and shows up in watches). Like a real
controller it is level-triggered: reconcile must work from the current state alone, and may be
asked to reconcile the same key many times. Timers (``requeue_after``) replace sleeps.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
from collections.abc import Iterable
from http import HTTPStatus

from ..errors import ApiError
from ..resources import RESOURCE_TYPES, ResourceType
from ..store import Obj, Store, TypeKey, WatchEvent
from ..verbs import Verbs

log = logging.getLogger(__name__)
Key = tuple[TypeKey, str, str]  # (type, namespace, name)
BY_KEY: dict[TypeKey, ResourceType] = {rt.key: rt for rt in RESOURCE_TYPES}


def rt_of(group: str, plural: str) -> ResourceType:
    return BY_KEY[(group, plural)]


class SimController(abc.ABC):
    """Base class: subclasses set ``watches`` and implement ``reconcile``."""

    name = "controller"
    watches: tuple[TypeKey, ...] = ()

    def __init__(self, verbs: Verbs) -> None:
        self.verbs = verbs
        self.store: Store = verbs.store
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._pending: set[Key] = set()
        self._timers: set[asyncio.TimerHandle] = set()
        self._task: asyncio.Task[None] | None = None

    # --------------------------------------------------------------- wiring
    async def start(self) -> None:
        self.store.on_change.append(self._on_change)
        for key in self.watches:
            for obj in self.store.items(BY_KEY[key]):
                self.enqueue(key, obj)
        self._task = asyncio.create_task(self._run(), name=f"devcluster-{self.name}")

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            self.store.on_change.remove(self._on_change)
        for timer in self._timers:
            timer.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _on_change(self, key: TypeKey, event: WatchEvent) -> None:
        if key in self.watches:
            for target in self.keys_for(key, event.obj, event.old):
                self._put(target)

    def keys_for(self, key: TypeKey, obj: Obj, old: Obj | None) -> Iterable[Key]:
        """Which keys to reconcile for a change; by default the changed object itself."""
        meta = obj["metadata"]
        return [(key, meta.get("namespace", ""), meta["name"])]

    def enqueue(self, key: TypeKey, obj: Obj) -> None:
        for target in self.keys_for(key, obj, None):
            self._put(target)

    def requeue_after(self, target: Key, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._timers.discard(handle)
            self._put(target)

        handle = loop.call_later(seconds, fire)
        self._timers.add(handle)

    def _put(self, target: Key) -> None:
        if target not in self._pending:
            self._pending.add(target)
            self._queue.put_nowait(target)

    async def settle(self) -> None:
        await self._queue.join()

    # ----------------------------------------------------------------- loop
    async def _run(self) -> None:
        while True:
            target = await self._queue.get()
            self._pending.discard(target)
            try:
                await self.reconcile(target)
            except ApiError as exc:
                if exc.code == HTTPStatus.CONFLICT:  # raced with another writer: try again from the new state
                    self._put(target)
                elif exc.code != HTTPStatus.NOT_FOUND:  # gone meanwhile; its deletion event brings us back
                    log.warning("devcluster %s: %s: %s", self.name, target, exc.message)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("devcluster %s: reconciling %s failed", self.name, target)
            finally:
                self._queue.task_done()

    @abc.abstractmethod
    async def reconcile(self, target: Key) -> None:
        """Drive the object named by ``target`` one step towards its desired state."""

    # -------------------------------------------------------------- helpers
    def get(self, target: Key) -> Obj | None:
        return self.store.get(BY_KEY[target[0]], target[1], target[2])
