"""YAML text → plain JSON-like documents, with every problem located by file, line or field.

PyYAML's safe loader, with three changes: timestamps stay strings (``2026-12-01`` is a version, not a
date), duplicate keys are errors instead of silently keeping the last one, and each document is
copied into plain dicts/lists/scalars under a size budget (aliases cannot blow up into millions of
nodes; recursive aliases are refused).

Aliases and merge keys (``<<: *a``) repeat what an anchor holds; a few lines of them can stand for
millions of values (each line doubling the last). Before anything is constructed, the composed node
graph is measured (each node's expanded size once, so the measure is linear in what the file writes)
and a file whose aliases add more than :data:`MAX_ALIAS_VALUES` values is refused, naming the line
and field where the limit is crossed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from .errors import CatalogProblem
from .files import CatalogFile

MAX_NODES = 100_000  # per file, after expanding aliases
MAX_DEPTH = 40
COMPOSE_MAX_DEPTH = 4 * MAX_DEPTH  # while parsing: far below Python's recursion limit
# while parsing, a little above the exact budget, so that files near it get the exact check's answer
# (after alias expansion, naming the field)
COMPOSE_MAX_NODES = MAX_NODES + 50
# values that aliases and merge keys may add to a file beyond those it writes (sharing a block of
# defaults among profiles needs a few hundred; 10,000 take ~60 ms to copy)
MAX_ALIAS_VALUES = 10_000
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Loader(yaml.SafeLoader):
    """SafeLoader without implicit timestamps, with duplicate keys refused, and with the value budget and
    a nesting bound enforced while composing, so that a hostile file is refused before PyYAML has built
    it all (a 1 MiB file of values took ~9 s; deep nesting ended in a RecursionError naming no line).
    :func:`_plain` checks the exact limits after alias expansion, naming the field."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._composed = 0
        self._depth = 0
        self._alias_values = 0  # added by aliases in the file's documents so far

    def _count(self) -> Any:
        start = self.peek_event().start_mark  # type: ignore[no-untyped-call]
        self._composed += 1
        if self._composed > COMPOSE_MAX_NODES:
            raise yaml.composer.ComposerError(None, None, f"more than {MAX_NODES} values in a file", start)
        return start

    def compose_scalar_node(self, anchor: Any) -> Any:
        self._count()
        return super().compose_scalar_node(anchor)

    def compose_sequence_node(self, anchor: Any) -> Any:
        return self._nested(super().compose_sequence_node, anchor)

    def compose_mapping_node(self, anchor: Any) -> Any:
        return self._nested(super().compose_mapping_node, anchor)

    def _nested(self, compose: Callable[[Any], Any], anchor: Any) -> Any:
        start = self._count()
        self._depth += 1
        try:
            if self._depth > COMPOSE_MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {MAX_DEPTH} levels deep", start
                )
            return compose(anchor)
        finally:
            self._depth -= 1

    def construct_document(self, node: yaml.Node) -> Any:
        """Refuse the alias amplification before constructing anything (:func:`alias_expansion`)."""
        found = alias_expansion(node, MAX_ALIAS_VALUES - self._alias_values)
        if isinstance(found, AliasExpansionError):
            raise found
        self._alias_values += found
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG:
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key_node.value!r}",
                        key_node.start_mark,
                    )
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


class AliasExpansionError(yaml.YAMLError):
    """Aliases and merge keys in a document add more values than allowed; names where."""

    def __init__(self, path: tuple[str | int, ...], line: int, profile: str | None) -> None:
        self.path, self.line, self.profile = path, line, profile
        self.message = (
            f"line {line}: YAML aliases and merge keys repeat more than {MAX_ALIAS_VALUES} values in this "
            "file by here (an alias repeats every value under its anchor); write fewer of them"
        )
        super().__init__(self.message)


def _expanded_sizes(root: yaml.Node) -> dict[int, int]:
    """id(node) → values the node stands for once aliases are expanded (keys not counted, as in
    :func:`_plain`). Each node is measured once; a recursive alias counts 1 (:func:`_plain` refuses it)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()
    cap = MAX_NODES * 10  # bigger sizes are all "too big": keeps the sums small integers

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            return 1
        active.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(value) for _, value in node.value)
        active.discard(key)
        sizes[key] = min(total, cap)
        return sizes[key]

    size(root)
    return sizes


def _children(node: yaml.Node) -> list[tuple[str | int, yaml.Node]]:
    if isinstance(node, yaml.SequenceNode):
        return list(enumerate(node.value))
    if isinstance(node, yaml.MappingNode):
        return [(str(k.value) if isinstance(k, yaml.ScalarNode) else "?", v) for k, v in node.value]
    return []


def _node_profile(root: yaml.Node) -> str | None:
    """``metadata.name`` of a document's node graph, if it is a plain string there."""
    metadata = dict(_children(root)).get("metadata")
    name = dict(_children(metadata)).get("name") if metadata is not None else None
    return str(name.value) if isinstance(name, yaml.ScalarNode) else None


