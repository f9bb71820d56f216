"""The service's configuration (traitlets: file and command line) and ``--once --dry-run`` as a process."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuworkspace_spawner.services.culler.app import CullerApp, main

from .fakes import TOKEN, FakeCluster

REPO = Path(__file__).resolve().parents[3]


def app_with(*argv: str) -> CullerApp:
    app = CullerApp()
    app.initialize(list(argv))
    return app


def test_command_line_builds_the_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    app = app_with(
        "--idle-timeout=7200",
        "--warn-before=900",
        "--warn-before=60",
        "--max-duration=86400",
        "--CullerApp.idle_timeout_by_gpu_mode=exclusive=1800",
        "--CullerApp.exempt_users=admin",
        "--dry-run",
    )
    policy = app.policy()
    assert (policy.idle_timeout, policy.warn_before, policy.max_duration) == (7200, (900, 60), 86400)
    assert policy.idle_timeout_by_gpu_mode == {"exclusive": 1800}
    assert policy.exempt_users == frozenset({"admin"}) and app.dry_run and not app.remove


def test_the_catalogs_session_settings_apply_unless_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a profile's spawn-form card promises ("stops after 1h 30m idle") is what the culler does;
    an explicit per-profile option wins, and a bad catalog change keeps the last good settings."""
    monkeypatch.chdir(tmp_path)
    catalog = tmp_path / "catalog"
    shutil.copytree(REPO / "hub_config" / "catalog", catalog)
    app = app_with(f"--catalog={catalog}", "--CullerApp.idle_timeout_by_profile=vm-workstation=60")
    policy = app.policy()
    assert policy.idle_timeout_by_profile["gpu-exclusive"] == 90 * 60  # session.idleTimeout: 90m
    assert policy.idle_timeout_by_profile["vm-workstation"] == 60  # configured: wins
    assert policy.max_duration_by_profile["gpu-exclusive"] == 12 * 3600  # session.maxDuration: 12h
    gpu = catalog / "gpu.yaml"
    gpu.write_text(gpu.read_text().replace("idleTimeout: 90m", "idleTimeout: 45m"))
    assert app.policy().idle_timeout_by_profile["gpu-exclusive"] == 45 * 60  # followed, no restart
    gpu.write_text(gpu.read_text().replace("idleTimeout: 45m", "idleTimeout: soon"))
    assert app.policy().idle_timeout_by_profile["gpu-exclusive"] == 45 * 60  # the last good catalog


