"""The jobs service's operations against a simulated cluster with Kueue (issue 17).

A user's home disk holds a script; a submission snapshots the disk, restores it as a new claim and
creates a suspended, queue-labelled Job. Kueue admits it (one GPU of quota), the Job controller runs its
pod, and the script runs for real on the restored copy (the kubelet maps the working dir through the
pod's mounts), writing a file there. With the quota used up a second job stays queued and its state
carries Kueue's message; cancelling the first deletes its Job, pods, claim and snapshot, and the
second is admitted and completes. Refusals (another user's job, a profile outside the user's groups, a
path out of the home directory) write nothing; a submission that fails half-way (even before its Job
exists, so the garbage collector cannot help) deletes what it made. Every submission is audited.

Starts a devcluster, in this process's instance (``$GPUWS_DEVCLUSTER_INSTANCE``, tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client, config

from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.resources import find
from gpuworkspace_devcluster.sim.csi import claim_volume_dir
from gpuworkspace_spawner.catalog import CatalogSource
from gpuworkspace_spawner.k8s import Forbidden, batch
from gpuworkspace_spawner.services.jobs.operations import JobOperations, Settings
from gpuworkspace_spawner.services.serving import ServiceError

pytestmark = pytest.mark.slow
NS = "gpu-workspaces"
K = "kueue.x-k8s.io"
PVCS, JOBS, PODS = (
    find("", "v1", "persistentvolumeclaims"),
    find("batch", "v1", "jobs"),
    find("", "v1", "pods"),
)
VSS = find("snapshot.storage.k8s.io", "v1", "volumesnapshots")
WLS = find(K, "v1beta2", "workloads")
IMAGE = (
    "quay.io/jupyter/base-notebook@sha256:07ada0bb13ec7286cdaaeab442f196959e1330993fa72ec0503e0bc429dbf29f"
)
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ALICE = {"kind": "user", "name": "alice", "groups": ["ml"], "scopes": ["read:servers!user=alice"]}
BOB = {"kind": "user", "name": "bob", "groups": ["ml"], "scopes": ["read:servers!user=bob"]}
ADMIN = {"kind": "user", "name": "root", "groups": [], "scopes": ["admin:servers"]}
SCRIPT = """\
import pathlib, sys, time
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
time.sleep(float(args.get("seconds", "0")))
pathlib.Path("result.txt").write_text("ran with " + args.get("tag", "") + "\\n")
print("done", args.get("tag"))
"""


def _catalog(root: Path) -> Path:
    docs = [
        {
            "apiVersion": "gpuworkspace.dev/v1alpha1",
            "kind": "WorkspaceCatalog",
            "metadata": {"name": "t"},
            "spec": {"version": "2026.12.1"},
        },
        {
            "apiVersion": "gpuworkspace.dev/v1alpha1",
            "kind": "WorkspaceProfile",
            "metadata": {"name": "cpu"},
            "spec": {"displayName": "CPU", "image": IMAGE, "security": {"runAsUser": 1000}},
        },
    ]
    for name, groups in (("train-1gpu", ["ml"]), ("secret-8gpu", ["other"])):
        docs.append(
            {
                "apiVersion": "gpuworkspace.dev/v1alpha1",
                "kind": "JobProfile",
                "metadata": {"name": name},
                "spec": {
                    "displayName": name,
                    "image": IMAGE,
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                        "limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                    },
                    "queue": "training",
                    "maxRuntime": "1h",
                    "access": {"groups": groups},
                    "outputs": {"objectStore": {"url": "s3://jobs/out/"}},
                },
            }
        )
    root.mkdir(parents=True)
    (root / "catalog.yaml").write_text(yaml.safe_dump_all(docs))
    return root


def _kueue(cluster: DevCluster) -> None:
    v = cluster.verbs
    v.create(
        find(K, "v1beta2", "resourceflavors"),
        "",
        {
            "apiVersion": f"{K}/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "h100"},
            "spec": {"nodeLabels": {"gpuworkspace.dev/pool": "gpu"}, "tolerations": [GPU_TOLERATION]},
        },
    )
    resources = [
        {"name": "cpu", "nominalQuota": 64},
        {"name": "memory", "nominalQuota": "256Gi"},
        {"name": "nvidia.com/gpu", "nominalQuota": 1},
    ]
    v.create(
        find(K, "v1beta2", "clusterqueues"),
        "",
        {
            "apiVersion": f"{K}/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "training"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [{"name": "h100", "resources": resources}],
                    }
                ],
            },
        },
    )
    v.create(
        find(K, "v1beta2", "localqueues"),
        NS,
        {
            "apiVersion": f"{K}/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "training"},
            "spec": {"clusterQueue": "training"},
        },
    )


def _home(cluster: DevCluster, user: str) -> None:
    labels = {
        "gpuworkspace.dev/user": user,
        "gpuworkspace.dev/server": "default",
        "gpuworkspace.dev/disk": "home",
    }
    annotations = {
        "gpuworkspace.dev/username": user,
        "gpuworkspace.dev/servername": "",
        "gpuworkspace.dev/profile": "cpu",
    }
    cluster.verbs.create(
        PVCS,
        NS,
        {
            "metadata": {"name": f"claim-{user}", "labels": labels, "annotations": annotations},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "ceph-rbd",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )


@dataclass
class Stack:
    cluster: DevCluster
    ops: JobOperations

    def objects(self, rt: Any) -> list[dict[str, Any]]:
        return self.cluster.verbs.list(rt, NS)[0]

    def names(self, rt: Any) -> set[str]:
        return {o["metadata"]["name"] for o in self.objects(rt)}

    def volume(self, claim: str) -> Path | None:
        sim = self.cluster.simulation
        assert sim is not None and sim.ctx is not None
        return claim_volume_dir(sim.ctx, NS, claim)


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with DevCluster(tmp_path / "state", simulate=True) as cluster:
        _kueue(cluster)
        for user in ("alice", "bob"):
            _home(cluster, user)
        await config.load_kube_config(config_file=str(cluster.kubeconfig))
        api = client.CoreV1Api(client.ApiClient())

        async def groups_of(user: str) -> frozenset[str]:
            raise AssertionError("the callers' models carry their groups")

        catalog = CatalogSource(_catalog(tmp_path / "catalog"), on_reload_error=print)
        ops = JobOperations(api, Settings(namespace=NS, snapshot_timeout_s=30), catalog, groups_of)
        s = Stack(cluster, ops)
        home = await until(lambda: s.volume("claim-alice"), "alice's home disk bound")
        (home / "work").mkdir()
        (home / "work" / "train.py").write_text(SCRIPT)
        yield s
        await api.api_client.close()


async def until(check: Callable[[], Any], what: str, limit_s: float = 30) -> Any:
    deadline = asyncio.get_running_loop().time() + limit_s
    while True:
        value = check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def state_of(
    stack: Stack, name: str, want: str, limit_s: float = 30, reason: str = ""
) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + limit_s
    while True:
        view = await stack.ops.job(ALICE, name)
        if view["state"] == want and reason in view["reason"]:
            return view
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"job {name} is {view['state']} ({view['reason']}), not {want}")
        await asyncio.sleep(0.2)


def _submit(**extra: Any) -> dict[str, Any]:
    return {"profile": "train-1gpu", "script": "work/train.py", **extra}


async def test_a_job_runs_on_a_copy_of_the_home_disk_and_a_second_waits_for_quota(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpuworkspace.audit")
    first = await stack.ops.submit(ALICE, _submit(parameters={"seconds": 600, "tag": "first"}))
    name = first["name"]
    job = stack.cluster.store.get(JOBS, NS, name)
    assert job is not None and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    claim = stack.cluster.store.get(PVCS, NS, f"{name}-code")
    assert claim is not None and claim["spec"]["dataSource"]["name"] == f"{name}-code"
    assert [r["uid"] for r in claim["metadata"]["ownerReferences"]] == [job["metadata"]["uid"]]
    running = await state_of(stack, name, "running")
    assert running["queue"] == "training" and running["user"] == "alice"

    second = await stack.ops.submit(ALICE, _submit(parameters={"tag": "second"}))
    queued = await state_of(stack, second["name"], "queued", reason="insufficient unused quota")
    assert "waiting for quota in queue training: couldn't assign flavors to pod set main" in queued["reason"]
    assert "nvidia.com/gpu" in queued["reason"] and "1 more needed" in queued["reason"], queued

    cancelled = await stack.ops.cancel(ALICE, name)
    assert cancelled["cancelled"] and cancelled["was"] == "running"
    await until(lambda: name not in stack.names(JOBS), "the first Job deleted")
    await until(lambda: f"{name}-code" not in stack.names(PVCS), "the first code claim deleted")
    await until(lambda: f"{name}-code" not in stack.names(VSS), "the first snapshot deleted")

    done = await state_of(stack, second["name"], "succeeded", limit_s=60)
    assert done["finished"]
    copy = stack.volume(f"{second['name']}-code")
    assert copy is not None and (copy / "work" / "result.txt").read_text() == "ran with second\n"
    home = stack.volume("claim-alice")
    assert home is not None and not (home / "work" / "result.txt").exists()  # never the live disk
    assert "done second" in await stack.ops.logs(ALICE, second["name"])

    listed = await stack.ops.jobs(ALICE)
    assert [j["name"] for j in listed] == [second["name"]]
    records = [
        json.loads(r.getMessage().split(" ", 1)[1])
        for r in caplog.records
        if r.getMessage().startswith("audit ")
    ]
    submitted = [r for r in records if r["action"] == "job-submitted"]
    assert len(submitted) == 2 and submitted[0]["actor"] == "alice"
    details = submitted[0]["details"]
    assert details["script"] == "work/train.py" and details["jobProfile"] == "train-1gpu"
    assert details["imageDigest"].startswith("sha256:07ada0bb") and details["queue"] == "training"
    assert details["identity"] == Settings().identity and details["workspace"] == "default"
    assert any(r["action"] == "job-cancelled" for r in records)


async def test_others_and_forbidden_profiles_are_refused_with_nothing_written(stack: Stack) -> None:
    job = await stack.ops.submit(ALICE, _submit(parameters={"seconds": 600}))
    before = {rt.plural: stack.names(rt) for rt in (JOBS, PVCS, VSS)}

    for call in (
        stack.ops.job(BOB, job["name"]),
        stack.ops.cancel(BOB, job["name"]),
        stack.ops.logs(BOB, job["name"]),
    ):
        with pytest.raises(ServiceError) as caught:
            await call
        assert caught.value.status == 403
    assert await stack.ops.jobs(BOB) == []
    assert [j["name"] for j in await stack.ops.jobs(ADMIN)] == [job["name"]]

    refusals = {}
    for body in (
        _submit(profile="secret-8gpu"),
        _submit(profile="no-such-profile"),
        _submit(script="../bob/steal.py"),
    ):
        with pytest.raises(ServiceError) as caught:
            await stack.ops.submit(ALICE, body)
        assert caught.value.status == 400
        refusals[body["profile"]] = caught.value.message
    # a profile outside the user's groups reads exactly like one that does not exist
    assert refusals["secret-8gpu"].replace("secret-8gpu", "X") == refusals["no-such-profile"].replace(
        "no-such-profile", "X"
    )
    assert {rt.plural: stack.names(rt) for rt in (JOBS, PVCS, VSS)} == before
    assert job["name"] in stack.names(JOBS)  # bob's cancel did not touch it

    await stack.ops.cancel(ADMIN, job["name"])
    await until(lambda: job["name"] not in stack.names(JOBS), "the admin's cancel")


async def test_a_failed_submission_leaves_nothing(stack: Stack) -> None:
    stack.cluster.verbs.delete(find(K, "v1beta2", "localqueues"), NS, "training", {})
    before = {rt.plural: stack.names(rt) for rt in (JOBS, PVCS, VSS)}
    original = stack.ops._create

    async def failing_create(ctx: Any, undo: list[Any]) -> dict[str, Any]:
        await original(ctx, undo)
        raise ServiceError(500, "the API server went away after the Job was created")

    stack.ops._create = failing_create  # type: ignore[method-assign]
    with pytest.raises(ServiceError, match="went away"):
        await stack.ops.submit(ALICE, _submit())
    await until(
        lambda: {rt.plural: stack.names(rt) for rt in (JOBS, PVCS, VSS)} == before, "everything undone"
    )


async def test_a_submission_whose_job_is_refused_deletes_its_claim_and_snapshot(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before the Job exists, nothing is owned by a Job: the undo itself deletes the claim (the
    volume binder has updated it since it was created) and the snapshot, not the garbage collector."""
    before = {rt.plural: stack.names(rt) for rt in (JOBS, PVCS, VSS)}

    async def refused(*_: Any, **__: Any) -> dict[str, Any]:
        await asyncio.sleep(0.5)  # the binder binds the new claim meanwhile
        raise Forbidden(403, 'jobs.batch is forbidden: cannot create resource "jobs"')

    monkeypatch.setattr(batch, "create_job", refused)
    with pytest.raises(Forbidden):
        await stack.ops.submit(ALICE, _submit())
    await until(
        lambda: {rt.plural: stack.names(rt) for rt in (JOBS, PVCS, VSS)} == before, "claim and snapshot gone"
    )
