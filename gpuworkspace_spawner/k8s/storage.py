"""Storage verbs for the disk admin service: VolumeSnapshots, claims, classes, nodes, VMIs, and waits.

Verbs take and return API dicts (see :mod:`.gateway`); errors come out as :mod:`.errors` types. Waits
read the object once and then watch it (``fieldSelector=metadata.name=…`` from the read's
resourceVersion) until a predicate holds or the deadline passes; a watch that ends early (server
timeout, 410 Gone) is resumed from a fresh read. Nothing here polls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client, watch

from . import custom
from .custom import custom_api
from .errors import KubernetesError, NotFound, api_errors, retry_unavailable
from .gateway import Api, Obj, _json
from .kinds import VM_INSTANCES, VOLUME_SNAPSHOTS, Kind

_GONE = 410  # the watch's resourceVersion is too old: read and watch again
Predicate = Callable[[Obj | None], bool]  # None: the object does not exist (any more)


def storage_api(api: Api) -> Any:
    return client.StorageV1Api(api.api_client)


# ------------------------------------------------------------------------------ VolumeSnapshots
async def create_snapshot(api: Api, namespace: str, body: Obj, *, request_timeout: float) -> Obj:
    """Not repeated after a 5xx: a first try that landed would then read as "already exists"."""
    return await custom.create_once(
        custom_api(api), VOLUME_SNAPSHOTS, namespace, body, request_timeout=request_timeout
    )


async def read_snapshot(api: Api, namespace: str, name: str, *, request_timeout: float) -> Obj:
    return await custom.read(
        custom_api(api), VOLUME_SNAPSHOTS, namespace, name, request_timeout=request_timeout
    )


async def list_snapshots(api: Api, namespace: str, label_selector: str, *, request_timeout: float) -> Obj:
    return await custom.list_objects(
        custom_api(api),
        VOLUME_SNAPSHOTS,
        namespace,
        label_selector=label_selector,
        request_timeout=request_timeout,
    )


async def delete_snapshot(api: Api, namespace: str, name: str, *, uid: str, request_timeout: float) -> Obj:
    """Delete exactly the snapshot that was decided on (uid precondition): a new one of the same name stays."""
    return await custom.delete_once(
        custom_api(api), VOLUME_SNAPSHOTS, namespace, name, uid=uid, request_timeout=request_timeout
    )


# ------------------------------------------------------------------------------ other reads
@retry_unavailable
async def list_vmis(api: Api, namespace: str, *, request_timeout: float) -> list[Obj]:
    """KubeVirt VMIs in ``namespace``; an empty list where KubeVirt is not installed (404)."""
    return await list_custom(api, namespace, VM_INSTANCES, request_timeout=request_timeout)


@retry_unavailable
async def list_custom(api: Api, namespace: str, kind: Kind, *, request_timeout: float) -> list[Obj]:
    """``kind``'s objects in ``namespace``; empty where the kind is not served."""
    return await custom.list_namespaced(custom_api(api), kind, namespace, request_timeout=request_timeout)


@retry_unavailable
async def read_storage_class(api: Api, name: str, *, request_timeout: float) -> Obj:
    return await _json(
        storage_api(api).read_storage_class(name, _preload_content=False, _request_timeout=request_timeout)
    )


@retry_unavailable
async def list_nodes(api: Api, *, request_timeout: float) -> list[Obj]:
    listed = await _json(api.list_node(_preload_content=False, _request_timeout=request_timeout))
    return list(listed.get("items") or [])


# ------------------------------------------------------------------------------ waits
async def _read_or_none(read: Callable[[], Any]) -> Obj | None:
    try:
        result: Obj = await read()
        return result
    except NotFound:
        return None


async def _wait(
    read: Callable[[], Any],
    list_fn: Any,
    list_args: tuple[Any, ...],
    name: str,
    done: Predicate,
    timeout_s: float,
) -> Obj | None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        obj = await _read_or_none(read)
        if done(obj):
            return obj
        left = deadline - loop.time()
        if left <= 0:
            raise TimeoutError(f"{name}: still waiting after {timeout_s:.0f}s")
        version = ((obj or {}).get("metadata") or {}).get("resourceVersion", "")
        try:
            async with asyncio.timeout(left):
                if await _watch_until(list_fn, list_args, name, version, done, left):
                    return await _read_or_none(read)
        except KubernetesError as exc:
            if exc.status != _GONE:
                raise
        except TimeoutError:
            obj = await _read_or_none(read)
            if done(obj):
                return obj
            raise TimeoutError(f"{name}: still waiting after {timeout_s:.0f}s") from None


async def _watch_until(
    list_fn: Any, list_args: tuple[Any, ...], name: str, version: str, done: Predicate, left: float
) -> bool:
    """Watch one object by name; True once ``done`` holds, False when the watch ended first."""
    kwargs: dict[str, Any] = {"field_selector": f"metadata.name={name}", "timeout_seconds": max(1, int(left))}
    if version:
        kwargs["resource_version"] = version
    with api_errors():
        async with watch.Watch() as stream:
            async for event in stream.stream(list_fn, *list_args, **kwargs):
                if event.get("type") == "ERROR":
                    return False  # e.g. 410 Gone: read again, watch again
                raw = event.get("raw_object") or event.get("object")
                obj = None if event.get("type") == "DELETED" else raw
                if done(obj):
                    return True
    return False


async def wait_for_claim(
    api: Api, namespace: str, name: str, done: Predicate, *, timeout_s: float, request_timeout: float
) -> Obj | None:
    """The claim once ``done(claim)`` holds (``done(None)``: it is gone); TimeoutError after ``timeout_s``."""

    async def read() -> Obj:
        return await _json(
            api.read_namespaced_persistent_volume_claim(
                name, namespace, _preload_content=False, _request_timeout=request_timeout
            )
        )

    args = (namespace,)
    return await _wait(read, api.list_namespaced_persistent_volume_claim, args, name, done, timeout_s)


async def wait_for_snapshot(
    api: Api, namespace: str, name: str, done: Predicate, *, timeout_s: float, request_timeout: float
) -> Obj | None:
    """The VolumeSnapshot once ``done(snapshot)`` holds; TimeoutError after ``timeout_s``."""
    custom = custom_api(api)
    group, version, plural = VOLUME_SNAPSHOTS.group, VOLUME_SNAPSHOTS.version, VOLUME_SNAPSHOTS.plural

    async def read() -> Obj:
        return await read_snapshot(api, namespace, name, request_timeout=request_timeout)

    args = (group, version, namespace, plural)
    return await _wait(read, custom.list_namespaced_custom_object, args, name, done, timeout_s)
