"""Discovery documents (``/version``, ``/api``, ``/apis``, ``/api/v1``, ``/apis/{group}/{version}``).

Shapes follow kube-apiserver v1.33: legacy ``APIVersions``/``APIGroupList``/``APIResourceList`` and the
aggregated ``apidiscovery.k8s.io/v2`` ``APIGroupDiscoveryList`` that kubectl asks for first. KubeVirt's
aggregated ``subresources.kubevirt.io`` group is listed the way its virt-api (and kube-aggregator) do.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from .resources import (
    KUBEVIRT_SUBRESOURCE_GROUP,
    KUBEVIRT_SUBRESOURCE_VERSION,
    KUBEVIRT_VM_ACTIONS,
    RESOURCE_TYPES,
    ResourceType,
    group_versions,
)

AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
AGGREGATED_V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"

# kube-aggregator's group priorities for the built-in groups; CRD and aggregated groups get 1000
_GROUP_PRIORITY = {
    "events.k8s.io": 17750,
    "rbac.authorization.k8s.io": 17000,
    "storage.k8s.io": 16800,
    "scheduling.k8s.io": 16600,
    "apiextensions.k8s.io": 16700,
    "coordination.k8s.io": 16500,
    "discovery.k8s.io": 16200,
}
# subresource -> (group, version, kind or "" for the parent's kind, verbs)
_SUBRESOURCES: dict[str, tuple[str, str, str, list[str]]] = {
    "status": ("", "", "", ["get", "patch", "update"]),
    "scale": ("autoscaling", "v1", "Scale", ["get", "patch", "update"]),
    "log": ("", "", "Pod", ["get"]),
    "exec": ("", "", "PodExecOptions", ["create", "get"]),
    "attach": ("", "", "PodAttachOptions", ["create", "get"]),
    "portforward": ("", "", "PodPortForwardOptions", ["create", "get"]),
    "binding": ("", "", "Binding", ["create"]),
    "eviction": ("policy", "v1", "Eviction", ["create"]),
    "token": ("authentication.k8s.io", "v1", "TokenRequest", ["create"]),
    "ephemeralcontainers": ("", "", "Pod", ["get", "patch", "update"]),
}
# apiextensions-apiserver lists a CR's verbs in this (unsorted) order
_CRD_VERBS = ("delete", "deletecollection", "get", "list", "patch", "create", "update", "watch")


def version_info() -> dict[str, str]:
    """``/version`` of a v1.33.0 kube-apiserver."""
    return {
        "major": "1",
        "minor": "33",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": "v1.33.0",
        "gitCommit": "60a317eadfcb839692a68eab88b2096f4d708f4f",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T13:00:14Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def storage_version_hash(rt: ResourceType) -> str:
    """kube-apiserver's ``StorageVersionHash``: base64 of the first 8 bytes of sha256("group/version/kind")."""
    digest = hashlib.sha256(f"{rt.group}/{rt.version}/{rt.kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def _verbs(rt: ResourceType) -> list[str]:
    if rt.custom:
        return [v for v in _CRD_VERBS if v in rt.verbs]
    return sorted(rt.verbs)


def _api_resources(rt: ResourceType) -> list[dict[str, Any]]:
    main: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular_name,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": _verbs(rt),
    }
    if rt.short_names:
        main["shortNames"] = list(rt.short_names)
    if rt.categories:
        main["categories"] = list(rt.categories)
    main["storageVersionHash"] = storage_version_hash(rt)
    out = [main]
    for sub in rt.subresources:
        group, version, kind, verbs = _SUBRESOURCES.get(sub, ("", "", "", ["get"]))
        entry: dict[str, Any] = {
            "name": f"{rt.plural}/{sub}",
            "singularName": "",
            "namespaced": rt.namespaced,
        }
        if group:
            entry |= {"group": group, "version": version}
        out.append(entry | {"kind": kind or rt.kind, "verbs": list(verbs)})
    return out


def _kubevirt_subresources() -> list[dict[str, Any]]:
    # virt-api declares only name and scope; "update" is the verb PUT .../start|stop|restart maps to
    return [
        {
            "name": f"virtualmachines/{action}",
            "singularName": "",
            "namespaced": True,
            "kind": "",
            "verbs": ["update"],
        }
        for action in KUBEVIRT_VM_ACTIONS
    ]


def core_api_versions(server_address: str = "127.0.0.1:6443") -> dict[str, Any]:
    """``/api``: the legacy ``APIVersions`` document."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def core_resource_list() -> dict[str, Any]:
    """``/api/v1``."""
    resources = [r for rt in RESOURCE_TYPES if not rt.group for r in _api_resources(rt)]
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": sorted(resources, key=_by_name)}


def _by_name(resource: dict[str, Any]) -> str:
    return str(resource["name"])


def _groups() -> dict[str, list[str]]:
    """Served groups (with the KubeVirt subresource group) in kube-aggregator's priority order."""
    groups = group_versions() | {KUBEVIRT_SUBRESOURCE_GROUP: [KUBEVIRT_SUBRESOURCE_VERSION]}
    return dict(sorted(groups.items(), key=lambda g: (-_GROUP_PRIORITY.get(g[0], 1000), g[0])))


