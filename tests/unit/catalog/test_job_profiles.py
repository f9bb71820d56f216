"""``JobProfile`` documents (issue 17): loaded into the model next to the workspace profiles, and every
mistake reported with its file, profile and field, like a workspace profile's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_spawner.catalog import CatalogError, load_catalog
from gpuworkspace_spawner.catalog.jobprofiles import JobOutputs
from gpuworkspace_spawner.catalog.model import SharedMount

from .conftest import DELETE, IMAGE, catalog_doc, profile_doc, with_path, write_yaml

TEAM = {"name": "ml", "claimName": "team-ml-cephfs", "mountPath": "/teams/ml", "readOnly": False}
READ_ONLY_TEAM = {"name": "ro", "claimName": "team-ro", "mountPath": "/teams/ro"}


def job_doc(name: str = "train", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "displayName": "Training",
        "image": IMAGE,
        "resources": {
            "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"},
            "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"},
        },
        "queue": "training",
        "priorityClass": "batch-low",
        "maxRuntime": "12h",
        "access": {"groups": ["ml"]},
        "outputs": {"teamDirectory": "ml", "subPath": "jobs"},
    }
    body.update(spec)
    return {
        "apiVersion": "gpuworkspace.dev/v1alpha1",
        "kind": "JobProfile",
        "metadata": {"name": name},
        "spec": body,
    }


def _load(tmp_path: Path, *jobs: dict[str, Any]) -> Any:
    workspace = profile_doc("cpu", storage={"teamDirectories": [TEAM, READ_ONLY_TEAM]})
    return load_catalog(write_yaml(tmp_path / "c.yaml", catalog_doc(), workspace, *jobs))


def test_a_job_profile_reaches_the_model(tmp_path: Path) -> None:
    catalog = _load(tmp_path, job_doc())
    job = catalog.get_job_profile("train")
    assert job is not None and catalog.get("train") is None  # not a workspace profile
    assert (job.image, job.queue, job.priority_class, job.max_runtime_s) == (
        IMAGE,
        "training",
        "batch-low",
        43200,
    )
    assert job.gpus == 2 and job.resources.limits["memory"] == "32Gi"
    assert job.access.allows("bob", {"ml"}) and not job.access.allows("bob", {"other"})
    team = SharedMount(name="ml", claim_name="team-ml-cephfs", mount_path="/teams/ml", read_only=False)
    assert job.outputs == JobOutputs(team_directory=team, sub_path="jobs")
    assert job.source.endswith("c.yaml")


def test_an_object_store_target(tmp_path: Path) -> None:
    outputs = {"objectStore": {"url": "s3://jobs/out/", "endpoint": "https://rgw.example.org"}}
    job = _load(tmp_path, job_doc(outputs=outputs)).job_profiles[0]
    assert job.outputs == JobOutputs(
        object_store_url="s3://jobs/out/", object_store_endpoint="https://rgw.example.org"
    )


@pytest.mark.parametrize(
    ("path", "value", "field", "words"),
    [
        pytest.param("spec.queue", DELETE, "spec.queue", "required field is missing", id="no-queue"),
        pytest.param("spec.queue", "Training!", "spec.queue", "not a LocalQueue name", id="bad-queue"),
        pytest.param(
            "spec.priorityClass", "Low Prio", "spec.priorityClass", "WorkloadPriorityClass", id="bad-priority"
        ),
        pytest.param(
            "spec.maxRuntime", DELETE, "spec.maxRuntime", "required field is missing", id="no-deadline"
        ),
        pytest.param("spec.maxRuntime", "40d", "spec.maxRuntime", "between 1m and 30d", id="too-long"),
        pytest.param("spec.maxRuntime", "soon", "spec.maxRuntime", "not a duration", id="not-duration"),
        pytest.param(
            "spec.image",
            "quay.io/jupyter/base-notebook:latest",
            "spec.image",
            "must be pinned by digest",
            id="image-tag",
        ),
        pytest.param(
            "spec.resources.limits.[nvidia.com/gpu]",
            "1.5",
            "spec.resources.limits.nvidia.com/gpu",
            "whole numbers",
            id="half-gpu",
        ),
        pytest.param(
            "spec.resources.requests.[nvidia.com/gpu]",
            "1",
            "spec.resources.requests.nvidia.com/gpu",
            "must equal its limit",
            id="gpu-request-not-limit",
        ),
        pytest.param(
            "spec.resources.limits.[nvidia.com/mig-1g.10gb]",
            "1",
            "spec.resources.limits.nvidia.com/mig-1g.10gb",
            "jobs get whole GPUs",
            id="mig-slice",
        ),
        pytest.param("spec.outputs", {}, "spec.outputs", "exactly one target", id="no-target"),
        pytest.param(
            "spec.outputs.teamDirectory",
            "nope",
            "spec.outputs.teamDirectory",
            "writable teamDirectories",
            id="unknown-team",
        ),
        pytest.param(
            "spec.outputs.teamDirectory",
            "ro",
            "spec.outputs.teamDirectory",
            "writable team directories: ml)",
            id="read-only-team",
        ),
        pytest.param(
            "spec.outputs.subPath", "../x", "spec.outputs.subPath", "must be relative", id="escaping"
        ),
        pytest.param("spec.access.groups", "ml", "spec.access.groups", "is not of type 'array'", id="groups"),
        pytest.param("spec.gpus", 2, "spec.gpus", "unknown field", id="unknown-field"),
    ],
)
def test_mistakes_name_file_profile_and_field(
    tmp_path: Path, path: str, value: Any, field: str, words: str
) -> None:
    with pytest.raises(CatalogError) as caught:
        _load(tmp_path, with_path(job_doc(), path, value))
    problems = [p for p in caught.value.problems if p.field == field]
    assert problems, caught.value
    assert problems[0].profile == "train" and problems[0].file.endswith("c.yaml")
    assert any(words in p.message for p in problems), caught.value


def test_duplicate_job_profiles_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="duplicate profile name 'train'"):
        _load(tmp_path, job_doc(), job_doc())


def test_an_unknown_kind_names_the_job_profile_kind(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="JobProfile"):
        _load(tmp_path, {**job_doc(), "kind": "JobProfil"})


def test_the_demo_catalog_has_job_profiles() -> None:
    catalog = load_catalog(Path(__file__).resolve().parents[3] / "hub_config" / "catalog")
    assert {j.slug for j in catalog.job_profiles} >= {"train-1gpu"}
    assert all(j.queue and j.max_runtime_s for j in catalog.job_profiles)
