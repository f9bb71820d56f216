"""The job builders (issue 17): golden manifests per scenario, and the properties that must hold for
every job whatever the profile (Kueue labels, suspended, no token, restricted, the code from a copy)."""

from __future__ import annotations

import pytest

from gpuworkspace_spawner.catalog.jobprofiles import JobOutputs, JobProfile
from gpuworkspace_spawner.catalog.model import Access, Resources, Security, SharedMount
from gpuworkspace_spawner.jobs.manifests import (
    JobContext,
    Submission,
    build_code_claim,
    build_code_snapshot,
    build_command,
    build_job,
    output_location,
    owned_by,
)
from gpuworkspace_spawner.manifests.names import WorkspaceIdentity
from tests.unit.manifests.golden import assert_golden, validate

IMAGE = "quay.io/jupyter/pytorch-notebook@sha256:" + "ab" * 32
TEAM = SharedMount(
    name="ml", claim_name="team-ml-cephfs", mount_path="/teams/ml", read_only=False, sub_path="ml"
)
GPUS = Resources(
    requests={"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "2"},
    limits={"cpu": "8", "memory": "48Gi", "nvidia.com/gpu": "2"},
)
TEAM_PROFILE = JobProfile(
    slug="train-2gpu",
    display_name="Training, 2 GPUs",
    image=IMAGE,
    queue="training",
    priority_class="batch-high",
    max_runtime_s=43200,
    resources=GPUS,
    access=Access(groups=frozenset({"ml"})),
    outputs=JobOutputs(team_directory=TEAM, sub_path="jobs"),
)
STORE_PROFILE = JobProfile(
    slug="cpu-batch",
    display_name="CPU batch",
    image=IMAGE,
    queue="batch",
    max_runtime_s=3600,
    backoff_limit=2,
    resources=Resources(requests={"cpu": "1", "memory": "2Gi"}, limits={"cpu": "2", "memory": "4Gi"}),
    outputs=JobOutputs(object_store_url="s3://jobs/out/", object_store_endpoint="https://rgw.example.org"),
)
ALICE = WorkspaceIdentity(user="alice", server="", namespace="gpu-workspaces", owner="o-1")


def _ctx(profile: JobProfile, submission: Submission, **extra: object) -> JobContext:
    return JobContext(
        submission=submission,
        profile=profile,
        identity=ALICE,
        home_claim="claim-alice",
        home_mount_path="/home/jovyan",
        catalog_version="2026.12.1",
        submitted_by="alice",
        security=Security(run_as_user=1000, run_as_group=100, fs_group=100),
        network_profile="git-registry-storage",
        storage_class="ceph-rbd",
        **extra,  # type: ignore[arg-type]
    )


NOTEBOOK = _ctx(
    TEAM_PROFILE,
    Submission(
        name="alice-train-x7k2q",
        notebook="projects/mnist/train.ipynb",
        parameters={"epochs": 3, "lr": 0.01, "tag": "42", "fast": True},
    ),
)
SCRIPT = _ctx(STORE_PROFILE, Submission(name="alice-prep-a1b2c", script="prep.py", parameters={"shards": 8}))


@pytest.mark.parametrize(
    ("name", "ctx"),
    [
        pytest.param("job-notebook-team.yaml", NOTEBOOK, id="notebook"),
        pytest.param("job-script-store.yaml", SCRIPT, id="script"),
    ],
)
def test_job_golden(name: str, ctx: JobContext) -> None:
    job = build_job(ctx)
    validate(job)
    assert_golden(name, job)


def test_code_claim_and_snapshot_golden() -> None:
    claim = build_code_claim(NOTEBOOK, size="10Gi")
    validate(claim)
    assert_golden("job-code-claim.yaml", claim)
    assert_golden("job-code-snapshot.yaml", build_code_snapshot(NOTEBOOK, snapshot_class="ceph-rbd-snap"))


@pytest.mark.parametrize("ctx", [NOTEBOOK, SCRIPT], ids=["notebook", "script"])
def test_every_job_is_queued_suspended_tokenless_and_restricted(ctx: JobContext) -> None:
    job = build_job(ctx)
    labels, pod = job["metadata"]["labels"], job["spec"]["template"]["spec"]
    assert labels["kueue.x-k8s.io/queue-name"] == ctx.profile.queue
    assert labels.get("kueue.x-k8s.io/priority-class") == ctx.profile.priority_class
    assert (
        labels["gpuworkspace.dev/kind"]
        == "job"
        == job["spec"]["template"]["metadata"]["labels"]["gpuworkspace.dev/kind"]
    )
    assert job["spec"]["suspend"] is True
    assert job["spec"]["activeDeadlineSeconds"] == ctx.profile.max_runtime_s
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert (
        sc["runAsNonRoot"] and not sc["allowPrivilegeEscalation"] and sc["capabilities"] == {"drop": ["ALL"]}
    )
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert (
        job["spec"]["template"]["metadata"]["labels"]["gpuworkspace.dev/network-profile"]
        == "git-registry-storage"
    )
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]]
    assert ctx.code_claim in claims and ctx.home_claim not in claims  # never the live disk
    assert "component" not in job["spec"]["template"]["metadata"]["labels"]  # no workspace ingress policy


def test_papermill_keeps_strings_strings() -> None:
    command = build_command(NOTEBOOK)
    assert command[:3] == ["papermill", "train.ipynb", "/outputs/train.ipynb"]
    pod = build_job(NOTEBOOK)["spec"]["template"]["spec"]
    assert pod["containers"][0]["workingDir"] == "/home/jovyan/projects/mnist"
    assert command[command.index("-r") : command.index("-r") + 3] == ["-r", "tag", "42"]
    assert command[command.index("epochs") - 1 : command.index("epochs") + 2] == ["-p", "epochs", "3"]
    assert command[command.index("fast") - 1 : command.index("fast") + 2] == ["-p", "fast", "True"]


def test_results_appear_in_the_workspace_team_directory() -> None:
    assert output_location(NOTEBOOK) == "/teams/ml/jobs/alice/alice-train-x7k2q/"
    (mount,) = [
        m
        for m in build_job(NOTEBOOK)["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        if m["name"] == "outputs"
    ]
    assert mount == {"name": "outputs", "mountPath": "/outputs", "subPath": "ml/jobs/alice/alice-train-x7k2q"}
    assert output_location(SCRIPT) == "s3://jobs/out/alice/alice-prep-a1b2c/"


def test_owned_by_the_job() -> None:
    job = {"metadata": {"name": "j", "uid": "u-1"}}
    assert owned_by(job)["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u-1", "blockOwnerDeletion": False}
    ]
