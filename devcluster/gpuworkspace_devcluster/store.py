"""The devcluster's etcd: objects, one cluster-wide resourceVersion, watch history, persistence.

Every write goes through :meth:`Store.put` or :meth:`Store.remove`, which assign the next
resourceVersion, append to the per-resource event history (for watch resume), notify live
watchers and append to the on-disk journal. The store knows nothing about HTTP or semantics
such as finalizers; those live in ``verbs.py``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from .resources import ResourceType

log = logging.getLogger(__name__)

Obj = dict[str, Any]
ObjKey = tuple[str, str]  # (namespace or "", name)
TypeKey = tuple[str, str]  # (group, plural)

DEFAULT_HISTORY = 20_000  # watch events kept per resource type, like the watch cache's capacity


@dataclass(frozen=True)
class WatchEvent:
    """One change. ``old`` is the previous state (for selector transitions), ``None`` on ADDED."""

    type: str  # ADDED | MODIFIED | DELETED
    rv: int
    obj: Obj
    old: Obj | None
    _encoded: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    def encoded(self, as_type: str | None = None) -> bytes:
        """The wire line ``{"type":..., "object":...}\\n``, serialised once for every watcher."""
        kind = as_type or self.type
        cached = self._encoded.get(kind)
        if cached is None:
            cached = orjson.dumps({"type": kind, "object": self.obj}) + b"\n"
            self._encoded[kind] = cached
        return cached


class Subscriber:
    """A live watcher's mailbox; the store pushes events, the watch handler drains them."""

    def __init__(self, key: TypeKey, maxsize: int = 50_000) -> None:
        self.key = key
        self.queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        self.maxsize = maxsize
        self.overflowed = False

    def push(self, event: WatchEvent) -> None:
        if self.queue.qsize() >= self.maxsize:
            # Like the apiserver's cacher: a watcher that cannot keep up is terminated.
            self.overflowed = True
            self.queue.put_nowait(None)
            return
        self.queue.put_nowait(event)

    def close(self) -> None:
        self.queue.put_nowait(None)


