"""PATCH application: JSON merge patch, JSON patch and strategic merge patch as the API server applies them.

The strategic-merge expectations were checked against ``kubectl patch --local`` (the same apimachinery
code the API server runs); ``test_strategic_merge_matches_kubectl`` repeats that check where kubectl exists.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_devcluster.errors import ApiError
from gpuworkspace_devcluster.patching import (
    SchemaLookup,
    accepted_patch_types,
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
    load_core_definitions,
    schema_for_gvk,
    strategic_merge_supported,
    unsupported_patch_type,
)
from gpuworkspace_devcluster.resources import ResourceType, find


def _rt(group: str, version: str, plural: str) -> ResourceType:
    rt = find(group, version, plural)
    assert rt is not None
    return rt


def _pod_schema() -> SchemaLookup:
    schema = schema_for_gvk(load_core_definitions(), "", "v1", "Pod")
    assert schema is not None
    return schema


def _dig(obj: Any, path: str) -> Any:
    for part in path.split(".") if path else ():
        obj = obj[part]
    return obj


# --- JSON merge patch -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [  # RFC 7386 appendix A, restricted to object patches (the API server only takes objects)
        pytest.param({"a": "b"}, {"a": "c"}, {"a": "c"}, id="replace"),
        pytest.param({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}, id="add"),
        pytest.param({"a": "b"}, {"a": None}, {}, id="null-deletes"),
        pytest.param({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}, id="null-deletes-one"),
        pytest.param({"a": ["b"]}, {"a": "c"}, {"a": "c"}, id="list-to-scalar"),
        pytest.param({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}, id="scalar-to-list"),
        pytest.param({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}, id="nested"),
        pytest.param({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}, id="lists-replaced"),
        pytest.param({"e": None}, {"a": 1}, {"e": None, "a": 1}, id="target-null-kept"),
        pytest.param({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}, id="new-nested-nulls-dropped"),
        pytest.param(
            {"metadata": {"labels": {"a": "1", "b": "2"}}},
            {"metadata": {"labels": {"a": None, "c": "3"}}},
            {"metadata": {"labels": {"b": "2", "c": "3"}}},
            id="labels",
        ),
    ],
)
def test_merge_patch(target: dict[str, Any], patch: dict[str, Any], expected: dict[str, Any]) -> None:
    before = copy.deepcopy((target, patch))
    assert apply_merge_patch(target, patch) == expected
    assert (target, patch) == before


@pytest.mark.parametrize("patch", [pytest.param([1], id="list"), pytest.param("x", id="string")])
def test_merge_patch_must_be_an_object(patch: Any) -> None:
    with pytest.raises(ApiError) as err:
        apply_merge_patch({}, patch)
    assert (err.value.code, err.value.reason) == (400, "BadRequest")
    assert "cannot unmarshal" in err.value.message


def test_merge_patch_result_shares_nothing_with_inputs() -> None:
    target, patch = {"a": {"b": [1]}}, {"c": {"d": [2]}}
    result = apply_merge_patch(target, patch)
    result["a"]["b"].append(3)
    result["c"]["d"].append(4)
    assert (target, patch) == ({"a": {"b": [1]}}, {"c": {"d": [2]}})


# --- JSON patch -----------------------------------------------------------------------------------

DOC = {"metadata": {"name": "x", "labels": {"a": "1"}}, "spec": {"list": [1, 2]}}


@pytest.mark.parametrize(
    ("ops", "path", "expected"),
    [
        pytest.param(
            [{"op": "add", "path": "/metadata/labels/b", "value": "2"}],
            "metadata.labels",
            {"a": "1", "b": "2"},
            id="add",
        ),
        pytest.param([{"op": "remove", "path": "/metadata/labels/a"}], "metadata.labels", {}, id="remove"),
        pytest.param(
            [{"op": "replace", "path": "/spec/list/0", "value": 9}], "spec.list", [9, 2], id="replace"
        ),
        pytest.param(
            [{"op": "add", "path": "/spec/list/-", "value": 3}], "spec.list", [1, 2, 3], id="append"
        ),
        pytest.param(
            [{"op": "move", "from": "/spec/list", "path": "/spec/moved"}],
            "spec",
            {"moved": [1, 2]},
            id="move",
        ),
        pytest.param(
            [{"op": "copy", "from": "/metadata/name", "path": "/spec/name"}], "spec.name", "x", id="copy"
        ),
        pytest.param(
            [
                {"op": "test", "path": "/metadata/name", "value": "x"},
                {"op": "replace", "path": "/metadata/name", "value": "y"},
            ],
            "metadata.name",
            "y",
            id="test-then-replace",
        ),
        pytest.param(
            [{"op": "add", "path": "/metadata/labels/a~1b", "value": "s"}],
            "metadata.labels",
            {"a": "1", "a/b": "s"},
            id="escaped-slash",
        ),
        pytest.param([], "", DOC, id="no-ops"),
    ],
)
def test_json_patch(ops: list[dict[str, Any]], path: str, expected: Any) -> None:
    before = copy.deepcopy(DOC)
    assert _dig(apply_json_patch(DOC, ops), path) == expected
    assert before == DOC


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        pytest.param([{"op": "test", "path": "/metadata/name", "value": "other"}], 422, id="failed-test"),
        pytest.param([{"op": "remove", "path": "/metadata/missing"}], 422, id="remove-missing"),
        pytest.param([{"op": "add", "path": "/nope/deeper", "value": 1}], 422, id="missing-parent"),
        pytest.param([{"op": "replace", "path": "/spec/list/7", "value": 1}], 422, id="index-out-of-range"),
        pytest.param([{"op": "frobnicate", "path": "/a"}], 422, id="unknown-op"),
        pytest.param([{"path": "/a"}], 422, id="missing-op"),
        pytest.param([{"op": "add", "value": 1}], 422, id="missing-path"),
        pytest.param([{"op": "replace", "path": "", "value": [1]}], 422, id="result-not-an-object"),
        pytest.param({"op": "add"}, 400, id="not-a-list"),
        pytest.param([1], 400, id="op-not-an-object"),
    ],
)
def test_json_patch_errors(ops: Any, code: int) -> None:
    with pytest.raises(ApiError) as err:
        apply_json_patch(DOC, ops)
    assert err.value.code == code
    if code == 422:
        assert (err.value.reason, err.value.message) == (
            "Invalid",
            "the server rejected our request due to an error in our request",
        )


# --- strategic merge patch ------------------------------------------------------------------------

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "p",
        "labels": {"a": "1", "b": "2"},
        "finalizers": ["x", "y"],
        "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u1"}],
    },
    "spec": {
        "containers": [
            {
                "name": "a",
                "image": "i1",
                "args": ["--a", "--b"],
                "env": [{"name": "E1", "value": "1"}],
                "ports": [
                    {"containerPort": 80, "protocol": "TCP"},
                    {"containerPort": 443, "protocol": "TCP"},
                ],
                "volumeMounts": [{"name": "v", "mountPath": "/m1"}],
            },
            {"name": "b", "image": "i2"},
        ],
        "tolerations": [{"key": "k1", "operator": "Exists"}],
        "volumes": [{"name": "v", "emptyDir": {}}],
    },
}
A = POD["spec"]["containers"][0]
B = POD["spec"]["containers"][1]


def _names(items: list[dict[str, Any]], key: str = "name") -> list[Any]:
    return [i[key] for i in items]


SMP_CASES = [
    pytest.param(
        {"spec": {"containers": [{"name": "b", "image": "new"}]}},
        "spec.containers",
        [A, {"name": "b", "image": "new"}],
        id="image-of-one-container-keeps-the-others",
    ),
    pytest.param(
        {"spec": {"containers": [{"name": "c", "image": "c"}]}},
        "spec.containers",
        [{"name": "c", "image": "c"}, A, B],
        id="new-container-goes-first",
    ),
    pytest.param(
        {"spec": {"containers": [{"name": "c", "image": "c"}, {"name": "d", "image": "d"}]}},
        "spec.containers",
        [{"name": "c", "image": "c"}, {"name": "d", "image": "d"}, A, B],
        id="new-containers-keep-patch-order",
    ),
    pytest.param(
        {"spec": {"containers": [{"name": "a", "env": [{"name": "E2", "value": "2"}]}]}},
        "spec.containers.0.env",
        [{"name": "E2", "value": "2"}, {"name": "E1", "value": "1"}],
        id="env-merges-by-name",
    ),
    pytest.param(
        {"spec": {"containers": [{"name": "a", "env": [{"name": "E1", "value": "9"}]}]}},
        "spec.containers.0.env",
        [{"name": "E1", "value": "9"}],
        id="env-updates-by-name",
    ),
    pytest.param(
        {"spec": {"containers": [{"name": "a", "env": [{"name": "E1", "$patch": "delete"}]}]}},
        "spec.containers.0.env",
        [],
        id="env-delete-directive",
    ),
    pytest.param(
        {
            "spec": {
                "containers": [
                    {
                        "name": "a",
                        "env": [{"name": "E1", "value": None, "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
                    }
                ]
            }
        },
        "spec.containers.0.env",
        [{"name": "E1", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
        id="env-null-removes-field",
    ),
    pytest.param(
        {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}},
        "spec.containers",
        [B],
        id="delete-directive-removes-container",
    ),
    pytest.param(
        {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "o"}]}},
        "spec.containers",
        [{"name": "only", "image": "o"}],
        id="replace-directive-in-list",
    ),
    pytest.param(
        {"spec": {"containers": [{"$patch": "replace", "name": "gone", "image": "o"}]}},
        "spec.containers",
        [],
        id="replace-directive-item-itself-is-dropped",
    ),
    pytest.param(
        {"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 8080}]}]}},
        "spec.containers.0.ports",
        [{"containerPort": 8080}, *A["ports"]],
        id="ports-merge-by-containerPort",
    ),
    pytest.param(
        {"spec": {"containers": [{"name": "a", "volumeMounts": [{"name": "v", "mountPath": "/m2"}]}]}},
        "spec.containers.0.volumeMounts",
        [{"name": "v", "mountPath": "/m2"}, {"name": "v", "mountPath": "/m1"}],
        id="volume-mounts-merge-by-mountPath",
    ),
    pytest.param(
        {"spec": {"containers": [{"name": "a", "args": ["--c"]}]}},
        "spec.containers.0.args",
        ["--c"],
        id="args-replaced",
    ),
    pytest.param(
        {"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1"}}}]}},
        "spec.containers.0.resources",
        {"limits": {"cpu": "1"}},
        id="new-nested-map",
    ),
    pytest.param(
        {"metadata": {"finalizers": ["z"]}}, "metadata.finalizers", ["z", "x", "y"], id="finalizers-union"
    ),
    pytest.param(
        {"metadata": {"finalizers": ["y", "w"]}},
        "metadata.finalizers",
        ["x", "y", "w"],
        id="finalizers-union-dedup",
    ),
    pytest.param(
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}},
        "metadata.finalizers",
        ["y"],
        id="delete-from-primitive-list",
    ),
    pytest.param(
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"], "finalizers": ["q"]}},
        "metadata.finalizers",
        ["q", "y"],
        id="delete-and-add-primitives",
    ),
    pytest.param(
        {"metadata": {"$setElementOrder/finalizers": ["y", "q", "x"], "finalizers": ["q"]}},
        "metadata.finalizers",
        ["y", "q", "x"],
        id="set-element-order-primitives",
    ),
    pytest.param(
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "b"}, {"name": "n"}, {"name": "a"}],
                "containers": [{"name": "n", "image": "n"}],
            }
        },
        "spec.containers",
        [B, {"name": "n", "image": "n"}, A],
        id="set-element-order-maps",
    ),
    pytest.param(
        {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Y", "name": "o2", "uid": "u2"}]}},
        "metadata.ownerReferences",
        ["u2", "u1"],
        id="owner-references-merge-by-uid",
    ),
    pytest.param(
        {"spec": {"tolerations": [{"key": "k2", "operator": "Exists"}]}},
        "spec.tolerations",
        [{"key": "k2", "operator": "Exists"}],
        id="tolerations-replaced",
    ),
    pytest.param(
        {"metadata": {"labels": {"a": None, "c": "3"}}},
        "metadata.labels",
        {"b": "2", "c": "3"},
        id="null-removes-label",
    ),
    pytest.param(
        {"metadata": {"labels": {"$patch": "replace", "c": "3"}}},
        "metadata.labels",
        {"c": "3"},
        id="replace-directive-on-map",
    ),
    pytest.param(
        {"metadata": {"labels": {"$patch": "delete"}}}, "metadata.labels", {}, id="delete-directive-on-map"
    ),
    pytest.param(
        {
            "spec": {
                "volumes": [{"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]
            }
        },
        "spec.volumes",
        [{"name": "v", "hostPath": {"path": "/x"}}],
        id="retain-keys-swaps-volume-source",
    ),
    pytest.param(
        {"spec": {"volumes": [{"name": "v2", "configMap": {"name": "cm"}}]}},
        "spec.volumes",
        [{"name": "v2", "configMap": {"name": "cm"}}, {"name": "v", "emptyDir": {}}],
        id="add-volume",
    ),
    pytest.param(
        {"spec": {"dnsConfig": {"options": [{"name": "ndots", "value": None}]}}},
        "spec.dnsConfig",
        {"options": [{"name": "ndots"}]},
        id="nulls-in-new-values-dropped",
    ),
    pytest.param(
        {"spec": {"nodeSelector": {"x": "y", "$patch": "replace"}}},
        "spec",
        POD["spec"],
        id="directive-in-new-map-drops-it",
    ),
    pytest.param(
        {"spec": {"containers": [{"name": "a", "image": "z"}], "priority": 5}},
        "spec.priority",
        5,
        id="scalar-added",
    ),
]


def _select(result: dict[str, Any], path: str) -> Any:
    value = _dig_list(result, path)
    if path == "metadata.ownerReferences":
        return _names(value, "uid")
    return value


def _dig_list(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


@pytest.mark.parametrize(("patch", "path", "expected"), SMP_CASES)
def test_strategic_merge(patch: dict[str, Any], path: str, expected: Any) -> None:
    before = copy.deepcopy((POD, patch))
    result = apply_strategic_merge_patch(POD, patch, _pod_schema())
    assert _select(result, path) == expected
    assert (POD, patch) == before


@pytest.mark.parametrize(
    ("patch", "code", "message"),
    [
        pytest.param(
            {"spec": {"containers": [{"image": "x"}]}},
            500,
            "map: map[image:x] does not contain declared merge key: name",
            id="missing-merge-key",
        ),
        pytest.param(
            {"spec": {"containers": [{"name": "a", "$patch": "bogus"}]}},
            500,
            "unknown patch type: bogus in map: map[$patch:bogus name:a]",
            id="unknown-list-directive",
        ),
        pytest.param(
            {"metadata": {"labels": {"$patch": "bogus"}}},
            500,
            "unknown patch type: bogus in map: map[$patch:bogus]",
            id="unknown-map-directive",
        ),
        pytest.param(
            {"spec": {"containers": [{"name": "a", "$patch": "merge"}]}},
            500,
            "merging lists cannot yet be specified in the patch",
            id="merge-directive",
        ),
        pytest.param(
            {"spec": {"volumes": [{"name": "v", "$retainKeys": ["name"], "hostPath": {"path": "/x"}}]}},
            400,
            "invalid patch format of retainKeys",
            id="retain-keys-missing-a-patched-key",
        ),
        pytest.param(
            {"spec": {"volumes": [{"name": "v", "$retainKeys": "name"}]}},
            400,
            "invalid patch format of retainKeys",
            id="retain-keys-not-a-list",
        ),
        pytest.param(
            {"metadata": {"$deleteFromPrimitiveListfinalizers": ["x"]}},
            400,
            "invalid patch format of primitive list",
            id="primitive-list-without-slash",
        ),
        pytest.param(
            {"spec": {"$setElementOrderx": []}},
            400,
            "invalid patch format of setElementOrder list",
            id="set-order-without-slash",
        ),
        pytest.param(
            {"spec": {"$setElementOrder/containers": [{"name": "a"}], "containers": [{"name": "b"}]}},
            500,
            "the order in patch list:\n[map[name:b]]\n doesn't match $setElementOrder list:\n[map[name:a]]",
            id="set-order-mismatch",
        ),
        pytest.param(
            {"metadata": {"finalizers": [1]}},
            500,
            "list element types are not identical: [[x y] [1]]",
            id="mixed-element-types",
        ),
        pytest.param(
            {"metadata": {"finalizers": [["x"]]}},
            500,
            "list element types are not identical: [[x y] [[x]]]",
            id="list-after-strings",
        ),
        pytest.param(
            [{"op": "add"}],
            400,
            "json: cannot unmarshal array into Go value of type map[string]interface {}",
            id="not-an-object",
        ),
    ],
)
def test_strategic_merge_errors(patch: Any, code: int, message: str) -> None:
    with pytest.raises(ApiError) as err:
        apply_strategic_merge_patch(POD, patch, _pod_schema())
    assert (err.value.code, err.value.message) == (code, message)


def test_strategic_merge_list_of_lists_is_unprocessable() -> None:
    obj = {"metadata": {"finalizers": [["x"]]}}
    with pytest.raises(ApiError) as err:
        apply_strategic_merge_patch(obj, {"metadata": {"finalizers": [["y"]]}}, _pod_schema())
    assert (err.value.code, err.value.reason) == (422, "Invalid")
    assert err.value.details == {"causes": [{"message": "lists of lists are not supported"}]}


def test_strategic_merge_without_schema_replaces_lists_and_merges_maps() -> None:
    result = apply_strategic_merge_patch(
        POD, {"spec": {"containers": [{"name": "z"}]}, "metadata": {"x": 1}}, None
    )
    assert result["spec"]["containers"] == [{"name": "z"}]
    assert result["metadata"]["labels"] == POD["metadata"]["labels"]


def test_strategic_merge_strips_unknown_directives() -> None:
    result = apply_strategic_merge_patch(
        POD, {"metadata": {"$unknown": 1, "annotations": {"k": "v"}}}, _pod_schema()
    )
    assert "$unknown" not in result["metadata"]
    assert result["metadata"]["annotations"] == {"k": "v"}


# --- schemas and content types --------------------------------------------------------------------


def test_core_definitions_are_cached_and_no_newer_than_1_33() -> None:
    defs = load_core_definitions()
    assert defs is load_core_definitions()
    assert "io.k8s.api.core.v1.Pod" in defs["$defs"]
    # the DRA v1 (GA in 1.34) definitions must not be there
    assert "io.k8s.api.resource.v1.ResourceClaim" not in defs["$defs"]


@pytest.mark.parametrize(
    ("group", "version", "kind", "name"),
    [
        pytest.param("", "v1", "Pod", "io.k8s.api.core.v1.Pod", id="pod"),
        pytest.param("events.k8s.io", "v1", "Event", "io.k8s.api.events.v1.Event", id="events-k8s-io"),
        pytest.param("", "v1", "Event", "io.k8s.api.core.v1.Event", id="core-event"),
        pytest.param(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
            id="crd",
        ),
        pytest.param("kubevirt.io", "v1", "VirtualMachine", None, id="custom-kind"),
    ],
)
def test_schema_for_gvk(group: str, version: str, kind: str, name: str | None) -> None:
    schema = schema_for_gvk(load_core_definitions(), group, version, kind)
    assert (schema.name if schema else None) == name


@pytest.mark.parametrize(
    ("path", "strategies", "merge_key"),
    [
        pytest.param("spec.containers", ("merge",), "name", id="containers"),
        pytest.param("spec.volumes", ("merge", "retainKeys"), "name", id="volumes"),
        pytest.param("spec.tolerations", (), "", id="tolerations"),
        pytest.param("metadata.finalizers", ("merge",), "", id="finalizers"),
        pytest.param("spec.containers[].ports", ("merge",), "containerPort", id="ports"),
        pytest.param("spec.containers[].resources.claims", (), "", id="list-map-without-strategy"),
        pytest.param("metadata.labels.anything", (), "", id="map-values"),
    ],
)
def test_schema_lookup_navigation(path: str, strategies: tuple[str, ...], merge_key: str) -> None:
    node: SchemaLookup | None = _pod_schema()
    for part in path.split("."):
        assert node is not None
        node = node.field(part.removesuffix("[]"))
        if part.endswith("[]"):
            assert node is not None
            node = node.items()
    assert node is not None
    assert (node.patch_strategies, node.patch_merge_key) == (strategies, merge_key)


def test_schema_lookup_list_map_fallback() -> None:
    defs = load_core_definitions()
    requirements = SchemaLookup(
        {"$ref": "#/$defs/io.k8s.api.core.v1.ResourceRequirements"}, defs, list_map_fallback=True
    )
    claims = requirements.field("claims")
    assert claims is not None
    assert (claims.patch_strategies, claims.patch_merge_key) == (("merge",), "name")
    obj = {"claims": [{"name": "a"}, {"name": "b"}]}
    patched = apply_strategic_merge_patch(obj, {"claims": [{"name": "b", "request": "r"}]}, requirements)
    assert patched["claims"] == [{"name": "a"}, {"name": "b", "request": "r"}]
    assert apply_strategic_merge_patch(
        obj, {"claims": [{"name": "c"}]}, SchemaLookup(requirements.node, defs)
    )["claims"] == [{"name": "c"}]


@pytest.mark.parametrize(
    ("rt", "supported"),
    [
        pytest.param(_rt("", "v1", "pods"), True, id="pods"),
        pytest.param(_rt("apiextensions.k8s.io", "v1", "customresourcedefinitions"), True, id="crds"),
        pytest.param(_rt("kubevirt.io", "v1", "virtualmachines"), False, id="virtualmachines"),
        pytest.param(_rt("cdi.kubevirt.io", "v1beta1", "datavolumes"), False, id="datavolumes"),
    ],
)
def test_strategic_merge_supported(rt: ResourceType, supported: bool) -> None:
    assert strategic_merge_supported(rt) is supported
    assert ("application/strategic-merge-patch+json" in accepted_patch_types(rt)) is supported


def test_unsupported_patch_type_for_custom_resources() -> None:
    err = unsupported_patch_type(_rt("kubevirt.io", "v1", "virtualmachines"))
    assert (err.code, err.reason, err.message) == (
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
    )


# --- cross-check against kubectl ------------------------------------------------------------------


@pytest.mark.kubectl
@pytest.mark.parametrize(("patch", "path", "expected"), SMP_CASES)
def test_strategic_merge_matches_kubectl(
    tmp_path: Path, patch: dict[str, Any], path: str, expected: Any
) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(POD))
    done = subprocess.run(
        [
            kubectl,
            "patch",
            "--local",
            "-f",
            str(manifest),
            "--type",
            "strategic",
            "-p",
            json.dumps(patch),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        env={"KUBECONFIG": str(tmp_path / "none"), "PATH": str(Path(kubectl).parent)},
        check=True,
        timeout=60,
    )
    assert json.loads(done.stdout) == apply_strategic_merge_patch(POD, patch, _pod_schema())
