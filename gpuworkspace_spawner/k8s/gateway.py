"""The one gateway to the Kubernetes API: typed verbs over KubeSpawner's shared CoreV1Api client.

Everything here takes and returns plain API dicts (camelCase, as the server sends them), so the pure
core never sees client model objects; errors come out as :mod:`.errors` types.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client, config

from .errors import api_errors, error_for_status, retry_unavailable

Obj = dict[str, Any]
# kubernetes_asyncio.client.CoreV1Api: its annotations want model objects as bodies, we send API dicts.
Api = Any
MERGE_PATCH = "application/merge-patch+json"


class _Raw:
    """What ``ApiClient.deserialize`` expects: a response with ``data``."""

    def __init__(self, obj: Obj) -> None:
        self.data = json.dumps(obj)


def to_dict(api: Api, model: Any) -> Obj:
    """A client model (``V1Pod``) as the API dict it serializes to."""
    result: Obj = api.api_client.sanitize_for_serialization(model)
    return result


def to_model(api: Api, obj: Obj, kind: str) -> Any:
    """An API dict as a client model (``kind`` like ``"V1Pod"``), for code that wants models."""
    return api.api_client.deserialize(_Raw(obj), kind)


async def _json(coro: Any) -> Obj:
    """Await a ``_preload_content=False`` call and decode the body; a non-2xx answer raises our error.

    (With ``_preload_content=False`` the client library returns error answers instead of raising.)
    """
    with api_errors():
        response = await coro
        body = await response.read()
    if not 200 <= response.status <= 299:  # noqa: PLR2004 - the 2xx range
        raise error_for_status(response.status, body, str(response.reason or ""))
    result: Obj = json.loads(body)
    return result


@retry_unavailable
async def create_pvc(api: Api, namespace: str, body: Obj, *, request_timeout: float) -> Obj:
    return await _json(
        api.create_namespaced_persistent_volume_claim(
            namespace, body, _preload_content=False, _request_timeout=request_timeout
        )
    )


@retry_unavailable
async def read_pvc(api: Api, namespace: str, name: str, *, request_timeout: float) -> Obj:
    return await _json(
        api.read_namespaced_persistent_volume_claim(
            name, namespace, _preload_content=False, _request_timeout=request_timeout
        )
    )


@retry_unavailable
async def patch_pvc(api: Api, namespace: str, name: str, patch: Obj, *, request_timeout: float) -> Obj:
    """A JSON merge patch (``null`` removes a label or annotation)."""
    return await _json(
        api.patch_namespaced_persistent_volume_claim(
            name,
            namespace,
            patch,
            _content_type=MERGE_PATCH,
            _preload_content=False,
            _request_timeout=request_timeout,
        )
    )


@retry_unavailable
async def list_pvcs(api: Api, namespace: str, label_selector: str, *, request_timeout: float) -> Obj:
    return await _json(
        api.list_namespaced_persistent_volume_claim(
            namespace, label_selector=label_selector, _preload_content=False, _request_timeout=request_timeout
        )
    )


@retry_unavailable
async def list_pods(api: Api, namespace: str, label_selector: str, *, request_timeout: float) -> Obj:
    return await _json(
        api.list_namespaced_pod(
            namespace, label_selector=label_selector, _preload_content=False, _request_timeout=request_timeout
        )
    )


@retry_unavailable
async def delete_pvc(
    api: Api,
    namespace: str,
    name: str,
    *,
    uid: str,
    resource_version: str,
    request_timeout: float,
) -> Obj:
    """Delete only the exact object that was decided on: a re-adopted claim (new resourceVersion) survives."""
    body = {"preconditions": {"uid": uid, "resourceVersion": resource_version}}
    return await _json(
        api.delete_namespaced_persistent_volume_claim(
            name, namespace, body=body, _preload_content=False, _request_timeout=request_timeout
        )
    )


@retry_unavailable
async def create_pod(api: Api, namespace: str, body: Obj, *, request_timeout: float) -> Obj:
    return await _json(
        api.create_namespaced_pod(namespace, body, _preload_content=False, _request_timeout=request_timeout)
    )


@retry_unavailable
async def delete_pod(api: Api, namespace: str, name: str, *, grace_s: int, request_timeout: float) -> Obj:
    return await _json(
        api.delete_namespaced_pod(
            name,
            namespace,
            grace_period_seconds=grace_s,
            _preload_content=False,
            _request_timeout=request_timeout,
        )
    )


@retry_unavailable
async def create_event(api: Api, namespace: str, event: Obj, *, request_timeout: float) -> Obj:
    return await _json(
        api.create_namespaced_event(
            namespace, event, _preload_content=False, _request_timeout=request_timeout
        )
    )


async def connect() -> Api:
    """A CoreV1Api from the in-cluster ServiceAccount, else from KUBECONFIG / ~/.kube/config."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        await config.load_kube_config()
    return client.CoreV1Api(client.ApiClient())


async def client_credentials() -> tuple[str | None, str | None]:
    """(CA file, Authorization header value) of the loaded Kubernetes client configuration: in a pod
    the ServiceAccount's ``ca.crt`` and (rotated) token, else the kubeconfig's CA and credentials."""
    conf = client.Configuration.get_default_copy()
    authorization = await conf.get_api_key_with_prefix("BearerToken") if conf.api_key else None
    return conf.ssl_ca_cert or None, authorization
