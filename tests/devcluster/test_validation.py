"""Object validation: strict/warn/ignore field validation, type and required errors, names, body decoding."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from gpuworkspace_devcluster import resources, validation
from gpuworkspace_devcluster.errors import ApiError

SHARED = validation.find_shared_schemas()
needs_shared = pytest.mark.skipif(
    SHARED is None,
    reason="../shared/schemas is absent: the KubeVirt/CDI/NetworkFence schemas are unavailable",
)

POD = resources.find("", "v1", "pods")
PVC = resources.find("", "v1", "persistentvolumeclaims")
SVC = resources.find("", "v1", "services")
NS = resources.find("", "v1", "namespaces")
ROLE = resources.find("rbac.authorization.k8s.io", "v1", "roles")
VM = resources.find("kubevirt.io", "v1", "virtualmachines")
DV = resources.find("cdi.kubevirt.io", "v1beta1", "datavolumes")
FENCE = resources.find("csiaddons.openshift.io", "v1alpha1", "networkfences")
VS = resources.find("snapshot.storage.k8s.io", "v1", "volumesnapshots")
VSCLASS = resources.find("snapshot.storage.k8s.io", "v1", "volumesnapshotclasses")
assert None not in (POD, PVC, SVC, NS, ROLE, VM, DV, FENCE, VS, VSCLASS)

SEED_PVC = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "home-alice", "namespace": "jhub", "labels": {"app": "jupyterhub"}},
    "spec": {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "ceph-rbd",
        "resources": {"requests": {"storage": "10Gi"}},
    },
}
SEED_SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "ws-alice", "namespace": "jhub"},
    "spec": {"selector": {"vm": "ws-alice"}, "ports": [{"name": "http", "port": 8888, "targetPort": "http"}]},
}
SEED_POD = {  # what KubeSpawner creates
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "jupyter-alice",
        "labels": {"component": "singleuser-server"},
        "annotations": {"a": "b"},
    },
    "spec": {
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": "notebook",
                "image": "quay.io/jupyter/base-notebook:latest",
                "args": ["jupyterhub-singleuser"],
                "env": [{"name": "JUPYTERHUB_API_TOKEN", "value": "x"}],
                "ports": [{"containerPort": 8888, "name": "notebook-port"}],
                "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "2Gi"}, "requests": {"cpu": 0.5}},
                "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": False},
                "volumeMounts": [{"mountPath": "/home/jovyan", "name": "home"}],
            }
        ],
        "restartPolicy": "OnFailure",
        "securityContext": {"fsGroup": 100},
        "tolerations": [{"key": "hub.jupyter.org/dedicated", "operator": "Equal", "value": "user"}],
        "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "home-alice"}}],
    },
}
SEED_DV = {
    "apiVersion": "cdi.kubevirt.io/v1beta1",
    "kind": "DataVolume",
    "metadata": {"name": "ws-alice-root", "namespace": "jhub"},
    "spec": {
        "sourceRef": {"kind": "DataSource", "name": "ubuntu-2404", "namespace": "os-images"},
        "storage": {
            "accessModes": ["ReadWriteMany"],
            "volumeMode": "Block",
            "resources": {"requests": {"storage": "40Gi"}},
        },
    },
}
SEED_VM = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachine",
    "metadata": {"name": "ws-alice", "namespace": "jhub", "labels": {"app": "gpuworkspace"}},
    "spec": {
        "runStrategy": "Halted",
        "template": {
            "metadata": {"labels": {"vm": "ws-alice"}},
            "spec": {
                "domain": {
                    "cpu": {"cores": 4},
                    "memory": {"guest": "16Gi"},
                    "devices": {
                        "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                        "gpus": [{"name": "gpu0", "deviceName": "nvidia.com/GH100_H100"}],
                        "interfaces": [{"name": "default", "masquerade": {}}],
                    },
                    "resources": {"requests": {"memory": "16Gi", "cpu": 4}},
                },
                "networks": [{"name": "default", "pod": {}}],
                "volumes": [{"name": "root", "dataVolume": {"name": "ws-alice-root"}}],
            },
        },
    },
}


def validate(rt: Any, obj: dict[str, Any], mode: str = "Strict", **kw: Any) -> list[str]:
    return validation.validate_object(rt, obj, field_validation=mode, **kw)


def error(rt: Any, obj: dict[str, Any], mode: str = "Strict", **kw: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        validate(rt, copy.deepcopy(obj), mode, **kw)
    return caught.value


@pytest.mark.parametrize(("rt", "obj"), [(PVC, SEED_PVC), (SVC, SEED_SERVICE), (POD, SEED_POD)])
def test_builtin_seeds_validate_cleanly(rt: Any, obj: dict[str, Any]) -> None:
    body = copy.deepcopy(obj)
    assert validate(rt, body) == []
    assert body == obj


@needs_shared
@pytest.mark.parametrize(("rt", "obj"), [(DV, SEED_DV), (VM, SEED_VM)])
def test_custom_seeds_validate_cleanly(rt: Any, obj: dict[str, Any]) -> None:
    body = copy.deepcopy(obj)
    assert validate(rt, body) == []
    assert body == obj


def test_strict_unknown_field_of_builtin_is_bad_request_naming_the_field() -> None:
    obj = copy.deepcopy(SEED_PVC)
    obj["spec"]["storageClasName"] = obj["spec"].pop("storageClassName")
    err = error(PVC, obj)
    assert (err.code, err.reason) == (400, "BadRequest")
    assert err.message == (
        'PersistentVolumeClaim in version "v1" cannot be handled as a PersistentVolumeClaim: '
        'strict decoding error: unknown field "spec.storageClasName"'
    )


@needs_shared
def test_strict_unknown_field_of_virtual_machine() -> None:
    obj = copy.deepcopy(SEED_VM)
    obj["spec"]["runStategy"] = obj["spec"].pop("runStrategy")
    err = error(VM, obj)
    assert err.code == 400
    assert err.message == (
        'VirtualMachine in version "v1" cannot be handled as a VirtualMachine: '
        'strict decoding error: unknown field "spec.runStategy"'
    )


def test_warn_returns_warnings_and_prunes_ignore_prunes_silently() -> None:
    obj = copy.deepcopy(SEED_POD)
    obj["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    obj["metadata"]["bogus"] = 1
    warned = copy.deepcopy(obj)
    assert validate(POD, warned, "Warn") == [
        'unknown field "metadata.bogus"',
        'unknown field "spec.containers[0].imagePullPolicyy"',
    ]
    assert warned == SEED_POD
    ignored = copy.deepcopy(obj)
    assert validate(POD, ignored, "Ignore") == []
    assert ignored == SEED_POD


def test_duplicate_and_unknown_fields_in_document_order() -> None:
    raw = (
        b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"dupe","name":"p","unknownMeta":"x"},'
        b'"spec":{"unknown1":1,"unknownDupe":1,"unknownDupe":2,"restartPolicy":"Never","restartPolicy":"Always",'
        b'"containers":[{"name":"c","image":"a","unknownNested":1,"image":"b"}]}}'
    )
    obj, dups = validation.loads_checking_duplicates(raw)
    assert dups == ["metadata.name", "spec.unknownDupe", "spec.restartPolicy", "spec.containers[0].image"]
    assert obj["metadata"]["name"] == "p"  # the last one wins
    err = error(POD, obj, duplicates=dups)
    assert err.message.endswith(
        'strict decoding error: duplicate field "metadata.name", unknown field "metadata.unknownMeta", '
        'unknown field "spec.unknown1", unknown field "spec.unknownDupe", duplicate field "spec.restartPolicy", '
        'unknown field "spec.containers[0].unknownNested", duplicate field "spec.containers[0].image"'
    )
    assert validate(POD, obj, "Warn", duplicates=dups)[0] == 'duplicate field "metadata.name"'


def test_yaml_duplicates_have_line_numbers_and_timestamps_stay_strings() -> None:
    raw = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: p\n  annotations:\n    t: 2024-01-01\n"
    obj, dups = validation.loads_yaml_checking_duplicates(raw)
    assert dups == ['line 5: key "name" already set in map']
    assert obj["metadata"] == {"name": "p", "annotations": {"t": "2024-01-01"}}
    assert (
        validate(POD, obj | {"spec": {"containers": [{"name": "c"}]}}, "Warn", yaml_duplicates=dups) == dups
    )
    err = error(POD, obj | {"spec": {"containers": [{"name": "c"}]}}, yaml_duplicates=dups)
    assert err.message.endswith(
        'strict decoding error: yaml: unmarshal errors:\n  line 5: key "name" already set in map'
    )


def test_malformed_json_is_bad_request() -> None:
    with pytest.raises(ApiError) as caught:
        validation.loads_checking_duplicates(b'{"a": ')
    assert caught.value.code == 400
    assert "unexpected end of JSON input" in caught.value.message


@pytest.mark.parametrize(
    ("patch", "detail"),
    [
        (
            {"ports": [{"containerPort": "80"}]},
            "json: cannot unmarshal string into Go struct field ContainerPort.spec.containers.ports.containerPort "
            "of type int32",
        ),
        ({"resources": {"requests": {"memory": "2GB"}}}, "quantities must match the regular expression"),
        ({"resources": {"requests": {"memory": "2K"}}}, "unable to parse quantity's suffix"),
        (
            {"args": "sleep"},
            "json: cannot unmarshal string into Go struct field Container.spec.containers.args of type []string",
        ),
    ],
)
def test_builtin_type_errors_are_go_decoding_errors(patch: dict[str, Any], detail: str) -> None:
    obj = copy.deepcopy(SEED_POD)
    obj["spec"]["containers"][0] |= patch
    err = error(POD, obj)
    assert (err.code, err.reason) == (400, "BadRequest")
    assert err.message.startswith('Pod in version "v1" cannot be handled as a Pod: ' + detail)


def test_builtin_label_of_wrong_type() -> None:
    obj = copy.deepcopy(SEED_POD)
    obj["metadata"]["labels"]["n"] = 1
    assert error(POD, obj).message.endswith(
        "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string"
    )


def test_builtin_required_field_is_invalid_with_cause() -> None:
    obj = copy.deepcopy(SEED_POD)
    del obj["spec"]["containers"][0]["name"]
    err = error(POD, obj)
    assert (err.code, err.reason) == (422, "Invalid")
    assert err.message == 'Pod "jupyter-alice" is invalid: spec.containers[0].name: Required value'
    assert err.details is not None
    assert err.details["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers[0].name"}
    ]
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"},
            "rules": [{"apiGroups": [""], "resources": ["pods"]}]}  # fmt: skip
    assert (
        error(ROLE, role).message
        == 'Role.rbac.authorization.k8s.io "r" is invalid: rules[0].verbs: Required value'
    )


def test_nulls_are_dropped() -> None:
    obj = copy.deepcopy(SEED_SERVICE)
    obj["spec"]["clusterIP"] = None
    assert validate(SVC, obj) == []
    assert "clusterIP" not in obj["spec"]


@needs_shared
def test_custom_type_and_required_errors_are_invalid() -> None:
    obj = copy.deepcopy(SEED_VM)
    obj["spec"]["template"]["spec"]["domain"]["cpu"]["cores"] = "two"
    del obj["spec"]["template"]["spec"]["domain"]["devices"]
    err = error(VM, obj)
    assert (err.code, err.reason) == (422, "Invalid")
    assert err.details is not None
    assert err.details["causes"] == [
        {
            "reason": "FieldValueTypeInvalid",
            "message": 'Invalid value: "string": spec.template.spec.domain.cpu.cores in body must be of type '
            'integer: "string"',
            "field": "spec.template.spec.domain.cpu.cores",
        },
        {
            "reason": "FieldValueRequired",
            "message": "Required value",
            "field": "spec.template.spec.domain.devices",
        },
    ]
    assert err.message.startswith(
        'VirtualMachine.kubevirt.io "ws-alice" is invalid: [spec.template.spec.domain.cpu'
    )


@needs_shared
def test_custom_quantity_pattern_and_misspelt_storage_field() -> None:
    obj = copy.deepcopy(SEED_DV)
    obj["spec"]["storage"]["resources"]["requests"]["storage"] = "40GB"
    err = error(DV, obj)
    assert err.code == 422
    assert err.details is not None
    assert err.details["causes"][0]["field"] == "spec.storage.resources.requests.storage"
    assert "in body should match" in err.details["causes"][0]["message"]
    obj = copy.deepcopy(SEED_DV)
    obj["spec"]["storage"]["storageClasName"] = "ceph"
    assert error(DV, obj).message.endswith(
        'strict decoding error: unknown field "spec.storage.storageClasName"'
    )


def test_volume_snapshot_class_enum_and_snapshot_source() -> None:
    cls = {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass", "metadata": {"name": "c"},
           "driver": "rbd.csi.ceph.com", "deletionPolicy": "Keep"}  # fmt: skip
    err = error(VSCLASS, cls)
    assert err.message == (
        'VolumeSnapshotClass.snapshot.storage.k8s.io "c" is invalid: deletionPolicy: Unsupported value: "Keep": '
        'supported values: "Delete", "Retain"'
    )
    snap = {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot", "metadata": {"name": "s"},
            "spec": {"source": {"persistentVolumeClaimName": "home-alice"}, "volumeSnapshotClassName": "c"}}  # fmt: skip
    assert validate(VS, snap) == []
    snap["spec"]["source"] = {}
    assert error(VS, snap).code == 422


@needs_shared
def test_crd_defaults_are_applied() -> None:
    fence = {"apiVersion": "csiaddons.openshift.io/v1alpha1", "kind": "NetworkFence", "metadata": {"name": "f"},
             "spec": {"driver": "rbd.csi.ceph.com", "cidrs": ["10.0.0.1/32"], "parameters": {"clusterID": "c"},
                      "secret": {"name": "s", "namespace": "ns"}}}  # fmt: skip
    assert validate(FENCE, fence) == []
    assert fence["spec"]["fenceState"] == "Fenced"


def test_custom_kinds_without_schemas_are_accepted_with_a_logged_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bare = validation.SchemaSet(None, auto=False)
    assert bare.custom_schema(VM) is None
    assert bare.for_type(VM) is None
    obj = copy.deepcopy(SEED_VM) | {"anything": {"goes": True}}
    with caplog.at_level(logging.WARNING, logger="gpuworkspace_devcluster.validation"):
        assert validate(VM, obj, schemas=bare) == []
    assert obj["anything"] == {"goes": True}
    # built-ins are still checked
    assert error(PVC, SEED_PVC | {"bogus": 1}, schemas=bare).code == 400


def test_find_shared_schemas_honours_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("GPUWORKSPACE_SHARED_SCHEMAS", str(tmp_path / "missing"))
    assert validation.find_shared_schemas() is None
    monkeypatch.setenv("GPUWORKSPACE_SHARED_SCHEMAS", str(tmp_path))
    assert validation.find_shared_schemas() == tmp_path


def test_for_type_is_self_contained() -> None:
    schemas = validation.default_schema_set()
    for rt in resources.RESOURCE_TYPES:
        schema = schemas.for_type(rt)
        if schema is None:
            assert rt.custom and SHARED is None
            continue
        refs: list[str] = []

        def collect(node: Any, refs: list[str] = refs) -> None:
            if isinstance(node, dict):
                refs.extend([node["$ref"]] if isinstance(node.get("$ref"), str) else [])
                for value in node.values():
                    collect(value)
            elif isinstance(node, list):
                for value in node:
                    collect(value)

        collect({k: v for k, v in schema.items() if k != "definitions"})
        for ref in refs:
            assert (
                ref.startswith("#/definitions/")
                and ref.removeprefix("#/definitions/") in schema["definitions"]
            )


def test_check_field_validation() -> None:
    assert validation.check_field_validation(None) == "Warn"
    assert validation.check_field_validation("Strict") == "Strict"
    with pytest.raises(ApiError) as caught:
        validation.check_field_validation("strict")
    assert caught.value.message == (
        'CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "strict": '
        'supported values: "", "Ignore", "Strict", "Warn"'
    )


@pytest.mark.parametrize(
    ("rt", "name", "message"),
    [
        (
            POD,
            "Bad_Name",
            'Pod "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain '
            "must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ),
        (
            NS,
            "Team_A",
            'Namespace "Team_A" is invalid: metadata.name: Invalid value: "Team_A": a lowercase RFC 1123 label '
            "must consist of lower case alphanumeric characters or '-', and must start and end with an "
            "alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        ),
        (
            NS,
            "team.a",
            'Namespace "team.a" is invalid: metadata.name: Invalid value: "team.a": must not contain dots',
        ),
        (
            SVC,
            "1svc",
            'Service "1svc" is invalid: metadata.name: Invalid value: "1svc": a DNS-1035 label must consist of '
            "lower case alphanumeric characters or '-', start with an alphabetic character, and end with an "
            "alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
            "'[a-z]([-a-z0-9]*[a-z0-9])?')",
        ),
        (
            ROLE,
            "a/b",
            'Role.rbac.authorization.k8s.io "a/b" is invalid: metadata.name: Invalid value: "a/b": may not contain \'/\'',
        ),
        (
            PVC,
            "",
            'PersistentVolumeClaim "" is invalid: metadata.name: Required value: name or generateName is required',
        ),
    ],
)
def test_validate_name_wording(rt: Any, name: str, message: str) -> None:
    with pytest.raises(ApiError) as caught:
        validation.validate_name(rt, name)
    assert (caught.value.code, caught.value.message) == (422, message)


def test_validate_name_accepts_valid_names() -> None:
    validation.validate_name(POD, "jupyter-alice.v2")
    validation.validate_name(ROLE, "system:controller:x")
    validation.validate_name(NS, "a" * 63)
    with pytest.raises(ApiError, match="must be no more than 63 characters"):
        validation.validate_name(NS, "a" * 64)


def test_apply_unknown_fields_error() -> None:
    err = validation.apply_unknown_fields_error(VM, "jhub", "ws", ["spec.runStategy"])
    assert err.code == 500
    assert err.message == (
        "failed to create typed patch object (jhub/ws; kubevirt.io/v1, Kind=VirtualMachine): "
        ".spec.runStategy: field not declared in schema"
    )
