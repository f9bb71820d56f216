"""jupyter-scheduler's requests and models to and from the jobs API (pure): what the "Create Notebook
Job" dialog sends becomes a submission; each job the API lists becomes a row of the Notebook Jobs panel."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.scheduler import mapping
from gpuworkspace_spawner.scheduler.mapping import Paths, Refused

HOME = Paths(root_dir="/home/jovyan", home_dir="/home/jovyan")
QUEUED_REASON = (
    "waiting for quota in queue training: couldn't assign flavors to pod set main: insufficient unused"
    " quota for nvidia.com/gpu in flavor h100, 1 more needed"
)


def view(**over: Any) -> dict[str, Any]:
    base = {
        "name": "alice-train-x7k2q",
        "user": "alice",
        "profile": "train-1gpu",
        "notebook": "projects/mnist/train.ipynb",
        "script": None,
        "output": "s3://jobs/outputs/alice/alice-train-x7k2q/",
        "created": "2026-01-02T03:04:05Z",
        "started": None,
        "finished": None,
        "state": "queued",
        "reason": QUEUED_REASON,
    }
    return {**base, **over}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("3", 3, id="int"),
        pytest.param("0.5", 0.5, id="float"),
        pytest.param("1e-3", 0.001, id="exponent"),
        pytest.param("True", True, id="true"),
        pytest.param("false", False, id="false"),
        pytest.param('"3"', "3", id="quoted-number-stays-a-string"),
        pytest.param("'yes'", "yes", id="single-quotes"),
        pytest.param("baseline", "baseline", id="word"),
        pytest.param("nan", "nan", id="nan-is-no-number"),
        pytest.param("inf", "inf", id="inf-is-no-number"),
        pytest.param(" 42 ", 42, id="spaces"),
        pytest.param("", "", id="empty"),
    ],
)
def test_parameter_values_typed_as_the_notebook_gets_them(text: str, value: Any) -> None:
    got = mapping.parameter_value(text)
    assert got == value and type(got) is type(value)


def test_create_job_becomes_a_submission() -> None:
    model = {
        "input_uri": "projects/mnist/train.ipynb",
        "runtime_environment_name": "train-1gpu",
        "parameters": {"epochs": "3", "lr": "0.01", "run_name": "baseline"},
        "output_formats": ["ipynb"],
        "name": "mnist",
    }
    assert mapping.submission(model, HOME, server="") == {
        "profile": "train-1gpu",
        "notebook": "projects/mnist/train.ipynb",
        "parameters": {"epochs": 3, "lr": 0.01, "run_name": "baseline"},
        "server": "",
    }


def test_paths_are_made_relative_to_the_home_directory() -> None:
    paths = Paths(root_dir="/home/jovyan/work", home_dir="/home/jovyan")
    body = mapping.submission({"input_uri": "a/b.py", "runtime_environment_name": "p"}, paths, server="gpu")
    assert body["script"] == "work/a/b.py" and "notebook" not in body and body["server"] == "gpu"


@pytest.mark.parametrize(
    ("model", "words"),
    [
        pytest.param({"input_uri": "data.csv", "runtime_environment_name": "p"}, "only a notebook", id="csv"),
        pytest.param(
            {"input_uri": "a.ipynb", "runtime_environment_name": ""}, "choose a job profile", id="no-env"
        ),
        pytest.param(
            {"input_uri": "a.ipynb", "runtime_environment_name": "p", "output_formats": ["ipynb", "html"]},
            "html are not made",
            id="html",
        ),
        pytest.param(
            {"input_uri": "../../etc/x.ipynb", "runtime_environment_name": "p"},
            "outside your home",
            id="escape",
        ),
    ],
)
def test_refusals_name_what_is_wrong(model: dict[str, Any], words: str) -> None:
    with pytest.raises(Refused, match=words):
        mapping.submission(model, HOME, server="")


@pytest.mark.parametrize(
    ("state", "status"),
    [
        pytest.param("queued", "QUEUED", id="queued"),
        pytest.param("running", "IN_PROGRESS", id="running"),
        pytest.param("succeeded", "COMPLETED", id="succeeded"),
        pytest.param("failed", "FAILED", id="failed"),
        pytest.param("cancelling", "STOPPING", id="cancelling"),
    ],
)
def test_states_map_to_jupyter_scheduler_statuses(state: str, status: str) -> None:
    assert mapping.describe(view(state=state), HOME)["status"] == status


def test_a_queued_job_shows_kueues_reason() -> None:
    row = mapping.describe(view(), HOME, {"name": "mnist run", "parameters": {"epochs": "3"}})
    assert row["status"] == "QUEUED" and row["status_message"] == QUEUED_REASON
    assert row["name"] == "mnist run" and row["job_id"] == "alice-train-x7k2q"
    assert row["parameters"] == {"epochs": "3"} and row["runtime_environment_name"] == "train-1gpu"
    assert row["create_time"] == 1767323045000 and row["end_time"] is None and not row["downloaded"]


def test_results_in_the_workspace_are_listed_where_they_are() -> None:
    done = view(
        state="succeeded",
        reason="Job completed",
        output="/home/jovyan/team/jobs/alice/alice-train-x7k2q/",
        started="2026-01-02T03:05:00Z",
        finished="2026-01-02T03:15:00Z",
    )
    row = mapping.describe(done, HOME)
    assert row["status"] == "COMPLETED" and row["downloaded"] is True
    assert row["end_time"] == 1767323700000 and row["start_time"] == 1767323100000
    assert {f["file_format"]: f["file_path"] for f in row["job_files"]} == {
        "input": "projects/mnist/train.ipynb",
        "ipynb": "team/jobs/alice/alice-train-x7k2q/train.ipynb",
    }
    assert row["status_message"] == "Job completed"


def test_results_in_an_object_store_are_named_not_linked() -> None:
    row = mapping.describe(view(state="failed", reason="DeadlineExceeded"), HOME)
    assert row["status"] == "FAILED" and row["downloaded"] is False
    assert [f["file_path"] for f in row["job_files"] if f["file_format"] == "ipynb"] == [None]
    assert row["status_message"] == "DeadlineExceeded; results in s3://jobs/outputs/alice/alice-train-x7k2q/"


def test_a_stopped_job_stays_listed_as_stopped() -> None:
    row = mapping.stopped(mapping.describe(view(), HOME), now_ms=1767323999000)
    assert (
        row["status"] == "STOPPED"
        and row["end_time"] == 1767323999000
        and "cancelled" in row["status_message"]
    )


def test_job_profiles_are_the_dialogs_environments() -> None:
    env = mapping.environment(
        {
            "name": "train-1gpu",
            "displayName": "Training job, one whole GPU",
            "description": "",
            "gpus": 1,
            "queue": "training",
            "maxRuntimeSeconds": 43200,
            "output": "s3://b/",
        }
    )
    assert env["name"] == env["label"] == "train-1gpu"  # the picker needs both equal (see environment())
    assert env["description"].startswith("Training job, one whole GPU")
    assert env["description"] == "Training job, one whole GPU (1 GPU, queue training, at most 12 h)"
    assert env["output_formats"] == ["ipynb"] and env["file_extensions"] == ["ipynb"]


def _rows() -> list[dict[str, Any]]:
    return [
        {"job_id": f"j-{i}", "name": name, "status": status, "create_time": t}
        for i, (name, status, t) in enumerate(
            [("a", "QUEUED", 3), ("b", "COMPLETED", 1), ("ab", "QUEUED", 2), ("c", "FAILED", None)]
        )
    ]


@pytest.mark.parametrize(
    ("query", "names", "total", "token"),
    [
        pytest.param(
            {"sort_by": [{"name": "create_time", "direction": "desc"}]},
            ["a", "ab", "b", "c"],
            4,
            None,
            id="newest-first",
        ),
        pytest.param(
            {"sort_by": [{"name": "create_time", "direction": "asc"}]},
            ["c", "b", "ab", "a"],
            4,
            None,
            id="oldest-first",
        ),
        pytest.param(
            {"status": "QUEUED", "sort_by": [{"name": "name", "direction": "asc"}]},
            ["a", "ab"],
            2,
            None,
            id="status",
        ),
        pytest.param({"name": "a", "sort_by": []}, ["a", "ab"], 2, None, id="name-prefix"),
        pytest.param(
            {"max_items": 2, "sort_by": [{"name": "name", "direction": "asc"}]},
            ["a", "ab"],
            4,
            "2",
            id="page-1",
        ),
        pytest.param(
            {"max_items": 2, "next_token": "2", "sort_by": [{"name": "name", "direction": "asc"}]},
            ["b", "c"],
            4,
            None,
            id="page-2",
        ),
        pytest.param({"job_definition_id": "d-1"}, [], 0, None, id="no-definitions"),
    ],
)
def test_list_queries(query: dict[str, Any], names: list[str], total: int, token: str | None) -> None:
    page, count, next_token = mapping.select(_rows(), query)
    assert [r["name"] for r in page] == names and count == total and next_token == token


def test_a_bad_page_token_is_refused() -> None:
    with pytest.raises(Refused, match="next_token"):
        mapping.select(_rows(), {"next_token": "x"})
