"""Team, image digest and start details: what labels, annotations and start records say a workspace is."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuworkspace_spawner.audit import START_ACTIONS, AuditRecord, audit_line
from gpuworkspace_spawner.catalog.model import WorkspaceProfile
from gpuworkspace_spawner.manifests import names
from gpuworkspace_spawner.manifests.names import image_digest
from gpuworkspace_spawner.manifests.provenance import build_start_details, decide_team
from tests.unit.manifests.scenarios import CPU, CUDA_DIGEST, GPU_EXCLUSIVE, MIG, context
from tests.unit.manifests.test_vm import VM_GPU, VM_WORKSTATION, vm_context

LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
HEX = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("profile_team", "groups", "prefix", "team", "source"),
    [
        pytest.param("nlp", ["team-vision"], "team-", "nlp", "catalog", id="catalog-wins"),
        pytest.param(None, ["team-vision"], "team-", "vision", "group team-vision", id="group"),
        pytest.param(
            None,
            ["team-zeta", "researchers", "team-alpha"],
            "team-",
            "alpha",
            "group team-alpha",
            id="sorted",
        ),
        pytest.param(None, ["team-", "team-b"], "team-", "b", "group team-b", id="bare-prefix-skipped"),
        pytest.param(None, ["researchers", "gpu-users"], "team-", "", "", id="no-team-group"),
        pytest.param(None, [], "team-", "", "", id="no-groups"),
        pytest.param(None, ["team-vision"], "", "", "", id="rule-off"),
        pytest.param(None, ["org:ml", "org:cv"], "org:", "cv", "group org:cv", id="other-prefix"),
        pytest.param(None, ["Team-Vision"], "team-", "", "", id="case-sensitive"),
    ],
)
def test_decide_team(
    profile_team: str | None, groups: list[str], prefix: str, team: str, source: str
) -> None:
    decision = decide_team(replace(CPU, team=profile_team), groups, group_prefix=prefix)
    assert (decision.team, decision.source) == (team, source)
    assert decision.reason


@given(st.text(min_size=1, max_size=300))
def test_a_team_from_any_group_name_is_a_valid_label_and_kept_exactly(name: str) -> None:
    decision = decide_team(CPU, [f"team-{name}"], group_prefix="team-")
    ws = replace(context(CPU), team=decision.team, team_source=decision.source)
    label = ws.labels[names.LABEL_TEAM]
    assert len(label) <= 63 and LABEL_VALUE.fullmatch(label), label
    assert ws.annotations[names.ANN_TEAM] == name  # the exact name, whatever the label became


@pytest.mark.parametrize(
    ("image", "digest"),
    [
        pytest.param(f"quay.io/jupyter/base-notebook@sha256:{HEX}", f"sha256:{HEX}", id="digest"),
        pytest.param(f"registry:5000/a/b:1.2@sha256:{HEX}", f"sha256:{HEX}", id="tag-and-digest"),
        pytest.param("registry.example.com/workspaces/cpu:2026.03", "", id="tag-only"),
        pytest.param("registry:5000/a/b", "", id="port-no-tag"),
        pytest.param(f"a/b@sha256:{HEX[:63]}", "", id="short-digest"),
        pytest.param(f"a/b@sha512:{HEX}{HEX}", "", id="not-sha256"),
        pytest.param(None, "", id="vm-no-image"),
    ],
)
def test_image_digest(image: str | None, digest: str) -> None:
    assert image_digest(image) == digest


def test_digest_labels_and_annotations_only_when_pinned() -> None:
    pinned, tagged = context(GPU_EXCLUSIVE), context(CPU)
    assert pinned.labels[names.LABEL_IMAGE_DIGEST_PREFIX] == CUDA_DIGEST.removeprefix("sha256:")[:16]
    assert pinned.annotations[names.ANN_IMAGE_DIGEST] == CUDA_DIGEST
    assert names.LABEL_IMAGE_DIGEST_PREFIX not in tagged.labels
    assert names.ANN_IMAGE_DIGEST not in tagged.annotations
    assert tagged.annotations[names.ANN_IMAGE] == CPU.image  # the tag is still recorded
    assert names.LABEL_TEAM not in tagged.labels and names.ANN_TEAM not in tagged.annotations


def test_a_vm_records_its_data_source_as_its_image() -> None:
    ws, _ = vm_context(VM_WORKSTATION)
    assert ws.annotations[names.ANN_DATA_SOURCE] == "vm-images/ubuntu-24-04-gpu"
    assert names.ANN_IMAGE not in ws.annotations and names.ANN_IMAGE_DIGEST not in ws.annotations


def test_start_details_of_a_gpu_container() -> None:
    ws = replace(context(GPU_EXCLUSIVE), team_source="catalog")
    details = build_start_details(ws)
    assert details["image"] == GPU_EXCLUSIVE.image
    assert details["image_digest"] == CUDA_DIGEST
    assert (details["team"], details["team_source"]) == ("nlp", "catalog")
    assert details["gpu"] == {"mode": "exclusive", "resources": {"nvidia.com/gpu": "1"}}
    mounts = {m["volume"]: m for m in details["mounts"] if m["mount_path"] != "/workspace"}
    assert mounts["home"] == {
        "volume": "home",
        "mount_path": "/home/jovyan",
        "claim": "home-alice",
        "read_only": False,
    }
    assert mounts["datasets"] == {
        "volume": "datasets",
        "mount_path": "/data",
        "claim": "datasets-cephfs",
        "read_only": True,
        "sub_path": "v3",
    }
    assert mounts["team-nlp"]["claim"] == "team-nlp" and mounts["team-nlp"]["read_only"] is False
    assert mounts["scratch"]["claim"] == "" and mounts["shm"]["mount_path"] == "/dev/shm"
    assert [m["mount_path"] for m in details["mounts"]] == [
        "/home/jovyan",
        "/scratch",
        "/dev/shm",
        "/data",
        "/models",
        "/teams/nlp",
        "/teams/docs",
        # the conventions (manifests/conventions.py), as the pod has them
        "/workspace",
        "/etc/gpuworkspace",
        "/home/jovyan/README-WORKSPACE.md",
        "/etc/profile.d/gpuworkspace-banner.sh",
    ]
    workspace = next(m for m in details["mounts"] if m["mount_path"] == "/workspace")
    assert workspace == {
        "volume": "home",
        "mount_path": "/workspace",
        "claim": "home-alice",
        "read_only": False,
        "sub_path": "workspace",
    }


@pytest.mark.parametrize(
    ("profile", "gpu"),
    [
        pytest.param(MIG, {"mode": "mig", "resources": {"nvidia.com/mig-1g.10gb": "1"}}, id="mig"),
        pytest.param(CPU, {"mode": "none", "resources": {}}, id="cpu"),
        pytest.param(
            VM_GPU,
            {"mode": "exclusive", "resources": {"nvidia.com/GH100_H100_SXM5_80GB": "1"}},
            id="vm-passthrough",
        ),
        pytest.param(VM_WORKSTATION, {"mode": "none", "resources": {}}, id="vm-no-gpu"),
    ],
)
def test_start_details_gpu_request(profile: WorkspaceProfile, gpu: dict[str, object]) -> None:
    ws = vm_context(profile)[0] if profile.vm is not None else context(profile)
    assert build_start_details(ws)["gpu"] == gpu


def test_start_details_count_several_passthrough_gpus_and_the_limit_wins() -> None:
    two = replace(VM_GPU, vm=replace(VM_GPU.vm, gpus=VM_GPU.vm.gpus * 2))  # type: ignore[arg-type]
    resources = build_start_details(vm_context(two)[0])["gpu"]["resources"]
    assert resources == {"nvidia.com/GH100_H100_SXM5_80GB": "2"}
    asks_two = replace(
        GPU_EXCLUSIVE,
        resources=replace(
            GPU_EXCLUSIVE.resources, requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "2"}
        ),
    )
    assert build_start_details(context(asks_two))["gpu"]["resources"] == {"nvidia.com/gpu": "2"}


def test_start_details_of_a_vm() -> None:
    ws, vm_objects = vm_context(VM_GPU)
    details = build_start_details(ws)
    assert (details["image"], details["image_digest"]) == ("", "")
    assert details["data_source"] == "vm-images/ubuntu-24-04-gpu"
    assert details["mounts"] == [
        {"volume": "rootdisk", "mount_path": "/", "claim": vm_objects.disk, "read_only": False}
    ]


def test_a_start_record_is_one_json_line_with_the_details() -> None:
    assert {"workspace-starting", "workspace-started", "workspace-start-failed"} == START_ACTIONS
    ws = context(GPU_EXCLUSIVE)
    record = AuditRecord(
        action="workspace-started",
        user="alice",
        server="",
        namespace="gpu-workspaces",
        kind="Pod",
        name="jupyter-alice",
        message="Workspace ready",
        profile=ws.profile.slug,
        catalog_version=ws.catalog_version,
        details=build_start_details(ws),
    )
    line = audit_line(record, now=datetime(2026, 3, 1, 12, tzinfo=UTC))
    assert "\n" not in line
    body = json.loads(line)
    assert body["profile"] == "gpu-a100-exclusive" and body["catalog_version"] == "2026.03.1"
    assert body["details"]["image_digest"] == CUDA_DIGEST
    assert body["details"]["gpu"]["resources"] == {"nvidia.com/gpu": "1"}
    assert {m["claim"] for m in body["details"]["mounts"]} >= {"home-alice", "team-nlp", "model-cache"}
