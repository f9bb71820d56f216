"""The jobs service's HTTP layer: routes, tokens, JSON errors and who sees which job (a stub hub and a
stub cluster: the cluster side is tests/services/jobs/test_jobs_devcluster.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tornado.httpclient import AsyncHTTPClient
from tornado.testing import bind_unused_port

from gpuworkspace_spawner.catalog.jobprofiles import JobOutputs, JobProfile
from gpuworkspace_spawner.catalog.model import Access, Catalog
from gpuworkspace_spawner.services.jobs.app import make_app
from gpuworkspace_spawner.services.jobs.operations import JobOperations, Settings
from gpuworkspace_spawner.services.serving import ServiceError, http_server

PREFIX = "/services/gpuworkspace-jobs/"
ACCESS = "access:services!service=gpuworkspace-jobs"
TOKENS = {
    "alice-token": {"kind": "user", "name": "alice", "groups": ["ml"], "scopes": [ACCESS]},
    "bob-token": {"kind": "user", "name": "bob", "groups": ["ml"], "scopes": [ACCESS]},
    "admin-token": {"kind": "user", "name": "root", "groups": [], "scopes": ["admin:servers", ACCESS]},
    "probe-token": {
        "kind": "user",
        "name": "alice",
        "groups": [],
        "scopes": ["access:servers!server=alice/"],
    },
}
PROFILE = JobProfile(
    "train", "Train", "img@sha256:" + "a" * 64, "training", 3600, JobOutputs(object_store_url="s3://b/")
)
SECRET = JobProfile(
    "secret",
    "S",
    "img@sha256:" + "a" * 64,
    "training",
    3600,
    JobOutputs(object_store_url="s3://b/"),
    access=Access(groups=frozenset({"other"})),
)
ALICES_JOB = {
    "metadata": {
        "name": "alice-train-abcde",
        "uid": "u-1",
        "labels": {"gpuworkspace.dev/kind": "job", "kueue.x-k8s.io/queue-name": "training"},
        "annotations": {"gpuworkspace.dev/username": "alice"},
    },
    "spec": {"suspend": True},
}


class FakeAuth:
    def __init__(self) -> None:
        self.api_url = "http://hub.invalid/hub/api"

    async def get_user(self, handler: Any, sync: bool = False) -> dict[str, Any] | None:
        header = handler.request.headers.get("Authorization", "")
        model = TOKENS.get(header.removeprefix("token "))
        handler._token_authenticated = model is not None
        return model


class FakeCatalog:
    def current(self) -> Catalog:
        return Catalog(version="1", profiles=(), job_profiles=(PROFILE, SECRET))


class StubOps(JobOperations):
    """Only the cluster calls are stubbed: the access decisions and the submission checks are real."""

    def __init__(self) -> None:
        async def groups_of(user: str) -> frozenset[str]:
            return frozenset()

        super().__init__(None, Settings(events=False), FakeCatalog(), groups_of)  # type: ignore[arg-type]
        self.writes: list[str] = []

    async def _read_job(self, name: str) -> dict[str, Any]:
        if name != ALICES_JOB["metadata"]["name"]:
            raise ServiceError(404, f"no job {name}")
        return ALICES_JOB

    async def _list_jobs(self) -> list[dict[str, Any]]:
        return [ALICES_JOB]

    async def _workloads(self) -> dict[str, dict[str, Any]]:
        return {}

    async def _home(self, identity: Any) -> dict[str, Any]:
        self.writes.append("home looked up")
        return {"metadata": {"name": "claim-alice", "annotations": {}}, "spec": {}}

    async def _create(self, ctx: Any, undo: list[Any]) -> dict[str, Any]:
        self.writes.append(ctx.submission.name)
        return {**ALICES_JOB, "metadata": {**ALICES_JOB["metadata"], "name": ctx.submission.name}}

    async def cancel(self, caller: dict[str, Any], name: str) -> dict[str, Any]:
        await self.readable_job(caller, name)
        self.writes.append(f"cancel {name}")
        return {"name": name, "cancelled": True}


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, StubOps]]:
    ops = StubOps()
    sock, port = bind_unused_port()
    server = http_server(make_app(ops, FakeAuth(), PREFIX), max_body_bytes=1 << 20)
    server.add_sockets([sock])
    yield f"http://127.0.0.1:{port}{PREFIX}api/v1", ops
    server.stop()


async def call(
    url: str, method: str = "GET", token: str | None = "alice-token", body: Any = None
) -> tuple[int, Any]:
    headers = {"Authorization": f"token {token}"} if token else {}
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    answer = await AsyncHTTPClient().fetch(
        url, method=method, headers=headers, body=data, raise_error=False, allow_nonstandard_methods=True
    )
    text = answer.body.decode()
    try:
        return answer.code, json.loads(text)
    except ValueError:
        return answer.code, text


async def test_submit_list_get_cancel(served: tuple[str, StubOps]) -> None:
    base, _ = served
    status, job = await call(f"{base}/jobs", "POST", body={"profile": "train", "notebook": "a/train.ipynb"})
    assert status == 201 and job["state"] == "queued" and job["name"].startswith("alice-train-")
    status, listed = await call(f"{base}/jobs")
    assert status == 200 and [j["name"] for j in listed["items"]] == ["alice-train-abcde"]
    assert (await call(f"{base}/jobs", token="bob-token"))[1] == {"items": []}  # not bob's
    status, one = await call(f"{base}/jobs/alice-train-abcde")
    assert status == 200 and one["user"] == "alice" and "waiting" in one["reason"]
    status, done = await call(f"{base}/jobs/alice-train-abcde", "DELETE")
    assert status == 200 and done["cancelled"]


@pytest.mark.parametrize(
    ("method", "path", "token", "body", "status", "words"),
    [
        pytest.param("GET", "/jobs", None, None, 403, "missing or invalid credentials", id="no-token"),
        pytest.param(
            "GET", "/jobs", "probe-token", None, 403, "grants no access to this service", id="probe"
        ),
        pytest.param("GET", "/jobs/alice-train-abcde", "bob-token", None, 403, "not theirs", id="bob-reads"),
        pytest.param(
            "DELETE", "/jobs/alice-train-abcde", "bob-token", None, 403, "not theirs", id="bob-cancels"
        ),
        pytest.param(
            "GET", "/jobs/alice-train-abcde/logs", "bob-token", None, 403, "not theirs", id="bob-logs"
        ),
        pytest.param("GET", "/jobs/nope", "alice-token", None, 404, "no job nope", id="unknown"),
        pytest.param("POST", "/jobs", "alice-token", b"{", 400, "not JSON", id="not-json"),
        pytest.param("POST", "/jobs", "alice-token", [1], 400, "JSON object", id="not-object"),
        pytest.param(
            "POST",
            "/jobs",
            "alice-token",
            {"profile": "secret", "notebook": "a.ipynb"},
            400,
            "'secret' is not a job profile you can use (yours: train)",
            id="out-of-group",
        ),
        pytest.param(
            "POST",
            "/jobs",
            "alice-token",
            {"profile": "train", "notebook": "../x.ipynb"},
            400,
            "without '..'",
            id="escape",
        ),
    ],
)
async def test_refusals_are_json_and_write_nothing(
    served: tuple[str, StubOps], method: str, path: str, token: str | None, body: Any, status: int, words: str
) -> None:
    base, ops = served
    got, answer = await call(base + path, method, token, body)
    assert got == status and answer["status"] == status and words in answer["message"], answer
    assert ops.writes == []


async def test_an_admin_sees_and_cancels_anyones_job(served: tuple[str, StubOps]) -> None:
    base, ops = served
    assert (await call(f"{base}/jobs/alice-train-abcde", token="admin-token"))[0] == 200
    assert (await call(f"{base}/jobs/alice-train-abcde", "DELETE", token="admin-token"))[0] == 200
    assert ops.writes == ["cancel alice-train-abcde"]
