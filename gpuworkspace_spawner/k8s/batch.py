"""Job verbs for the jobs service (issue 17): batch/v1 Jobs, their pods' logs, Kueue Workloads, and
the merge patches that hand a job's snapshot and claim to its Job.

Verbs take and return API dicts (see :mod:`.gateway`); errors come out as :mod:`.errors` types.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from . import custom
from .custom import custom_api
from .errors import api_errors, error_for_status, retry_unavailable
from .gateway import Api, Obj, _json
from .kinds import VOLUME_SNAPSHOTS, WORKLOADS

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # Kueue's label on the Workload of a Job


def batch_api(api: Api) -> Any:
    return client.BatchV1Api(api.api_client)


# Not repeated after a 5xx: a first try that landed would then read as "already exists".
async def create_job(api: Api, namespace: str, body: Obj, *, request_timeout: float) -> Obj:
    return await _json(
        batch_api(api).create_namespaced_job(
            namespace, body, _preload_content=False, _request_timeout=request_timeout
        )
    )


@retry_unavailable
async def read_job(api: Api, namespace: str, name: str, *, request_timeout: float) -> Obj:
    return await _json(
        batch_api(api).read_namespaced_job(
            name, namespace, _preload_content=False, _request_timeout=request_timeout
        )
    )


@retry_unavailable
async def list_jobs(api: Api, namespace: str, label_selector: str, *, request_timeout: float) -> list[Obj]:
    listed = await _json(
        batch_api(api).list_namespaced_job(
            namespace, label_selector=label_selector, _preload_content=False, _request_timeout=request_timeout
        )
    )
    return list(listed.get("items") or [])


@retry_unavailable
async def delete_job(api: Api, namespace: str, name: str, *, uid: str, request_timeout: float) -> Obj:
    """Delete exactly this Job (uid precondition) and, in the background, its pods (``propagationPolicy:
    Background``: without it a batch/v1 Job is orphaned from its pods, kubectl's and the API's default)."""
    body = {"preconditions": {"uid": uid}, "propagationPolicy": "Background"}
    return await _json(
        batch_api(api).delete_namespaced_job(
            name, namespace, body=body, _preload_content=False, _request_timeout=request_timeout
        )
    )


async def list_workloads(api: Api, namespace: str, *, request_timeout: float) -> list[Obj]:
    """Kueue's Workloads in ``namespace``; empty where Kueue is not installed (404)."""
    return await custom.list_namespaced(
        custom_api(api), WORKLOADS, namespace, request_timeout=request_timeout
    )


async def patch_snapshot(api: Api, namespace: str, name: str, patch: Obj, *, request_timeout: float) -> Obj:
    """A JSON merge patch of a VolumeSnapshot."""
    return await custom.patch(
        custom_api(api), VOLUME_SNAPSHOTS, namespace, name, patch, request_timeout=request_timeout
    )


@retry_unavailable
async def read_pod_log(
    api: Api, namespace: str, pod: str, *, container: str, limit_bytes: int, request_timeout: float
) -> str:
    """The container's log, at most ``limit_bytes`` (the newest part is not chosen by the API: the
    first ``limit_bytes`` are returned)."""
    with api_errors():
        response = await api.read_namespaced_pod_log(
            pod,
            namespace,
            container=container,
            limit_bytes=limit_bytes,
            _preload_content=False,
            _request_timeout=request_timeout,
        )
        body = await response.read()
    if not 200 <= response.status <= 299:  # noqa: PLR2004 - the 2xx range
        raise error_for_status(response.status, body, str(response.reason or ""))
    return bytes(body).decode("utf-8", "replace")
