"""JSON Schema validation of one document, every error turned into a CatalogProblem a person can act on."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

# jsonschema ships no type information (types-jsonschema is not in the lint extra yet).
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

from .errors import CatalogProblem
from .jobprofiles import JOB_PROFILE_KIND, JOB_PROFILE_SCHEMA
from .parsing import format_path
from .schema import SCHEMAS

_VALIDATORS = {
    kind: Draft202012Validator(schema)
    for kind, schema in {**SCHEMAS, JOB_PROFILE_KIND: JOB_PROFILE_SCHEMA}.items()
}


def _path(error: ValidationError) -> list[str | int]:
    return [part for part in error.absolute_path if isinstance(part, str | int)]


def _unknown_fields(error: ValidationError) -> Iterator[tuple[list[str | int], str]]:
    schema = error.schema if isinstance(error.schema, dict) else {}
    known = sorted(schema.get("properties", {}))
    patterns = list(schema.get("patternProperties", {}))
    instance = error.instance if isinstance(error.instance, dict) else {}
    allowed = ", ".join(known) if known else "none"
    for key in instance:
        if key in known or any(re.search(pattern, key) for pattern in patterns):
            continue
        yield [*_path(error), key], f"unknown field; allowed here: {allowed}"


def _missing_fields(error: ValidationError) -> Iterator[tuple[list[str | int], str]]:
    instance = error.instance if isinstance(error.instance, dict) else {}
    required = error.validator_value if isinstance(error.validator_value, list) else []
    for key in required:
        if key not in instance:
            yield [*_path(error), key], "required field is missing"


def _custom_message(error: ValidationError) -> str | None:
    schema = error.schema if isinstance(error.schema, dict) else {}
    template = schema.get("errorMessage")
    if not isinstance(template, str):
        return None
    return template.replace("{value}", repr(error.instance))


def _branch_errors(error: ValidationError) -> list[ValidationError]:
    """For oneOf/anyOf: the errors from branches whose type matched (the ones the author meant)."""
    return [
        sub
        for sub in error.context or []
        if list(sub.relative_schema_path)[1:] not in (["type"], ["enum"], ["const"])
    ]


def _explain(error: ValidationError) -> Iterator[tuple[list[str | int], str]]:
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        yield from _unknown_fields(error)
    elif error.validator == "required":
        yield from _missing_fields(error)
    elif error.validator in ("oneOf", "anyOf") and (branches := _branch_errors(error)):
        for sub in branches:
            yield from _explain(sub)
    else:
        yield _path(error), _custom_message(error) or error.message


def schema_problems(kind: str, body: dict[str, Any], file: str, profile: str | None) -> list[CatalogProblem]:
    """Every schema violation in the document (kind must be a key of ``schema.SCHEMAS``)."""
    problems = {
        CatalogProblem(file, profile, format_path(path), message)
        for error in _VALIDATORS[kind].iter_errors(body)
        for path, message in _explain(error)
    }
    return sorted(problems, key=lambda p: (p.field, p.message))
