"""The chaos soak's stack: devcluster, OIDC mock and JupyterHub with every managed service.

``GPUWS_SOAK_OPS`` operations (200 in ``make test``; ``make soak`` runs 1,000), seeded by
``GPUWS_SOAK_SEED``. Set ``GPUWS_E2E_KEEP=1`` to keep the stack's directory (state and logs).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import SERVICES_ENV
from tests.e2e.harness import REPO, HubStack


@pytest.fixture(scope="package")
def soak_stack() -> Iterator[HubStack]:
    workdir = Path(tempfile.mkdtemp(prefix="gpuws-soak-"))
    catalog = workdir / "catalog"
    shutil.copytree(REPO / "hub_config" / "catalog", catalog)
    try:
        with HubStack(workdir, spawner="gpuworkspace", catalog=catalog, extra_env=SERVICES_ENV) as stack:
            yield stack
    finally:
        if not os.environ.get("GPUWS_E2E_KEEP"):
            shutil.rmtree(workdir, ignore_errors=True)
