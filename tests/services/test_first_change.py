"""observing.first_change, the reclaimer's sleep between passes: one watch request that returns at the
first change to the selected objects, of a core kind (claims) or a custom one (DataVolumes), against
a devcluster (this test process's instance)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_spawner.k8s import custom
from gpuworkspace_spawner.k8s.kinds import DATA_VOLUMES
from gpuworkspace_spawner.k8s.observing import first_change

NS = "default"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[client.ApiClient]:
    async with DevCluster(tmp_path / "state") as cluster:
        cfg = client.Configuration()
        await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=cfg)
        async with client.ApiClient(cfg) as api_client:
            yield api_client


def claim(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def data_volume(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name, "labels": labels},
        "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Gi"}}}},
    }


async def test_a_matching_claim_wakes_it_and_another_does_not(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    version = (await core.list_namespaced_persistent_volume_claim(NS)).metadata.resource_version
    woken = asyncio.ensure_future(
        first_change(
            core.list_namespaced_persistent_volume_claim,
            NS,
            label_selector="retained=true",
            resource_version=version,
            timeout_s=30,
        )
    )
    await core.create_namespaced_persistent_volume_claim(NS, claim("other", {"retained": "false"}))
    await asyncio.sleep(0.5)
    assert not woken.done()
    await core.create_namespaced_persistent_volume_claim(NS, claim("home-a", {"retained": "true"}))
    await asyncio.wait_for(woken, 5)


async def test_a_custom_kind_wakes_it_through_its_lister(api: client.ApiClient) -> None:
    objects = custom.custom_api(client.CoreV1Api(api))
    listed = await objects.list_namespaced_custom_object(
        DATA_VOLUMES.group, DATA_VOLUMES.version, NS, DATA_VOLUMES.plural
    )
    woken = asyncio.ensure_future(
        first_change(
            custom.lister(objects, DATA_VOLUMES).list_objects,
            NS,
            label_selector="retained=true",
            resource_version=listed["metadata"]["resourceVersion"],
            timeout_s=30,
        )
    )
    await asyncio.sleep(0.3)
    assert not woken.done()
    await objects.create_namespaced_custom_object(
        DATA_VOLUMES.group,
        DATA_VOLUMES.version,
        NS,
        DATA_VOLUMES.plural,
        data_volume("root-a", {"retained": "true"}),
    )
    await asyncio.wait_for(woken, 5)


async def test_without_a_change_it_returns_when_its_time_is_up(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    version = (await core.list_namespaced_persistent_volume_claim(NS)).metadata.resource_version
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(
        first_change(
            core.list_namespaced_persistent_volume_claim,
            NS,
            label_selector="retained=true",
            resource_version=version,
            timeout_s=1,
        ),
        10,
    )
    assert loop.time() - started >= 0.9
