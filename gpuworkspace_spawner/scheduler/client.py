"""The gpuworkspace-jobs API as the single-user server calls it: with the server's own hub token.

The token (``JUPYTERHUB_API_TOKEN``) carries ``access:services!service=gpuworkspace-jobs`` when the hub
grants it (``Spawner.server_token_scopes``, hub_config/jupyterhub_config.py); the service accepts it
for this user's own jobs only. No Kubernetes credential is ever in the workspace.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from jupyter_scheduler.exceptions import SchedulerError
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

NO_ANSWER = 599  # tornado's code for a request that got no HTTP answer
URL_ENV = "GPUWS_JOBS_URL"  # e.g. http://gpuworkspace-jobs.jhub:10105/services/gpuworkspace-jobs/api/v1


class JobsApiError(SchedulerError):
    """The jobs API refused or could not be reached; the message says which and why, for the user."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class JobsClient:
    """``call`` the jobs API at ``url`` (its ``.../api/v1``) with ``token``."""

    def __init__(self, url: str, token: str, *, timeout_s: float = 60) -> None:
        self.url, self.token, self.timeout_s = url.rstrip("/"), token, timeout_s

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None, *, url: str = "") -> JobsClient:
        env = os.environ if env is None else env
        url = url or env.get(URL_ENV, "")
        token = env.get("JUPYTERHUB_API_TOKEN", "")
        if not url:
            raise JobsApiError(
                503,
                f"notebook jobs are not set up here: ${URL_ENV} (the gpuworkspace-jobs API's URL) is unset",
            )
        if not token:
            raise JobsApiError(503, "notebook jobs need the hub's token: $JUPYTERHUB_API_TOKEN is unset")
        return cls(url, token)

    async def call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """The JSON answer of ``method`` on ``path`` (relative to ``api/v1``); errors as
        :class:`JobsApiError` with the service's own message."""
        request = HTTPRequest(
            f"{self.url}/{quote(path)}",
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
            body=None if body is None else json.dumps(body),
            request_timeout=self.timeout_s,
            follow_redirects=False,
        )
        try:
            answer = await AsyncHTTPClient().fetch(request, raise_error=False)
        except OSError as exc:
            raise JobsApiError(502, f"cannot reach the jobs API at {self.url}: {exc}") from None
        text = answer.body.decode("utf-8", "replace") if answer.body else ""
        try:
            data = json.loads(text) if text else None
        except ValueError:
            data = None
        if answer.code >= HTTPStatus.BAD_REQUEST or answer.code == NO_ANSWER:
            message = data.get("message") if isinstance(data, dict) else None
            words = message or (text[:200] if text else answer.reason or "no answer")
            raise JobsApiError(answer.code, f"the jobs API answered {answer.code}: {words}")
        if answer.code >= HTTPStatus.MULTIPLE_CHOICES:
            where = answer.headers.get("Location", "?")
            raise JobsApiError(
                answer.code, f"the jobs API answered {answer.code} (to {where}): is ${URL_ENV} right?"
            )
        return data
