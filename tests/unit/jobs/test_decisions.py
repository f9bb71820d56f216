"""A submission's checks and a job's state in plain words, as tables."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.catalog.jobprofiles import JobOutputs, JobProfile
from gpuworkspace_spawner.catalog.model import Access, Catalog
from gpuworkspace_spawner.jobs.state import decide_state, job_view
from gpuworkspace_spawner.jobs.submission import SubmissionError, check_submission, job_name

OUT = JobOutputs(object_store_url="s3://b/")
OPEN = JobProfile("train", "Train", "img@sha256:" + "a" * 64, "training", 3600, OUT)
ML_ONLY = JobProfile(
    "ml", "ML", "img@sha256:" + "a" * 64, "training", 3600, OUT, access=Access(groups=frozenset({"ml"}))
)
CATALOG = Catalog(version="1", profiles=(), job_profiles=(OPEN, ML_ONLY))


def _check(body: dict[str, Any], groups: frozenset[str] = frozenset()) -> Any:
    return check_submission(body, CATALOG, user="alice", groups=groups)


def test_a_good_submission() -> None:
    request = _check(
        {"profile": "ml", "notebook": "a/b.ipynb", "parameters": {"n": 3, "s": "x"}}, frozenset({"ml"})
    )
    assert (request.profile, request.notebook, request.script, dict(request.parameters)) == (
        ML_ONLY,
        "a/b.ipynb",
        None,
        {"n": 3, "s": "x"},
    )


@pytest.mark.parametrize(
    ("body", "words"),
    [
        pytest.param({"notebook": "a.ipynb"}, "field 'profile' is required", id="no-profile"),
        pytest.param(
            {"profile": "nope", "notebook": "a.ipynb"},
            "'nope' is not a job profile you can use (yours: train)",
            id="unknown",
        ),
        pytest.param(
            {"profile": "ml", "notebook": "a.ipynb"},
            "'ml' is not a job profile you can use (yours: train)",
            id="out-of-group",
        ),
        pytest.param({"profile": "train"}, "exactly one of 'notebook'", id="nothing-to-run"),
        pytest.param(
            {"profile": "train", "notebook": "a.ipynb", "script": "b.py"}, "exactly one of", id="both"
        ),
        pytest.param(
            {"profile": "train", "notebook": "/etc/a.ipynb"}, "relative to your home", id="absolute"
        ),
        pytest.param({"profile": "train", "notebook": "../bob/a.ipynb"}, "without '..'", id="escape"),
        pytest.param({"profile": "train", "notebook": "a.py"}, "is not a .ipynb file", id="not-notebook"),
        pytest.param({"profile": "train", "script": "a.sh"}, "is not a .py file", id="not-script"),
        pytest.param(
            {"profile": "train", "notebook": "a.ipynb", "parameters": []},
            "must be an object",
            id="params-list",
        ),
        pytest.param(
            {"profile": "train", "notebook": "a.ipynb", "parameters": {"a b": 1}},
            "parameters.a b: not a Python identifier",
            id="param-name",
        ),
        pytest.param(
            {"profile": "train", "notebook": "a.ipynb", "parameters": {"a": [1]}},
            "parameters.a: a value is",
            id="param-list",
        ),
        pytest.param(
            {"profile": "train", "notebook": "a.ipynb", "parameters": {"a": float("nan")}},
            "parameters.a",
            id="nan",
        ),
        pytest.param(
            {"profile": "train", "notebook": "a.ipynb", "image": "x"},
            "unknown field(s) image",
            id="unknown-field",
        ),
        pytest.param({"profile": "train", "notebook": "a.ipynb", "server": 3}, "field 'server'", id="server"),
    ],
)
def test_refusals_name_the_field(body: dict[str, Any], words: str) -> None:
    with pytest.raises(SubmissionError) as caught:
        _check(body)
    assert words in caught.value.message


def test_job_names_are_dns_labels_short_enough_for_pods() -> None:
    assert job_name("alice", "projects/Train Model.ipynb", "x7k2q").endswith("-x7k2q")
    long = job_name("a" * 80 + "@example.com", "n" * 100 + ".ipynb", "x7k2q")
    assert len(long) <= 52 and long.endswith("-x7k2q")


JOB = {
    "metadata": {"name": "j", "labels": {"kueue.x-k8s.io/queue-name": "training"}},
    "spec": {"suspend": True},
}
QUOTA = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 1 more needed"


def _wl(*conds: tuple[str, str, str, str]) -> dict[str, Any]:
    return {
        "status": {
            "conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conds]
        }
    }


@pytest.mark.parametrize(
    ("job", "workload", "phase", "words"),
    [
        pytest.param(
            JOB, None, "queued", "waiting for Kueue to take it into queue training", id="no-workload"
        ),
        pytest.param(
            JOB,
            _wl(("QuotaReserved", "False", "Pending", QUOTA)),
            "queued",
            f"waiting for quota in queue training: {QUOTA}",
            id="quota",
        ),
        pytest.param(
            JOB,
            _wl(("QuotaReserved", "False", "Inadmissible", "ClusterQueue gpu is inactive")),
            "queued",
            "cannot admit it: ClusterQueue gpu is inactive",
            id="inadmissible",
        ),
        pytest.param(
            JOB,
            _wl(("Evicted", "True", "Preempted", "Preempted to accommodate a workload")),
            "queued",
            "put back in queue training: Preempted",
            id="preempted",
        ),
        pytest.param(
            {**JOB, "spec": {"suspend": False}, "status": {"active": 1, "ready": 1}},
            None,
            "running",
            "running",
            id="running",
        ),
        pytest.param(
            {**JOB, "spec": {"suspend": False}, "status": {"active": 1}},
            None,
            "running",
            "pod is starting",
            id="starting",
        ),
        pytest.param(
            {
                **JOB,
                "status": {"conditions": [{"type": "Complete", "status": "True", "reason": "Completed"}]},
            },
            None,
            "succeeded",
            "Completed",
            id="done",
        ),
        pytest.param(
            {
                **JOB,
                "status": {
                    "conditions": [
                        {
                            "type": "Failed",
                            "status": "True",
                            "reason": "DeadlineExceeded",
                            "message": "Job was active longer than specified deadline",
                        }
                    ]
                },
            },
            None,
            "failed",
            "longer than specified deadline",
            id="deadline",
        ),
        pytest.param(
            {**JOB, "metadata": {**JOB["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}},
            None,
            "cancelling",
            "cancelled",
            id="cancelling",
        ),
    ],
)
def test_state_in_plain_words(job: dict[str, Any], workload: Any, phase: str, words: str) -> None:
    state = decide_state(job, workload)
    assert state.phase == phase and words in state.reason
    assert job_view(job, workload)["state"] == phase
