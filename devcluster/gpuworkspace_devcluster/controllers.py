"""Built-in control-plane loops: garbage collector, namespace deletion, pod termination without kubelet.

Each reacts to store changes (no polling) through one work queue, like kube-controller-manager.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from .errors import ApiError
from .resources import RESOURCE_TYPES, ResourceType, find
from .store import Obj, Store, TypeKey, WatchEvent
from .verbs import Verbs

log = logging.getLogger(__name__)
_BY_KEY = {rt.key: rt for rt in RESOURCE_TYPES}
PODS = find("", "v1", "pods")
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
ROOT_CA_DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such "
    "as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions "
    "of Kubernetes clusters."
)
Ref = tuple[TypeKey, str, str]  # (type, namespace, name)


class Controllers:
    """Garbage collection (ownerReferences), namespace finalization, kubelet-less pod termination."""

    def __init__(self, verbs: Verbs) -> None:
        self.verbs = verbs
        self.store: Store = verbs.store
        self.uids: dict[str, Ref] = {}
        self.dependents: dict[str, set[Ref]] = {}
        # Nodes whose pods a (simulated) kubelet terminates; others are finished here at once.
        self.kubelet_nodes: set[str] = set()
        self.root_ca_pem = ""  # the cluster CA that kube-root-ca.crt publishes (set by the DevCluster)
        self._queue: asyncio.Queue[tuple[str, Ref]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        for rt in RESOURCE_TYPES:
            for obj in self.store.items(rt):
                self._index(rt.key, obj)
        store = self.store
        store.on_change.append(self._on_change)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="devcluster-controllers")
        # Catch up on anything left mid-deletion before a restart.
        for rt in RESOURCE_TYPES:
            for obj in self.store.items(rt):
                self._react(rt.key, obj, None)
                for ref in obj["metadata"].get("ownerReferences") or []:
                    if ref.get("uid") not in self.uids:
                        self._queue.put_nowait(("orphaned", _ref(rt.key, obj)))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def settle(self) -> None:
        """Wait until the work queue is drained (tests use this instead of sleeping)."""
        await self._queue.join()

    # ----------------------------------------------------------- bookkeeping
    def _index(self, key: TypeKey, obj: Obj) -> None:
        meta = obj["metadata"]
        self.uids[meta["uid"]] = _ref(key, obj)
        for ref in meta.get("ownerReferences") or []:
            self.dependents.setdefault(ref["uid"], set()).add(_ref(key, obj))

    def _on_change(self, key: TypeKey, event: WatchEvent) -> None:
        obj, old = event.obj, event.old
        if key == ("", "configmaps") and obj["metadata"]["name"] == ROOT_CA_CONFIGMAP:
            namespace_ref = (("", "namespaces"), "", obj["metadata"].get("namespace", ""))
            self._queue.put_nowait(("serviceaccount", namespace_ref))  # the publisher puts it back
        if old is not None:
            for ref in old["metadata"].get("ownerReferences") or []:
                self.dependents.get(ref["uid"], set()).discard(_ref(key, old))
        if event.type == "DELETED":
            uid = obj["metadata"]["uid"]
            self.uids.pop(uid, None)
            for dep in sorted(self.dependents.get(uid, ())):
                self._queue.put_nowait(("orphaned", dep))
            for ref in obj["metadata"].get("ownerReferences") or []:
                owner = self.uids.get(ref["uid"])
                if owner is not None:
                    self._queue.put_nowait(("owner", owner))
            namespace = obj["metadata"].get("namespace")
            if namespace:
                ns = self.store.get(_BY_KEY[("", "namespaces")], "", namespace)
                if ns is not None and ns["metadata"].get("deletionTimestamp"):
                    self._queue.put_nowait(("namespace", _ref(("", "namespaces"), ns)))
            return
        self._index(key, obj)
        if key == ("", "namespaces") and event.type == "ADDED":
            self._queue.put_nowait(("serviceaccount", _ref(key, obj)))
        self._react(key, obj, old)

    def _react(self, key: TypeKey, obj: Obj, old: Obj | None) -> None:
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp"):
            return
        finalizers = meta.get("finalizers") or []
        if "foregroundDeletion" in finalizers or "orphan" in finalizers:
            self._queue.put_nowait(("owner", _ref(key, obj)))
        if key == ("", "namespaces"):
            self._queue.put_nowait(("namespace", _ref(key, obj)))
        if key == ("", "pods") and obj.get("spec", {}).get("nodeName") not in self.kubelet_nodes:
            self._queue.put_nowait(("pod", _ref(key, obj)))
        for ref in meta.get("ownerReferences") or []:
            owner = self.uids.get(ref["uid"])
            if owner is not None:
                self._queue.put_nowait(("owner", owner))

    # ------------------------------------------------------------------ work
    async def _run(self) -> None:
        while True:
            what, ref = await self._queue.get()
            try:
                self._handle(what, ref)
            except ApiError as exc:
                if exc.code not in (404, 409):
                    log.warning("devcluster controllers: %s %s: %s", what, ref, exc.message)
            except Exception:
                log.exception("devcluster controllers: %s %s failed", what, ref)
            finally:
                self._queue.task_done()

    def _handle(self, what: str, ref: Ref) -> None:
        rt = _BY_KEY[ref[0]]
        obj = self.store.get(rt, ref[1], ref[2])
        if obj is None:
            return
        if what == "orphaned":
            self._collect_if_orphaned(rt, obj)
        elif what == "owner":
            self._process_owner(rt, obj)
        elif what == "namespace":
            self._finalize_namespace(obj)
        elif what == "serviceaccount" and not obj["metadata"].get("deletionTimestamp"):
            self.publish_namespace_defaults(ref[2])
        elif what == "pod":
            self.verbs.finish_deletion(rt, ref[1], ref[2])

    def _collect_if_orphaned(self, rt: ResourceType, obj: Obj) -> None:
        refs = obj["metadata"].get("ownerReferences") or []
        live = [r for r in refs if r.get("uid") in self.uids]
        if refs and not live and not obj["metadata"].get("deletionTimestamp"):
            meta = obj["metadata"]
            self.verbs.delete(
                rt, meta.get("namespace", ""), meta["name"], {"propagationPolicy": "Background"}
            )

    def _process_owner(self, rt: ResourceType, owner: Obj) -> None:
        meta = owner["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        deps = [d for d in self.dependents.get(meta["uid"], ()) if self._exists(d)]
        if "orphan" in finalizers:
            for dep in deps:
                self._drop_owner_ref(dep, meta["uid"])
            self._remove_finalizer(rt, owner, "orphan")
        elif "foregroundDeletion" in finalizers:
            blocking = []
            for dep in deps:
                dep_rt = _BY_KEY[dep[0]]
                dep_obj = self.store.get(dep_rt, dep[1], dep[2])
                if dep_obj is None:
                    continue
                blocking.append(dep)
                if not dep_obj["metadata"].get("deletionTimestamp"):
                    self.verbs.delete(dep_rt, dep[1], dep[2], {"propagationPolicy": "Foreground"})
            if not any(self._exists(d) for d in blocking):
                self._remove_finalizer(rt, owner, "foregroundDeletion")

    def _finalize_namespace(self, ns: Obj) -> None:
        name = ns["metadata"]["name"]
        remaining = 0
        for rt in RESOURCE_TYPES:
            if not rt.namespaced:
                continue
            for obj in list(self.store.items(rt, name)):
                remaining += 1
                if not obj["metadata"].get("deletionTimestamp"):
                    self.verbs.delete(rt, name, obj["metadata"]["name"], {"propagationPolicy": "Background"})
        if remaining == 0:
            current = self.store.get(_BY_KEY[("", "namespaces")], "", name)
            if current is not None and current.get("spec", {}).get("finalizers"):
                updated = {**current, "spec": {**current["spec"], "finalizers": []}}
                self.verbs.update(_BY_KEY[("", "namespaces")], "", name, updated)

    def publish_namespace_defaults(self, namespace: str) -> None:
        """What every namespace gets from controllers: a ``default`` ServiceAccount (the serviceaccount
        controller) and the ``kube-root-ca.crt`` ConfigMap with the cluster CA (the root-ca-cert-publisher,
        ``pkg/controller/certificates/rootcacertpublisher/publisher.go``: recreated or reset when changed)."""
        sas, cms = _BY_KEY[("", "serviceaccounts")], _BY_KEY[("", "configmaps")]
        if self.store.get(sas, namespace, "default") is None:
            self.verbs.create(sas, namespace, {"metadata": {"name": "default"}})
        if not self.root_ca_pem:
            return
        data = {"ca.crt": self.root_ca_pem}
        current = self.store.get(cms, namespace, ROOT_CA_CONFIGMAP)
        annotations = {"kubernetes.io/description": ROOT_CA_DESCRIPTION}
        if current is None:
            body = {"metadata": {"name": ROOT_CA_CONFIGMAP, "annotations": annotations}, "data": data}
            self.verbs.create(cms, namespace, body)
        elif current.get("data") != data:
            self.verbs.update(cms, namespace, ROOT_CA_CONFIGMAP, {**current, "data": data})

    # --------------------------------------------------------------- helpers
    def _exists(self, ref: Ref) -> bool:
        return self.store.get(_BY_KEY[ref[0]], ref[1], ref[2]) is not None

    def _drop_owner_ref(self, ref: Ref, uid: str) -> None:
        rt = _BY_KEY[ref[0]]
        obj = self.store.get(rt, ref[1], ref[2])
        if obj is None:
            return
        kept = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
        patch = {"metadata": {"ownerReferences": kept or None}}
        self.verbs.patch(rt, ref[1], ref[2], patch, "application/merge-patch+json")

    def _remove_finalizer(self, rt: ResourceType, obj: Obj, finalizer: str) -> None:
        meta = obj["metadata"]
        kept = [f for f in meta.get("finalizers") or [] if f != finalizer]
        patch = {"metadata": {"finalizers": kept or None, "resourceVersion": meta["resourceVersion"]}}
        self.verbs.patch(rt, meta.get("namespace", ""), meta["name"], patch, "application/merge-patch+json")


def _ref(key: TypeKey, obj: Obj) -> Ref:
    meta = obj["metadata"]
    return (key, meta.get("namespace", ""), meta["name"])
