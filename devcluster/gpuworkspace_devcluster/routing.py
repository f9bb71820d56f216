"""Request routing for the API emulator: URL → resource route, HTTP method → verb, discovery documents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import discovery, openapi
from .errors import ApiError
from .resources import KUBEVIRT_SUBRESOURCE_GROUP, KUBEVIRT_VM_ACTIONS, ResourceType, find
from .validation import SchemaSet

JSON = "application/json"
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
TRUE = ("true", "True", "1")
_NOT_FOUND = "the server could not find the requested resource"
_GROUP_PARTS = 2  # /apis/GROUP
_CORE_PARTS = 2  # /api/VERSION
_NAMESPACED_PARTS = 3  # namespaces/NS/PLURAL (or virtualmachines/NAME/ACTION)
_GROUP_VERSION_PARTS = 3  # /apis/GROUP/VERSION


@dataclass
class Route:
    """A parsed resource URL."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str
    watch_path: bool = False


def parse_route(path: str) -> Route:
    parts = [p for p in path.strip("/").split("/") if p]
    not_found = ApiError(404, "NotFound", "the server could not find the requested resource")
    if len(parts) >= _CORE_PARTS and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= _GROUP_VERSION_PARTS and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise not_found
    watch_path = bool(rest) and rest[0] == "watch"
    if watch_path:
        rest = rest[1:]
    namespace = None
    if len(rest) >= _NAMESPACED_PARTS and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    if group == KUBEVIRT_SUBRESOURCE_GROUP:
        # /apis/subresources.kubevirt.io/v1/namespaces/NS/virtualmachines/NAME/start
        if len(rest) == _NAMESPACED_PARTS and rest[0] == "virtualmachines" and rest[2] in KUBEVIRT_VM_ACTIONS:
            rt = find("kubevirt.io", "v1", "virtualmachines")
            assert rt is not None
            return Route(rt, namespace, rest[1], rest[2])
        raise not_found
    if not rest:
        raise not_found
    rt = find(group, version, rest[0])
    if rt is None or (namespace is not None and not rt.namespaced):
        raise not_found
    name = rest[1] if len(rest) > 1 else None
    sub = "/".join(rest[2:])
    if sub and sub not in rt.subresources and not (rt.plural == "namespaces" and sub == "finalize"):
        raise not_found
    return Route(rt, namespace, name, sub, watch_path)


def request_verb(method: str, route: Route, query: Any) -> str:
    if route.subresource == "exec":
        return "create"  # a websocket exec arrives as GET; Kubernetes authorizes it as create pods/exec
    if method == "GET":
        if route.name is None:
            return "watch" if route.watch_path or query.get("watch") in TRUE else "list"
        return "watch" if route.watch_path else "get"
    if route.subresource in KUBEVIRT_VM_ACTIONS:
        return "update"
    table = {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if route.name else "deletecollection",
    }
    if method not in table:
        raise ApiError(
            405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
        )
    return table[method]


def discovery_document(path: str, accept: str, schemas: SchemaSet) -> tuple[Any, str] | None:
    """(body, content type) for discovery, version, health and OpenAPI v3 paths; None for others."""
    aggregated = "as=APIGroupDiscoveryList" in accept and "v=v2" in accept
    if path in ("/api", "/apis"):
        if aggregated:
            return discovery.aggregated_discovery(core=path == "/api"), AGGREGATED
        return (discovery.core_api_versions() if path == "/api" else discovery.api_group_list()), JSON
    fixed = {
        "/version": discovery.version_info,
        "/api/v1": discovery.core_resource_list,
        "/openapi/v3": openapi.build_openapi_v3_index,
    }
    if path in fixed:
        return fixed[path](), JSON
    if path in ("/healthz", "/livez", "/readyz"):
        return "ok", "text/plain"
    if path.startswith("/openapi/v3/"):
        doc = openapi.build_openapi_v3_group_version(schemas, path[len("/openapi/v3/") :])
        if doc is None:
            raise ApiError(404, "NotFound", _NOT_FOUND)
        return doc, JSON
    parts = path.strip("/").split("/")
    if parts[0] == "apis" and len(parts) == _GROUP_VERSION_PARTS:
        listing = discovery.group_resource_list(parts[1], parts[2])
        if listing is None:
            raise ApiError(404, "NotFound", _NOT_FOUND)
        return listing, JSON
    if parts[0] == "apis" and len(parts) == _GROUP_PARTS:
        for group in discovery.api_group_list()["groups"]:
            if group["name"] == parts[1]:
                return {"kind": "APIGroup", "apiVersion": "v1", **group}, JSON
    return None
