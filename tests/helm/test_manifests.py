"""helm-values/extra-manifests/: valid Kubernetes objects, RBAC rules that name real resources, the
catalog ConfigMaps equal to the demo catalog, and names that agree with values.yaml and the services.

Objects are validated strictly (an unknown field fails) with kubernetes-validate for the Kubernetes
version the devcluster serves. Every RBAC rule's resource is looked up in API discovery: KubeVirt's and
CDI's Swagger files in ../shared/schemas for their groups, the devcluster's resource table (built-in
kinds, snapshot.storage.k8s.io, csi-addons) for the rest.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpuworkspace_devcluster.resources import RESOURCE_TYPES
from gpuworkspace_spawner.catalog import load_catalog
from gpuworkspace_spawner.services.attribution.app import _parser as attribution_parser
from tests.helm import (
    BASE,
    CATALOG_LABEL,
    MANIFESTS,
    RELEASE_NAMESPACE,
    REPO,
    SHARED,
    WORKSPACE_NAMESPACE,
    load_yaml,
    manifest_files,
    manifests,
)

KUBERNETES_VERSION = "1.33"  # what the devcluster serves (devcluster/gpuworkspace_devcluster/openapi.py)
DEMO_CATALOG = REPO / "hub_config" / "catalog"
VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"})
# Subresources that exist only for authorization (a SubjectAccessReview), never as an API path.
AUTHZ_ONLY = {
    ("", "nodes/metrics"): "the kubelet authorizes /metrics and /metrics/resource as get nodes/metrics",
    (
        "cdi.kubevirt.io",
        "datavolumes/source",
    ): "CDI authorizes cross-namespace clones as create datavolumes/source",
}
SWAGGER = {"kubevirt.io": "kubevirt-swagger.json", "subresources.kubevirt.io": "kubevirt-swagger.json"}
SWAGGER |= {"cdi.kubevirt.io": "cdi-swagger.json"}
# Namespaces the manifests use that another component owns (they must exist before applying).
EXTERNAL_NAMESPACES = {"gpu-operator": "the NVIDIA GPU operator", "vm-images": "the golden VM images"}

OBJECTS = [
    pytest.param(doc, id=f"{p.relative_to(MANIFESTS)}:{doc['kind']}/{doc['metadata']['name']}")
    for p, doc in manifests()
]


def test_there_are_manifests() -> None:
    kinds = Counter(doc["kind"] for _, doc in manifests())
    for kind in ("Namespace", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ConfigMap"):
        assert kinds[kind] >= 1, kind
    assert kinds["DaemonSet"] == 1 and kinds["NetworkPolicy"] >= 1


# Custom resources are validated against their CRDs' schemas elsewhere (Kueue: test_kueue_values.py).
CUSTOM_GROUPS = frozenset({"kueue.x-k8s.io"})
BUILT_IN = [o for o in OBJECTS if o.values[0]["apiVersion"].partition("/")[0] not in CUSTOM_GROUPS]


# ------------------------------------------------------------------------------ schemas
@pytest.mark.parametrize("obj", BUILT_IN)
def test_manifest_is_a_valid_kubernetes_object(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        pytest.param(lambda o: o["rules"][0].update(verb=["get"]), "verb", id="unknown-field"),
        pytest.param(lambda o: o["rules"][0].pop("verbs"), "verbs", id="missing-required"),
        pytest.param(lambda o: o["rules"][0].update(verbs="get"), "get", id="wrong-type"),
    ],
)
def test_the_manifest_check_can_fail(change: Any, error: str) -> None:
    role = next(doc for _, doc in manifests() if doc["kind"] == "Role")
    broken = json.loads(json.dumps(role))
    change(broken)
    with pytest.raises(kubernetes_validate.ValidationError, match=error):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def _values_objects() -> Iterator[tuple[str, dict[str, Any]]]:
    """The Kubernetes-native parts of values.yaml the chart's schema leaves unchecked, as objects."""
    values = load_yaml(BASE)
    hub = values["hub"]
    yield (
        "hub.extraVolumes",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "hub"},
            "spec": {
                "containers": [{"name": "hub", "image": "hub", "volumeMounts": hub["extraVolumeMounts"]}],
                "volumes": hub["extraVolumes"],
            },
        },
    )
    policies = {
        "hub.networkPolicy": hub["networkPolicy"],
        "proxy.chp.networkPolicy": values["proxy"]["chp"]["networkPolicy"],
    }
    for where, policy in policies.items():
        spec = {k: policy[k] for k in ("ingress", "egress") if k in policy}
        yield (
            where,
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": "x"},
                "spec": {"podSelector": {}, **spec},
            },
        )