def alias_expansion(root: yaml.Node, allowed: int) -> int | AliasExpansionError:
    """Values the aliases of a composed document add (each alias counts what it repeats), or the
    error naming the first place, in document order, where they pass ``allowed``.

    Linear in the nodes the document writes: a node met again through an alias is not walked again,
    its measured size is added."""
    sizes = _expanded_sizes(root)
    seen: set[int] = set()
    added = 0
    stack: list[tuple[yaml.Node, tuple[str | int, ...], int]] = [(root, (), root.start_mark.line + 1)]
    while stack:
        node, path, line = stack.pop()
        if id(node) in seen:  # an alias (or a merge key's value): everything it repeats is added
            added += sizes[id(node)]
            if added > allowed:
                return AliasExpansionError(path, line, _node_profile(root))
            continue
        seen.add(id(node))
        stack.extend(
            (child, (*path, part), node.start_mark.line + 1) for part, child in reversed(_children(node))
        )
    return added


def _timestamp_as_text(loader: _Loader, node: yaml.Node) -> str:
    """An explicit ``!!timestamp`` stays text as well."""
    if not isinstance(node, yaml.ScalarNode):
        raise yaml.constructor.ConstructorError(None, None, "a timestamp must be a scalar", node.start_mark)
    return str(loader.construct_scalar(node))


_Loader.add_constructor(_TIMESTAMP_TAG, _timestamp_as_text)
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@dataclass(frozen=True)
class Document:
    file: str
    index: int  # position in the file, from 0
    body: dict[str, Any]


def format_path(path: tuple[str | int, ...] | list[str | int]) -> str:
    """``("spec", "storage", "teamDirectories", 0, "name")`` → ``spec.storage.teamDirectories[0].name``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


class _Budget:
    def __init__(self) -> None:
        self.nodes = 0


class _Unsupported(Exception):
    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def _plain(value: object, path: tuple[str | int, ...], budget: _Budget, active: set[int]) -> Any:
    """A deep copy made of dict/list/str/int/float/bool/None, or _Unsupported naming the place."""
    budget.nodes += 1
    if budget.nodes > MAX_NODES:
        raise _Unsupported(path, f"more than {MAX_NODES} values (after expanding YAML aliases)")
    if len(path) > MAX_DEPTH:
        raise _Unsupported(path, f"nested more than {MAX_DEPTH} levels deep")
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if not isinstance(value, dict | list):
        raise _Unsupported(path, f"a YAML {type(value).__name__} value is not allowed here")
    if id(value) in active:
        raise _Unsupported(path, "a recursive YAML alias is not allowed")
    active.add(id(value))
    try:
        if isinstance(value, list):
            return [_plain(item, (*path, index), budget, active) for index, item in enumerate(value)]
        copy: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Unsupported(path, f"the key {key!r} is not a string; quote it")
            copy[key] = _plain(item, (*path, key), budget, active)
        return copy
    finally:
        active.discard(id(value))


def _yaml_problem(file: str, exc: yaml.YAMLError) -> CatalogProblem:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}"
        what = " ".join(part for part in (exc.context, exc.problem) if part)
        return CatalogProblem(file, None, "", f"not valid YAML: {where}: {what}")
    return CatalogProblem(file, None, "", f"not valid YAML: {exc}")


def _profile_name(body: dict[str, Any]) -> str | None:
    metadata = body.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else None


def parse_documents(file: CatalogFile, problems: list[CatalogProblem]) -> list[Document]:
    """The file's non-empty YAML documents; appends a problem (and returns none) when it does not parse."""
    try:
        raw = list(yaml.load_all(file.text, Loader=_Loader))  # _Loader is a SafeLoader
    except AliasExpansionError as exc:
        problems.append(CatalogProblem(file.name, exc.profile, format_path(exc.path), exc.message))
        return []
    except yaml.YAMLError as exc:
        problems.append(_yaml_problem(file.name, exc))
        return []
    except Exception as exc:  # PyYAML's constructors raise assorted errors on odd input (!!int, !!float, ...)
        problems.append(CatalogProblem(file.name, None, "", f"not valid YAML: {type(exc).__name__}: {exc}"))
        return []
    documents: list[Document] = []
    budget = _Budget()
    for index, body in enumerate(raw):
        if body is None:
            continue
        where = f"document {index + 1}"
        if not isinstance(body, dict):
            message = f"{where} is a YAML {type(body).__name__}, not a mapping with apiVersion, kind, metadata, spec"
            problems.append(CatalogProblem(file.name, None, "", message))
            continue
        try:
            plain = _plain(body, (), budget, set())
        except _Unsupported as exc:
            field = format_path(exc.path)
            problems.append(CatalogProblem(file.name, _profile_name(body), field, exc.message))
            continue
        documents.append(Document(file=file.name, index=index, body=plain))
    return documents
