"""The server extension in a real Jupyter server (JupyterLab 4), with the package's jupyter-config.

The attribution service, the culler and the hub are small stand-ins on loopback that record what they
were sent; the server is started as the workspace image starts it (``$JUPYTER_CONFIG_PATH`` holding the
package's ``jupyter-config``). What a user would notice: JupyterLab does not ask about news, the status
answers with the figures or "unavailable" (never an error), polling is not activity, and "I'm still
working" is, for the server and the hub alike, carried by the server's own token.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_devcluster.sim.codeserver import MARKER
from gpuworkspace_devcluster.sim.images import STANDIN_BIN
from gpuworkspace_spawner.labextension import CONFIG_DIR, DATA_DIR

pytestmark = pytest.mark.slow
SHOTS = Path(__file__).resolve().parents[3] / ".state" / "screenshots"  # copied into docs/_static by hand
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
USER_TOKEN = "user-token-for-the-test"  # what the browser's login stands for
SERVER_TOKEN = "server-token-for-the-test"  # $JUPYTERHUB_API_TOKEN
DETAIL = {
    "at": 1.0,
    "gpu": {"basis": "measured", "caveat": "", "util_percent": 55.0, "mem_used_mib": 4096.0, "allocated": 1},
    "gpu_mode": "exclusive",
    "cpu": {"used": 0.5, "request": 1, "limit": 2},
    "memory": {"used": 1024, "request": 2048, "limit": 4096},
}
# a max-duration stop offers the hand-off to a job (the culler's "handoff"); the jobs API lists a profile


def notices() -> list[dict[str, Any]]:
    """The culler's notices, its stop 25 min after each request (the screenshot's countdown): built per
    request, never at import (a long test run would find a stop time already past)."""
    stop_at = (datetime.now(UTC) + timedelta(minutes=25)).isoformat().replace("+00:00", "Z")
    return [
        {"server": "", "reason": "max_duration", "stage": 0, "stages": 2, "stop_at": stop_at, "handoff": True}
    ]


PROFILES = {"items": [{"name": "train-1gpu", "displayName": "Training job, one whole GPU"}]}
HISTORY = {
    "at": 61.0,
    "window_s": 3600,
    "basis": "measured",
    "gpu_mode": "exclusive",
    "series": {"gpu_util_percent": [[1.0, 20.0], [61.0, 55.0]]},
}


class Fakes(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str, str]] = []  # noqa: RUF012 -- (method, path, authorization, body)
    refuse_history = False  # answer the last hour with the service's 403

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        Fakes.seen.append((self.command, self.path, self.headers.get("Authorization", ""), body))
        code = 200
        if self.path.endswith("/workspaces/alice/~"):
            reply: Any = DETAIL
        elif self.path.endswith("/workspaces/alice/~/history"):
            reply = HISTORY
            if Fakes.refuse_history:
                code, reply = 403, {"status": 403, "message": "bob may not see the workspaces of alice"}
        elif self.path.endswith("/notices"):
            reply = notices()
        elif self.path.endswith("/gpuworkspace-jobs/api/v1/profiles"):
            reply = PROFILES
        else:
            reply = {}
        raw = json.dumps(reply).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def fakes() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Fakes)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def serve(tmp: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [
        str(Path(sys.executable).parent / "jupyter-lab"),
        "--no-browser",
        "--allow-root",
        f"--port={port}",
        "--ip=127.0.0.1",
        f"--ServerApp.root_dir={tmp}",
        f"--IdentityProvider.token={USER_TOKEN}",
    ]
    full = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "GPUWS_"))},
        "HOME": str(tmp),
        "JUPYTER_CONFIG_PATH": str(CONFIG_DIR),
        "JUPYTER_PATH": str(DATA_DIR),  # the prebuilt front end (scripts/build-labextension.sh)
        "JUPYTER_CONFIG_DIR": str(tmp / ".jupyter"),
        "JUPYTER_DATA_DIR": str(tmp / ".local"),
        "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
        "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
        "JUPYTERHUB_USER": "alice",
        "JUPYTERHUB_SERVER_NAME": "",
        **env,
    }
    with (tmp / "server.log").open("wb") as log:
        proc = subprocess.Popen(argv, env=full, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError((tmp / "server.log").read_text())
        try:
            if call(url, "/api/status")[0] == 200:
                return proc, url
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    raise AssertionError("the server did not start: " + (tmp / "server.log").read_text()[-2000:])


def call(url: str, path: str, method: str = "GET") -> tuple[int, Any]:
    request = urllib.request.Request(
        url + path,
        method=method,
        data=b"{}" if method == "POST" else None,
        headers={"Authorization": f"token {USER_TOKEN}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            raw = answer.read()
            status = answer.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, fakes: str) -> Iterator[str]:
    env = {
        "JUPYTERHUB_API_TOKEN": SERVER_TOKEN,
        "JUPYTERHUB_API_URL": f"{fakes}/hub/api",
        "GPUWS_ATTRIBUTION_URL": f"{fakes}/services/gpuworkspace-attribution/api/v1",
        "GPUWS_CULLER_URL": f"{fakes}/services/gpuworkspace-culler/api/v1",
        "GPUWS_JOBS_URL": f"{fakes}/services/gpuworkspace-jobs/api/v1",
        # an image that declares code-server (the spawner's $GPUWS_EDITORS); code-server itself is the
        # devcluster's stand-in, which jupyter-vscode-proxy starts from PATH
        "GPUWS_EDITORS": "jupyterlab,code-server",
        "PATH": f"{STANDIN_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    proc, url = serve(tmp_path_factory.mktemp("lab"), env)
    yield url
    proc.terminate()
    proc.wait(30)


def test_jupyterlab_does_not_ask_about_news(lab: str) -> None:
    status, settings = call(lab, "/lab/api/settings/@jupyterlab/apputils-extension:notification")
    assert status == 200, settings
    assert settings["schema"]["properties"]["fetchNews"]["default"] == "false"  # not "none": the question
    assert settings["schema"]["properties"]["checkForUpdates"]["default"] is False
    assert call(lab, "/lab/api/news")[1] == {"news": []}
    assert '"news": {"disabled": true}' in call(lab, "/lab")[1]


def test_figures_come_from_the_services_with_the_servers_token(lab: str) -> None:
    Fakes.seen.clear()
    status, body = call(lab, "/gpuworkspace/api/status")
    assert status == 200, body
    gpu = body["resources"]["gpu"]
    assert (gpu["mode"], gpu["util_percent"], gpu["mem_used_mib"], gpu["basis"]) == (
        "exclusive",
        55.0,
        4096.0,
        "measured",
    )
    (warning,) = body["culler"]["warnings"]
    assert warning["stage"] == 1 and warning["seconds_left"] > 0
    assert warning["handoff"] is True and body["jobs"] == {"available": True, "profiles": ["train-1gpu"]}
    assert body["disk"]["available"] and body["disk"]["total_bytes"] > 0
    asked = {(m, p, a) for m, p, a, _ in Fakes.seen}
    assert asked == {
        ("GET", "/services/gpuworkspace-attribution/api/v1/workspaces/alice/~", f"token {SERVER_TOKEN}"),
        ("GET", "/services/gpuworkspace-culler/api/v1/notices", f"token {SERVER_TOKEN}"),
        ("GET", "/services/gpuworkspace-jobs/api/v1/profiles", f"token {SERVER_TOKEN}"),
    }


def test_polling_is_not_activity_and_still_working_is(lab: str) -> None:
    before = call(lab, "/api/status?no_track_activity=1")[1]["last_activity"]
    time.sleep(0.05)  # last_activity has microseconds: a later request would show a later time
    call(lab, "/gpuworkspace/api/status")
    assert call(lab, "/api/status?no_track_activity=1")[1]["last_activity"] == before
    Fakes.seen.clear()
    status, recorded = call(lab, "/gpuworkspace/api/activity", "POST")
    assert status == 200 and recorded["server"] and recorded["hub"], recorded
    assert call(lab, "/api/status?no_track_activity=1")[1]["last_activity"] > before
    ((method, path, auth, sent),) = Fakes.seen
    assert (method, path, auth) == ("POST", "/hub/api/users/alice/activity", f"token {SERVER_TOKEN}")
    assert json.loads(sent)["servers"] == {"": {"last_activity": recorded["recorded_at"]}}


def test_the_panels_last_hour_from_the_attribution_service(lab: str) -> None:
    before = call(lab, "/api/status?no_track_activity=1")[1]["last_activity"]
    Fakes.seen.clear()
    status, body = call(lab, "/gpuworkspace/api/history")
    assert status == 200, body
    assert body["usage"]["series"]["gpu_util_percent"] == [[1.0, 20.0], [61.0, 55.0]]
    assert body["usage"]["basis"] == "measured" and body["disk"]["available"]
    assert body["dashboard_url"] == "/services/gpuworkspace-attribution/"
    ((method, path, auth, _),) = Fakes.seen
    assert (method, path, auth) == (
        "GET",
        "/services/gpuworkspace-attribution/api/v1/workspaces/alice/~/history",
        f"token {SERVER_TOKEN}",
    )
    assert call(lab, "/api/status?no_track_activity=1")[1]["last_activity"] == before  # not activity
    if Path(CHROMIUM).exists():
        in_the_browser_the_panel(lab)
    Fakes.refuse_history = True
    try:
        status, body = call(lab, "/gpuworkspace/api/history")
    finally:
        Fakes.refuse_history = False
    assert status == 200, body
    assert body["usage"] == {
        "available": False,
        "reason": "the GPU attribution service answered 403: bob may not see the workspaces of alice",
    }


def test_services_down_is_unavailable_not_an_error(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    env = {
        "JUPYTERHUB_API_TOKEN": SERVER_TOKEN,
        "JUPYTERHUB_API_URL": f"{closed}/hub/api",
        "GPUWS_ATTRIBUTION_URL": f"{closed}/a",
        "GPUWS_CULLER_URL": f"{closed}/c",
    }
    proc, url = serve(tmp_path, env)
    try:
        status, body = call(url, "/gpuworkspace/api/status")
        assert status == 200, body
        for part in ("resources", "culler"):
            assert body[part]["available"] is False and "unreachable" in body[part]["reason"], body
        status, history = call(url, "/gpuworkspace/api/history")
        assert status == 200 and "unreachable" in history["usage"]["reason"], history
        if Path(CHROMIUM).exists():  # the page, as a user sees it (chromium: apt-get install chromium)
            in_the_browser_with_services_down(url)
        status, recorded = call(url, "/gpuworkspace/api/activity", "POST")
        assert (
            status == 200
            and recorded["server"]
            and not recorded["hub"]
            and "unreachable" in recorded["reason"]
        )
    finally:
        proc.terminate()
        proc.wait(30)


@contextmanager
def lab_page(url: str) -> Iterator[Any]:
    """JupyterLab in headless Chromium, logged in with the user's token."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(90_000)
            page.goto(f"{url}/lab?token={USER_TOKEN}")
            yield page
        finally:
            browser.close()


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs chromium (apt-get install chromium)")
def test_run_as_a_job_opens_the_create_job_form_for_the_open_notebook(lab: str) -> None:
    """The max-duration warning's notification carries "Run as a job" (the culler offers the hand-off and
    the jobs API lists a profile for the user); a click opens jupyter-scheduler's Create Job form with
    the open notebook as its input file."""
    from playwright.sync_api import sync_playwright

    kernel = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    notebook = {"cells": [], "metadata": {"kernelspec": kernel}, "nbformat": 4, "nbformat_minor": 5}
    request = urllib.request.Request(
        f"{lab}/api/contents/train.ipynb",
        method="PUT",
        data=json.dumps({"type": "notebook", "content": notebook}).encode(),
        headers={"Authorization": f"token {USER_TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status in (200, 201)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(90_000)
            page.goto(f"{lab}/lab/tree/train.ipynb?token={USER_TOKEN}")
            page.locator(".jp-NotebookPanel").first.wait_for()
            toast = page.locator(".Toastify__toast", has_text="max. duration")
            toast.first.wait_for()
            page.wait_for_timeout(1500)  # the toast slides in: let it finish before the picture
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "jupyterlab-handoff-warning.png"))
            toast.get_by_role("button", name="Run as a job").first.click()
            form = page.locator(".jp-notebook-job-panel, #notebook-jobs-panel").first
            form.wait_for()
            page.get_by_text("Create Job").first.wait_for()
            inputs = page.locator("input")
            values = [inputs.nth(i).input_value() for i in range(inputs.count())]
            assert "train.ipynb" in values, values  # the open notebook is the job's input file
            assert toast.count() >= 1  # the warning stays: the stop is still due
        finally:
            browser.close()


