"""PATCH bodies applied the way the API server applies them. Pure: inputs are never mutated.

- JSON merge patch (RFC 7386) and JSON patch (RFC 6902, via ``jsonpatch``) with the server's status codes;
- strategic merge patch: a port of the apply half of k8s.io/apimachinery ``pkg/util/strategicpatch``
  (``$patch``, ``$retainKeys``, ``$deleteFromPrimitiveList/``, ``$setElementOrder/``, merge keys and the
  resulting list order), driven by the OpenAPI schemas bundled with ``kubernetes_validate``.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonpatch

from .errors import ApiError
from .resources import ResourceType

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList"
_SET_ORDER = "$setElementOrder"
_NEWEST_CORE_SCHEMA = (1, 33)
_MAX_REF_DEPTH = 8
_MAP = "map[string]interface {}"
_REJECTED = "the server rejected our request due to an error in our request"
Doc = dict[str, Any]


# --- errors as the API server reports them --------------------------------------------------------


def _unprocessable(cause: str) -> ApiError:
    """``errors.NewGenericServerResponse(422, ...)``; the real server drops ``cause``, we keep it in details."""
    return ApiError(422, "Invalid", _REJECTED, details={"causes": [{"message": cause}]})


def _plain(message: str) -> ApiError:
    """A non-Status Go error: the API server answers 500 with an empty (Unknown) reason."""
    return ApiError(500, "", message)


def _go(value: Any) -> str:
    """Go's ``%v`` of a decoded JSON value (used in strategicpatch's error messages)."""
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{k}:{_go(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:  # noqa: PLR2004 - Go's %v switch to exponent
        return str(int(value))
    return str(value)


def _go_type(value: Any) -> str:
    if isinstance(value, Mapping):
        return _MAP
    if isinstance(value, list):
        return "[]interface {}"
    return {bool: "bool", str: "string", type(None): "<nil>"}.get(type(value), "float64")


def _unmarshal_error(value: Any, go_type: str) -> ApiError:
    kind = {dict: "object", list: "array", str: "string", bool: "bool"}.get(type(value), "number")
    return ApiError(400, "BadRequest", f"json: cannot unmarshal {kind} into Go value of type {go_type}")


# --- JSON merge patch and JSON patch ---------------------------------------------------------------


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def apply_merge_patch(obj: Mapping[str, Any], patch: Any) -> dict[str, Any]:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        raise _unmarshal_error(patch, _MAP)
    merged: dict[str, Any] = _merge(copy.deepcopy(dict(obj)), patch)
    return merged


def apply_json_patch(obj: Mapping[str, Any], ops: Any) -> dict[str, Any]:
    """RFC 6902. A body that is not a list of objects is 400; a failing operation is 422."""
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        op_type = "jsonpatch.Operation" if isinstance(ops, list) else "jsonpatch.Patch"
        raise _unmarshal_error(
            next((o for o in ops if not isinstance(o, dict)), ops) if isinstance(ops, list) else ops, op_type
        )
    try:
        result = jsonpatch.JsonPatch(ops).apply(copy.deepcopy(dict(obj)), in_place=True)
    except (
        jsonpatch.JsonPatchException,
        jsonpatch.JsonPointerException,
        LookupError,
        TypeError,
        ValueError,
    ) as exc:
        raise _unprocessable(str(exc)) from None
    if not isinstance(result, dict):
        raise _unprocessable("the patched document is not a JSON object")
    return result


# --- schemas --------------------------------------------------------------------------------------


def _table(defs: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("$defs", "definitions"):
        if isinstance(defs.get(key), Mapping):
            table: Mapping[str, Any] = defs[key]
            return table
    return defs


class SchemaLookup:
    """One node of an OpenAPI schema (``$ref`` resolved), answering strategic-merge questions.

    ``list_map_fallback`` also merges ``x-kubernetes-list-type: map`` lists that declare no patch
    strategy (single map key). The real API server does not (it reads the Go struct tags, which the
    ``x-kubernetes-patch-*`` extensions mirror), so it is off by default.
    """

    def __init__(
        self,
        node: Mapping[str, Any],
        defs: Mapping[str, Any],
        name: str = "",
        list_map_fallback: bool = False,
    ) -> None:
        self.defs = _table(defs)
        self.node = self._resolve(node)
        self.name = name
        self.list_map_fallback = list_map_fallback

    def _resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        for _ in range(_MAX_REF_DEPTH):
            ref = node.get("$ref")
            target = self.defs.get(ref.rsplit("/", 1)[-1]) if isinstance(ref, str) else None
            if not isinstance(target, Mapping):
                return node
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}  # the field's extensions win
        return node

    def _child(self, node: Any, name: str) -> SchemaLookup | None:
        if not isinstance(node, Mapping):
            return None
        return SchemaLookup(node, self.defs, name, self.list_map_fallback)

    def field(self, key: str) -> SchemaLookup | None:
        """The schema of property ``key`` (or of the values, for a map with ``additionalProperties``)."""
        props = self.node.get("properties")
        if isinstance(props, Mapping) and key in props:
            return self._child(props[key], key)
        return self._child(self.node.get("additionalProperties"), key)

    def items(self) -> SchemaLookup | None:
        return self._child(self.node.get("items"), self.name)

    def _list_map_key(self) -> str:
        keys = self.node.get("x-kubernetes-list-map-keys")
        is_map = self.list_map_fallback and self.node.get("x-kubernetes-list-type") == "map"
        return str(keys[0]) if is_map and isinstance(keys, list) and len(keys) == 1 else ""

    @property
    def patch_strategies(self) -> tuple[str, ...]:
        raw = self.node.get("x-kubernetes-patch-strategy")
        if isinstance(raw, str) and raw:
            return tuple(raw.split(","))
        return ("merge",) if self._list_map_key() else ()

    @property
    def patch_merge_key(self) -> str:
        raw = self.node.get("x-kubernetes-patch-merge-key")
        return raw if isinstance(raw, str) and raw else self._list_map_key()


@functools.lru_cache(maxsize=1)
def load_core_definitions() -> dict[str, Any]:
    """kubernetes_validate's ``_definitions.json`` for the newest bundled release <= 1.33 (shared: do not mutate).

    Located with ``find_spec`` rather than ``importlib.resources`` so the (slow) package is not imported.
    """
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "kubernetes_validate is missing: install gpuworkspace-devcluster (pip install -e ./devcluster)"
        )
    root = Path(next(iter(spec.submodule_search_locations))) / "kubernetes-json-schema"
    versions = {}
    for entry in root.iterdir():
        match = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)-local", entry.name)
        if match and (int(match[1]), int(match[2])) <= _NEWEST_CORE_SCHEMA:
            versions[tuple(int(g) for g in match.groups())] = entry
    if not versions:
        raise RuntimeError(f"no Kubernetes <= 1.33 schemas bundled in kubernetes_validate at {root}")
    loaded: dict[str, Any] = json.loads((versions[max(versions)] / "_definitions.json").read_text("utf-8"))
    return loaded


def schema_for_gvk(defs: Mapping[str, Any], group: str, version: str, kind: str) -> SchemaLookup | None:
    """The root schema of ``group/version, Kind=kind`` (by ``x-kubernetes-group-version-kind``), if any."""
    table = _table(defs)
    for name, node in table.items():
        gvks = node.get("x-kubernetes-group-version-kind") if isinstance(node, Mapping) else None
        for gvk in gvks or ():
            if (gvk.get("group", ""), gvk.get("version"), gvk.get("kind")) == (group, version, kind):
                return SchemaLookup(node, table, name)
    return None


def strategic_merge_supported(rt: ResourceType) -> bool:
    """Custom resources accept only JSON, merge and apply patches."""
    return not rt.custom


def accepted_patch_types(rt: ResourceType) -> tuple[str, ...]:
    if strategic_merge_supported(rt):
        return (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)
    return (JSON_PATCH, MERGE_PATCH, APPLY_PATCH)


def unsupported_patch_type(rt: ResourceType) -> ApiError:
    """415 for a PATCH content type ``rt`` does not accept (e.g. strategic merge on a custom resource)."""
    accepted = ", ".join(accepted_patch_types(rt))
    msg = f"the body of the request was in an unknown format - accepted media types include: {accepted}"
    return ApiError(415, "UnsupportedMediaType", msg)


# --- strategic merge patch ------------------------------------------------------------------------


def apply_strategic_merge_patch(obj: Mapping[str, Any], patch: Any, schema: SchemaLookup | None) -> Doc:
    """Strategic merge patch against ``schema`` (``None``: maps merge, lists are replaced)."""
    if not isinstance(patch, dict):
        raise _unmarshal_error(patch, _MAP)
    return _merge_map(copy.deepcopy(dict(obj)), copy.deepcopy(patch), schema)


def _meta(schema: SchemaLookup | None) -> tuple[str, str]:
    """(strategy without ``retainKeys``, merge key)."""
    if schema is None:
        return "", ""
    strategy = next((s for s in schema.patch_strategies if s != "retainKeys"), "")
    return strategy, schema.patch_merge_key


def _same(a: Any, b: Any) -> bool:
    """Go's interface equality for decoded JSON scalars (every number is a float64)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and bool(a == b)


