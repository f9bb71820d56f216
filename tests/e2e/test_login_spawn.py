"""End to end through JupyterHub, its proxy, the mock OIDC provider and the devcluster.

- In a browser: alice logs in on the mock provider's page, picks the ``cpu-small`` profile on the
  spawn page and lands in JupyterLab served by a real single-user server in a devcluster pod.
- Over REST: an admin token starts bob's named server ``s1`` with ``{"profile": "cpu-small"}``, waits
  until the hub reports it ready and reaches the server's own API through the proxy.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from .harness import HubStack, http, logged_in_page

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

PROFILE = "cpu-small"


def _pick_profile(page: Any, slug: str) -> None:
    """Select a profile on the spawn page: KubeSpawner's radio buttons, or a form keyed by the slug."""
    choice = page.locator(f'input[name="profile"][value="{slug}"], option[value="{slug}"]')
    choice.first.wait_for(state="attached", timeout=10_000)
    if choice.first.evaluate("el => el.tagName") == "OPTION":
        page.locator('select[name="profile"]').select_option(slug)
    else:
        choice.first.check()


def test_browser_login_spawn_lands_in_jupyterlab(stack: HubStack, browser: Any) -> None:
    with logged_in_page(browser, stack, "alice") as page:
        if "/hub/spawn" not in page.url:
            page.goto(f"{stack.url}/hub/spawn")
        # the spawn page lists the profiles (KubeSpawner: one radio button per slug)
        page.locator("#spawn_form").wait_for()
        if stack.hub.spawner == "gpuworkspace":
            _check_profile_cards(page)
        _pick_profile(page, PROFILE)
        page.locator('#spawn_form [type="submit"]').click()
        page.wait_for_url(f"{stack.url}/user/alice/lab*", timeout=120_000)
        page.locator("#jp-main-dock-panel").wait_for(timeout=60_000)
        assert "JupyterLab" in page.title()
    status, model = stack.hub.api("GET", "/users/alice")
    assert status == 200
    assert sorted(model["groups"]) == ["researchers"]  # the OIDC groups claim became hub groups
    stack.hub.stop_server("alice")


def test_browser_starts_a_vm_workspace_from_the_spawn_page(stack: HubStack, browser: Any) -> None:
    """A VM profile picked on the spawn page: JupyterLab served from inside the VM (its root disk)."""
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("VM workspaces are this project's spawner's")
    with logged_in_page(browser, stack, "bob") as page:
        page.goto(f"{stack.url}/hub/spawn/bob/vmws")
        page.locator("#spawn_form").wait_for()
        _pick_profile(page, "vm-workstation")
        # the selected card shows its details
        assert "whole Linux VM" in page.locator("label[for=profile-item-vm-workstation]").inner_text()
        page.locator('#spawn_form [type="submit"]').click()
        page.wait_for_url(f"{stack.url}/user/bob/vmws/lab*", timeout=120_000)
        page.locator("#jp-main-dock-panel").wait_for(timeout=60_000)
        assert "JupyterLab" in page.title()
        page.goto(f"{stack.url}/hub/home")  # the home page tells the workspace's state
        row = page.locator('#gpuws-workspaces tr[data-server-name="vmws"] .gpuws-state')
        assert row.inner_text() == "Running"
    kinds = [k["metadata"]["name"] for k in _vm_objects(stack, "bob")]
    assert kinds, "no VirtualMachine for bob/vmws"
    stack.hub.stop_server("bob", "vmws")


def _vm_objects(stack: HubStack, user: str) -> list[dict[str, Any]]:
    env = {**os.environ, "KUBECONFIG": str(stack.kubeconfig)}
    out = subprocess.run(
        ["kubectl", "-n", "gpu-workspaces", "get", "vm", "-l", f"gpuworkspace.dev/user={user}", "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def _check_profile_cards(page: Any) -> None:
    """The catalog's cards say what each GPU mode isolates, what persists and what is wiped: a card shows
    its summary, and the selected one its details (the time-sliced card's here)."""
    offered = page.locator('input[name="profile"]').evaluate_all("els => els.map(e => e.value)")
    assert "gpu-exclusive" not in offered  # alice is not in gpu-users
    assert {"cpu-small", "gpu-shared", "gpu-mig"} <= set(offered)
    page.locator('input[name="profile"][value="gpu-shared"]').check()
    form = page.locator("label[for=profile-item-gpu-shared]").inner_text()
    for words in (
        "Kept:",
        "/home/jovyan",
        "Wiped:",
        "/scratch",
        "stops after",
        "no memory or fault isolation",
    ):
        assert words in form, words


def test_rest_start_named_server_and_reach_it_through_the_proxy(stack: HubStack) -> None:
    stack.hub.start_server("bob", "s1", {"profile": PROFILE})
    stack.hub.wait_ready("bob", "s1")
    server = stack.hub.server("bob", "s1")
    assert server is not None
    assert server["url"] == "/user/bob/s1/"
    status, body = http(
        "GET", f"{stack.url}/user/bob/s1/api/status", headers={"Authorization": f"token {stack.admin_token}"}
    )
    assert status == 200, body[:500]
    assert "last_activity" in json.loads(body)
    # the server runs in a devcluster pod created through the Kubernetes API
    creates = [r for r in stack.requests_log() if r["verb"] == "create" and r["resource"] == "pods"]
    assert creates, "no pod was created through the Kubernetes API"
    stack.hub.stop_server("bob", "s1")
    status, _ = http(
        "GET", f"{stack.url}/user/bob/s1/api/status", headers={"Authorization": f"token {stack.admin_token}"}
    )
    assert status != 200


def test_server_survives_a_hub_restart(stack: HubStack) -> None:
    """The hub keeps only names; after a restart it finds the running pod and routes to it again."""
    stack.hub.start_server("bob", "keep", {"profile": PROFILE})
    stack.hub.wait_ready("bob", "keep")
    stack.restart_hub()
    server = stack.hub.server("bob", "keep")
    assert server is not None and server["ready"], server
    status, body = http(
        "GET",
        f"{stack.url}/user/bob/keep/api/status",
        headers={"Authorization": f"token {stack.admin_token}"},
    )
    assert status == 200, body[:500]
    stack.hub.stop_server("bob", "keep")
