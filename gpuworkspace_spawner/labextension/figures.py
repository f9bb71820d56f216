"""What the JupyterLab status bar and the culler's notifications show, from the services' answers (pure).

The server extension (:mod:`.handlers`) asks the attribution service for this workspace
(``api/v1/workspaces/<user>/<server>``) and the idle culler for the user's notices (``api/v1/notices``)
with the single-user server's own token, reads the home disk's use, and hands the answers here. Every
answer is untrusted input: a figure of the wrong type is left out, never passed on. A service that
could not be asked is ``{"available": false, "reason": ...}`` in the body, never an error: the status
bar then says "unavailable" and JupyterLab shows no error dialog.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

Json = dict[str, Any]

ATTRIBUTION_URL_ENV = "GPUWS_ATTRIBUTION_URL"  # e.g. http://proxy/services/gpuworkspace-attribution/api/v1
CULLER_URL_ENV = "GPUWS_CULLER_URL"  # e.g. http://proxy/services/gpuworkspace-culler/api/v1
JOBS_URL_ENV = "GPUWS_JOBS_URL"  # the jobs API's api/v1, as jupyter-scheduler's backend reads it
DEFAULT_SERVER_SEGMENT = "~"  # the attribution API's name of the unnamed server in a path
# What a stop keeps and loses (docs/explanation/lifecycle.md): the culler stops, never deletes.
KEPT = "your home disk and the files on it"
LOST = "the GPU, the running kernels and their memory, and anything outside the home disk (scratch)"


@dataclass(frozen=True)
class Workspace:
    """This single-user server, from the environment JupyterHub gives it."""

    user: str
    server: str  # "" for the default server
    attribution_url: str  # the attribution API's api/v1, or "" when the hub did not set it
    culler_url: str  # the culler API's api/v1, or ""
    hub_api_url: str  # $JUPYTERHUB_API_URL
    jobs_url: str = ""  # the jobs API's api/v1, or "": no hand-off to a job (:mod:`.handoff`)

    @property
    def label(self) -> str:
        return f"{self.user}/{self.server}" if self.server else f"{self.user} (default server)"

    def attribution_path(self) -> str:
        """This workspace's detail in the attribution API (relative to its api/v1)."""
        server = quote(self.server, safe="") if self.server else DEFAULT_SERVER_SEGMENT
        return f"workspaces/{quote(self.user, safe='')}/{server}"

    def activity_path(self) -> str:
        """The hub API's activity endpoint for this user (relative to $JUPYTERHUB_API_URL)."""
        return f"users/{quote(self.user, safe='')}/activity"


def workspace_from_env(env: Mapping[str, str]) -> Workspace:
    """The workspace from $JUPYTERHUB_USER, $JUPYTERHUB_SERVER_NAME, $JUPYTERHUB_API_URL and the two
    service URLs the hub sets (:data:`ATTRIBUTION_URL_ENV`, :data:`CULLER_URL_ENV`)."""
    return Workspace(
        user=env.get("JUPYTERHUB_USER", ""),
        server=env.get("JUPYTERHUB_SERVER_NAME", ""),
        attribution_url=env.get(ATTRIBUTION_URL_ENV, "").rstrip("/"),
        culler_url=env.get(CULLER_URL_ENV, "").rstrip("/"),
        hub_api_url=env.get("JUPYTERHUB_API_URL", "").rstrip("/"),
        jobs_url=env.get(JOBS_URL_ENV, "").rstrip("/"),
    )


@dataclass(frozen=True)
class Answer:
    """One service's answer: its JSON body, or why there is none (``reason``)."""

    body: Any = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return not self.reason


def unavailable(reason: str) -> Json:
    return {"available": False, "reason": reason}


