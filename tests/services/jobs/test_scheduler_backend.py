"""JupyterLab's notebook jobs (jupyter-scheduler with our backend) against the real jobs service app:
its routes, token checks, submission checks and access decisions are real; only the cluster is an
in-memory stand-in (the Job the service would create is built by the real builder). The cluster side is
tests/services/jobs/test_jobs_devcluster.py; the single-user server's side tests/e2e/test_notebook_jobs.py."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_scheduler.exceptions import SchedulerError
from jupyter_scheduler.models import CreateJob, CreateJobDefinition, ListJobsQuery, Status, UpdateJob
from tornado.testing import bind_unused_port
from traitlets.config import Config

from gpuworkspace_spawner.catalog.jobprofiles import JobOutputs, JobProfile
from gpuworkspace_spawner.catalog.model import Access, Catalog, Resources
from gpuworkspace_spawner.jobs.manifests import build_job
from gpuworkspace_spawner.scheduler.backend import NO_RECURRING, GPUWorkspaceScheduler, JobProfiles
from gpuworkspace_spawner.services.jobs.app import make_app
from gpuworkspace_spawner.services.jobs.operations import JobOperations, Settings
from gpuworkspace_spawner.services.serving import ServiceError, http_server

PREFIX = "/services/gpuworkspace-jobs/"
SERVER_SCOPES = ["access:servers!server=alice/", "users:activity!user=alice"]
ACCESS = "access:services!service=gpuworkspace-jobs"
# single-user server tokens as the hub describes them: no groups (no read:users:groups)
TOKENS = {
    "alice-server": {"kind": "user", "name": "alice", "scopes": [*SERVER_SCOPES, ACCESS]},
    "alice-server-default-scopes": {"kind": "user", "name": "alice", "scopes": SERVER_SCOPES},
    "bob-server": {"kind": "user", "name": "bob", "scopes": [ACCESS]},
}
GROUPS = {"alice": frozenset({"researchers"}), "bob": frozenset({"researchers"})}
IMAGE = "quay.io/jupyter/base-notebook@sha256:" + "a" * 64
ONE_GPU = JobProfile(
    "e2e-job-1gpu",
    "One GPU",
    IMAGE,
    "training",
    3600,
    JobOutputs(object_store_url="s3://jobs/outputs/"),
    resources=Resources(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"}),
    access=Access(groups=frozenset({"researchers"})),
)
OTHERS = JobProfile(
    "gpu-users-only",
    "GPU users",
    IMAGE,
    "training",
    3600,
    JobOutputs(object_store_url="s3://jobs/outputs/"),
    access=Access(groups=frozenset({"gpu-users"})),
)


class FakeAuth:
    api_url = "http://hub.invalid/hub/api"

    async def get_user(self, handler: Any, sync: bool = False) -> dict[str, Any] | None:
        model = TOKENS.get(handler.request.headers.get("Authorization", "").removeprefix("token "))
        handler._token_authenticated = model is not None
        return model


class FakeCatalog:
    def current(self) -> Catalog:
        return Catalog(version="1", profiles=(), job_profiles=(ONE_GPU, OTHERS))


class InMemoryCluster(JobOperations):
    """The jobs service's operations with the cluster in a dict: submissions build the real Job."""

    def __init__(self) -> None:
        async def groups_of(user: str) -> frozenset[str]:
            return GROUPS.get(user, frozenset())

        super().__init__(None, Settings(events=False), FakeCatalog(), groups_of)  # type: ignore[arg-type]
        self.store: dict[str, dict[str, Any]] = {}
        self.cancelled: list[str] = []
        self.uids = itertools.count(1)

    async def _home(self, identity: Any) -> dict[str, Any]:
        return {"metadata": {"name": f"home-{identity.user}", "annotations": {}}, "spec": {}}

    async def _create(self, ctx: Any, undo: list[Any]) -> dict[str, Any]:
        job = build_job(ctx)
        job["metadata"] |= {"uid": f"uid-{next(self.uids)}", "creationTimestamp": "2026-01-02T03:04:05Z"}
        self.store[job["metadata"]["name"]] = job
        return job

    async def _list_jobs(self) -> list[dict[str, Any]]:
        return list(self.store.values())

    async def _read_job(self, name: str) -> dict[str, Any]:
        if name not in self.store:
            raise ServiceError(404, f"no job {name}")
        return self.store[name]

    async def _workloads(self) -> dict[str, dict[str, Any]]:
        reason = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 1 more needed"
        condition = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": reason}
        return {j["metadata"]["uid"]: {"status": {"conditions": [condition]}} for j in self.store.values()}

    async def cancel(self, caller: dict[str, Any], name: str) -> dict[str, Any]:
        await self.readable_job(caller, name)  # the real access check
        self.store.pop(name)
        self.cancelled.append(name)
        return {"name": name, "cancelled": True}


@pytest.fixture
async def service() -> AsyncIterator[tuple[str, InMemoryCluster]]:
    ops = InMemoryCluster()
    sock, port = bind_unused_port()
    server = http_server(make_app(ops, FakeAuth(), PREFIX), max_body_bytes=1 << 20)
    server.add_sockets([sock])
    yield f"http://127.0.0.1:{port}{PREFIX}api/v1", ops
    server.stop()


def scheduler(
    url: str, home: Path, monkeypatch: pytest.MonkeyPatch, token: str = "alice-server"
) -> GPUWorkspaceScheduler:
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", token)
    monkeypatch.setenv("GPUWS_JOBS_URL", url)
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    config = Config()
    config.GPUWorkspaceScheduler.home_dir = str(home)
    config.GPUWorkspaceScheduler.ledger_path = str(home / ".local/share/jupyter/gpuworkspace-jobs.json")
    return GPUWorkspaceScheduler(
        root_dir=str(home), environments_manager=JobProfiles(), db_url="sqlite://", config=config
    )


