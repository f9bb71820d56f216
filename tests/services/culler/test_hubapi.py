"""The hub REST client against the fake hub: pagination, stop without remove, outcomes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from gpuworkspace_spawner.services.culler.hubapi import Http, HttpError, HubApi, parse_user

from .fakes import TOKEN, FakeCluster

T0 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)


@pytest.fixture
async def fake() -> AsyncIterator[FakeCluster]:
    cluster = await FakeCluster(page_limit=2).start()
    yield cluster
    await cluster.stop()


@pytest.fixture
def hub(fake: FakeCluster) -> HubApi:
    return HubApi(Http(TOKEN, timeout=5), fake.hub_api_url, page_limit=2)


async def test_lists_every_page_of_running_servers(fake: FakeCluster, hub: HubApi) -> None:
    for i in range(5):
        fake.add(f"u{i}", started=T0, hub_activity=T0, user_options={"profile": "a100"}, groups=["ml"])
    fake.add("u0", "gpu", started=T0)
    try:
        servers = await hub.running_servers()
    finally:
        hub.http.close()
    assert sorted(s.key for s in servers) == [
        ("u0", ""),
        ("u0", "gpu"),
        ("u1", ""),
        ("u2", ""),
        ("u3", ""),
        ("u4", ""),
    ]
    assert fake.counts["hub-list"] == 3 == hub.http.requests
    u1 = next(s for s in servers if s.user == "u1")
    assert (u1.profile, u1.groups, u1.started, u1.url) == ("a100", frozenset({"ml"}), T0, "/user/u1/")


async def test_stop_sends_no_body_and_quotes_names(fake: FakeCluster, hub: HubApi) -> None:
    fake.add("a b", "my/srv")
    fake.add("carol")
    try:
        assert await hub.stop("a b", "my/srv") == "stopping"
        fake.stop_status = 204
        assert await hub.stop("carol", "") == "stopped"
        assert await hub.stop("carol", "") == "gone"
    finally:
        hub.http.close()
    assert fake.deletes[0] == ("/hub/api/users/a%20b/servers/my%2Fsrv", b"")
    assert fake.deletes[1] == ("/hub/api/users/carol/server", b"")


async def test_stop_with_remove_asks_for_it(fake: FakeCluster, hub: HubApi) -> None:
    fake.add("dave", "gpu")
    try:
        await hub.stop("dave", "gpu", remove=True)
    finally:
        hub.http.close()
    assert fake.deletes == [("/hub/api/users/dave/servers/gpu", b'{"remove": true}')]


async def test_errors_name_what_failed() -> None:
    hub = HubApi(Http("wrong", timeout=1), "http://127.0.0.1:1/hub/api")
    try:
        with pytest.raises(HttpError, match=r"list servers: no answer from http://127.0.0.1:1/hub/api/users"):
            await hub.running_servers()
    finally:
        hub.http.close()


async def test_forbidden_list_is_an_error(fake: FakeCluster) -> None:
    hub = HubApi(Http("wrong", timeout=5), fake.hub_api_url)
    try:
        with pytest.raises(HttpError, match="list servers: HTTP 403"):
            await hub.running_servers()
    finally:
        hub.http.close()


def test_parse_user_without_servers_or_groups() -> None:
    assert parse_user({"name": "eve"}) == []
    (s,) = parse_user({"name": "eve", "servers": {"": {"name": "", "ready": False, "pending": "spawn"}}})
    assert (s.ready, s.pending, s.groups, s.profile) == (False, "spawn", frozenset(), None)


async def test_follows_next_past_an_empty_page(fake: FakeCluster, hub: HubApi) -> None:
    """JupyterHub filters state=ready after paging: a page of stopping servers is empty, not the end."""
    fake.add("a0", ready=False)
    fake.add("a1", ready=False)
    fake.add("b0", started=T0)
    try:
        servers = await hub.running_servers()
    finally:
        hub.http.close()
    assert [s.key for s in servers] == [("b0", "")]
    assert fake.counts["hub-list"] == 2


async def test_plain_lists_end_at_a_short_page(fake: FakeCluster, hub: HubApi) -> None:
    fake.envelope = False
    for i in range(5):
        fake.add(f"u{i}", started=T0)
    try:
        servers = await hub.running_servers()
    finally:
        hub.http.close()
    assert len(servers) == 5 and fake.counts["hub-list"] == 3  # 2 + 2 + 1 (short: the end)


async def test_plain_lists_end_at_an_empty_page(fake: FakeCluster, hub: HubApi) -> None:
    fake.envelope = False
    for i in range(4):
        fake.add(f"u{i}", started=T0)
    try:
        servers = await hub.running_servers()
    finally:
        hub.http.close()
    assert len(servers) == 4 and fake.counts["hub-list"] == 3  # 2 + 2 + 0
