"""Fixtures for the end-to-end tests: one HubStack per test package, a headless chromium per module.

The stack (devcluster, oidc-provider-mock, JupyterHub and its proxy) is package-scoped: it starts once
for ``tests/e2e`` in a test process and is stopped when that process is done with the package.
`make test` spreads the package's modules over its processes (tests/conftest.py): each that takes
some starts its own stack, whose devcluster uses that process's instance. The spawner under test is ``$GPUWS_SPAWNER``; unset, it
is this project's spawner when ``gpuworkspace_spawner.spawner`` imports, else plain KubeSpawner.
Set ``GPUWS_E2E_KEEP=1`` to keep the stack's directory (state and logs) after the run.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .harness import REPO, HubStack

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]
# The idle culler and the attribution service in the stack: culler_config.py culls the e2e-cull*
# profiles only (test_culler.py), on a timescale of seconds; fresh GPU figures every few seconds.
SERVICES_ENV = {
    "GPUWS_CULLER_CONFIG": str(Path(__file__).parent / "culler_config.py"),
    "GPUWS_CULLER_INTERVAL": "2",
    "GPUWS_ATTRIBUTION_INTERVAL": "3",
    # the home page warns of a near-full disk at 0.5% used: a few MB on a 1Gi disk (test_disk_view.py)
    "GPUWS_DISK_WARN_THRESHOLD": "0.005",
}


def spawner_under_test() -> str:
    choice = os.environ.get("GPUWS_SPAWNER")
    if choice:
        return choice
    return "gpuworkspace" if importlib.util.find_spec("gpuworkspace_spawner.spawner") else "kubespawner"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(scope="package")
def stack() -> Iterator[HubStack]:
    # Not tmp_path_factory: pytest prunes all but the newest three basetemps of the user, so a
    # concurrent pytest run could delete the devcluster's state under a running hub.
    workdir = Path(tempfile.mkdtemp(prefix="gpuws-e2e-"))
    # A copy of the sample catalog plus the e2e-only profiles; tests may edit it (reload tests).
    catalog = workdir / "catalog"
    shutil.copytree(REPO / "hub_config" / "catalog", catalog)
    shutil.copy(Path(__file__).parent / "catalog-extra.yaml", catalog / "zz-e2e.yaml")
    try:
        with HubStack(
            workdir, spawner=spawner_under_test(), catalog=catalog, extra_env=SERVICES_ENV
        ) as hub_stack:
            yield hub_stack
    finally:
        if not os.environ.get("GPUWS_E2E_KEEP"):
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def e2e_catalog(stack: HubStack) -> Path:
    """The catalog directory the running hub reads (a copy; the hub reloads it when it changes)."""
    return stack.workdir / "catalog"


@pytest.fixture(autouse=True)
def _logs_on_failure(request: pytest.FixtureRequest, stack: HubStack) -> Iterator[None]:
    """Print the tails of the devcluster, OIDC and hub logs when a test fails (pytest shows them)."""
    yield
    failed = any(
        getattr(getattr(request.node, f"rep_{when}", None), "failed", False) for when in ("setup", "call")
    )
    if failed:
        print(f"spawner under test: {stack.hub.spawner}; logs in {stack.log_dir}")
        stack.dump_logs()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium driven by Playwright (never a downloaded browser)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"chromium is not installed ({CHROMIUM} missing): apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
