"""CustomResourceDefinitions of the custom kinds the devcluster serves, as their operators install them.

Also the helpers that turn a Swagger definition (KubeVirt, CDI) into the inlined structural schema a CRD
carries, the hand-written VolumeSnapshot schemas (no schema file exists for them) and each kind's real
``additionalPrinterColumns``.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from .resources import RESOURCE_TYPES, ResourceType

if TYPE_CHECKING:
    from .openapi import SchemaSet

Schema = dict[str, Any]

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTP]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# (group, kind) -> (file in the shared schemas folder, swagger definition or None for a CRD file)
CUSTOM_SOURCES: dict[tuple[str, str], tuple[str, str | None]] = {
    ("kubevirt.io", "VirtualMachine"): ("kubevirt-swagger.json", "v1.VirtualMachine"),
    ("kubevirt.io", "VirtualMachineInstance"): ("kubevirt-swagger.json", "v1.VirtualMachineInstance"),
    ("cdi.kubevirt.io", "DataVolume"): ("cdi-swagger.json", "v1beta1.DataVolume"),
    ("cdi.kubevirt.io", "DataSource"): ("cdi-swagger.json", "v1beta1.DataSource"),
    ("csiaddons.openshift.io", "NetworkFence"): ("csiaddons-networkfences.crd.yaml", None),
    **{
        ("kueue.x-k8s.io", kind): (f"kueue/kueue.x-k8s.io_{plural}.yaml", None)
        for kind, plural in (
            ("ResourceFlavor", "resourceflavors"),
            ("ClusterQueue", "clusterqueues"),
            ("LocalQueue", "localqueues"),
            ("WorkloadPriorityClass", "workloadpriorityclasses"),
            ("Workload", "workloads"),
        )
    },
}
# keys a CRD's JSONSchemaProps accepts (anything else is dropped when a CRD is stored)
_CRD_KEYS = frozenset(
    ["description", "type", "format", "title", "default", "maximum", "exclusiveMaximum", "minimum",
     "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "multipleOf",
     "enum", "maxProperties", "minProperties", "required", "items", "allOf", "oneOf", "anyOf", "not", "properties",
     "additionalProperties", "nullable", "example", "externalDocs", "x-kubernetes-preserve-unknown-fields",
     "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string", "x-kubernetes-list-map-keys",
     "x-kubernetes-list-type", "x-kubernetes-map-type", "x-kubernetes-validations"]
)  # fmt: skip
_INT_OR_STRING: Schema = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
}


def crd_form(node: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    """Inline a Swagger definition into a structural CRD schema (refs resolved, generator defaults dropped)."""
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _crd_ref(node, defs, depth)
    out: Schema = {}
    for key, value in node.items():
        if key not in _CRD_KEYS or (key == "default" and value in ({}, "", [])):
            continue
        if key == "properties":
            out[key] = {p: crd_form(s, defs, depth + 1) for p, s in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = crd_form(value, defs, depth + 1)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [crd_form(s, defs, depth + 1) for s in value]
        else:
            out[key] = copy.deepcopy(value)
    if isinstance(out.get("type"), list):  # the swagger files' Quantity: ["string", "integer", "number"]
        out.pop("type")
    return out


def _crd_ref(node: Schema, defs: dict[str, Any], depth: int) -> Any:
    """A ``$ref`` as controller-gen renders it: known apimachinery types by their CRD idiom, others inlined."""
    name = node["$ref"].rsplit("/", 1)[-1]
    desc = {"description": node["description"]} if "description" in node else {}
    special = {
        "resource.Quantity": _INT_OR_STRING | {"pattern": QUANTITY_PATTERN},
        "intstr.IntOrString": _INT_OR_STRING,
        "runtime.RawExtension": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }
    for suffix, schema in special.items():
        if name.endswith(suffix):
            return schema | desc
    if name.endswith(".ObjectMeta") and depth > 0:  # template metadata is free-form in these CRDs
        return {"type": "object", "nullable": True, "x-kubernetes-preserve-unknown-fields": True}
    return crd_form(defs[name] | {k: v for k, v in node.items() if k != "$ref"}, defs, depth + 1)


_META: Schema = {
    "apiVersion": {
        "type": "string",
        "description": "APIVersion defines the versioned schema of this representation of an object.",
    },
    "kind": {
        "type": "string",
        "description": "Kind is a string value representing the REST resource this object represents.",
    },
    "metadata": {"type": "object"},
}
# external-snapshotter's CRDs (client/config/crd), v1, without the CEL rules
_VOLUME_SNAPSHOT: Schema = {
    "description": "VolumeSnapshot is a user's request for either creating a point-in-time snapshot of a "
    "persistent volume, or binding to a pre-existing snapshot.",
    "type": "object",
    "required": ["spec"],
    "properties": _META
    | {
        "spec": {
            "description": "spec defines the desired characteristics of a snapshot requested by a user.",
            "type": "object",
            "required": ["source"],
            "properties": {
                "source": {
                    "description": "source specifies where a snapshot will be created from. "
                    "This field is immutable after creation. Required.",
                    "type": "object",
                    "oneOf": [
                        {"required": ["persistentVolumeClaimName"]},
                        {"required": ["volumeSnapshotContentName"]},
                    ],
                    "properties": {
                        "persistentVolumeClaimName": {
                            "type": "string",
                            "description": "persistentVolumeClaimName "
                            "specifies the name of the PersistentVolumeClaim object "
                            "representing the volume from which a snapshot should be "
                            "created.",
                        },
                        "volumeSnapshotContentName": {
                            "type": "string",
                            "description": "volumeSnapshotContentName "
                            "specifies the name of a pre-existing VolumeSnapshotContent "
                            "object representing an existing volume snapshot.",
                        },
                    },
                },
                "volumeSnapshotClassName": {
                    "type": "string",
                    "description": "VolumeSnapshotClassName is the "
                    "name of the VolumeSnapshotClass requested by the VolumeSnapshot.",
                },
            },
        },
        "status": {
            "description": "status represents the current information of a snapshot.",
            "type": "object",
            "properties": {
                "boundVolumeSnapshotContentName": {"type": "string"},
                "creationTime": {"type": "string", "format": "date-time"},
                "error": {
                    "type": "object",
                    "properties": {
                        "message": {"type": "string"},
                        "time": {"type": "string", "format": "date-time"},
                    },
                },
                "readyToUse": {"type": "boolean"},
                "restoreSize": _INT_OR_STRING | {"pattern": QUANTITY_PATTERN},
                "volumeGroupSnapshotName": {"type": "string"},
            },
        },
    },
}
_VOLUME_SNAPSHOT_CLASS: Schema = {
    "description": "VolumeSnapshotClass specifies parameters that a underlying storage system uses when "
    "creating a volume snapshot.",
    "type": "object",
    "required": ["deletionPolicy", "driver"],
    "properties": _META
    | {
        "deletionPolicy": {
            "type": "string",
            "enum": ["Delete", "Retain"],
            "description": "deletionPolicy "
            "determines whether a VolumeSnapshotContent created through the VolumeSnapshotClass "
            "should be deleted when its bound VolumeSnapshot is deleted.",
        },
        "driver": {
            "type": "string",
            "description": "driver is the name of the storage driver that handles "
            "this VolumeSnapshotClass. Required.",
        },
        "parameters": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "parameters "
            "is a key-value map with storage driver specific parameters for creating snapshots.",
        },
    },
}
_HANDWRITTEN: dict[tuple[str, str], Schema] = {
    ("snapshot.storage.k8s.io", "VolumeSnapshot"): _VOLUME_SNAPSHOT,
    ("snapshot.storage.k8s.io", "VolumeSnapshotClass"): _VOLUME_SNAPSHOT_CLASS,
}


def handwritten_schema(group: str, kind: str) -> Schema | None:
    return _HANDWRITTEN.get((group, kind))


def _col(name: str, type_: str, path: str, description: str = "", priority: int = 0) -> dict[str, Any]:
    col: dict[str, Any] = {"jsonPath": path, "name": name, "type": type_}
    if description:
        col["description"] = description
    if priority:
        col["priority"] = priority
    return col


_AGE = _col("Age", "date", ".metadata.creationTimestamp")
_READY = ".status.conditions[?(@.type=='Ready')].status"
# kubevirt pkg/virt-operator/resource/generate/components/crds.go; CDI api types' kubebuilder markers;
# the NetworkFence CRD file; external-snapshotter's CRDs
_PRINTER_COLUMNS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("kubevirt.io", "VirtualMachine"): [
        _AGE,
        _col("Status", "string", ".status.printableStatus", "Human Readable Status"),
        _col("Ready", "string", _READY),
    ],
    ("kubevirt.io", "VirtualMachineInstance"): [
        _AGE,
        _col("Phase", "string", ".status.phase"),
        _col("IP", "string", ".status.interfaces[0].ipAddress"),
        _col("NodeName", "string", ".status.nodeName"),
        _col("Ready", "string", _READY),
        _col(
            "Live-Migratable", "string", ".status.conditions[?(@.type=='LiveMigratable')].status", priority=1
        ),
        _col("Paused", "string", ".status.conditions[?(@.type=='Paused')].status", priority=1),
    ],
    ("cdi.kubevirt.io", "DataVolume"): [
        _col("Phase", "string", ".status.phase", "The phase the data volume is in"),
        _col(
            "Progress",
            "string",
            ".status.progress",
            "Transfer progress in percentage if known, N/A otherwise",
        ),
        _col(
            "Restarts",
            "integer",
            ".status.restartCount",
            "The number of times the transfer has been restarted.",
        ),
        _AGE,
    ],
    ("cdi.kubevirt.io", "DataSource"): [],
    ("csiaddons.openshift.io", "NetworkFence"): [
        _col("Driver", "string", ".spec.driver"),
        _col("Cidrs", "string", ".spec.cidrs"),
        _col("FenceState", "string", ".spec.fenceState"),
        _AGE,
        _col("Result", "string", ".status.result"),
    ],
    ("snapshot.storage.k8s.io", "VolumeSnapshot"): [
        _col(
            "ReadyToUse",
            "boolean",
            ".status.readyToUse",
            "Indicates if the snapshot is ready to be used to restore a volume.",
        ),
        _col(
            "SourcePVC",
            "string",
            ".spec.source.persistentVolumeClaimName",
            "If a new snapshot needs to be created, this contains the name of the source PVC from which this "
            "snapshot was (or will be) created.",
        ),
        _col(
            "SourceSnapshotContent",
            "string",
            ".spec.source.volumeSnapshotContentName",
            "If a snapshot already exists, this contains the name of the existing VolumeSnapshotContent object "
            "representing the existing snapshot.",
        ),
        _col(
            "RestoreSize",
            "string",
            ".status.restoreSize",
            "Represents the minimum size of volume required to rehydrate from this snapshot.",
        ),
        _col(
            "SnapshotClass",
            "string",
            ".spec.volumeSnapshotClassName",
            "The name of the VolumeSnapshotClass requested by the VolumeSnapshot.",
        ),
        _col(
            "SnapshotContent",
            "string",
            ".status.boundVolumeSnapshotContentName",
            "Name of the VolumeSnapshotContent object to which the VolumeSnapshot object intends to bind to.",
        ),
        _col(
            "CreationTime",
            "date",
            ".status.creationTime",
            "Timestamp when the point-in-time snapshot was taken by the underlying storage system.",
        ),
        _AGE,
    ],
    # Kueue config/components/crd/bases/kueue.x-k8s.io_*.yaml, version v1beta2
    ("kueue.x-k8s.io", "ClusterQueue"): [
        _col("Cohort", "string", ".spec.cohortName", "Cohort that this ClusterQueue belongs to"),
        _col(
            "Strategy",
            "string",
            ".spec.queueingStrategy",
            "The queueing strategy used to prioritize workloads",
            priority=1,
        ),
        _col("Pending Workloads", "integer", ".status.pendingWorkloads", "Number of pending workloads"),
        _col(
            "Admitted Workloads",
            "integer",
            ".status.admittedWorkloads",
            "Number of admitted workloads that haven't finished yet",
            priority=1,
        ),
    ],
    ("kueue.x-k8s.io", "LocalQueue"): [
        _col("ClusterQueue", "string", ".spec.clusterQueue", "Backing ClusterQueue"),
        _col("Pending Workloads", "integer", ".status.pendingWorkloads", "Number of pending workloads"),
        _col(
            "Admitted Workloads",
            "integer",
            ".status.admittedWorkloads",
            "Number of admitted workloads that haven't finished yet.",
        ),
    ],
    ("kueue.x-k8s.io", "WorkloadPriorityClass"): [
        _col("Value", "integer", ".value", "Value of workloadPriorityClass's Priority"),
    ],
    ("kueue.x-k8s.io", "Workload"): [
        _col("Queue", "string", ".spec.queueName", "Name of the queue this workload was submitted to"),
        _col(
            "Reserved in",
            "string",
            ".status.admission.clusterQueue",
            "Name of the ClusterQueue where the workload is reserving quota",
        ),
        _col("Admitted", "string", ".status.conditions[?(@.type=='Admitted')].status", "Admission status"),
        _col("Finished", "string", ".status.conditions[?(@.type=='Finished')].status", "Workload finished"),
        _col("Age", "date", ".metadata.creationTimestamp", "Time this workload was created"),
    ],
    ("snapshot.storage.k8s.io", "VolumeSnapshotClass"): [
        _col("Driver", "string", ".driver"),
        _col(
            "DeletionPolicy",
            "string",
            ".deletionPolicy",
            "Determines whether a VolumeSnapshotContent created through the VolumeSnapshotClass should be "
            "deleted when its bound VolumeSnapshot is deleted.",
        ),
        _AGE,
    ],
}
_CRD_META: dict[str, dict[str, dict[str, str]]] = {
    "kubevirt.io": {"labels": {"app.kubernetes.io/component": "kubevirt", "kubevirt.io": ""}},
    "cdi.kubevirt.io": {"labels": {"cdi.kubevirt.io": ""}},
    "snapshot.storage.k8s.io": {
        "annotations": {
            "api-approved.kubernetes.io": "https://github.com/kubernetes-csi/external-snapshotter/pull/814"
        }
    },
    "csiaddons.openshift.io": {"annotations": {"controller-gen.kubebuilder.io/version": "v0.20.1"}},
}


def printer_columns(rt: ResourceType) -> list[dict[str, Any]]:
    """The table columns after NAME for a custom kind (a CRD without columns gets Age); [] for built-ins."""
    if not rt.custom:
        return []
    return copy.deepcopy(_PRINTER_COLUMNS.get((rt.group, rt.kind)) or [_AGE])


def _names(rt: ResourceType) -> dict[str, Any]:
    names: dict[str, Any] = {
        "kind": rt.kind,
        "listKind": rt.list_kind,
        "plural": rt.plural,
        "singular": rt.singular_name,
    }
    if rt.short_names:
        names["shortNames"] = list(rt.short_names)
    if rt.categories:
        names["categories"] = list(rt.categories)
    return names


def crd_for(rt: ResourceType, schemas: SchemaSet, timestamp: str = "2025-01-01T00:00:00Z") -> dict[str, Any]:
    """The CustomResourceDefinition declaring ``rt`` (metadata without uid/resourceVersion: the store adds them)."""
    schema = schemas.custom_schema(rt)
    version: dict[str, Any] = {
        "name": rt.version,
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": copy.deepcopy(schema)
            if schema is not None
            else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        },
    }
    if rt.subresources:
        version["subresources"] = {"status": {}} if "status" in rt.subresources else {}
    if _PRINTER_COLUMNS.get((rt.group, rt.kind)):
        version["additionalPrinterColumns"] = copy.deepcopy(_PRINTER_COLUMNS[(rt.group, rt.kind)])
    names = _names(rt)
    condition = {"lastTransitionTime": timestamp, "status": "True"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{rt.plural}.{rt.group}",
            "generation": 1,
            **copy.deepcopy(_CRD_META.get(rt.group, {})),
        },
        "spec": {
            "conversion": {"strategy": "None"},
            "group": rt.group,
            "names": names,
            "scope": "Namespaced" if rt.namespaced else "Cluster",
            "versions": [version],
        },
        "status": {
            "acceptedNames": copy.deepcopy(names),
            "conditions": [
                condition
                | {"message": "no conflicts found", "reason": "NoConflicts", "type": "NamesAccepted"},
                condition
                | {
                    "message": "the initial names have been accepted",
                    "reason": "InitialNamesAccepted",
                    "type": "Established",
                },
            ],
            "storedVersions": [rt.version],
        },
    }


def builtin_crds(
    schemas: SchemaSet | None = None, timestamp: str = "2025-01-01T00:00:00Z"
) -> list[dict[str, Any]]:
    """A CustomResourceDefinition for every ``custom=True`` kind in :data:`RESOURCE_TYPES`."""
    if schemas is None:
        from .openapi import default_schema_set  # noqa: PLC0415 - openapi imports this module

        schemas = default_schema_set()
    return [crd_for(rt, schemas, timestamp) for rt in RESOURCE_TYPES if rt.custom]
