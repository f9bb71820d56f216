"""The self-healing shell (``selfhealing.py``) on fakes: what poll and stop do with the decision.

The cluster is a dict of pods standing in for KubeSpawner's watch cache; the gateway's pod calls are
replaced. End-to-end behaviour (a real hub, proxy and devcluster) is in tests/e2e/test_self_healing.py.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from types import SimpleNamespace
from typing import Any

import pytest
from traitlets.config import LoggingConfigurable

from gpuworkspace_spawner import selfhealing
from gpuworkspace_spawner.compat import SpawnException
from gpuworkspace_spawner.k8s.reflectors import LastSeen
from gpuworkspace_spawner.selfhealing import FAILURE_KEY, SelfHealing

NAME = "jupyter-alice"


def running_pod(uid: str = "uid-1", ip: str = "10.0.0.1") -> dict[str, Any]:
    return {
        "metadata": {"name": NAME, "namespace": "ws", "uid": uid},
        "spec": {
            "nodeName": "gpu-1",
            "containers": [{"name": "notebook", "env": [{"name": "JUPYTERHUB_API_TOKEN", "value": "tok"}]}],
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "notebook", "state": {"running": {}}, "restartCount": 0}],
        },
    }


class _KubeSpawnerStandIn(LoggingConfigurable):
    """What SelfHealing calls on KubeSpawner: poll and stop."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kube_polls = 0
        self.deleted = False

    async def poll(self) -> int | None:
        self.kube_polls += 1
        return None

    async def stop(self, now: bool = False) -> None:
        self.deleted = True
        self.cluster.pop(NAME, None)  # type: ignore[attr-defined]


class _Server:
    def __init__(self) -> None:
        self.ip, self.port = "10.0.0.1", 8888


class FakeSpawner(SelfHealing, _KubeSpawnerStandIn):
    def __init__(self, **kwargs: Any) -> None:
        self.cluster: dict[str, dict[str, Any]] = {}
        self.audits: list[tuple[str, str]] = []
        self.fencing_refuses = False
        self.workspace_state = {}
        self.api, self.namespace, self.pod_name, self.pvc_name = None, "ws", NAME, "home-alice"
        self.k8s_api_request_timeout, self.unschedulable_timeout, self.attach_failure_timeout = 3, 60.0, 60.0
        self.start_timeout, self.server, self.user, self.name = 30, _Server(), object(), ""
        self.events: list[Any] = []
        super().__init__(**kwargs)

    db = type("Db", (), {"commit": staticmethod(lambda: None)})()

    async def _start_watching_pods(self) -> None:
        return None

    def _pod(self) -> dict[str, Any] | None:
        return self.cluster.get(NAME)

    def _claim(self) -> dict[str, Any]:
        return {"status": {"phase": "Bound"}}

    def _get_pod_url(self, pod: dict[str, Any]) -> str:
        return f"http://{pod['status']['podIP']}:8888"

    async def _record_last_node(self, node: str | None) -> None:
        return None

    async def _check_fencing(self, claim: str, *, own_uids: frozenset[str]) -> None:
        if self.fencing_refuses:
            raise SpawnException("Your disk may still be in use on another node", reason="fencing")

    async def _audit(self, action: str, kind: str, name: str, message: str, obj: Any = None) -> None:
        self.audits.append((action, message))