def api_group_list() -> dict[str, Any]:
    """``/apis``: the legacy ``APIGroupList``."""
    groups = []
    for group, versions in _groups().items():
        listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        groups.append({"name": group, "versions": listed, "preferredVersion": listed[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(group: str) -> dict[str, Any] | None:
    """``/apis/{group}``: one ``APIGroup``."""
    versions = _groups().get(group)
    if versions is None:
        return None
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": listed,
        "preferredVersion": listed[0],
    }


def group_resource_list(group: str, version: str) -> dict[str, Any] | None:
    """``/apis/{group}/{version}`` (``group=""`` gives ``/api/v1``); None when not served."""
    if not group:
        return core_resource_list() if version == "v1" else None
    if group == KUBEVIRT_SUBRESOURCE_GROUP and version == KUBEVIRT_SUBRESOURCE_VERSION:
        resources = _kubevirt_subresources()
    else:
        resources = [
            r
            for rt in RESOURCE_TYPES
            if (rt.group, rt.version) == (group, version)
            for r in _api_resources(rt)
        ]
        if not resources:
            return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": sorted(resources, key=_by_name),
    }


def negotiate_aggregated(accept: str | None) -> str | None:
    """The aggregated-discovery Content-Type to answer an ``Accept`` header with, or None for legacy."""
    for part in (accept or "").split(","):
        params = {p.strip() for p in part.split(";")[1:]}
        if {"g=apidiscovery.k8s.io", "as=APIGroupDiscoveryList"} <= params:
            if "v=v2" in params:
                return AGGREGATED_V2
            if "v=v2beta1" in params:
                return AGGREGATED_V2BETA1
    return None


def _gvk(group: str, version: str, kind: str) -> dict[str, str]:
    return {"group": group, "version": version, "kind": kind}


def _discovery_resource(rt: ResourceType) -> dict[str, Any]:
    own = (rt.group, rt.version) if rt.custom else ("", "")
    out: dict[str, Any] = {
        "resource": rt.plural,
        "responseKind": _gvk(*own, rt.kind),
        "scope": "Namespaced" if rt.namespaced else "Cluster",
        "singularResource": rt.singular_name,
        "verbs": _verbs(rt),
    }
    if rt.short_names:
        out["shortNames"] = list(rt.short_names)
    if rt.categories:
        out["categories"] = list(rt.categories)
    subs = []
    for sub in rt.subresources:
        group, version, kind, verbs = _SUBRESOURCES.get(sub, ("", "", "", ["get"]))
        kind_gvk = _gvk(group, version, kind) if group else _gvk(*own, kind or rt.kind)
        subs.append({"subresource": sub, "responseKind": kind_gvk, "verbs": list(verbs)})
    if subs:
        out["subresources"] = sorted(subs, key=lambda s: str(s["subresource"]))
    return out


def _discovery_group(name: str | None, versions: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    metadata: dict[str, Any] = (
        {"creationTimestamp": None} if name is None else {"name": name, "creationTimestamp": None}
    )
    return {
        "metadata": metadata,
        "versions": [
            {"version": v, "resources": sorted(res, key=lambda r: str(r["resource"])), "freshness": "Current"}
            for v, res in versions.items()
        ],
    }


def aggregated_discovery(core: bool, content_type: str = AGGREGATED_V2) -> dict[str, Any]:
    """``/api`` (``core=True``) or ``/apis`` as an aggregated ``APIGroupDiscoveryList``."""
    api_version = (
        "apidiscovery.k8s.io/v2beta1" if content_type == AGGREGATED_V2BETA1 else "apidiscovery.k8s.io/v2"
    )
    if core:
        items = [
            _discovery_group(None, {"v1": [_discovery_resource(rt) for rt in RESOURCE_TYPES if not rt.group]})
        ]
    else:
        items = []
        for group, versions in _groups().items():
            if group == KUBEVIRT_SUBRESOURCE_GROUP:  # kube-aggregator's conversion: a parent without a kind
                parent = {
                    "resource": "virtualmachines",
                    "responseKind": _gvk("", "", ""),
                    "scope": "Namespaced",
                    "singularResource": "",
                    "verbs": None,
                    "subresources": [
                        {"subresource": a, "responseKind": _gvk("", "", ""), "verbs": ["update"]}
                        for a in KUBEVIRT_VM_ACTIONS
                    ],
                }
                items.append(_discovery_group(group, {KUBEVIRT_SUBRESOURCE_VERSION: [parent]}))
                continue
            per_version = {
                v: [_discovery_resource(rt) for rt in RESOURCE_TYPES if (rt.group, rt.version) == (group, v)]
                for v in versions
            }
            items.append(_discovery_group(group, per_version))
    return {"kind": "APIGroupDiscoveryList", "apiVersion": api_version, "metadata": {}, "items": items}
