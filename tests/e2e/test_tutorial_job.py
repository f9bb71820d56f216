"""The demo tutorial's step "Run your notebook as a job" (docs/tutorial/demo.md), on the shipped catalog
and manifests only: the Kueue queues and the team directory ``make demo`` creates
(helm-values/extra-manifests/64-kueue-queues.yaml, 31-team-directory.yaml), the ``cpu-team`` workspace
profile and the ``train-1gpu`` job profile of hub_config/catalog.

In Chromium, alice opens her notebook in a cpu-team workspace, creates a notebook job on ``train-1gpu``
with a parameter from the notebook's toolbar; Kueue admits it on the training queue, papermill runs it,
and the executed notebook, with the parameter's effect, is in her ``~/team/jobs/alice/<job>/``, which
she opens in JupyterLab. With ``GPUWS_TUTORIAL_SHOTS=docs/_static`` the run writes the tutorial's
screenshots there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from .harness import REPO, HubStack, logged_in_page
from .test_disk_admin import call, user_token
from .test_notebook_jobs import ARTIFACTS, JOBS, fill_job_form, reload_until
from .test_workspace_lifecycle import contents, kubectl, start, write_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SERVER = "tutorial"
MANIFESTS = REPO / "helm-values" / "extra-manifests"
SHOTS = Path(os.environ.get("GPUWS_TUTORIAL_SHOTS") or ARTIFACTS)
NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "params",
            "metadata": {"tags": ["parameters"]},
            "outputs": [],
            "source": "learning_rate = 0.1\nepochs = 2",
        },
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "train",
            "metadata": {},
            "outputs": [],
            "source": "loss = 1.0\nfor epoch in range(epochs):\n    loss *= 1 - learning_rate\n"
            "print(f'{epochs} epochs at lr={learning_rate}: loss {loss:.3f}')",
        },
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("the jobs service and our jupyter-scheduler backend are this project's spawner's")


def _reload_until(page: Any, locator: Any, what: str) -> None:
    reload_until(page, locator, what, "tutorial-job-failed.png")


def test_the_tutorial_runs_a_notebook_as_a_job_on_the_shipped_catalog(stack: HubStack, browser: Any) -> None:
    for manifest in ("64-kueue-queues.yaml", "31-team-directory.yaml"):  # what `make demo` creates
        kubectl(stack, "apply", "-f", str(MANIFESTS / manifest))
    start(stack, "alice", SERVER, {"profile": "cpu-team"})
    write_file(stack, "alice", SERVER, "train.ipynb", json.dumps(NOTEBOOK))
    alice = user_token(stack, "alice")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with logged_in_page(
        browser, stack, "alice", viewport={"width": 1280, "height": 800}, timeout_ms=60_000
    ) as page:
        page.goto(f"{stack.url}/user/alice/{SERVER}/lab/tree/train.ipynb")
        create = fill_job_form(page, "lr sweep 0.5", ("learning_rate", "0.5"), "train-1gpu")
        page.wait_for_timeout(600)  # the picture only: the closed menu's fade-out is over
        page.screenshot(path=str(SHOTS / "tutorial-job-form.png"))
        assert not create.is_disabled(), page.locator("form").inner_text()[:2000]
        create.click()

        _reload_until(page, page.locator("tr", has_text="lr sweep 0.5"), "the job's row")
        status, answer = call(f"{stack.url}{JOBS}", alice, "GET", "/jobs")
        assert status == 200, answer
        (job,) = [j for j in answer["items"] if j["server"] == SERVER]
        assert (job["profile"], job["queue"]) == ("train-1gpu", "training"), job
        row = page.locator("tr", has_text="lr sweep 0.5")
        _reload_until(page, row.locator("text=Completed"), "Completed in the job's row")
        page.screenshot(path=str(SHOTS / "tutorial-job-panel.png"))

        result = f"team/jobs/alice/{job['name']}/train.ipynb"
        status, model = contents(stack, "alice", SERVER, result)
        assert status == 200 and model["type"] == "notebook", model
        printed = "".join(
            "".join(out.get("text", ""))
            for cell in model["content"]["cells"]
            for out in cell.get("outputs") or []
        )
        assert "2 epochs at lr=0.5: loss 0.250" in printed, printed  # the parameter from the form
        page.goto(f"{stack.url}/user/alice/{SERVER}/lab/tree/{result}")
        page.get_by_text("2 epochs at lr=0.5: loss 0.250").wait_for()
        page.screenshot(path=str(SHOTS / "tutorial-job-result.png"))
    call(f"{stack.url}{JOBS}", alice, "DELETE", f"/jobs/{job['name']}")
    stack.hub.stop_server("alice", SERVER)
