"""A submission's body checked, and the Job's name (pure).

Every refusal names the field and what is wrong; the service answers it with 400. Which job profiles
a user may use is the catalog's ``access`` (a profile outside the user's groups is refused exactly like
an unknown one, so the answer does not tell that it exists).
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..catalog.jobprofiles import JobProfile
from ..catalog.model import Catalog
from ..manifests.names import dns_label
from .manifests import Scalar, Submission

MAX_PARAMETERS = 64
MAX_VALUE_CHARS = 4096
MAX_PATH_CHARS = 1024
_PARAMETER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_NAME_MAX = 52  # Job names end up in pod names (plus -xxxxx) and in label values
FIELDS = frozenset({"profile", "notebook", "script", "parameters", "server"})


class SubmissionError(ValueError):
    """The body is refused; ``message`` is for the user."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Request:
    """A checked body (the Job's name is given later, with its random suffix)."""

    profile: JobProfile
    server: str
    notebook: str | None
    script: str | None
    parameters: Mapping[str, Scalar]

    def submission(self, name: str) -> Submission:
        return Submission(name=name, notebook=self.notebook, script=self.script, parameters=self.parameters)


def _path(body: Mapping[str, Any], key: str, suffix: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_PATH_CHARS:
        raise SubmissionError(f"field {key!r} must be a path in your home directory (a non-empty string)")
    normal = posixpath.normpath(value)
    if value.startswith("/") or normal == ".." or normal.startswith("../") or "\0" in value:
        raise SubmissionError(
            f"field {key!r}: {value!r} must be relative to your home directory, without '..'"
        )
    if not normal.endswith(suffix):
        raise SubmissionError(f"field {key!r}: {value!r} is not a {suffix} file")
    return normal


def _parameters(body: Mapping[str, Any]) -> dict[str, Scalar]:
    raw = body.get("parameters")
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise SubmissionError("field 'parameters' must be an object of name: value")
    if len(raw) > MAX_PARAMETERS:
        raise SubmissionError(f"field 'parameters': at most {MAX_PARAMETERS} parameters")
    out: dict[str, Scalar] = {}
    for name, value in raw.items():
        if not _PARAMETER.fullmatch(name):
            raise SubmissionError(f"parameters.{name}: not a Python identifier")
        if not isinstance(value, str | int | float | bool) or (
            isinstance(value, float) and not math.isfinite(value)
        ):
            raise SubmissionError(f"parameters.{name}: a value is a string, a number or true/false")
        if isinstance(value, str) and (len(value) > MAX_VALUE_CHARS or "\0" in value):
            raise SubmissionError(f"parameters.{name}: at most {MAX_VALUE_CHARS} characters")
        out[name] = value
    return out


def check_submission(
    body: Mapping[str, Any], catalog: Catalog, *, user: str, groups: frozenset[str]
) -> Request:
    """The body of ``POST api/v1/jobs`` checked against the catalog and the user's groups."""
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise SubmissionError(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(FIELDS))}")
    slug = body.get("profile")
    if not isinstance(slug, str) or not slug:
        raise SubmissionError("field 'profile' is required: the name of a job profile")
    profile = catalog.get_job_profile(slug)
    if profile is None or not profile.access.allows(user, groups):
        names = ", ".join(p.slug for p in catalog.job_profiles if p.access.allows(user, groups)) or "none"
        raise SubmissionError(f"{slug!r} is not a job profile you can use (yours: {names})")
    notebook, script = _path(body, "notebook", ".ipynb"), _path(body, "script", ".py")
    if (notebook is None) == (script is None):
        raise SubmissionError("give exactly one of 'notebook' (a .ipynb) and 'script' (a .py) to run")
    server = body.get("server", "")
    if not isinstance(server, str):
        raise SubmissionError("field 'server' must be the workspace's server name ('' for the default one)")
    return Request(profile, server, notebook, script, _parameters(body))


def job_name(user: str, path: str, suffix: str) -> str:
    """``<user>-<file stem>-<suffix>``, a DNS-1123 label short enough for the Job's pod names."""
    stem = posixpath.splitext(posixpath.basename(path))[0]
    head = dns_label(f"{user}-{stem}", max_length=_NAME_MAX - len(suffix) - 1)
    return f"{head}-{suffix}"
