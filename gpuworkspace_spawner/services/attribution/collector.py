"""The collector loop (I/O): every ``interval_s`` read an Observation, attribute it, publish a Snapshot.

One cycle: ``source.observe(now)`` → :func:`.rules.attribute` → :class:`.aggregate.Accounting` and
:class:`.history.History` advanced → an immutable :class:`Snapshot` whose heavy API answers are
already JSON bytes (the node list, every user's workspace list, every workspace's detail), so a
request is a dict lookup (and, for rankings and groups, a filter). The cycle's wall time and process
CPU time are kept in :class:`CycleStats` for ``/metrics``.

The cycle's CPU-bound steps (attribution, rendering the bodies) are pure and run on a worker thread,
so the event loop keeps answering the API during a cycle; the service shortens the interpreter's
switch interval (``sys.setswitchinterval``) so that a request waits about a millisecond for the GIL.

Group membership (for group totals and for whom a user may rank among) comes from the hub API
(``GET /hub/api/groups``, scopes ``list:groups`` and ``read:groups``), refreshed every few cycles.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from . import views
from .aggregate import AccountEntry, Accounting, group_totals, top_consumers
from .availability import Need, NodeCapacity, availability_json, decide_availability, node_capacities
from .history import History, series_of
from .model import Observation, WorkspaceFigures
from .offloading import off_loop
from .recent import RecentUsage
from .rules import Attribution, attribute
from .sources import Source

log = logging.getLogger("gpuworkspace.attribution")
PAGINATION = "application/jupyterhub-pagination+json"
FULL_GC_EVERY_S = 3600.0  # a full garbage collection (one pause of ~0.2 s) this often
RELEASE_DEPTH = 3  # levels of a replaced snapshot taken apart before the rest is freed whole
ONLY_HERE = 2  # sys.getrefcount of an object only a local name holds (the name and the argument)
NO_AUTOMATIC_FULL_GC = 2**31 - 1  # gc threshold of the oldest generation: never reached
MAX_CACHED_NEEDS = 256  # availability answers kept per snapshot
K = TypeVar("K")


def _dumps(obj: Any) -> bytes:
    """Compact JSON with sorted keys (stdlib json: orjson was faster but cost ~50 MiB of RSS here)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _dumps_list(items: Sequence[Any], at: float) -> bytes:
    """``_dumps({"items": items, "at": at})``."""
    return _joined_list([_dumps(item) for item in items], _dumps(at))


def _joined_list(encoded: Sequence[bytes], at: bytes) -> bytes:
    """``{"at": .., "items": [..]}`` from items already encoded (sorted keys, as ``_dumps`` writes)."""
    return b'{"at":' + at + b',"items":[' + b",".join(encoded) + b"]}"


@dataclass(frozen=True)
class Account:
    """An accounting entry with the labels ``/metrics`` groups it by."""

    user: str
    server: str
    profile: str
    gpu_mode: str
    allocated_gpu_seconds: float
    used_gpu_seconds: float
    idle_allocated_gpu_seconds: float


@dataclass(frozen=True)
class Snapshot:
    """One cycle's result, never changed once published."""

    at: float
    failed_sources: tuple[str, ...]  # of the observation (which is not kept: only its attribution is)
    attribution: Attribution
    groups_of_user: Mapping[str, tuple[str, ...]]
    nodes_body: bytes  # GET api/v1/nodes
    nodes_anonymous_body: bytes  # the same without owners (show_owners_to_all off, non-admins)
    workspaces_body: bytes  # every workspace (admins); the pods of jobs are listed apart
    workspaces_by_user: Mapping[str, bytes]  # user -> their workspaces' list body
    detail: Mapping[tuple[str, str], bytes]  # (user, server) -> detail body (workspaces only)
    figures_by_user: Mapping[str, tuple[WorkspaceFigures, ...]]
    groups: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # group -> group_json
    accounts: tuple[Account, ...] = ()
    accounting: Mapping[str, AccountEntry] = field(default_factory=dict)
    jobs_body: bytes = b""  # GET api/v1/jobs: every job pod (admins); empty: none rendered
    jobs_by_user: Mapping[str, bytes] = field(default_factory=dict)  # user -> their job pods' list body
    capacity: tuple[NodeCapacity, ...] = ()  # GPU resources offered and held per node (no holders)
    _availability: dict[tuple[Any, ...], bytes] = field(default_factory=dict, repr=False)
    _rankings: dict[str, list[tuple[WorkspaceFigures, float]]] = field(default_factory=dict, repr=False)

    def top(self, by: str, users: frozenset[str] | None, limit: int) -> list[tuple[WorkspaceFigures, float]]:
        """The ``limit`` largest consumers ``by`` (:data:`.aggregate.RANKINGS`) among ``users`` (None: all);
        each ranking is computed once per snapshot, then only filtered per request."""
        if by not in self._rankings:
            figures = self.attribution.workspaces
            self._rankings[by] = top_consumers(figures, by, len(figures))
        ranked = (item for item in self._rankings[by] if users is None or item[0].workspace.user in users)
        return list(itertools.islice(ranked, limit))

    def availability(self, need: Need) -> bytes:
        """``GET api/v1/availability``'s body for ``need``, computed once per snapshot and need."""
        key = (need.resource, need.count, tuple(sorted(need.selector.items())))
        body = self._availability.get(key)
        if body is None:
            if len(self._availability) >= MAX_CACHED_NEEDS:  # callers choose the needs: keep it bounded
                self._availability.clear()
            body = _dumps(availability_json(decide_availability(need, self.capacity), self.at))
            self._availability[key] = body
        return body

    def empty_list(self) -> bytes:
        return _dumps({"items": [], "at": self.at})