@pytest.fixture
def spawner(monkeypatch: pytest.MonkeyPatch) -> FakeSpawner:
    s = FakeSpawner(heal_backoff=[0.0, 0.2], heal_window=60.0, heal_max_restarts=2)

    async def create_pod(api: Any, namespace: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        pod = running_pod(uid=f"uid-{len(s.audits) + 2}", ip="10.0.0.9")
        pod["metadata"]["annotations"] = body["metadata"]["annotations"]
        pod["spec"] = body["spec"]
        s.cluster[NAME] = pod
        return pod

    async def delete_pod(api: Any, namespace: str, name: str, **_: Any) -> dict[str, Any]:
        s.cluster.pop(name, None)
        return {}

    monkeypatch.setattr(selfhealing.gateway, "create_pod", create_pod)
    monkeypatch.setattr(selfhealing.gateway, "delete_pod", delete_pod)
    return s


async def settle(s: FakeSpawner) -> None:
    """Let the rebuild task (if any) finish."""
    task = s._heal_task
    if task is not None:
        await asyncio.wait_for(asyncio.shield(task), 5)


async def test_deleted_pod_is_rebuilt_with_the_same_spec_and_routed(spawner: FakeSpawner) -> None:
    spawner.cluster[NAME] = running_pod()
    assert await spawner.poll() is None  # seen running
    del spawner.cluster[NAME]  # kubectl delete pod
    before = selfhealing.REBUILDS.labels(reason="deleted")._value.get()
    assert await spawner.poll() is None  # still running for the hub: a rebuild is under way
    await settle(spawner)
    rebuilt = spawner.cluster[NAME]
    assert rebuilt["metadata"]["annotations"]["gpuworkspace.dev/rebuild-of"] == "uid-1"
    assert rebuilt["spec"]["containers"][0]["env"][0]["value"] == "tok"  # the same server token
    assert "nodeName" not in rebuilt["spec"]
    assert (spawner.server.ip, spawner.server.port) == ("10.0.0.9", 8888)  # the hub follows the new IP
    assert [a for a, _ in spawner.audits] == ["workspace-rebuilt"]
    assert selfhealing.REBUILDS.labels(reason="deleted")._value.get() == before + 1


async def test_a_stop_is_never_undone(spawner: FakeSpawner) -> None:
    spawner.cluster[NAME] = running_pod()
    await spawner.poll()
    await spawner.stop()
    assert spawner.deleted and NAME not in spawner.cluster
    assert await spawner.poll() is None  # KubeSpawner's answer; no rebuild
    await settle(spawner)
    assert NAME not in spawner.cluster and spawner.audits == []


async def test_a_stop_during_the_back_off_cancels_the_rebuild(spawner: FakeSpawner) -> None:
    spawner.heal_backoff = [5.0]
    spawner.cluster[NAME] = running_pod()
    await spawner.poll()
    del spawner.cluster[NAME]
    assert await spawner.poll() is None
    assert spawner._heal_task is not None  # waiting out its back-off
    await spawner.stop()
    await asyncio.sleep(0.05)
    assert NAME not in spawner.cluster and spawner.audits == []


async def test_fencing_refusal_gives_up_with_its_reason(spawner: FakeSpawner) -> None:
    spawner.cluster[NAME] = running_pod()
    await spawner.poll()
    del spawner.cluster[NAME]
    spawner.fencing_refuses = True
    assert await spawner.poll() is None
    await settle(spawner)
    assert await spawner.poll() == 1  # the hub now sees it stopped
    assert spawner.deleted  # stopped first: JupyterHub does not call stop() after poll() says 1
    assert await spawner.poll() == 1  # and JupyterHub's second poll does not audit again
    assert [a for a, _ in spawner.audits] == ["workspace-rebuild-failed"]
    assert "in use on another node" in spawner.workspace_state[FAILURE_KEY]["message"]


async def test_too_many_losses_give_up(spawner: FakeSpawner) -> None:
    spawner.cluster[NAME] = running_pod()
    await spawner.poll()
    for _ in range(2):  # heal_backoff has two steps
        del spawner.cluster[NAME]
        await spawner.poll()
        await asyncio.sleep(0.25)  # the second step's back-off
        await spawner.poll()
        await settle(spawner)
        assert NAME in spawner.cluster
    del spawner.cluster[NAME]
    assert await spawner.poll() == 1
    assert spawner.deleted and spawner._stop_requested
    assert spawner.workspace_state[FAILURE_KEY]["reason"] == "deleted"
    assert "rebuilt 2 time(s)" in spawner.workspace_state[FAILURE_KEY]["message"]


async def test_failed_pod_is_deleted_then_rebuilt(spawner: FakeSpawner) -> None:
    spawner.cluster[NAME] = running_pod()
    await spawner.poll()
    failed = running_pod()
    failed["status"]["phase"] = "Failed"
    failed["status"]["containerStatuses"][0]["state"] = {
        "terminated": {"reason": "OOMKilled", "exitCode": 137}
    }
    spawner.cluster[NAME] = failed
    assert await spawner.poll() is None
    await settle(spawner)
    assert spawner.cluster[NAME]["metadata"]["uid"] != "uid-1"
    assert "oom-killed" in spawner.audits[0][1]


async def test_an_eviction_seen_only_by_the_watch_is_counted_as_one(spawner: FakeSpawner) -> None:
    spawner.cluster[NAME] = running_pod()
    await spawner.poll()
    evicted = running_pod()
    evicted["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    evicted["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    )
    del spawner.cluster[NAME]  # between two polls: only the pod watch saw it terminating
    spawner.pod_reflector = SimpleNamespace(resources=LastSeen({}, OrderedDict({f"ws/{NAME}": evicted})))
    await spawner.poll()
    await settle(spawner)
    assert spawner.audits[0][0] == "workspace-rebuilt" and "(evicted)" in spawner.audits[0][1]


async def test_an_eviction_right_after_a_rebuild_is_told_from_the_rebuilt_pod(
    spawner: FakeSpawner,
) -> None:
    spawner.cluster[NAME] = running_pod()
    await spawner.poll()
    del spawner.cluster[NAME]
    await spawner.poll()
    await settle(spawner)  # rebuilt and serving; no poll has seen the new pod yet
    rebuilt = spawner.cluster.pop(NAME)
    evicted = {**rebuilt, "metadata": {**rebuilt["metadata"], "deletionTimestamp": "2026-12-01T10:00:00Z"}}
    evicted["status"] = {
        **rebuilt["status"],
        "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}],
    }
    spawner.pod_reflector = SimpleNamespace(resources=LastSeen({}, OrderedDict({f"ws/{NAME}": evicted})))
    await spawner.poll()
    await settle(spawner)
    assert [a for a, _ in spawner.audits] == ["workspace-rebuilt", "workspace-rebuilt"]
    assert "(deleted)" in spawner.audits[0][1] and "(evicted)" in spawner.audits[1][1]


async def test_the_poll_of_a_stop_in_progress_does_not_rebuild(spawner: FakeSpawner) -> None:
    spawner.cluster[NAME] = running_pod()
    await spawner.poll()
    del spawner.cluster[NAME]
    spawner._stop_pending = True  # JupyterHub's User.stop: set, then poll(), then stop()
    await spawner.poll()
    assert spawner._heal_task is None and NAME not in spawner.cluster
