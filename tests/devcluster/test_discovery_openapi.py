"""Discovery documents, OpenAPI v2/v3 documents and the built-in CRDs (pure builders)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuworkspace_devcluster import crds, discovery, openapi, resources, validation

SHARED = validation.find_shared_schemas()
needs_shared = pytest.mark.skipif(
    SHARED is None,
    reason="../shared/schemas is absent: the KubeVirt/CDI/NetworkFence schemas are unavailable",
)
KUBECTL_ACCEPT = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
)


def by_name(listing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in listing["resources"]}


def test_version() -> None:
    info = discovery.version_info()
    assert (info["major"], info["minor"], info["gitVersion"]) == ("1", "33", "v1.33.0")


def test_core_resource_list_has_pod_subresources() -> None:
    listing = discovery.core_resource_list()
    assert (listing["kind"], listing["groupVersion"]) == ("APIResourceList", "v1")
    res = by_name(listing)
    pods = res["pods"]
    assert pods["shortNames"] == ["po"] and pods["categories"] == ["all"] and pods["singularName"] == "pod"
    assert pods["verbs"] == [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ]
    assert pods["storageVersionHash"] == "xPOwRZ+Yhw8="  # what a real v1.33 apiserver reports
    assert res["pods/exec"]["kind"] == "PodExecOptions" and res["pods/exec"]["verbs"] == ["create", "get"]
    assert res["pods/log"]["verbs"] == ["get"]
    assert res["pods/binding"]["kind"] == "Binding"
    assert (res["pods/eviction"]["group"], res["pods/eviction"]["version"], res["pods/eviction"]["kind"]) == (
        "policy",
        "v1",
        "Eviction",
    )
    assert res["pods/status"]["verbs"] == ["get", "patch", "update"]
    assert [r["name"] for r in listing["resources"]] == sorted(r["name"] for r in listing["resources"])


def test_api_versions_and_groups() -> None:
    assert discovery.core_api_versions("10.0.0.1:6443")["serverAddressByClientCIDRs"] == [
        {"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.1:6443"}
    ]
    groups = {g["name"]: g for g in discovery.api_group_list()["groups"]}
    for group in resources.group_versions():
        assert group in groups
    assert groups["kubevirt.io"]["preferredVersion"] == {"groupVersion": "kubevirt.io/v1", "version": "v1"}
    assert "subresources.kubevirt.io" in groups
    assert discovery.api_group("cdi.kubevirt.io") is not None
    assert discovery.api_group("nope.example.com") is None


def test_group_resource_lists() -> None:
    vms = by_name(discovery.group_resource_list("kubevirt.io", "v1") or {})
    assert vms["virtualmachines"]["shortNames"] == ["vm", "vms"]
    # apiextensions-apiserver's verb order for custom resources
    assert vms["virtualmachines"]["verbs"] == [
        "delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"
    ]  # fmt: skip
    assert vms["virtualmachines/status"]["kind"] == "VirtualMachine"
    actions = by_name(discovery.group_resource_list("subresources.kubevirt.io", "v1") or {})
    assert set(actions) == {"virtualmachines/start", "virtualmachines/stop", "virtualmachines/restart"}
    assert all(a["namespaced"] and a["verbs"] == ["update"] for a in actions.values())
    assert discovery.group_resource_list("kubevirt.io", "v9") is None
    assert discovery.group_resource_list("", "v1") == discovery.core_resource_list()


def test_aggregated_discovery() -> None:
    assert discovery.negotiate_aggregated(KUBECTL_ACCEPT) == discovery.AGGREGATED_V2
    assert discovery.AGGREGATED_V2 == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    assert discovery.negotiate_aggregated("application/json, */*") is None
    core = discovery.aggregated_discovery(core=True)
    assert (core["kind"], core["apiVersion"]) == ("APIGroupDiscoveryList", "apidiscovery.k8s.io/v2")
    (item,) = core["items"]
    assert "name" not in item["metadata"]
    (v1,) = item["versions"]
    assert v1["freshness"] == "Current"
    pods = next(r for r in v1["resources"] if r["resource"] == "pods")
    assert pods["responseKind"] == {"group": "", "version": "", "kind": "Pod"}
    subs = {s["subresource"]: s for s in pods["subresources"]}
    assert {"exec", "log", "status", "binding", "eviction"} <= set(subs)
    assert subs["eviction"]["responseKind"] == {"group": "policy", "version": "v1", "kind": "Eviction"}
    groups = {i["metadata"]["name"]: i for i in discovery.aggregated_discovery(core=False)["items"]}
    vm = next(
        r for r in groups["kubevirt.io"]["versions"][0]["resources"] if r["resource"] == "virtualmachines"
    )
    assert vm["responseKind"] == {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachine"}
    assert vm["scope"] == "Namespaced" and vm["categories"] == ["all"]
    parent = groups["subresources.kubevirt.io"]["versions"][0]["resources"][0]
    assert parent["resource"] == "virtualmachines" and parent["verbs"] is None
    assert [s["subresource"] for s in parent["subresources"]] == ["start", "stop", "restart"]
    v2beta1 = discovery.aggregated_discovery(core=False, content_type=discovery.AGGREGATED_V2BETA1)
    assert v2beta1["apiVersion"] == "apidiscovery.k8s.io/v2beta1"


def supports_query_param_v3(doc: dict[str, Any], group: str, version: str, kind: str, param: str) -> bool:
    """kubectl's queryParamVerifierV3: the kind's PATCH operation declares the query parameter."""
    for item in doc["paths"].values():
        patch = item.get("patch")
        if patch is None:
            continue
        if patch.get("x-kubernetes-group-version-kind") != {"group": group, "version": version, "kind": kind}:
            continue
        return any(p["name"] == param and p["in"] == "query" for p in patch.get("parameters", []))
    return False


def resolve(doc: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while True:
        ref = node.get("$ref") or (node.get("allOf") or [{}])[0].get("$ref")
        if not ref:
            return node
        node = doc["components"]["schemas"][ref.removeprefix("#/components/schemas/")]


def schema_for_gvk(doc: dict[str, Any], group: str, version: str, kind: str) -> dict[str, Any]:
    """How kubectl explain finds the kind's schema in a group-version document."""
    for schema in doc["components"]["schemas"].values():
        if {"group": group, "version": version, "kind": kind} in schema.get(
            "x-kubernetes-group-version-kind", []
        ):
            return dict(schema)
    raise AssertionError(f"no schema for {group}/{version} {kind}")


