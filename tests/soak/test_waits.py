"""The soak's and the e2e harness's waits end as findings, never as hangs (pure: no stack, no cluster).

Each test makes a wait that can never complete (an operation that never ends, a pause nobody lifts, a
removal the hub never does) and checks that it ends with a finding that names what was waited for.
Deadlines are tiny or the clock is fake; nothing here asserts on time taken.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import wait_for

from .chaos import Conductor, Limits
from .workload import Server, Tally, Worker, _hub_away

TINY = Limits(pause_s=0.01, resume_s=0.01, run_s=0.01)


class FakeHub:
    api_url = "http://hub.invalid/hub/api"

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return 201, {}


class FakeDevcluster:
    def control(self, path: str, body: Any, method: str = "POST") -> tuple[int, bytes]:
        return 200, b""


class FakeStack:
    """What the conductor touches outside its workers: users, fault rules, the request log."""

    def __init__(self, log_dir: Path) -> None:
        self.hub, self.devcluster, self.log_dir = FakeHub(), FakeDevcluster(), log_dir
        self.url, self.admin_token = "http://hub.invalid", "token"

    def requests_log(self, clear: bool = False) -> list[dict[str, Any]]:
        return []


def conductor(tmp_path: Path, limits: Limits = TINY, ops: int = 5) -> Conductor:
    return Conductor(FakeStack(tmp_path), ops=ops, seed=1, workers=1, limits=limits)  # type: ignore[arg-type]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_wait_that_never_completes_ends_naming_what_it_waited_for() -> None:
    clock, calls = FakeClock(), []

    def never() -> bool:
        calls.append(clock.now)
        raise OSError("connection refused")

    with pytest.raises(TimeoutError, match=r"after 30s waiting for the hub to answer .*connection refused"):
        wait_for(never, 30, "the hub to answer", interval_s=1, clock=clock, sleep=clock.sleep)
    assert len(calls) == 30  # polled until the deadline, then gave up


def test_a_node_failure_whose_pause_times_out_hands_operations_out_again(tmp_path: Path) -> None:
    """The hang of issue 19: the pause timed out outside the code that resumes the workers."""
    chaos = conductor(tmp_path)
    chaos._in_flight = 1  # an operation that never finishes
    failures: list[str] = []
    chaos._node_failure = lambda: failures.append("ran")  # type: ignore[method-assign]

    chaos._event("node-failure")

    assert chaos._running.is_set()
    assert failures == []  # the node failure itself did not run on a hub still busy
    [finding] = chaos.report.tally.errors
    assert "chaos node-failure: TimeoutError" in finding
    assert "the operations in flight to finish" in finding


def test_a_node_failure_that_fails_hands_operations_out_again(tmp_path: Path) -> None:
    chaos = conductor(tmp_path)

    def broken() -> None:
        assert not chaos._running.is_set()  # paused while it runs
        raise RuntimeError("kubectl wait: timed out")

    chaos._node_failure = broken  # type: ignore[method-assign]
    chaos._event("node-failure")

    assert chaos._running.is_set()
    assert chaos.report.tally.errors == ["chaos node-failure: RuntimeError: kubectl wait: timed out"]


def test_a_worker_waiting_for_a_pause_nobody_lifts_stops_with_a_finding(tmp_path: Path) -> None:
    chaos = conductor(tmp_path)
    chaos._running.clear()
    [worker] = chaos.workers

    chaos._work(worker)  # returns: it would wait forever on the pause before issue 19

    assert chaos._done == 0
    assert chaos.report.tally.errors == [
        "soak0: operations still paused after 0 s (a chaos event never handed them out again); "
        "the worker stops"
    ]


def test_a_run_past_its_deadline_ends_naming_the_operation_in_flight(tmp_path: Path) -> None:
    chaos = conductor(tmp_path)
    [worker] = chaos.workers
    started, release = threading.Event(), threading.Event()

    def stuck(server: Server) -> None:
        started.set()
        release.wait(60)  # an operation that does not end within the run's deadline

    worker.stop = worker.start = worker.delete = stuck  # type: ignore[method-assign]
    worker.sync = lambda server: None  # type: ignore[method-assign]
    # the conductor reads the request log once before it watches the clock: by then the worker is busy
    chaos.stack.requests_log = lambda clear=False: started.wait(30) and []  # type: ignore[method-assign]
    try:
        report = chaos.run()
    finally:
        release.set()

    [finding] = report.tally.errors
    assert finding.startswith("the run passed its deadline of 0 s after 1 of 5 operations")
    assert finding.endswith("still in flight: ['soak0: stuck c1']")  # the operation and its server
    assert (tmp_path / "soak-requests.jsonl").exists()  # the run's records were still written


# ------------------------------------------------------------------ a removal cut short by a restart
class HubForgetsRemoval:
    """The hub's answers after a restart cut a removal short: the server is still there, stopped.
    ``honours``: whether the repeated removal is done."""

    def __init__(self, honours: bool) -> None:
        self.honours, self.removed, self.calls = honours, False, []

    def __call__(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        self.calls.append((method, path, body))
        if method == "DELETE":
            self.removed = self.honours
            return 204, None
        servers = {} if self.removed else {"v1": {"ready": False, "pending": None}}
        return 200, {"servers": servers}


def removing_worker(api: HubForgetsRemoval, restart_over: bool = True) -> tuple[Worker, Server]:
    tally = Tally()
    worker = Worker(FakeStack(Path("/nonexistent")), "soak0", 1, tally)  # type: ignore[arg-type]
    worker.api = api  # type: ignore[method-assign]
    worker.began = time.monotonic()
    # a restart overlapped the delete: over (the new hub answers), or under way (its end not known)
    ended = time.monotonic() if restart_over else worker.began + 3600
    tally.hub_restarts.append((worker.began - 1, ended))
    return worker, worker.servers["v1"]


def test_a_removal_forgotten_by_a_hub_restart_is_repeated_and_recorded() -> None:
    api = HubForgetsRemoval(honours=True)
    worker, server = removing_worker(api)

    assert worker._wait_gone(server, "delete", removed=True)

    assert ("DELETE", "/users/soak0/servers/v1", {"remove": True}) in api.calls
    assert worker.tally.outcomes["delete:repeated-after-hub-restart"] == 1
    assert worker.tally.outcomes["delete:done"] == 1
    [entry] = worker.tally.interrupted
    assert entry.startswith("delete soak0/v1: the removal was forgotten by a hub restart")
    assert worker.tally.errors == []


def test_a_removal_is_not_repeated_while_the_restart_is_under_way() -> None:
    """Until the new hub answers, the first removal may still be running (the old hub finishing it)."""
    api = HubForgetsRemoval(honours=True)
    worker, server = removing_worker(api, restart_over=False)
    worker.give_up_s = 0.01

    assert not worker._wait_gone(server, "delete", removed=True)

    assert [c for c in api.calls if c[0] == "DELETE"] == []
    assert worker.tally.interrupted == []


def test_a_removal_that_never_happens_ends_as_a_finding() -> None:
    api = HubForgetsRemoval(honours=False)
    worker, server = removing_worker(api)
    worker.give_up_s = 0.01

    assert not worker._wait_gone(server, "delete", removed=True)

    assert worker.tally.errors == ["delete soak0/v1: not done after 0 s"]


@pytest.mark.parametrize(
    ("status", "raw", "away"),
    [
        (403, b"\n<!DOCTYPE HTML>\n<html><head><title>JupyterHub</title>", True),  # the hub's XSRF page
        (404, b"<!DOCTYPE HTML><html>", True),  # the proxy with no route
        (403, b'{"status": 403, "message": "bob may not resize alice\'s disk"}', False),  # the service's own
        (200, b"{}", False),
    ],
    ids=["hub-403-page", "proxy-404-page", "service-403", "ok"],
)
def test_a_page_from_the_hub_while_a_service_route_is_missing_is_waited_out(
    status: int, raw: bytes, away: bool
) -> None:
    assert _hub_away(status, raw) is away
