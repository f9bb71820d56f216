"""The culler's HTTP seam (:class:`Http`, which counts every request) and its hub REST client (:class:`HubApi`).

The hub calls need the service role of the issue: ``list:users`` and ``read:servers`` to list running
servers, ``read:users:activity`` for ``last_activity``, ``delete:servers`` to stop one
(``read:users:groups`` adds the users' groups, for group exemptions, where granted), and
``admin:server_state`` for each server's probe token (:mod:`gpuworkspace_spawner.probecredentials`):
the only credential ever sent to a single-user server, which opens that server alone.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest, HTTPResponse

from ...probecredentials import probe_token_from_state

log = logging.getLogger("gpuworkspace.culler")

PAGINATION = "application/jupyterhub-pagination+json"
PAGE_LIMIT = 200  # JupyterHub's default api_page_max_limit: fewer pages, fewer requests
PROFILE_OPTION = "profile"  # catalog.options.KNOWN_KEYS: the profile slug in user_options
MAX_PAGES = 10_000  # a hub that never ends its pagination is a bug, not a reason to loop forever
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # the hub's and the attribution service's answers


class HttpError(Exception):
    """A request that failed: no answer (``status`` None), or an answer the caller cannot use."""

    def __init__(self, what: str, url: str, status: int | None, detail: str) -> None:
        super().__init__(f"{what}: {f'HTTP {status}' if status else 'no answer'} from {url}: {detail}")
        self.url, self.status, self.detail = url, status, detail


class AnswerTooLarge(Exception):
    """An answer longer than the request allowed (raised inside tornado's streaming callback)."""


class Http:
    """One tornado client for the hub, the single-user servers and the attribution service.

    Counts every request it sends (``requests``), which :class:`.CycleReport` reports and the request
    budget is measured by; answers of any status come back, failures to get one raise :class:`HttpError`.
    Every request carries the service's token unless ``token=`` names another one: the single-user
    servers get only their own probe token (:class:`.probes.ServerCalls`), never this one. Answers are
    read up to ``max_bytes`` (a server that sends more is cut off, not buffered).
    """

    def __init__(self, token: str, *, timeout: float = 10.0, max_clients: int = 20) -> None:
        self.token = token
        self.timeout = timeout
        self.requests = 0
        self._client = AsyncHTTPClient(force_instance=True, max_clients=max_clients)

    async def fetch(
        self,
        url: str,
        *,
        what: str,
        method: str = "GET",
        headers: Mapping[str, str] | None = None,
        body: str | None = None,
        token: str | None = None,
        max_bytes: int = MAX_ANSWER_BYTES,
    ) -> HTTPResponse:
        """Send one request with the service token (or ``token``); ``what`` names it in errors."""
        self.requests += 1
        chunks: list[bytes] = []
        received = 0

        def keep(chunk: bytes) -> None:
            nonlocal received
            received += len(chunk)
            if received > max_bytes:
                raise AnswerTooLarge(f"answer longer than {max_bytes} bytes")
            chunks.append(chunk)

        request = HTTPRequest(
            url,
            method=method,
            headers={"Authorization": f"token {token or self.token}", **(headers or {})},
            body=body if body is not None else ("" if method in ("POST", "PUT", "PATCH") else None),
            allow_nonstandard_methods=method == "DELETE",
            connect_timeout=self.timeout,
            request_timeout=self.timeout,
            follow_redirects=False,
            streaming_callback=keep,
        )
        try:
            response = await self._client.fetch(request, raise_error=False)
        except AnswerTooLarge as e:
            raise HttpError(what, url, None, str(e)) from e
        except HTTPClientError as e:  # timeouts (599) and the like
            raise HttpError(what, url, None, str(e)) from e
        except OSError as e:
            raise HttpError(what, url, None, f"{type(e).__name__}: {e}") from e
        if isinstance(response.error, AnswerTooLarge):
            raise HttpError(what, url, None, str(response.error))
        response.buffer = io.BytesIO(b"".join(chunks))  # the streamed body, as tornado would have kept it
        return response

    async def get_json(
        self,
        url: str,
        *,
        what: str,
        headers: Mapping[str, str] | None = None,
        token: str | None = None,
        max_bytes: int = MAX_ANSWER_BYTES,
    ) -> Any:
        response = await self.fetch(url, what=what, headers=headers, token=token, max_bytes=max_bytes)
        if response.code != 200:  # noqa: PLR2004 - HTTP OK
            raise HttpError(what, url, response.code, _excerpt(response))
        try:
            return json.loads(response.body)
        except ValueError as e:
            raise HttpError(what, url, response.code, f"not JSON: {e}") from e

    def close(self) -> None:
        self._client.close()


def _excerpt(response: HTTPResponse) -> str:
    """The start of an answer for an error message: printable characters only (it reaches logs and pages)."""
    text = (response.body or b"")[:800].decode("utf-8", "replace").strip()
    text = "".join(ch if ch.isprintable() else " " for ch in text)[:200]
    return text or "".join(ch for ch in (response.reason or "")[:200] if ch.isprintable())


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 timestamp from a JupyterHub or Jupyter server API (``Z`` suffix), as aware UTC."""
    if not isinstance(value, str) or not value:
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _int(value: Any, fallback: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else fallback


def _page_items(body: Any) -> list[Mapping[str, Any]]:
    """The user models of one page: a plain list, or the envelope's ``items``."""
    items = body if isinstance(body, list) else (body.get("items") if isinstance(body, Mapping) else None)
    return [u for u in items or () if isinstance(u, Mapping)]


@dataclass(frozen=True)
class RunningServer:
    """One server as the hub's ``GET /users`` lists it."""

    user: str
    name: str  # "" for the default server
    url: str  # the server's URL path under the proxy ("/user/alice/gpu/"), or a full URL with subdomains
    ready: bool = True
    pending: str | None = None
    started: datetime | None = None
    last_activity: datetime | None = None
    user_options: Mapping[str, Any] = field(default_factory=dict)
    groups: frozenset[str] = frozenset()
    # the server's own probe token from its state (None: none issued, or no admin:server_state)
    probe_token: str | None = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.user, self.name)

    @property
    def profile(self) -> str | None:
        slug = self.user_options.get(PROFILE_OPTION)
        return slug if isinstance(slug, str) and slug else None


