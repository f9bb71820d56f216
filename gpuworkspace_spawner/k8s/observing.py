"""Read-only views the attribution service keeps of the cluster: watched object caches, EndpointSlices.

:class:`ObjectWatch` keeps the objects of one list method current by list + watch (no polling), for
cluster-scoped kinds (nodes) and for label-selected objects of one namespace or of all namespaces
(workspace pods). It never gives up: a failed list is retried, its error kept in
:attr:`ObjectWatch.error` for the caller to report, the last objects kept meanwhile; callers that need
the first list wait for it with :meth:`ObjectWatch.ready`. :func:`first_change` is the one-shot form:
a single watch request that returns at the first change (the reclaimer's sleep between passes).
Watch events are left as API dicts (``Watch(return_type="object")``): no client models are built.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from kubernetes_asyncio import watch
from kubespawner.clients import shared_client

from .errors import Unavailable, api_errors
from .gateway import Obj, _json
from .kinds import Kind

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


class ObjectWatch:
    """Objects of ``list_method`` (a ``CoreV1Api`` method by default), keyed ``namespace/name`` or ``name``.

    ``args`` go before the keyword arguments (a namespace for ``list_namespaced_*``).
    """

    def __init__(
        self,
        list_method: str,
        log: logging.Logger,
        *,
        args: Sequence[Any] = (),
        label_selector: str = "",
        api_name: str = "CoreV1Api",
        watch_timeout_s: int = 300,
        retry_s: float = 2.0,
        keep: Callable[[Obj], Obj] | None = None,
    ) -> None:
        self.list_method, self.log, self.args = list_method, log, tuple(args)
        self.keep = keep  # what of each object to hold (e.g. the fields a caller reads), else all of it
        self.label_selector, self.api_name = label_selector, api_name
        self.watch_timeout_s, self.retry_s = watch_timeout_s, retry_s
        self.objects: dict[str, Obj] = {}
        self.error: str | None = None  # the last list or watch failure, None once a list succeeds
        self.changes = 0  # bumped on every list and event, for callers that cache derived data
        self.synced = asyncio.Event()  # set once the first list arrived
        self._changed = asyncio.Event()  # set (and replaced) at each change: wakes ``next_change``
        self._task = asyncio.ensure_future(self._run())

    @property
    def what(self) -> str:
        where = f" in {self.args[0]}" if self.args else ""
        selector = f" ({self.label_selector})" if self.label_selector else ""
        return f"{self.list_method}{where}{selector}"

    async def _run(self) -> None:
        api = shared_client(self.api_name)
        list_objects = getattr(api, self.list_method)
        kwargs = {"label_selector": self.label_selector} if self.label_selector else {}
        while True:
            try:
                listed = await _json(
                    list_objects(*self.args, **kwargs, _preload_content=False, _request_timeout=60)
                )
                keep = self.keep or (lambda o: o)
                self.objects = {_key(o): keep(o) for o in listed.get("items") or []}
                self.error = None
                self._bump()
                self.synced.set()
                version = (listed.get("metadata") or {}).get("resourceVersion")
                while True:  # re-watch from the last seen version; any failure lists again
                    version = await self._watch(list_objects, kwargs, version)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: list again, like a reflector
                self.error = f"{type(exc).__name__}: {exc}"
                self.log.warning("%s failed (%s); listing again", self.what, self.error)
                await asyncio.sleep(self.retry_s)

    async def _watch(self, list_objects: Any, kwargs: dict[str, Any], version: str | None) -> str | None:
        async with watch.Watch(return_type="object") as stream:
            async for event in stream.stream(
                list_objects,
                *self.args,
                **kwargs,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=self.watch_timeout_s,
                _request_timeout=self.watch_timeout_s + 30,
            ):
                obj = event["raw_object"]
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if event["type"] == "DELETED":
                    self.objects.pop(_key(obj), None)
                elif event["type"] in ("ADDED", "MODIFIED"):
                    self.objects[_key(obj)] = self.keep(obj) if self.keep else obj
                else:
                    continue
                self._bump()
        return version

    def _bump(self) -> None:
        self.changes += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def next_change(self, seen: int, timeout_s: float) -> bool:
        """Wait until :attr:`changes` has moved past ``seen`` (a list or a watch event): True, or False once
        ``timeout_s`` seconds passed without one."""
        if self.changes != seen:
            return True
        try:
            async with asyncio.timeout(max(0.0, timeout_s)):  # not wait_for: see k8s.reflectors.Changes
                await self._changed.wait()
        except TimeoutError:
            return False
        return True

    async def ready(self, timeout_s: float) -> None:
        """Wait for the first list; :class:`.errors.Unavailable` (with the last error) after ``timeout_s``."""
        try:
            await asyncio.wait_for(self.synced.wait(), timeout_s)
        except TimeoutError:
            raise Unavailable(503, f"{self.what} not listed yet: {self.error or 'no answer'}") from None

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def first_change(
    list_method: Callable[..., Any],
    *args: Any,
    label_selector: str,
    resource_version: str,
    timeout_s: int,
) -> None:
    """Return at the first change to the objects ``list_method(*args)`` lists with ``label_selector``
    after ``resource_version`` (one watch request), or once ``timeout_s`` seconds passed without one.

    ``list_method`` is any list method: a ``CoreV1Api`` one (claims) or a custom kind's
    (``custom.lister(api, kind).list_objects``). A failed watch raises its :class:`.errors.KubernetesError`
    (410 Gone: the caller lists again)."""
    with api_errors():
        async with watch.Watch() as stream:
            async for _ in stream.stream(
                list_method,
                *args,
                label_selector=label_selector,
                resource_version=resource_version,
                timeout_seconds=max(1, timeout_s),
            ):
                return


def pod_watches(
    log: logging.Logger,
    label_selector: str,
    namespaces: Sequence[str] = (),
    keep: Callable[[Obj], Obj] | None = None,
) -> list[ObjectWatch]:
    """Watches of the pods matching ``label_selector``: one across all namespaces, or one per namespace."""
    if not namespaces:
        return [ObjectWatch("list_pod_for_all_namespaces", log, label_selector=label_selector, keep=keep)]
    return [
        ObjectWatch("list_namespaced_pod", log, args=(ns,), label_selector=label_selector, keep=keep)
        for ns in namespaces
    ]


def custom_watch(log: logging.Logger, kind: Kind, namespace: str, label_selector: str = "") -> ObjectWatch:
    """The objects of custom resource ``kind`` in ``namespace`` matching ``label_selector``."""
    return ObjectWatch(
        "list_namespaced_custom_object",
        log,
        args=(kind.group, kind.version, namespace, kind.plural),
        label_selector=label_selector,
        api_name="CustomObjectsApi",
    )


def node_watch(log: logging.Logger) -> ObjectWatch:
    return ObjectWatch("list_node", log)


def endpoint_slice_watch(log: logging.Logger, namespace: str, service: str) -> ObjectWatch:
    """The EndpointSlices of Service ``namespace/service`` (label ``kubernetes.io/service-name``)."""
    return ObjectWatch(
        "list_namespaced_endpoint_slice",
        log,
        args=(namespace,),
        label_selector=f"{SERVICE_NAME_LABEL}={service}",
        api_name="DiscoveryV1Api",
    )


async def load_config() -> None:
    """Client configuration from the in-cluster ServiceAccount, else KUBECONFIG (for shared clients)."""
    from kubernetes_asyncio import config  # noqa: PLC0415 - only at start-up

    try:
        config.load_incluster_config()
    except config.ConfigException:
        await config.load_kube_config()
