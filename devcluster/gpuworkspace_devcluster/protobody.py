"""Protobuf request bodies (``application/vnd.kubernetes.protobuf``) as the JSON a JSON client sends.

kubectl's generators (``kubectl create namespace|configmap|secret|job|role|quota …``) post typed objects
through client-go, which encodes built-in kinds as protobuf. The real API server decodes them with
k8s.io/apimachinery ``pkg/runtime/serializer/protobuf/protobuf.go`` (``Serializer.Decode``): the 4-byte
magic ``k8s\\x00``, then a ``runtime.Unknown`` (``typeMeta``, ``raw``, ``contentEncoding``,
``contentType``) whose ``raw`` is the object's message from k8s.io/api's ``generated.proto``.

This module does the same with the ``protobuf`` runtime and the descriptors vendored in ``k8sproto/``
(see its README), then turns the message into the JSON object Go's ``encoding/json`` would write for
the decoded Go struct, so the rest of the API server handles it exactly like a JSON body:

* a scalar is written when set, except a zero value that Go's ``omitempty`` drops (the Go struct tags,
  recorded in ``k8sproto/json-fields.json``, say which fields keep their zero: pointers and fields
  without ``omitempty``); unset repeated and map fields are left out;
* ``,inline`` members (``Volume.volumeSource``, ``Probe.handler``, ``LocalObjectReference``…) are
  flattened into their parent, and a field's JSON name is used where it differs from its proto name;
* ``metav1.Time`` is RFC 3339 in whole seconds, or ``null`` when zero (apimachinery
  ``pkg/apis/meta/v1/time_proto.go``: an empty message is the zero time, nanoseconds are dropped);
  ``resource.Quantity`` is its string, ``intstr.IntOrString`` an int or a string by its ``type``,
  ``bytes`` (Secret ``data``, ConfigMap ``binaryData``) base64, ``FieldsV1`` its embedded JSON.

Errors are those of the API server's create/update handlers (kubernetes/apiserver
``pkg/endpoints/handlers/rest.go::transformDecodeError``): 400 ``BadRequest`` naming the kind and why.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from . import errors
from .errors import ApiError
from .resources import ResourceType

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"  # protobuf.go: protoEncodingPrefix
_DATA = Path(__file__).parent / "k8sproto"
_UNKNOWN = "k8s.io.apimachinery.pkg.runtime.Unknown"
_SUMMARY_BYTES = 30  # rest.go: summarizeData(body, 30)
# API group -> the proto package of its generated.proto (k8s.io/api/<dir>/<version>)
_PACKAGES = {
    "": "k8s.io.api.core",
    "batch": "k8s.io.api.batch",
    "rbac.authorization.k8s.io": "k8s.io.api.rbac",
    "scheduling.k8s.io": "k8s.io.api.scheduling",
    "authentication.k8s.io": "k8s.io.api.authentication",
}
_INT_OR_STRING_STRING = 1  # intstr.Type: Int = 0, String = 1


@dataclass(frozen=True)
class _Catalog:
    pool: descriptor_pool.DescriptorPool
    notes: dict[
        str, dict[str, Any]
    ]  # message -> {"rename": {proto: json ("" = inline, "-" = skip)}, "zero": [...]}


@functools.cache
def _catalog() -> _Catalog:
    files = descriptor_pb2.FileDescriptorSet.FromString((_DATA / "k8s-api.binpb").read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for proto in files.file:  # dependencies come first in a set written with --include_imports
        pool.Add(proto)
    notes = json.loads((_DATA / "json-fields.json").read_text())
    return _Catalog(pool, notes)


def _message_name(group: str, version: str, kind: str) -> str | None:
    package = _PACKAGES.get(group)
    return f"{package}.{version}.{kind}" if package else None


def _descriptor(name: str | None) -> Descriptor | None:
    if name is None:
        return None
    try:
        return _catalog().pool.FindMessageTypeByName(name)
    except KeyError:
        return None


def serves(rt: ResourceType) -> bool:
    """Whether this devcluster decodes protobuf bodies of ``rt``'s kind (else: 415, as for a CRD)."""
    return _descriptor(_message_name(rt.group, rt.version, rt.kind)) is not None


