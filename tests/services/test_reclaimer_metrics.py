"""The reclaimer's /metrics: what the reclaim alerts of helm-values/monitoring/ read.

A pass that fails with a Kubernetes error is counted and retried (the process no longer dies, so the
counter can rise); a successful pass sets the overdue and retained gauges and the last-success time.
"""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tornado.httpclient import AsyncHTTPClient

from gpuworkspace_spawner.k8s import KubernetesError
from gpuworkspace_spawner.services import reclaimer
from gpuworkspace_spawner.services.reclaimer import Outcome
from gpuworkspace_spawner.services.reclaimstats import ReclaimStats, count_overdue

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
PAST, FUTURE = NOW - timedelta(days=1), NOW + timedelta(days=1)


@pytest.mark.parametrize(
    ("outcome", "overdue"),
    [
        pytest.param(Outcome("a", "kept", "in use by pod p", PAST), 1, id="kept-past-retention"),
        pytest.param(Outcome("a", "changed", "the claim changed", PAST), 1, id="changed-past-retention"),
        pytest.param(Outcome("a", "kept", "retained until tomorrow", FUTURE), 0, id="kept-within-retention"),
        pytest.param(Outcome("a", "kept", "no retain-until: kept", None), 0, id="kept-without-date"),
        pytest.param(Outcome("a", "deleted", "retention ended", PAST), 0, id="deleted"),
        pytest.param(Outcome("a", "would-delete", "dry run", PAST), 0, id="dry-run"),
    ],
)
def test_overdue_counts_disks_past_retention_that_survive(outcome: Outcome, overdue: int) -> None:
    assert count_overdue([outcome], NOW) == overdue


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _scrape(port: int) -> dict[str, float]:
    response = await AsyncHTTPClient().fetch(f"http://127.0.0.1:{port}/metrics")
    assert response.headers["Content-Type"].startswith("text/plain")
    return {
        s.name: s.value
        for family in text_string_to_metric_families(response.body.decode())
        for s in family.samples
        if not s.name.endswith("_created")
    }


class _Api:
    class api_client:  # the attribute run() closes
        @staticmethod
        async def close() -> None:
            return None


async def test_a_failed_pass_is_counted_and_retried_and_a_good_one_updates_the_gauges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = _free_port()
    passes: list[str] = []
    scraped: list[dict[str, float]] = []

    async def connect() -> Any:
        return _Api()

    async def reclaim_once(api: Any, namespace: str, **_: Any) -> tuple[list[Outcome], str]:
        passes.append(namespace)
        if len(passes) == 1:
            raise KubernetesError(503, "the API server is unavailable", "ServiceUnavailable")
        # run() counts overdue disks against the real clock: retention dates around it, not around NOW
        # (a fixed FUTURE turned into the past a day after it was written, and the test failed)
        now = datetime.now(UTC)
        outcomes = [
            Outcome("home-alice--", "deleted", "retention ended", now - timedelta(days=1)),
            Outcome("home-bob--", "kept", "in use by pod jupyter-bob", now - timedelta(days=1)),
            Outcome("home-cai--", "kept", "retained until tomorrow", now + timedelta(days=1)),
        ]
        return outcomes, "7"

    async def wait(*_: Any) -> None:
        scraped.append(await _scrape(port))
        raise asyncio.CancelledError  # end the endless loop after the second pass

    monkeypatch.setattr(reclaimer.gateway, "connect", connect)
    monkeypatch.setattr(reclaimer, "reclaim_once", reclaim_once)
    monkeypatch.setattr(reclaimer, "_wait_for_a_change", wait)
    monkeypatch.setattr(reclaimer, "RETRY_S", 0)
    with pytest.raises(asyncio.CancelledError):
        await reclaimer.run("gpu-workspaces", once=False, dry_run=False, metrics_listen=f"127.0.0.1:{port}")

    assert passes == ["gpu-workspaces", "gpu-workspaces"]  # the failure did not end the process
    metrics = scraped[0]
    assert metrics["gpuworkspace_reclaimer_passes_total"] == 2
    assert metrics["gpuworkspace_reclaimer_pass_failures_total"] == 1
    assert metrics["gpuworkspace_reclaimer_disks_deleted_total"] == 1
    assert metrics["gpuworkspace_reclaimer_retained_disks"] == 2
    assert metrics["gpuworkspace_reclaimer_overdue_disks"] == 1  # bob's: past retention, in use
    assert metrics["gpuworkspace_reclaimer_last_success_timestamp_seconds"] > NOW.timestamp()
    with pytest.raises(OSError):  # the metrics server is stopped with the loop
        await _scrape(port)


async def test_once_still_fails_on_a_kubernetes_error(monkeypatch: pytest.MonkeyPatch) -> None:
    async def connect() -> Any:
        return _Api()

    async def reclaim_once(*_: Any, **__: Any) -> Any:
        raise KubernetesError(403, "forbidden", "Forbidden")

    monkeypatch.setattr(reclaimer.gateway, "connect", connect)
    monkeypatch.setattr(reclaimer, "reclaim_once", reclaim_once)
    with pytest.raises(KubernetesError, match="forbidden"):
        await reclaimer.run("gpu-workspaces", once=True, dry_run=False)


def test_stats_before_any_pass_say_never() -> None:
    stats = ReclaimStats()
    assert (stats.passes, stats.pass_failures, stats.last_success) == (0, 0, 0.0)


@pytest.mark.parametrize("value", ["9502", "host:", ":99999", "a:b:9502", ":x"])
def test_a_bad_metrics_address_is_refused_naming_the_option(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        reclaimer.main(["--metrics-listen", value])
    err = capsys.readouterr().err
    assert "--metrics-listen" in err and "[HOST]:PORT" in err, err


def test_without_the_option_the_reclaimer_runs_with_no_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    async def fake_run(namespace: str, **options: Any) -> int:
        seen.update(options, namespace=namespace)
        return 0

    monkeypatch.setattr(reclaimer, "run", fake_run)
    assert reclaimer.main(["--namespace", "ns", "--once"]) == 0
    assert seen == {"namespace": "ns", "once": True, "dry_run": False, "metrics_listen": ""}
