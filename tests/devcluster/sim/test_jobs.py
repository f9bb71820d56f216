"""batch/v1 Jobs on the simulated cluster, driven by the real kubectl: the Job controller end to end.

One simulated cluster (scheduler, kubelets running the pods' commands as local processes) for the module.
Each row of the table is a Job whose pods run a real ``python -c`` command; the test waits for the
Job's terminal condition with ``kubectl wait`` and checks the counts, reasons and Events a user sees.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpuworkspace_devcluster.testing import BackgroundCluster

from ..conftest import Kubectl

pytestmark = pytest.mark.kubectl
NS = "gpu-workspaces"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed on this machine")
    with BackgroundCluster(tmp_path_factory.mktemp("jobs") / "state", simulate=True) as bg:
        yield Kubectl(bg.kubeconfig)


def eventually(check: Callable[[], Any], limit_s: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {limit_s}s waiting for {what}")


def job(name: str, script: str, restart: str = "Never", **spec: Any) -> Obj:
    container = {"name": "main", "image": "python:3.12", "command": ["python", "-c", script]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": restart,
                    "terminationGracePeriodSeconds": 1,
                    "containers": [container],
                }
            },
            **spec,
        },
    }


def apply(kubectl: Kubectl, obj: Obj, check: bool = True) -> Any:
    return kubectl("apply", "-f", "-", input=json.dumps(obj), check=check)


def get_job(kubectl: Kubectl, name: str) -> Obj:
    return json.loads(kubectl("get", "job", name, "-n", NS, "-o", "json").stdout)  # type: ignore[no-any-return]


def job_pods(kubectl: Kubectl, name: str) -> list[Obj]:
    out = kubectl("get", "pods", "-n", NS, "-l", f"batch.kubernetes.io/job-name={name}", "-o", "json").stdout
    return json.loads(out)["items"]  # type: ignore[no-any-return]


def reasons(kubectl: Kubectl, name: str) -> list[str]:
    selector = f"involvedObject.kind=Job,involvedObject.name={name}"
    out = kubectl("get", "events", "-n", NS, "--field-selector", selector, "-o", "json").stdout
    return [e["reason"] for e in json.loads(out)["items"]]


def condition(obj: Obj, type_: str) -> Obj:
    return next(c for c in obj["status"].get("conditions", []) if c["type"] == type_)


# name, spec, script, terminal condition, reason, succeeded, failed, Events
CASES = [
    ("succeeds", {}, "print('hello from the job')", "Complete", "CompletionsReached", 1, 0, "Completed"),
    (
        "fails-past-backoff",
        {"backoffLimit": 1},
        "import sys; sys.exit(3)",
        "Failed",
        "BackoffLimitExceeded",
        0,
        2,
        "BackoffLimitExceeded",
    ),
    (
        "exceeds-deadline",
        {"activeDeadlineSeconds": 3},
        "import time; time.sleep(120)",
        "Failed",
        "DeadlineExceeded",
        0,
        1,  # the running pod, deleted because the Job failed, counts as failed
        "DeadlineExceeded",
    ),
    (
        "parallel",
        {"parallelism": 2, "completions": 3},
        "import time; time.sleep(0.5)",
        "Complete",
        "CompletionsReached",
        3,
        0,
        "Completed",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_job_runs_to_its_end(kubectl: Kubectl, case: tuple[Any, ...]) -> None:
    name, spec, script, terminal, reason, succeeded, failed, event = case
    apply(kubectl, job(name, script, **spec))
    kubectl("wait", f"--for=condition={terminal}", f"job/{name}", "-n", NS, "--timeout=60s", timeout=70)
    done = get_job(kubectl, name)
    assert condition(done, terminal)["reason"] == reason
    target = "SuccessCriteriaMet" if terminal == "Complete" else "FailureTarget"
    assert condition(done, target)["reason"] == reason
    status = done["status"]
    assert (status.get("succeeded", 0), status.get("failed", 0), status.get("active", 0)) == (
        succeeded,
        failed,
        0,
    )
    assert ("completionTime" in status) == (terminal == "Complete")
    pods = job_pods(kubectl, name)
    assert len(pods) == succeeded + failed or terminal == "Failed"  # never more pods than needed
    for pod in pods:
        meta = pod["metadata"]
        assert meta["name"].startswith(f"{name}-") and len(meta["name"]) == len(name) + 6
        assert meta["labels"]["batch.kubernetes.io/controller-uid"] == done["metadata"]["uid"]
        assert meta["labels"]["job-name"] == name
        owner = meta["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("Job", name, True)
        assert "batch.kubernetes.io/job-tracking" not in (meta.get("finalizers") or [])
    seen = eventually(lambda: (r := reasons(kubectl, name)) and event in r and r, 10, f"{event} event")
    assert "SuccessfulCreate" in seen
    if name == "succeeds":
        assert kubectl("logs", f"job/{name}", "-n", NS).stdout.strip() == "hello from the job"
    if name == "exceeds-deadline":
        assert "SuccessfulDelete" in seen


def test_indexed_job_gives_each_pod_its_index(kubectl: Kubectl) -> None:
    script = "import os; print('index', os.environ['JOB_COMPLETION_INDEX'])"
    apply(kubectl, job("indexed", script, completionMode="Indexed", completions=3, parallelism=3))
    kubectl("wait", "--for=condition=Complete", "job/indexed", "-n", NS, "--timeout=60s", timeout=70)
    status = get_job(kubectl, "indexed")["status"]
    assert (status["succeeded"], status["completedIndexes"]) == (3, "0-2")
    seen = {}
    for pod in job_pods(kubectl, "indexed"):
        index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        assert pod["metadata"]["name"].startswith(f"indexed-{index}-")
        assert pod["spec"]["hostname"] == f"indexed-{index}"
        seen[index] = kubectl("logs", pod["metadata"]["name"], "-n", NS).stdout.strip()
    assert seen == {"0": "index 0", "1": "index 1", "2": "index 2"}


def test_get_jobs_prints_kubectl_columns(kubectl: Kubectl) -> None:
    apply(kubectl, job("columns", "print(1)", completions=1))
    kubectl("wait", "--for=condition=Complete", "job/columns", "-n", NS, "--timeout=60s", timeout=70)
    lines = kubectl("get", "jobs", "columns", "-n", NS).stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert lines[1].split()[:3] == ["columns", "Complete", "1/1"]
    wide = kubectl("get", "jobs", "columns", "-n", NS, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-3:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    assert "batch.kubernetes.io/controller-uid=" in wide[1]
    kubectl("delete", "job", "columns", "-n", NS, timeout=40)  # kubectl's default: background
    eventually(lambda: not job_pods(kubectl, "columns"), 30, "background deletion removes the pods")


def test_orphan_deletion_keeps_the_pods_without_owner_or_finalizer(kubectl: Kubectl) -> None:
    apply(kubectl, job("orphaned", "print(1)"))
    kubectl("wait", "--for=condition=Complete", "job/orphaned", "-n", NS, "--timeout=60s", timeout=70)
    kubectl("delete", "job", "orphaned", "-n", NS, "--cascade=orphan", timeout=40)
    left = eventually(
        lambda: [p for p in job_pods(kubectl, "orphaned") if not p["metadata"].get("ownerReferences")],
        20,
        "the pod kept, its ownerReference removed",
    )
    assert len(left) == 1 and not left[0]["metadata"].get("finalizers")
    assert left[0]["status"]["phase"] == "Succeeded"


def test_suspend_removes_pods_and_resume_restarts_the_clock(kubectl: Kubectl) -> None:
    apply(kubectl, job("pausable", "import time; time.sleep(120)"))
    eventually(lambda: get_job(kubectl, "pausable")["status"].get("active") == 1, 30, "one active pod")
    first_start = get_job(kubectl, "pausable")["status"]["startTime"]
    kubectl("patch", "job", "pausable", "-n", NS, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    kubectl("wait", "--for=condition=Suspended", "job/pausable", "-n", NS, "--timeout=30s", timeout=40)
    assert condition(get_job(kubectl, "pausable"), "Suspended")["reason"] == "JobSuspended"
    eventually(lambda: not job_pods(kubectl, "pausable"), 30, "the running pod removed")
    assert get_job(kubectl, "pausable")["status"].get("failed", 0) == 0
    time.sleep(1.1)  # startTime has second resolution: the reset must be visible
    kubectl("patch", "job", "pausable", "-n", NS, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    kubectl("wait", "--for=condition=Suspended=False", "job/pausable", "-n", NS, "--timeout=30s", timeout=40)
    resumed = get_job(kubectl, "pausable")
    assert condition(resumed, "Suspended")["reason"] == "JobResumed"
    assert resumed["status"]["startTime"] > first_start
    eventually(lambda: get_job(kubectl, "pausable")["status"].get("active") == 1, 30, "a new pod")
    assert {"Suspended", "Resumed", "SuccessfulDelete"} <= set(reasons(kubectl, "pausable"))
    kubectl("delete", "job", "pausable", "-n", NS, "--cascade=foreground", "--timeout=30s", timeout=40)
    eventually(lambda: not job_pods(kubectl, "pausable"), 30, "foreground deletion removes the pods")


def test_ttl_after_finished_deletes_job_and_pods(kubectl: Kubectl) -> None:
    apply(kubectl, job("short-lived", "print('bye')", ttlSecondsAfterFinished=2))
    kubectl("wait", "--for=condition=Complete", "job/short-lived", "-n", NS, "--timeout=60s", timeout=70)
    assert job_pods(kubectl, "short-lived")
    gone = kubectl(
        "wait", "--for=delete", "job/short-lived", "-n", NS, "--timeout=30s", check=False, timeout=40
    )
    assert gone.returncode == 0, gone.stderr
    eventually(lambda: not job_pods(kubectl, "short-lived"), 30, "the pods deleted with the Job")


def test_bad_specs_are_refused_with_field_paths(kubectl: Kubectl) -> None:
    bad = job("always", "print(1)", restart="Always")
    out = apply(kubectl, bad, check=False)
    assert out.returncode != 0
    assert (
        'spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"'
        in out.stderr
    )
    out = apply(kubectl, job("negative", "print(1)", backoffLimit=-1), check=False)
    assert "spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0" in out.stderr
    missing = kubectl("get", "job", "always", "-n", NS, check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr
    served = kubectl("api-resources", "--api-group=batch").stdout
    assert "jobs" in served and "Job" in served
