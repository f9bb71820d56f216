"""The real collector sources against a simulated cluster: watch, EndpointSlice discovery, scrapes.

A workspace pod (our labels, one whole GPU) runs on the devcluster; its GPU load is scripted through
the devcluster's control API (``/_devcluster/sim/workload``), which drives the simulated dcgm-exporter.
The Observation the sources build must name the pod's user and carry the scripted utilisation, and the
rules must attribute the card to that workspace as measured. The cluster serves TLS and checks tokens,
so the kubelet scrape takes the verified path (certificates from the cluster CA, then the token).

Starts a devcluster, in this process's instance (``$GPUWS_DEVCLUSTER_INSTANCE``, tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import config

from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.resources import ResourceType, find
from gpuworkspace_spawner.services.attribution.model import Basis, Observation
from gpuworkspace_spawner.services.attribution.rules import attribute
from gpuworkspace_spawner.services.attribution.sources import KubernetesSource, Settings

pytestmark = pytest.mark.slow
NS = "gpu-workspaces"


def _kind(plural: str) -> ResourceType:
    rt = find("", "v1", plural)
    assert rt is not None
    return rt


PODS, NAMESPACES = _kind("pods"), _kind("namespaces")
POD_NAME = "jupyter-alice"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[DevCluster]:
    # TLS and tokens as a real cluster: the kubelets serve certificates from the cluster CA and check tokens
    async with DevCluster(tmp_path / "state", simulate=True, tls=True, auth=True) as c:
        await config.load_kube_config(config_file=str(c.kubeconfig))
        yield c


def workspace_pod() -> dict[str, Any]:
    labels = {
        "gpuworkspace.dev/user": "alice",
        "gpuworkspace.dev/server": "default",
        "gpuworkspace.dev/profile": "gpu-exclusive",
        "gpuworkspace.dev/gpu-mode": "exclusive",
    }
    return {
        "metadata": {
            "name": POD_NAME,
            "labels": labels,
            "annotations": {"gpuworkspace.dev/username": "alice"},
        },
        "spec": {
            "nodeSelector": {"gpuworkspace.dev/pool": "gpu"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "notebook",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c", "sleep 3600"],
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi"},
                        "limits": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }


async def control(cluster: DevCluster, body: dict[str, Any]) -> dict[str, Any]:
    token = yaml.safe_load(cluster.kubeconfig.read_text())["users"][0]["user"]["token"]
    async with (
        aiohttp.ClientSession() as session,
        session.put(
            f"{cluster.url}/_devcluster/sim/workload",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            ssl=cluster.client_ssl_context() or False,
        ) as response,
    ):
        assert response.status == 200, await response.text()
        result: dict[str, Any] = await response.json()
        return result


async def eventually_observe(source: KubernetesSource, check: Any, limit_s: float = 60) -> Observation:
    deadline, last = time.monotonic() + limit_s, None
    while time.monotonic() < deadline:
        last = await source.observe(time.time())
        if check(last):
            return last
        await asyncio.sleep(0.5)
    raise AssertionError(f"no matching observation within {limit_s} s; last: {last}")


async def test_sources_observe_a_scripted_gpu_workload(cluster: DevCluster) -> None:
    if cluster.store.get(NAMESPACES, "", NS) is None:
        cluster.verbs.create(NAMESPACES, "", {"metadata": {"name": NS}})
    cluster.verbs.create(PODS, NS, workspace_pod())
    await control(
        cluster,
        {"namespace": NS, "pod": POD_NAME, "gpu_util": 42.0, "mem_used_mib": 2048.0, "power_w": 250.0},
    )
    # https (the default): the kubelets' certificates verify against the kubeconfig's CA, then get the token
    source = KubernetesSource(Settings(agent_service=None, timeout_s=5))
    await source.start()
    try:

        def running(obs: Observation) -> bool:
            mine = [w for w in obs.workspaces if w.pod == POD_NAME]
            return (
                bool(mine)
                and mine[0].phase == "Running"
                and any((NS, POD_NAME) in d.pods and d.util_percent == 42.0 for d in obs.devices)
            )

        await eventually_observe(source, running)
        obs = await eventually_observe(
            source, lambda o: any(u.pod == POD_NAME and u.cpu_cores is not None for u in o.usage)
        )
    finally:
        await source.stop()

    assert {n.name for n in obs.nodes} >= {"gpu-node-a", "gpu-node-b", "cpu-node-a"}
    (alice,) = [w for w in obs.workspaces if w.pod == POD_NAME]
    assert (alice.user, alice.server, alice.gpu_mode, alice.runtime) == (
        "alice",
        "",
        "exclusive",
        "container",
    )
    assert alice.gpu_resources == {"nvidia.com/gpu": 1} and alice.node in ("gpu-node-a", "gpu-node-b")
    (device,) = [d for d in obs.devices if (NS, POD_NAME) in d.pods]
    assert device.node == alice.node and device.mem_used_mib == 2048.0 and device.power_w == 250.0
    assert {d.node for d in obs.devices} == {"gpu-node-a", "gpu-node-b"}  # both exporters discovered
    (usage,) = [u for u in obs.usage if u.pod == POD_NAME]
    assert usage.memory_bytes is not None and usage.memory_bytes > 0
    assert not obs.failed_sources, obs.failed_sources
    kubelet_reviews = {(r.user, r.status) for r in cluster.api.request_log if r.resource == "nodes/metrics"}
    assert kubelet_reviews == {("system:admin", 200)}  # the kubelets authenticated the token

    result = attribute(obs)
    (cell,) = [c for c in result.cells if any(s.workspace == alice.key for s in c.owners)]
    assert (cell.gpu, cell.util_percent) == (device.gpu, 42.0)
    assert cell.owners[0].basis is Basis.MEASURED and cell.owners[0].user == "alice"
    (figures,) = [f for f in result.workspaces if f.workspace.key == alice.key]
    assert figures.gpus_allocated == 1 and figures.gpu_util_percent == 42.0
