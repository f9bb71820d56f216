"""jupyter-scheduler's models to and from the gpuworkspace-jobs API (pure: dicts in, dicts out).

JupyterLab's "Create Notebook Job" dialog sends a ``CreateJob`` (a notebook path relative to the
server's root directory, an environment, string parameters); the jobs API takes a submission (a path
relative to the home directory, a job profile, typed parameters). Each job the API lists becomes a
``DescribeJob`` for the Notebook Jobs panel. The pydantic models themselves are built at the edge
(:mod:`gpuworkspace_spawner.scheduler.backend`).
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

Scalar = str | int | float | bool

# the jobs API's states (gpuworkspace_spawner/jobs/state.py) as jupyter-scheduler's Status values
STATUS: Mapping[str, str] = {
    "queued": "QUEUED",
    "running": "IN_PROGRESS",
    "succeeded": "COMPLETED",
    "failed": "FAILED",
    "cancelling": "STOPPING",
}
STOPPED = "STOPPED"
OUTPUT_FORMAT = "ipynb"  # what papermill writes; the job makes no HTML
RUNNABLE = (".ipynb", ".py")


class Refused(ValueError):
    """A request this backend cannot carry out; ``message`` is for the user."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Paths:
    """Where the single-user server's files are: its root directory (the paths JupyterLab sends are
    relative to it) and the home directory (the jobs API's paths are relative to it)."""

    root_dir: str
    home_dir: str


def parameter_value(text: str) -> Scalar:
    """A parameter typed in the dialog (always a string) as the notebook gets it: ``3`` and ``0.5`` are
    numbers, ``true``/``false`` (any case) booleans, anything else a string; quote a value (``"3"``)
    to keep it a string."""
    stripped = text.strip()
    if len(stripped) > 1 and stripped[0] == stripped[-1] and stripped[0] in "\"'":
        return stripped[1:-1]
    if stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    for kind in (int, float):
        try:
            value = kind(stripped)
        except ValueError:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            break
        return value
    return text


def home_relative(input_uri: str, paths: Paths) -> str:
    """The notebook's path relative to the home directory, from a path relative to the root dir."""
    absolute = posixpath.normpath(posixpath.join(paths.root_dir, input_uri))
    home = posixpath.normpath(paths.home_dir)
    if not (absolute + "/").startswith(home.rstrip("/") + "/") or absolute == home:
        raise Refused(
            f"{input_uri!r} is outside your home directory ({home}): a job gets a snapshot of your"
            " home disk, so the notebook must be on it"
        )
    return posixpath.relpath(absolute, home)


def submission(model: Mapping[str, Any], paths: Paths, *, server: str) -> dict[str, Any]:
    """The jobs API's ``POST api/v1/jobs`` body for a ``CreateJob`` (as a dict)."""
    input_uri = str(model.get("input_uri") or "")
    if not input_uri.endswith(RUNNABLE):
        raise Refused(
            f"{input_uri or 'the input'!r}: only a notebook (.ipynb) or a script (.py) runs as a job"
        )
    profile = str(model.get("runtime_environment_name") or "")
    if not profile:
        raise Refused("choose a job profile (the dialog's Environment)")
    formats = [f for f in model.get("output_formats") or [] if f != OUTPUT_FORMAT]
    if formats:
        raise Refused(f"output format(s) {', '.join(formats)} are not made by jobs: only {OUTPUT_FORMAT}")
    path = home_relative(input_uri, paths)
    key = "notebook" if path.endswith(".ipynb") else "script"
    raw = model.get("parameters") or {}
    return {
        "profile": profile,
        key: path,
        "parameters": {str(k): parameter_value(str(v)) for k, v in raw.items()},
        "server": server,
    }


def epoch_ms(timestamp: Any) -> int | None:
    """An RFC 3339 time (``2026-01-02T03:04:05Z``) as jupyter-scheduler's milliseconds since the epoch."""
    if not isinstance(timestamp, str) or not timestamp:
        return None
    try:
        return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _in_workspace(path: str, paths: Paths) -> str | None:
    """``path`` (absolute, as the workspace sees it) relative to the root dir, or None if outside it."""
    root = posixpath.normpath(paths.root_dir)
    normal = posixpath.normpath(path)
    if not path.startswith("/") or not (normal + "/").startswith(root.rstrip("/") + "/"):
        return None
    return posixpath.relpath(normal, root)


def job_files(view: Mapping[str, Any], paths: Paths) -> tuple[list[dict[str, Any]], bool]:
    """The job's files as the panel lists them, and whether they are already in the workspace (no
    download needed): the input (its path in the workspace) and the executed notebook, which the job
    writes to its profile's output target."""
    what = str(view.get("notebook") or view.get("script") or "")
    files: list[dict[str, Any]] = []
    if what:
        files.append(
            {
                "display_name": "Input",
                "file_format": "input",
                "file_path": _in_workspace(posixpath.join(paths.home_dir, what), paths),
            }
        )
    output = str(view.get("output") or "")
    here = _in_workspace(output, paths) if output else None
    if view.get("notebook"):
        target = posixpath.join(here, posixpath.basename(what)) if here is not None else None
        files.append({"display_name": "Notebook", "file_format": OUTPUT_FORMAT, "file_path": target})
    return files, here is not None


