"""A hub upgraded over running servers (issue 19, runtimes as objects): the hub state that main's
spawner saved is read by this one, which picks the server's runtime from it and still polls and stops
it; the state it saves again has the same keys.

The states below are written as main's ``get_state`` writes them (KubeSpawner's keys, ``gpuworkspace``
after a start and after ``clear_state``, the probe credential). The cluster is a fake of KubeSpawner's
reflectors and of the gateway functions a VM stop calls; no API client is made.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import kubespawner.spawner
import pytest
from kubespawner import KubeSpawner

from gpuworkspace_spawner.k8s import custom, gateway
from gpuworkspace_spawner.k8s.kinds import VIRTUAL_MACHINES
from gpuworkspace_spawner.manifests.vm import build_stop_patch
from gpuworkspace_spawner.probecredentials import STATE_KEY
from gpuworkspace_spawner.spawner import GPUWorkspaceSpawner

KUBESPAWNER = {"kubespawner_version": "7.0.0", "namespace": "ws", "dns_name": "jupyter-ann--v1.ws.svc"}
VM_STARTED = {  # main's state of a running VM server (saved after its start)
    **KUBESPAWNER,
    "pod_name": "jupyter-ann--v1",
    "pvc_name": "ws-ann--v1",
    "gpuworkspace": {
        "runtime": "vm",
        "profile": "vm-workstation",
        "catalog_version": "c1",
        "ide": "jupyterlab",
    },
    STATE_KEY: "probe-token-of-this-server",
}
CONTAINER_STARTED = {
    **KUBESPAWNER,
    "pod_name": "jupyter-ann--v1",
    "pvc_name": "home-ann--v1",
    "gpuworkspace": {
        "runtime": "container",
        "profile": "cpu-small",
        "catalog_version": "c1",
        "ide": "jupyterlab",
    },
}
VM_STOPPED = {
    **KUBESPAWNER,
    "pod_name": "jupyter-ann--v1",
    "pvc_name": "ws-ann--v1",
    "gpuworkspace": {"runtime": "vm"},
}


class Reflector:
    def __init__(self) -> None:
        self.resources: dict[str, dict[str, Any]] = {}
        self.pods = self.objects = self.resources  # KubeSpawner's and our CustomReflector's names


class Cluster:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reflectors: dict[Any, Reflector] = {}
        self.patches: list[tuple[str, str, dict[str, Any]]] = []
        self.kubespawner: list[str] = []
        monkeypatch.setattr(GPUWorkspaceSpawner, "reflectors", self.reflectors)
        monkeypatch.setattr(KubeSpawner, "_start_reflector", self._reflecting())
        monkeypatch.setattr(KubeSpawner, "stop", self._kubespawner("stop"))
        monkeypatch.setattr(KubeSpawner, "poll", self._kubespawner("poll"))
        monkeypatch.setattr(custom, "custom_api", lambda: None)
        monkeypatch.setattr(custom, "patch", self._patch)
        monkeypatch.setattr(gateway, "create_event", self._event)

    def _reflecting(self) -> Any:
        async def start_reflector(spawner: Any, kind: str, reflector_class: Any, **_: Any) -> Reflector:
            return self.reflectors.setdefault(spawner._get_reflector_key(kind), Reflector())

        return start_reflector

    def _kubespawner(self, verb: str) -> Any:
        async def call(spawner: Any, *args: Any, **kwargs: Any) -> int:
            self.kubespawner.append(f"{verb} {spawner.pod_name}")
            return 0

        return call

    async def _patch(self, api: Any, kind: Any, ns: str, name: str, body: dict[str, Any], **_: Any) -> Any:
        self.patches.append((kind.plural, name, body))
        vm = self.reflectors.get(("vms", ns))
        if vm is not None:
            vm.resources.pop(f"{ns}/{name}", None)
            self.reflectors[("vmis", ns)].resources.pop(f"{ns}/{name}", None)
        return {}

    async def _event(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {}

    def put(self, key: str, name: str, obj: dict[str, Any]) -> None:
        self.reflectors.setdefault((key, "ws"), Reflector()).resources[f"ws/{name}"] = obj


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setattr(kubespawner.spawner, "load_config", lambda **_: None)  # no API client here
    monkeypatch.setattr(kubespawner.spawner, "shared_client", lambda *_, **__: object())
    return Cluster(monkeypatch)


def _spawner(state: dict[str, Any]) -> GPUWorkspaceSpawner:
    user = SimpleNamespace(name="ann", groups=[], url="/user/ann/", id=1)
    server = SimpleNamespace(name="v1", server=None)  # the hub's orm Spawner (not running here)
    spawner = GPUWorkspaceSpawner(
        _mock=True, user=user, orm_spawner=server, namespace="ws", audit_events="none"
    )
    spawner.load_state(state)
    return spawner


def _vm(run_strategy: str) -> dict[str, Any]:
    return {"metadata": {"name": "ws-ann--v1"}, "spec": {"runStrategy": run_strategy}}


async def test_a_running_vm_from_mains_state_is_polled_and_stopped(cluster: Cluster) -> None:
    spawner = _spawner(VM_STARTED)
    cluster.put("vms", "ws-ann--v1", _vm("Always"))
    cluster.put("vmis", "ws-ann--v1", {"metadata": {"name": "ws-ann--v1"}, "status": {"phase": "Running"}})
    assert await spawner.poll() is None  # running: the hub keeps it
    await spawner.stop()
    assert cluster.patches == [(VIRTUAL_MACHINES.plural, "ws-ann--v1", build_stop_patch())]
    assert cluster.kubespawner == []  # no pod to delete: KubeSpawner's stop is not the VM's
    assert await spawner.poll() == 1


async def test_a_stopped_vm_from_mains_state_polls_as_stopped(cluster: Cluster) -> None:
    spawner = _spawner(VM_STOPPED)
    cluster.put("vms", "ws-ann--v1", _vm("Halted"))
    assert await spawner.poll() == 1


async def test_a_container_from_mains_state_is_stopped_by_kubespawner(cluster: Cluster) -> None:
    spawner = _spawner(CONTAINER_STARTED)
    await spawner.stop()
    assert cluster.kubespawner == ["stop jupyter-ann--v1"]
    assert cluster.patches == []


@pytest.mark.parametrize(
    "state",
    [
        pytest.param(VM_STARTED, id="vm started"),
        pytest.param(VM_STOPPED, id="vm stopped"),
        pytest.param(CONTAINER_STARTED, id="container started"),
    ],
)
async def test_the_state_saved_again_keeps_mains_keys(cluster: Cluster, state: dict[str, Any]) -> None:
    saved = _spawner(state).get_state()
    for key in ("gpuworkspace", "pod_name", "namespace", "pvc_name", STATE_KEY):
        assert saved.get(key) == state.get(key), key
