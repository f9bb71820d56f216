"""Custom resources (KubeVirt, CDI, csi-addons) and the cluster-scoped objects the fencing check reads.

Verbs take and return API dicts; watches reuse KubeSpawner's ResourceReflector through a small adapter
that binds group/version/plural, so they share its resume, re-list and failure handling.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kubernetes_asyncio import client
from kubespawner.clients import shared_client
from kubespawner.reflector import ResourceReflector
from traitlets import Unicode, default

from .errors import Conflict, NotFound, retry_unavailable
from .gateway import MERGE_PATCH, Api, Obj, _json
from .kinds import Kind
from .observing import ObjectWatch

CustomObjectsApi = client.CustomObjectsApi


def custom_api(api: Api | None = None) -> Any:
    """The one way to a CustomObjectsApi: on ``api``'s ApiClient (configuration, connection pool), or, in
    the hub, KubeSpawner's shared one (same configuration and pool as its CoreV1Api)."""
    return shared_client("CustomObjectsApi") if api is None else client.CustomObjectsApi(api.api_client)


async def create_once(api: Api, kind: Kind, namespace: str, body: Obj, *, request_timeout: float) -> Obj:
    """Create, not repeated after a 5xx: for a caller to whom a first try that landed would then read as
    "already exists" (a snapshot the user asked for)."""
    return await _json(
        api.create_namespaced_custom_object(
            kind.group,
            kind.version,
            namespace,
            kind.plural,
            body,
            _preload_content=False,
            _request_timeout=request_timeout,
        )
    )


create = retry_unavailable(create_once)  # for callers that take Conflict as "it exists"


@retry_unavailable
async def read(api: Api, kind: Kind, namespace: str, name: str, *, request_timeout: float) -> Obj:
    return await _json(
        api.get_namespaced_custom_object(
            kind.group,
            kind.version,
            namespace,
            kind.plural,
            name,
            _preload_content=False,
            _request_timeout=request_timeout,
        )
    )


@retry_unavailable
async def replace(
    api: Api, kind: Kind, namespace: str, name: str, body: Obj, *, request_timeout: float
) -> Obj:
    return await _json(
        api.replace_namespaced_custom_object(
            kind.group,
            kind.version,
            namespace,
            kind.plural,
            name,
            body,
            _preload_content=False,
            _request_timeout=request_timeout,
        )
    )


@retry_unavailable
async def patch(api: Api, kind: Kind, namespace: str, name: str, body: Obj, *, request_timeout: float) -> Obj:
    """A JSON merge patch."""
    return await _json(
        api.patch_namespaced_custom_object(
            kind.group,
            kind.version,
            namespace,
            kind.plural,
            name,
            body,
            _content_type=MERGE_PATCH,
            _preload_content=False,
            _request_timeout=request_timeout,
        )
    )


async def delete_once(
    api: Api,
    kind: Kind,
    namespace: str,
    name: str,
    *,
    uid: str,
    resource_version: str | None = None,
    request_timeout: float,
) -> Obj:
    """Delete exactly the object that was decided on (uid, and resourceVersion when given, as
    preconditions: a new one of the same name stays); not repeated after a 5xx."""
    preconditions = (
        {"uid": uid} if resource_version is None else {"uid": uid, "resourceVersion": resource_version}
    )
    return await _json(
        api.delete_namespaced_custom_object(
            kind.group,
            kind.version,
            namespace,
            kind.plural,
            name,
            body={"preconditions": preconditions},
            _preload_content=False,
            _request_timeout=request_timeout,
        )
    )


delete = retry_unavailable(delete_once)


@retry_unavailable
async def delete_unconditionally(
    api: Api, kind: Kind, namespace: str, name: str, *, request_timeout: float
) -> None:
    """Delete a compute object (never a disk); absent is fine."""
    with contextlib.suppress(NotFound):
        await _json(
            api.delete_namespaced_custom_object(
                kind.group,
                kind.version,
                namespace,
                kind.plural,
                name,
                _preload_content=False,
                _request_timeout=request_timeout,
            )
        )


@retry_unavailable
async def delete_core(namespace: str, kind: str, name: str, *, request_timeout: float) -> None:
    """Delete a namespaced core object by kind (``service``, ``secret``); absent is fine."""
    core = shared_client("CoreV1Api")
    method = getattr(core, f"delete_namespaced_{kind}")
    with contextlib.suppress(NotFound):
        await _json(method(name, namespace, _preload_content=False, _request_timeout=request_timeout))


async def list_namespaced(
    api: Api, kind: Kind, namespace: str, *, label_selector: str = "", request_timeout: float
) -> list[Obj]:
    """The namespace's objects of ``kind``; an absent CRD (404: no KubeVirt/CDI here) is an empty list."""
    found = await list_if_served(
        api, kind, namespace, label_selector=label_selector, request_timeout=request_timeout
    )
    return [] if found is None else found


@retry_unavailable
async def list_if_served(
    api: Api, kind: Kind, namespace: str, *, label_selector: str = "", request_timeout: float
) -> list[Obj] | None:
    """The namespace's objects of ``kind``, or None when the cluster does not serve it (404: its CRD is
    not installed), which a caller may tell from an empty list."""
    try:
        listed = await _list(api, kind, namespace, label_selector, request_timeout)
    except NotFound:
        return None
    return list(listed.get("items") or [])


@retry_unavailable
async def list_objects(
    api: Api, kind: Kind, namespace: str, *, label_selector: str = "", request_timeout: float
) -> Obj:
    """The list as the API answers it (``items``, ``metadata.resourceVersion``); 404 raises NotFound."""
    return await _list(api, kind, namespace, label_selector, request_timeout)