def _clean(value: Any) -> tuple[Any, bool]:
    """A patch value taken as is: drop nulls, ``$`` keys and maps carrying ``$patch`` (removeDirectives)."""
    if isinstance(value, dict):
        if _DIRECTIVE in value:
            return None, False
        out = {}
        for key, item in value.items():
            if item is not None and not key.startswith("$"):
                cleaned, keep = _clean(item)
                if keep:
                    out[key] = cleaned
        return out, True
    if isinstance(value, list):
        return [c for c, keep in map(_clean, value) if keep], True
    return value, True


def _extract_key(key: str, prefix: str) -> str:
    head, sep, rest = key.partition("/")
    if not sep or head != prefix:
        what = "primitive list" if prefix == _DELETE_PRIMITIVE else "setElementOrder list"
        raise ApiError(400, "BadRequest", f"invalid patch format of {what}")
    return rest


def _merge_map(original: Doc, patch: Doc, schema: SchemaLookup | None) -> Doc:
    if _DIRECTIVE in patch:
        directive = patch.pop(_DIRECTIVE)
        if directive == "replace":
            replaced: Doc = _clean(patch)[0]
            return replaced
        if directive == "delete":
            return {}
        raise _plain(f"unknown patch type: {directive} in map: {_go({**patch, _DIRECTIVE: directive})}")
    _apply_retain_keys(original, patch)
    _merge_set_element_order(original, patch, schema)
    for raw_key, value in patch.items():
        key, delete_list = raw_key, raw_key.startswith(_DELETE_PRIMITIVE)
        if delete_list:
            key = _extract_key(raw_key, _DELETE_PRIMITIVE)
        elif raw_key.startswith("$"):
            continue
        if value is None:
            original.pop(key, None)
            continue
        current = original.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            sub = schema.field(key) if schema else None
            original[key] = (
                _clean(value)[0] if _meta(sub)[0] == "replace" else _merge_map(current, value, sub)
            )
        elif isinstance(current, list) and isinstance(value, list):
            original[key] = _merge_list_field(
                current, value, schema.field(key) if schema else None, delete_list
            )
        elif not delete_list:
            cleaned, keep = _clean(value)
            if keep:
                original[key] = cleaned
            else:
                original.pop(key, None)
    return original


