"""The "Run as a job" hand-off on a culler warning: offered only where the culler offers it and this
user may submit a job (labextension/handoff.py, pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpuworkspace_spawner.labextension.figures import Answer, disk_view, status_body, workspace_from_env
from gpuworkspace_spawner.labextension.handoff import NOT_ASKED, jobs_view, offers_handoff, with_jobs

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
JOBS_URL = "http://proxy/services/gpuworkspace-jobs/api/v1"
ENV = {"JUPYTERHUB_USER": "alice", "JUPYTERHUB_SERVER_NAME": "", "GPUWS_JOBS_URL": JOBS_URL + "/"}
MAX_DURATION = {  # the culler's api/v1/notices, one entry: a max-duration stop that offers the hand-off
    "server": "",
    "reason": "max_duration",
    "stage": 0,
    "stages": 2,
    "stop_at": "2026-12-02T12:25:00Z",
    "evidence": "running 7.6 h, within the 8 h maximum",
    "handoff": True,
}
PROFILES = Answer(body={"items": [{"name": "train-1gpu", "displayName": "Training job, one whole GPU"}]})


def _body(*notices: dict[str, Any]) -> dict[str, Any]:
    ws = workspace_from_env(ENV)
    return status_body(ws, Answer(reason="down"), Answer(body=list(notices)), disk_view(10, 5), now=NOW)


def test_the_jobs_url_comes_from_the_hubs_environment() -> None:
    assert workspace_from_env(ENV).jobs_url == JOBS_URL
    assert workspace_from_env({}).jobs_url == ""


def test_the_jobs_api_is_asked_only_while_a_warning_offers_the_handoff() -> None:
    assert offers_handoff(_body(MAX_DURATION)["culler"]) is True
    assert offers_handoff(_body({**MAX_DURATION, "handoff": False})["culler"]) is False
    assert offers_handoff(_body({**MAX_DURATION, "handoff": "yes"})["culler"]) is False  # not a boolean
    assert offers_handoff(_body()["culler"]) is False
    assert offers_handoff({"available": False, "reason": "down"}) is False


def test_a_warning_offers_run_as_a_job_where_the_user_has_a_job_profile() -> None:
    body = _body(MAX_DURATION)
    offered = with_jobs(body, jobs_view(PROFILES, JOBS_URL))
    assert offered["jobs"] == {"available": True, "profiles": ["train-1gpu"]}
    assert [w["handoff"] for w in offered["culler"]["warnings"]] == [True]
    assert body["culler"]["warnings"][0]["handoff"] is True  # the input is left as it was
    assert "jobs" not in body


@pytest.mark.parametrize(
    ("answer", "jobs_url", "reason"),
    [
        pytest.param(PROFILES, "", "$GPUWS_JOBS_URL is unset: no jobs service for this server", id="no-jobs"),
        pytest.param(
            Answer(body={"items": []}),
            JOBS_URL,
            "no job profile is open to you (the job profiles' access lists)",
            id="no-profile-for-this-user",
        ),
        pytest.param(
            Answer(reason="the jobs service answered 403: forbidden"),
            JOBS_URL,
            "the jobs service answered 403: forbidden",
            id="refused",
        ),
        pytest.param(
            Answer(body=[{"name": "x"}]),
            JOBS_URL,
            "the jobs service answered something other than {items: [...]}",
            id="nonsense",
        ),
        pytest.param(Answer(body={"items": [{"name": 7}, "x"]}), JOBS_URL, "no job profile", id="no-names"),
        pytest.param(None, JOBS_URL, NOT_ASKED, id="not-asked"),
    ],
)
def test_no_handoff_without_a_jobs_service_or_a_profile(
    answer: Answer | None, jobs_url: str, reason: str
) -> None:
    offered = with_jobs(_body(MAX_DURATION), jobs_view(answer, jobs_url))
    assert offered["jobs"]["available"] is False
    assert offered["jobs"]["reason"].startswith(reason)
    assert [w["handoff"] for w in offered["culler"]["warnings"]] == [False]


def test_a_warning_the_culler_does_not_offer_it_for_stays_without() -> None:
    idle_cpu = {**MAX_DURATION, "reason": "idle", "handoff": False}
    offered = with_jobs(_body(idle_cpu), jobs_view(PROFILES, JOBS_URL))
    assert [w["handoff"] for w in offered["culler"]["warnings"]] == [False]


def test_the_culler_down_keeps_its_reason() -> None:
    ws = workspace_from_env(ENV)
    body = status_body(ws, Answer(reason="down"), Answer(reason="culler down"), disk_view(10, 5), now=NOW)
    offered = with_jobs(body, jobs_view(None, JOBS_URL))
    assert offered["culler"] == {"available": False, "reason": "culler down"}