async def _list(api: Api, kind: Kind, namespace: str, label_selector: str, request_timeout: float) -> Obj:
    return await _json(
        api.list_namespaced_custom_object(
            kind.group,
            kind.version,
            namespace,
            kind.plural,
            label_selector=label_selector,
            _preload_content=False,
            _request_timeout=request_timeout,
        )
    )


@retry_unavailable
async def list_cluster(api: Api, kind: Kind, *, request_timeout: float) -> list[Obj]:
    """A cluster-scoped kind's objects; an absent CRD (404) is an empty list."""
    try:
        listed = await _json(
            api.list_cluster_custom_object(
                kind.group,
                kind.version,
                kind.plural,
                _preload_content=False,
                _request_timeout=request_timeout,
            )
        )
    except NotFound:
        return []
    return list(listed.get("items") or [])


@retry_unavailable
async def list_nodes(*, request_timeout: float) -> dict[str, Obj]:
    core = shared_client("CoreV1Api")
    listed = await _json(core.list_node(_preload_content=False, _request_timeout=request_timeout))
    return {n["metadata"]["name"]: n for n in listed.get("items") or []}


@retry_unavailable
async def list_all_pods(namespace: str, *, request_timeout: float) -> list[Obj]:
    core = shared_client("CoreV1Api")
    listed = await _json(
        core.list_namespaced_pod(namespace, _preload_content=False, _request_timeout=request_timeout)
    )
    return list(listed.get("items") or [])


@retry_unavailable
async def read_service(namespace: str, name: str, *, request_timeout: float) -> Obj:
    core = shared_client("CoreV1Api")
    return await _json(
        core.read_namespaced_service(
            name, namespace, _preload_content=False, _request_timeout=request_timeout
        )
    )


@retry_unavailable
async def create_service(namespace: str, body: Obj, *, request_timeout: float) -> Obj:
    core = shared_client("CoreV1Api")
    return await _json(
        core.create_namespaced_service(
            namespace, body, _preload_content=False, _request_timeout=request_timeout
        )
    )


@retry_unavailable
async def put_secret(
    namespace: str, body: Obj, *, request_timeout: float, create_first: bool = False
) -> None:
    """Create or replace the Secret (its content changes with every start); try the likelier verb first."""
    core: Api = shared_client("CoreV1Api")
    name = body["metadata"]["name"]

    async def create() -> Obj:
        return await _json(
            core.create_namespaced_secret(
                namespace, body, _preload_content=False, _request_timeout=request_timeout
            )
        )

    async def replace() -> Obj:
        return await _json(
            core.replace_namespaced_secret(
                name, namespace, body, _preload_content=False, _request_timeout=request_timeout
            )
        )

    if create_first:
        try:
            await create()
        except Conflict:
            await replace()
        return
    try:
        await replace()
    except NotFound:
        await create()


def lister(api: Any, kind: Kind) -> _CustomLister:
    """``lister(api, kind).list_objects(namespace, **kwargs)``: ``kind``'s list method in the shape of a
    ``CoreV1Api`` ``list_namespaced_*`` one, for watches (ResourceReflector, :func:`.observing.first_change`)."""
    return _CustomLister(api, kind)


class _CustomLister:
    """Looks like a CoreV1Api ``list_namespaced_*`` method to ResourceReflector."""

    def __init__(self, api: Any, kind: Kind) -> None:
        self.api, self.kind = api, kind

    def list_objects(self, namespace: str, **kwargs: Any) -> Any:
        k = self.kind
        return self.api.list_namespaced_custom_object(k.group, k.version, namespace, k.plural, **kwargs)


class CustomReflector(ResourceReflector):
    """A watch cache of one custom kind in one namespace (``kind_group/version/plural`` traits)."""

    list_method_name = "list_objects"
    api_group_name = Unicode("CustomObjectsApi")
    kind_group = Unicode()
    kind_version = Unicode()
    kind_plural = Unicode()

    @default("kind")
    def _default_kind(self) -> str:
        return str(self.kind_plural)

    # Changes arrive by watch as they happen; these only bound how often the cache is re-listed
    # (KubeSpawner's 10 s suits chatty pods and events, not VMs and DataVolumes).
    @default("timeout_seconds")
    def _default_timeout_seconds(self) -> int:
        return 300

    @default("restart_seconds")
    def _default_restart_seconds(self) -> int:
        return 300

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        base_api = getattr(self, "api")  # noqa: B009 - set, untyped, by the base class
        self.api = lister(base_api, Kind(self.kind_group, self.kind_version, self.kind_plural))

    @property
    def objects(self) -> dict[str, Obj]:
        objects: dict[str, Obj] = self.resources  # kubespawner's reflector: untyped
        return objects


class ClusterWatch(ObjectWatch):
    """A cluster-scoped kind (Nodes, VolumeAttachments) kept current by list + watch, keyed by name."""

    def __init__(self, api_name: str, list_method: str, log: Any, *, watch_timeout_s: int = 300) -> None:
        super().__init__(list_method, log, api_name=api_name, watch_timeout_s=watch_timeout_s)

    def attached(self, pv_name: str) -> list[Obj]:
        """VolumeAttachments of ``pv_name`` (for a VolumeAttachment watch)."""
        return [
            a
            for a in self.objects.values()
            if (a.get("spec") or {}).get("source", {}).get("persistentVolumeName") == pv_name
        ]
