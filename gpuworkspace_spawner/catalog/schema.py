"""JSON Schema (draft 2020-12) for the WorkspaceProfile and WorkspaceCatalog documents.

The schema checks shape: field names, types, enums and formats. Rules that relate fields to each
other (GPU mode against GPU resources, request against limit, unique mount paths) live in
``checks.py``, where the messages can say what to do.

``errorMessage`` is our own annotation keyword (draft 2020-12 ignores unknown keywords): when a value
fails a subschema that carries one, the loader reports it instead of the validator's wording, with
``{value}`` replaced by the offending value.
"""

from __future__ import annotations

from typing import Any

from .model import API_VERSION, CATALOG_KIND, GPU_MODES, IDES, PROFILE_KIND
from .units import DNS_LABEL_PATTERN, DURATION_PATTERN, MIG_RESOURCE_PATTERN, QUANTITY_PATTERN

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID_BASE = "https://gpuworkspace.dev/schemas/v1alpha1"

LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
LABEL_KEY_PATTERN = r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"


def _string(max_length: int = 253, *, min_length: int = 1) -> dict[str, Any]:
    return {"type": "string", "minLength": min_length, "maxLength": max_length}


def _obj(properties: dict[str, Any], *, required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


DNS_LABEL: dict[str, Any] = {
    "type": "string",
    "pattern": DNS_LABEL_PATTERN,
    "errorMessage": "{value} is not a DNS-1123 label (lower-case letters, digits and '-', at most 63)",
}
QUANTITY: dict[str, Any] = {
    "type": ["string", "integer", "number"],
    "pattern": QUANTITY_PATTERN,
    "minimum": 0,
    "errorMessage": "{value} is not a Kubernetes quantity (like 500m, 4, 64Gi)",
}
DURATION: dict[str, Any] = {
    "type": "string",
    "pattern": DURATION_PATTERN,
    "errorMessage": "{value} is not a duration like 90m, 12h, 1h30m, 45s or 2d",
}
MOUNT_PATH: dict[str, Any] = {
    "type": "string",
    "pattern": r"^/",
    "maxLength": 1024,
    "errorMessage": "{value} is not an absolute path",
}
SUB_PATH: dict[str, Any] = _string(1024)
CLAIM_NAME: dict[str, Any] = {
    "type": "string",
    "pattern": DNS_SUBDOMAIN_PATTERN,
    "errorMessage": "{value} is not a PersistentVolumeClaim name",
}
RESOURCE_MAP: dict[str, Any] = {
    "type": "object",
    "properties": {
        name: QUANTITY
        for name in ("cpu", "memory", "ephemeral-storage", "nvidia.com/gpu", "nvidia.com/gpu.shared")
    },
    "patternProperties": {MIG_RESOURCE_PATTERN: QUANTITY},
    "additionalProperties": False,
}
TOLERATION: dict[str, Any] = _obj(
    {
        "key": _string(316, min_length=0),
        "operator": {"enum": ["Exists", "Equal"]},
        "value": _string(63, min_length=0),
        "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
        "tolerationSeconds": {"type": "integer"},
    }
)
NODE_POOL: dict[str, Any] = _obj(
    {
        "nodeSelector": {
            "type": "object",
            "propertyNames": {"pattern": LABEL_KEY_PATTERN},
            "additionalProperties": {
                "type": "string",
                "pattern": LABEL_VALUE_PATTERN,
                "errorMessage": "{value} is not a Kubernetes label value (quote numbers and booleans)",
            },
        },
        "tolerations": {"type": "array", "items": TOLERATION, "maxItems": 32},
    }
)
SHARED_MOUNT: dict[str, Any] = _obj(
    {
        "claimName": CLAIM_NAME,
        "subPath": SUB_PATH,
        "mountPath": MOUNT_PATH,
        "readOnly": {
            "const": True,
            "errorMessage": "shared data is always mounted read-only; remove readOnly or set it to true",
        },
    },
    required=("claimName",),
)
TEAM_DIRECTORY: dict[str, Any] = _obj(
    {
        "name": DNS_LABEL,
        "claimName": CLAIM_NAME,
        "subPath": SUB_PATH,
        "mountPath": MOUNT_PATH,
        "readOnly": {"type": "boolean"},
    },
    required=("name", "claimName", "mountPath"),
)
# Issue 16: where /checkpoints points (manifests/conventions.py): a team CephFS directory of
# teamDirectories, or an object-store prefix; catalog/checkpoints.py checks the rest.
CHECKPOINTS: dict[str, Any] = _obj(
    {
        "teamDirectory": DNS_LABEL,
        "subPath": SUB_PATH,
        "objectStore": _obj(
            {
                "url": {
                    "type": "string",
                    "maxLength": 1024,
                    "pattern": r"^(s3|gs|az)://[a-z0-9][-a-z0-9._]*(/[^\s]*)?$",
                    "errorMessage": "{value} is not an object-store prefix: write s3://bucket/prefix/ "
                    "(or gs://, az://)",
                },
                "endpoint": {
                    "type": "string",
                    "maxLength": 1024,
                    "pattern": r"^https?://[^\s/]+(/[^\s]*)?$",
                    "errorMessage": "{value} is not an http(s) endpoint URL",
                },
            },
            required=("url",),
        ),
    }
)
STORAGE: dict[str, Any] = _obj(
    {
        "home": _obj(
            {
                "class": {"type": "string", "pattern": DNS_SUBDOMAIN_PATTERN},
                "size": QUANTITY,
                "mountPath": MOUNT_PATH,
                "accessMode": {"enum": ["ReadWriteOnce", "ReadWriteOncePod"]},
                "maxSize": QUANTITY,
                "snapshots": _obj(
                    {"every": DURATION, "keep": {"type": "integer", "minimum": 1, "maximum": 100}},
                    required=("every", "keep"),
                ),
                "retention": _obj(
                    {
                        "days": {"type": ["integer", "number"], "minimum": 0, "maximum": 3650},
                        "keepOnDelete": {"type": "boolean"},
                    }
                ),
            }
        ),
        "scratch": _obj(
            {"type": {"const": "LocalEphemeral"}, "sizeLimit": QUANTITY, "mountPath": MOUNT_PATH}
        ),
        "shm": _obj({"sizeLimit": QUANTITY}),
        "datasets": SHARED_MOUNT,
        "models": SHARED_MOUNT,
        "teamDirectories": {"type": "array", "items": TEAM_DIRECTORY, "maxItems": 32},
        "checkpoints": CHECKPOINTS,
    }
)
IDE: dict[str, Any] = {
    "oneOf": [
        {"enum": list(IDES)},
        _obj(
            {
                "default": {"enum": list(IDES)},
                "choices": {
                    "type": "array",
                    "items": {"enum": list(IDES)},
                    "minItems": 1,
                    "uniqueItems": True,
                },
            }
        ),
    ],
    "errorMessage": "{value} is not an editor: use code-server or jupyterlab, or {default: ..., choices: [...]}",
}
EDITORS: dict[str, Any] = {
    "type": "array",
    "items": {"enum": list(IDES), "errorMessage": "{value} is not an editor: use code-server or jupyterlab"},
    "minItems": 1,
    "uniqueItems": True,
}
IMAGE_REFERENCE: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 512,
    "pattern": r"^\S+$",
    "errorMessage": "{value} is not an image reference (repo@sha256:<digest>)",
}
# the short form declares JupyterLab only; the long form lists what the image contains (catalog/editors.py)
IMAGE: dict[str, Any] = {
    "oneOf": [
        IMAGE_REFERENCE,
        _obj({"reference": IMAGE_REFERENCE, "editors": EDITORS}, required=("reference", "editors")),
    ],
    "errorMessage": "{value} is not an image: use repo@sha256:<digest>, or {reference: ..., editors: [...]}",
}
NAMES: dict[str, Any] = {"type": "array", "items": _string(256), "uniqueItems": True, "maxItems": 1000}
COUNT: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": 1024}
DEVICE_NAME: dict[str, Any] = {
    "type": "string",
    "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
    "maxLength": 253,
    "errorMessage": "{value} is not a device resource name (like nvidia.com/GH100_H100_SXM5_80GB)",
}
VM: dict[str, Any] = _obj(
    {
        "dataSource": _obj(
            {"name": DNS_LABEL, "namespace": DNS_LABEL, "editors": EDITORS}, required=("name", "namespace")
        ),
        "rootDisk": _obj(
            {
                "size": QUANTITY,
                "class": {"type": "string", "pattern": DNS_SUBDOMAIN_PATTERN},
                "maxSize": QUANTITY,
            }
        ),
        "cpu": _obj({"cores": COUNT, "sockets": COUNT, "threads": COUNT}, required=("cores",)),
        "memory": _obj({"guest": QUANTITY}, required=("guest",)),
        "gpus": {
            "type": "array",
            "items": _obj({"name": DNS_LABEL, "deviceName": DEVICE_NAME}, required=("name", "deviceName")),
            "maxItems": 16,
        },
    },
    required=("dataSource", "cpu", "memory"),
)
CIDR: dict[str, Any] = _string(43)  # parsed in network.py, whose messages say what is wrong
CIDRS: dict[str, Any] = {"type": "array", "items": CIDR, "maxItems": 64}
PORT_NUMBER: dict[str, Any] = {
    "type": "integer",
    "minimum": 1,
    "maximum": 65535,
    "errorMessage": "{value} is not a port number (1 to 65535)",
}
NETWORK_PORT: dict[str, Any] = {
    "oneOf": [
        PORT_NUMBER,
        _obj(
            {"port": PORT_NUMBER, "endPort": PORT_NUMBER, "protocol": {"enum": ["TCP", "UDP", "SCTP"]}},
            required=("port",),
        ),
    ],
    "errorMessage": "{value} is not a port: use 443, or {port: 30000, endPort: 32767, protocol: TCP}",
}
EGRESS_ALLOW: dict[str, Any] = _obj(
    {
        "cidrs": {**CIDRS, "minItems": 1},
        "except": CIDRS,
        "ports": {"type": "array", "items": NETWORK_PORT, "minItems": 1, "maxItems": 32},
    },
    required=("cidrs", "ports"),
)
NETWORK: dict[str, Any] = _obj(
    {
        "blockedCidrs": CIDRS,
        "profiles": {
            "type": "object",
            "propertyNames": {"pattern": DNS_LABEL_PATTERN},
            "additionalProperties": _obj(
                {
                    "description": _string(2000, min_length=0),
                    "egress": {"type": "array", "items": EGRESS_ALLOW, "maxItems": 32},
                }
            ),
        },
    },
    required=("blockedCidrs",),
)
NON_NEGATIVE_ID: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": 2147483647}
NOT_ROOT = "{value}: workspaces never run as root (uid 0); use an integer uid of 1 or more"

