"""Validation of objects against their schemas, as kube-apiserver does it on create and update.

* Unknown and duplicate fields are decoding problems: ``fieldValidation=Strict`` fails the request with
  400 BadRequest (``strict decoding error: unknown field "spec.foo"``), ``Warn`` (the default) returns them
  as warnings for ``Warning: 299 - "..."`` headers, ``Ignore`` drops them silently. Unknown fields are always
  pruned from the object.
* A wrong JSON type in a built-in kind is a Go decoding error (400); in a custom kind a 422 Invalid.
* Missing required fields, enum and pattern violations are 422 Invalid with per-field causes.

The schemas come from :class:`SchemaSet` (in :mod:`.openapi`, re-exported here).
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import yaml

from . import errors
from .errors import ApiError
from .openapi import SchemaSet, default_schema_set, find_shared_schemas
from .resources import ResourceType

__all__ = [
    "SchemaSet",
    "apply_unknown_fields_error",
    "check_field_validation",
    "default_schema_set",
    "find_shared_schemas",
    "loads_checking_duplicates",
    "loads_yaml_checking_duplicates",
    "validate_name",
    "validate_object",
]
log = logging.getLogger(__name__)
Schema = dict[str, Any]

_REF_CORE = "#/definitions/"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_FIELD_VALIDATION = ("Ignore", "Strict", "Warn")
_CONSTRAINTS = frozenset(
    ["type", "enum", "pattern", "maxLength", "minLength", "maximum", "minimum", "exclusiveMaximum",
     "exclusiveMinimum", "maxItems", "minItems", "uniqueItems", "multipleOf", "maxProperties", "minProperties"]
)  # fmt: skip


def _view(node: Any, types: bool) -> Any:
    """The jsonschema (draft 4) form used to check values; ``types=False`` keeps only ``required``."""
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return {"$ref": node["$ref"]}
    out: Schema = {}
    int_or_string = node.get("x-kubernetes-int-or-string") or node.get("format") == "int-or-string"
    for key, value in node.items():
        if key == "properties":
            out[key] = {p: _view(s, types) for p, s in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = _view(value, types)
        elif key in ("allOf", "anyOf", "oneOf") and not int_or_string:
            out[key] = [_view(s, types) for s in value]
        elif key == "required" or (types and key in _CONSTRAINTS):
            out[key] = value
    if types and int_or_string:
        out["type"] = ["integer", "string"]
    return out


@functools.cache
def _core_view(schemas: SchemaSet) -> dict[str, Schema]:
    return {name: _view(d, types=False) for name, d in schemas.core_definitions.items()}


@functools.cache
def _validator(schemas: SchemaSet, rt: ResourceType) -> jsonschema.Draft4Validator | None:
    """Checks ``required`` for built-ins (types are the decoder's job) and the whole schema for custom kinds."""
    if not rt.custom:
        name = schemas.core_name(rt)
        body = {"$ref": _REF_CORE + name} if name else None
    else:
        schema = schemas.custom_schema(rt)
        body = _view(schema, types=True) if schema is not None else None
        if body is not None:
            body["properties"]["metadata"] = {"$ref": _REF_CORE + _OBJECT_META}
    return jsonschema.Draft4Validator(body | {"definitions": _core_view(schemas)}) if body else None


# --------------------------------------------------------------------------- decoding


class _Dups(dict[str, Any]):
    __slots__ = ("dups",)
    dups: list[str]


def _pairs(pairs: list[tuple[str, Any]]) -> _Dups:
    out = _Dups()
    out.dups = []
    for key, value in pairs:
        if key in out:
            out.dups.append(key)
            del out[key]  # the last one wins, as in Go, and is placed where it was written
        out[key] = value
    return out


def _collect_dups(node: Any, path: str, found: list[str]) -> Any:
    if isinstance(node, _Dups):
        found.extend(_join(path, k) for k in dict.fromkeys(node.dups))
        return {k: _collect_dups(v, _join(path, k), found) for k, v in node.items()}
    if isinstance(node, list):
        return [_collect_dups(v, f"{path}[{i}]", found) for i, v in enumerate(node)]
    return node


def loads_checking_duplicates(raw: bytes) -> tuple[Any, list[str]]:
    """Parse a JSON body; also return the paths of keys given twice (``spec.replicas``)."""
    try:
        parsed = json.loads(raw, object_pairs_hook=_pairs)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.bad_request(
            f"couldn't get version/kind; json parse error: {_go_json_error(exc)}"
        ) from None
    found: list[str] = []
    return _collect_dups(parsed, "", found), found


def _go_json_error(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        if exc.pos >= len(exc.doc.rstrip()):
            return "unexpected end of JSON input"
        return f"invalid character {exc.doc[exc.pos]!r} looking for beginning of value"
    return str(exc)


class _YamlLoader(yaml.SafeLoader):
    """YAML 1.1 like Go's yaml.v2 but timestamps stay strings; records duplicate keys."""

    dup_messages: list[str]


_YamlLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _yaml_mapping(loader: _YamlLoader, node: yaml.MappingNode) -> dict[str, Any]:
    loader.flatten_mapping(node)
    out: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        key = json.dumps(key) if isinstance(key, bool) else str(key) if key is not None else "null"
        if key in out:
            loader.dup_messages.append(f'line {key_node.start_mark.line + 1}: key "{key}" already set in map')
        out[key] = loader.construct_object(value_node, deep=True)
    return out


_YamlLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _yaml_mapping)


def loads_yaml_checking_duplicates(raw: bytes) -> tuple[Any, list[str]]:
    """Parse a YAML body; also return Go-style messages (``line 5: key "name" already set in map``)."""
    loader = _YamlLoader(raw)
    loader.dup_messages = []
    try:
        return loader.get_single_data(), loader.dup_messages
    except yaml.YAMLError as exc:
        raise errors.bad_request(f"error converting YAML to JSON: yaml: {exc}") from None
    finally:
        loader.dispose()


# --------------------------------------------------------------------------- validation


def check_field_validation(value: str | None, options_kind: str = "CreateOptions") -> str:
    """Normalise the ``fieldValidation`` query parameter ("" -> "Warn"), rejecting bad values as the server does."""
    if not value:
        return "Warn"
    if value not in _FIELD_VALIDATION:
        supported = ", ".join(f'"{v}"' for v in ("", *_FIELD_VALIDATION))
        cause = {
            "reason": "FieldValueNotSupported",
            "field": "fieldValidation",
            "message": f"Unsupported value: {_goq(value)}: supported values: {supported}",
        }
        raise errors.invalid(options_kind, "", [cause], group="meta.k8s.io")
    return value


def validate_object(
    rt: ResourceType,
    obj: dict[str, Any],
    *,
    field_validation: str = "Warn",
    duplicates: Sequence[str] = (),
    yaml_duplicates: Sequence[str] = (),
    schemas: SchemaSet | None = None,
) -> list[str]:
    """Validate ``obj`` (pruned in place: unknown fields and nulls dropped); return warning texts.

    ``duplicates`` are the paths from :func:`loads_checking_duplicates`, ``yaml_duplicates`` the messages
    from :func:`loads_yaml_checking_duplicates`. Raises :class:`ApiError` (400 or 422) as the server does.
    """
    schemas = schemas or default_schema_set()
    root = schemas.for_type(rt)
    if root is None:
        if rt.custom:
            _warn_no_schema(rt)
        return _decoding_problems(rt, field_validation, list(duplicates), list(yaml_duplicates), [], {})
    walk = _Walk(schemas, rt)
    walk.node(obj, {k: v for k, v in root.items() if k != "definitions"}, "", "")
    if walk.go_error:
        raise errors.bad_request(_cannot_handle(rt, walk.go_error))
    warnings = _decoding_problems(
        rt, field_validation, list(duplicates), list(yaml_duplicates), walk.unknown, walk.order
    )
    validator = _validator(schemas, rt)
    if validator is not None:
        causes = _causes(validator.iter_errors(obj))
        if causes:
            name = str((obj.get("metadata") or {}).get("name") or "")
            raise errors.invalid(rt.kind, name, causes, group=rt.group)
    return warnings


@functools.cache
def _warn_no_schema(rt: ResourceType) -> None:
    log.warning(
        "no schema for %s.%s (shared schemas not found): accepting objects unvalidated", rt.kind, rt.group
    )


def _decoding_problems(
    rt: ResourceType,
    mode: str,
    dups: list[str],
    yaml_dups: list[str],
    unknown: list[str],
    order: dict[str, int],
) -> list[str]:
    far = len(order) + 1
    if rt.custom:  # CRs: duplicates first, then pruned fields
        msgs = [f'duplicate field "{p}"' for p in sorted(dups, key=lambda p: order.get(p, far))]
        msgs += [f'unknown field "{p}"' for p in unknown]
    else:  # typed decoding reports in document order; a duplicated unknown field counts as unknown
        hidden = tuple(u + s for u in unknown for s in ".[")  # Go skips an unknown field's value
        items = [(p, "unknown") for p in unknown]
        items += [(p, "duplicate") for p in dups if p not in unknown and not p.startswith(hidden)]
        msgs = [f'{what} field "{p}"' for p, what in sorted(items, key=lambda i: order.get(i[0], far))]
    if mode == "Ignore" or not (msgs or yaml_dups):
        return []
    if mode == "Strict":
        parts = (["yaml: unmarshal errors:\n  " + "\n  ".join(yaml_dups)] if yaml_dups else []) + msgs
        raise errors.bad_request(_cannot_handle(rt, "strict decoding error: " + ", ".join(parts)))
    return [*yaml_dups, *msgs]


def _cannot_handle(rt: ResourceType, detail: str) -> str:
    return f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {detail}'


def apply_unknown_fields_error(rt: ResourceType, namespace: str, name: str, paths: Iterable[str]) -> ApiError:
    """The error server-side apply gives for fields a schema does not declare (500, as kube-apiserver)."""
    gvk = f"{rt.group_version}, Kind={rt.kind}"
    detail = "\n".join(f".{p}: field not declared in schema" for p in paths)
    return ApiError(500, "", f"failed to create typed patch object ({namespace}/{name}; {gvk}): {detail}")


class _Walk:
    """Prunes unknown fields/nulls, records paths in document order and (built-ins) Go type errors."""

    def __init__(self, schemas: SchemaSet, rt: ResourceType) -> None:
        self.schemas, self.typed = schemas, not rt.custom
        self.unknown: list[str] = []
        self.order: dict[str, int] = {}
        self.go_error = ""
        self.struct = rt.kind  # Go struct holding the field being decoded
        self.go_path: list[str] = []

    def node(self, value: Any, schema: Schema, path: str, ref: str) -> None:
        schema, name = self.schemas.resolve(schema)
        ref = name or ref
        if self.typed and not self._type_ok(value, schema, ref):
            return
        if isinstance(value, dict):
            self._object(value, schema, path, ref)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                if item is not None:
                    self.node(item, schema["items"], f"{path}[{i}]", "")

    def _object(self, value: dict[str, Any], schema: Schema, path: str, ref: str) -> None:
        props: dict[str, Schema] | None = schema.get("properties")
        keep = schema.get("x-kubernetes-preserve-unknown-fields")
        struct, self.struct = self.struct, (ref.rsplit(".", 1)[-1] if ref and props else self.struct)
        keys = sorted(value) if not self.typed else list(value)
        for key in keys:
            child = _join(path, key)
            self.order.setdefault(child, len(self.order))
            sub = props.get(key) if props is not None else schema.get("additionalProperties")
            if value[key] is None:
                if props is not None:
                    del value[key]  # a null is the zero value: dropped
            elif isinstance(sub, dict):
                field = [key] if props is not None else []  # Go's error path names struct fields only
                self.go_path += field
                self.node(value[key], sub, child, "")
                del self.go_path[len(self.go_path) - len(field) :]
            elif props is not None and not keep:
                self.unknown.append(child)
                del value[key]
            if self.go_error:
                return
        for key, sub in (props or {}).items():
            if key not in value and "default" in sub and not self.typed:
                value[key] = copy.deepcopy(sub["default"])  # structural defaulting of CRs
        self.struct = struct

    def _type_ok(self, value: Any, schema: Schema, ref: str) -> bool:
        if ref == _QUANTITY:
            problem = _quantity_problem(value)
            self.go_error = self.go_error or problem
            return not problem
        kind, fmt = schema.get("type"), schema.get("format")
        if ref == _INT_OR_STRING:
            ok = isinstance(value, str) or _is_int(value)
            if not ok:
                self.go_error = f"json: cannot unmarshal {_json_kind(value)} into Go value of type int32"
            return ok
        checks: dict[str, Callable[[Any], bool]] = {
            "string": lambda v: isinstance(v, str),
            "boolean": lambda v: isinstance(v, bool),
            "integer": _is_json_int,
            "number": lambda v: _is_int(v) or isinstance(v, float),
            "array": lambda v: isinstance(v, list),
            "object": lambda v: isinstance(v, dict),
        }
        check = checks.get(kind) if isinstance(kind, str) else None
        if check is None or check(value):
            if kind == "integer" and fmt == "int32" and not -(2**31) <= value < 2**31:
                self._go_type_error(f"number {value}", schema, ref)
                return False
            return True
        shown = f"number {value}" if kind == "integer" and isinstance(value, float) else _json_kind(value)
        self._go_type_error(shown, schema, ref)
        return False

    def _go_type_error(self, shown: str, schema: Schema, ref: str) -> None:
        field = ".".join(self.go_path)
        self.go_error = (
            f"json: cannot unmarshal {shown} into Go struct field {self.struct}.{field} "
            f"of type {self._go_type(schema, ref)}"
        )

    def _go_type(self, schema: Schema, ref: str) -> str:
        if ref:
            special = {_QUANTITY: "resource.Quantity", _INT_OR_STRING: "intstr.IntOrString"}
            return special.get(ref) or ".".join(ref.rsplit(".", 2)[-2:])
        kind = schema.get("type")
        if kind == "array":
            item, item_ref = self.schemas.resolve(schema.get("items") or {})
            return "[]" + self._go_type(item, item_ref)
        if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
            value, value_ref = self.schemas.resolve(schema["additionalProperties"])
            return "map[string]" + self._go_type(value, value_ref)
        scalar = {
            "string": "string",
            "boolean": "bool",
            "number": "float64",
            "object": "map[string]interface {}",
        }
        if kind == "integer":
            return str(schema.get("format") or "int")
        return scalar.get(str(kind), "interface {}")


def _is_int(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and value.is_integer()
    )


def _is_json_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    names: dict[type, str] = {dict: "object", list: "array", str: "string"}
    return names.get(type(value), "value")


_QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_QUANTITY_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_QUANTITY_SUFFIX = re.compile(r"^(|[KMGTPE]i|[numkMGTPE]|[eE][-+]?[0-9]+)$")


def _quantity_problem(value: Any) -> str:
    """Go's resource.ParseQuantity errors for a JSON value ("" when fine)."""
    if _is_int(value) or isinstance(value, float):
        return ""
    if not isinstance(value, str):
        return f"json: cannot unmarshal {_json_kind(value)} into Go value of type string"
    match = _QUANTITY_RE.match(value.strip())
    if not match:
        return _QUANTITY_FORMAT
    number = match.group(1).lstrip("+-")
    if number.count(".") > 1:
        return _QUANTITY_FORMAT
    if number == ".":
        return "unable to parse numeric part of quantity"
    return "" if _QUANTITY_SUFFIX.match(match.group(2)) else "unable to parse quantity's suffix"


def _causes(found: Iterable[jsonschema.ValidationError]) -> list[dict[str, str]]:
    causes: list[dict[str, str]] = []
    for err in sorted(found, key=lambda e: [str(p) for p in e.absolute_path]):
        path = _fmt_path(err.absolute_path)
        value, arg, rule = err.instance, err.validator_value, err.validator
        if rule == "required":
            for missing in [r for r in arg if isinstance(value, dict) and r not in value]:
                causes.append(_cause("FieldValueRequired", _join(path, missing), "Required value"))
            continue
        if rule == "type":
            actual = _openapi_kind(value)
            wanted = ",".join(arg) if isinstance(arg, list) else arg
            msg = f'Invalid value: "{actual}": {path} in body must be of type {wanted}: "{actual}"'
            causes.append(_cause("FieldValueTypeInvalid", path, msg))
        elif rule == "enum":
            allowed = ", ".join(_goq(v) if isinstance(v, str) else json.dumps(v) for v in arg)
            causes.append(
                _cause(
                    "FieldValueNotSupported",
                    path,
                    f"Unsupported value: {_gov(value)}: supported values: {allowed}",
                )
            )
        elif rule == "maxLength":
            causes.append(_cause("FieldValueTooLong", path, f"Too long: may not be more than {arg} bytes"))
        elif rule == "maxItems":
            causes.append(
                _cause("FieldValueTooMany", path, f"Too many: {len(value)}: must have at most {arg} items")
            )
        else:
            detail = {
                "pattern": f"should match '{arg}'",
                "minLength": f"should be at least {arg} chars long",
                "minItems": f"should have at least {arg} items",
                "maximum": f"should be less than or equal to {arg}",
                "minimum": f"should be greater than or equal to {arg}",
                "oneOf": "must validate one and only one schema (oneOf)",
                "anyOf": "must validate at least one schema (anyOf)",
            }.get(str(rule), err.message)
            causes.append(
                _cause("FieldValueInvalid", path, f"Invalid value: {_gov(value)}: {path} in body {detail}")
            )
    return sorted({(c["field"], c["message"]): c for c in causes}.values(), key=lambda c: c["field"])


def _cause(reason: str, field: str, message: str) -> dict[str, str]:
    return {"reason": reason, "message": message, "field": field}


def _openapi_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if _is_int(value):
        return "integer"
    return {float: "number", str: "string", dict: "object", list: "array"}.get(type(value), "unknown")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _fmt_path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out = f"{out}[{part}]" if isinstance(part, int) else _join(out, str(part))
    return out


def _goq(text: str) -> str:
    """Go's %q for a string."""
    return json.dumps(text, ensure_ascii=False)


def _gov(value: Any) -> str:
    """Go's rendering of a bad value in field errors (``%q`` strings, ``%#v`` maps and slices)."""
    if isinstance(value, dict):
        return (
            "map[string]interface {}{"
            + ", ".join(f"{_goq(k)}:{_gov(v)}" for k, v in sorted(value.items()))
            + "}"
        )
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(_gov(v) for v in value) + "}"
    return _goq(value) if isinstance(value, str) else json.dumps(value)


# --------------------------------------------------------------------------- names

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = _LABEL + r"(\." + _LABEL + r")*"
_DNS1035 = r"[a-z]([-a-z0-9]*[a-z0-9])?"
_LABEL_MAX, _SUBDOMAIN_MAX = 63, 253


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    shown = "".join(("" if i == 0 else " or ") + f"'{e}', " for i, e in enumerate(examples))
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _name_errors(rt: ResourceType, name: str) -> list[str]:
    if rt.group == "rbac.authorization.k8s.io":  # path segment names (system:controller:...)
        if name in (".", ".."):
            return [f"may not be '{name}'"]
        return [f"may not contain '{c}'" for c in "/%" if c in name]
    out: list[str] = []
    if rt.plural in ("namespaces", "services"):
        if len(name) > _LABEL_MAX:
            out.append(f"must be no more than {_LABEL_MAX} characters")
        if rt.plural == "services" and not re.fullmatch(_DNS1035, name):
            out.append(
                _regex_error(
                    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                    "alphabetic character, and end with an alphanumeric character",
                    _DNS1035,
                    "my-name",
                    "abc-123",
                )
            )
        elif rt.plural == "namespaces" and not re.fullmatch(_LABEL, name):
            out.append(
                "must not contain dots"
                if re.fullmatch(_SUBDOMAIN, name)
                else _regex_error(
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                    "start and end with an alphanumeric character",
                    _LABEL,
                    "my-name",
                    "123-abc",
                )
            )
        return out
    if len(name) > _SUBDOMAIN_MAX:
        out.append(f"must be no more than {_SUBDOMAIN_MAX} characters")
    if not re.fullmatch(_SUBDOMAIN, name):
        out.append(
            _regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                "must start and end with an alphanumeric character",
                _SUBDOMAIN,
                "example.com",
            )
        )
    return out


def validate_name(rt: ResourceType, name: str) -> None:
    """Raise the server's 422 Invalid for a bad ``metadata.name`` of kind ``rt``."""
    if not name:
        cause = _cause(
            "FieldValueRequired", "metadata.name", "Required value: name or generateName is required"
        )
        raise errors.invalid(rt.kind, name, [cause], group=rt.group)
    msgs = _name_errors(rt, name)
    if msgs:
        causes = [
            _cause("FieldValueInvalid", "metadata.name", f"Invalid value: {_goq(name)}: {m}") for m in msgs
        ]
        raise errors.invalid(rt.kind, name, causes, group=rt.group)
