"""The handler every hub service here builds on (the services' kit): the caller from the hub (HubAuth or
HubOAuth), a 403 for a token that grants nothing on this service, changes only with a token (never a
cookie alone), bounded JSON bodies with named fields, errors as JupyterHub's API writes them (or as plain
text on a page), Kubernetes failures as 502/500.

:class:`ServiceHandler` is the base of every service's handlers (attribution, culler, disks, jobs); it
needs ``hub_auth`` and :attr:`~ServiceHandler.service_name` from its service. :class:`ApiHandler` is the
one for services whose handlers share an operations object ``ops`` (disks, jobs): what it needs of it
is ``ops.settings.service_name``."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler
from jupyterhub.utils import url_path_join
from tornado import web

from ..k8s import KubernetesError, Unavailable
from . import access
from .serving import JsonErrors, ServiceError, finish_metrics, login_url

log = logging.getLogger("gpuworkspace.services")
MAX_BODY = 16 * 1024
TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
NO_CREDENTIALS = "missing or invalid credentials: send 'Authorization: token <hub token>'"


def page_templates(folder: str) -> Environment:
    """Jinja for a service's pages in ``templates/<folder>/``: HTML escaped, blocks without their
    surrounding blank lines."""
    return Environment(
        loader=FileSystemLoader(str(TEMPLATES / folder)),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )


def service_app(routes: list[Any], *, hub_auth: Any, prefix: str) -> web.Application:
    """A service's tornado application: its ``routes`` and, with HubOAuth (browsers), the OAuth
    callback under ``prefix``. A fresh cookie secret per process: after a restart a browser logs in
    again, without a page."""
    if isinstance(hub_auth, HubOAuth):
        routes = [*routes, (url_path_join(prefix, "oauth_callback"), HubOAuthCallbackHandler)]
    return web.Application(routes, hub_auth=hub_auth, cookie_secret=os.urandom(32))


class ServiceHandler(JsonErrors):
    """JSON in and out; errors as ``{"status", "message"}`` like JupyterHub's own API (plain text
    ``status: message`` where :attr:`answers_json` is off: a page)."""

    hub_auth: Any
    caller: dict[str, Any]
    max_body = MAX_BODY  # a service whose bodies are larger sets its own
    needs_service_access = True  # refuse a token that grants nothing here (access.grants_anything_here)
    browser_login = False  # without credentials, send a browser's GET to the hub's login (HubOAuth only)
    answers_json = True  # False: a page (HTML), its errors as plain text
    no_credentials = NO_CREDENTIALS  # the 403's message without credentials
    scrape = False  # a ``/metrics`` route: a token with read:metrics (and nothing more) is enough
    metrics_public = False  # with ``scrape``: started with ``--metrics-public``, no token at all

    @property
    def service_name(self) -> str:
        """The name the ``access:services!service=`` scope carries for this service."""
        raise NotImplementedError

    def check_xsrf_cookie(self) -> None:
        """Changes need a token (Authorization header), never only a cookie: no cross-site writes."""

    async def prepare(self) -> None:
        if self.scrape and self.metrics_public:
            return
        if self.answers_json:
            self.set_header("Content-Type", "application/json")
            self.set_header("Cache-Control", "no-store")
        if not await self.identify():
            return
        token_auth = getattr(self, "_token_authenticated", False)
        if self.request.method not in ("GET", "HEAD") and not token_auth:
            raise ServiceError(403, "changes need a token in the Authorization header, not a cookie")
        if self.scrape and not access.may_read_metrics(self.caller):
            raise ServiceError(403, f"{access.who(self.caller)} lacks the read:metrics scope")

    async def identify(self) -> bool:
        """Set :attr:`caller` from the hub; False when a browser was sent to log in (answered)."""
        model = await self.hub_auth.get_user(self, sync=False)
        if not model:
            if (
                self.browser_login
                and isinstance(self.hub_auth, HubOAuth)
                and self.request.method == "GET"
                and "Authorization" not in self.request.headers
            ):
                self.redirect(login_url(self, self.hub_auth))
                return False
            raise ServiceError(403, self.no_credentials)
        needs_access = self.needs_service_access and not self.scrape
        if needs_access and not access.grants_anything_here(model, self.service_name):
            raise ServiceError(403, access.access_refused(model, self.service_name))
        self.caller = model
        return True

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
        """``obj`` as JSON (keys sorted); bytes are sent as they are (JSON built beforehand)."""
        self.set_status(status)
        self.finish(obj if isinstance(obj, bytes) else json.dumps(obj, sort_keys=True))

    def send_metrics(self, text: bytes) -> None:
        """Prometheus' text format (a ``scrape`` route's answer)."""
        finish_metrics(self, text)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if self.answers_json:
            super().write_error(status_code, **kwargs)
            return
        exc = (kwargs.get("exc_info") or (None, None, None))[1]
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(f"{status_code}: {self.error_message(exc)}")

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


class ApiHandler(ServiceHandler):
    """A handler of a service whose handlers share one operations object (disks, jobs)."""

    def initialize(self, ops: Any, hub_auth: Any) -> None:
        self.ops, self.hub_auth = ops, hub_auth

    @property
    def service_name(self) -> str:
        return str(self.ops.settings.service_name)