def _apply_retain_keys(original: Doc, patch: Doc) -> None:
    if _RETAIN_KEYS not in patch:
        return
    retain = patch.pop(_RETAIN_KEYS)
    bad = ApiError(400, "BadRequest", "invalid patch format of retainKeys")
    if not isinstance(retain, list):
        raise bad
    for key, value in patch.items():
        if value is not None and not key.startswith((_DELETE_PRIMITIVE, _SET_ORDER)) and key not in retain:
            raise bad
    for key in [k for k in original if k not in retain]:
        del original[key]


def _merge_list_field(
    original: list[Any], patch: list[Any], field: SchemaLookup | None, delete_list: bool
) -> list[Any]:
    """``mergeSliceHandler``: merge-strategy lists (and deletion lists) merge, others are replaced."""
    strategy, merge_key = _meta(field)
    if strategy == "merge" or delete_list:
        return _merge_list(original, patch, field.items() if field else None, merge_key, delete_list)
    replaced: list[Any] = _clean(patch)[0]
    return replaced


def _element_kind(*lists: list[Any]) -> str:
    """``sliceElementType``: the one Go type of every element ("" when there are none)."""
    kinds = [_go_type(v) for lst in lists for v in lst]
    if kinds and kinds[0] == "[]interface {}":
        raise _unprocessable("lists of lists are not supported")
    if any(k != kinds[0] for k in kinds):
        raise _plain(f"list element types are not identical: {_go(list(lists))}")
    return kinds[0] if kinds else ""


