"""The hand-off to a job that a culler warning offers in JupyterLab, and whether this server may make it (pure).

The idle culler marks a notice ``"handoff": true`` where its ``--job-handoff`` applies (a stop for the
maximum session length, or a workspace holding a GPU: docs/reference/culler.md). JupyterLab turns that
into a "Run as a job" action on the notification only where this server can actually submit a job:

- the jobs service is configured for it: ``$GPUWS_JOBS_URL`` (the hub sets it, and gives the server's
  token ``access:services!service=gpuworkspace-jobs``, when the jobs service runs);
- the jobs API lists at least one job profile the user may submit to (``GET api/v1/profiles``, asked
  with the server's own token, which the service answers for this user only).

The jobs API is asked only while a warning offers the hand-off, not on every poll of the status bar.
A warning keeps ``handoff: false`` whenever either is missing, and ``jobs`` in the status says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .figures import JOBS_URL_ENV, Answer, Json, unavailable

MAX_PROFILES = 50  # what the status answer carries (names only); the form lists them all
NOT_ASKED = "not asked: no warning offers the jobs hand-off"


def offers_handoff(culler: Json) -> bool:
    """Whether any of this server's warnings offers the hand-off (only then is the jobs API asked)."""
    warnings = culler.get("warnings") if culler.get("available") else None
    return isinstance(warnings, list) and any(w.get("handoff") is True for w in warnings)


def jobs_view(answer: Answer | None, jobs_url: str) -> Json:
    """The job profiles this user may submit to, from the jobs API's ``profiles`` answer (untrusted)."""
    if not jobs_url:
        return unavailable(f"${JOBS_URL_ENV} is unset: no jobs service for this server")
    if answer is None:
        return unavailable(NOT_ASKED)
    if not answer.ok:
        return unavailable(answer.reason)
    items = answer.body.get("items") if isinstance(answer.body, Mapping) else None
    if not isinstance(items, list):
        return unavailable("the jobs service answered something other than {items: [...]}")
    names = [_name(p) for p in items]
    profiles = [n for n in names if n][:MAX_PROFILES]
    if not profiles:
        return unavailable("no job profile is open to you (the job profiles' access lists)")
    return {"available": True, "profiles": profiles}


def _name(profile: Any) -> str:
    name = profile.get("name") if isinstance(profile, Mapping) else None
    return name[:253] if isinstance(name, str) else ""


def with_jobs(body: Json, jobs: Json) -> Json:
    """The status body with ``jobs`` added, and each warning's ``handoff`` true only where the culler
    offers it and this user may submit a job (a new body: ``body`` is not changed)."""
    culler = body.get("culler", {})
    if culler.get("available"):
        allowed = jobs.get("available") is True
        warnings = [{**w, "handoff": w.get("handoff") is True and allowed} for w in culler["warnings"]]
        culler = {**culler, "warnings": warnings}
    return {**body, "culler": culler, "jobs": jobs}
