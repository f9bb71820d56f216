"""Whole cycles against the fake hub, single-user servers and attribution service, with a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gpuworkspace_spawner.services.culler.model import Action, Decision, Policy, Reason, Workspace

from .fakes import FakeClock, FakeCluster, make_culler

T0 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
POLICY = Policy(idle_timeout=3600, warn_before=(1800, 300))
IDLE_SINCE = T0 - timedelta(minutes=40)  # idle deadline T0+20 min: the first warning is due at T0


@pytest.fixture
async def fake() -> AsyncIterator[FakeCluster]:
    cluster = await FakeCluster().start()
    yield cluster
    await cluster.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def idle_server(fake: FakeCluster, user: str = "alice", name: str = "", **kw: object) -> None:
    fields: dict[str, object] = {
        "started": T0 - timedelta(hours=3),
        "hub_activity": IDLE_SINCE,
        "activity": IDLE_SINCE,
        "kernels": [{"id": "k1", "execution_state": "idle", "last_activity": IDLE_SINCE}],
    }
    fake.add(user, name, **{**fields, **kw})


async def cycles(culler, clock: FakeClock, minutes: list[float]) -> list[dict[tuple[str, str], Decision]]:
    """Run a cycle at T0 + each offset; the decisions of each."""
    out = []
    for offset in minutes:
        clock.now = T0 + timedelta(minutes=offset)
        await culler.run()
        out.append(dict(culler.state.decisions))
    return out


async def test_idle_server_is_warned_twice_then_stopped_without_remove(
    fake: FakeCluster, clock: FakeClock
) -> None:
    idle_server(fake)
    culler = make_culler(fake, clock, POLICY)
    try:
        first, between, second, stop = await cycles(culler, clock, [0, 10, 26, 32])
    finally:
        culler.hub.http.close()
    key = ("alice", "")
    assert first[key].action is Action.WARN and first[key].stage == 0
    assert between[key].action is Action.KEEP and between[key].stop_at == T0 + timedelta(minutes=30)
    assert second[key].action is Action.WARN and second[key].stage == 1
    assert stop[key].action is Action.STOP and stop[key].reason is Reason.IDLE
    assert fake.deletes == [("/hub/api/users/alice/server", b"")]
    assert key not in fake.servers
    assert culler.state.stopped[-1][1].key == key
    assert culler.state.book.given(key) == ()  # forgotten once stopped
    assert culler.state.last_cycle is not None and culler.state.last_cycle.stopped == 1


async def test_warnings_are_recorded_and_audited(
    fake: FakeCluster, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    idle_server(fake, name="gpu", user_options={"profile": "a100"})
    culler = make_culler(fake, clock, POLICY)
    caplog.set_level("INFO", logger="gpuworkspace.audit")
    try:
        await cycles(culler, clock, [0])
    finally:
        culler.hub.http.close()
    (warning,) = culler.state.book.given(("alice", "gpu"))
    assert (warning.stage, warning.reason, warning.given_at) == (0, Reason.IDLE, T0)
    audit = [r.getMessage() for r in caplog.records if r.name == "gpuworkspace.audit"]
    assert len(audit) == 1 and '"workspace-cull-warned"' in audit[0] and '"profile": "a100"' in audit[0]


async def test_busy_kernel_with_old_activity_is_not_warned(fake: FakeCluster, clock: FakeClock) -> None:
    idle_server(
        fake, kernels=[{"id": "k1", "execution_state": "busy", "last_activity": T0 - timedelta(hours=2)}]
    )
    culler = make_culler(fake, clock, POLICY)
    try:
        runs = await cycles(culler, clock, [0, 30, 60, 120])
    finally:
        culler.hub.http.close()
    assert all(r[("alice", "")].action is Action.KEEP for r in runs)
    assert runs[0][("alice", "")].activity_source == "busy kernel k1"
    assert fake.deletes == [] and culler.state.book.all() == {}


async def test_recent_terminal_output_keeps_the_server(fake: FakeCluster, clock: FakeClock) -> None:
    idle_server(fake, kernels=[], terminals=[{"name": "1", "last_activity": T0 - timedelta(minutes=2)}])
    culler = make_culler(fake, clock, POLICY)
    try:
        (run,) = await cycles(culler, clock, [0])
    finally:
        culler.hub.http.close()
    decision = run[("alice", "")]
    assert decision.action is Action.KEEP and decision.activity_source == "terminal 1"
    assert fake.counts["terminals"] == 1 and culler.state.book.all() == {}


async def test_gpu_busy_keeps_an_idle_kernel(fake: FakeCluster, clock: FakeClock) -> None:
    idle_server(fake)
    fake.add_gpu("alice", util=85.0, idle_seconds=12.5)
    culler = make_culler(fake, clock, POLICY)
    try:
        runs = await cycles(culler, clock, [0, 40, 80])
    finally:
        culler.hub.http.close()
    assert all(r[("alice", "")].action is Action.KEEP for r in runs)
    assert runs[0][("alice", "")].activity_source == "gpu"
    assert culler.state.idle_gpu_seconds == {("alice", ""): 12.5}
    assert fake.requests("status", "kernels", "terminals") == 0  # the GPU decides alone
    assert fake.deletes == []


async def test_restarted_culler_gives_a_gpu_workspace_a_full_timeout(
    fake: FakeCluster, clock: FakeClock
) -> None:
    idle_server(fake)
    fake.add_gpu("alice", util=0.0)  # idle GPU now; how long idle before this process started is unknown
    culler = make_culler(fake, clock, POLICY)
    try:
        runs = await cycles(culler, clock, [0, 29, 31])
    finally:
        culler.hub.http.close()
    assert [r[("alice", "")].action for r in runs] == [Action.KEEP, Action.KEEP, Action.WARN]
    stop_at = runs[2][("alice", "")].stop_at
    assert stop_at is not None and stop_at >= T0 + timedelta(hours=1)  # idle since this process started


async def test_dry_run_decides_but_warns_and_stops_nothing(fake: FakeCluster, clock: FakeClock) -> None:
    idle_server(fake)
    culler = make_culler(fake, clock, POLICY, dry_run=True)
    try:
        first, late = await cycles(culler, clock, [0, 120])
    finally:
        culler.hub.http.close()
    assert first[("alice", "")].action is Action.WARN
    assert late[("alice", "")].action is Action.WARN  # no warning was recorded, so stage 0 again
    assert fake.deletes == [] and culler.state.book.all() == {}
    report = culler.state.last_cycle
    assert report is not None and report.dry_run and report.warned == 1


@pytest.mark.parametrize("fault", [{"fail": 500}, {"delay": 0.5}], ids=["http-500", "timeout"])
async def test_failing_probe_never_culls(
    fake: FakeCluster, clock: FakeClock, fault: dict[str, object]
) -> None:
    idle_server(fake, **fault)
    culler = make_culler(fake, clock, POLICY, timeout=0.2)
    try:
        runs = await cycles(culler, clock, [0, 26, 40, 120])
    finally:
        culler.hub.http.close()
        await asyncio.sleep(0.4)  # let the slow fake answer before it closes
    last = runs[-1][("alice", "")]
    assert last.action is Action.KEEP and "did not answer" in last.message
    assert fake.deletes == []
    report = culler.state.last_cycle
    assert report is not None and any("alice: probe failed" in e for e in report.errors)


async def test_arbiter_hook_veto_keeps_the_server(fake: FakeCluster, clock: FakeClock) -> None:
    idle_server(fake)
    idle_server(fake, user="bob")
    seen: list[tuple[str, Action]] = []

    async def hook(ws: Workspace, decision: Decision) -> Decision | None:
        seen.append((ws.user, decision.action))
        if ws.user == "alice":  # a decision of its own, as a hook author writes one
            return Decision(ws.user, ws.server, Action.KEEP, "kept by the arbiter")
        return None

    culler = make_culler(fake, clock, POLICY, arbiter=hook)
    try:
        runs = await cycles(culler, clock, [0, 26, 32])
    finally:
        culler.hub.http.close()
    kept = runs[-1][("alice", "")]
    assert kept.message == "kept by the arbiter"
    # the rules that apply to the server are still shown (api/v1/decisions), though the hook set none
    assert kept.policy is not None and kept.policy.idle_timeout == POLICY.idle_timeout
    assert kept.policy.warn_before == POLICY.warn_before
    assert ("alice", "") in fake.servers and culler.state.book.given(("alice", "")) == ()
    assert fake.deletes == [("/hub/api/users/bob/server", b"")]
    assert ("bob", Action.STOP) in seen


async def test_arbiter_hook_failure_keeps_the_server(fake: FakeCluster, clock: FakeClock) -> None:
    idle_server(fake)

    def hook(ws: Workspace, decision: Decision) -> Decision | None:
        raise RuntimeError("policy database down")

    culler = make_culler(fake, clock, POLICY, arbiter=hook)
    try:
        runs = await cycles(culler, clock, [0, 120])
    finally:
        culler.hub.http.close()
    assert all(r[("alice", "")].action is Action.KEEP for r in runs)
    assert fake.deletes == []
    report = culler.state.last_cycle
    assert report is not None and any("policy database down" in e for e in report.errors)


async def test_attribution_down_the_cycle_still_runs(fake: FakeCluster, clock: FakeClock) -> None:
    idle_server(fake)
    fake.attribution_down = True
    culler = make_culler(fake, clock, POLICY)
    try:
        (run,) = await cycles(culler, clock, [0])
    finally:
        culler.hub.http.close()
    assert run[("alice", "")].action is Action.WARN
    report = culler.state.last_cycle
    assert report is not None and any(e.startswith("GPU evidence:") for e in report.errors)


async def test_activity_after_a_warning_withdraws_it(fake: FakeCluster, clock: FakeClock) -> None:
    idle_server(fake)
    culler = make_culler(fake, clock, POLICY)
    try:
        await cycles(culler, clock, [0])
        fake.servers[("alice", "")].activity = T0 + timedelta(minutes=5)
        (run,) = await cycles(culler, clock, [10])
    finally:
        culler.hub.http.close()
    assert run[("alice", "")].cancels_warnings and run[("alice", "")].action is Action.KEEP
    assert culler.state.book.all() == {}


async def test_exempt_annotation_from_attribution(fake: FakeCluster, clock: FakeClock) -> None:
    idle_server(fake)
    fake.add_gpu("alice", util=0.0, cull_exempt=True)
    culler = make_culler(fake, clock, POLICY)
    try:
        (run,) = await cycles(culler, clock, [600])
    finally:
        culler.hub.http.close()
    assert run[("alice", "")].action is Action.EXEMPT and fake.requests("status") == 0


async def test_save_first_checkpoints_open_notebooks_before_the_stop(
    fake: FakeCluster, clock: FakeClock
) -> None:
    idle_server(fake, sessions=["a.ipynb", "dir/b c.ipynb"])
    culler = make_culler(fake, clock, POLICY, save_first=True)
    try:
        await cycles(culler, clock, [0, 26, 32])
    finally:
        culler.hub.http.close()
    assert sorted(fake.checkpoints) == ["a.ipynb", "dir/b c.ipynb"]
    assert len(fake.deletes) == 1


async def test_request_budget_at_200_servers(fake: FakeCluster, clock: FakeClock) -> None:
    """≤ 2 requests per running server in every cycle, hub pages and the attribution read included."""
    recent = T0 - timedelta(minutes=5)
    for i in range(200):
        user, kind = f"user{i:03}", i % 4
        if kind == 0:  # active by the hub's record
            fake.add(user, started=T0 - timedelta(hours=3), hub_activity=recent, activity=recent)
        elif kind == 1:  # the hub lags; the server saw activity
            fake.add(user, started=T0 - timedelta(hours=3), hub_activity=IDLE_SINCE, activity=recent)
        elif kind == 2:  # idle, no kernel
            fake.add(user, started=T0 - timedelta(hours=3), hub_activity=IDLE_SINCE, activity=IDLE_SINCE)
        else:  # idle, with an idle kernel
            idle_server(fake, user=user)
    culler = make_culler(fake, clock, POLICY, concurrency=10)
    per_server = []
    try:
        for offset in [0, 10, 20, 26]:
            clock.now = T0 + timedelta(minutes=offset)
            report = await culler.run()
            assert report.servers == 200
            per_server.append(report.requests / report.servers)
    finally:
        culler.hub.http.close()
    print("requests per server per cycle:", [round(x, 3) for x in per_server])
    assert max(per_server) <= 2.0
    assert culler.state.last_cycle is not None and culler.state.last_cycle.warned == 200  # everyone, at once


async def test_hub_activity_moved_by_our_own_probes_does_not_keep_an_idle_server(
    fake: FakeCluster, clock: FakeClock
) -> None:
    """The proxy records each probe as activity and the hub copies it: the server's own word decides."""
    idle_server(fake, hub_activity=T0)
    fake.proxy_clock = clock  # every proxied request moves the hub's last_activity to now
    culler = make_culler(fake, clock, POLICY)
    try:
        first, between, second, stop = await cycles(culler, clock, [0, 10, 26, 32])
    finally:
        culler.hub.http.close()
    key = ("alice", "")
    assert first[key].action is Action.WARN and first[key].activity_source == "server"
    assert between[key].action is Action.KEEP
    assert second[key].action is Action.WARN and second[key].stage == 1
    assert stop[key].action is Action.STOP and fake.deletes == [("/hub/api/users/alice/server", b"")]
    assert fake.tracked == {}  # and none of our requests counted as activity on the server


