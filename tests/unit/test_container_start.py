"""A container start ends when the pod watch shows the new pod running (issue 19, P1).

KubeSpawner's start looks at its watch cache after jittered sleeps (``exponential_backoff``: up to 5 s a
step), so a start that was ready at 2.2 s was seen at 2.3 s or at 4-5 s. The container runtime now wakes
on the pod's watch events and ends the start itself; these tests hold KubeSpawner's start in its sleep
(it never returns) and show the start ending on the watch event, and where it must not (a pod still going
away, KubeSpawner work still to do after the pod runs).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kubespawner import KubeSpawner

from gpuworkspace_spawner.k8s.reflectors import LastSeen
from gpuworkspace_spawner.lifecycle.phasetiming import PhaseClock
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
    status: dict[str, Any] = {"phase": "Running" if running else "Pending", "podIP": "10.0.0.7"}
    status["containerStatuses"] = [{"name": "notebook", "ready": running}]
    status["conditions"] = [{"type": "Ready", "status": "True" if running else "False"}]
    return {"metadata": meta, "spec": {}, "status": status}


class FakeKubeSpawner(SimpleNamespace):
    reflectors: dict[str, Any] = {}  # noqa: RUF012 -- KubeSpawner's class-level reflectors: no claim watch here

    def _get_reflector_key(self, kind: str) -> str:
        return kind


def spawner(cache: LastSeen, **hooks: Any) -> Any:
    """What SpawnerPorts reads of a KubeSpawner: its pod cache, names, hooks, its own is_pod_running."""
    settings: dict[str, Any] = {
        "internal_ssl": False,
        "services_enabled": False,
        "after_pod_created_hook": None,
        "port": 8888,
        **hooks,
    }
    fake = FakeKubeSpawner(
        namespace=NS,
        pod_name=POD,
        pod_reflector=SimpleNamespace(resources=cache, pods=cache),
        pod_id=None,
        events=[],
        **settings,
    )
    fake.is_pod_running = lambda p: KubeSpawner.is_pod_running(fake, p)
    fake._get_pod_url = lambda p: f"http://{p['status']['podIP']}:{fake.port}"  # KubeSpawner's, simplified
    return fake


async def supervise(cache: LastSeen, earlier: str | None, **hooks: Any) -> tuple[Any, asyncio.Task[Any], Any]:
    """Run the supervised start against a KubeSpawner start that sleeps (its backoff) until cancelled."""
    fake = spawner(cache, **hooks)
    runtime = ContainerRuntime(CONTEXT, cast(Ports, SpawnerPorts(fake)))
    kubespawner_start = asyncio.ensure_future(asyncio.sleep(3600, result="http://kubespawner:8888"))
    supervised = asyncio.ensure_future(runtime._supervise(kubespawner_start, 0.0, PhaseClock(), earlier))
    return fake, kubespawner_start, supervised


async def test_the_start_ends_on_the_watch_event_that_shows_the_pod_running() -> None:
    cache = LastSeen({}, OrderedDict())
    woken: list[bool] = []
    wait = cache.changes.next_change

    async def recorded(key: str, limit_s: float) -> bool:
        woken.append(await wait(key, limit_s))
        return woken[-1]

    cache.changes.next_change = recorded  # type: ignore[method-assign]
    fake, kubespawner_start, supervised = await supervise(cache, earlier=None)
    cache[KEY] = pod("new", running=False)  # created, scheduled, pulling
    await asyncio.sleep(0.05)
    assert not supervised.done()
    cache[KEY] = pod("new", running=True)  # the kubelet's readiness probe passed
    url = await asyncio.wait_for(supervised, 30)
    assert url == "http://10.0.0.7:8888"
    assert woken[-1] is True  # ended by the watch event, not by the one-second tick
    assert fake.pod_id == "new"
    assert kubespawner_start.cancelled()


async def test_a_running_pod_that_is_going_away_is_not_the_new_one() -> None:
    cache = LastSeen({KEY: pod("old", running=True)}, OrderedDict())
    fake, _, supervised = await supervise(cache, earlier="old")
    cache[KEY] = pod("old", running=True)  # a status update of the earlier pod
    await asyncio.sleep(0.05)
    assert not supervised.done()
    cache[KEY] = pod("old", running=True, deleting=True)
    cache.pop(KEY)
    cache[KEY] = pod("new", running=True)
    assert await asyncio.wait_for(supervised, 30) == "http://10.0.0.7:8888"
    assert fake.pod_id == "new"


@pytest.mark.parametrize(
    "hooks",
    [{"internal_ssl": True}, {"services_enabled": True}, {"after_pod_created_hook": lambda s, p: None}],
    ids=["internal_ssl", "services_enabled", "after_pod_created_hook"],
)
async def test_kubespawner_finishes_the_start_when_it_has_work_after_the_pod_runs(
    hooks: dict[str, Any],
) -> None:
    cache = LastSeen({}, OrderedDict())
    _, kubespawner_start, supervised = await supervise(cache, earlier=None, **hooks)
    cache[KEY] = pod("new", running=True)
    await asyncio.sleep(0.05)
    assert not supervised.done()  # KubeSpawner's own start decides
    kubespawner_start.cancel()
    await asyncio.gather(kubespawner_start, return_exceptions=True)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(supervised, 2)
