"""The server extension's HTTP handlers: ask the services with the server's own token, answer the front end.

I/O shell around :mod:`.figures`. Polling the status is not activity (``_track_activity = False``: the
idle culler reads the server's ``/api/status`` ``last_activity``, which every other API request moves);
"I'm still working" is, on purpose and nothing more: it moves that ``last_activity`` like any API call
the user makes, and reports it to the hub with the server's ``users:activity!user`` scope.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from .editors import page_options
from .figures import (
    ATTRIBUTION_URL_ENV,
    CULLER_URL_ENV,
    Answer,
    Workspace,
    activity_body,
    disk_view,
    refusal,
    status_body,
    workspace_from_env,
)
from .handoff import jobs_view, offers_handoff, with_jobs
from .usage import history_body, history_path

TIMEOUT_S = 5.0  # per service call: the status bar polls; a slow service is "unavailable", not a hang


async def _call(url: str, token: str, service: str, *, method: str = "GET", body: Any = None) -> Answer:
    """One JSON call with the server's token; any failure becomes an :class:`Answer` with a reason."""
    if not token:
        return Answer(reason="$JUPYTERHUB_API_TOKEN is unset: this server was not started by JupyterHub")
    request = HTTPRequest(
        url,
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        body=None if body is None else json.dumps(body),
        connect_timeout=TIMEOUT_S,
        request_timeout=TIMEOUT_S,
    )
    try:
        reply = await AsyncHTTPClient().fetch(request, raise_error=False)
    except HTTPClientError as e:
        return Answer(reason=f"{service} could not be read: {e}")
    except OSError as e:
        return Answer(reason=f"{service} is unreachable: {e.strerror or e}")
    if reply.code == 599:  # noqa: PLR2004 -- tornado's "no HTTP answer"
        return Answer(reason=f"{service} is unreachable: {reply.error}")
    try:
        parsed = json.loads(reply.body) if reply.body else None
    except ValueError:
        parsed = None
    if reply.code >= 300:  # noqa: PLR2004
        return Answer(reason=refusal(reply.code, parsed, service))
    return Answer(body=parsed)


def _disk(root: str) -> dict[str, Any]:
    try:
        fs = os.statvfs(root)
    except OSError as e:
        return disk_view(None, None, f"the home directory {root} cannot be read: {e.strerror}")
    return disk_view(fs.f_blocks * fs.f_frsize, fs.f_bavail * fs.f_frsize)


class _Base(APIHandler):
    def initialize(self, workspace: Workspace, token: str, home: str) -> None:
        self.workspace, self.hub_token, self.home = workspace, token, home

    async def attribution(self, path: str) -> Answer:
        """The attribution service's answer for ``path`` (relative to its api/v1), with the server's token."""
        if not self.workspace.attribution_url:
            return Answer(reason=f"${ATTRIBUTION_URL_ENV} is unset: no attribution service here")
        url = f"{self.workspace.attribution_url}/{path}"
        return await _call(url, self.hub_token, "the GPU attribution service")


class StatusHandler(_Base):
    """``GET gpuworkspace/api/status``: polled by the status bar; not the user's activity."""

    _track_activity = False

    @web.authenticated
    async def get(self) -> None:
        ws = self.workspace
        attribution = await self.attribution(ws.attribution_path())
        if ws.culler_url:
            culler = await _call(f"{ws.culler_url}/notices", self.hub_token, "the idle culler")
        else:
            culler = Answer(reason=f"${CULLER_URL_ENV} is unset: no idle culler here")
        body = status_body(ws, attribution, culler, _disk(self.home), now=datetime.now(UTC))
        jobs = None  # the jobs API is asked only while a warning offers the hand-off to a job
        if ws.jobs_url and offers_handoff(body["culler"]):
            jobs = await _call(f"{ws.jobs_url}/profiles", self.hub_token, "the jobs service")
        body = with_jobs(body, jobs_view(jobs, ws.jobs_url))
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(body))


class ActivityHandler(_Base):
    """``POST gpuworkspace/api/activity``: "I'm still working" (this request is the server's activity)."""

    @web.authenticated
    async def post(self) -> None:
        ws = self.workspace
        now = datetime.now(UTC)
        hub = Answer(reason="$JUPYTERHUB_API_URL is unset")
        if ws.hub_api_url:
            url = f"{ws.hub_api_url}/{ws.activity_path()}"
            hub = await _call(url, self.hub_token, "the hub", method="POST", body=activity_body(ws, now=now))
        self.finish(
            json.dumps(
                {
                    "recorded_at": now.isoformat().replace("+00:00", "Z"),
                    "server": True,  # this request moved the server's last_activity
                    "hub": hub.ok,
                    "reason": hub.reason,
                }
            )
        )


class HistoryHandler(_Base):
    """``GET gpuworkspace/api/history``: the usage panel's last hour; polled while it is open, not activity."""

    _track_activity = False

    @web.authenticated
    async def get(self) -> None:
        ws = self.workspace
        attribution = await self.attribution(history_path(ws))
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(history_body(ws, attribution, _disk(self.home))))


def setup_handlers(serverapp: Any) -> None:
    """Add the routes to the server (called by jupyter_server when it loads the extension)."""
    workspace = workspace_from_env(os.environ)
    # the home disk: the server's root directory (the home volume's mount in a workspace)
    home = os.path.expanduser(serverapp.root_dir or "~")
    args = {"workspace": workspace, "token": os.environ.get("JUPYTERHUB_API_TOKEN", ""), "home": home}
    base = url_path_join(serverapp.web_app.settings["base_url"], "gpuworkspace", "api")
    serverapp.web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "status"), StatusHandler, args),
            (url_path_join(base, "activity"), ActivityHandler, args),
            (url_path_join(base, "history"), HistoryHandler, args),
        ],
    )
    serverapp.log.info("gpuworkspace: status for %s at %sstatus", workspace.label, base + "/")
    # the profile's declared editors, for the launcher's "Open VS Code" (editors.py)
    serverapp.web_app.settings.setdefault("page_config_data", {}).update(page_options(os.environ))