async def test_without_probes_the_hubs_last_activity_still_counts(
    fake: FakeCluster, clock: FakeClock
) -> None:
    idle_server(fake, hub_activity=T0 - timedelta(minutes=5))
    idle_server(fake, user="bob")  # the hub saw nothing for 40 minutes
    culler = make_culler(fake, clock, POLICY, probe=False)
    try:
        (run,) = await cycles(culler, clock, [0])
    finally:
        culler.hub.http.close()
    alice, bob = run[("alice", "")], run[("bob", "")]
    assert alice.action is Action.KEEP and alice.activity_source == "hub"
    assert "the server was not asked" in alice.message
    assert bob.action is Action.WARN and bob.last_activity == IDLE_SINCE
    assert fake.requests("status", "kernels", "terminals") == 0


async def test_an_active_server_is_not_asked_again_while_what_it_showed_keeps_it(
    fake: FakeCluster, clock: FakeClock
) -> None:
    fake.add("alice", started=T0 - timedelta(hours=3), hub_activity=T0, activity=T0 - timedelta(minutes=5))
    culler = make_culler(fake, clock, POLICY)
    try:
        runs = await cycles(culler, clock, [0, 5, 10, 20, 26])
    finally:
        culler.hub.http.close()
    assert all(r[("alice", "")].action is Action.KEEP for r in runs[:4])
    assert fake.counts["status"] == 2  # at 0 (nothing remembered) and at 26 (within the lead time)


async def test_stops_run_concurrently(fake: FakeCluster, clock: FakeClock) -> None:
    for i in range(10):
        idle_server(fake, user=f"user{i}")
    fake.stop_delay = 0.5
    policy = replace(POLICY, idle_timeout=1800, warn_before=())  # idle 40 min: due now
    culler = make_culler(fake, clock, policy, concurrency=10, save_first=True)
    loop = asyncio.get_running_loop()
    try:
        began = loop.time()
        report = await culler.run()
        took = loop.time() - began
    finally:
        culler.hub.http.close()
    assert report.stopped == 10 and len(fake.deletes) == 10
    assert took < 2.0, f"10 stops of 0.5 s each at concurrency 10 took {took:.2f} s"
