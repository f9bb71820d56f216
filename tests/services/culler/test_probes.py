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


async def probe(fake: FakeCluster, hub_activity: datetime, *, limit: float = 5, **server: object):
    s = fake.add("alice", started=T0 - timedelta(hours=3), hub_activity=hub_activity, **server)
    ws = Workspace("alice", "", started=s.started, hub_last_activity=hub_activity)
    prober = ServerProber(Http(TOKEN, timeout=limit), fake.base)
    try:
        return await prober.probe(ws, s.url, judge, idle_warned=False), prober
    finally:
        prober.http.close()


def kernel(state: str, at: datetime) -> dict[str, object]:
    return {"id": "k1", "execution_state": state, "last_activity": at}


async def test_recent_hub_activity_needs_no_request(fake: FakeCluster) -> None:
    result, _ = await probe(fake, RECENT)
    assert result is None and fake.requests() == 0


async def test_recent_status_needs_one_request(fake: FakeCluster) -> None:
    result, _ = await probe(fake, OLD, activity=RECENT, kernels=[kernel("idle", RECENT)])
    assert result is not None and result.last_activity == RECENT and result.kernels is None
    assert fake.counts == {"status": 1}


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
    prober.http = Http(TOKEN, timeout=5)
    ws = Workspace("alice", "", started=T0 - timedelta(hours=3), hub_last_activity=OLD)
    try:
        again = await prober.probe(ws, "/user/alice/", judge, idle_warned=False)
    finally:
        prober.http.close()
    assert again == result
    assert fake.counts == {"status": 2, "kernels": 1, "terminals": 2}  # status unchanged: kernels reused


@pytest.mark.parametrize(
    ("fault", "error"), [({"fail": 500}, "HTTP 500"), ({"delay": 0.5}, "no answer")], ids=["500", "timeout"]
)
async def test_failures_become_probe_errors(fake: FakeCluster, fault: dict[str, object], error: str) -> None:
    result, _ = await probe(fake, OLD, limit=0.2, **fault)
    assert result is not None and result.error and error in result.error and "status of alice" in result.error
    import asyncio

    await asyncio.sleep(0.4)  # let the slow fake finish before it closes


def test_parsers_tolerate_odd_answers() -> None:
    assert parse_status("nonsense").kernels == 0
    status = parse_status({"last_activity": "2025-03-01T09:00:00.123Z", "kernels": 2, "started": None})
    assert status.last_activity == datetime(2025, 3, 1, 9, 0, 0, 123000, tzinfo=UTC) and status.kernels == 2
    (k,) = parse_kernels([{"id": "k", "execution_state": "busy", "last_activity": None}, "junk"])
    assert (k.id, k.execution_state, k.last_activity) == ("k", "busy", None)