@pytest.mark.parametrize("none", ["--warn-before=none", "--CullerApp.warn_before=None"])
def test_no_warnings_from_the_command_line(
    none: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert app_with(none).policy().warn_before == ()


def test_no_warnings_from_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpuworkspace_culler_config.py").write_text("c.CullerApp.warn_before = []\n")
    assert app_with().policy().warn_before == ()


def test_lead_times_as_long_as_an_idle_timeout_are_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", TOKEN)
    app = app_with(
        "--idle-timeout=3600",
        "--warn-before=1800",
        "--CullerApp.idle_timeout_by_profile=quick=900",
        "--CullerApp.idle_timeout_by_gpu_mode=mig=0",
    )
    _, http = app.build(lambda: datetime.now(UTC))
    http.close()
    lines = [r.getMessage() for r in caplog.records if "warn_before" in r.getMessage()]
    assert lines == [
        "CullerApp.warn_before 1800 s >= idle_timeout_by_profile['quick'] 900 s: "
        "the first idle warning comes at the first cycle after the last activity"
    ]


def test_config_file_and_command_line_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "culler.py"
    config.write_text(
        "c.CullerApp.idle_timeout = 600\nc.CullerApp.interval = 60\nc.CullerApp.exempt_profiles = {'demo'}\n"
    )
    app = app_with(f"--config={config}", "--interval=30")
    assert (app.idle_timeout, app.interval, app.exempt_profiles) == (600, 30, {"demo"})


def test_default_config_file_is_read_when_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpuworkspace_culler_config.py").write_text("c.CullerApp.concurrency = 3\n")
    assert app_with().concurrency == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--idle-timeout=-1"], "CullerApp.idle_timeout must be a duration in seconds >= 0, not -1.0"),
        (
            ["--warn-before=60", "--warn-before=300"],
            "CullerApp.warn_before must be positive and descending, not [60.0, 300.0]",
        ),
        (["--warn-before=0"], "CullerApp.warn_before must be positive and descending"),
        (["--CullerApp.idle_timeout_by_gpu_mode=vgpu=60"], "unknown GPU mode 'vgpu'"),
        (
            ["--CullerApp.idle_timeout_by_profile=a100=-5"],
            "idle_timeout_by_profile['a100'] must be a duration",
        ),
        (["--concurrency=0"], "CullerApp.concurrency must be >= 1, not 0"),
        (["--cycles=0"], "CullerApp.cycles must be >= 1, not 0"),
        (["--interval=0"], "CullerApp.interval must be > 0 seconds"),
        (
            ["--CullerApp.arbiter_hook=nowhere.at.all:hook"],
            "arbiter_hook 'nowhere.at.all:hook' cannot be imported",
        ),
        (["--config=/nonexistent/culler.py"], "no file '/nonexistent/culler.py'"),
    ],
    ids=[
        "negative",
        "ascending",
        "zero-lead",
        "gpu-mode",
        "profile",
        "concurrency",
        "cycles",
        "interval",
        "hook",
        "config",
    ],
)
def test_invalid_options_are_named(
    argv: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_arbiter_hook_by_import_string(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    app = app_with("--CullerApp.arbiter_hook=os.path:basename")
    assert app.arbiter_hook == "os.path:basename"


@pytest.fixture
async def fake() -> AsyncIterator[FakeCluster]:
    cluster = await FakeCluster().start()
    yield cluster
    await cluster.stop()


async def test_once_dry_run_prints_the_decisions(fake: FakeCluster, tmp_path: Path) -> None:
    old = datetime.now(UTC) - timedelta(hours=3)
    fake.add("alice", started=old, hub_activity=old, activity=old)
    fake.add("bob", started=old, hub_activity=datetime.now(UTC), activity=datetime.now(UTC))
    fake.add_gpu("bob", util=90.0, idle_seconds=120.0)
    env = {
        **os.environ,
        "JUPYTERHUB_API_TOKEN": TOKEN,
        "JUPYTERHUB_API_URL": fake.hub_api_url,
        "GPUWS_CULLER_PROXY_URL": fake.base,
        "GPUWS_CULLER_ATTRIBUTION_URL": fake.attribution_url,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuworkspace_spawner.services.culler.app", "--once", "--dry-run",
        "--idle-timeout=600", "--warn-before=60",
        cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    summary = json.loads(out)
    actions = {d["user"]: d["action"] for d in summary["decisions"]}
    assert actions == {"alice": "warn", "bob": "keep"}
    report = summary["report"]
    assert report["dry_run"] and report["servers"] == 2 and report["errors"] == []
    assert report["requests"] == fake.requests()
    assert summary["idle_gpu_seconds"] == {"bob/": 120.0}
    assert fake.deletes == []


async def test_once_runs_several_cycles_and_prints_each_report(fake: FakeCluster, tmp_path: Path) -> None:
    old = datetime.now(UTC) - timedelta(hours=3)
    fake.add("alice", started=old, hub_activity=old, activity=datetime.now(UTC))
    env = {
        **os.environ,
        "JUPYTERHUB_API_TOKEN": TOKEN,
        "JUPYTERHUB_API_URL": fake.hub_api_url,
        "GPUWS_CULLER_PROXY_URL": fake.base,
        "GPUWS_CULLER_ATTRIBUTION_URL": "",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuworkspace_spawner.services.culler.app", "--once", "--cycles=2",
        "--interval=0.1", "--dry-run",
        cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    first, second = json.loads(out)["cycles"]
    assert (first["probed"], first["requests"]) == (1, 2)  # the list and alice's status
    assert (second["probed"], second["requests"]) == (0, 1)  # what alice showed still keeps her


async def test_once_fails_when_the_hub_cannot_be_read(tmp_path: Path) -> None:
    env = {**os.environ, "JUPYTERHUB_API_TOKEN": "x", "JUPYTERHUB_API_URL": "http://127.0.0.1:1/hub/api"}
    env.pop("GPUWS_CULLER_PROXY_URL", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuworkspace_spawner.services.culler.app", "--once",
        cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 1 and b"list servers: no answer" in err


async def test_service_runs_cycles_until_sigterm(fake: FakeCluster, tmp_path: Path) -> None:
    import signal
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "JUPYTERHUB_API_TOKEN": TOKEN,
        "JUPYTERHUB_API_URL": fake.hub_api_url,
        "GPUWS_CULLER_PROXY_URL": fake.base,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuworkspace_spawner.services.culler.app", "--interval=0.2",
        f"--listen=127.0.0.1:{port}", cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        for _ in range(200):
            if fake.counts["hub-list"] >= 2:
                break
            await asyncio.sleep(0.05)
        assert fake.counts["hub-list"] >= 2
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0, err.decode()
    assert f"gpuworkspace-culler on http://127.0.0.1:{port}/services/gpuworkspace-culler/" in err.decode()