@pytest.mark.parametrize(("where", "obj"), [pytest.param(w, o, id=w) for w, o in _values_objects()])
def test_kubernetes_parts_of_the_values_are_valid(where: str, obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


# ------------------------------------------------------------------------------ RBAC discovery
@functools.cache
def _swagger_paths(filename: str) -> frozenset[str]:
    assert SHARED is not None
    paths = json.loads((SHARED / filename).read_text())["paths"]
    return frozenset(re.sub(r"\{[^}]*\}", "{}", p) for p in paths)


def _in_swagger(group: str, resource: str) -> tuple[bool, bool] | None:
    """(exists, namespaced) from KubeVirt's/CDI's Swagger; None when there is no file for the group."""
    if group not in SWAGGER or SHARED is None or not (SHARED / SWAGGER[group]).is_file():
        return None
    plural, _, sub = resource.partition("/")
    paths = _swagger_paths(SWAGGER[group])
    tail = f"/{plural}/{{}}/{sub}" if sub else f"/{plural}"
    namespaced = any(p.startswith(f"/apis/{group}/") and p.endswith(f"/namespaces/{{}}{tail}") for p in paths)
    cluster = any(re.fullmatch(rf"/apis/{re.escape(group)}/[^/]+{re.escape(tail)}", p) for p in paths)
    return namespaced or cluster, namespaced


def _in_discovery(group: str, resource: str) -> tuple[bool, bool]:
    """(exists, namespaced) from the devcluster's resource table (what its discovery serves)."""
    plural, _, sub = resource.partition("/")
    for rt in RESOURCE_TYPES:
        if rt.group == group and rt.plural == plural and (not sub or sub in rt.subresources):
            return True, rt.namespaced
    return False, False


def rule_problems(role: Mapping[str, Any]) -> list[str]:
    """Resources no API serves, unknown verbs, and namespaced grants of cluster-scoped resources."""
    problems = []
    in_namespace = role["kind"] == "Role"
    for i, rule in enumerate(role.get("rules") or []):
        where = f"{role['kind']} {role['metadata']['name']} rules[{i}]"
        problems += [f"{where}: unknown verb {v!r}" for v in sorted(set(rule.get("verbs") or []) - VERBS)]
        for group in rule.get("apiGroups") or []:
            for granted in rule.get("resources") or []:
                # an authorization-only subresource: its resource must still exist
                resource = granted.partition("/")[0] if (group, granted) in AUTHZ_ONLY else granted
                found = _in_swagger(group, resource)
                if found is None and group in SWAGGER:
                    pytest.skip(f"../shared/schemas/{SWAGGER[group]} is absent: cannot check {group}")
                exists, namespaced = found if found is not None else _in_discovery(group, resource)
                if not exists:
                    problems.append(f"{where}: {group or 'core'}/{resource} is not served by any API")
                elif in_namespace and not namespaced:
                    problems.append(f"{where}: {resource} is cluster-scoped; a Role cannot grant it")
    return problems


ROLES = [o for o in OBJECTS if o.values[0]["kind"] in ("Role", "ClusterRole")]


@pytest.mark.parametrize("role", ROLES)
def test_every_rbac_rule_names_a_served_resource(role: dict[str, Any]) -> None:
    assert rule_problems(role) == []


@pytest.mark.parametrize(
    ("kind", "group", "resource", "verb", "expected"),
    [
        pytest.param("Role", "kubevirt.io", "virtualmachine", "get", "not served", id="singular-plural"),
        pytest.param("Role", "cdi.kubevirt.io", "datavolume/source", "create", "not served", id="cdi-typo"),
        pytest.param(
            "Role", "kubevirt.io", "virtualmachines/start", "update", "not served", id="wrong-group"
        ),
        pytest.param("Role", "", "nodes", "list", "cluster-scoped", id="nodes-in-a-role"),
        pytest.param(
            "ClusterRole", "storage.k8s.io", "volumeattachment", "list", "not served", id="core-typo"
        ),
        pytest.param("ClusterRole", "", "nodes", "read", "unknown verb", id="verb"),
    ],
)
def test_the_rbac_check_can_fail(kind: str, group: str, resource: str, verb: str, expected: str) -> None:
    role = {
        "kind": kind,
        "metadata": {"name": "x"},
        "rules": [{"apiGroups": [group], "resources": [resource], "verbs": [verb]}],
    }
    assert any(expected in p for p in rule_problems(role)), rule_problems(role)


def test_subresources_kubevirt_start_is_served_but_not_granted() -> None:
    """The spawner starts and stops VMs by patching runStrategy, never through these subresources."""
    ok = {"kind": "Role", "metadata": {"name": "x"}}
    ok["rules"] = [
        {
            "apiGroups": ["subresources.kubevirt.io"],
            "resources": ["virtualmachines/start"],
            "verbs": ["update"],
        }
    ]
    assert rule_problems(ok) == []
    granted = {g for _, doc in manifests() for rule in doc.get("rules") or [] for g in rule.get("apiGroups")}
    assert "subresources.kubevirt.io" not in granted


def test_bindings_grant_existing_roles_to_one_identity_each() -> None:
    """Each binding gives an existing role to one ServiceAccount of the release namespace: the hub's
    (z2jh creates it) or one that the manifests create and a Deployment runs as."""
    objects = [doc for _, doc in manifests()]
    roles = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in objects if "rules" in d
    }
    accounts = {d["metadata"]["name"] for d in objects if d["kind"] == "ServiceAccount"}
    used = {
        d["spec"]["template"]["spec"].get("serviceAccountName") for d in objects if d["kind"] == "Deployment"
    }
    for binding in (d for d in objects if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        assert (ref["kind"], namespace, ref["name"]) in roles, binding["metadata"]
        (subject,) = binding["subjects"]
        assert subject["kind"] == "ServiceAccount" and subject["namespace"] == RELEASE_NAMESPACE, binding
        assert subject["name"] == "hub" or subject["name"] in accounts & used, binding["metadata"]


# ------------------------------------------------------------------------------ catalog
def _catalog_maps() -> list[dict[str, Any]]:
    return [
        d
        for _, d in manifests()
        if d["kind"] == "ConfigMap" and (d["metadata"].get("labels") or {}).get(CATALOG_LABEL)
    ]


def _documents(texts: list[str]) -> dict[str, Any]:
    """Catalog documents by kind/name."""
    docs = [d for t in texts for d in yaml.safe_load_all(t) if d]
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


def catalog_problems(maps: list[dict[str, Any]], tmp_path: Path) -> list[str]:
    keys = Counter(k for m in maps for k in m["data"])
    problems = [
        f"catalog file {k} is in {n} ConfigMaps (one projected directory)" for k, n in keys.items() if n > 1
    ]
    ours = _documents([t for m in maps for t in m["data"].values()])
    demo = _documents([p.read_text() for p in sorted(DEMO_CATALOG.glob("*.yaml"))])
    problems += [f"{name}: missing (hub_config/catalog has it)" for name in sorted(demo.keys() - ours.keys())]
    problems += [f"{name}: not in hub_config/catalog" for name in sorted(ours.keys() - demo.keys())]
    problems += [
        f"{name}: differs from hub_config/catalog"
        for name in sorted(ours.keys() & demo.keys())
        if ours[name] != demo[name]
    ]
    for m in maps:
        for key, text in m["data"].items():
            (tmp_path / key).write_text(text)
    if not problems:
        catalog = load_catalog(tmp_path)
        demo_catalog = load_catalog(DEMO_CATALOG)
        slugs, demo_slugs = (
            sorted(p.slug for p in catalog.profiles),
            sorted(p.slug for p in demo_catalog.profiles),
        )
        if slugs != demo_slugs or catalog.version != demo_catalog.version:
            problems.append(f"the loaded catalog has {slugs}, hub_config's {demo_slugs}")
    return problems


def test_catalog_configmaps_hold_the_demo_catalog_and_load(tmp_path: Path) -> None:
    maps = _catalog_maps()
    assert {m["metadata"]["namespace"] for m in maps} == {RELEASE_NAMESPACE}
    assert catalog_problems(maps, tmp_path) == []


def test_the_catalog_check_can_fail(tmp_path: Path) -> None:
    maps = json.loads(json.dumps(_catalog_maps()))
    vm = next(m for m in maps if "vm.yaml" in m["data"])
    del vm["data"]["vm.yaml"]
    maps[0]["data"]["cpu.yaml"] = maps[0]["data"]["cpu.yaml"].replace("size: 10Gi", "size: 11Gi")
    problems = catalog_problems(maps, tmp_path)
    assert "WorkspaceProfile/vm-workstation: missing (hub_config/catalog has it)" in problems
    assert "WorkspaceProfile/cpu-small: differs from hub_config/catalog" in problems


def test_the_hub_mounts_every_catalog_configmap() -> None:
    hub = load_yaml(BASE)["hub"]
    volume = next(v for v in hub["extraVolumes"] if v["name"] == "gpuworkspace-catalog")
    sources = {
        s["configMap"]["name"]: s["configMap"].get("optional", False) for s in volume["projected"]["sources"]
    }
    assert set(sources) == {m["metadata"]["name"] for m in _catalog_maps()}
    base = {m["metadata"]["name"] for p, m in manifests() if m.get("data") and p.parent == MANIFESTS}
    for name, optional in sources.items():  # only the mode-specific ones may be absent
        assert optional == (name not in base), name


# ------------------------------------------------------------------------------ names
def test_namespaces_exist_or_are_external() -> None:
    created = {d["metadata"]["name"] for _, d in manifests() if d["kind"] == "Namespace"}
    used = {d["metadata"]["namespace"] for _, d in manifests() if "namespace" in d["metadata"]}
    assert used - created <= set(EXTERNAL_NAMESPACES), used - created
    assert {RELEASE_NAMESPACE, WORKSPACE_NAMESPACE} <= created


def test_the_agent_is_where_the_attribution_service_looks() -> None:
    args = attribution_parser().parse_args([])
    namespace, _, name = args.agent_service.partition("/")
    service = next(d for _, d in manifests() if d["kind"] == "Service")
    assert (service["metadata"]["namespace"], service["metadata"]["name"]) == (namespace, name)
    assert args.agent_port_name in {p["name"] for p in service["spec"]["ports"]}
    daemonset = next(d for _, d in manifests() if d["kind"] == "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["hostPID"] is True and pod["automountServiceAccountToken"] is False
    assert service["spec"]["selector"].items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    endpoints = next(
        d for _, d in manifests() if d["kind"] == "Role" and d["metadata"]["namespace"] == namespace
    )
    assert endpoints["rules"] == [
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}
    ]
    dcgm_namespace = args.dcgm_service.partition("/")[0]
    assert any(d["kind"] == "Role" and d["metadata"]["namespace"] == dcgm_namespace for _, d in manifests())


def test_every_file_parses_and_has_a_header_comment() -> None:
    for path in manifest_files():
        assert path.read_text().startswith("#"), f"{path}: say what it is for in a comment first"
