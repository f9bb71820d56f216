"""kubectl's JSONPath subset (client-go ``util/jsonpath``), as CRD ``additionalPrinterColumns`` use it.

``.a.b``, ``['k']``, ``[0]``, ``[*]`` and filters ``[?(@.type=='Ready')]`` (with ``==``, ``!=``, ``<``,
``<=``, ``>``, ``>=`` or bare existence).
"""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(
    r"\.(?P<field>(?:\\.|[^.\[\]\\])+)"
    r"|\[(?P<bracket>(?:'[^']*'|\"[^\"]*\"|\?\((?:'[^']*'|\"[^\"]*\"|[^)])*\)|[^\]])*)\]"
)
_FILTER = re.compile(r"\?\(\s*@((?:\.[\w/\\.-]+|\[[^\]]*\])+)\s*(?:(==|!=|<=|>=|<|>)\s*(.+?))?\s*\)")
_QUOTED = re.compile(r"'(.*)'|\"(.*)\"", re.S)
Step = tuple[str, Any]


def _unquote(text: str) -> str | None:
    m = _QUOTED.fullmatch(text)
    return None if m is None else m.group(1) if m.group(1) is not None else m.group(2)


def parse_jsonpath(path: str) -> list[Step]:
    """Compile ``.a.b[0]``, ``[*]``, ``['k']``, ``[?(@.type=='Ready')]``; ValueError if unsupported."""
    expr = path.strip()
    expr = expr[1:-1].strip() if expr.startswith("{") and expr.endswith("}") else expr
    expr, pos, steps = expr.removeprefix("$"), 0, []
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m or expr.startswith("..", pos):
            raise ValueError(f"unrecognized JSONPath {path!r} at {expr[pos:]!r}")
        pos = m.end()
        if m.group("field") is not None:
            field = m.group("field").replace("\\.", ".")
            steps.append(("all", None) if field == "*" else ("key", field))
            continue
        inner = m.group("bracket").strip()
        if inner == "*":
            steps.append(("all", None))
        elif (key := _unquote(inner)) is not None:
            steps.append(("key", key))
        elif re.fullmatch(r"-?\d+", inner):
            steps.append(("index", int(inner)))
        elif re.fullmatch(r"-?\d*:-?\d*", inner):
            steps.append(("slice", tuple(int(p) if p else None for p in inner.split(":"))))
        elif (f := _FILTER.fullmatch(inner)) is not None:
            steps.append(("filter", (parse_jsonpath(f.group(1)), f.group(2), _literal(f.group(3) or ""))))
        else:
            raise ValueError(f"unrecognized JSONPath {path!r} at [{inner}]")
    return steps


def _literal(text: str) -> Any:
    if (quoted := _unquote(text)) is not None or not text:
        return quoted
    if text in ("true", "false"):
        return text == "true"
    try:
        return float(text)
    except ValueError as exc:
        raise ValueError(f"unrecognized JSONPath filter value {text!r}") from exc


def is_num(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compare(left: Any, op: str | None, right: Any) -> bool:
    if op in (None, "==", "!="):
        equal = float(left) == right if is_num(left) and is_num(right) else bool(left == right)
        return op is None or equal == (op == "==")
    if not (is_num(left) and is_num(right)):
        return False
    return bool({"<": left < right, ">": left > right, "<=": left <= right, ">=": left >= right}[op])


def eval_jsonpath(steps: list[Step], data: Any) -> list[Any]:
    """All matches; missing keys and out-of-range indexes yield nothing (AllowMissingKeys)."""
    current = [data]
    for kind, arg in steps:
        out: list[Any] = []
        for value in current:
            if kind == "key" and isinstance(value, dict) and arg in value:
                out.append(value[arg])
            elif kind == "all" and isinstance(value, dict | list):
                out.extend(value.values() if isinstance(value, dict) else value)
            elif kind == "index" and isinstance(value, list) and -len(value) <= arg < len(value):
                out.append(value[arg])
            elif kind == "slice" and isinstance(value, list):
                out.extend(value[arg[0] : arg[1]])
            elif kind == "filter" and isinstance(value, list):
                sub, op, literal = arg
                out.extend(i for i in value if (f := eval_jsonpath(sub, i)) and _compare(f[0], op, literal))
        current = out
    return current