class Store:
    def __init__(self, state_dir: Path | None = None, history: int = DEFAULT_HISTORY) -> None:
        self.state_dir = state_dir
        self.history_size = history
        self.rv = 0
        self._objects: dict[TypeKey, dict[ObjKey, Obj]] = {}
        self._history: dict[TypeKey, deque[WatchEvent]] = {}
        # the oldest resourceVersion a watch may resume from, per type (older → 410 Gone)
        self._compacted: dict[TypeKey, int] = {}
        self._subscribers: dict[TypeKey, set[Subscriber]] = {}
        self._journal: IO[bytes] | None = None
        self.on_change: list[Callable[[TypeKey, WatchEvent], None]] = []
        if state_dir is not None:
            self._load(state_dir)

    # ----------------------------------------------------------------- reads
    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        return self._objects.get(rt.key, {}).get((namespace if rt.namespaced else "", name))

    def items(self, rt: ResourceType, namespace: str | None = None) -> Iterator[Obj]:
        """Objects of a type in key order (namespace, name), like etcd's range reads."""
        bucket = self._objects.get(rt.key, {})
        for key in sorted(bucket):
            if namespace and rt.namespaced and key[0] != namespace:
                continue
            yield bucket[key]

    def count(self, rt: ResourceType) -> int:
        return len(self._objects.get(rt.key, {}))

    def sorted_keys(self, rt: ResourceType) -> list[ObjKey]:
        return sorted(self._objects.get(rt.key, {}))

    def bucket(self, rt: ResourceType) -> dict[ObjKey, Obj]:
        return self._objects.get(rt.key, {})

    # ---------------------------------------------------------------- writes
    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def put(self, rt: ResourceType, obj: Obj) -> Obj:
        """Store ``obj`` (already complete) under a fresh resourceVersion; returns it."""
        meta = obj["metadata"]
        key = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
        bucket = self._objects.setdefault(rt.key, {})
        old = bucket.get(key)
        rv = self.next_rv()
        meta["resourceVersion"] = str(rv)
        bucket[key] = obj
        self._emit(rt, WatchEvent("MODIFIED" if old is not None else "ADDED", rv, obj, old))
        self._write_journal({"op": "put", "t": list(rt.key), "obj": obj})
        return obj

    def remove(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        key = (namespace if rt.namespaced else "", name)
        bucket = self._objects.get(rt.key, {})
        old = bucket.pop(key, None)
        if old is None:
            return None
        rv = self.next_rv()
        gone = {**old, "metadata": {**old["metadata"], "resourceVersion": str(rv)}}
        self._emit(rt, WatchEvent("DELETED", rv, gone, old))
        self._write_journal({"op": "del", "t": list(rt.key), "ns": key[0], "name": name, "rv": rv})
        return gone

    def _emit(self, rt: ResourceType, event: WatchEvent) -> None:
        hist = self._history.setdefault(rt.key, deque())
        hist.append(event)
        if len(hist) > self.history_size:
            dropped = hist.popleft()
            self._compacted[rt.key] = dropped.rv
        for sub in tuple(self._subscribers.get(rt.key, ())):
            sub.push(event)
        for hook in self.on_change:
            hook(rt.key, event)

    # ----------------------------------------------------------------- watch
    def subscribe(self, rt: ResourceType) -> Subscriber:
        sub = Subscriber(rt.key)
        self._subscribers.setdefault(rt.key, set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self._subscribers.get(sub.key, set()).discard(sub)

    def close_all_watches(self) -> None:
        for subs in self._subscribers.values():
            for sub in subs:
                sub.close()

    def events_since(self, rt: ResourceType, rv: int) -> list[WatchEvent] | None:
        """Events after ``rv``; ``None`` when ``rv`` is older than the kept history (→ 410)."""
        if rv < self._compacted.get(rt.key, self._oldest_known):
            return None
        return [e for e in self._history.get(rt.key, ()) if e.rv > rv]

    def compact(self, rt: ResourceType | None = None) -> None:
        """Forget watch history (what etcd compaction does); resumes from before now get 410."""
        for key in [rt.key] if rt else list(self._history):
            self._history[key] = deque()
            self._compacted[key] = self.rv

    _oldest_known = 0

    # ----------------------------------------------------------- persistence
    def _load(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        journal = state_dir / "objects.jsonl"
        if journal.exists():
            with journal.open("rb") as fh:
                for raw in fh:
                    try:
                        entry = orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        log.warning("devcluster: ignoring a torn journal line in %s", journal)
                        continue
                    self._replay(entry)
            # A restart loses the watch history, as a real apiserver's watch cache does:
            # resuming from an older resourceVersion gets 410 Gone.
            self._oldest_known = self.rv
        self._rewrite_journal(journal)
        self._journal = journal.open("ab")

    def _replay(self, entry: dict[str, Any]) -> None:
        tkey: TypeKey = (entry["t"][0], entry["t"][1])
        bucket = self._objects.setdefault(tkey, {})
        if entry["op"] == "put":
            obj = entry["obj"]
            meta = obj["metadata"]
            bucket[(meta.get("namespace", ""), meta["name"])] = obj
            self.rv = max(self.rv, int(meta["resourceVersion"]))
        else:
            bucket.pop((entry["ns"], entry["name"]), None)
            self.rv = max(self.rv, int(entry["rv"]))

    def _rewrite_journal(self, journal: Path) -> None:
        """Compact the journal to one line per live object (plus the rv high-water mark)."""
        tmp = journal.with_suffix(".tmp")
        with tmp.open("wb") as fh:
            for tkey, bucket in self._objects.items():
                for obj in bucket.values():
                    fh.write(orjson.dumps({"op": "put", "t": list(tkey), "obj": obj}) + b"\n")
            fh.write(
                orjson.dumps({"op": "del", "t": ["", "-"], "ns": "", "name": "-", "rv": self.rv}) + b"\n"
            )
        tmp.replace(journal)

    def _write_journal(self, entry: dict[str, Any]) -> None:
        if self._journal is not None:
            self._journal.write(orjson.dumps(entry) + b"\n")
            self._journal.flush()

    def close(self) -> None:
        self.close_all_watches()
        if self._journal is not None:
            self._journal.close()
            self._journal = None


def owner_ref(owner: Obj) -> dict[str, Any]:
    """The controller ownerReference a controller puts on what it creates for ``owner`` (an object with
    its apiVersion, kind and metadata), so the garbage collector deletes it with its owner."""
    m = owner.get("metadata") or {}
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": m["name"],
        "uid": m["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