def _merge_list(
    original: list[Any], patch: list[Any], items: SchemaLookup | None, merge_key: str, delete_list: bool
) -> list[Any]:
    if not original and not patch:
        return original
    if _element_kind(original, patch) != _MAP:
        if delete_list:
            return [v for v in original if not any(_same(v, d) for d in patch)]
        merged: list[Any] = []
        for value in original + patch:
            if not any(_same(value, m) for m in merged):
                merged.append(value)
    else:
        if not merge_key:
            raise _plain(f"cannot merge lists without merge key for {items.name if items else ''}")
        original, patch = _split_special_items(original, patch, merge_key)
        merged = _merge_items(original, patch, merge_key, items)
    patch_items, server_only = _partition(merged, patch, merge_key)
    return _normalize_order(patch_items, server_only, patch, original, merge_key)


def _split_special_items(original: list[Any], patch: list[Any], key: str) -> tuple[list[Any], list[Any]]:
    """Apply ``$patch: delete`` items; ``$patch: replace`` makes the rest of the patch the list."""
    plain: list[Any] = []
    replace = False
    for item in patch:
        directive = item.get(_DIRECTIVE)
        if directive is None and _DIRECTIVE not in item:
            plain.append(item)
        elif directive == "delete":
            if key not in item:
                raise _plain(f"map: {_go(item)} does not contain declared merge key: {key}")
            original = [
                o for o in original if not (isinstance(o, dict) and key in o and _same(o[key], item[key]))
            ]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise _plain("merging lists cannot yet be specified in the patch")
        else:
            raise _plain(f"unknown patch type: {directive} in map: {_go(item)}")
    if replace:
        return [_clean(item)[0] for item in plain], []
    return original, plain


def _find(items: list[Any], key: str, value: Any) -> int:
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _plain(f"value for key {i} is not a map")
        if key in item and _same(item[key], value):
            return i
    return -1


def _merge_items(original: list[Any], patch: list[Any], key: str, items: SchemaLookup | None) -> list[Any]:
    """Merge patch items into their live namesakes in place; new items are appended to a copy (so
    ``original`` keeps serving as the live order, as the Go slice header does)."""
    merged = list(original)
    for item in patch:
        if key not in item:
            raise _plain(f"map: {_go(item)} does not contain declared merge key: {key}")
        index = _find(merged, key, item[key])
        if index >= 0:
            merged[index] = _merge_map(merged[index], item, items)
            if index < len(original):
                original[index] = merged[index]
        else:
            merged.append(_clean(item)[0])
    return merged


