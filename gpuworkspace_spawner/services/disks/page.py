"""The owner's snapshot page (``/services/gpuworkspace-disks/snapshots``): list and restore one's own.

A browser logs in with the hub's OAuth (HubOAuth; users have ``access:services`` for this service).
The page lists the caller's own disks with their snapshots; each ready snapshot has a Restore form.
The form posts with the login cookie and JupyterHub's XSRF token (HubOAuth checks it for a
cookie-authenticated POST, so another site cannot post it); the restore itself is
:meth:`~.operations.DiskOperations.restore`, with the same checks, safety snapshot and audit as the
API's. Admins see their own disks here too: every user's are in the API.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from jupyterhub.services.auth import HubOAuth

from .. import access
from ..serving import JsonErrors, ServiceError, hub_prefix, login_url
from .operations import DiskOperations

TEMPLATES = Path(__file__).resolve().parents[2] / "templates" / "disks"


def environment() -> Environment:
    return Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html"]))


def disk_label(user: str, server: str) -> str:
    return f"{user}/{server}" if server else f"{user} (default server)"


class SnapshotPageHandler(JsonErrors):
    """GET: the page; POST (form: ``claim``, ``snapshot``, ``_xsrf``): restore, then the page again."""

    caller: dict[str, Any]

    def initialize(self, ops: DiskOperations, hub_auth: Any, prefix: str, templates: Environment) -> None:
        self.ops, self.hub_auth, self.prefix, self.templates = ops, hub_auth, prefix, templates

    async def prepare(self) -> None:
        self.set_header("Cache-Control", "no-store")
        model = await self.hub_auth.get_user(self, sync=False)
        if not model:
            if isinstance(self.hub_auth, HubOAuth) and self.request.method == "GET":
                self.redirect(login_url(self, self.hub_auth))
                return
            raise ServiceError(403, "missing or invalid credentials (or XSRF token): log in to the hub again")
        if model.get("kind", "user") != "user":
            raise ServiceError(403, f"{access.who(model)} is not a user: this page shows a user's own disks")
        if not access.grants_anything_here(model, self.ops.settings.service_name):
            raise ServiceError(403, access.access_refused(model, self.ops.settings.service_name))
        self.caller = model

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = (kwargs.get("exc_info") or (None, None, None))[1]
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(f"{status_code}: {self.error_message(exc)}")

    async def _render(self, result: dict[str, Any] | None = None) -> None:
        me = str(self.caller.get("name"))
        disks = []
        for item in await self.ops.workspaces(self.caller, me):
            claim = item["disk"]["claim"]
            disks.append(
                {
                    "claim": claim,
                    "kind": item["disk"]["kind"],
                    "state": item["disk"]["state"],
                    "label": disk_label(item["user"], item["server"]),
                    "snapshots": list(reversed(await self.ops.snapshots(self.caller, claim))),
                }
            )
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(
            self.templates.get_template("snapshots.html").render(
                user=me,
                disks=disks,
                result=result,
                xsrf=self.xsrf_token.decode() if isinstance(self.xsrf_token, bytes) else self.xsrf_token,
                page_url=self.request.path,
                hub_prefix=hub_prefix(self.hub_auth),
            )
        )

    async def get(self) -> None:
        await self._render()

    async def post(self) -> None:
        claim, snapshot = self.get_body_argument("claim", ""), self.get_body_argument("snapshot", "")
        if not claim or not snapshot:
            raise ServiceError(400, "the form needs a claim and a snapshot")
        try:
            answer = await self.ops.restore(self.caller, claim, snapshot)
        except ServiceError as exc:
            self.set_status(exc.status)
            await self._render({"ok": False, "message": f"Not restored: {exc.message}"})
            return
        await self._render({"ok": True, "message": answer["message"]})