PROFILE_SPEC: dict[str, Any] = _obj(
    {
        "displayName": _string(100),
        "description": _string(2000, min_length=0),
        "runtime": {"enum": ["container", "vm"]},
        "image": IMAGE,
        "resources": _obj({"requests": RESOURCE_MAP, "limits": RESOURCE_MAP}),
        "placement": _obj(
            {
                "nodePool": DNS_LABEL,
                "gpuMode": {"enum": list(GPU_MODES)},
                "runtimeClassName": {"type": "string", "pattern": DNS_SUBDOMAIN_PATTERN},
            }
        ),
        "storage": STORAGE,
        "session": _obj(
            {
                "idleTimeout": DURATION,
                "maxDuration": DURATION,
                "warnings": {"type": "array", "items": DURATION, "maxItems": 10},
            }
        ),
        "security": _obj(
            {
                "serviceAccountToken": {"type": "boolean"},
                "networkProfile": DNS_LABEL,
                "runAsUser": {**NON_NEGATIVE_ID, "minimum": 1, "errorMessage": NOT_ROOT},
                "runAsGroup": NON_NEGATIVE_ID,
                "fsGroup": NON_NEGATIVE_ID,
            }
        ),
        "ide": IDE,
        "access": _obj({"groups": NAMES, "users": NAMES}),
        "costCenter": _string(63),
        "team": {
            "type": "string",
            "minLength": 1,
            "pattern": LABEL_VALUE_PATTERN,
            "errorMessage": "{value}: a team must be usable as a Kubernetes label value (letters, digits, "
            "'-', '_', '.'; at most 63; starting and ending with a letter or digit)",
        },
        "default": {"type": "boolean"},
        "vm": VM,
    },
    required=("displayName",),  # image: required for runtime container (checks.check_image)
)

