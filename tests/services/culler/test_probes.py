"""The staged probe: how many requests each kind of server costs, and failures as evidence, not errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from gpuworkspace_spawner.services.culler.hubapi import Http
from gpuworkspace_spawner.services.culler.model import Policy, Workspace
from gpuworkspace_spawner.services.culler.policy import decide
from gpuworkspace_spawner.services.culler.probes import ServerProber, parse_kernels, parse_status

from .fakes import TOKEN, FakeCluster

T0 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
OLD = T0 - timedelta(minutes=40)  # past the first warning's lead time (timeout 60 min, lead 30)
RECENT = T0 - timedelta(minutes=5)
POLICY = Policy(idle_timeout=3600, warn_before=(1800, 300))


@pytest.fixture
async def fake() -> AsyncIterator[FakeCluster]:
    cluster = await FakeCluster().start()
    yield cluster
    await cluster.stop()


def judge(ws: Workspace):  # type: ignore[no-untyped-def]
    return decide(ws, POLICY, (), now=T0)


def prober_for(fake: FakeCluster, limit: float = 5) -> ServerProber:
    return ServerProber(Http(TOKEN, timeout=limit), fake.base)


async def probe(fake: FakeCluster, hub_activity: datetime, *, limit: float = 5, **server: object):
    s = fake.add("alice", started=T0 - timedelta(hours=3), hub_activity=hub_activity, **server)
    ws = Workspace("alice", "", started=s.started, hub_last_activity=hub_activity)
    prober = prober_for(fake, limit)
    try:
        result, asked = await prober.probe(ws, s.url, judge, token=s.probe_token, idle_warned=False, now=T0)
        assert asked == bool(fake.requests())
        return result, prober
    finally:
        prober.http.close()


async def again(
    prober: ServerProber, fake: FakeCluster, *, now: datetime = T0, started: datetime | None = None
):
    """The same server probed once more by the same prober (what it remembers counts)."""
    ws = Workspace("alice", "", started=started or T0 - timedelta(hours=3), hub_last_activity=RECENT)
    prober.http = Http(TOKEN, timeout=5)
    try:
        return await prober.probe(
            ws,
            "/user/alice/",
            lambda w: decide(w, POLICY, (), now=now),
            token=fake.servers[("alice", "")].probe_token,
            idle_warned=False,
            now=now,
        )
    finally:
        prober.http.close()


def kernel(state: str, at: datetime) -> dict[str, object]:
    return {"id": "k1", "execution_state": state, "last_activity": at}


async def test_recent_hub_activity_alone_does_not_spare_the_request(fake: FakeCluster) -> None:
    """The hub's record moves with our own probes (the proxy counts them): nothing remembered, so ask."""
    result, _ = await probe(fake, RECENT, activity=OLD)
    assert result is not None and result.last_activity == OLD
    assert fake.counts["status"] == 1


async def test_recent_status_needs_one_request_then_none_while_remembered(fake: FakeCluster) -> None:
    result, prober = await probe(fake, OLD, activity=RECENT, kernels=[kernel("idle", RECENT)])
    assert result is not None and result.last_activity == RECENT and result.kernels is None
    assert fake.counts == {"status": 1}
    remembered, asked = await again(prober, fake, now=T0 + timedelta(minutes=20))
    assert not asked and remembered is not None and remembered.last_activity == RECENT
    assert fake.counts == {"status": 1}  # RECENT + 60 min - 30 min lead is still ahead: no request
    _, asked = await again(prober, fake, now=T0 + timedelta(minutes=26))
    assert asked and fake.counts["status"] == 2  # within the first warning's lead time: ask


async def test_a_restarted_server_is_asked_again(fake: FakeCluster) -> None:
    _, prober = await probe(fake, OLD, activity=RECENT)
    _, asked = await again(prober, fake, started=T0 - timedelta(hours=2))  # another start: forgotten
    assert asked and fake.counts == {"status": 2}