def parse_user(user: Mapping[str, Any]) -> list[RunningServer]:
    """The servers of one user model; a model without ``servers`` (no read:servers) has none."""
    name = str(user.get("name") or "")
    groups = frozenset(str(g) for g in user.get("groups") or ())
    servers = user.get("servers") or {}
    out = []
    for key, s in servers.items():
        if not isinstance(s, Mapping):
            continue
        options = s.get("user_options")
        out.append(
            RunningServer(
                user=name,
                name=str(s.get("name", key) or ""),
                url=str(s.get("url") or ""),
                ready=bool(s.get("ready")),
                pending=s.get("pending") or None,
                started=parse_time(s.get("started")),
                last_activity=parse_time(s.get("last_activity")),
                user_options=options if isinstance(options, Mapping) else {},
                groups=groups,
                probe_token=probe_token_from_state(s.get("state")),
            )
        )
    return out


class HubApi:
    """The hub's REST API, as far as the culler uses it."""

    def __init__(self, http: Http, api_url: str, *, page_limit: int = PAGE_LIMIT) -> None:
        self.http = http
        self.api_url = api_url.rstrip("/") + "/"
        self.page_limit = page_limit

    async def running_servers(self) -> list[RunningServer]:
        """Every ready server, one paginated ``GET /users?state=ready`` walk (1 request per page).

        JupyterHub filters ``state=ready`` *after* paging (``apihandlers/users.py``: the ``ready``
        post-filter runs on each page's users), so a page can be short or empty while
        ``_pagination.next`` still points further: the walk follows ``next`` until it is null. A hub
        that answers a plain list (no pagination envelope) is walked until a page shorter than the
        limit, or one that lists no user not seen before (a hub that ignores ``offset``).
        """
        servers: dict[tuple[str, str], RunningServer] = {}
        users: set[str] = set()
        offset = 0
        for _ in range(MAX_PAGES):
            url = f"{self.api_url}users?state=ready&limit={self.page_limit}&offset={offset}"
            body = await self.http.get_json(url, what="list servers", headers={"Accept": PAGINATION})
            items = _page_items(body)
            new_users = {str(u.get("name") or "") for u in items} - users
            users |= new_users
            for user in items:
                servers.update((s.key, s) for s in parse_user(user) if s.ready)
            if isinstance(body, list):  # a hub without the pagination envelope
                if len(items) < self.page_limit or not new_users:
                    return list(servers.values())
                offset += len(items)
                continue
            pagination = body.get("_pagination") if isinstance(body, Mapping) else None
            if not isinstance(pagination, Mapping) or not isinstance(pagination.get("next"), Mapping):
                return list(servers.values())
            step = _int(pagination.get("limit"), self.page_limit)  # the hub's, where it lowered ours
            after = _int(pagination["next"].get("offset"), offset + step)
            if after <= offset:  # a hub that would send us round in circles
                raise HttpError("list servers", url, 200, f"next page offset {after} is not after {offset}")
            offset = after
        raise HttpError("list servers", self.api_url, None, f"more than {MAX_PAGES} pages")

    def server_url(self, user: str, server: str) -> str:
        base = f"{self.api_url}users/{quote(user, safe='')}"
        return f"{base}/servers/{quote(server, safe='')}" if server else f"{base}/server"

    async def stop(self, user: str, server: str, *, remove: bool = False) -> str:
        """Stop a server: "stopped" (204), "stopping" (202) or "gone" (404, already stopped).

        No body unless ``remove``: ``{"remove": true}`` also deletes a named server's entry from the
        hub (the server can no longer be started again under that name from its row on the home page).
        Even then our spawner keeps the disk: only ``delete_forever`` moves it to retention.
        """
        url = self.server_url(user, server)
        body = json.dumps({"remove": True}) if remove and server else None
        headers = {"Content-Type": "application/json"} if body else None
        response = await self.http.fetch(url, what="stop server", method="DELETE", headers=headers, body=body)
        outcome = {204: "stopped", 202: "stopping", 404: "gone"}.get(response.code)
        if outcome is None:
            raise HttpError(f"stop {user}/{server}", url, response.code, _excerpt(response))
        return outcome
