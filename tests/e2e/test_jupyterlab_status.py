"""The workspace inside JupyterLab, end to end: the server extension in alice's real single-user server.

alice's workspace (one whole GPU, culled after 30 s idle: ``e2e-cull-gpu``) runs with JupyterLab's news
and update checks off (the image's configuration, docs/reference/image-contract.md). Her server's
``gpuworkspace/api/status`` (what the status bar polls) shows the GPU utilisation the devcluster's
scripted load gives her pod, with its basis, asked of the attribution service with the server's own
token. That token opens her own workspace's figures and nothing of bob's (403). In Chromium, her
JupyterLab's status bar shows that utilisation; idle, the culler's warning appears as a JupyterLab
notification whose countdown is the culler's stop time, and a click on "I'm still working"
(``POST gpuworkspace/api/activity``) withdraws it at the culler's next cycle.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from .harness import HubStack, http, logged_in_page
from .test_attribution import ARTIFACTS, NS, WORKLOAD, pod_of, script, until, user_token
from .test_workspace_lifecycle import start

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

SERVER = "lab"
ATTRIBUTION = "/services/gpuworkspace-attribution/api/v1"
CULLER = "/services/gpuworkspace-culler/api/v1"
HIDDEN = """
Object.defineProperty(document, 'hidden', {get: () => true});
Object.defineProperty(document, 'visibilityState', {get: () => 'hidden'});
"""


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("the server extension and the services come with this project's spawner configuration")


def get(stack: HubStack, path: str, token: str, method: str = "GET") -> tuple[int, Any]:
    headers = {"Authorization": f"token {token}"}
    status, raw = http(method, f"{stack.url}{path}", {} if method == "POST" else None, headers=headers)
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def status_of(stack: HubStack, token: str) -> dict[str, Any]:
    code, body = get(stack, f"/user/alice/{SERVER}/gpuworkspace/api/status", token)
    assert code == 200, body
    return body  # type: ignore[no-any-return]


def server_token(stack: HubStack, pod: dict[str, Any]) -> str:
    """The token JupyterHub gave alice's server ($JUPYTERHUB_API_TOKEN in its pod, read as an admin)."""
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
    assert env.get("JUPYTERHUB_API_TOKEN"), sorted(env)
    return str(env["JUPYTERHUB_API_TOKEN"])


@contextmanager
def alices_workspace(stack: HubStack, server: str, profile: str) -> Iterator[None]:
    """alice's server ``server`` running ``profile``; afterwards its scripted load is gone and it is stopped."""
    start(stack, "alice", server, {"profile": profile})
    try:
        yield
    finally:
        stack.devcluster.control(
            WORKLOAD, {"namespace": NS, "pod": f"jupyter-alice--{server}"}, method="DELETE"
        )
        stack.hub.stop_server("alice", server)


def test_status_bar_figures_warnings_and_still_working(stack: HubStack, browser: Any) -> None:
    with alices_workspace(stack, SERVER, "e2e-cull-gpu"):
        _check(stack, browser)