async def test_a_kernel_seen_busy_counts_as_active_when_seen(fake: FakeCluster) -> None:
    result, prober = await probe(fake, OLD, activity=OLD, kernels=[kernel("busy", OLD)])
    assert result is not None and result.kernels and result.kernels[0].execution_state == "busy"
    assert fake.counts == {"status": 1, "kernels": 1}
    remembered, asked = await again(prober, fake, now=T0 + timedelta(minutes=20))
    assert not asked and remembered is not None and remembered.kernels
    (k,) = remembered.kernels
    assert (k.execution_state, k.last_activity) == ("unknown", T0)  # busy then, not known to be now
    _, asked = await again(prober, fake, now=T0 + timedelta(minutes=31))
    assert asked


async def test_idle_without_kernels_reads_terminals(fake: FakeCluster) -> None:
    result, _ = await probe(fake, OLD, activity=OLD, terminals=[{"name": "1", "last_activity": RECENT}])
    assert (
        result is not None and result.kernels == () and result.terminals and result.terminals[0].name == "1"
    )
    assert fake.counts == {"status": 1, "terminals": 1}


async def test_busy_kernel_stops_probing_after_kernels(fake: FakeCluster) -> None:
    result, _ = await probe(fake, OLD, activity=OLD, kernels=[kernel("busy", OLD)])
    assert result is not None and result.kernels and result.kernels[0].execution_state == "busy"
    assert fake.counts == {"status": 1, "kernels": 1}


async def test_idle_kernel_reads_all_three_then_reuses_kernels(fake: FakeCluster) -> None:
    result, prober = await probe(fake, OLD, activity=OLD, kernels=[kernel("idle", OLD)])
    assert result is not None and result.terminals == ()
    assert fake.counts == {"status": 1, "kernels": 1, "terminals": 1}
    second, asked = await again(prober, fake)
    assert asked and second == result
    assert fake.counts == {"status": 2, "kernels": 1, "terminals": 2}  # status unchanged: kernels reused


async def test_no_request_counts_as_activity(fake: FakeCluster) -> None:
    """Every GET carries no_track_activity (jupyter_server's APIHandler would record it otherwise)."""
    fake.add("bob", started=OLD, activity=OLD, kernels=[kernel("idle", OLD)], sessions=["a.ipynb"])
    await probe(fake, OLD, activity=OLD, kernels=[kernel("idle", OLD)], sessions=["a.ipynb"])
    prober = prober_for(fake)
    try:
        token = fake.servers[("bob", "")].probe_token
        await prober.checkpoint_open_notebooks("/user/bob/", Workspace("bob", ""), token=token)
    finally:
        prober.http.close()
    assert fake.requests("status", "kernels", "terminals", "sessions") == 4
    assert fake.tracked == {}


@pytest.mark.parametrize(
    ("fault", "error"), [({"fail": 500}, "HTTP 500"), ({"delay": 0.5}, "no answer")], ids=["500", "timeout"]
)
async def test_failures_become_probe_errors(fake: FakeCluster, fault: dict[str, object], error: str) -> None:
    result, _ = await probe(fake, OLD, limit=0.2, **fault)
    assert result is not None and result.error and error in result.error and "status of alice" in result.error
    assert result.last_activity is None and result.kernels is None  # read nothing: the hub stands in
    import asyncio

    await asyncio.sleep(0.4)  # let the slow fake finish before it closes


def test_parsers_tolerate_odd_answers() -> None:
    assert parse_status("nonsense").kernels == 0
    status = parse_status({"last_activity": "2025-03-01T09:00:00.123Z", "kernels": 2, "started": None})
    assert status.last_activity == datetime(2025, 3, 1, 9, 0, 0, 123000, tzinfo=UTC) and status.kernels == 2
    (k,) = parse_kernels([{"id": "k", "execution_state": "busy", "last_activity": None}, "junk"])
    assert (k.id, k.execution_state, k.last_activity) == ("k", "busy", None)