def test_open_vs_code_in_the_launcher_where_the_image_declares_code_server(lab: str) -> None:
    """The page gets the declared editors; jupyter-server-proxy's own launcher entries are off (its
    "VS Code" shows wherever jupyter-vscode-proxy is installed); ours opens code-server (the stand-in)."""
    status, html = call(lab, "/lab")
    assert status == 200
    config = json.loads(
        html.split('id="jupyter-config-data" type="application/json">', 1)[1].split("</script>")[0]
    )
    assert config["gpuworkspaceEditors"] == "jupyterlab,code-server"
    assert "@jupyterhub/jupyter-server-proxy:add-launcher-entries" in config["disabledExtensions"]
    if not Path(CHROMIUM).exists():
        return
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            page = context.new_page()
            page.set_default_timeout(90_000)
            page.goto(f"{lab}/lab?reset&token={USER_TOKEN}")  # reset: the launcher, not an earlier notebook
            page.locator(".jp-LauncherCard").first.wait_for()
            cards = page.locator(".jp-LauncherCard", has_text="VS Code")
            assert cards.all_inner_texts() == ["Open VS Code"]  # ours, once; not the server proxy's
            with context.expect_page() as opened:
                cards.first.click()
            vscode = opened.value
            vscode.wait_for_load_state()
            assert vscode.url.endswith("/vscode/"), vscode.url
            vscode.get_by_text(MARKER).first.wait_for()
        finally:
            browser.close()


