"""Editors that work where offered: JupyterLab and code-server, each behind the hub's authentication.

Real JupyterHub + proxy + devcluster. code-server cannot be installed here: the devcluster runs its
stand-in (``devcluster/gpuworkspace_devcluster/sim/codeserver.py``, a page naming itself) wherever the image contract puts
code-server -- on the golden VM image's loopback port 8080, proxied by the guest's Jupyter server at
``/vscode/`` (``sim/guest.py``), and in the ``gpuworkspace.dev/workspace-notebook`` image, where
jupyter-vscode-proxy starts it (``sim/images.py``). What is tested is the wiring a user goes through:
the hub's proxy, the single-user server's hub authentication and jupyter-server-proxy.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest

from gpuworkspace_devcluster.sim.codeserver import MARKER

from .harness import USER_AGENT, HubStack
from .test_vm_workspace import vm_objects
from .test_workspace_lifecycle import get_json, start

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("the catalog's editors are this project's spawner's")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is the answer we look at, not something to follow


def fetch(url: str, token: str | None = None) -> tuple[int, dict[str, str], str]:
    """GET without following redirects: status, headers (lower-case names) and body, a browser's first answer."""
    headers = {"User-Agent": USER_AGENT, "Accept": "text/html"}
    if token:
        headers["Authorization"] = f"token {token}"
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=30) as resp:
            return resp.status, _lower(resp.headers.items()), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, _lower(exc.headers.items()), exc.read().decode(errors="replace")


def _lower(items: Any) -> dict[str, str]:
    return {name.lower(): value for name, value in items}


def user_token(stack: HubStack, user: str) -> str:
    if stack.hub.api("GET", f"/users/{user}")[0] == 404:
        assert stack.hub.api("POST", f"/users/{user}")[0] == 201
    status, body = stack.hub.api("POST", f"/users/{user}/tokens", {"note": "e2e editors"})
    assert status in (200, 201), body
    return str(body["token"])


def assert_both_editors_behind_the_hub_login(stack: HubStack, user: str, server: str) -> None:
    """The user's token gets JupyterLab and code-server; no token or another user's never gets either."""
    base = f"{stack.url}/user/{user}/{server}"
    token, stranger = user_token(stack, user), user_token(stack, f"{user}-other")

    status, headers, page = fetch(f"{base}/", token)  # the server's root opens the chosen editor
    location = urlsplit(headers.get("location", "")).path
    assert status == 302 and location == f"/user/{user}/{server}/vscode/", (status, headers, page[:300])
    status, _, page = fetch(f"{base}/lab", token)
    assert status == 200 and "JupyterLab" in page, page[:300]
    status, _, page = fetch(f"{base}/vscode/", token)
    assert status == 200 and MARKER in page, page[:300]

    for path in ("lab", "vscode/", "vscode/some/file?folder=/etc"):
        status, headers, page = fetch(f"{base}/{path}")  # no login: the hub's OAuth login, not the editor
        assert status == 302, (path, status, page[:200])
        assert urlsplit(headers["location"]).path in ("/hub/api/oauth2/authorize", "/hub/login"), headers
        assert MARKER not in page and "JupyterLab" not in page
        status, _, page = fetch(f"{base}/{path}", stranger)  # logged in as someone else: refused
        assert status == 403 and MARKER not in page, (path, status, page[:200])


@contextmanager
def running(stack: HubStack, user: str, server: str, profile: str) -> Iterator[None]:
    """The user's server started with code-server chosen; stopped afterwards, whatever happened."""
    user_token(stack, user)
    start(stack, user, server, {"profile": profile, "ide": "code-server"})
    try:
        yield
    finally:
        stack.hub.stop_server(user, server)


def test_vm_workspace_serves_jupyterlab_and_code_server_behind_the_hub_login(stack: HubStack) -> None:
    user, server = "vmeditor", "ws"
    with running(stack, user, server, "vm-workstation"):
        (service,) = get_json(stack, "service", "-l", f"gpuworkspace.dev/user={user}")["items"]
        assert [p["port"] for p in service["spec"]["ports"]] == [8888]  # 8080 stays inside the guest
        (vmi,) = vm_objects(stack, user)["vmi"]
        interfaces = get_json(stack, "vmi", vmi)["spec"]["domain"]["devices"]["interfaces"]
        assert [p["port"] for i in interfaces for p in i.get("ports", [])] == [8888]
        # the golden image declares code-server: the guest's JupyterLab offers "Open VS Code"
        lab = fetch(f"{stack.url}/user/{user}/{server}/lab", stack.admin_token)[2]
        assert '"gpuworkspaceEditors": "code-server,jupyterlab"' in lab, lab[:300]
        assert_both_editors_behind_the_hub_login(stack, user, server)


def test_container_code_server_through_jupyter_server_proxy(stack: HubStack) -> None:
    user, server = "coder", "ide"
    with running(stack, user, server, "e2e-code-server"):
        (pod,) = get_json(stack, "pods", "-l", f"gpuworkspace.dev/user={user}")["items"]
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert (env["JUPYTERHUB_DEFAULT_URL"], env["GPUWORKSPACE_IDE"]) == ("/vscode/", "code-server")
        # the launcher's "Open VS Code": the image's declared editors, in the pod and in JupyterLab's page
        assert env["GPUWS_EDITORS"] == "code-server,jupyterlab"  # catalog order (IDES)
        lab = fetch(f"{stack.url}/user/{user}/{server}/lab", stack.admin_token)[2]
        assert '"gpuworkspaceEditors": "code-server,jupyterlab"' in lab, lab[:300]
        info = fetch(f"{stack.url}/user/{user}/{server}/server-proxy/servers-info", stack.admin_token)[2]
        assert "vscode" in {s["name"] for s in json.loads(info)["server_processes"]}
        assert_both_editors_behind_the_hub_login(stack, user, server)


def test_an_editor_the_image_does_not_declare_is_not_offered(stack: HubStack) -> None:
    user_token(stack, "labonly")
    status, body = stack.hub.api(
        "POST", "/users/labonly/servers/x", {"profile": "cpu-small", "ide": "code-server"}
    )
    assert status == 400 and "Choose one of: jupyterlab." in json.dumps(body), body
    assert stack.hub.server("labonly", "x") is None
