"""One stack for the limits e2e: the demo hub with small limits (named servers per user, disks per user
and in total), so that a few starts reach each of them.

Its own package (and so its own package-scoped stack, stopped before another package starts one) because
the limits are the hub's environment: ``tests/e2e``'s shared stack keeps the demo's generous defaults,
which its tests, creating many servers and disks, stay under.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import browser  # noqa: F401 -- the spawn form test's chromium
from tests.e2e.harness import REPO, HubStack

NAMED_SERVER_LIMIT, MAX_DISKS_PER_USER, MAX_DISKS_TOTAL = 4, 2, 6
LIMITS_ENV = {
    "GPUWS_NAMED_SERVER_LIMIT": str(NAMED_SERVER_LIMIT),
    "GPUWS_MAX_DISKS_PER_USER": str(MAX_DISKS_PER_USER),
    "GPUWS_MAX_DISKS_TOTAL": str(MAX_DISKS_TOTAL),
    "GPUWS_CULLER": "0",  # nothing here idles long enough to matter
}


@pytest.fixture(scope="package")
def stack() -> Iterator[HubStack]:
    workdir = Path(tempfile.mkdtemp(prefix="gpuws-e2e-limits-"))
    catalog = workdir / "catalog"
    shutil.copytree(REPO / "hub_config" / "catalog", catalog)
    try:
        with HubStack(workdir, spawner="gpuworkspace", catalog=catalog, extra_env=LIMITS_ENV) as hub_stack:
            yield hub_stack
    finally:
        if not os.environ.get("GPUWS_E2E_KEEP"):
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(autouse=True)
def _logs_on_failure(request: pytest.FixtureRequest, stack: HubStack) -> Iterator[None]:
    yield
    if any(getattr(getattr(request.node, f"rep_{w}", None), "failed", False) for w in ("setup", "call")):
        print(f"logs in {stack.log_dir}")
        stack.dump_logs()
