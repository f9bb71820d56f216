"""The OpenAPI schemas of the served kinds: loading them (:class:`SchemaSet`) and publishing them.

Built-in kinds use the official v1.33 definitions bundled with ``kubernetes_validate``; custom kinds
(KubeVirt, CDI, NetworkFence) come from the reference files in ``../shared/schemas``, turned into the
inlined structural schema their CRDs carry (see :mod:`.crds`).

``/openapi/v2`` and ``/openapi/v3`` follow kube-apiserver. kubectl relies on them: ``kubectl explain`` walks
the v3 document of the resource's group-version to the schema carrying ``x-kubernetes-group-version-kind``,
and ``--validate=strict|warn`` looks for the ``fieldValidation`` query parameter on the kind's PATCH
operation before leaving validation to the server. Custom kinds are published as apiextensions-apiserver
publishes CRDs (``io.kubevirt.v1.VirtualMachine``: schema inlined, metadata referencing ObjectMeta).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import pathlib
from typing import Any

import kubernetes_validate
import yaml

from .crds import CUSTOM_SOURCES, crd_form, handwritten_schema
from .resources import RESOURCE_TYPES, ResourceType, group_versions

Schema = dict[str, Any]
_CORE_DEFS = "kubernetes-json-schema/v1.33.0-local/_definitions.json"
_REF_CORE = "#/definitions/"
_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_OBJECT_META = _META + "ObjectMeta"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_TYPE_META = ("apiVersion", "kind")


def find_shared_schemas() -> pathlib.Path | None:
    """The reference schemas folder: ``$GPUWORKSPACE_SHARED_SCHEMAS``, else ``shared/schemas`` beside the repo."""
    env = os.environ.get("GPUWORKSPACE_SHARED_SCHEMAS")
    if env:
        path = pathlib.Path(env)
        return path if path.is_dir() else None
    for start in (pathlib.Path(__file__).resolve().parent, pathlib.Path.cwd().resolve()):
        for base in (start, *start.parents):
            if (base / "shared" / "schemas").is_dir():
                return base / "shared" / "schemas"
    return None


def _canon_core(node: Any, name: str = "") -> Any:
    """kubernetes_validate's JSON-schema form -> the API server's OpenAPI v2 form."""
    if isinstance(node, list):
        return [_canon_core(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: Schema = {}
    for key, value in node.items():
        if key == "$ref":
            out[key] = _REF_CORE + value.rsplit("/", 1)[-1]
        elif key == "type" and isinstance(value, list):
            out[key] = next(t for t in value if t != "null")
        elif key == "properties":
            out[key] = {
                prop: {k: v for k, v in _canon_core(sub).items() if not (k == "enum" and prop in _TYPE_META)}
                for prop, sub in value.items()
            }
        else:
            out[key] = _canon_core(value)
    if name in (_QUANTITY, _INT_OR_STRING):
        out.pop("oneOf", None)
        out["type"] = "string"
        if name == _INT_OR_STRING:
            out["format"] = "int-or-string"
    return out


@functools.cache
def _core_definitions() -> dict[str, Schema]:
    raw = json.loads((pathlib.Path(kubernetes_validate.__file__).parent / _CORE_DEFS).read_text())["$defs"]
    return {name: _canon_core(d, name) for name, d in raw.items()}


class SchemaSet:
    """The schemas of every served kind, loaded once (files are read lazily)."""

    def __init__(self, shared: pathlib.Path | None = None, *, auto: bool = True) -> None:
        self.shared = shared if shared is not None or not auto else find_shared_schemas()

    @property
    def core_definitions(self) -> dict[str, Schema]:
        """Built-in definitions in OpenAPI v2 form (refs ``#/definitions/...``); treat as read-only."""
        return _core_definitions()

    def core_name(self, rt: ResourceType) -> str | None:
        """The definition name of a built-in kind, e.g. ``io.k8s.api.core.v1.Pod``."""
        return self._gvk_index.get((rt.group, rt.version, rt.kind))

    @functools.cached_property
    def _gvk_index(self) -> dict[tuple[str, str, str], str]:
        index: dict[tuple[str, str, str], str] = {}
        for name, d in self.core_definitions.items():
            for gvk in d.get("x-kubernetes-group-version-kind", ()):
                index[(gvk["group"], gvk["version"], gvk["kind"])] = name
        return index

    def custom_schema(self, rt: ResourceType) -> Schema | None:
        """A custom kind's schema as its CRD's ``openAPIV3Schema`` (inlined; None without the files)."""
        return self._custom(rt.group, rt.kind)

    @functools.cache  # noqa: B019 - one SchemaSet per process
    def _custom(self, group: str, kind: str) -> Schema | None:
        handwritten = handwritten_schema(group, kind)
        if handwritten is not None:
            return handwritten
        source = CUSTOM_SOURCES.get((group, kind))
        if source is None or self.shared is None or not (self.shared / source[0]).is_file():
            return None
        filename, definition = source
        if definition is None:  # a real CRD file
            crd = yaml.safe_load((self.shared / filename).read_text())
            stored = next(v for v in crd["spec"]["versions"] if v.get("storage", True))
            schema: Schema = stored["schema"]["openAPIV3Schema"]
            return schema
        defs = self._swagger(filename)
        schema = crd_form(defs[definition], defs)
        schema["properties"]["metadata"] = {"type": "object"}
        schema["type"] = "object"
        return schema

    @functools.cache  # noqa: B019
    def _swagger(self, filename: str) -> dict[str, Any]:
        assert self.shared is not None
        defs: dict[str, Any] = json.loads((self.shared / filename).read_text())["definitions"]
        return defs

    def for_type(self, rt: ResourceType) -> Schema | None:
        """A self-contained schema of the kind: built-ins by ``$ref`` into ``definitions``, custom inlined."""
        if not rt.custom:
            name = self.core_name(rt)
            return {"$ref": _REF_CORE + name, "definitions": self.core_definitions} if name else None
        schema = self.custom_schema(rt)
        if schema is None:
            return None
        meta = self.core_definitions[_OBJECT_META]
        return schema | {
            "properties": schema["properties"] | {"metadata": meta},
            "definitions": self.core_definitions,
        }

    def resolve(self, node: Schema) -> tuple[Schema, str]:
        """Follow a ``$ref`` into the core definitions: (schema, definition name or "")."""
        name = ""
        while "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            node = self.core_definitions[name]
        return node, name


@functools.lru_cache(maxsize=4)
def _schema_set_for(shared: pathlib.Path | None) -> SchemaSet:
    return SchemaSet(shared, auto=False)


def default_schema_set() -> SchemaSet:
    """The process-wide :class:`SchemaSet` for the current shared-schemas location."""
    return _schema_set_for(find_shared_schemas())


# --------------------------------------------------------------------------- publishing

_INFO = {"title": "Kubernetes", "version": "v1.33.0"}
_BEARER = {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}}
_PARAM_DOCS = {
    "fieldValidation": "fieldValidation instructs the server on how to handle objects in the request "
    "(POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any "
    "unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field "
    "that the decoder encounters. - Warn: This will send a warning via the standard warning response header for "
    "each unknown field that is dropped from the object, and for each duplicate field that is encountered. This "
    "is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields "
    "would be dropped from the object, or if any duplicate fields are present.",
    "dryRun": "When present, indicates that modifications should not be persisted. Valid values are: - All: "
    "all dry run stages will be processed",
    "fieldManager": "fieldManager is a name associated with the actor or entity that is making these changes.",
}
_LIST_PARAMS = [
    "allowWatchBookmarks:boolean", "continue", "fieldSelector", "labelSelector", "limit:integer",
    "resourceVersion", "resourceVersionMatch", "sendInitialEvents:boolean", "timeoutSeconds:integer",
    "watch:boolean",
]  # fmt: skip
_WRITE_PARAMS = ["dryRun", "fieldManager", "fieldValidation"]
_DELETE_PARAMS = ["dryRun", "gracePeriodSeconds:integer", "orphanDependents:boolean", "propagationPolicy"]