def _number(value: Any) -> float | None:
    """A finite number from untrusted JSON, else None (booleans are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _text(value: Any, limit: int = 300) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _usage(section: Any) -> Json:
    section = section if isinstance(section, Mapping) else {}
    return {k: _number(section.get(k)) for k in ("used", "request", "limit")}


def gpu_view(detail: Mapping[str, Any]) -> Json:
    """The GPU part of a workspace detail: mode, utilisation, memory and the basis they were measured on."""
    gpu = detail.get("gpu")
    gpu = gpu if isinstance(gpu, Mapping) else {}
    basis = _text(gpu.get("basis"), 40) or "none"
    return {
        "mode": _text(detail.get("gpu_mode"), 40) or "none",
        "allocated": _number(gpu.get("allocated")),
        "util_percent": _number(gpu.get("util_percent")),
        "mem_used_mib": _number(gpu.get("mem_used_mib")),
        "basis": basis,
        "caveat": _text(gpu.get("caveat")),
        "idle": gpu.get("idle") is True,
    }


def attribution_view(answer: Answer) -> Json:
    """The status bar's GPU, CPU and memory figures from the attribution service's workspace detail."""
    if not answer.ok:
        return unavailable(answer.reason)
    detail = answer.body
    if not isinstance(detail, Mapping):
        return unavailable("the attribution service answered something other than a JSON object")
    return {
        "available": True,
        "at": _number(detail.get("at")),
        "node": _text(detail.get("node"), 253),
        "profile": _text(detail.get("profile"), 253),
        "gpu": gpu_view(detail),
        "cpu": _usage(detail.get("cpu")),
        "memory": _usage(detail.get("memory")),
    }


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def notice_view(notice: Mapping[str, Any], *, now: datetime) -> Json:
    """One staged warning: the stage, the evidence the culler sees, when the stop comes, what is kept."""
    stop_at = _parse_time(notice.get("stop_at"))
    stage, stages = _number(notice.get("stage")), _number(notice.get("stages"))
    return {
        "reason": _text(notice.get("reason"), 40),
        "stage": int(stage) + 1 if stage is not None else None,  # the culler counts from 0; users from 1
        "stages": int(stages) if stages is not None else None,
        "stop_at": _text(notice.get("stop_at"), 40) if stop_at else None,
        "seconds_left": max(0, round((stop_at - now).total_seconds())) if stop_at else None,
        "evidence": _text(notice.get("evidence")),
        "last_activity": _text(notice.get("last_activity"), 40) or None,
        "activity_source": _text(notice.get("activity_source"), 200) or None,
        "dry_run": notice.get("dry_run") is True,
        "handoff": notice.get("handoff") is True,  # the culler's; :func:`.handoff.with_jobs` decides
        "kept": KEPT,
        "lost": LOST,
    }


def culler_view(answer: Answer, server: str, *, now: datetime) -> Json:
    """This server's active warnings among the user's notices (the culler answers for all of them)."""
    if not answer.ok:
        return unavailable(answer.reason)
    if not isinstance(answer.body, list):
        return unavailable("the idle culler answered something other than a JSON list")
    mine = [n for n in answer.body if isinstance(n, Mapping) and n.get("server") == server]
    return {"available": True, "warnings": [notice_view(n, now=now) for n in mine]}


def disk_view(total_bytes: int | None, free_bytes: int | None, reason: str = "") -> Json:
    """The home disk's use, from the file system the server's root directory is on."""
    if total_bytes is None or free_bytes is None or total_bytes <= 0:
        return unavailable(reason or "the home directory's file system reports no size")
    used = max(0, total_bytes - free_bytes)
    return {
        "available": True,
        "used_bytes": used,
        "total_bytes": total_bytes,
        "used_fraction": round(used / total_bytes, 4),
    }


def status_body(
    workspace: Workspace, attribution: Answer, culler: Answer, disk: Json, *, now: datetime
) -> Json:
    """What ``GET gpuworkspace/api/status`` answers."""
    return {
        "user": workspace.user,
        "server": workspace.server,
        "at": now.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "resources": attribution_view(attribution),
        "culler": culler_view(culler, workspace.server, now=now),
        "disk": disk,
    }


def activity_body(workspace: Workspace, *, now: datetime) -> Json:
    """The hub's ``POST /users/<user>/activity`` body, as jupyterhub-singleuser sends it."""
    stamp = now.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return {"last_activity": stamp, "servers": {workspace.server: {"last_activity": stamp}}}


def refusal(status: int, body: Any, service: str) -> str:
    """Why a service's answer is not usable, in words (its own JSON message where it sent one)."""
    message = body.get("message") if isinstance(body, Mapping) else None
    detail = f": {_text(message)}" if isinstance(message, str) and message else ""
    return f"{service} answered {status}{detail}"
