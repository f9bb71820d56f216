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
import yaml

from gpuworkspace_spawner.services.culler.app import CullerApp, main
from gpuworkspace_spawner.services.culler.model import Effective, GpuEvidence, Policy, Source, Workspace
from gpuworkspace_spawner.services.culler.precedence import effective

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
    """What a profile's spawn-form card promises ("stops after 90 min idle; you are warned 30 min and
    5 min before") is what the culler does; an explicit per-profile option wins, and a bad catalog
    change keeps the last good settings."""
    monkeypatch.chdir(tmp_path)
    catalog = tmp_path / "catalog"
    shutil.copytree(REPO / "hub_config" / "catalog", catalog)
    (tmp_path / "gpuworkspace_culler_config.py").write_text(
        "c.CullerApp.idle_timeout_by_profile = {'vm-workstation': 60}\n"
        "c.CullerApp.warn_before_by_profile = {'vm-workstation': [30, 10]}\n"
    )
    app = app_with(f"--catalog={catalog}")
    policy = app.policy()
    gpu_exclusive = rules(policy, "gpu-exclusive")
    assert (gpu_exclusive.idle_timeout, gpu_exclusive.idle_timeout_source) == (90 * 60, Source.CATALOG)
    assert (gpu_exclusive.max_duration, gpu_exclusive.max_duration_source) == (12 * 3600, Source.CATALOG)
    shared = rules(policy, "gpu-shared")  # its card: "you are warned 10 min and 2 min before"
    assert (shared.warn_before, shared.warn_before_source) == ((600, 120), Source.CATALOG)
    vm = rules(policy, "vm-workstation")  # configured: wins over its card's 120m and [30m, 5m]
    assert (vm.idle_timeout, vm.idle_timeout_source) == (60, Source.CONFIG_PROFILE)
    assert (vm.warn_before, vm.warn_before_source) == ((30, 10), Source.CONFIG_PROFILE)
    gpu = catalog / "gpu.yaml"
    gpu.write_text(gpu.read_text().replace("idleTimeout: 90m", "idleTimeout: 45m"))
    assert rules(app.policy(), "gpu-exclusive").idle_timeout == 45 * 60  # followed, no restart
    gpu.write_text(gpu.read_text().replace("idleTimeout: 45m", "idleTimeout: soon"))
    assert rules(app.policy(), "gpu-exclusive").idle_timeout == 45 * 60  # the last good catalog


def rules(policy: Policy, profile: str, mode: str | None = None) -> Effective:
    gpu = GpuEvidence(mode, 1) if mode is not None else None
    return effective(Workspace("alice", "", profile=profile, gpu=gpu), policy)


def test_the_gpu_sharing_overlay_shortens_the_idle_timeout_of_every_shared_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/how-to/gpu-modes.md: the overlay's culler configuration gives time-sliced and MIG
    workspaces shorter idle timeouts. It does, also for a profile whose card promises a longer one."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", TOKEN)
    values = yaml.safe_load((REPO / "helm-values" / "values-gpu-sharing.yaml").read_text())
    config = tmp_path / "culler_config.py"
    config.write_text(values["hub"]["extraFiles"]["gpuworkspace-culler-config"]["stringData"])
    catalog = tmp_path / "catalog"
    shutil.copytree(REPO / "hub_config" / "catalog", catalog)
    gpu = catalog / "gpu.yaml"  # a card that promises more than its mode allows
    gpu.write_text(gpu.read_text().replace("idleTimeout: 60m", "idleTimeout: 2h"))
    app = app_with(f"--config={config}", f"--catalog={catalog}")
    policy = app.policy()
    mig = rules(policy, "gpu-mig", "mig")
    assert (mig.idle_timeout, mig.idle_timeout_source) == (3600, Source.CONFIG_GPU_MODE)
    assert (mig.warn_before, mig.warn_before_source) == ((900, 300), Source.CATALOG)  # still the card's
    assert rules(policy, "gpu-mig").idle_timeout == 3600  # no attribution data: the catalog's gpuMode
    shared = rules(policy, "gpu-shared", "time-sliced")  # card and mode agree: 30 min
    assert (shared.idle_timeout, shared.idle_timeout_source) == (1800, Source.CATALOG)
    exclusive = rules(policy, "gpu-exclusive", "exclusive")  # no rule for whole cards: the card's
    assert (exclusive.idle_timeout, exclusive.idle_timeout_source) == (90 * 60, Source.CATALOG)
    _, http = app.build(lambda: datetime.now(UTC))
    http.close()
    assert (
        "catalog profile 'gpu-mig' promises session.idleTimeout 7200 s, but "
        "idle_timeout_by_gpu_mode['mig'] 3600 s is shorter and applies; "
        "set CullerApp.idle_timeout_by_profile['gpu-mig'] to keep the card's"
    ) in [r.getMessage() for r in caplog.records]


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
        "--CullerApp.idle_timeout_by_profile=slow=600",
        "--CullerApp.idle_timeout_by_gpu_mode=mig=0",
    )
    app.warn_before_by_profile = {"slow": [600, 60]}
    _, http = app.build(lambda: datetime.now(UTC))
    http.close()
    lines = [r.getMessage() for r in caplog.records if "warn_before" in r.getMessage()]
    assert lines == [
        "CullerApp.warn_before 1800 s >= idle_timeout_by_profile['quick'] 900 s: "
        "the first idle warning comes at the first cycle after the last activity",
        "CullerApp.warn_before_by_profile['slow'] 600 s >= idle_timeout_by_profile['slow'] 600 s: "
        "the first idle warning comes at the first cycle after the last activity",
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


@pytest.mark.parametrize(
    ("leads", "message"),
    [
        pytest.param(
            "[120, 600]",
            "CullerApp.warn_before_by_profile['gpu-shared'] must be positive and descending, not [120.0, 600.0]",
            id="ascending",
        ),
        pytest.param(
            "[600, -1]",
            "CullerApp.warn_before_by_profile['gpu-shared'] must be positive and descending, not [600.0, -1.0]",
            id="negative",
        ),
        pytest.param("[600, 600]", "must be positive and descending, not [600.0, 600.0]", id="repeated"),
    ],
)
def test_invalid_lead_times_per_profile_are_named(
    leads: str,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "culler.py"
    config.write_text(f"c.CullerApp.warn_before_by_profile = {{'gpu-shared': {leads}}}\n")
    assert main([f"--config={config}"]) == 2
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