def _identity(item: Any, key: str) -> Any:
    if not key:
        return item
    if not isinstance(item, dict) or key not in item:
        raise _plain(f"map: {_go(item)} does not contain declared merge key: {key}")
    return item[key]


def _index(order: list[Any], item: Any, key: str) -> int:
    wanted = _identity(item, key)
    for i, other in enumerate(order):
        if _same(_identity(other, key), wanted):
            return i
    return -1


def _partition(merged: list[Any], present_in: list[Any], key: str) -> tuple[list[Any], list[Any]]:
    inside: list[Any] = []
    outside: list[Any] = []
    for item in merged:
        (inside if _index(present_in, item, key) >= 0 else outside).append(item)
    return inside, outside


def _normalize_order(
    patch_items: list[Any], server_only: list[Any], patch_order: list[Any], server_order: list[Any], key: str
) -> list[Any]:
    """``normalizeElementOrder``: patch items in patch order, server-only items in live order, then
    interleaved by live order; an item the live list lacks goes before the remaining server items."""
    patch_items = sorted(patch_items, key=lambda item: _index(patch_order, item, key))
    server_only = sorted(server_only, key=lambda item: _index(server_order, item, key))
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(patch_items):
        if j >= len(patch_items):
            out.append(server_only[i])
            i += 1
            continue
        if i < len(server_only):
            left, right = _index(server_order, server_only[i], key), _index(server_order, patch_items[j], key)
            if 0 <= left < right:
                out.append(server_only[i])
                i += 1
                continue
        out.append(patch_items[j])
        j += 1
    return out


def _check_order_list(patch_list: list[Any], order: list[Any], key: str) -> None:
    """``validatePatchWithSetOrderList``: patch items must appear in the ``$setElementOrder`` order."""
    if not order or not patch_list:
        return
    items = [p for p in patch_list if not (key and isinstance(p, dict) and p.get(_DIRECTIVE) == "delete")]
    i = j = 0
    while i < len(items) and j < len(order):
        if isinstance(items[i], dict) and _DIRECTIVE in items[i]:
            i += 1
            continue
        if _same(_identity(items[i], key), _identity(order[j], key)):
            i += 1
        j += 1
    if i < len(items) and j >= len(order):
        raise _plain(
            f"the order in patch list:\n{_go(patch_list)}\n doesn't match {_SET_ORDER} list:\n{_go(order)}"
        )


def _merge_set_element_order(original: Doc, patch: Doc, schema: SchemaLookup | None) -> None:
    """``mergePatchIntoOriginal``: merge each list that has a ``$setElementOrder/<list>`` and order it."""
    for directive_key in [k for k in patch if k.startswith(_SET_ORDER)]:
        order = patch.pop(directive_key)
        if not isinstance(order, list):
            raise _plain(f"expected a []interface {{}}, but received a {_go_type(order)}")
        key = _extract_key(directive_key, _SET_ORDER)
        in_original, in_patch = key in original, key in patch
        live, wanted = original.get(key), patch.get(key)
        for value in (live if in_original else [], wanted if in_patch else []):
            if not isinstance(value, list):
                raise _plain(f"expected a []interface {{}}, but received a {_go_type(value)}")
        field = schema.field(key) if schema else None
        merge_key = _meta(field)[1]
        _check_order_list(wanted or [], order, merge_key)
        if in_original and in_patch:
            merged = _merge_list_field(live or [], wanted or [], field, False)
        elif in_patch:
            merged = _clean(wanted)[0]
        elif in_original:
            merged = live or []
        else:
            continue
        _element_kind(live or [], wanted or [])
        patch_items, server_only = _partition(merged, order, merge_key)
        original[key] = _normalize_order(patch_items, server_only, order, live or [], merge_key)
        patch.pop(key, None)
