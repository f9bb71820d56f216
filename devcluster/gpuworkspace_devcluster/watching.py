"""Watch streams: resume by resourceVersion, selector transitions, bookmarks, 410 Gone, faults."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from .errors import ApiError
from .resources import ResourceType
from .selectors import FieldSelector, LabelSelector
from .store import Obj, Store, WatchEvent

DEFAULT_WATCH_TIMEOUT_S = 1800.0


@dataclass
class WatchRequest:
    rt: ResourceType
    namespace: str | None
    labels: LabelSelector | None
    fields: FieldSelector | None
    resource_version: str | None
    timeout_s: float
    bookmarks: bool
    send_initial_events: bool | None
    drop_after_events: int | None = None
    stall_s: float = 0.0
    # Renders each event's object another way (kubectl asks for Tables); ``first`` is True once.
    transform: Callable[[Obj, bool], dict[str, Any]] | None = None


def _matcher(req: WatchRequest) -> Callable[[Obj | None], bool]:
    def matches(obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        if req.namespace and req.rt.namespaced and meta.get("namespace") != req.namespace:
            return False
        if req.labels is not None and not req.labels.matches(meta.get("labels")):
            return False
        return req.fields is None or req.fields.matches(obj)

    return matches


def translate(event: WatchEvent, matches: Callable[[Obj | None], bool]) -> str | None:
    """The event type this watcher sees, as the apiserver's cacher does for selector transitions."""
    now, before = matches(event.obj), matches(event.old)
    if event.type == "ADDED":
        return "ADDED" if now else None
    if event.type == "DELETED":
        return "DELETED" if before else None
    if now and before:
        return "MODIFIED"
    if now:
        return "ADDED"
    return "DELETED" if before else None


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


DISCONNECT_CHECK_S = 1.0  # how soon a watch whose client went away ends


class WatchStream:
    """Serves one watch request on an aiohttp StreamResponse."""

    def __init__(self, store: Store, req: WatchRequest, bookmark_interval_s: float = 5.0) -> None:
        self.store = store
        self.req = req
        self.bookmark_interval_s = bookmark_interval_s
        self.sent = 0

    async def serve(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        # Subscribe and read the backlog with no await in between: no event can fall in a gap.
        sub = self.store.subscribe(self.req.rt)
        try:
            backlog = self._backlog()
            if isinstance(backlog, ApiError):
                await resp.write(_line("ERROR", backlog.to_status()))
                return resp
            matches = _matcher(self.req)
            for kind, obj, event in backlog:
                if not await self._send(resp, self._encode(kind, obj, event)):
                    return resp
            if self.req.send_initial_events and self.req.bookmarks:
                await resp.write(self._bookmark(initial_end=True))
            await self._follow(resp, sub, matches, request)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.unsubscribe(sub)
        return resp

    def _backlog(self) -> list[tuple[str, Obj, WatchEvent | None]] | ApiError:
        rv = self.req.resource_version
        matches = _matcher(self.req)
        if rv in (None, "", "0") or self.req.send_initial_events:
            # "Get State and Start at Most Recent": synthetic ADDED for what exists now.
            return [
                ("ADDED", o, None) for o in self.store.items(self.req.rt, self.req.namespace) if matches(o)
            ]
        try:
            since = int(rv)
        except ValueError:
            return ApiError(400, "BadRequest", f'resourceVersion: Invalid value: "{rv}": must be an integer')
        events = self.store.events_since(self.req.rt, since)
        if events is None:
            return ApiError(410, "Expired", f"too old resource version: {since} ({self.store.rv})")
        out: list[tuple[str, Obj, WatchEvent | None]] = []
        for event in events:
            kind = translate(event, matches)
            if kind:
                out.append((kind, event.obj, event))
        return out

    def _encode(self, kind: str, obj: Obj, event: WatchEvent | None) -> bytes:
        if self.req.transform is not None:
            return _line(kind, self.req.transform(obj, self.sent == 0))
        return event.encoded(kind) if event is not None else _line(kind, obj)

    async def _send(self, resp: web.StreamResponse, line: bytes) -> bool:
        if self.req.stall_s and self.sent == 0:  # a stalled stream: nothing arrives for a while, once
            await asyncio.sleep(self.req.stall_s)
        await resp.write(line)
        self.sent += 1
        drop = self.req.drop_after_events
        return not (drop is not None and self.sent >= drop)

    async def _send_batch(self, resp: web.StreamResponse, lines: list[bytes]) -> bool:
        """Write queued events in one write (one syscall) unless a drop fault counts them one by one."""
        if self.req.drop_after_events is not None or (self.req.stall_s and self.sent == 0):
            for line in lines:
                if not await self._send(resp, line):
                    return False
            return True
        await resp.write(b"".join(lines))
        self.sent += len(lines)
        return True

    def _bookmark(self, initial_end: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": self.req.rt.kind, "apiVersion": self.req.rt.api_version, "metadata": meta}
        return _line("BOOKMARK", obj)

    async def _follow(
        self,
        resp: web.StreamResponse,
        sub: Any,
        matches: Callable[[Obj | None], bool],
        request: web.Request,
    ) -> None:
        deadline = time.monotonic() + self.req.timeout_s
        next_bookmark = time.monotonic() + self.bookmark_interval_s
        while (now := time.monotonic()) < deadline:
            if self.req.bookmarks and now >= next_bookmark and sub.queue.empty():
                await resp.write(self._bookmark())
                next_bookmark = now + self.bookmark_interval_s
                continue
            until = min(deadline, next_bookmark) if self.req.bookmarks else deadline
            event = await _next_event(sub.queue, until - now)
            if event is _NOTHING_YET:
                # A real apiserver ends a watch as soon as its client disconnects; aiohttp does not
                # cancel the handler, so look at the connection at least every DISCONNECT_CHECK_S.
                if request.transport is None or request.transport.is_closing():
                    return
                continue
            if not await self._deliver(resp, sub.queue, event, matches):
                return

    async def _deliver(
        self,
        resp: web.StreamResponse,
        queue: asyncio.Queue[WatchEvent | None],
        event: WatchEvent | None,
        matches: Callable[[Obj | None], bool],
    ) -> bool:
        """Send ``event`` and whatever else is queued in one write; False when the watch must end."""
        batch = [event]
        while not queue.empty() and batch[-1] is not None:
            batch.append(queue.get_nowait())
        lines = []
        for item in batch:
            if item is None:  # store closed, or this watcher fell too far behind
                break
            kind = translate(item, matches)
            if kind:
                lines.append(self._encode(kind, item.obj, item))
        if lines and not await self._send_batch(resp, lines):
            return False
        return batch[-1] is not None


_NOTHING_YET = object()


async def _next_event(queue: asyncio.Queue[WatchEvent | None], wait_s: float) -> Any:
    """The next queued item, or ``_NOTHING_YET`` after at most ``wait_s`` (and DISCONNECT_CHECK_S).

    A queued item is taken without waiting: on Python 3.11 ``wait_for(queue.get(), 0)`` cancels the
    get before it runs, so a loop that waits 0 s while a bookmark is due would never take the item.
    """
    if not queue.empty():
        return queue.get_nowait()
    try:
        return await asyncio.wait_for(queue.get(), min(wait_s, DISCONNECT_CHECK_S))
    except TimeoutError:
        return _NOTHING_YET
