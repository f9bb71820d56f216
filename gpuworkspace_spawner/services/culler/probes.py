"""Asking a single-user server about itself, through the proxy, in as few requests as the decision needs.

What each endpoint adds (jupyter_server 2.x, jupyter_server_terminals 0.5):

- ``/api/status`` ``last_activity`` is ``ServerApp.last_activity()`` (serverapp.py): the latest of API
  requests, ``kernel_manager.last_kernel_activity`` (every IOPub message of every kernel, kernel
  start and shutdown) and ``terminal_last_activity`` (set by the terminal websocket on every message
  either way). It also counts the kernels.
- ``/api/kernels`` adds ``execution_state``: a kernel busy with no output sends nothing, so only
  ``busy`` shows it is working.
- ``/api/terminals`` adds output with no browser attached: terminado's ``pre_pty_read_hook`` moves a
  terminal's own ``last_activity`` on every read of its pty, which ``/api/status`` never sees.

Every GET carries ``no_track_activity=1``: without it jupyter_server's ``APIHandler`` records the
request as the server's activity, and the culler's own probes would keep every server active.

The hub's ``last_activity`` cannot stand in for asking: the probes pass through the proxy, which
records each proxied request as the route's activity, and the hub copies that into the server's
``last_activity`` (``JupyterHub.update_last_activity``). So what keeps a server unasked is what it
showed itself in earlier cycles (:class:`Seen`): the status ``last_activity``, the kernels and
terminals with theirs, a busy kernel counting as activity at the time it was seen busy.

So the probe is staged; before and after each step it asks the policy (``judge``) with the evidence so
far and, where that is missing, the most idle reading of it (no busy kernel, no terminal). The next
request is made only if that reading would warn or stop the server for idleness, or could withdraw an
idle warning:

0. the remembered evidence (or the GPU, or an exemption) alone keeps it: no request; nothing is
   remembered after the server's (re)start or the culler's, so then it is asked;
1. ``/api/status``;
2. ``/api/kernels``, when status counts kernels; reused without a request when status is unchanged
   since they were read (same start, same ``last_activity``, same count: no kernel sent anything, so
   none changed its execution state);
3. ``/api/terminals``, only before the first idle warning and before an idle stop: terminal output
   after the first warning shows at the latest before the stop, which it then prevents (and the
   warnings are withdrawn), so a later stage may be shown that new output would have withdrawn.

Credentials: every request to a server carries that server's own probe token
(:mod:`gpuworkspace_spawner.probecredentials`: scope ``access:servers!server=<user>/<server>``, issued by
the spawner at each start), never the culler's token; a server without one is not asked (the hub's
``last_activity`` stands in). Everything a server answers is hostile input: answers are read up to
:data:`MAX_SERVER_ANSWER_BYTES`, lists up to :data:`MAX_ITEMS`, names cut to :data:`MAX_NAME`, and a
session path is checkpointed only if it is a plain relative path (no ``..``, no control characters).

Per server and cycle: 0 while what it showed keeps it (an active server is asked about once per idle
timeout less the first lead time); 1 when status does, and at later warning stages; 2 or, with
kernels, 3 in the cycle of its first warning; 2 before the stop.
Failures never raise: :class:`.Probe` ``error`` says what failed and keeps what was read before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from urllib.parse import quote, urljoin

from .hubapi import Http, HttpError, parse_time
from .model import Action, Decision, Kernel, Probe, Reason, Terminal, Workspace
from .policy import runs_code

log = logging.getLogger("gpuworkspace.culler")

Judge = Callable[[Workspace], Decision]  # the policy, with this workspace's warnings, at the cycle's now
_CacheKey = tuple[datetime | None, datetime | None, int]  # status: started, last_activity, kernel count
# jupyter_server's APIHandler.update_api_activity records every authenticated API request as the
# server's activity (ServerApp.last_activity, /api/status), unless it carries this query argument
UNTRACKED = "?no_track_activity=1"
MAX_SERVER_ANSWER_BYTES = 1024 * 1024  # a status, kernel, terminal or session list: a few KiB in practice
MAX_ITEMS = 1000  # kernels, terminals or sessions read from one answer
MAX_NAME = 128  # characters kept of a kernel id or terminal name
MAX_PATH = 4096  # characters of a notebook path


@dataclass(frozen=True)
class Status:
    """``GET api/status``."""

    started: datetime | None
    last_activity: datetime | None
    kernels: int
    connections: int = 0


def parse_status(body: Any) -> Status:
    body = body if isinstance(body, Mapping) else {}
    return Status(
        started=parse_time(body.get("started")),
        last_activity=parse_time(body.get("last_activity")),
        kernels=_int(body.get("kernels")),
        connections=_int(body.get("connections")),
    )


def _status_key(status: Status) -> _CacheKey:
    return (status.started, status.last_activity, status.kernels)


def parse_kernels(body: Any) -> tuple[Kernel, ...]:
    return tuple(
        Kernel(
            id=_short(k.get("id", "")),
            execution_state=str(k.get("execution_state") or "unknown"),
            last_activity=parse_time(k.get("last_activity")),
            connections=_int(k.get("connections")),
        )
        for k in _items(body)
    )


def parse_terminals(body: Any) -> tuple[Terminal, ...]:
    return tuple(
        Terminal(name=_short(t.get("name", "")), last_activity=parse_time(t.get("last_activity")))
        for t in _items(body)
    )


def _items(body: Any) -> Iterable[Mapping[str, Any]]:
    return [x for x in body[:MAX_ITEMS] if isinstance(x, Mapping)] if isinstance(body, list) else []


def _short(value: Any) -> str:
    """A name from a server, printable and bounded (it reaches logs, audit records and the status page)."""
    text = value if isinstance(value, str) else str(value) if isinstance(value, int) else ""
    return "".join(ch for ch in text[:MAX_NAME] if ch.isprintable())


def safe_notebook_path(path: Any) -> str | None:
    """A session's notebook path fit to put in a contents URL, else None (hostile or malformed).

    Plain relative paths only: no ``..`` or empty segment, no leading ``/``, no backslash, no control
    or non-printable character, at most :data:`MAX_PATH` characters.
    """
    if not isinstance(path, str) or not path or len(path) > MAX_PATH:
        return None
    if path.startswith("/") or "\\" in path or not path.isprintable():
        return None
    if any(part in ("", ".", "..") for part in path.split("/")):
        return None
    return path


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def acting_on_idleness(decision: Decision) -> bool:
    """Would this decision warn or stop the server for idleness?"""
    return decision.action in (Action.WARN, Action.STOP) and decision.reason is Reason.IDLE


def _first_warning_or_stop(decision: Decision) -> bool:
    """The moments terminals are read: before the first idle warning and before an idle stop."""
    return acting_on_idleness(decision) and (decision.action is Action.STOP or decision.stage == 0)


def could_withdraw(decision: Decision, idle_warned: bool) -> bool:
    """Could newer activity change this decision (act on idleness, or withdraw the idle warnings)?"""
    if decision.action is Action.EXEMPT or decision.cancels_warnings:
        return False
    return acting_on_idleness(decision) or (idle_warned and decision.reason is Reason.IDLE)


@dataclass(frozen=True)
class Seen:
    """What one server showed about itself, remembered between cycles.

    Every time in it is a lower bound of the server's activity for as long as the same server runs
    (its activity only moves forward), so judging with it alone can delay a stop, never hasten one.
    """

    started: datetime | None  # the hub's start time of the server: another start, another server
    process: datetime | None  # /api/status ``started``: the single-user process it was read from
    last_activity: datetime | None  # /api/status
    kernels: tuple[Kernel, ...] | None = None  # as read, states included (reused while status is unchanged)
    kernels_at: datetime | None = None  # when they were read or confirmed: a busy kernel was active then
    kernels_status: _CacheKey | None = None  # the status they went with
    terminals: tuple[Terminal, ...] | None = None

    def probe(self) -> Probe:
        """The remembered evidence as a probe: a kernel seen busy counts as active when it was seen."""
        kernels = None
        if self.kernels is not None:
            kernels = tuple(_as_of(k, self.kernels_at) for k in self.kernels)
        return Probe(last_activity=self.last_activity, kernels=kernels, terminals=self.terminals)


def _as_of(kernel: Kernel, seen_at: datetime | None) -> Kernel:
    if seen_at is None or not runs_code(kernel, seen_at):
        return kernel
    last = max(kernel.last_activity, seen_at) if kernel.last_activity else seen_at
    return replace(kernel, execution_state="unknown", last_activity=last)


class ServerProber:
    """Probes single-user servers at ``{proxy_url}{server url}api/...``, each with its own probe token.

    Every request that jupyter_server would record as activity carries ``no_track_activity=1``
    (``APIHandler.update_api_activity``); ``api/status`` records none anyway.
    """

    def __init__(self, http: Http, proxy_url: str) -> None:
        self.http = http
        self.proxy_url = proxy_url
        self._seen: dict[tuple[str, str], Seen] = {}
        self._unprobeable: set[tuple[str, str]] = set()  # said once: no probe token

    def api(self, server_url: str, path: str) -> str:
        """The server's API URL: the hub's URL path for it (base_url included) on the proxy's origin."""
        return urljoin(self.proxy_url, server_url.rstrip("/") + "/api/" + path)

    def remembered(self, workspace: Workspace) -> Seen | None:
        """What this server showed in earlier cycles; None after a (re)start or a culler restart."""
        seen = self._seen.get(workspace.key)
        if seen is not None and seen.started != workspace.started:
            del self._seen[workspace.key]
            return None
        return seen

    async def probe(
        self,
        workspace: Workspace,
        server_url: str,
        judge: Judge,
        *,
        token: str | None,
        idle_warned: bool,
        now: datetime,
    ) -> tuple[Probe | None, bool]:
        """The evidence the decision needs, asking no more than it needs (see the module docstring).

        Returns the evidence and whether the server was asked. No request when the remembered
        evidence (or the GPU, or an exemption) already keeps the server: the evidence is then the
        remembered one (None if nothing is remembered). No request either without the server's probe
        ``token``: the culler's own token never goes to a server.
        """
        seen = self.remembered(workspace)
        known = seen.probe() if seen is not None else None
        if not token:
            self._note_unprobeable(workspace)
            return known, False
        if not could_withdraw(judge(_most_idle(workspace, known or Probe())), idle_warned):
            return known, False
        probe = Probe()
        status: Status | None = None
        try:
            status = parse_status(await self._get(server_url, "status", workspace, token))
            same = seen is not None and seen.process == status.started
            probe = Probe(
                last_activity=status.last_activity,
                kernels=() if status.kernels == 0 else None,
                terminals=seen.terminals if seen is not None and same else None,
            )
            if not could_withdraw(judge(_most_idle(workspace, probe)), idle_warned):
                return self._remember(workspace, seen, status, probe, now), True
            if status.kernels:
                kernels = await self._kernels_of(workspace, server_url, token, status, seen)
                probe = replace(probe, kernels=kernels)
                if not could_withdraw(judge(_most_idle(workspace, probe)), idle_warned):
                    return self._remember(workspace, seen, status, probe, now), True
            if _first_warning_or_stop(judge(_most_idle(workspace, probe))):
                terminals = parse_terminals(await self._get(server_url, "terminals", workspace, token))
                probe = replace(probe, terminals=terminals)
        except HttpError as e:
            log.warning("probe of %s/%s failed: %s", workspace.user, workspace.server or "(default)", e)
            if status is not None:
                self._remember(workspace, seen, status, probe, now)
            return replace(probe, error=str(e)), True
        return self._remember(workspace, seen, status, probe, now), True

    def _remember(
        self, ws: Workspace, seen: Seen | None, status: Status, probe: Probe, now: datetime
    ) -> Probe:
        """Keep what this cycle read (kernels and terminals not read: the earlier ones); the probe."""
        same = seen is not None and seen.process == status.started
        kernels, kernels_at, kernels_status = None, None, None
        if probe.kernels is not None:
            kernels, kernels_at, kernels_status = probe.kernels, now, _status_key(status)
        elif seen is not None and same:
            kernels, kernels_at, kernels_status = seen.kernels, seen.kernels_at, seen.kernels_status
        self._seen[ws.key] = Seen(
            started=ws.started,
            process=status.started,
            last_activity=status.last_activity,
            kernels=kernels,
            kernels_at=kernels_at,
            kernels_status=kernels_status,
            terminals=probe.terminals,
        )
        return probe

    async def _kernels_of(
        self, ws: Workspace, server_url: str, token: str, status: Status, seen: Seen | None
    ) -> tuple[Kernel, ...]:
        """The kernels: reused while status is unchanged (no kernel sent anything), else read."""
        if seen is not None and seen.kernels is not None and seen.kernels_status == _status_key(status):
            return seen.kernels
        return parse_kernels(await self._get(server_url, "kernels", ws, token))

    def _note_unprobeable(self, ws: Workspace) -> None:
        """Say once per server (and start) that it has no probe token and is judged without asking it."""
        if ws.key not in self._unprobeable:
            self._unprobeable.add(ws.key)
            log.info(
                "%s has no probe token (not started by GPUWorkspaceSpawner, or before it issued them):"
                " judged on the hub's last_activity, not asked",
                _name(ws),
            )

    def keep_only(self, keys: Iterable[tuple[str, str]]) -> None:
        """Forget the servers no longer running."""
        alive = set(keys)
        for key in [k for k in self._seen if k not in alive]:
            del self._seen[key]
        self._unprobeable &= alive

    async def _get(self, server_url: str, path: str, ws: Workspace, token: str) -> Any:
        """GET a server API without it counting as activity (``no_track_activity``, see the class)."""
        url = self.api(server_url, path) + UNTRACKED
        return await self.http.get_json(
            url, what=f"{path} of {_name(ws)}", token=_required(token), max_bytes=MAX_SERVER_ANSWER_BYTES
        )

    async def checkpoint_open_notebooks(
        self, server_url: str, ws: Workspace, *, token: str | None
    ) -> list[str]:
        """Checkpoint the saved state of each notebook open in a session; the paths checkpointed.

        This saves nothing that is not on disk already: unsaved edits live in the browser, and
        jupyter_server has no "save all" API. What it adds: ``File > Revert to checkpoint`` after the
        restart returns each open notebook to its state at the stop, whatever autosave writes later.
        """
        if not token:
            raise HttpError(f"sessions of {_name(ws)}", server_url, None, "no probe token: not asked")
        sessions = await self._get(server_url, "sessions", ws, token)
        paths, refused = [], 0
        for session in _items(sessions):
            path = safe_notebook_path(session.get("path")) if _is_notebook(session) else None
            if path is None:
                refused += _is_notebook(session)
                continue
            paths.append(path)
        if refused:
            log.warning("%s: %d session path(s) refused (not a plain relative path)", _name(ws), refused)
        for path in sorted(set(paths)):
            # no no_track_activity here: a write just before the stop, whose activity no cycle reads
            url = self.api(server_url, f"contents/{quote(path, safe='/')}/checkpoints")
            response = await self.http.fetch(
                url,
                what=f"checkpoint {path}",
                method="POST",
                token=_required(token),
                max_bytes=MAX_SERVER_ANSWER_BYTES,
            )
            if response.code != 201:  # noqa: PLR2004 - jupyter_server answers 201 Created
                raise HttpError(f"checkpoint {path} of {_name(ws)}", url, response.code, "not created")
        return sorted(set(paths))


def _required(token: str) -> str:
    """The server's own token; an empty one would make :class:`.Http` fall back to the culler's."""
    if not token:
        raise ValueError("a request to a single-user server needs that server's probe token")
    return token


def _is_notebook(session: Mapping[str, Any]) -> bool:
    path = session.get("path")
    return session.get("type", "notebook") == "notebook" and isinstance(path, str) and bool(path)


def _most_idle(workspace: Workspace, probe: Probe) -> Workspace:
    """The workspace with what was not asked read as idle: no busy kernel, no terminal."""
    filled = replace(
        probe,
        kernels=probe.kernels if probe.kernels is not None else (),
        terminals=probe.terminals if probe.terminals is not None else (),
    )
    return replace(workspace, probe=filled)


def _name(ws: Workspace) -> str:
    return f"{ws.user}/{ws.server}" if ws.server else ws.user
