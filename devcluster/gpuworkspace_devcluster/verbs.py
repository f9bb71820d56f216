"""API verbs with the real API server's semantics, over the :class:`Store`.

create/update/patch/delete/get/list: server-filled metadata, optimistic concurrency, status
subresources, generation, finalizers and graceful deletion, dry runs and field validation.
No HTTP here: the aiohttp layer (``apiserver.py``) parses requests and calls these.
"""

from __future__ import annotations

import base64
import bisect
import functools
import random
import secrets
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from . import errors, jobspec, patching, podsecurity, saadmission, validation
from .defaults import (
    SERVICE_CIDR,
    ClusterIPAllocator,
    DefaultingContext,
    apply_defaults,
    apply_update_defaults,
)
from .errors import ApiError
from .quantity import parse_quantity
from .resources import ResourceType, find
from .satokens import TokenIssuer
from .selectors import FieldSelector, LabelSelector
from .store import Obj, Store

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's utilrand alphabet
_SERVER_OWNED_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")
NAMESPACES = find("", "v1", "namespaces")
STORAGECLASSES = find("storage.k8s.io", "v1", "storageclasses")
SERVICEACCOUNTS = find("", "v1", "serviceaccounts")
_POD_MUTABLE = (
    "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to "
    "existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
    "previously negative)"
)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def clone(obj: Any) -> Any:
    """A deep copy (orjson round-trip is several times faster than copy.deepcopy)."""
    return orjson.loads(orjson.dumps(obj))


def _content(rt: ResourceType, obj: Obj) -> Obj:
    """What bumps ``metadata.generation``: everything but metadata (and status, when separate)."""
    skip = {"metadata", "status"} if "status" in rt.subresources else {"metadata"}
    return {k: v for k, v in obj.items() if k not in skip}


def _check_job(job: Obj, old: Obj | None) -> None:
    """Job defaulting, selector generation and validation (jobspec.py), as the batch registry does."""
    jobspec.default_job(job)
    if old is None:
        jobspec.generate_selector(job)
    causes = jobspec.validate_job(job) if old is None else jobspec.validate_job_update(old, job)
    if causes:
        raise errors.invalid("Job", job["metadata"].get("name", ""), causes, "batch")


def _admit_pod(store: Store, namespace: str, pod: Obj) -> list[str]:
    """Pod Security Admission (a validating admission plugin: after defaulting, dry runs too),
    enforced from the namespace's pod-security.kubernetes.io labels (podsecurity.py); its warnings."""
    ns = store.get(NAMESPACES, "", namespace)  # type: ignore[arg-type]
    labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
    refusal, warnings = podsecurity.pod_admission(labels, pod)
    if refusal is not None:
        name = pod["metadata"]["name"]
        message = f'pods "{name}" is forbidden: {refusal}'
        raise ApiError(403, "Forbidden", message, details={"name": name, "kind": "pods"})
    return warnings


