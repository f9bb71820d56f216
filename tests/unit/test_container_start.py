"""A container start ends when the started pod's server accepts connections (issue 19, P1).

KubeSpawner's start looks at its watch cache after jittered sleeps (``exponential_backoff``: up to 5 s a
step) and JupyterHub then polls the server's URL the same way, so a start whose server listened at 2.2 s
ended at 2.3 s or at 4-5 s. The container runtime now wakes on the pod's watch events, connects to the
server's port once the container runs and ends the start itself; these tests hold KubeSpawner's start in
its sleep (it never returns) and show the start ending when the port answers, and where it must not (a
pod still going away, KubeSpawner work still to do after the pod runs).
"""

from __future__ import annotations

import asyncio
import socket
from collections import OrderedDict
from types import SimpleNamespace
from typing import Any, cast

import pytest

from gpuworkspace_spawner.k8s.reflectors import LastSeen
from gpuworkspace_spawner.lifecycle.phasetiming import PhaseClock
from gpuworkspace_spawner.lifecycle.spawning import containers_running
from gpuworkspace_spawner.runtimes import Ports
from gpuworkspace_spawner.runtimes.container import ContainerRuntime
from gpuworkspace_spawner.spawnerports import SpawnerPorts
from tests.unit.test_runtimes import CONTEXT  # namespace "ws", pod "jupyter-ann--v1"

NS, POD = CONTEXT.identity.namespace, CONTEXT.pod_name
KEY = f"{NS}/{POD}"