def custom_definition_name(rt: ResourceType) -> str:
    """The OpenAPI name of a custom kind: reversed group, version, kind (``io.kubevirt.v1.VirtualMachine``)."""
    return ".".join([*reversed(rt.group.split(".")), rt.version, rt.kind])


def definition_name(rt: ResourceType, schemas: SchemaSet) -> str | None:
    return custom_definition_name(rt) if rt.custom else schemas.core_name(rt)


def _op_prefix(rt: ResourceType) -> str:
    if not rt.group:
        return "CoreV1"
    group = rt.group if rt.custom else rt.group.removesuffix(".k8s.io")
    return "".join(p[:1].upper() + p[1:] for p in group.split(".")) + rt.version[:1].upper() + rt.version[1:]


def _param(spec: str, where: str = "query") -> Schema:
    name, _, kind = spec.partition(":")
    out: Schema = {"uniqueItems": True, "type": kind or "string", "name": name, "in": where}
    if where == "path":
        out = {"uniqueItems": True, "type": "string", "name": name, "in": "path", "required": True}
    if name in _PARAM_DOCS:
        out["description"] = _PARAM_DOCS[name]
    return out


def _ref(name: str) -> Schema:
    return {"$ref": "#/definitions/" + name}


def _operation(
    rt: ResourceType, action: str, verb: str, ref: str, params: list[str], sub: str = ""
) -> Schema:
    ok = {"description": "OK", "schema": _ref(ref)}
    responses: Schema = {"200": ok, "401": {"description": "Unauthorized"}}
    if action in ("post", "put", "patch"):
        responses["201"] = {"description": "Created", "schema": _ref(ref)}
    if action in ("post", "delete"):
        responses["202"] = {
            "description": "Accepted",
            "schema": _ref(ref if action == "post" else _META + "Status"),
        }
    scope = "Namespaced" if rt.namespaced and verb != "listAll" else ""
    name = f"{rt.kind}{sub[:1].upper() + sub[1:]}"
    op_id = {
        "listAll": f"list{_op_prefix(rt)}{rt.kind}ForAllNamespaces",
        "deletecollection": f"delete{_op_prefix(rt)}Collection{scope}{name}",
    }.get(verb, f"{verb}{_op_prefix(rt)}{scope}{name}")
    media = ["application/json", "application/yaml"] + (
        [] if rt.custom else ["application/vnd.kubernetes.protobuf"]
    )
    if verb.startswith("list"):
        media += ["application/json;stream=watch"] + (
            [] if rt.custom else ["application/vnd.kubernetes.protobuf;stream=watch"]
        )
    op: Schema = {
        "description": f"{verb} {rt.kind}{' ' + sub if sub else ''}",
        "consumes": ["*/*"],
        "produces": media,
        "schemes": ["https"],
        "tags": [_op_prefix(rt)[:1].lower() + _op_prefix(rt)[1:]],
        "operationId": op_id,
        "parameters": [_param(p) for p in params],
        "responses": responses,
        "x-kubernetes-action": {"listAll": "list", "read": "get", "replace": "put", "create": "post"}.get(
            verb, verb
        ),
        "x-kubernetes-group-version-kind": {"group": rt.group, "kind": rt.kind, "version": rt.version},
    }
    if action == "patch":
        op["consumes"] = (
            ["application/json-patch+json", "application/merge-patch+json"]
            + ([] if rt.custom else ["application/strategic-merge-patch+json"])
            + ["application/apply-patch+yaml"]
        )
        op["parameters"].insert(
            0, {"name": "body", "in": "body", "required": True, "schema": _ref(_META + "Patch")}
        )
    elif action in ("post", "put"):
        op["parameters"].insert(0, {"name": "body", "in": "body", "required": True, "schema": _ref(ref)})
    elif action == "delete":
        op["parameters"].insert(0, {"name": "body", "in": "body", "schema": _ref(_META + "DeleteOptions")})
    return op