METADATA: dict[str, Any] = _obj({"name": DNS_LABEL}, required=("name",))


def _document(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "$schema": DIALECT,
        "$id": f"{SCHEMA_ID_BASE}/{kind}.json",
        "title": kind,
        **_obj(
            {
                "apiVersion": {"const": API_VERSION, "errorMessage": f"{{value}}: must be {API_VERSION}"},
                "kind": {"const": kind},
                "metadata": METADATA,
                "spec": spec,
            },
            required=("apiVersion", "kind", "metadata", "spec"),
        ),
    }


PROFILE_SCHEMA: dict[str, Any] = _document(PROFILE_KIND, PROFILE_SPEC)
CATALOG_SCHEMA: dict[str, Any] = _document(
    CATALOG_KIND,
    _obj(
        {
            "version": {
                "type": "string",
                "minLength": 1,
                "pattern": LABEL_VALUE_PATTERN,
                "errorMessage": "{value}: the version must be a string usable as a Kubernetes label value "
                "(letters, digits, '-', '_', '.'; at most 63; quote it in YAML)",
            },
            "allowImageTags": {"type": "boolean"},
            "nodePools": {
                "type": "object",
                "propertyNames": {"pattern": DNS_LABEL_PATTERN},
                "additionalProperties": NODE_POOL,
            },
            "network": NETWORK,
        },
        required=("version",),
    ),
)

SCHEMAS: dict[str, dict[str, Any]] = {PROFILE_KIND: PROFILE_SCHEMA, CATALOG_KIND: CATALOG_SCHEMA}