def test_openapi_v3_index_and_field_validation_support() -> None:
    index = openapi.build_openapi_v3_index()["paths"]
    assert "api/v1" in index and "apis/kubevirt.io/v1" in index
    assert index["api/v1"]["serverRelativeURL"].startswith("/openapi/v3/api/v1?hash=")
    for rt in resources.RESOURCE_TYPES:
        gv = f"apis/{rt.group}/{rt.version}" if rt.group else "api/v1"
        doc = openapi.build_openapi_v3_group_version(None, gv)
        assert doc is not None and doc["openapi"].startswith("3.")
        assert supports_query_param_v3(doc, rt.group, rt.version, rt.kind, "fieldValidation"), rt
        assert supports_query_param_v3(doc, rt.group, rt.version, rt.kind, "dryRun"), rt
        schema_for_gvk(doc, rt.group, rt.version, rt.kind)
        text = json.dumps(doc)
        for ref in {r for r in text.split('"$ref": "')[1:]}:
            name = ref.split('"', 1)[0].removeprefix("#/components/schemas/")
            assert name in doc["components"]["schemas"], (gv, name)
    assert openapi.build_openapi_v3_group_version(None, "apis/nope.example.com/v1") is None


def test_openapi_v3_explains_pod_containers() -> None:
    doc = openapi.build_openapi_v3_group_version(None, "api/v1")
    assert doc is not None
    pod = schema_for_gvk(doc, "", "v1", "Pod")
    spec = resolve(doc, pod["properties"]["spec"])
    containers = spec["properties"]["containers"]
    assert containers["type"] == "array"
    container = resolve(doc, containers["items"])
    assert {"name", "image", "resources", "ports"} <= set(container["properties"])
    assert "Container" in json.dumps(containers["items"])
    # published as oneOf so that kubectl explain names them (<map[string]Quantity>, <IntOrString>)
    quantity = doc["components"]["schemas"]["io.k8s.apimachinery.pkg.api.resource.Quantity"]
    assert quantity["oneOf"] == [{"type": "string"}, {"type": "number"}]


