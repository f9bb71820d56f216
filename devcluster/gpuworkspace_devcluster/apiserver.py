"""The HTTP face of the devcluster: URL routing, content negotiation, auth, faults, request log."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import orjson
import yaml
from aiohttp import web

from . import crds, errors, openapi, protobody, rbac, tables, validation
from .binding import bind_pod
from .errors import ApiError
from .faults import FaultInjector
from .resources import (
    KUBEVIRT_SUBRESOURCE_GROUP,
    KUBEVIRT_VM_ACTIONS,
    ResourceType,
    find,
)
from .routing import JSON, TRUE, Route, discovery_document, parse_route, request_verb
from .selectors import parse_field_selector, parse_label_selector
from .store import Obj
from .verbs import Verbs
from .watching import DEFAULT_WATCH_TIMEOUT_S, WatchRequest, WatchStream

log = logging.getLogger(__name__)
TOKEN_REQUEST = ResourceType("authentication.k8s.io", "v1", "tokenrequests", "TokenRequest", True)


@dataclass
class RequestRecord:
    """One line of the request log that tests and benchmarks count."""

    time: float
    method: str
    verb: str
    resource: str
    namespace: str
    name: str
    status: int
    duration_s: float
    user_agent: str
    user: str
    query: str = ""


CLIENT_CLOSED = 499  # the logged status of a request its client abandoned (nginx's convention)


@dataclass
class ApiServerConfig:
    authenticator: rbac.TokenAuthenticator | None = None  # None: anonymous admin (no auth)
    rbac_enabled: bool = False
    bookmark_interval_s: float = 5.0
    request_log_size: int = 200_000
    extra_handlers: dict[str, Callable[..., Awaitable[web.StreamResponse]]] = field(default_factory=dict)


class ApiServer:
    def __init__(self, verbs: Verbs, faults: FaultInjector, config: ApiServerConfig | None = None) -> None:
        self.verbs = verbs
        self.store = verbs.store
        self.faults = faults
        self.config = config or ApiServerConfig()
        self.request_log: list[RequestRecord] = []
        self.pod_io: Any = None  # podio.PodIO, set by the cluster (log and exec)
        self.vm_actions: Callable[[str, str, str], Obj] | None = None
        self._openapi_v2: bytes | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    # ------------------------------------------------------------ entry point
    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        record = RequestRecord(
            time.time(),
            request.method,
            "",
            "",
            "",
            "",
            0,
            0.0,
            request.headers.get("User-Agent", ""),
            "",
            request.query_string,
        )
        try:
            resp = await self._dispatch(request, record)
        except ApiError as exc:
            resp = self._error(exc)
        except web.HTTPException as exc:
            self._logged(record, exc.status, started)
            raise
        except asyncio.CancelledError:
            # the client went away mid-request, typically ending a long watch by closing it: a real
            # apiserver's audit log still records the request, so this log does too
            self._logged(record, CLIENT_CLOSED, started)
            raise
        except Exception as exc:  # a bug in the emulator must still answer like an apiserver
            log.exception("devcluster: internal error on %s %s", request.method, request.path)
            resp = self._error(ApiError(500, "InternalError", f"Internal error occurred: {exc}"))
        self._logged(record, resp.status, started)
        return resp

    def _logged(self, record: RequestRecord, status: int, started: float) -> None:
        record.status = status
        record.duration_s = time.monotonic() - started
        self.request_log.append(record)
        if len(self.request_log) > self.config.request_log_size:
            del self.request_log[: len(self.request_log) // 2]

    def _error(self, exc: ApiError) -> web.Response:
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
        return web.Response(
            status=exc.code, body=orjson.dumps(exc.to_status()), content_type=JSON, headers=headers
        )

    async def _dispatch(self, request: web.Request, record: RequestRecord) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        user = self._authenticate(request)
        record.user = user.name
        nonresource = self._nonresource(request, path)
        if nonresource is not None:
            self._authorize(user, rbac.RequestAttributes(verb=request.method.lower(), path=path))
            return await nonresource()
        route = parse_route(path)
        verb = request_verb(request.method, route, request.query)
        record.verb, record.resource = (
            verb,
            route.rt.plural + (f"/{route.subresource}" if route.subresource else ""),
        )
        record.namespace, record.name = route.namespace or "", route.name or ""
        self._authorize(
            user,
            rbac.RequestAttributes(
                verb=verb,
                api_group=route.rt.group
                if route.subresource not in KUBEVIRT_VM_ACTIONS
                else KUBEVIRT_SUBRESOURCE_GROUP,
                resource=route.rt.plural,
                subresource=route.subresource,
                namespace=route.namespace or "",
                name=route.name or "",
            ),
        )
        agent = request.headers.get("User-Agent", "")
        fault = self.faults.decide(verb, route.rt.plural, route.namespace or "", agent)
        if fault.latency_s:
            await asyncio.sleep(fault.latency_s)
        if fault.error is not None:
            raise fault.error
        return await self._resource(request, route, verb)

    # ---------------------------------------------------------------- routing
    def _nonresource(
        self, request: web.Request, path: str
    ) -> Callable[[], Awaitable[web.StreamResponse]] | None:
        """The handler for a non-resource path, called only once the request is authorized."""
        if path in self.config.extra_handlers:
            handler = self.config.extra_handlers[path]
            return lambda: handler(request)
        if path == "/openapi/v2":
            accept = request.headers.get("Accept", "")
            if accept and "json" not in accept and "*/*" not in accept:
                # kubectl asks for the protobuf form only; a 406 makes it fall back, as with any server
                # that does not serve protobuf.
                raise ApiError(
                    406, "NotAcceptable", "only the following media types are accepted: application/json"
                )
            if self._openapi_v2 is None:
                self._openapi_v2 = orjson.dumps(openapi.build_openapi_v2(self.verbs.schemas))
            return _ready(web.Response(body=self._openapi_v2, content_type=JSON))
        found = discovery_document(path, request.headers.get("Accept", ""), self.verbs.schemas)
        if found is None:
            return None
        if request.method != "GET":
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        return _ready(_respond(found[0], found[1]))

    # ------------------------------------------------------------------ auth
    def review(self, authorization: str, attrs: rbac.RequestAttributes, user_agent: str = "") -> None:
        """What a kubelet's webhook authentication and authorization (a TokenReview, then a
        SubjectAccessReview for ``attrs``) decide about a request it was sent: nothing when allowed,
        else :class:`ApiError` 401 or 403. Logged as that user's request for ``attrs`` (as an audit of
        the review would show it), so that least-privilege tests see the permission used."""
        started = time.monotonic()
        resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
        record = RequestRecord(
            time.time(), "GET", attrs.verb, resource, "", attrs.name, 0, 0.0, user_agent, ""
        )
        try:
            user = self._authenticate_header(authorization)
            record.user = user.name
            self._authorize(user, attrs)
        except ApiError as exc:
            self._logged(record, exc.code, started)
            raise
        self._logged(record, 200, started)

    def _authenticate(self, request: web.Request) -> rbac.UserInfo:
        return self._authenticate_header(request.headers.get("Authorization", ""))

    def _authenticate_header(self, header: str) -> rbac.UserInfo:
        auth = self.config.authenticator
        if auth is None:
            return rbac.UserInfo("system:admin", ("system:masters", "system:authenticated"))
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        user = auth.authenticate(token) if token else None
        if user is None and token:  # the ServiceAccount token authenticator comes after the static tokens
            user = self.verbs.tokens.authenticate(self.store, token)
        if user is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return user

    def _authorize(self, user: rbac.UserInfo, attrs: rbac.RequestAttributes) -> None:
        if not self.config.rbac_enabled:
            return
        objs = {
            kind: list(self.store.items(find("rbac.authorization.k8s.io", "v1", kind)))  # type: ignore[arg-type]
            for kind in ("roles", "clusterroles", "rolebindings", "clusterrolebindings")
        }
        decision = rbac.authorize(
            user,
            attrs,
            roles=objs["roles"],
            cluster_roles=objs["clusterroles"],
            role_bindings=objs["rolebindings"],
            cluster_role_bindings=objs["clusterrolebindings"],
        )
        if not decision.allowed:
            raise rbac.forbidden(user, attrs, decision.reason)

    # ------------------------------------------------------------- resources
    async def _resource(self, request: web.Request, route: Route, verb: str) -> web.StreamResponse:
        q = request.query
        rt, ns, name = route.rt, route.namespace or "", route.name or ""
        dry_run = q.get("dryRun") == "All"
        if "dryRun" in q and not dry_run:
            raise errors.bad_request(f'dryRun: Unsupported value: "{q["dryRun"]}": supported values: "All"')
        fv = q.get("fieldValidation", "Warn" if verb in ("create", "update", "patch") else "")
        if fv not in ("", "Ignore", "Warn", "Strict"):
            raise errors.bad_request(
                f'fieldValidation: Unsupported value: "{fv}": supported values: "Ignore", "Warn", "Strict"'
            )
        if (
            route.subresource in ("log", "exec", "binding", "eviction", "token")
            or route.subresource in KUBEVIRT_VM_ACTIONS
        ):
            return await self._action(request, route)
        if rt.namespaced and not ns and verb not in ("list", "watch"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if verb == "get":
            return self._object(request, rt, self.verbs.get(rt, ns, name))
        if verb in ("list", "watch"):
            return await self._list_or_watch(request, route, verb)
        if verb == "create":
            body, dups = await _read_body(request, rt)
            obj, warnings = self.verbs.create(
                rt, ns, body, dry_run=dry_run, field_validation=fv, duplicates=dups
            )
            return self._object(request, rt, obj, status=201, warnings=warnings)
        if verb == "update":
            body, dups = await _read_body(request, rt)
            if route.subresource == "finalize":
                return self._object(request, rt, self._finalize_namespace(name, body, dry_run))
            obj, warnings = self.verbs.update(
                rt,
                ns,
                name,
                body,
                subresource=route.subresource,
                dry_run=dry_run,
                field_validation=fv,
                duplicates=dups,
            )
            return self._object(request, rt, obj, warnings=warnings)
        if verb == "patch":
            body, _ = await _read_body(request)
            obj, warnings = self.verbs.patch(
                rt,
                ns,
                name,
                body,
                request.headers.get("Content-Type", ""),
                subresource=route.subresource,
                dry_run=dry_run,
                field_validation=fv,
            )
            return self._object(request, rt, obj, warnings=warnings)
        if verb == "delete":
            options = await _delete_options(request)
            obj, finished = self.verbs.delete(rt, ns, name, options, dry_run=dry_run)
            return self._object(request, rt, obj, status=200 if finished else 202)
        return await self._deletecollection(request, route, dry_run)

    def _finalize_namespace(self, name: str, body: Obj, dry_run: bool) -> Obj:
        rt = find("", "v1", "namespaces")
        assert rt is not None
        current = self.verbs.get(rt, "", name)
        merged = {
            **current,
            "spec": {**current.get("spec", {}), "finalizers": body.get("spec", {}).get("finalizers", [])},
        }
        merged["metadata"] = {**current["metadata"]}
        obj, _ = self.verbs.update(rt, "", name, merged, dry_run=dry_run)
        return obj

    async def _list_or_watch(self, request: web.Request, route: Route, verb: str) -> web.StreamResponse:
        q = request.query
        rt = route.rt
        labels = parse_label_selector(q["labelSelector"]) if q.get("labelSelector") else None
        fields = parse_field_selector(q["fieldSelector"], rt) if q.get("fieldSelector") else None
        if route.name and verb == "watch":  # legacy /watch/.../NAME
            fields = parse_field_selector(f"metadata.name={route.name}", rt)
        if verb == "watch":
            wf = self.faults.decide_watch(
                rt.plural, route.namespace or "", request.headers.get("User-Agent", "")
            )
            timeout = float(q.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT_S)
            send_initial = q.get("sendInitialEvents")
            req = WatchRequest(
                rt,
                route.namespace,
                labels,
                fields,
                q.get("resourceVersion"),
                timeout,
                q.get("allowWatchBookmarks") in TRUE,
                None if send_initial is None else send_initial in TRUE,
                wf.drop_after_events,
                wf.stall_s,
                self._watch_table(request, rt) if _wants_table(request) else None,
            )
            return await WatchStream(self.store, req, self.config.bookmark_interval_s).serve(request)
        try:
            limit = int(q.get("limit") or 0)
        except ValueError as exc:
            raise errors.bad_request(f"limit: Invalid value: {q.get('limit')!r}") from exc
        items, meta = self.verbs.list(rt, route.namespace, labels, fields, limit, q.get("continue"))
        if _wants_table(request):
            return _respond(self._table(request, rt, items, meta), _TABLE_CTYPE)
        body = {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": items}
        return _respond(body, _negotiate(request))

    def _watch_table(self, request: web.Request, rt: ResourceType) -> Callable[[Obj, bool], dict[str, Any]]:
        def transform(obj: Obj, first: bool) -> dict[str, Any]:
            table = self._table(request, rt, [obj], {"resourceVersion": obj["metadata"]["resourceVersion"]})
            if not first:  # like the apiserver: column definitions only in the first event
                table["columnDefinitions"] = []
            return table

        return transform

    async def _deletecollection(
        self, request: web.Request, route: Route, dry_run: bool
    ) -> web.StreamResponse:
        q = request.query
        labels = parse_label_selector(q["labelSelector"]) if q.get("labelSelector") else None
        fields = parse_field_selector(q["fieldSelector"], route.rt) if q.get("fieldSelector") else None
        options = await _delete_options(request)
        items, meta = self.verbs.list(route.rt, route.namespace, labels, fields)
        deleted = []
        for obj in list(items):
            m = obj["metadata"]
            try:
                done, _ = self.verbs.delete(
                    route.rt, m.get("namespace", ""), m["name"], options, dry_run=dry_run
                )
                deleted.append(done)
            except ApiError as exc:
                if exc.code != HTTPStatus.NOT_FOUND:
                    raise
        body = {
            "kind": route.rt.list_kind,
            "apiVersion": route.rt.api_version,
            "metadata": meta,
            "items": deleted,
        }
        return _respond(body, JSON)

    async def _action(self, request: web.Request, route: Route) -> web.StreamResponse:
        rt, ns, name, sub = route.rt, route.namespace or "", route.name or "", route.subresource
        if sub in KUBEVIRT_VM_ACTIONS:
            if request.method != "PUT":
                raise ApiError(
                    405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
                )
            if self.vm_actions is None:
                raise ApiError(
                    503, "ServiceUnavailable", "the server is currently unable to handle the request"
                )
            self.vm_actions(ns, name, sub)
            return web.Response(status=202, text="")
        if sub == "token" and request.method == "POST":  # TokenRequest (satokens.py); kubectl sends protobuf
            body, _ = await _read_body(request, TOKEN_REQUEST)
            return _respond(self.verbs.tokens.request(self.store, ns, name, body), JSON, status=201)
        pod = self.verbs.get(rt, ns, name)
        if sub == "binding" and request.method == "POST":
            body, _ = await _read_body(request)
            return _respond(self._bind(pod, body), JSON, status=201)
        if sub == "eviction" and request.method == "POST":
            self._mark_evicted(rt, pod)
            self.verbs.delete(rt, ns, name, {})
            return _respond(
                {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}, JSON, 201
            )
        if self.pod_io is None:
            raise ApiError(503, "ServiceUnavailable", "pod log and exec are not served by this devcluster")
        if sub == "log" and request.method == "GET":
            resp: web.StreamResponse = await self.pod_io.log(request, pod)
            return resp
        if sub == "exec" and request.method in ("GET", "POST"):
            resp = await self.pod_io.exec(request, pod)
            return resp
        raise ApiError(
            405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
        )

    def _mark_evicted(self, rt: Any, pod: Obj) -> None:
        """The Eviction API's ``addConditionAndDeletePod`` (kubernetes pkg/registry/core/pod/storage/
        eviction.go, PodDisruptionConditions, GA in 1.31): a running pod gets the ``DisruptionTarget``
        condition, reason ``EvictionByEvictionAPI``, before the ordinary graceful delete. PDBs are not
        checked: the devcluster serves none."""
        meta, status = pod["metadata"], pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
            return
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "reason": "EvictionByEvictionAPI",
                "message": "Eviction API: evicting",
            }
        )
        patch = {"status": {"conditions": conditions}}
        self.verbs.patch(
            rt, meta["namespace"], meta["name"], patch, "application/merge-patch+json", subresource="status"
        )

    def _bind(self, pod: Obj, binding: Obj) -> Obj:
        target = (binding.get("target") or {}).get("name")
        if not target:
            raise errors.invalid(
                "Binding",
                pod["metadata"]["name"],
                [{"reason": "FieldValueRequired", "field": "target.name", "message": "Required value"}],
            )
        bind_pod(self.verbs, pod, target, uid=(binding.get("metadata") or {}).get("uid"))
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _object(
        self,
        request: web.Request,
        rt: ResourceType,
        obj: Obj,
        *,
        status: int = 200,
        warnings: list[str] | None = None,
    ) -> web.Response:
        headers = {"Warning": ", ".join(f'299 - "{_escape(w)}"' for w in warnings)} if warnings else None
        if _wants_table(request):
            return _respond(
                self._table(
                    request, rt, [obj], {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
                ),
                _TABLE_CTYPE,
                status,
                headers,
            )
        return _respond(obj, _negotiate(request), status, headers)

    def _table(
        self, request: web.Request, rt: ResourceType, items: list[Obj], meta: dict[str, Any]
    ) -> dict[str, Any]:
        include = request.query.get("includeObject", "Metadata")
        columns = crds.printer_columns(rt) if rt.custom else None
        return tables.build_table(
            rt, items, now=datetime.now(UTC), include_object=include, list_meta=meta, extra_columns=columns
        )


_TABLE_CTYPE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _wants_table(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    first = accept.split(",")[0]
    return "as=Table" in first


def _negotiate(request: web.Request) -> str:
    accept = request.headers.get("Accept", "")
    if "yaml" in accept.split(",")[0]:
        return "application/yaml"
    return JSON


def _respond(body: Any, ctype: str, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    if ctype == "application/yaml":
        data = yaml.safe_dump(body, sort_keys=False).encode()
    elif isinstance(body, str):
        return web.Response(status=status, text=body, headers=headers)
    else:
        data = orjson.dumps(body)
    resp = web.Response(status=status, body=data, headers=headers)
    resp.headers["Content-Type"] = ctype
    return resp


def _ready(resp: web.StreamResponse) -> Callable[[], Awaitable[web.StreamResponse]]:
    async def handler() -> web.StreamResponse:
        return resp

    return handler


async def _read_body(request: web.Request, rt: ResourceType | None = None) -> tuple[Any, list[str]]:
    """The JSON body of a create or update (``rt``: protobuf accepted for its kind) or other write."""
    raw = await request.read()
    ctype = request.headers.get("Content-Type", JSON)
    if "protobuf" in ctype:
        if rt is not None and protobody.serves(rt):
            return protobody.decode(raw, rt), []
        # Not served (as for CRDs on a real cluster): clients must send JSON or YAML.
        raise ApiError(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted "
            "media types include: application/json, application/yaml",
        )
    if not raw.strip():
        raise errors.bad_request("the request body is empty")
    if "yaml" in ctype:
        return validation.loads_yaml_checking_duplicates(raw)
    try:
        return validation.loads_checking_duplicates(raw)
    except ValueError as exc:
        raise errors.bad_request(f"error decoding from json: {exc}") from exc


async def _delete_options(request: web.Request) -> dict[str, Any]:
    options: dict[str, Any] = {}
    raw = await request.read()
    if raw.strip():
        try:
            options = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise errors.bad_request(f"error decoding DeleteOptions: {exc}") from exc
    q = request.query
    if "gracePeriodSeconds" in q:
        options["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
    if "propagationPolicy" in q:
        options["propagationPolicy"] = q["propagationPolicy"]
    if q.get("orphanDependents") in TRUE:
        options["orphanDependents"] = True
    return options


def quote_name(name: str) -> str:
    return quote(name, safe="")