@dataclass
class CycleStats:
    cycles: int = 0
    last_at: float = 0.0
    last_duration_s: float = 0.0
    last_cpu_s: float = 0.0
    cpu_total_s: float = 0.0
    last_failures: dict[str, int] = field(default_factory=dict)
    failures_total: dict[str, int] = field(default_factory=dict)


def failure_kind(message: str) -> str:
    """``dcgm gpu-node-a: ...`` -> ``dcgm``."""
    return message.split(" ", 1)[0].split(":", 1)[0] or "unknown"


class HubGroups:
    """Group membership from the hub API, cached between refreshes."""

    def __init__(self, api_url: str, token: str, *, every_s: float = 60.0, timeout_s: float = 10.0) -> None:
        self.api_url, self.token = api_url.rstrip("/"), token
        self.every_s, self.timeout_s = every_s, timeout_s
        self.groups_of_user: dict[str, tuple[str, ...]] = {}
        self.error: str | None = None
        self._fetched_at = -1e18

    async def refresh(self, now: float) -> dict[str, tuple[str, ...]]:
        if now - self._fetched_at < self.every_s:
            return self.groups_of_user
        self._fetched_at = now
        try:
            members: dict[str, list[str]] = {}
            async for group in self._groups():
                for user in group.get("users") or []:
                    members.setdefault(str(user), []).append(str(group["name"]))
            self.groups_of_user = {u: tuple(sorted(g)) for u, g in members.items()}
            self.error = None
        except (HTTPClientError, OSError, ValueError, KeyError) as exc:
            self.error = f"hub groups: {exc}"
            log.warning("Cannot read the hub's groups: %s", exc)
        return self.groups_of_user

    async def _groups(self) -> Any:
        offset = 0
        client = AsyncHTTPClient()
        while True:
            url = f"{self.api_url}/groups?{urlencode({'offset': offset, 'limit': 200})}"
            request = HTTPRequest(
                url,
                headers={"Authorization": f"token {self.token}", "Accept": PAGINATION},
                request_timeout=self.timeout_s,
            )
            body = json.loads((await client.fetch(request)).body)
            items = body["items"] if isinstance(body, dict) else body
            for group in items:
                yield group
            following = (body.get("_pagination") or {}).get("next") if isinstance(body, dict) else None
            if not following:
                return
            offset = int(following["offset"])


