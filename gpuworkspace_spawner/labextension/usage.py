"""What the usage panel plots: this workspace's last hour, from the attribution service's answer (pure).

The server extension (:mod:`.handlers`) asks the attribution service for this workspace's last hour
(``api/v1/workspaces/<user>/<server>/history``) with the single-user server's own token and hands the
answer here. It is untrusted input: a point that is not two finite numbers is left out, the series are
capped in length, and anything else is "unavailable" with a reason, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from .figures import Answer, Json, Workspace, _number, _text, unavailable

# the series the panel plots: name in the attribution API -> (title, unit)
SERIES = {
    "gpu_util_percent": ("GPU utilisation", "%"),
    "gpu_mem_used_mib": ("GPU memory", "MiB"),
    "cpu_cores": ("CPU", "cores"),
    "memory_bytes": ("Memory", "bytes"),
}
MAX_POINTS = 1000  # an hour at the service's finest step is 240; more is not a figure of ours
API_SUFFIX = "/api/v1"


def history_path(workspace: Workspace) -> str:
    """This workspace's last hour in the attribution API (relative to its api/v1)."""
    return f"{workspace.attribution_path()}/history"


def dashboard_url(attribution_url: str) -> str:
    """The attribution dashboard as the browser reaches it: the service's public path on the hub's
    proxy (``/services/gpuworkspace-attribution/``), from ``$GPUWS_ATTRIBUTION_URL``'s path; "" unknown.

    Only the path is kept: the server may reach the service at an address the browser cannot (the
    proxy's in-cluster name), but both go through the same proxy path.
    """
    path = urlsplit(attribution_url).path.rstrip("/")
    if not path.endswith(API_SUFFIX):
        return ""
    return path[: -len(API_SUFFIX)] + "/"


def _points(raw: Any) -> list[list[float]]:
    points: list[list[float]] = []
    if not isinstance(raw, list):
        return points
    for item in raw[-MAX_POINTS:]:
        if isinstance(item, list) and len(item) == 2:  # noqa: PLR2004 -- [t, value]
            t, value = _number(item[0]), _number(item[1])
            if t is not None and value is not None:
                points.append([t, value])
    return points


def _limits(raw: Any) -> Json:
    raw = raw if isinstance(raw, Mapping) else {}
    return {k: _number(raw.get(k)) for k in ("cpu_cores", "memory_bytes")}


def history_view(answer: Answer) -> Json:
    """The panel's series, the GPU figures' basis and the limits (the plots' scales)."""
    if not answer.ok:
        return unavailable(answer.reason)
    body = answer.body
    if not isinstance(body, Mapping):
        return unavailable("the attribution service answered something other than a JSON object")
    series = body.get("series")
    series = series if isinstance(series, Mapping) else {}
    return {
        "available": True,
        "at": _number(body.get("at")),
        "window_s": _number(body.get("window_s")),
        "basis": _text(body.get("basis"), 40) or "none",
        "gpu_mode": _text(body.get("gpu_mode"), 40) or "none",
        "caveat": _text(body.get("caveat")),
        "limits": _limits(body.get("limits")),
        "series": {name: _points(series.get(name)) for name in SERIES},
    }


def history_body(workspace: Workspace, attribution: Answer, disk: Json) -> Json:
    """What ``GET gpuworkspace/api/history`` answers: the last hour, the home disk, the dashboard's link."""
    return {
        "user": workspace.user,
        "server": workspace.server,
        "usage": history_view(attribution),
        "disk": disk,
        "dashboard_url": dashboard_url(workspace.attribution_url),
    }