def create(**over: Any) -> CreateJob:
    body = {
        "input_uri": "mnist/train.ipynb",
        "runtime_environment_name": "e2e-job-1gpu",
        "parameters": {"epochs": "3", "run_name": "baseline"},
        "output_formats": ["ipynb"],
        "name": "mnist baseline",
    }
    return CreateJob(**{**body, **over})


async def test_the_dialog_offers_only_her_job_profiles(
    service: tuple[str, InMemoryCluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = service
    sched = scheduler(url, tmp_path, monkeypatch)
    envs = await sched.environments_manager.list_environments()  # type: ignore[misc]
    assert [e.name for e in envs] == ["e2e-job-1gpu"]  # not gpu-users-only
    assert envs[0].description == "One GPU (1 GPU, queue training, at most 1 h)"


async def test_create_list_stop_delete(
    service: tuple[str, InMemoryCluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cluster = service
    sched = scheduler(url, tmp_path, monkeypatch)
    job_id = await sched.create_job(create())
    job = cluster.store[job_id]
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert job["metadata"]["annotations"]["gpuworkspace.dev/username"] == "alice"
    pairs = list(zip(command, command[1:], command[2:], strict=False))
    assert ("-p", "epochs", "3") in pairs and ("-r", "run_name", "baseline") in pairs

    listed = await sched.list_jobs(ListJobsQuery())
    (row,) = listed.jobs
    assert row.job_id == job_id and row.name == "mnist baseline" and row.status == Status.QUEUED
    assert "insufficient unused quota for nvidia.com/gpu in flavor h100" in (row.status_message or "")
    assert await sched.count_jobs(type("Q", (), {"status": Status.QUEUED})()) == 1  # type: ignore[arg-type]

    await sched.update_job(job_id, UpdateJob(status=Status.STOPPED))
    assert cluster.cancelled == [job_id] and job_id not in cluster.store
    stopped = await sched.get_job(job_id)
    assert stopped.status == Status.STOPPED and stopped.name == "mnist baseline"
    assert [j.status for j in (await sched.list_jobs(ListJobsQuery())).jobs] == [Status.STOPPED]

    await sched.delete_job(job_id)
    assert (await sched.list_jobs(ListJobsQuery())).jobs == []
    with pytest.raises(SchedulerError, match="404"):
        await sched.get_job(job_id)


async def test_jobs_the_api_forgot_are_pruned_from_the_servers_records(
    service: tuple[str, InMemoryCluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished job's Job goes after ttlSecondsAfterFinished: the next listing forgets this server's
    record of it (its name, parameters), so the records do not grow forever; a stopped one is kept."""
    url, cluster = service
    sched = scheduler(url, tmp_path, monkeypatch)
    ledger = tmp_path / ".local/share/jupyter/gpuworkspace-jobs.json"
    done, stopped, running = [await sched.create_job(create(name=n)) for n in ("done", "stopped", "running")]
    await sched.stop_job(stopped)
    cluster.store.pop(done)  # its TTL passed: the API no longer has it

    listed = await sched.list_jobs(ListJobsQuery())
    assert sorted(j.name for j in listed.jobs) == ["running", "stopped"]
    records = json.loads(ledger.read_text())
    assert sorted(records["created"]) == sorted([stopped, running]), records
    before = ledger.stat().st_mtime_ns
    await sched.list_jobs(ListJobsQuery())
    assert ledger.stat().st_mtime_ns == before  # nothing to prune: nothing written


async def test_a_profile_outside_her_groups_is_refused_and_nothing_is_made(
    service: tuple[str, InMemoryCluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cluster = service
    sched = scheduler(url, tmp_path, monkeypatch)
    with pytest.raises(SchedulerError, match="'gpu-users-only' is not a job profile you can use"):
        await sched.create_job(create(runtime_environment_name="gpu-users-only"))
    with pytest.raises(SchedulerError, match="only a notebook"):
        await sched.create_job(create(input_uri="data.csv"))
    assert cluster.store == {}


async def test_recurring_definitions_are_refused_clearly(
    service: tuple[str, InMemoryCluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cluster = service
    sched = scheduler(url, tmp_path, monkeypatch)
    model = CreateJobDefinition(
        input_uri="mnist/train.ipynb",
        runtime_environment_name="e2e-job-1gpu",
        name="nightly",
        schedule="0 2 * * *",
    )
    with pytest.raises(SchedulerError) as refused:
        sched.create_job_definition(model)
    assert str(refused.value) == NO_RECURRING and "Run now" in NO_RECURRING
    assert cluster.store == {}


async def test_the_servers_default_token_scopes_are_not_enough(
    service: tuple[str, InMemoryCluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without access:services!service=gpuworkspace-jobs (server_token_scopes) the service refuses."""
    url, cluster = service
    sched = scheduler(url, tmp_path, monkeypatch, token="alice-server-default-scopes")
    with pytest.raises(SchedulerError, match="403"):
        await sched.create_job(create())
    assert cluster.store == {}


async def test_another_users_job_is_neither_shown_nor_stopped(
    service: tuple[str, InMemoryCluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cluster = service
    bobs = await scheduler(url, tmp_path / "bob", monkeypatch, token="bob-server").create_job(create())
    alices = scheduler(url, tmp_path / "alice", monkeypatch)
    assert (await alices.list_jobs(ListJobsQuery())).jobs == []
    with pytest.raises(SchedulerError, match="403: alice may not see or cancel job"):
        await alices.stop_job(bobs)
    with pytest.raises(SchedulerError, match="403"):
        await alices.delete_job(bobs)
    assert list(cluster.store) == [bobs] and cluster.cancelled == []