def in_the_browser_with_services_down(url: str) -> None:
    """JupyterLab loads with the front end: the status item says "unavailable" and why, no error dialog,
    and no question about Jupyter news."""
    with lab_page(url) as page:
        item = page.locator(".jp-gpuworkspace-status")
        item.filter(has_text="GPU/CPU: unavailable").wait_for()
        assert "the GPU attribution service is unreachable" in (item.get_attribute("title") or "")
        assert page.locator(".jp-Dialog").count() == 0
        assert page.get_by_text("official Jupyter news").count() == 0
        # no $GPUWS_EDITORS naming code-server: no VS Code in the launcher, though
        # jupyter-vscode-proxy is installed here (its own launcher entry is turned off)
        page.locator(".jp-LauncherCard").first.wait_for()
        assert page.locator(".jp-LauncherCard", has_text="VS Code").count() == 0
        item.click()  # the usage panel opens, and says why it has no plots
        panel = page.locator(".jp-gpuworkspace-usage")
        panel.filter(has_text="Usage unavailable: the GPU attribution service is unreachable").wait_for()
        assert panel.locator("svg").count() == 0 and page.locator(".jp-Dialog").count() == 0


def in_the_browser_the_panel(url: str) -> None:
    """A click on the status item opens the panel: four plots, the GPU's newest value and basis, the
    home disk and the dashboard's link (a new tab); the command palette has "Workspace: show usage"."""
    with lab_page(url) as page:
        page.locator(".jp-gpuworkspace-status").filter(has_text="GPU (exclusive) 55%").click()
        panel = page.locator(".jp-gpuworkspace-usage")
        panel.filter(has_text="GPU utilisation: 55%").wait_for()
        assert panel.locator("svg.jp-gpuworkspace-plot").count() == 4
        assert panel.locator("[data-series=gpu_util_percent] path.jp-gpuworkspace-line").count() == 1
        assert "measured on the device" in panel.inner_text()
        assert "Home disk:" in panel.inner_text()
        link = panel.get_by_role("link", name="Open the full GPU dashboard")
        assert link.get_attribute("href") == "/services/gpuworkspace-attribution/"
        assert link.get_attribute("target") == "_blank"
        page.keyboard.press("Control+Shift+C")
        page.get_by_text("Workspace: show usage").first.wait_for()
