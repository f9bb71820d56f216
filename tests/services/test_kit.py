"""The services' kit (services/handling.py ServiceHandler) as a service built on it answers: who may call,
JSON errors with status and message (plain text on a page), token-only changes, bounded JSON bodies, and
``/metrics`` for a scraper's token (or anyone with ``--metrics-public``). One tiny service served in
process stands for every service (attribution, culler, disks, jobs): the same class answers for all."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from tornado import web
from tornado.httpclient import AsyncHTTPClient
from tornado.testing import bind_unused_port

from gpuworkspace_spawner.services.handling import ServiceHandler
from gpuworkspace_spawner.services.serving import (
    METRICS_CONTENT_TYPE,
    http_server,
    metrics_app,
    metrics_registry,
)

SERVICE = "kit-demo"
TOKENS = {
    "alice": {"kind": "user", "name": "alice", "scopes": [f"access:services!service={SERVICE}"]},
    "nothing": {"kind": "user", "name": "eve", "scopes": ["read:users!user=eve"]},
    "scraper": {"kind": "service", "name": "prometheus", "scopes": ["read:metrics"]},
}


class CookieOrToken:
    """``Authorization: token <t>`` is a token; ``Cookie: login=<t>`` a browser's login (not a token)."""

    async def get_user(self, handler: Any, sync: bool = False) -> dict[str, Any] | None:
        token = handler.request.headers.get("Authorization", "").removeprefix("token ")
        handler._token_authenticated = token in TOKENS
        cookie = handler.request.headers.get("Cookie", "").removeprefix("login=")
        return TOKENS.get(token) or TOKENS.get(cookie)


class Demo(ServiceHandler):
    max_body = 64

    def initialize(self, public: bool = False) -> None:
        self.hub_auth, self.metrics_public = CookieOrToken(), public

    @property
    def service_name(self) -> str:
        return SERVICE

    def get(self) -> None:
        self.reply({"me": self.caller["name"]})

    def post(self) -> None:
        self.reply(self.body({"size": int}, required=["size"]), status=201)


class Page(Demo):
    answers_json = False


class Metrics(Demo):
    scrape = True

    def get(self) -> None:
        self.send_metrics(b"demo_up 1\n")


@pytest.fixture
async def base() -> AsyncIterator[str]:
    app = web.Application(
        [
            ("/api", Demo),
            ("/page", Page),
            ("/metrics", Metrics),
            ("/public-metrics", Metrics, {"public": True}),
        ]
    )
    sock, port = bind_unused_port()
    server = http_server(app, max_body_bytes=1 << 20)
    server.add_sockets([sock])
    yield f"http://127.0.0.1:{port}"
    server.stop()


async def call(
    url: str, method: str = "GET", body: bytes | None = None, **headers: str
) -> tuple[int, str, Any]:
    answer = await AsyncHTTPClient().fetch(
        url, method=method, headers=headers, body=body, raise_error=False, allow_nonstandard_methods=True
    )
    text = answer.body.decode()
    try:
        return answer.code, answer.headers.get("Content-Type", ""), json.loads(text)
    except ValueError:
        return answer.code, answer.headers.get("Content-Type", ""), text


@pytest.mark.parametrize(
    ("path", "method", "body", "headers", "status", "message"),
    [
        pytest.param(
            "/api", "GET", None, {}, 403,
            "missing or invalid credentials: send 'Authorization: token <hub token>'",
            id="no credentials",
        ),
        pytest.param(
            "/api", "GET", None, {"Authorization": "token nothing"}, 403,
            "eve's token grants no access to this service: it needs access:services!service=kit-demo "
            "or read:servers",
            id="a token that grants nothing here",
        ),
        pytest.param(
            "/api", "POST", b'{"size": 1}', {"Cookie": "login=alice"}, 403,
            "changes need a token in the Authorization header, not a cookie",
            id="a change with a cookie alone",
        ),
        pytest.param(
            "/api", "POST", b"x" * 65, {"Authorization": "token alice"}, 413,
            "request body over 64 bytes",
            id="a body over the handler's bound",
        ),
        pytest.param(
            "/api", "POST", b"{", {"Authorization": "token alice"}, 400,
            "request body is not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
            id="not JSON",
        ),
        pytest.param(
            "/api", "POST", b'{"size": 1, "colour": "red"}', {"Authorization": "token alice"}, 400,
            "unknown field(s) colour; allowed: size",
            id="an unknown field",
        ),
        pytest.param(
            "/api", "POST", b'{"size": "big"}', {"Authorization": "token alice"}, 400,
            "field 'size' must be a int",
            id="a field of the wrong type",
        ),
        pytest.param(
            "/metrics", "GET", None, {"Authorization": "token alice"}, 403,
            "alice lacks the read:metrics scope",
            id="metrics without read:metrics",
        ),
    ],
)  # fmt: skip
async def test_refusals_are_json_with_status_and_message(
    base: str, path: str, method: str, body: bytes | None, headers: dict[str, str], status: int, message: str
) -> None:
    code, kind, answer = await call(base + path, method, body, **headers)
    assert (code, kind, answer) == (status, "application/json", {"status": status, "message": message})


async def test_a_token_that_may_use_the_service_reads_and_changes(base: str) -> None:
    assert await call(f"{base}/api", Authorization="token alice") == (
        200,
        "application/json",
        {"me": "alice"},
    )
    created = await call(f"{base}/api", "POST", b'{"size": 3}', Authorization="token alice")
    assert created == (201, "application/json", {"size": 3})


async def test_a_page_answers_its_errors_in_plain_text(base: str) -> None:
    code, kind, text = await call(f"{base}/page")
    assert (code, kind) == (403, "text/plain; charset=utf-8")
    assert text == "403: missing or invalid credentials: send 'Authorization: token <hub token>'"


async def test_metrics_for_a_scraper_token_or_anyone_when_public(base: str) -> None:
    assert await call(f"{base}/metrics") == (403, "application/json", {
        "status": 403, "message": "missing or invalid credentials: send 'Authorization: token <hub token>'"
    })  # fmt: skip
    code, kind, text = await call(f"{base}/metrics", Authorization="token scraper")
    assert (code, kind.split(";")[0], text) == (200, "text/plain", "demo_up 1\n")
    code, _, text = await call(f"{base}/public-metrics")
    assert (code, text) == (200, "demo_up 1\n")


class _Up:
    """A service's own collector: one gauge."""

    def collect(self) -> Any:
        gauge = GaugeMetricFamily("demo_up", "1 while the demo runs")
        gauge.add_metric([], 1)
        yield gauge


async def test_a_metrics_only_app_serves_the_services_own_collectors_and_nothing_else() -> None:
    """The reclaimer's ``--metrics-listen``: its collectors, none of prometheus_client's process defaults."""
    sock, port = bind_unused_port()
    server = http_server(metrics_app(metrics_registry(_Up())), max_body_bytes=1 << 20)
    server.add_sockets([sock])
    try:
        code, kind, text = await call(f"http://127.0.0.1:{port}/metrics")
        assert (code, kind) == (200, METRICS_CONTENT_TYPE)
        assert [f.name for f in text_string_to_metric_families(text)] == ["demo_up"]
        assert (await call(f"http://127.0.0.1:{port}/other"))[0] == 404
    finally:
        server.stop()
