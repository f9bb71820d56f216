"""Input bounds of every HTTP service (disks, attribution, culler), served as each service serves itself
(:func:`gpuworkspace_spawner.services.serving.http_server` with the service's default limit):

- a request body over the limit (1 MiB) is refused with 413 and a JSON error before it is read: the
  client sends the headers of a 100 MB body and only a sliver of it, and gets its answer;
- every route answers a bad query value (empty, huge, non-numeric, out of range, unicode, control
  characters, invalid UTF-8, repeated) with less than 500, and a 4xx names the parameter.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPResponse
from tornado.testing import bind_unused_port

from gpuworkspace_spawner.services import serving
from gpuworkspace_spawner.services.attribution import app as attribution_app
from gpuworkspace_spawner.services.attribution.collector import Collector
from gpuworkspace_spawner.services.attribution.handlers import State
from gpuworkspace_spawner.services.culler import app as culler_app
from gpuworkspace_spawner.services.culler.web import make_app as make_culler_app
from gpuworkspace_spawner.services.disks import app as disks_app
from gpuworkspace_spawner.services.disks.metrics import DiskMetrics, VolumeStats
from gpuworkspace_spawner.services.kubelets import KubeletAccess
from gpuworkspace_spawner.services.serving import DEFAULT_MAX_BODY_BYTES

from .attribution.test_app import NOW as ATTRIBUTION_NOW
from .attribution.test_app import PREFIX as ATTRIBUTION
from .attribution.test_app import SERVICE as ATTRIBUTION_SERVICE
from .attribution.test_app import FakeGroups, FakeSource
from .attribution.test_app import FakeHubAuth as AttributionHubAuth
from .culler.test_web import NOW as CULLER_NOW
from .culler.test_web import PREFIX as CULLER
from .culler.test_web import FakeHubAuth as CullerHubAuth
from .culler.test_web import prepared_state

DISKS = "/services/gpuworkspace-disks/"
MIB = 1 << 20


class FakeDiskOps:
    """What the disk service's handlers call, with no cluster: no disks anywhere."""

    @dataclass(frozen=True)
    class Settings:
        service_name: str = "gpuworkspace-disks"

    settings = Settings()

    async def workspaces(self, caller: Any, user: str | None = None, server: str | None = None) -> list[Any]:
        return []

    async def snapshots(self, caller: Any, claim: str) -> list[Any]:
        return []

    async def claims(self) -> list[Any]:
        return []

    async def refresh_stats(self) -> None:
        return None


class DiskHubAuth(AttributionHubAuth):
    """The disk service also tells token logins from cookie logins."""

    async def _user(self, handler: Any) -> dict[str, Any] | None:
        handler._token_authenticated = True
        return await super()._user(handler)


async def attribution() -> web.Application:
    collector = Collector(FakeSource(), groups=FakeGroups())  # type: ignore[arg-type]
    await collector.cycle(ATTRIBUTION_NOW)
    state = State(collector, AttributionHubAuth(), prefix=ATTRIBUTION, service=ATTRIBUTION_SERVICE)
    return attribution_app.make_app(state)


async def culler() -> web.Application:
    return make_culler_app(
        prepared_state(), hub_auth=CullerHubAuth(), prefix=CULLER, clock=lambda: CULLER_NOW
    )


async def disks() -> web.Application:
    metrics = DiskMetrics(VolumeStats(KubeletAccess(scheme="http")), 0.9)
    return disks_app.make_app(FakeDiskOps(), DiskHubAuth(), DISKS, metrics, metrics_public=False)  # type: ignore[arg-type]


SERVICES: dict[str, Callable[[], Any]] = {"disks": disks, "attribution": attribution, "culler": culler}


def default_limits() -> Iterator[tuple[str, int]]:
    """Each service's own default, as its command line or traitlets set it."""
    yield "disks", disks_app._parser().parse_args([]).max_body_bytes
    yield "attribution", attribution_app._parser().parse_args([]).max_body_bytes
    yield "culler", culler_app.CullerApp().max_body_bytes


@pytest.fixture(params=list(SERVICES))
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, int]]:
    """(service, port): the service's app behind the server every service listens with."""
    app = await SERVICES[request.param]()
    server = serving.http_server(app, max_body_bytes=DEFAULT_MAX_BODY_BYTES)
    sock, port = bind_unused_port()
    server.add_sockets([sock])
    try:
        yield request.param, port
    finally:
        server.stop()


def test_every_service_listens_through_the_body_limit_with_a_1_mib_default() -> None:
    assert dict(default_limits()) == {"disks": MIB, "attribution": MIB, "culler": MIB}
    for module in (disks_app, attribution_app, culler_app):
        source = inspect.getsource(module)
        assert "http_server(" in source and ".listen(port, host, xheaders" not in source, module.__name__


# ------------------------------------------------------------------------------------ bodies
POSTS = {  # a route of each service that takes a body (or would: the answer comes first)
    "disks": f"{DISKS}api/v1/disks/home-alice/resize",
    "attribution": f"{ATTRIBUTION}api/v1/nodes",
    "culler": f"{CULLER}api/v1/decisions",
}