def _check(stack: HubStack, browser: Any) -> None:
    alice = user_token(stack, "alice")
    pod = pod_of(stack, "alice", SERVER)
    base = f"/user/alice/{SERVER}"

    # JupyterLab does not ask about Jupyter news: fetchNews defaults to "false", the server fetches none
    code, settings = get(stack, f"{base}/lab/api/settings/@jupyterlab/apputils-extension:notification", alice)
    assert code == 200, settings
    assert settings["schema"]["properties"]["fetchNews"]["default"] == "false"
    assert settings["schema"]["properties"]["checkForUpdates"]["default"] is False
    code, page = get(stack, f"{base}/lab", alice)
    assert code == 200 and '"news": {"disabled": true}' in page
    assert '"gpuworkspaceEditors": "jupyterlab"' in page  # a JupyterLab-only image: no "Open VS Code"

    # the scripted load, as the attribution service measures it, in the status bar's answer
    script(stack, pod, gpu_util=55, mem_used_mib=4096)
    body = until(
        lambda: (s := status_of(stack, alice))["resources"].get("gpu", {}).get("util_percent") == 55 and s,
        "alice's status to show the scripted 55 % GPU",
    )
    gpu = body["resources"]["gpu"]
    assert (gpu["mode"], gpu["basis"]) == ("exclusive", "measured"), gpu
    assert body["disk"]["available"] and body["disk"]["total_bytes"] > 0
    assert body["culler"] == {"available": True, "warnings": []}

    # the server's own token: her workspace's figures, never bob's
    token = server_token(stack, pod)
    assert get(stack, f"{ATTRIBUTION}/workspaces/alice/{SERVER}", token)[0] == 200
    code, refused = get(stack, f"{ATTRIBUTION}/workspaces/bob/~", token)
    assert code == 403 and "bob" in refused["message"], refused
    assert get(stack, f"{ATTRIBUTION}/workspaces?user=bob", token)[0] == 403
    code, notices = get(stack, f"{CULLER}/notices", token)
    assert code == 200 and all(isinstance(n, dict) for n in notices), notices
    code, decisions = get(stack, f"{CULLER}/decisions", token)
    assert code == 200 and {d["user"] for d in decisions} <= {"alice"}, decisions

    # in Chromium: the status bar shows the figures; idle, the culler's warning is a notification whose
    # countdown is the culler's; "I'm still working" withdraws it at the culler's next cycle
    with logged_in_page(
        browser, stack, "alice", viewport={"width": 1400, "height": 900}, timeout_ms=90_000
    ) as page:
        # a tab in the background: JupyterLab's own polls (kernels, sessions: API activity) stand by, as
        # they do for a user working elsewhere; the status bar's poll is not activity and does not
        page.add_init_script(HIDDEN)
        page.goto(f"{stack.url}{base}/lab")
        item = page.locator(".jp-gpuworkspace-status")
        item.filter(has_text="GPU (exclusive) 55% 4.0 GiB").wait_for()
        assert "measured" in (item.get_attribute("title") or "")
        # jupyter-vscode-proxy is installed in the demo's servers, code-server is not declared: no VS Code
        page.locator(".jp-LauncherCard").first.wait_for()
        assert page.locator(".jp-LauncherCard", has_text="VS Code").count() == 0
        script(stack, pod, gpu_util=0, mem_used_mib=0)
        toast = page.locator(".Toastify__toast", has_text="Workspace stops in")
        toast.first.wait_for(timeout=90_000)
        text = toast.first.inner_text()
        code, decisions = get(stack, f"{CULLER}/decisions", stack.admin_token)
        (mine,) = [d for d in decisions if (d["user"], d["server"]) == ("alice", SERVER)]
        left = (datetime.fromisoformat(mine["stop_at"]) - datetime.now(UTC)).total_seconds()
        found = re.search(r"stops in (?:(\d+) min )?(\d+) s", text)
        assert found, text
        shown = int(found.group(1) or 0) * 60 + int(found.group(2))
        assert abs(shown - left) <= 8, (text, mine)  # one poll (5 s) and a culler cycle (2 s)
        assert "Kept: home disk" in text, text
        assert "The culler sees:" in (item.get_attribute("title") or "")  # the evidence, in the tooltip
        assert re.search(r"warning [12]/2\)", text), text  # counted from 1, of two (e2e culler_config.py)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.wait_for_timeout(1500)  # the toast slides in: let it finish before the picture
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-status-warning.png"))  # docs/_static, from this run
        _offers_the_handoff(stack, alice, toast)
        page.get_by_role("button", name="I'm still working").first.click()
        toast.first.wait_for(state="detached", timeout=20_000)
        # gone because the culler withdrew it (the status has no warning), not because it was clicked
        assert status_of(stack, alice)["culler"]["warnings"] == []
        assert stack.hub.server("alice", SERVER) is not None  # still running
        _run_as_a_job(stack, alice, page, toast)


def _offers_the_handoff(stack: HubStack, alice: str, toast: Any) -> None:
    """Her GPU workspace's warning offers the hand-off to a job (the culler's ``handoff``), and she may
    submit one (researchers: train-1gpu): the notification carries "Run as a job"."""
    body = status_of(stack, alice)
    assert [w["handoff"] for w in body["culler"]["warnings"]] == [True], body["culler"]
    assert body["jobs"]["available"] and "train-1gpu" in body["jobs"]["profiles"], body["jobs"]
    code, notices = get(stack, f"{CULLER}/notices", alice)
    assert code == 200 and [n["handoff"] for n in notices if n["server"] == SERVER] == [True], notices
    assert toast.first.get_by_role("button", name="Run as a job").count() == 1


def _run_as_a_job(stack: HubStack, alice: str, page: Any, toast: Any) -> None:
    """Idle again, the next warning's "Run as a job" opens jupyter-scheduler's Notebook Jobs panel (no
    notebook is open); the screenshot is the docs' (docs/reference/jupyterlab-extension.md)."""
    toast.first.wait_for(timeout=120_000)
    page.wait_for_timeout(1500)  # the toast slides in
    page.screenshot(path=str(ARTIFACTS / "jupyterlab-handoff-warning-demo.png"))
    toast.first.get_by_role("button", name="Run as a job").click()
    page.locator("#notebook-jobs-panel").wait_for(timeout=30_000)
    assert toast.count() >= 1  # the warning stays until the culler withdraws it
