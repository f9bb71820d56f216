"""helm-values/extra-manifests/64-kueue-queues.yaml: Kueue's queues for the jobs service.

Every object is validated strictly against Kueue's CRD schemas (``../shared/schemas/kueue``, v0.19.2) by
the devcluster's API-server validation, as ``kubectl apply`` would have a real API server do it; every
job profile of the demo catalog names a LocalQueue and a WorkloadPriorityClass defined there; and the
training queues' GPU quota leaves part of the workspace namespace's GPU quota to interactive sessions,
which are never queued.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from gpuworkspace_devcluster.errors import ApiError
from gpuworkspace_devcluster.resources import RESOURCE_TYPES
from gpuworkspace_devcluster.validation import validate_object
from gpuworkspace_spawner.catalog import load_catalog
from gpuworkspace_spawner.catalog.units import GPU_RESOURCE, parse_quantity
from tests.helm import MANIFESTS, REPO, SHARED, WORKSPACE_NAMESPACE, manifests

KUEUE = "kueue.x-k8s.io"
QUEUES_FILE = MANIFESTS / "64-kueue-queues.yaml"
needs_schemas = pytest.mark.skipif(SHARED is None, reason="../shared/schemas is absent: no Kueue CRD schemas")


def kueue_objects() -> list[dict[str, Any]]:
    return [doc for _, doc in manifests() if doc["apiVersion"].partition("/")[0] == KUEUE]


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in kueue_objects() if o["kind"] == kind}


def _validate(obj: dict[str, Any]) -> list[str]:
    group, _, version = obj["apiVersion"].partition("/")
    (rt,) = [r for r in RESOURCE_TYPES if (r.group, r.version, r.kind) == (group, version, obj["kind"])]
    return validate_object(rt, copy.deepcopy(obj), field_validation="Strict")


def test_the_queues_are_there() -> None:
    kinds = sorted({o["kind"] for o in kueue_objects()})
    assert kinds == ["ClusterQueue", "LocalQueue", "ResourceFlavor", "WorkloadPriorityClass"]
    assert all(o["apiVersion"] == f"{KUEUE}/v1beta2" for o in kueue_objects())  # Kueue 0.19's stored version


@needs_schemas
@pytest.mark.parametrize("obj", kueue_objects(), ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_every_kueue_object_is_valid_for_its_crd(obj: dict[str, Any]) -> None:
    assert _validate(obj) == []


def _cluster_queue() -> dict[str, Any]:
    return copy.deepcopy(by_kind("ClusterQueue")["training"])


@needs_schemas
@pytest.mark.parametrize(
    ("change", "error"),
    [
        pytest.param(
            lambda o: o["spec"].update(cohort="gpus"), 'unknown field "spec.cohort"', id="v1beta1-field"
        ),
        pytest.param(
            lambda o: o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2].update(
                nominalQuota="twelve"
            ),
            "nominalQuota",
            id="not-a-quantity",
        ),
        pytest.param(
            lambda o: o["spec"]["preemption"].update(withinClusterQueue="Always"),
            "withinClusterQueue",
            id="unknown-policy",
        ),
    ],
)
def test_the_validation_refuses_a_broken_queue(change: Callable[[dict[str, Any]], None], error: str) -> None:
    broken = _cluster_queue()
    change(broken)
    with pytest.raises(ApiError) as refused:
        _validate(broken)
    assert error in str(refused.value)


def test_every_job_profile_names_a_local_queue_and_priority_class_defined_here() -> None:
    catalog = load_catalog(REPO / "hub_config" / "catalog")
    assert catalog.job_profiles, "the demo catalog has job profiles"
    local = {(o["metadata"].get("namespace"), n): o for n, o in by_kind("LocalQueue").items()}
    cluster, flavors, priorities = (
        by_kind("ClusterQueue"),
        by_kind("ResourceFlavor"),
        by_kind("WorkloadPriorityClass"),
    )
    for p in catalog.job_profiles:
        queue = local.get((WORKSPACE_NAMESPACE, p.queue))
        assert queue is not None, f"job profile {p.slug}: no LocalQueue {p.queue} in {WORKSPACE_NAMESPACE}"
        cq = cluster.get(queue["spec"]["clusterQueue"])
        assert cq is not None, f"LocalQueue {p.queue}: no ClusterQueue {queue['spec']['clusterQueue']}"
        covered = {r for g in cq["spec"]["resourceGroups"] for r in g["coveredResources"]}
        asked = {r for r, v in p.resources.requests.items() if parse_quantity(str(v)) > 0}
        assert asked <= covered, (
            f"job profile {p.slug} asks for {sorted(asked - covered)}, not covered by {cq}"
        )
        if p.priority_class is not None:
            assert p.priority_class in priorities, f"job profile {p.slug}: no WorkloadPriorityClass"
    for cq in cluster.values():
        for group in cq["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                assert flavor["name"] in flavors, (
                    f"ClusterQueue {cq['metadata']['name']}: no flavor {flavor['name']}"
                )


def _gpu_quota(cq: Mapping[str, Any]) -> Iterator[float]:
    for group in cq["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            for r in flavor["resources"]:
                if r["name"] == GPU_RESOURCE:
                    yield float(parse_quantity(str(r["nominalQuota"])))
                    yield float(parse_quantity(str(r.get("borrowingLimit", 0))))


def test_training_never_takes_the_gpus_kept_for_interactive_sessions() -> None:
    """The queues open to the workspace namespace may admit fewer GPUs than its ResourceQuota allows."""
    (quota,) = [
        o
        for _, o in manifests()
        if o["kind"] == "ResourceQuota" and o["metadata"]["namespace"] == WORKSPACE_NAMESPACE
    ]
    namespace_gpus = float(parse_quantity(str(quota["spec"]["hard"][f"requests.{GPU_RESOURCE}"])))
    queued = sum(sum(_gpu_quota(cq)) for cq in by_kind("ClusterQueue").values())
    assert 0 < queued < namespace_gpus, (queued, namespace_gpus)
    assert namespace_gpus - queued >= 4  # what 64-kueue-queues.yaml and docs/how-to/job-queues.md promise


def test_the_queues_file_says_what_it_needs() -> None:
    text = QUEUES_FILE.read_text()
    assert "Kueue 0.19" in text and "15-quota.yaml" in text