def status_message(view: Mapping[str, Any], in_workspace: bool) -> str:
    """Kueue's reason while queued, the Job's words when it ends; where the results are."""
    reason = str(view.get("reason") or "")
    output = str(view.get("output") or "")
    if view.get("state") in ("succeeded", "failed") and output and not in_workspace:
        return f"{reason}; results in {output}" if reason else f"results in {output}"
    return reason


def describe(view: Mapping[str, Any], paths: Paths, local: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A job of the jobs API as a ``DescribeJob`` (dict); ``local``: what this server remembers of
    its creation (the name and the parameters as typed), if it made it."""
    local = local or {}
    state = str(view.get("state") or "")
    files, in_workspace = job_files(view, paths)
    created = epoch_ms(view.get("created")) or int(local.get("create_time") or 0)
    started, finished = epoch_ms(view.get("started")), epoch_ms(view.get("finished"))
    what = str(view.get("notebook") or view.get("script") or "")
    return {
        "job_id": str(view.get("name")),
        "name": str(local.get("name") or view.get("name")),
        "input_filename": posixpath.basename(what),
        "runtime_environment_name": str(view.get("profile") or ""),
        "runtime_environment_parameters": {},
        "output_formats": [OUTPUT_FORMAT] if view.get("notebook") else [],
        "parameters": dict(local.get("parameters") or {}) or None,
        "url": f"/jobs/{view.get('name')}",
        "create_time": created,
        "update_time": finished or started or created,
        "start_time": started,
        "end_time": finished if state in ("succeeded", "failed") else None,
        "status": STATUS.get(state, "IN_PROGRESS"),
        "status_message": status_message(view, in_workspace),
        "job_files": files,
        "downloaded": in_workspace and state in ("succeeded", "failed"),
        "package_input_folder": True,  # the job gets the whole home disk as at submission
    }


def stopped(described: Mapping[str, Any], *, now_ms: int) -> dict[str, Any]:
    """A job this server stopped (cancelled: the jobs API deletes it) as the panel keeps showing it."""
    return {
        **described,
        "status": STOPPED,
        "status_message": "stopped: cancelled in the queue, its pods and code copy deleted",
        "update_time": now_ms,
        "end_time": now_ms,
        "downloaded": False,
    }


def environment(profile: Mapping[str, Any]) -> dict[str, Any]:
    """A job profile of ``GET api/v1/profiles`` as a ``RuntimeEnvironment`` (dict) of the dialog."""
    gpus = int(profile.get("gpus") or 0)
    hours = int(profile.get("maxRuntimeSeconds") or 0) / 3600
    facts = [f"{gpus} GPU{'s' if gpus != 1 else ''}" if gpus else "no GPU", f"queue {profile.get('queue')}"]
    facts.append(f"at most {hours:g} h")
    description = str(profile.get("displayName") or "")
    if profile.get("description"):
        description = (
            f"{description}: {profile['description']}" if description else str(profile["description"])
        )
    # jupyter-scheduler 2.12's Environment picker shows `name`, gives each item the value `label` and then
    # looks the choice up by `name` (create-job's EnvironmentPicker and handleSelectChange): the two must
    # be equal, or a chosen profile is lost. The display name goes to the item's tooltip, `description`.
    return {
        "name": str(profile["name"]),
        "label": str(profile["name"]),
        "description": f"{description} ({', '.join(facts)})".strip(),
        "file_extensions": ["ipynb"],
        "output_formats": [OUTPUT_FORMAT],
        "metadata": {"queue": str(profile.get("queue") or ""), "output": str(profile.get("output") or "")},
        "compute_types": None,
        "default_compute_type": None,
        "utc_only": None,
    }


def _sort_key(field: str) -> Callable[[Mapping[str, Any]], tuple[bool, Any]]:
    """Rows without the field (a job not started yet has no start_time) sort before the others."""

    def key(row: Mapping[str, Any]) -> tuple[bool, Any]:
        value = row.get(field)
        return (value is not None, value if value is not None else "")

    return key


_SORTABLE = frozenset({"create_time", "update_time", "start_time", "end_time", "name", "status"})


def select(
    jobs: Sequence[Mapping[str, Any]], query: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], int, str | None]:
    """``ListJobsQuery`` (as a dict) applied: status and name filters, sorting, a page; answers the
    page, the total count and the next page's token (an offset)."""
    wanted = [dict(j) for j in jobs]
    status = query.get("status")
    if status:
        wanted = [j for j in wanted if j["status"] == str(status)]
    name = query.get("name")
    if name:
        wanted = [j for j in wanted if str(j["name"]).startswith(str(name))]
    if query.get("job_definition_id"):
        wanted = []  # no job definitions here
    for sort in reversed(list(query.get("sort_by") or [])):
        field = str(sort.get("name"))
        if field in _SORTABLE:
            wanted.sort(key=_sort_key(field), reverse=str(sort.get("direction")) == "desc")
    try:
        start = max(int(query.get("next_token") or 0), 0)
    except ValueError:
        raise Refused(f"next_token {query.get('next_token')!r} is not a page of this list") from None
    size = int(query.get("max_items") or 1000)
    page = wanted[start : start + size]
    more = start + size < len(wanted)
    return page, len(wanted), str(start + size) if more else None
