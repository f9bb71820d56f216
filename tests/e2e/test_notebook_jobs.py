"""JupyterLab's notebook jobs end to end: jupyter-scheduler's REST API in alice's real single-user server
(the API behind "Create Notebook Job" and the Notebook Jobs panel), our backend in it, the jobs service
the hub registers, Kueue on the devcluster.

alice's one-GPU queue is held by a job she submitted through the jobs API. She then creates a notebook
job through her server's ``/scheduler/jobs`` with parameters: the server calls the jobs service with
its own token (whose scopes are exactly the hub config's server_token_scopes), the Job is made with her
parameters typed for papermill, and the panel's list shows it QUEUED with Kueue's reason. A job profile
outside her groups and a recurring schedule are refused with their messages and nothing is written.
Stopping the job cancels it in the queue (the panel keeps it as STOPPED); deleting it removes it.

In Chromium, alice creates a notebook job from JupyterLab's toolbar with a parameter on the 1-GPU
notebook job profile; the culler stops her idle workspace while papermill runs; the executed notebook,
with the parameter's effect, is in her workspace afterwards and the panel's API says Completed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from .harness import REPO, HubStack, logged_in_page, wait_for
from .test_disk_admin import call, user_token
from .test_workspace_lifecycle import contents, get_json, kubectl, start, write_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SERVER = "nbjobs"
JOBS = "/services/gpuworkspace-jobs/api/v1"
HOLD = "import time\ntime.sleep(600)\n"
NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "params",
            "metadata": {"tags": ["parameters"]},
            "outputs": [],
            "source": "epochs = 1\nrun_name = 'default'\nseconds = 40",
        },
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "wait",
            "metadata": {},
            "outputs": [],
            "source": "import time\ntime.sleep(seconds)",
        },
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "train",
            "metadata": {},
            "outputs": [],
            "source": "print('trained', run_name, 'for', epochs * 10, 'steps')",
        },
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}
ARTIFACTS = Path(os.environ.get("GPUWS_ARTIFACTS", REPO / ".artifacts"))
UI_SERVER = "nbui"


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("the jobs service and our jupyter-scheduler backend are this project's spawner's")


def scheduler(stack: HubStack, token: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """jupyter-scheduler's REST API in alice's server, through the proxy, as JupyterLab calls it."""
    return scheduler_of(stack, token, SERVER, method, path, body)


def scheduler_of(
    stack: HubStack, token: str, server: str, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    return call(f"{stack.url}/user/alice/{server}/scheduler", token, method, path, body)


def fill_job_form(
    page: Any, name: str, parameter: tuple[str, str], environment: str, notebook: str = "train.ipynb"
) -> Any:
    """In the open notebook: the toolbar's "Create a notebook job" form, filled in as a user does (the
    job's name, one parameter, the job profile as its environment). Returns the form's Create button.

    jupyter-scheduler 2.x fills the form's input file from the file browser's selection, not from the
    notebook whose toolbar was clicked (its ``scheduling:create-from-notebook`` command reads
    ``IFileBrowserFactory.tracker.currentWidget.selectedItems()``; jupyter-scheduler#503): opening a
    notebook by URL usually selects it, but not always, and the form then says the input is no notebook.
    The notebook is selected in the file browser first, as docs/how-to/notebook-jobs.md tells users.

    The environment comes first: the form asks the server for its environments once it opens, and when
    the answer comes it sets the first one on the form as it was when it opened (its ``useEffect`` keeps
    the opening ``model``), which puts back the default job name typed over meanwhile. On a loaded
    machine that answer comes after the typing; once the Environment menu shows, it has come."""
    page.locator(".jp-DirListing-item", has_text=notebook).first.click()
    page.locator(".jp-NotebookPanel-toolbar [data-jp-item-name='create-job']").click()
    page.locator("[role='combobox'][id$='environment'], [role='button'][id$='environment']").first.click()
    page.get_by_role("option", name=environment, exact=True).click()
    page.get_by_role("listbox").wait_for(state="hidden")  # the menu closed: the form is what shows
    job_name = page.get_by_label("Job name")
    job_name.fill(name)
    page.get_by_role("button", name="Add new parameter").click()
    page.locator("input[name='parameter-0-name']").fill(parameter[0])
    value = page.locator("input[name='parameter-0-value']")
    value.fill(parameter[1])
    value.press("Tab")  # the form checks a parameter when its field loses focus
    assert job_name.input_value() == name, job_name.input_value()
    return page.get_by_role("button", name="Create", exact=True)


def reload_until(page: Any, locator: Any, what: str, screenshot: str, tries: int = 36) -> None:
    """The Notebook Jobs panel reads its list once (it says "please reload the list in a few seconds"):
    reload it as a user would, until ``locator`` shows. Fails with what the page says, also when the panel
    is not showing at all (the Create did not go through: the form is still there, with its error)."""
    for _ in range(tries):
        try:
            locator.wait_for(timeout=5_000)
            return
        except Exception:  # playwright's TimeoutError
            reload = page.get_by_role("button", name="Reload")
            if reload.count() == 0:
                break
            reload.click()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / screenshot), full_page=True)
    pytest.fail(f"{what} never showed; the page says: {page.locator('body').inner_text()[:3000]}")


def _job_names(stack: HubStack) -> set[str]:
    return {j["metadata"]["name"] for j in get_json(stack, "jobs")["items"]}


def test_create_notebook_job_goes_to_the_queue(stack: HubStack) -> None:
    kubectl(stack, "apply", "-f", str(Path(__file__).parent / "kueue-objects.yaml"))
    start(stack, "alice", SERVER, {"profile": "cpu-small"})
    write_file(stack, "alice", SERVER, "hold.py", HOLD)
    write_file(stack, "alice", SERVER, "train.ipynb", json.dumps(NOTEBOOK))
    alice = user_token(stack, "alice")
    jobs = f"{stack.url}{JOBS}"

    # the server's own token: the server role's two scopes and the jobs service's, nothing broader
    status, tokens = call(f"{stack.url}/hub/api", alice, "GET", "/users/alice/tokens")
    assert status == 200, tokens
    (server_token,) = [t for t in tokens["api_tokens"] if t.get("note") == f"Server at /user/alice/{SERVER}/"]
    assert set(server_token["scopes"]) == {  # as the hub expands them
        f"access:servers!server=alice/{SERVER}",
        "users:activity!user=alice",
        "read:users:activity!user=alice",
        "access:services!service=gpuworkspace-jobs",
        # the status bar's server extension (test_jupyterlab_status.py) reads these two services
        "access:services!service=gpuworkspace-attribution",
        "access:services!service=gpuworkspace-culler",
        "read:users:name!user=alice",  # and, as every token has, its owner's identity
        "read:users:groups!user=alice",
    }, server_token

    # the dialog's environments: the job profiles alice may use
    status, envs = scheduler(stack, alice, "GET", "/runtime_environments")
    assert status == 200, envs
    names = [e["name"] for e in envs]
    assert "e2e-job-1gpu" in names and "e2e-job-gpu-users" not in names, names

    # the queue's one GPU held by another of her jobs
    body = {"profile": "e2e-job-1gpu", "script": "hold.py", "server": SERVER}
    status, holder = call(jobs, alice, "POST", "/jobs", body)
    assert status == 201, holder
    wait_for(
        lambda: call(jobs, alice, "GET", f"/jobs/{holder['name']}")[1]["state"] == "running",
        90,
        "holder runs",
    )

    create = {
        "name": "mnist baseline",
        "input_uri": "train.ipynb",
        "runtime_environment_name": "e2e-job-1gpu",
        "parameters": {"epochs": "3", "run_name": "baseline"},
        "output_formats": ["ipynb"],
    }
    status, created = scheduler(stack, alice, "POST", "/jobs", create)
    assert status == 200, created
    job_id = created["job_id"]
    status, view = call(jobs, alice, "GET", f"/jobs/{job_id}")
    assert status == 200 and view["notebook"] == "train.ipynb" and view["server"] == SERVER, view
    command = get_json(stack, "job", job_id)["spec"]["template"]["spec"]["containers"][0]["command"]
    triples = list(zip(command, command[1:], command[2:], strict=False))
    assert ("-p", "epochs", "3") in triples and ("-r", "run_name", "baseline") in triples, command

    seen: dict[str, Any] = {}

    def queued_with_reason() -> bool:
        status, listed = scheduler(stack, alice, "GET", "/jobs")
        row = next((j for j in listed.get("jobs", []) if j["job_id"] == job_id), {}) if status == 200 else {}
        seen.update(row or {"status": status})
        return row.get("status") == "QUEUED" and "insufficient unused quota" in (
            row.get("status_message") or ""
        )

    wait_for(queued_with_reason, 60, f"the panel's row QUEUED with Kueue's reason (last: {seen})")
    assert seen["name"] == "mnist baseline" and seen["runtime_environment_name"] == "e2e-job-1gpu"

    # refusals: the message reaches JupyterLab, nothing is written
    before = _job_names(stack)
    status, refused = scheduler(
        stack, alice, "POST", "/jobs", {**create, "runtime_environment_name": "e2e-job-gpu-users"}
    )
    assert status == 500 and "is not a job profile you can use" in refused["message"], refused
    definition = {**create, "schedule": "0 2 * * *", "timezone": "UTC"}
    status, refused = scheduler(stack, alice, "POST", "/job_definitions", definition)
    assert status == 500 and "Recurring notebook jobs" in refused["message"], refused
    assert _job_names(stack) == before

    # stop: cancelled in the queue, kept in the panel as STOPPED; delete: gone
    status, answer = scheduler(stack, alice, "PATCH", f"/jobs/{job_id}", {"status": "STOPPED"})
    assert status == 204, answer
    wait_for(lambda: call(jobs, alice, "GET", f"/jobs/{job_id}")[0] == 404, 30, "the cancelled job gone")
    status, row = scheduler(stack, alice, "GET", f"/jobs/{job_id}")
    assert status == 200 and row["status"] == "STOPPED", row
    status, answer = scheduler(stack, alice, "DELETE", f"/jobs/{job_id}")
    assert status == 204, answer
    status, listed = scheduler(stack, alice, "GET", "/jobs")
    assert status == 200 and job_id not in [j["job_id"] for j in listed["jobs"]], listed

    assert call(jobs, alice, "DELETE", f"/jobs/{holder['name']}")[0] == 200
    wait_for(lambda: not {job_id, holder["name"]} & _job_names(stack), 60, "the Jobs gone")
    stack.hub.stop_server("alice", SERVER)


def test_create_notebook_job_in_jupyterlab(stack: HubStack, browser: Any) -> None:
    """The Chromium flow: the notebook's toolbar button, the form with a parameter and the 1-GPU notebook
    job profile, Create; the Notebook Jobs panel lists the job and the jobs API has it, with the parameter
    on papermill's command line. alice closes the page: the culler stops her idle workspace (its profile,
    e2e-cull-team, is culled after 20 s idle) while Kueue's admitted job runs papermill on; once it is
    done, the executed notebook, with the parameter's effect in its outputs, is in her workspace's team
    directory, and her server's scheduler API (what the panel shows) says Completed."""
    for objects in ("kueue-objects.yaml", "team-claim.yaml"):  # the queue; the team directory it writes to
        kubectl(stack, "apply", "-f", str(Path(__file__).parent / objects))
    start(stack, "alice", UI_SERVER, {"profile": "e2e-cull-team"})
    write_file(stack, "alice", UI_SERVER, "train.ipynb", json.dumps(NOTEBOOK))
    alice = user_token(stack, "alice")
    jobs = f"{stack.url}{JOBS}"
    with logged_in_page(
        browser, stack, "alice", viewport={"width": 1400, "height": 900}, timeout_ms=60_000
    ) as page:
        page.goto(f"{stack.url}/user/alice/{UI_SERVER}/lab/tree/train.ipynb")
        create = fill_job_form(page, "mnist from lab", ("epochs", "5"), "e2e-job-notebook")
        if create.is_disabled():  # the form's own verdict, with what it shows, for the failure report
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "notebook-jobs-form.png"), full_page=True)
            pytest.fail(f"the form refuses to create: {page.locator('form').inner_text()[:2000]}")
        create.click()
        row = page.locator("tr", has_text="mnist from lab")
        reload_until(page, row, "the job's row", "notebook-jobs-created.png", tries=24)

        listed: dict[str, Any] = {}

        def in_the_api() -> bool:
            status, answer = call(jobs, alice, "GET", "/jobs")
            mine = [j for j in answer.get("items", []) if j["server"] == UI_SERVER] if status == 200 else []
            listed.update(mine[0] if mine else {})
            return bool(mine)

        wait_for(in_the_api, 30, "the job in the jobs API")
        command = get_json(stack, "job", listed["name"])["spec"]["template"]["spec"]["containers"][0][
            "command"
        ]
        assert ("-p", "epochs", "5") in list(zip(command, command[1:], command[2:], strict=False)), command
        assert row.locator("text=/Queued|In progress|Completed|Failed/").count() == 1, row.inner_text()
        assert listed["profile"] == "e2e-job-notebook", listed
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "notebook-jobs.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000
    name = listed["name"]
    # the page is closed: nothing keeps the workspace busy, and the culler stops it; the job goes on
    wait_for(lambda: stack.hub.server("alice", UI_SERVER) is None, 120, "the culler to stop the workspace")
    status, view = call(jobs, alice, "GET", f"/jobs/{name}")
    assert status == 200 and view["state"] in ("running", "succeeded"), view
    wait_for(
        lambda: call(jobs, alice, "GET", f"/jobs/{name}")[1].get("state") == "succeeded", 180, f"{name} done"
    )

    start(stack, "alice", UI_SERVER, {"profile": "e2e-cull-team"})
    status, model = contents(stack, "alice", UI_SERVER, f"team/jobs/alice/{name}/train.ipynb")
    assert status == 200 and model["type"] == "notebook", model
    printed = "".join(
        "".join(out.get("text", ""))
        for cell in model["content"]["cells"]
        for out in cell.get("outputs") or []
    )
    assert "trained default for 50 steps" in printed, printed  # epochs=5 from the form, 10 steps each
    status, answer = scheduler_of(stack, alice, UI_SERVER, "GET", "/jobs")
    rows = [j for j in answer.get("jobs", []) if j.get("name") == "mnist from lab"] if status == 200 else []
    assert rows and rows[0]["status"] == "COMPLETED", (status, answer)
    call(jobs, alice, "DELETE", f"/jobs/{name}")
    stack.hub.stop_server("alice", UI_SERVER)
