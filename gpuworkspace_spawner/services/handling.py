"""The JSON API handler every hub service here builds on: the caller from the hub (HubAuth), a 403 for a
token that grants nothing on this service, changes only with a token (never a cookie alone), bounded JSON
bodies with named fields, errors as JupyterHub's API writes them, Kubernetes failures as 502/500.

A handler's ``ops`` is its service's operations object; what this needs of it is
``ops.settings.service_name``."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from ..k8s import KubernetesError, Unavailable
from . import access
from .serving import JsonErrors, ServiceError

log = logging.getLogger("gpuworkspace.services")
MAX_BODY = 16 * 1024


class ApiHandler(JsonErrors):
    """JSON in and out; errors as ``{"status", "message"}`` like JupyterHub's own API."""

    hub_auth: Any
    caller: dict[str, Any]
    max_body = MAX_BODY  # a service whose bodies are larger sets its own
    needs_service_access = True  # refuse a token that grants nothing here (access.grants_anything_here)

    def initialize(self, ops: Any, hub_auth: Any) -> None:
        self.ops, self.hub_auth = ops, hub_auth

    def check_xsrf_cookie(self) -> None:
        """Changes need a token (Authorization header), never only a cookie: no cross-site writes."""

    async def prepare(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        model = await self.hub_auth.get_user(self, sync=False)
        if not model:
            raise ServiceError(403, "missing or invalid credentials: send 'Authorization: token <hub token>'")
        if self.needs_service_access and not access.grants_anything_here(
            model, self.ops.settings.service_name
        ):
            raise ServiceError(403, access.access_refused(model, self.ops.settings.service_name))
        token_auth = getattr(self, "_token_authenticated", False)
        if self.request.method not in ("GET", "HEAD") and not token_auth:
            raise ServiceError(403, "changes need a token in the Authorization header, not a cookie")
        self.caller = model

    def json_body(self) -> dict[str, Any]:
        """The request's JSON object (``{}`` for none), at most ``max_body`` bytes."""
        raw = self.request.body or b"{}"
        if len(raw) > self.max_body:
            raise ServiceError(413, f"request body over {self.max_body} bytes")
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise ServiceError(400, f"request body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ServiceError(400, "request body must be a JSON object")
        return body

    def body(self, allowed: dict[str, type], required: Sequence[str] = ()) -> dict[str, Any]:
        """:meth:`json_body` with only the ``allowed`` fields, of their types, and the ``required`` ones."""
        body = self.json_body()
        unknown = sorted(set(body) - set(allowed))
        if unknown:
            raise ServiceError(
                400, f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(allowed) or 'none'}"
            )
        for key in required:
            if key not in body:
                raise ServiceError(400, f"field {key!r} is required")
        for key, kind in allowed.items():
            if key in body and body[key] is not None and not isinstance(body[key], kind):
                raise ServiceError(400, f"field {key!r} must be a {kind.__name__}")
        return body

    def reply(self, obj: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(obj, sort_keys=True))

    def error_message(self, exc: BaseException | None) -> str:
        if isinstance(exc, KubernetesError):
            return f"Kubernetes API: {exc}"
        return super().error_message(exc)

    def _handle_request_exception(self, e: BaseException) -> None:
        if isinstance(e, KubernetesError):
            log.warning("%s %s: %s", self.request.method, self.request.path, e)
            self.send_error(
                502 if isinstance(e, Unavailable) else 500, exc_info=(type(e), e, e.__traceback__)
            )
            return
        super()._handle_request_exception(e)
