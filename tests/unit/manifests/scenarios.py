"""Profiles and workspace contexts shared by the builder and decision tests (one per golden scenario)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpuworkspace_spawner.catalog.model import (
    HomeStorage,
    NodePool,
    Placement,
    Resources,
    ScratchStorage,
    Security,
    SharedMount,
    Storage,
    WorkspaceProfile,
)
from gpuworkspace_spawner.manifests.names import WorkspaceContext, WorkspaceIdentity

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
CATALOG_VERSION = "2026.03.1"
CUDA_DIGEST = "sha256:" + "5e1f0c3a9d7b2468" * 4

# owner: the hub user record's creation time (names.owner_key), recorded on every disk
ALICE = WorkspaceIdentity(
    user="alice", server="", namespace="gpu-workspaces", owner="2026-02-01T09:30:00.123456Z"
)

CPU = WorkspaceProfile(
    slug="cpu-small",
    display_name="CPU, small",
    image="registry.example.com/workspaces/cpu:2026.03",
    resources=Resources(requests={"cpu": "1", "memory": "4Gi"}, limits={"memory": "8Gi"}),
    storage=Storage(
        home=HomeStorage(size="20Gi", storage_class="ceph-rbd"),
        scratch=ScratchStorage(size_limit="20Gi"),
        shm_size_limit="1Gi",
        datasets=SharedMount(name="datasets", claim_name="datasets-cephfs", mount_path="/data"),
    ),
    cost_center="cc-1234",
)

_GPU_POOL = NodePool(
    name="gpu-interactive",
    node_selector={"gpuworkspace.dev/pool": "gpu-interactive"},
    tolerations=(
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        # the same toleration z2jh already adds: must not appear twice
        {"key": "hub.jupyter.org/dedicated", "operator": "Equal", "value": "user", "effect": "NoSchedule"},
    ),
)

GPU_EXCLUSIVE = WorkspaceProfile(
    slug="gpu-a100-exclusive",
    display_name="One whole A100",
    image=f"registry.example.com/workspaces/cuda:12.4@{CUDA_DIGEST}",
    resources=Resources(
        requests={"cpu": "4", "memory": "64Gi", "nvidia.com/gpu": "1"},
        limits={"memory": "64Gi", "nvidia.com/gpu": "1"},
    ),
    placement=Placement(gpu_mode="exclusive", node_pool=_GPU_POOL, runtime_class_name="nvidia"),
    storage=Storage(
        home=HomeStorage(size="200Gi", storage_class="ceph-rbd", access_mode="ReadWriteOncePod"),
        scratch=ScratchStorage(size_limit="500Gi"),
        shm_size_limit="16Gi",
        datasets=SharedMount(
            name="datasets", claim_name="datasets-cephfs", mount_path="/data", sub_path="v3"
        ),
        models=SharedMount(name="models", claim_name="model-cache", mount_path="/models"),
        team_directories=(
            SharedMount(name="nlp", claim_name="team-nlp", mount_path="/teams/nlp", read_only=False),
            SharedMount(
                name="Shared_Docs", claim_name="team-docs", mount_path="/teams/docs", sub_path="public"
            ),
        ),
    ),
    security=Security(
        network_profile="egress-git-registry", run_as_user=1001, run_as_group=1001, fs_group=1001
    ),
    cost_center="research/nlp",
    team="nlp",
)

MIG = WorkspaceProfile(
    slug="gpu-mig-1g",
    display_name="A100 MIG 1g.10gb",
    image="registry.example.com/workspaces/cuda:12.4",
    resources=Resources(
        requests={"cpu": "2", "memory": "16Gi", "nvidia.com/mig-1g.10gb": "1"},
        limits={"memory": "16Gi", "nvidia.com/mig-1g.10gb": "1"},
    ),
    placement=Placement(
        gpu_mode="mig",
        node_pool=NodePool(name="gpu-mig", node_selector={"nvidia.com/mig.config": "all-1g.10gb"}),
    ),
    storage=Storage(home=HomeStorage(size="50Gi")),
)


def context(
    profile: WorkspaceProfile, identity: WorkspaceIdentity = ALICE, claim: str = "home-alice"
) -> WorkspaceContext:
    """The start of ``profile``; its team is the profile's, as the spawner decides it with no groups."""
    return WorkspaceContext(
        identity=identity,
        profile=profile,
        catalog_version=CATALOG_VERSION,
        ide="code-server",
        home_claim=claim,
        team=profile.team or "",
        team_source="catalog" if profile.team else "",
    )


def load_yaml(name: str) -> Any:
    return yaml.safe_load((GOLDEN / name).read_text())