def decode(raw: bytes, rt: ResourceType) -> dict[str, Any]:
    """The JSON object of a protobuf body sent to ``rt``'s URL; :class:`ApiError` 400 if malformed."""
    if not raw:
        raise _unrecognized(rt, "empty data", raw)
    if raw[: len(MAGIC)] != MAGIC:
        prefix = "[" + " ".join(str(b) for b in MAGIC) + "]"  # Go's %v of a []byte
        raise _unrecognized(
            rt, f"provided data does not appear to be a protobuf message, expected prefix {prefix}", raw
        )
    if len(raw) == len(MAGIC):
        raise _unrecognized(rt, "empty body", raw)
    unknown = _parse(_UNKNOWN, raw[len(MAGIC) :])
    if unknown is None:
        raise _unrecognized(rt, "proto: runtime.Unknown: illegal or truncated wire data", raw)
    api_version = unknown.typeMeta.apiVersion
    kind = unknown.typeMeta.kind or rt.kind  # protobuf.go: copyKindDefaults from the URL's kind
    group, _, version = api_version.rpartition("/")
    if not version:
        group, version = rt.group, rt.version
    if unknown.contentEncoding:
        raise _cannot_handle(rt, kind, version, f"unsupported content encoding {unknown.contentEncoding!r}")
    name = _message_name(group, version, kind)
    if _descriptor(name) is None:
        gv = f"{group}/{version}" if group else version
        raise _cannot_handle(rt, kind, version, f'no kind "{kind}" is registered for version "{gv}"')
    assert name is not None
    obj = _parse(name, unknown.raw)
    if obj is None:
        raise _cannot_handle(rt, kind, version, f"proto: {kind}: illegal or truncated wire data")
    body = {"apiVersion": f"{group}/{version}" if group else version, "kind": kind}
    body.update(to_json(obj))
    return body


def message_class(name: str) -> type[message.Message]:
    """The class of a vendored message, e.g. ``k8s.io.api.core.v1.ConfigMap`` (KeyError if not vendored)."""
    descriptor = _descriptor(name)
    if descriptor is None:
        raise KeyError(name)
    return message_factory.GetMessageClass(descriptor)


def _parse(name: str, data: bytes) -> Any:
    """The parsed message (a dynamic class: fields are read as attributes), or None if malformed."""
    msg = message_class(name)()
    try:
        msg.ParseFromString(data)
    except message.DecodeError:
        return None
    return msg


def _unrecognized(rt: ResourceType, detail: str, body: bytes) -> ApiError:
    if not body:
        summary = "<empty>"
    else:  # JSON-looking bodies as text, others in hex
        head = body[:_SUMMARY_BYTES]
        summary = head.decode(errors="replace") if body[:1] == b"{" else binascii.hexlify(head).decode()
        summary += " ..." if len(body) > _SUMMARY_BYTES else ""
    return errors.bad_request(
        f"the object provided is unrecognized (must be of type {rt.kind}): {detail} ({summary})"
    )


def _cannot_handle(rt: ResourceType, kind: str, version: str, detail: str) -> ApiError:
    return errors.bad_request(f'{kind} in version "{version}" cannot be handled as a {rt.kind}: {detail}')


# --------------------------------------------------------------------------- message -> JSON

_ABSENT = object()


def to_json(msg: message.Message) -> Any:
    """A decoded Kubernetes message as Go's encoding/json writes its Go struct."""
    full = msg.DESCRIPTOR.full_name
    special = _SPECIAL.get(full)
    if special is not None:
        return special(msg)
    note = _catalog().notes.get(full, {})
    rename: dict[str, str] = note.get("rename", {})
    zero = frozenset(note.get("zero", ()))
    out: dict[str, Any] = {}
    for field in msg.DESCRIPTOR.fields:
        value = _field(msg, field, field.name in zero)
        name = rename.get(field.name, field.name)
        if value is _ABSENT or name == "-":
            continue
        if name == "":  # ,inline
            out.update(value)
        else:
            out[name] = value
    return out


def _field(msg: message.Message, field: Any, keep_zero: bool) -> Any:
    value = getattr(msg, field.name)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        if not value:
            return _ABSENT
        inner = field.message_type.fields_by_name["value"]
        return {k: _scalar_or_message(inner, v) for k, v in value.items()}
    if field.is_repeated:
        return [_scalar_or_message(field, v) for v in value] if value else _ABSENT
    if not msg.HasField(field.name):
        return _ABSENT
    if field.message_type is None and not value and not keep_zero:
        return _ABSENT  # omitempty
    return _scalar_or_message(field, value)


def _scalar_or_message(field: Any, value: Any) -> Any:
    if field.message_type is not None:
        return to_json(value)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


def _time(msg: Any) -> str | None:
    if not msg.ListFields():
        return None
    return datetime.fromtimestamp(msg.seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _int_or_string(msg: Any) -> int | str:
    return str(msg.strVal) if msg.type == _INT_OR_STRING_STRING else int(msg.intVal)


def _fields_v1(msg: Any) -> Any:
    return orjson.loads(msg.Raw) if msg.Raw else None


_SPECIAL: dict[str, Any] = {
    "k8s.io.apimachinery.pkg.apis.meta.v1.Time": _time,
    "k8s.io.apimachinery.pkg.api.resource.Quantity": lambda m: str(m.string),
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": _int_or_string,
    "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1": _fields_v1,
}
