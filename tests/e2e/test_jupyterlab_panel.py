"""The usage panel in alice's real JupyterLab, end to end (issue 18: "a click opens a panel with the
last hour's figures").

alice's whole-GPU workspace (``e2e-cull-gpu``, kept busy by the devcluster's scripted GPU load of
20, 45 and then 70 %): a click on her status-bar item opens the panel; its GPU utilisation plot ends
at the scripted value (within the attribution service's cycles), with the basis, the home disk and the dashboard's link. The endpoint the panel reads
(``gpuworkspace/api/history``) asks the attribution service's ``workspaces/<user>/<server>/history``
with the server's own token, which gets 403 for bob's workspace. The screenshot in
docs/reference/jupyterlab-extension.md comes from this run (``.artifacts/jupyterlab-usage-panel.png``).
"""

from __future__ import annotations

from typing import Any

import pytest

from .harness import HubStack, logged_in_page
from .test_attribution import ARTIFACTS, pod_of, script, until, user_token
from .test_jupyterlab_status import ATTRIBUTION, alices_workspace, get, server_token

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

SERVER = "usage"


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("the server extension and the services come with this project's spawner configuration")


def test_a_click_on_the_status_item_opens_the_last_hour(stack: HubStack, browser: Any) -> None:
    with alices_workspace(stack, SERVER, "e2e-cull-gpu"):
        _check(stack, browser)


def _gpu_util(stack: HubStack, token: str) -> list[float]:
    """The values of the panel's GPU utilisation series (one point per 30 s step, the newest last)."""
    code, body = get(stack, f"/user/alice/{SERVER}/gpuworkspace/api/history", token)
    assert code == 200, body
    return [v for _, v in body["usage"]["series"]["gpu_util_percent"]] if body["usage"]["available"] else []


def _check(stack: HubStack, browser: Any) -> None:
    alice = user_token(stack, "alice")
    pod = pod_of(stack, "alice", SERVER)
    # three steps of the scripted load, one per step of the series: the plot has a line, not a dot
    for n, (util, mem) in enumerate(((20, 2048), (45, 4096), (70, 6144)), start=1):
        script(stack, pod, gpu_util=util, mem_used_mib=mem)
        until(
            lambda util=util, n=n: (v := _gpu_util(stack, alice)) and v[-1] == util and len(v) >= n,
            f"the last hour to end at the scripted {util} % GPU, in its step {n}",
            timeout_s=90,
        )

    # the server's own token: her series, never bob's
    token = server_token(stack, pod)
    code, mine = get(stack, f"{ATTRIBUTION}/workspaces/alice/{SERVER}/history", token)
    assert code == 200 and mine["basis"] == "measured", mine
    code, refused = get(stack, f"{ATTRIBUTION}/workspaces/bob/~/history", token)
    assert code == 403 and refused["message"] == "alice may not see the workspaces of bob", refused

    with logged_in_page(
        browser, stack, "alice", viewport={"width": 1400, "height": 900}, timeout_ms=90_000
    ) as page:
        page.goto(f"{stack.url}/user/alice/{SERVER}/lab")
        page.locator(".jp-gpuworkspace-status").filter(has_text="GPU (exclusive) 70%").click()
        panel = page.locator(".jp-gpuworkspace-usage")
        panel.filter(has_text="GPU utilisation: 70%").wait_for()
        plot = panel.locator('svg[data-series="gpu_util_percent"]')
        assert plot.get_attribute("aria-label") == "GPU utilisation: 70%, last 60 minutes"
        assert plot.locator("circle.jp-gpuworkspace-now").count() == 1
        assert (plot.locator("path.jp-gpuworkspace-line").get_attribute("d") or "").count("L") >= 2
        text = panel.inner_text()
        assert "GPU memory: 6.0 GiB" in text and "measured on the device" in text, text
        assert "Home disk:" in text and "CPU:" in text and "Memory:" in text, text
        link = panel.get_by_role("link", name="Open the full GPU dashboard")
        assert link.get_attribute("href") == "/services/gpuworkspace-attribution/"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-usage-panel.png"))  # docs/_static, from this run
        with page.context.expect_page() as opened:
            link.click()
        dashboard = opened.value
        dashboard.locator("#node-grid").wait_for()  # the full dashboard, in a new tab, with her login