class Verbs:
    def __init__(
        self, store: Store, schemas: validation.SchemaSet | None = None, *, service_cidr: str = SERVICE_CIDR
    ) -> None:
        self.store = store
        self.schemas = schemas or validation.default_schema_set()
        services = find("", "v1", "services")
        assert services is not None
        used = {o.get("spec", {}).get("clusterIP", "") for o in store.items(services)}
        self.allocate_cluster_ip = ClusterIPAllocator(service_cidr, used=used)
        self.random = random.Random()
        # mutating admission webhooks (e.g. Kueue's Job webhook): called on every create after defaulting
        self.mutating_webhooks: list[Callable[[ResourceType, Obj], None]] = []
        # TokenRequest and the ServiceAccount token authenticator (the DevCluster keeps the key in its state dir)
        self.tokens = TokenIssuer(secrets.token_bytes(32))

    # ----------------------------------------------------------------- reads
    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.store.get(rt, namespace, name)
        if obj is None:
            raise errors.not_found(rt.plural, name, rt.group)
        return obj

    def list(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> tuple[list[Obj], dict[str, Any]]:
        """Matching objects and the list metadata (resourceVersion, continue, remainingItemCount)."""
        start_after: tuple[str, str] | None = None
        list_rv = self.store.rv
        if continue_token:
            start_after, list_rv = _decode_continue(continue_token)
        bucket = self.store.bucket(rt)
        out: list[Obj] = []
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        keys = sorted(bucket)
        if start_after is not None:
            keys = keys[bisect.bisect_right(keys, start_after) :]
        for i, key in enumerate(keys):
            if namespace and rt.namespaced and key[0] != namespace:
                continue
            obj = bucket[key]
            if labels is not None and not labels.matches(obj["metadata"].get("labels")):
                continue
            if fields is not None and not fields.matches(obj):
                continue
            if limit and len(out) == limit:
                meta["continue"] = _encode_continue(out[-1], list_rv)
                if labels is None and fields is None and not namespace:
                    meta["remainingItemCount"] = len(keys) - i
                break
            out.append(obj)
        return out, meta

    # ---------------------------------------------------------------- create
    def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Obj,
        *,
        dry_run: bool = False,
        field_validation: str = "Warn",
        duplicates: list[str] | None = None,
    ) -> tuple[Obj, list[str]]:
        obj = clone(body)
        self._check_kind(rt, obj)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        self._check_namespace(rt, namespace, meta, creating=True)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise errors.invalid(
                    rt.kind,
                    "",
                    [
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value: name or generateName is required",
                            "field": "metadata.name",
                        }
                    ],
                    rt.group,
                )
            meta["name"] = meta["generateName"] + "".join(self.random.choices(_NAME_ALPHABET, k=5))
        validation.validate_name(rt, meta["name"])
        warnings = self._validate(rt, obj, field_validation, duplicates)
        if self.store.get(rt, namespace, meta["name"]) is not None:
            raise errors.already_exists(rt.plural, meta["name"], rt.group)
        for key in (*_SERVER_OWNED_META, "resourceVersion", "managedFields", "selfLink"):
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta["generation"] = 1
        if rt.namespaced:
            meta["namespace"] = namespace
        apply_defaults(rt, obj, DefaultingContext(self._default_storage_class(), self.allocate_cluster_ip))
        if rt.key == ("", "pods"):
            saadmission.admit_pod(namespace, obj, self._service_account, self.random)
        for webhook in self.mutating_webhooks:
            webhook(rt, obj)
        if rt.key == ("", "pods"):
            warnings = [*warnings, *_admit_pod(self.store, namespace, obj)]
        if rt.key == ("batch", "jobs"):
            _check_job(obj, None)
        if dry_run:
            return obj, warnings
        return self.store.put(rt, obj), warnings

    def _service_account(self, namespace: str, name: str) -> Obj | None:
        """The admission plugin's ``getServiceAccount``: it waits for the ``default`` ServiceAccount the
        serviceaccount controller makes with the namespace; synchronous here, so it is made now."""
        assert SERVICEACCOUNTS is not None
        found = self.store.get(SERVICEACCOUNTS, namespace, name)
        if found is None and name == saadmission.DEFAULT_SERVICE_ACCOUNT:
            found, _ = self.create(SERVICEACCOUNTS, namespace, {"metadata": {"name": name}})
        return found

    # ---------------------------------------------------------------- update
    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Obj,
        *,
        subresource: str = "",
        dry_run: bool = False,
        field_validation: str = "Warn",
        duplicates: list[str] | None = None,
    ) -> tuple[Obj, list[str]]:
        old = self.get(rt, namespace, name)
        new = clone(body)
        self._check_kind(rt, new)
        meta = new.setdefault("metadata", {})
        if meta.get("name") not in (None, name):
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        self._check_namespace(rt, namespace, meta, creating=False)
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv not in (None, "") and wanted_rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rt.plural, name, rt.group)
        if subresource == "status":
            merged = clone(old)
            merged["status"] = new.get("status", {})
            new = merged
        elif subresource:
            raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on {subresource}")
        elif "status" in rt.subresources:
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        warnings = self._validate(rt, new, field_validation, duplicates)
        apply_update_defaults(rt, new)
        self._merge_server_metadata(rt, old, new)
        self._check_immutable(rt, old, new)
        if _content(rt, new) != _content(rt, old):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        if dry_run:
            return new, warnings
        if _deletable(rt, new):
            return self._remove(rt, new), warnings
        return self.store.put(rt, new), warnings

    def _merge_server_metadata(self, rt: ResourceType, old: Obj, new: Obj) -> None:
        old_meta, meta = old["metadata"], new["metadata"]
        meta["name"] = old_meta["name"]
        if rt.namespaced:
            meta["namespace"] = old_meta["namespace"]
        for key in (*_SERVER_OWNED_META, "generation"):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta.pop("resourceVersion", None)
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise errors.invalid(
                    rt.kind,
                    old_meta["name"],
                    [
                        {
                            "reason": "FieldValueForbidden",
                            "field": "metadata.finalizers",
                            "message": "Forbidden: no new finalizers can be added if the object is being deleted, "
                            f"found new finalizers {sorted(added)!r}",
                        }
                    ],
                    rt.group,
                )

    def _check_immutable(self, rt: ResourceType, old: Obj, new: Obj) -> None:
        if rt.key == ("", "pods"):
            a, b = clone(old.get("spec", {})), clone(new.get("spec", {}))
            for spec in (a, b):
                for group in ("containers", "initContainers"):
                    for c in spec.get(group) or []:
                        c.pop("image", None)
                for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
                    spec.pop(key, None)
                if not old.get("spec", {}).get("nodeName"):
                    spec.pop("nodeName", None)
            if a != b:
                raise errors.invalid(
                    "Pod",
                    old["metadata"]["name"],
                    [
                        {
                            "reason": "FieldValueForbidden",
                            "field": "spec",
                            "message": _POD_MUTABLE.split(": ", 1)[1],
                        }
                    ],
                )
        elif rt.key == ("", "persistentvolumeclaims"):
            self._check_pvc_update(old, new)
        elif rt.key == ("batch", "jobs"):
            _check_job(new, old)

    def _check_pvc_update(self, old: Obj, new: Obj) -> None:
        name = old["metadata"]["name"]
        a, b = clone(old.get("spec", {})), clone(new.get("spec", {}))
        old_size = a.get("resources", {}).get("requests", {}).pop("storage", "0")
        new_size = b.get("resources", {}).get("requests", {}).pop("storage", "0")
        for spec in (a, b):
            spec.pop("volumeAttributesClassName", None)
            if not old.get("spec", {}).get("volumeName"):
                spec.pop("volumeName", None)
        if a != b:
            raise errors.invalid(
                "PersistentVolumeClaim",
                name,
                [
                    {
                        "reason": "FieldValueForbidden",
                        "field": "spec",
                        "message": "Forbidden: spec is immutable after creation except resources.requests and "
                        "volumeAttributesClassName for bound claims",
                    }
                ],
            )
        if parse_quantity(new_size) == parse_quantity(old_size):
            return
        if parse_quantity(new_size) < parse_quantity(old_size):
            raise errors.invalid(
                "PersistentVolumeClaim",
                name,
                [
                    {
                        "reason": "FieldValueForbidden",
                        "field": "spec.resources.requests.storage",
                        "message": "Forbidden: field can not be less than previous value",
                    }
                ],
            )
        sc = self.store.get(STORAGECLASSES, "", old["spec"].get("storageClassName") or "")  # type: ignore[arg-type]
        if old.get("status", {}).get("phase") != "Bound" or not (sc or {}).get("allowVolumeExpansion"):
            raise ApiError(
                403,
                "Forbidden",
                f'persistentvolumeclaims "{name}" is forbidden: only dynamically '
                "provisioned pvc can be resized and the storageclass that provisions the pvc must "
                "support resize",
            )

    # ----------------------------------------------------------------- patch
    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        patch: Any,
        content_type: str,
        *,
        subresource: str = "",
        dry_run: bool = False,
        field_validation: str = "Warn",
    ) -> tuple[Obj, list[str]]:
        old = self.get(rt, namespace, name)
        ctype = content_type.split(";", maxsplit=1)[0].strip()
        if ctype == "application/merge-patch+json":
            if not isinstance(patch, dict):
                raise errors.bad_request(
                    "json: cannot unmarshal array into Go value of type map[string]interface {}"
                )
            new = patching.apply_merge_patch(old, patch)
        elif ctype == "application/json-patch+json":
            new = patching.apply_json_patch(old, patch)
        elif ctype == "application/strategic-merge-patch+json":
            if not patching.strategic_merge_supported(rt):
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"strategic merge patch is not supported for {rt.kind}.{rt.group}",
                )
            schema = _patch_schema(rt)
            new = patching.apply_strategic_merge_patch(old, patch, schema)
        elif ctype == "application/apply-patch+yaml":
            new = patching.apply_merge_patch(old, patch)
        else:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - "
                "accepted media types include: application/json-patch+json, "
                "application/merge-patch+json, application/apply-patch+yaml, "
                "application/strategic-merge-patch+json",
            )
        if not isinstance(new.get("metadata"), dict):
            raise errors.bad_request("metadata must be an object")
        # A patch carries the resourceVersion precondition only if it set one itself.
        patch_meta = patch.get("metadata") if isinstance(patch, dict) else None
        if not (isinstance(patch_meta, dict) and patch_meta.get("resourceVersion")):
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if subresource == "status":
            status_only = clone(old)
            status_only["status"] = new.get("status", {})
            status_only["metadata"]["resourceVersion"] = new["metadata"]["resourceVersion"]
            new = status_only
        elif "status" in rt.subresources and not subresource:
            new["status"] = old.get("status")
            if new["status"] is None:
                new.pop("status")
        return self.update(
            rt,
            namespace,
            name,
            new,
            subresource=subresource,
            dry_run=dry_run,
            field_validation=field_validation,
        )

    # ---------------------------------------------------------------- delete
    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        options: dict[str, Any],
        *,
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
        """Returns (object, finished): ``finished`` is False while finalizers or a grace period hold it."""
        obj = self.get(rt, namespace, name)
        pre = options.get("preconditions") or {}
        for field in ("uid", "resourceVersion"):  # rest.BeforeDelete checks them in this order
            if pre.get(field) and pre[field] != obj["metadata"][field]:
                raise errors.precondition_failed(
                    rt.kind, name, field, pre[field], obj["metadata"][field], rt.group
                )
        policy = _propagation_policy(options)
        new = clone(obj)
        meta = new["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        for extra, wanted in (("foregroundDeletion", "Foreground"), ("orphan", "Orphan")):
            if policy == wanted and extra not in finalizers:
                finalizers.append(extra)
        grace = self._grace_period(rt, obj, options)
        held_by_spec = rt.key == ("", "namespaces") and bool(obj.get("spec", {}).get("finalizers"))
        if not finalizers and grace == 0 and not held_by_spec:
            if dry_run:
                return obj, True
            return self._remove(rt, obj), True
        if meta.get("deletionTimestamp"):
            # Already terminating: a shorter grace period may still be requested.
            if grace < (meta.get("deletionGracePeriodSeconds") or 0) and not dry_run:
                meta["deletionGracePeriodSeconds"] = grace
                return self.store.put(rt, new), False
            return obj, False
        meta["finalizers"] = finalizers
        meta["deletionTimestamp"] = now_rfc3339()
        meta["deletionGracePeriodSeconds"] = grace
        meta["generation"] = meta.get("generation", 1) + 1
        if held_by_spec:
            new.setdefault("status", {})["phase"] = "Terminating"
        if dry_run:
            return new, False
        return self.store.put(rt, new), False

    def _grace_period(self, rt: ResourceType, obj: Obj, options: dict[str, Any]) -> int:
        """Only pods bound to a node terminate gracefully; everything else goes at once."""
        if rt.key != ("", "pods") or not obj.get("spec", {}).get("nodeName"):
            return 0
        if obj.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return 0
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = obj["spec"].get("terminationGracePeriodSeconds", 30)
        return max(int(grace), 0)

    def _remove(self, rt: ResourceType, obj: Obj) -> Obj:
        meta = obj["metadata"]
        gone = self.store.remove(rt, meta.get("namespace", ""), meta["name"])
        return gone if gone is not None else obj

    def finish_deletion(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        """What the kubelet does once a terminating pod's containers are gone: delete with grace 0."""
        obj = self.store.get(rt, namespace, name)
        if obj is None or not obj["metadata"].get("deletionTimestamp") or obj["metadata"].get("finalizers"):
            return None
        return self._remove(rt, obj)

    # --------------------------------------------------------------- helpers
    def _check_kind(self, rt: ResourceType, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise errors.bad_request("the request body must be a JSON object")
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if kind is not None and kind != rt.kind:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected "
                f"API version ({rt.api_version})"
                if api_version != rt.api_version
                else f"Object kind {kind} does not match the expected kind {rt.kind}"
            )
        if api_version is not None and api_version != rt.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected "
                f"API version ({rt.api_version})"
            )
        obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version

    def _check_namespace(self, rt: ResourceType, namespace: str, meta: Obj, *, creating: bool) -> None:
        if not rt.namespaced:
            meta.pop("namespace", None)
            return
        if meta.get("namespace") not in (None, "", namespace):
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        if creating:
            ns = self.store.get(NAMESPACES, "", namespace)  # type: ignore[arg-type]
            if ns is None:
                raise errors.not_found("namespaces", namespace)
            if ns["metadata"].get("deletionTimestamp"):
                raise ApiError(
                    403,
                    "Forbidden",
                    f'{rt.plural} "{meta.get("name") or meta.get("generateName")}" '
                    f"is forbidden: unable to create new content in namespace {namespace} because "
                    "it is being terminated",
                    details={"causes": [{"reason": "NamespaceTerminating"}]},
                )

    def _validate(
        self, rt: ResourceType, obj: Obj, field_validation: str, dups: list[str] | None
    ) -> list[str]:
        return validation.validate_object(
            rt, obj, field_validation=field_validation or "Warn", duplicates=dups or (), schemas=self.schemas
        )

    def _default_storage_class(self) -> str | None:
        for sc in self.store.items(STORAGECLASSES):  # type: ignore[arg-type]
            ann = sc["metadata"].get("annotations") or {}
            if ann.get("storageclass.kubernetes.io/is-default-class") == "true":
                return str(sc["metadata"]["name"])
        return None


@functools.lru_cache(maxsize=64)
def _patch_schema(rt: ResourceType) -> patching.SchemaLookup | None:
    return patching.schema_for_gvk(patching.load_core_definitions(), rt.group, rt.version, rt.kind)


def _propagation_policy(options: dict[str, Any]) -> str | None:
    policy = options.get("propagationPolicy")
    if options.get("orphanDependents") is True:
        policy = "Orphan"
    if policy not in (None, "Background", "Foreground", "Orphan"):
        cause = {
            "reason": "FieldValueNotSupported",
            "field": "propagationPolicy",
            "message": f'Unsupported value: "{policy}": supported values: "Foreground", "Background", '
            '"Orphan", "nil"',
        }
        raise errors.invalid("DeleteOptions", "", [cause])
    return policy


def _deletable(rt: ResourceType, obj: Obj) -> bool:
    """Terminating and nothing holds it any more (namespaces also wait for spec.finalizers)."""
    meta = obj["metadata"]
    if not meta.get("deletionTimestamp") or meta.get("finalizers"):
        return False
    if rt.key == ("", "pods") and (meta.get("deletionGracePeriodSeconds") or 0) > 0:
        return False
    return not (rt.key == ("", "namespaces") and obj.get("spec", {}).get("finalizers"))


def _encode_continue(last: Obj, rv: int) -> str:
    meta = last["metadata"]
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": [meta.get("namespace", ""), meta["name"]]})
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[tuple[str, str], int]:
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token.encode()))
        return (data["start"][0], data["start"][1]), int(data["rv"])
    except Exception as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from exc