def _paths(rt: ResourceType, name: str) -> dict[str, Schema]:
    list_name = f"{name}List" if rt.custom else name + "List"
    base = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    coll = f"{base}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{base}/{rt.plural}"
    scope_params = [_param("namespace", "path")] if rt.namespaced else []
    pretty = [_param("pretty")]
    out: dict[str, Schema] = {
        coll: {
            "get": _operation(rt, "get", "list", list_name, _LIST_PARAMS),
            "post": _operation(rt, "post", "create", name, _WRITE_PARAMS),
            "delete": _operation(
                rt, "delete", "deletecollection", _META + "Status", _LIST_PARAMS + _DELETE_PARAMS
            ),
            "parameters": scope_params + pretty,
        },
        coll + "/{name}": {
            "get": _operation(rt, "get", "read", name, []),
            "put": _operation(rt, "put", "replace", name, _WRITE_PARAMS),
            "delete": _operation(rt, "delete", "delete", name, _DELETE_PARAMS),
            "patch": _operation(rt, "patch", "patch", name, [*_WRITE_PARAMS, "force:boolean"]),
            "parameters": [_param("name", "path"), *scope_params, *pretty],
        },
    }
    if rt.namespaced:
        out[f"{base}/{rt.plural}"] = {
            "get": _operation(rt, "get", "listAll", list_name, _LIST_PARAMS),
            "parameters": pretty,
        }
    if "status" in rt.subresources:
        out[coll + "/{name}/status"] = {
            "get": _operation(rt, "get", "read", name, [], "status"),
            "put": _operation(rt, "put", "replace", name, _WRITE_PARAMS, "status"),
            "patch": _operation(rt, "patch", "patch", name, [*_WRITE_PARAMS, "force:boolean"], "status"),
            "parameters": [_param("name", "path"), *scope_params, *pretty],
        }
    return out


