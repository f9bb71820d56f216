"""Label and field selectors with the real API server's grammar, validation and error messages.

Ported from k8s.io/apimachinery ``pkg/labels/selector.go`` and ``pkg/fields/selector.go`` plus the
per-kind field-label conversions the API server registers (``pkg/apis/core/v1/conversion.go``,
``pkg/apis/events/v1/conversion.go``, the CRD handler and ``runtime.DefaultMetaV1FieldSelectorConversion``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any

from .errors import ApiError
from .resources import ResourceType

# selection.Operator values
IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS = "in", "notin", "=", "==", "!="
EXISTS, DOES_NOT_EXIST, GREATER_THAN, LESS_THAN = "exists", "!", "gt", "lt"
_BINARY_OPERATORS = (IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, GREATER_THAN, LESS_THAN)

# --- validation messages (k8s.io/apimachinery/pkg/util/validation) --------------------------------

_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_MSG = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
_LABEL_VALUE_FMT = f"({_QNAME_FMT})?"
_LABEL_VALUE_MSG = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
_DNS_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_FMT = f"{_DNS_LABEL_FMT}(\\.{_DNS_LABEL_FMT})*"
_DNS_SUBDOMAIN_MSG = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
_MAX_NAME, _MAX_SUBDOMAIN = 63, 253
_INT64 = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _qualified_name_errors(value: str) -> list[str]:
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) > 2:  # noqa: PLR2004 - at most one "prefix/name" separator
        example = _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
        return [
            f"a qualified name {example} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    name = parts[-1]
    if len(parts) == 2:  # noqa: PLR2004
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if len(prefix) > _MAX_SUBDOMAIN:
                errs.append(f"prefix part must be no more than {_MAX_SUBDOMAIN} characters")
            if not re.fullmatch(_DNS_SUBDOMAIN_FMT, prefix):
                errs.append(
                    "prefix part " + _regex_error(_DNS_SUBDOMAIN_MSG, _DNS_SUBDOMAIN_FMT, "example.com")
                )
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > _MAX_NAME:
        errs.append(f"name part must be no more than {_MAX_NAME} characters")
    if not re.fullmatch(_QNAME_FMT, name):
        errs.append("name part " + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def _label_value_errors(value: str) -> list[str]:
    errs: list[str] = []
    if len(value) > _MAX_NAME:
        errs.append(f"must be no more than {_MAX_NAME} characters")
    if not re.fullmatch(_LABEL_VALUE_FMT, value):
        errs.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def _invalid(path: str, value: str, detail: str) -> str:
    """``field.Invalid(path, value, detail).Error()``; Go prints a nil path as ``<nil>``."""
    return f"{path}: Invalid value: {json.dumps(value, ensure_ascii=False)}: {detail}"


def _aggregate(errs: list[str]) -> str:
    return errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"


class _ParseError(Exception):
    pass


# --- label selectors ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        if self.operator in (IN, EQUALS, DOUBLE_EQUALS):
            return has and labels[self.key] in self.values
        if self.operator in (NOT_IN, NOT_EQUALS):
            return not has or labels[self.key] not in self.values
        if self.operator in (EXISTS, DOES_NOT_EXIST):
            return has == (self.operator == EXISTS)
        if not has or len(self.values) != 1:  # gt / lt compare 64-bit integers
            return False
        mine, theirs = _parse_int(labels[self.key]), _parse_int(self.values[0])
        if mine is None or theirs is None:
            return False
        return mine > theirs if self.operator == GREATER_THAN else mine < theirs

    def __str__(self) -> str:
        if self.operator in (EXISTS, DOES_NOT_EXIST):
            return ("!" if self.operator == DOES_NOT_EXIST else "") + self.key
        values = ",".join(sorted(self.values)) if len(self.values) != 1 else self.values[0]
        if self.operator in (IN, NOT_IN):
            return f"{self.key} {self.operator} ({values})"
        symbol = {GREATER_THAN: ">", LESS_THAN: "<"}.get(self.operator, self.operator)
        return f"{self.key}{symbol}{values}"


@dataclass(frozen=True)
class LabelSelector:
    """An AND of requirements; ``nothing=True`` is ``labels.Nothing()`` (a nil metav1.LabelSelector)."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @property
    def empty(self) -> bool:
        return not self.requirements and not self.nothing

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.nothing:
            return False
        present = labels or {}
        return all(r.matches(present) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _parse_int(text: str) -> int | None:
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def _new_requirement(key: str, op: str, values: list[str]) -> Requirement:
    """``labels.NewRequirement`` (no field path): raises :class:`_ParseError` with the aggregated errors."""
    errs: list[str] = []
    if key_errs := _qualified_name_errors(key):
        errs.append(_invalid("key", key, "; ".join(key_errs)))
    shown = "[]string{" + ", ".join(json.dumps(v) for v in values) + "}" if values else "[]string(nil)"
    if op in (IN, NOT_IN) and not values:
        errs.append(f"values: Invalid value: {shown}: for 'in', 'notin' operators, values set can't be empty")
    elif op in (EXISTS, DOES_NOT_EXIST) and values:
        errs.append(f"values: Invalid value: {shown}: values set must be empty for exists and does not exist")
    elif op in (GREATER_THAN, LESS_THAN):
        if len(values) != 1:
            errs.append(
                f"values: Invalid value: {shown}: for 'Gt', 'Lt' operators, exactly one value is required"
            )
        bad = [(i, v) for i, v in enumerate(values) if _parse_int(v) is None]
        errs += [
            _invalid(f"values[{i}]", v, "for 'Gt', 'Lt' operators, the value must be an integer")
            for i, v in bad
        ]
    for i, value in enumerate(values):
        if value_errs := _label_value_errors(value):
            errs.append(_invalid(f"values[{i}][{key}]", value, "; ".join(value_errs)))
    if errs:
        raise _ParseError(_aggregate(errs))
    return Requirement(key, op, tuple(values))


_ID, _EOS = "identifier", "end of string"
_WHITESPACE = frozenset(" \t\r\n")
_SPECIAL = frozenset("=!(),><")
_SYMBOLS = frozenset({")", ",", "!", "==", "=", ">", "<", "!=", "("})
_KEYWORDS = frozenset({IN, NOT_IN})


def _lex(text: str) -> list[tuple[str, str]]:
    """Tokens as ``(kind, literal)``; kind is the symbol itself, a keyword, ``_ID`` or ``_EOS``."""
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i >= n:
            tokens.append((_EOS, ""))
            return tokens
        if text[i] in _SPECIAL:  # longest symbol: "!=" and "==" before "!" and "="
            symbol = text[i : i + 2] if text[i : i + 2] in _SYMBOLS else text[i]
            tokens.append((symbol, symbol))
            i += len(symbol)
            continue
        start = i
        while i < n and text[i] not in _SPECIAL and text[i] not in _WHITESPACE:
            i += 1
        word = text[start:i]
        tokens.append((word if word in _KEYWORDS else _ID, word))


class _LabelParser:
    """``labels.Parser``: ``in``/``notin`` are identifiers except where an operator is expected."""

    def __init__(self, text: str) -> None:
        self.tokens = _lex(text)
        self.pos = 0

    def peek(self, values: bool = True) -> tuple[str, str]:
        kind, lit = self.tokens[min(self.pos, len(self.tokens) - 1)]
        return (_ID if values and kind in _KEYWORDS else kind), lit

    def next(self, values: bool = True) -> tuple[str, str]:
        token = self.peek(values)
        self.pos += 1
        return token

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while True:
            kind, lit = self.peek()
            if kind == _EOS:
                return reqs
            if kind not in (_ID, "!"):
                raise _ParseError(f"found '{lit}', expected: !, identifier, or 'end of string'")
            try:
                reqs.append(self.requirement())
            except _ParseError as exc:
                raise _ParseError(f"unable to parse requirement: {exc}") from None
            kind, lit = self.next()
            if kind == _EOS:
                return reqs
            if kind != ",":
                raise _ParseError(f"found '{lit}', expected: ',' or 'end of string'")
            kind, lit = self.peek()
            if kind not in (_ID, "!"):
                raise _ParseError(f"found '{lit}', expected: identifier after ','")

    def requirement(self) -> Requirement:
        op = ""
        kind, key = self.next()
        if kind == "!":
            op = DOES_NOT_EXIST
            kind, key = self.next()
        if kind != _ID:
            raise _ParseError(f"found '{key}', expected: identifier")
        if key_errs := _qualified_name_errors(key):
            raise _ParseError(_invalid("<nil>", key, "; ".join(key_errs)))
        if op == DOES_NOT_EXIST or self.peek()[0] in (_EOS, ","):
            return _new_requirement(key, op or EXISTS, [])
        kind, lit = self.next(values=False)
        if kind not in _BINARY_OPERATORS and kind not in (">", "<"):
            raise _ParseError(f"found '{lit}', expected: {', '.join(_BINARY_OPERATORS)}")
        op = {">": GREATER_THAN, "<": LESS_THAN}.get(kind, kind)
        values = self.value_set() if op in (IN, NOT_IN) else self.exact_value()
        return _new_requirement(key, op, sorted(values))

    def value_set(self) -> set[str]:
        kind, lit = self.next()
        if kind != "(":
            raise _ParseError(f"found '{lit}' expected: '('")
        kind, lit = self.peek()
        if kind == ")":
            self.next()
            return {""}
        if kind not in (_ID, ","):
            raise _ParseError(f"found '{lit}', expected: ',', ')' or identifier")
        values = self.identifiers()
        if self.next()[0] != ")":
            raise _ParseError(f"found '{lit}', expected: ')'")
        return values

    def identifiers(self) -> set[str]:
        values: set[str] = set()
        while True:
            kind, lit = self.next()
            if kind == _ID:
                values.add(lit)
                kind2, lit2 = self.peek()
                if kind2 == ")":
                    return values
                if kind2 != ",":
                    raise _ParseError(f"found '{lit2}', expected: ',' or ')'")
            elif kind == ",":  # "(,", ",," and ",)" all stand for the empty value
                if not values:
                    values.add("")
                kind2, _ = self.peek()
                if kind2 == ")":
                    values.add("")
                    return values
                if kind2 == ",":
                    self.next()
                    values.add("")
            else:
                raise _ParseError(f"found '{lit}', expected: ',', or identifier")

    def exact_value(self) -> set[str]:
        if self.peek()[0] in (_EOS, ","):
            return {""}
        kind, lit = self.next()
        if kind != _ID:
            raise _ParseError(f"found '{lit}', expected: identifier")
        return {lit}


def parse_label_selector(text: str) -> LabelSelector:
    """Parse a ``labelSelector`` query parameter; 400 BadRequest on bad syntax or invalid keys/values."""
    try:
        reqs = _LabelParser(text).parse()
    except _ParseError as exc:
        raise ApiError(400, "BadRequest", str(exc)) from None
    return LabelSelector(tuple(sorted(reqs, key=lambda r: r.key)))


_LABEL_SELECTOR_OPS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}


