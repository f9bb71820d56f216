"""Fixtures: an in-process DevCluster, a kubernetes_asyncio client for it, and kubectl on a threaded one."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.testing import BackgroundCluster


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[DevCluster]:
    async with DevCluster(tmp_path / "state", bookmark_interval_s=0.5) as c:
        yield c


@pytest.fixture
async def api(cluster: DevCluster) -> AsyncIterator[client.ApiClient]:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api_client:
        yield api_client


@pytest.fixture
def bg(tmp_path: Path) -> Iterator[BackgroundCluster]:
    with BackgroundCluster(tmp_path / "state", bookmark_interval_s=0.5) as background:
        yield background


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBECTL_EXTERNAL_DIFF": ""}
        self.env.pop("KUBERNETES_SERVICE_HOST", None)

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["kubectl", *args],
            check=False,
            input=input,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc


@pytest.fixture
def kubectl(bg: BackgroundCluster) -> Kubectl:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed on this machine")
    return Kubectl(bg.kubeconfig)