def pod(uid: str, *, running: bool, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": POD, "namespace": NS, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T20:00:00Z"
    state = (
        {"running": {"startedAt": "2026-12-02T20:00:01Z"}} if running else {"waiting": {"reason": "Pulling"}}
    )
    status: dict[str, Any] = {"phase": "Running" if running else "Pending", "podIP": "127.0.0.1"}
    status["containerStatuses"] = [{"name": "notebook", "ready": False, "state": state}]  # not Ready yet
    return {"metadata": meta, "spec": {}, "status": status}


class FakeKubeSpawner(SimpleNamespace):
    reflectors: dict[str, Any] = {}  # noqa: RUF012 -- KubeSpawner's class-level reflectors: no claim watch here

    def _get_pod_url(self, pod: dict[str, Any]) -> str:  # KubeSpawner's, simplified
        return f"http://{pod['status']['podIP']}:{self.port}"

    def _get_reflector_key(self, kind: str) -> str:
        return kind


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawner(cache: LastSeen, port: int, **hooks: Any) -> Any:
    """What SpawnerPorts reads of a KubeSpawner: its pod cache, names, hooks and the server's port."""
    settings: dict[str, Any] = {
        "internal_ssl": False,
        "services_enabled": False,
        "after_pod_created_hook": None,
        **hooks,
    }
    return FakeKubeSpawner(
        namespace=NS,
        pod_name=POD,
        pod_reflector=SimpleNamespace(resources=cache, pods=cache),
        pod_id=None,
        events=[],
        port=port,
        **settings,
    )


async def supervise(
    cache: LastSeen, earlier: str | None, port: int, **hooks: Any
) -> tuple[Any, asyncio.Task[Any], Any]:
    """Run the supervised start against a KubeSpawner start that sleeps (its backoff) until cancelled."""
    fake = spawner(cache, port, **hooks)
    runtime = ContainerRuntime(CONTEXT, cast(Ports, SpawnerPorts(fake)))
    kubespawner_start = asyncio.ensure_future(asyncio.sleep(3600, result="http://kubespawner:8888"))
    supervised = asyncio.ensure_future(runtime._supervise(kubespawner_start, 0.0, PhaseClock(), earlier))
    return fake, kubespawner_start, supervised


async def listening(port: int) -> asyncio.Server:
    """The single-user server's port accepting connections (what a started server does)."""
    return await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", port)


async def test_the_start_ends_when_the_started_pods_server_accepts_connections() -> None:
    cache, port = LastSeen({}, OrderedDict()), free_port()
    fake, kubespawner_start, supervised = await supervise(cache, None, port)
    cache[KEY] = pod("new", running=False)  # created, scheduled, pulling
    await asyncio.sleep(0.1)
    cache[KEY] = pod("new", running=True)  # the container runs; the server is still importing
    await asyncio.sleep(0.3)
    assert not supervised.done()
    server = await listening(port)
    try:
        url = await asyncio.wait_for(supervised, 30)  # KubeSpawner's own start never returns here
    finally:
        server.close()
    assert url == f"http://127.0.0.1:{port}"
    assert fake.pod_id == "new"
    assert kubespawner_start.cancelled()


async def test_a_pod_that_is_going_away_is_not_the_new_one() -> None:
    port = free_port()
    cache = LastSeen({KEY: pod("old", running=True)}, OrderedDict())
    server = await listening(port)  # the earlier pod's server still answers
    try:
        fake, _, supervised = await supervise(cache, "old", port)
        cache[KEY] = pod("old", running=True, deleting=True)  # a status update of the earlier pod
        await asyncio.sleep(0.3)
        assert not supervised.done()
        cache.pop(KEY)
        cache[KEY] = pod("new", running=True)
        assert await asyncio.wait_for(supervised, 30) == f"http://127.0.0.1:{port}"
        assert fake.pod_id == "new"
    finally:
        server.close()


@pytest.mark.parametrize(
    "hooks",
    [{"internal_ssl": True}, {"services_enabled": True}, {"after_pod_created_hook": lambda s, p: None}],
    ids=["internal_ssl", "services_enabled", "after_pod_created_hook"],
)
async def test_kubespawner_finishes_the_start_when_it_has_work_after_the_pod_runs(
    hooks: dict[str, Any],
) -> None:
    cache, port = LastSeen({}, OrderedDict()), free_port()
    server = await listening(port)
    try:
        _, kubespawner_start, supervised = await supervise(cache, None, port, **hooks)
        cache[KEY] = pod("new", running=True)
        await asyncio.sleep(0.3)
        assert not supervised.done()  # KubeSpawner's own start decides
        kubespawner_start.cancel()
        await asyncio.gather(kubespawner_start, return_exceptions=True)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(supervised, 2)
    finally:
        server.close()


@pytest.mark.parametrize(
    ("change", "started"),
    [
        pytest.param({}, True, id="every container running"),
        pytest.param({"phase": "Pending"}, False, id="pending"),
        pytest.param({"podIP": None}, False, id="no IP yet"),
        pytest.param({"containerStatuses": []}, False, id="no container status yet"),
        pytest.param(
            {
                "containerStatuses": [
                    {"name": "a", "state": {"running": {}}},
                    {"name": "b", "state": {"waiting": {}}},
                ]
            },
            False,
            id="one container still waiting",
        ),
    ],
)
def test_a_pod_is_started_when_every_container_runs(change: dict[str, Any], started: bool) -> None:
    running = pod("new", running=True)
    running["status"].update(change)
    assert containers_running(running) is started
    assert containers_running(pod("new", running=True, deleting=True)) is False
    assert containers_running(None) is False


def test_the_fencing_check_of_a_claim_the_start_just_wrote_reads_no_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """200 first starts at once create 200 home disks; their fencing checks ran before the claim watch showed
    the new claims and read each one with a GET (issue 19's P4). The claim as the create answered is enough:
    a claim just created is bound nowhere."""
    from gpuworkspace_spawner.runtimes import container, fencing

    async def no_get(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a GET of the claim the start has just created")

    class Attached(SimpleNamespace):
        def attached(self, pv_name: str) -> list[Any]:
            return []

    async def watch(kind: str) -> Any:
        return Attached(objects={})

    monkeypatch.setattr(fencing.gateway, "read_pvc", no_get)
    monkeypatch.setattr(fencing, "cluster_watch", watch)
    ports = cast(Ports, SimpleNamespace(cached=lambda key, name: None, api=object()))
    runtime = container.ContainerRuntime(CONTEXT, ports)
    runtime._written = {"metadata": {"name": CONTEXT.home_claim, "namespace": NS}, "spec": {}}
    asyncio.run(runtime.check_fencing(own_uids=frozenset()))

    runtime._written = None  # a claim neither cached nor written by this start: read, as before
    with pytest.raises(AssertionError, match="a GET of the claim"):
        asyncio.run(runtime.check_fencing(own_uids=frozenset()))