def label_selector_from_object(sel: Mapping[str, Any] | None) -> LabelSelector:
    """``metav1.LabelSelectorAsSelector``: None matches nothing, ``{}`` matches everything."""
    if sel is None:
        return LabelSelector(nothing=True)
    reqs: list[Requirement] = []
    try:
        for key, value in (sel.get("matchLabels") or {}).items():
            reqs.append(_new_requirement(str(key), EQUALS, [str(value)]))
        for expr in sel.get("matchExpressions") or ():
            op = _LABEL_SELECTOR_OPS.get(expr.get("operator", ""))
            if op is None:
                raise _ParseError(f'"{expr.get("operator", "")}" is not a valid label selector operator')
            reqs.append(
                _new_requirement(str(expr.get("key", "")), op, [str(v) for v in expr.get("values") or ()])
            )
    except _ParseError as exc:
        raise ApiError(400, "BadRequest", str(exc)) from None
    return LabelSelector(tuple(sorted(reqs, key=lambda r: r.key)))


# --- field selectors ------------------------------------------------------------------------------

FieldGetter = Callable[[Mapping[str, Any]], str]


def _get(obj: Mapping[str, Any], path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _at(*paths: str) -> FieldGetter:
    """The first present value among ``paths`` (later paths are fallbacks), as the selector's string."""

    def getter(obj: Mapping[str, Any]) -> str:
        for path in paths:
            value = _get(obj, path)
            if value is not None and value != "":
                return _text(value)
        return "false" if paths[0] in _BOOL_FIELDS else ""

    return getter


def _pod_ip(obj: Mapping[str, Any]) -> str:
    ips = _get(obj, "status.podIPs")
    if isinstance(ips, list) and ips and isinstance(ips[0], Mapping):
        return _text(ips[0].get("ip"))
    return _text(_get(obj, "status.podIP"))


_BOOL_FIELDS = frozenset({"spec.unschedulable", "spec.hostNetwork"})
_META: dict[str, FieldGetter] = {
    "metadata.name": _at("metadata.name"),
    "metadata.namespace": _at("metadata.namespace"),
}
_NAME_ONLY: dict[str, FieldGetter] = {"metadata.name": _META["metadata.name"]}
_INVOLVED = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")

# (group, kind) -> selectable fields; kinds not listed get DefaultMetaV1FieldSelectorConversion.
_FIELDS: dict[tuple[str, str], dict[str, FieldGetter]] = {
    ("", "Pod"): {
        **_META,
        **{f: _at(f) for f in ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName")},
        **{f: _at(f) for f in ("spec.serviceAccountName", "spec.hostNetwork", "status.phase")},
        "spec.host": _at("spec.nodeName"),  # old v1 clients' name for spec.nodeName
        "status.podIP": _pod_ip,
        "status.podIPs": lambda _obj: "",  # accepted, but not among the pod's selectable fields
        "status.nominatedNodeName": _at("status.nominatedNodeName"),
    },
    ("", "Node"): {**_NAME_ONLY, "spec.unschedulable": _at("spec.unschedulable")},
    ("", "Namespace"): {**_NAME_ONLY, "status.phase": _at("status.phase")},
    ("", "Secret"): {**_META, "type": _at("type")},
    ("", "Service"): {**_META, "spec.clusterIP": _at("spec.clusterIP"), "spec.type": _at("spec.type")},
    ("", "Event"): {
        **_META,
        **{f"involvedObject.{f}": _at(f"involvedObject.{f}") for f in _INVOLVED},
        **{f: _at(f) for f in ("reason", "reportingComponent", "type")},
        "source": _at("source.component", "reportingComponent"),
    },
    ("events.k8s.io", "Event"): {
        **_META,
        **{f"regarding.{f}": _at(f"regarding.{f}", f"involvedObject.{f}") for f in _INVOLVED},
        "reason": _at("reason"),
        "reportingController": _at("reportingController", "reportingComponent"),
        "type": _at("type"),
    },
}


@dataclass(frozen=True)
class FieldTerm:
    field: str
    value: str
    negate: bool
    getter: FieldGetter = dc_field(compare=False, repr=False)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (self.getter(obj) == self.value) != self.negate


@dataclass(frozen=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.terms

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(t.matches(obj) for t in self.terms)

    def requires_exact_match(self, name: str) -> str | None:
        """The value ``name`` must equal (e.g. ``metadata.name`` for a single-object watch), if any."""
        for term in self.terms:
            if term.field == name and not term.negate:
                return term.value
        return None


def _split_terms(text: str) -> list[str]:
    """Split on commas not escaped by a backslash (the backslash stays for unescaping later)."""
    terms, start, escaped = [], 0, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _unescape(value: str) -> str:
    out: list[str] = []
    escaped = False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise _ParseError(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":  # Go formats the rune with %v: its code point
            raise _ParseError(f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if escaped:
        raise _ParseError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _split_term(term: str) -> tuple[str, str, str] | None:
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    return None


def selectable_fields(rt: ResourceType, extra: Iterable[str] = ()) -> dict[str, FieldGetter]:
    """The field labels ``rt`` accepts; ``extra`` are a CRD's ``selectableFields`` (``spec.color``)."""
    if rt.custom:
        fields = dict(_META if rt.namespaced else _NAME_ONLY)
        fields.update({name: _at(name) for name in extra})
        return fields
    return _FIELDS.get((rt.group, rt.kind), _META)


def parse_field_selector(text: str, rt: ResourceType, extra: Iterable[str] = ()) -> FieldSelector:
    """Parse a ``fieldSelector`` for ``rt``; 400 BadRequest on bad syntax or an unsupported field."""
    fields = selectable_fields(rt, extra)
    default_conversion = not rt.custom and (rt.group, rt.kind) not in _FIELDS
    parsed: list[tuple[str, str, bool]] = []
    try:
        for part in sorted(_split_terms(text)):  # sorted, as fields.ParseSelector does
            if not part:
                continue
            split = _split_term(part)
            if split is None:
                raise _ParseError(f"invalid selector: '{text}'; can't understand '{part}'")
            lhs, op, rhs = split
            parsed.append((lhs, _unescape(rhs), op == "!="))
    except _ParseError as exc:
        raise ApiError(400, "BadRequest", str(exc)) from None
    terms: list[FieldTerm] = []
    for label, value, negate in parsed:
        getter = fields.get(label)
        if getter is None:
            if default_conversion:
                msg = f'"{label}" is not a known field selector: only "metadata.name", "metadata.namespace"'
            else:
                msg = f"field label not supported: {label}"
            raise ApiError(400, "BadRequest", msg)
        name = "spec.nodeName" if (rt.kind, label) == ("Pod", "spec.host") else label
        terms.append(FieldTerm(name, value, negate, getter))
    return FieldSelector(tuple(terms))