class Collector:
    """Runs the cycles and holds the latest :class:`Snapshot`."""

    def __init__(
        self,
        source: Source,
        *,
        interval_s: float = 15.0,
        idle_util_percent: float = 5.0,
        history: History | None = None,
        accounting: Accounting | None = None,
        groups: HubGroups | None = None,
    ) -> None:
        self.source, self.interval_s, self.idle_util_percent = source, interval_s, idle_util_percent
        self.history = history or History()
        self.recent = RecentUsage()  # each workspace's last hour (its JupyterLab panel)
        self.accounting = accounting or Accounting()
        self.groups = groups
        self.snapshot: Snapshot | None = None
        self.stats = CycleStats()
        self._labels: dict[str, tuple[str, str]] = {}  # workspace key -> (profile, gpu_mode)
        self._task: asyncio.Task[None] | None = None
        self.updated = asyncio.Event()  # set after each published cycle (tests wait on it)

    async def cycle(self, now: float | None = None) -> Snapshot:
        """Run one cycle and publish its snapshot."""
        started, cpu0 = time.monotonic(), time.process_time()
        now = time.time() if now is None else now
        obs = await self.source.observe(now)
        groups_of_user: Mapping[str, tuple[str, ...]] = {}
        if self.groups is not None:
            groups_of_user = await self.groups.refresh(now)
            if self.groups.error:
                obs = replace(obs, failed_sources=(*obs.failed_sources, self.groups.error))
        # The pure work runs on a thread: the event loop keeps answering the API meanwhile (the
        # service sets a short GIL switch interval, so a request waits at most about a millisecond).
        result = await off_loop(attribute, obs, idle_util_percent=self.idle_util_percent)
        dt = now - self.snapshot.at if self.snapshot is not None else 0.0
        if dt > 4 * self.interval_s:  # a stall (or the first cycle): do not bill the gap
            dt = self.interval_s
        snapshot, series = await off_loop(self._account_and_render, now, dt, obs, result, groups_of_user)
        self.history.record(now, series)  # on the loop: the trends API reads the history
        replaced, self.snapshot = [self.snapshot], snapshot
        # Freeing the replaced snapshot at once (~300,000 objects) stopped the loop for ~0.1 s.
        await off_loop(release_gradually, replaced)
        self._count(obs, time.monotonic() - started, time.process_time() - cpu0, now)
        self.updated.set()
        return snapshot

    def _account_and_render(
        self,
        now: float,
        dt: float,
        obs: Observation,
        result: Attribution,
        groups_of_user: Mapping[str, tuple[str, ...]],
    ) -> tuple[Snapshot, dict[str, float]]:
        """The cycle's second pure step, on the worker thread (only the collector touches the
        accounting; the API reads the copies in snapshots): the accounting advanced, the snapshot
        rendered, and this cycle's trend values for the history."""
        self.accounting.advance(result.workspaces, now=now, dt=dt)
        accounts, accounting = self._accounts(result.workspaces)
        series = series_of(result.cells, result.workspaces)
        self.recent.record(now, result.workspaces)
        return _render(now, obs, result, groups_of_user, accounts, accounting), series

    def _count(self, obs: Observation, duration: float, cpu: float, now: float) -> None:
        s = self.stats
        s.cycles += 1
        s.last_at, s.last_duration_s, s.last_cpu_s = now, duration, cpu
        s.cpu_total_s += cpu
        failures: dict[str, int] = {}
        for message in obs.failed_sources:
            kind = failure_kind(message)
            failures[kind] = failures.get(kind, 0) + 1
            s.failures_total[kind] = s.failures_total.get(kind, 0) + 1
        for kind in s.failures_total:
            failures.setdefault(kind, 0)
        s.last_failures = failures

    def _accounts(
        self, figures: Sequence[WorkspaceFigures]
    ) -> tuple[tuple[Account, ...], dict[str, AccountEntry]]:
        for f in figures:
            self._labels[f.workspace.key] = (f.workspace.profile, f.workspace.gpu_mode)
        entries = self.accounting.entries()
        keep = {e.workspace for e in entries}
        self._labels = {k: v for k, v in self._labels.items() if k in keep}
        summed: dict[tuple[str, str, str, str], list[float]] = {}
        for e in entries:
            profile, mode = self._labels.get(e.workspace, ("", ""))
            acc = summed.setdefault((e.user, e.server, profile, mode), [0.0, 0.0, 0.0])
            acc[0] += e.allocated_gpu_seconds
            acc[1] += e.used_gpu_seconds
            acc[2] += e.idle_allocated_gpu_seconds
        accounts = tuple(Account(*labels, *values) for labels, values in sorted(summed.items()))
        return accounts, {e.workspace: e for e in entries}

    # ------------------------------------------------------------------------------- loop
    async def run(self, *, freeze_gc: bool = True) -> None:
        """Cycle every ``interval_s`` (a slow cycle delays the next; none overlap).

        With ``freeze_gc`` (the service's loop), what is alive after each cycle (the imported modules,
        the watched objects, the snapshot just published) is moved out of the cyclic garbage
        collector's reach (:func:`gc.freeze`) after a collection of the young generations. Without it,
        each cycle's new snapshot (hundreds of thousands of objects) triggers a full collection
        about once a cycle, 130-190 ms with the event loop stopped, which is what API requests waited
        for. Automatic collections of the oldest generation are off as well: during a cycle they scanned
        the cycle's new objects again and again (25-85 ms each, finding nothing), holding the GIL the
        API's loop waits for. Objects are still freed by reference counting when a snapshot is
        replaced; cyclic garbage waits for the full collection done every ``FULL_GC_EVERY_S``.
        """
        if freeze_gc:
            young, middle, _ = gc.get_threshold()
            gc.set_threshold(young, middle, NO_AUTOMATIC_FULL_GC)
        last_full = time.monotonic()
        while True:
            started = time.monotonic()
            try:
                await self.cycle()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("Collector cycle failed; trying again next interval")
            if freeze_gc:
                if time.monotonic() - last_full >= FULL_GC_EVERY_S:
                    gc.unfreeze()
                    gc.collect()
                    last_full = time.monotonic()
                gc.collect(1)
                gc.freeze()
            await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))

    def start(self) -> None:
        self._task = asyncio.ensure_future(self.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def _render(
    now: float,
    obs: Observation,
    result: Attribution,
    groups_of_user: Mapping[str, tuple[str, ...]],
    accounts: tuple[Account, ...],
    accounting: dict[str, AccountEntry],
) -> Snapshot:
    """One cycle's snapshot with every API body rendered (pure; run on a worker thread)."""
    by_user: dict[str, list[WorkspaceFigures]] = {}
    rows: list[bytes] = []
    rows_by_user: dict[str, list[bytes]] = {}
    detail: dict[tuple[str, str], bytes] = {}
    job_rows: list[bytes] = []
    job_rows_by_user: dict[str, list[bytes]] = {}
    at = _dumps(now)
    # serialised one workspace at a time: every row is encoded once (for the full list and its user's
    # list), and no cycle holds 2,000 workspaces' dicts at once
    for f, row_json, detail_json in views.workspace_views(result, accounting):
        user = f.workspace.user
        by_user.setdefault(user, []).append(f)
        row = _dumps(row_json)
        if f.workspace.is_job:  # a job's pod: its user's, but not the workspace of that (user, server)
            job_rows.append(row)
            job_rows_by_user.setdefault(user, []).append(row)
            continue
        rows.append(row)
        rows_by_user.setdefault(user, []).append(row)
        detail_json["at"] = now
        detail[(user, f.workspace.server)] = _dumps(detail_json)
    nodes = views.node_views(result)
    return Snapshot(
        at=now,
        failed_sources=obs.failed_sources,
        attribution=result,
        groups_of_user=dict(groups_of_user),
        nodes_body=_dumps_list(nodes, now),
        nodes_anonymous_body=_dumps_list(views.nodes_without_owners(nodes), now),
        workspaces_body=_joined_list(rows, at),
        workspaces_by_user={u: _joined_list(user_rows, at) for u, user_rows in rows_by_user.items()},
        detail=detail,
        figures_by_user={u: tuple(figs) for u, figs in by_user.items()},
        groups={g: views.group_json(t) for g, t in group_totals(result.workspaces, groups_of_user).items()},
        accounts=accounts,
        accounting=accounting,
        jobs_body=_joined_list(job_rows, at),
        jobs_by_user={u: _joined_list(user_rows, at) for u, user_rows in job_rows_by_user.items()},
        capacity=node_capacities(obs.nodes, obs.workspaces),
    )


def release_gradually(box: list[Any], depth: int = RELEASE_DEPTH) -> None:
    """Free what only ``box`` holds one container at a time (on a worker thread).

    Dropping the last reference to a large object graph frees it in one C-level cascade that holds the
    GIL throughout (a snapshot: ~0.1 s); taking its top ``depth`` levels apart here (the snapshot, its
    attribution, their tuples and dicts) lets the event loop's thread take the GIL between steps, while
    each item below (a workspace's figures, a cell) is still freed in one cheap go. Objects referenced
    elsewhere (shared with the new snapshot, or held by a request being answered) are only let go of.
    """
    pending = [(obj, 0) for obj in box]
    box.clear()
    while pending:
        obj, level = pending.pop()
        if level >= depth or sys.getrefcount(obj) > ONLY_HERE:
            continue
        below = level + 1
        if type(obj) is dict:
            pending.extend((v, below) for v in obj.values())
            obj.clear()
        elif type(obj) in (list, tuple):
            pending.extend((v, below) for v in obj)
            if type(obj) is list:
                obj.clear()
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            attributes = vars(obj)
            pending.extend((v, below) for v in attributes.values())
            attributes.clear()


def hub_groups_from_env(every_s: float) -> HubGroups | None:
    """Group membership through the hub API when the service runs under JupyterHub."""
    url, token = os.environ.get("JUPYTERHUB_API_URL"), os.environ.get("JUPYTERHUB_API_TOKEN")
    return HubGroups(url, token, every_s=every_s) if url and token else None