async def raw_post(port: int, path: str, length: int, send: int) -> tuple[int, dict[str, str], bytes]:
    """POST declaring ``length`` body bytes, sending only ``send`` of them; the answer and whether the
    server closed the connection (EOF) after it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: token admin\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
        )
        writer.write(head.encode() + b"x" * send)
        await writer.drain()
        # a hang guard, not a timing assertion: a server that waited for the rest would never answer
        raw = await asyncio.wait_for(reader.read(), timeout=30)
    finally:
        writer.close()
    status_line, _, rest = raw.partition(b"\r\n")
    header_block, _, body = rest.partition(b"\r\n\r\n")
    headers = dict(line.decode().split(": ", 1) for line in header_block.split(b"\r\n") if line)
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize("length", [100_000_000, MIB + 1], ids=["100MB", "one-byte-over"])
async def test_a_body_over_the_limit_is_refused_413_unread(served: tuple[str, int], length: int) -> None:
    service, port = served
    status, headers, body = await raw_post(port, POSTS[service], length, send=min(length, 64 << 10))
    assert status == 413 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {
        "status": 413,
        "message": f"the request body ({length} bytes) is over the limit of {MIB} bytes",
    }


async def test_a_body_at_the_limit_reaches_the_handler(served: tuple[str, int]) -> None:
    service, port = served
    client = AsyncHTTPClient()
    try:
        response = await client.fetch(
            f"http://127.0.0.1:{port}{POSTS[service]}",
            method="POST",
            body=b"x" * MIB,
            headers={"Authorization": "token admin"},
        )
    except HTTPClientError as exc:
        assert exc.response is not None
        response = exc.response
    # not the server's refusal (the disk service's handlers have their own, smaller, bound: 16 KiB)
    assert b"over the limit of" not in response.body and response.code < 500, response.body


async def test_a_chunked_body_over_the_limit_is_cut(served: tuple[str, int]) -> None:
    """No length to refuse up front: tornado's own bound closes the connection at the limit."""
    service, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"POST {POSTS[service]} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"x" * (256 << 10)
    writer.write(head.encode())
    try:
        for _ in range(8):  # 2 MiB
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
    except ConnectionError:
        pass  # closed while sending: cut
    try:
        raw = await asyncio.wait_for(reader.read(), timeout=30)
    except ConnectionResetError:
        raw = b""  # closed with the rest unread: the kernel resets the connection
    writer.close()
    assert raw == b"" or raw.startswith(b"HTTP/1.1 400"), raw[:200]


# ------------------------------------------------------------------------------ query values
ROUTES: dict[str, dict[str, tuple[str, ...]]] = {  # path → the query parameters it reads
    "disks": {
        f"{DISKS}api/v1/workspaces": (),
        f"{DISKS}api/v1/workspaces/alice/default": (),
        f"{DISKS}api/v1/disks/home-alice/snapshots": (),
        f"{DISKS}metrics": (),
    },
    "attribution": {
        ATTRIBUTION: ("fragment",),
        f"{ATTRIBUTION}api/v1/nodes": (),
        f"{ATTRIBUTION}api/v1/workspaces": ("user",),
        f"{ATTRIBUTION}api/v1/workspaces/alice/default": (),
        f"{ATTRIBUTION}api/v1/top": ("by", "limit"),
        f"{ATTRIBUTION}api/v1/groups": (),
        f"{ATTRIBUTION}api/v1/trends": ("window", "series"),
        f"{ATTRIBUTION}api/v1/status": (),
        f"{ATTRIBUTION}metrics": (),
    },
    "culler": {
        CULLER: (),
        f"{CULLER}api/v1/decisions": ("action",),
        f"{CULLER}api/v1/notices": (),
        f"{CULLER}api/v1/status": (),
    },
}
BAD_VALUES = {
    "empty": "",
    "blank": "   ",
    "huge": "9" * 4000,
    "non-numeric": "abc",
    "negative": "-1",
    "float-overflow": "1e999",
    "nan": "nan",
    "unicode": "ünïcødé-名前-🙂",
    "control": "a\x00b\x1bc",
    "path": "../../etc",
    "comma-soup": ",,,:",
    "window-max": "367d",
    "a-user-series": "user::gpu_util",
    "scope-syntax": "alice!group=admins",
}
RAW_QUERIES = {"invalid-utf8": "%ff%fe", "repeated": "{p}=1&{p}=&{p}=x", "no-equals": "{p}"}


def queries(service: str) -> Iterator[Any]:
    for path, params in ROUTES[service].items():
        for param in (*params, "unknown"):  # an unknown parameter is ignored everywhere
            for name, value in BAD_VALUES.items():
                yield pytest.param(path, param, f"{param}={quote(value)}", id=f"{path}?{param}:{name}")
            for name, raw in RAW_QUERIES.items():
                query = raw.format(p=param) if "{p}" in raw else f"{param}={raw}"
                yield pytest.param(path, param, query, id=f"{path}?{param}:{name}")


def strict_json(body: bytes) -> bool:
    def refuse(name: str) -> Any:
        raise ValueError(name)

    try:
        json.loads(body, parse_constant=refuse)
    except ValueError:
        return False
    return True


async def fetch(port: int, path: str, query: str, token: str) -> HTTPResponse:
    try:
        return await AsyncHTTPClient().fetch(
            f"http://127.0.0.1:{port}{path}?{query}",
            headers={"Authorization": f"token {token}"},
            follow_redirects=False,
        )
    except HTTPClientError as exc:
        assert exc.response is not None
        return exc.response


async def test_every_route_answers_every_bad_query_value_below_500(served: tuple[str, int]) -> None:
    service, port = served
    failures: list[str] = []
    for case in queries(service):
        path, param, query = case.values
        for token in ("admin", "bob"):
            response = await fetch(port, path, query, token)
            where = f"{path}?{query} as {token}: {response.code} {response.body[:200]!r}"
            if response.code >= 500:
                failures.append(where)
            elif "/api/v1/" in path and not strict_json(response.body):
                failures.append(f"{where}: not strict JSON (NaN or Infinity)")
            elif response.code == 400 and "/api/v1/" in path:
                body = json.loads(response.body)
                if body.get("status") != 400 or param not in body.get("message", ""):
                    failures.append(f"{where}: the error does not name {param!r}")
    assert failures == [], "\n".join(failures)