def _v2_structural(node: Any) -> Any:
    """apiextensions' v3 -> v2 schema conversion (no anyOf/oneOf/not/nullable, opaque preserved fields)."""
    if not isinstance(node, dict):
        return node
    out = {k: v for k, v in node.items() if k not in ("allOf", "anyOf", "oneOf", "not", "nullable")}
    if node.get("nullable") or node.get("x-kubernetes-preserve-unknown-fields"):
        for key in ("properties", "items", "x-kubernetes-preserve-unknown-fields") + (
            ("type",) if node.get("nullable") else ()
        ):
            out.pop(key, None)
    if "properties" in out:
        out["properties"] = {k: _v2_structural(v) for k, v in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _v2_structural(out[key])
    return out


def _custom_definitions(rt: ResourceType, schemas: SchemaSet, v2: bool) -> dict[str, Schema]:
    name = custom_definition_name(rt)
    gvk = [{"group": rt.group, "kind": rt.kind, "version": rt.version}]
    schema = copy.deepcopy(schemas.custom_schema(rt)) or {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    if v2:
        schema = _v2_structural(schema)
    schema.setdefault("properties", {})["metadata"] = {
        "description": "Standard object's metadata. More info: "
        "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
        "$ref": "#/definitions/" + _META + "ObjectMeta",
    }
    schema["x-kubernetes-group-version-kind"] = gvk
    list_schema = {
        "description": f"{rt.kind}List is a list of {rt.kind}",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "items": {"type": "array", "items": _ref(name)},
            "kind": {"type": "string"},
            "metadata": _ref(_META + "ListMeta"),
        },
        "x-kubernetes-group-version-kind": [g | {"kind": rt.list_kind} for g in gvk],
    }
    return {name: schema, f"{name}List": list_schema}


def _closure(roots: list[str], defs: dict[str, Schema]) -> dict[str, Schema]:
    seen: dict[str, Schema] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen[name] = defs[name]
        todo.extend(_refs(defs[name]))
    return dict(sorted(seen.items()))


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"].rsplit("/", 1)[-1]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


_META_ROOTS = [_META + n for n in ("Status", "DeleteOptions", "Patch", "WatchEvent", "APIResourceList")]


def _document(
    schemas: SchemaSet, kinds: list[ResourceType], v2: bool
) -> tuple[dict[str, Schema], dict[str, Schema]]:
    paths: dict[str, Schema] = {}
    custom: dict[str, Schema] = {}
    roots = list(_META_ROOTS)
    for rt in kinds:
        name = definition_name(rt, schemas)
        if name is None:
            continue
        if rt.custom:
            custom |= _custom_definitions(rt, schemas, v2)
        else:
            roots += [name, name + "List"]
        paths |= _paths(rt, name)
    roots += [r for d in custom.values() for r in _refs(d)]
    defs = _closure(roots, schemas.core_definitions) | custom
    return paths, dict(sorted(defs.items()))


def build_openapi_v2(schemas: SchemaSet | None = None) -> dict[str, Any]:
    """The Swagger 2.0 document of every served kind (cached: treat as read-only)."""
    return _v2(schemas or default_schema_set())


@functools.lru_cache(maxsize=4)
def _v2(schemas: SchemaSet) -> dict[str, Any]:
    paths, defs = _document(schemas, list(RESOURCE_TYPES), v2=True)
    return {
        "swagger": "2.0",
        "info": _INFO,
        "paths": dict(sorted(paths.items())),
        "definitions": defs,
        "securityDefinitions": _BEARER,
        "security": [{"BearerToken": []}],
    }


def _gv_paths() -> dict[str, tuple[str, str]]:
    out = {"api/v1": ("", "v1")}
    for group, versions in group_versions().items():
        out |= {f"apis/{group}/{v}": (group, v) for v in versions}
    return out


def _v3_schema(node: Any) -> Any:
    """kube-openapi's v2 -> v3 conversion: component refs, ``$ref`` with siblings becomes ``allOf``."""
    if isinstance(node, list):
        return [_v3_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _v3_schema(v) for k, v in node.items()}
    ref = out.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/definitions/"):
        out["$ref"] = "#/components/schemas/" + ref.removeprefix("#/definitions/")
        if len(out) > 1:
            out["allOf"] = [{"$ref": out.pop("$ref")}]
    return out


def _v3_components(defs: dict[str, Schema]) -> dict[str, Schema]:
    out: dict[str, Schema] = _v3_schema(defs)
    for name, types in ((_QUANTITY, ("string", "number")), (_INT_OR_STRING, ("integer", "string"))):
        if name in out:  # v3 publishes these as oneOf (kubectl explain then names them, e.g. <IntOrString>)
            out[name] = {
                "description": out[name].get("description", ""),
                "oneOf": [{"type": t} for t in types],
            }
    return out


def _v3_param(param: Schema) -> Schema:
    out = {k: v for k, v in param.items() if k not in ("type", "uniqueItems")}
    return out | {"schema": {"type": param["type"], "uniqueItems": True}}


def _v3_operation(op: Schema) -> Schema:
    skip = ("consumes", "produces", "schemes", "parameters", "responses")
    out: Schema = {k: v for k, v in op.items() if k not in skip}
    params = [_v3_param(p) for p in op["parameters"] if p["in"] != "body"]
    if params:
        out["parameters"] = params
    for body in (p for p in op["parameters"] if p["in"] == "body"):
        content = {m: {"schema": _v3_schema(body["schema"])} for m in op["consumes"]}
        out["requestBody"] = {"content": content, "required": body.get("required", False)}
    out["responses"] = {
        code: {"description": r["description"]}
        | (
            {"content": {m: {"schema": _v3_schema(r["schema"])} for m in op["produces"]}}
            if "schema" in r
            else {}
        )
        for code, r in op["responses"].items()
    }
    return out


def build_openapi_v3_group_version(schemas: SchemaSet | None, gv_path: str) -> dict[str, Any] | None:
    """The OpenAPI 3.0 document of one group-version (``api/v1``, ``apis/kubevirt.io/v1``); None if not served."""
    return _v3(schemas or default_schema_set(), gv_path.strip("/"))


@functools.lru_cache(maxsize=64)
def _v3(schemas: SchemaSet, gv_path: str) -> dict[str, Any] | None:
    gv = _gv_paths().get(gv_path)
    if gv is None:
        return None
    kinds = [rt for rt in RESOURCE_TYPES if (rt.group, rt.version) == gv]
    paths, defs = _document(schemas, kinds, v2=False)
    v3_paths = {
        path: {verb: _v3_operation(op) for verb, op in item.items() if verb != "parameters"}
        | {"parameters": [_v3_param(p) for p in item["parameters"]]}
        for path, item in sorted(paths.items())
    }
    return {
        "openapi": "3.0.0",
        "info": _INFO,
        "paths": v3_paths,
        "components": {"schemas": _v3_components(defs), "securitySchemes": _BEARER},
        "security": [{"BearerToken": []}],
    }


def serialize(doc: dict[str, Any]) -> bytes:
    """The bytes the server sends for an OpenAPI document (the hash in the v3 index is computed over them)."""
    return json.dumps(doc, separators=(",", ":")).encode()


def openapi_v3_hash(schemas: SchemaSet | None, gv_path: str) -> str:
    """The ``hash`` (and ETag) of a group-version document: upper-case hex SHA-512, as kube-apiserver."""
    return _hash(schemas or default_schema_set(), gv_path.strip("/"))


@functools.lru_cache(maxsize=64)
def _hash(schemas: SchemaSet, gv_path: str) -> str:
    return hashlib.sha512(serialize(_v3(schemas, gv_path) or {})).hexdigest().upper()


def build_openapi_v3_index(schemas: SchemaSet | None = None) -> dict[str, Any]:
    """``/openapi/v3``: each group-version's document URL, with the content hash kubectl caches by."""
    return {
        "paths": {
            gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash={openapi_v3_hash(schemas, gv)}"}
            for gv in _gv_paths()
        }
    }