@needs_shared
def test_openapi_v3_explains_virtual_machine_run_strategy() -> None:
    doc = openapi.build_openapi_v3_group_version(None, "apis/kubevirt.io/v1")
    assert doc is not None
    vm = schema_for_gvk(doc, "kubevirt.io", "v1", "VirtualMachine")
    assert doc["components"]["schemas"]["io.kubevirt.v1.VirtualMachine"] == vm
    run_strategy = vm["properties"]["spec"]["properties"]["runStrategy"]
    assert run_strategy["type"] == "string" and "Halted" in run_strategy["description"]
    assert resolve(doc, vm["properties"]["metadata"])["properties"]["name"]["type"] == "string"


def test_openapi_v2() -> None:
    doc = openapi.build_openapi_v2()
    assert doc["swagger"] == "2.0"
    assert "io.k8s.api.core.v1.Pod" in doc["definitions"]
    assert "io.kubevirt.v1.VirtualMachine" in doc["definitions"]
    patch = doc["paths"]["/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}"]["patch"]
    assert patch["x-kubernetes-action"] == "patch"
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "kubevirt.io",
        "kind": "VirtualMachine",
        "version": "v1",
    }
    names = {p["name"] for p in patch["parameters"] if p["in"] == "query"}
    assert {"fieldValidation", "dryRun", "fieldManager", "force"} <= names
    post = doc["paths"]["/api/v1/namespaces/{namespace}/pods"]["post"]
    assert post["operationId"] == "createCoreV1NamespacedPod"
    assert {"fieldValidation", "dryRun", "fieldManager"} <= {p["name"] for p in post["parameters"]}
    for name in json.dumps(doc).split('"$ref": "#/definitions/')[1:]:
        assert name.split('"', 1)[0] in doc["definitions"]
    assert openapi.build_openapi_v2() is doc  # cached


def test_builtin_crds() -> None:
    listed = {c["metadata"]["name"]: c for c in crds.builtin_crds()}
    assert set(listed) == {f"{rt.plural}.{rt.group}" for rt in resources.RESOURCE_TYPES if rt.custom}
    vm = listed["virtualmachines.kubevirt.io"]
    assert vm["spec"]["names"]["shortNames"] == ["vm", "vms"] and vm["spec"]["scope"] == "Namespaced"
    (version,) = vm["spec"]["versions"]
    assert version["served"] and version["storage"] and version["subresources"] == {"status": {}}
    assert [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"]] == [
        ("Age", ".metadata.creationTimestamp"),
        ("Status", ".status.printableStatus"),
        ("Ready", ".status.conditions[?(@.type=='Ready')].status"),
    ]
    assert {c["type"] for c in vm["status"]["conditions"]} == {"NamesAccepted", "Established"}
    assert listed["networkfences.csiaddons.openshift.io"]["spec"]["scope"] == "Cluster"
    if SHARED is not None:
        schema = version["schema"]["openAPIV3Schema"]
        assert '"$ref"' not in json.dumps(schema)
        assert schema["properties"]["spec"]["properties"]["runStrategy"]["type"] == "string"


def test_printer_columns() -> None:
    vmi = resources.find("kubevirt.io", "v1", "virtualmachineinstances")
    dv = resources.find("cdi.kubevirt.io", "v1beta1", "datavolumes")
    das = resources.find("cdi.kubevirt.io", "v1beta1", "datasources")
    pod = resources.find("", "v1", "pods")
    assert vmi and dv and das and pod
    vmi_cols = {c["name"]: c for c in crds.printer_columns(vmi)}
    assert list(vmi_cols) == ["Age", "Phase", "IP", "NodeName", "Ready", "Live-Migratable", "Paused"]
    assert vmi_cols["IP"]["jsonPath"] == ".status.interfaces[0].ipAddress"
    assert vmi_cols["Live-Migratable"]["priority"] == 1
    assert [c["name"] for c in crds.printer_columns(dv)] == ["Phase", "Progress", "Restarts", "Age"]
    assert crds.printer_columns(das) == [
        {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"}
    ]
    assert crds.printer_columns(pod) == []
