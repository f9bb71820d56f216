"""The workspace conventions (manifests/conventions.py): /workspace, /checkpoints, their environment,
and the guide (README-WORKSPACE.md, banner) on the container pod and in a VM's cloud-init."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import yaml

from gpuworkspace_spawner.catalog.model import Checkpoints, SharedMount, WorkspaceProfile
from gpuworkspace_spawner.manifests.conventions import (
    ANN_README,
    apply_conventions,
    build_guide,
    cloud_init_files,
    convention_env,
)
from gpuworkspace_spawner.manifests.pod import build_workspace_pod
from tests.unit.manifests.golden import assert_golden, validate
from tests.unit.manifests.scenarios import CPU, context, load_yaml
from tests.unit.manifests.test_vm import VM_WORKSTATION, vm_context

TEAM = SharedMount(
    name="ml", claim_name="team-ml-cephfs", mount_path="/teams/ml", read_only=False, sub_path="ml"
)
CPU_TEAM = replace(
    CPU,
    storage=replace(
        CPU.storage, team_directories=(TEAM,), checkpoints=Checkpoints(team_directory="ml", sub_path="ckpt")
    ),
)
CPU_S3 = replace(
    CPU,
    storage=replace(
        CPU.storage,
        checkpoints=Checkpoints(
            object_store_url="s3://ckpt/team-ml/", object_store_endpoint="https://rgw.example.org"
        ),
    ),
)


def _pod(profile: WorkspaceProfile, retention_days: float | None = 7) -> dict[str, Any]:
    ws = context(profile)
    built = build_workspace_pod(load_yaml("kubespawner-pod.yaml"), ws)
    return apply_conventions(built, ws, retention_days=retention_days)


def _mounts(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    [notebook] = [c for c in pod["spec"]["containers"] if c["name"] == "notebook"]
    return {m["mountPath"]: m for m in notebook["volumeMounts"]}


def test_pod_with_conventions_golden() -> None:
    pod = _pod(CPU_TEAM)
    validate(pod)
    assert_golden("pod-cpu-conventions.yaml", pod)


def test_workspace_is_on_the_home_disk_and_checkpoints_on_the_team_directory() -> None:
    mounts = _mounts(_pod(CPU_TEAM))
    assert mounts["/workspace"] == {"name": "home", "mountPath": "/workspace", "subPath": "workspace"}
    assert mounts["/checkpoints"] == {"name": "team-ml", "mountPath": "/checkpoints", "subPath": "ml/ckpt"}
    assert "readOnly" not in mounts["/checkpoints"]  # checkpoints are written
    assert "/checkpoints" not in _mounts(_pod(CPU_S3))  # an object store is an address, not a mount


def test_the_readme_is_a_read_only_file_in_the_home_rebuilt_from_the_profile() -> None:
    pod = _pod(CPU_TEAM)
    mounts = _mounts(pod)
    readme = mounts["/home/jovyan/README-WORKSPACE.md"]
    assert readme == {
        "name": "gpuws-guide",
        "mountPath": "/home/jovyan/README-WORKSPACE.md",
        "subPath": "README-WORKSPACE.md",
        "readOnly": True,
    }
    assert mounts["/etc/profile.d/gpuworkspace-banner.sh"]["readOnly"] is True
    [guide] = [v for v in pod["spec"]["volumes"] if v["name"] == "gpuws-guide"]
    fields = {i["path"]: i["fieldRef"]["fieldPath"] for i in guide["downwardAPI"]["items"]}
    assert fields["README-WORKSPACE.md"] == "metadata.annotations['gpuworkspace.dev/readme']"
    text = pod["metadata"]["annotations"][ANN_README]
    # a profile change is a new text at the next start: the file follows the profile
    bigger = replace(CPU_TEAM, storage=replace(CPU_TEAM.storage, home=replace(CPU.storage.home, size="50Gi")))
    assert "20Gi" in text and "50Gi" in _pod(bigger)["metadata"]["annotations"][ANN_README]


def test_the_guide_lists_what_is_kept_shared_and_wiped_the_target_and_the_quota() -> None:
    readme = build_guide(context(CPU_TEAM), retention_days=7).readme
    for words in (
        "| `/home/jovyan` | your home disk, 20Gi | kept: across stops; after the server is deleted, 7 days",
        "| `/workspace` | your Git working tree, on the home disk (/home/jovyan/workspace)",
        "/checkpoints: the team directory 'ml' (team-ml-cephfs/ml/ckpt)",
        "| `/teams/ml` | team directory 'ml' | shared with your team, read-write |",
        "| `/data` | shared data (datasets-cephfs) | shared, read-only |",
        "| `/scratch` | fast node-local scratch | wiped when the workspace stops |",
        "**Quota**: your disk holds 20Gi",
        "- `GPUWS_CHECKPOINTS=/checkpoints`",
    ):
        assert words in readme, (words, readme)
    motd = build_guide(context(CPU_S3)).motd
    assert "your disk holds 20Gi" in motd and "/home/jovyan/README-WORKSPACE.md" in motd
    assert "s3://ckpt/team-ml/ at https://rgw.example.org" in build_guide(context(CPU_S3)).readme
    assert "names no durable target" in build_guide(context(CPU)).readme


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        pytest.param(
            CPU,
            {
                "GPUWS_WORKSPACE": "/workspace",
                "GPUWS_HOME_QUOTA": "20Gi",
                "GPUWS_README": "/home/jovyan/README-WORKSPACE.md",
            },
            id="no-target",
        ),
        pytest.param(
            CPU_TEAM,
            {
                "GPUWS_WORKSPACE": "/workspace",
                "GPUWS_HOME_QUOTA": "20Gi",
                "GPUWS_README": "/home/jovyan/README-WORKSPACE.md",
                "GPUWS_CHECKPOINTS": "/checkpoints",
            },
            id="team-directory",
        ),
        pytest.param(
            CPU_S3,
            {
                "GPUWS_WORKSPACE": "/workspace",
                "GPUWS_HOME_QUOTA": "20Gi",
                "GPUWS_README": "/home/jovyan/README-WORKSPACE.md",
                "GPUWS_CHECKPOINTS_URL": "s3://ckpt/team-ml/",
                "GPUWS_CHECKPOINTS_ENDPOINT": "https://rgw.example.org",
            },
            id="object-store",
        ),
        pytest.param(
            VM_WORKSTATION,
            {
                "GPUWS_WORKSPACE": "/workspace",
                "GPUWS_HOME_QUOTA": "40Gi",
                "GPUWS_README": "/etc/gpuworkspace/README-WORKSPACE.md",
            },
            id="vm-root-disk-is-the-quota",
        ),
    ],
)
def test_environment(profile: WorkspaceProfile, expected: dict[str, str]) -> None:
    assert convention_env(profile) == expected


def test_input_pod_is_not_changed_and_applying_twice_is_the_same() -> None:
    ws = context(CPU_TEAM)
    built = build_workspace_pod(load_yaml("kubespawner-pod.yaml"), ws)
    before = yaml.safe_dump(built)
    once = apply_conventions(built, ws)
    assert yaml.safe_dump(built) == before
    assert apply_conventions(once, ws) == once


def test_a_vm_gets_the_guide_motd_and_environment_through_cloud_init() -> None:
    ws, _names = vm_context()
    files = {f["path"]: f for f in cloud_init_files(ws)}
    assert set(files) == {
        "/etc/gpuworkspace/README-WORKSPACE.md",
        "/etc/motd",
        "/etc/profile.d/gpuworkspace.sh",
        "/workspace/.gpuworkspace",
    }
    assert "the VM's root disk, 40Gi" in files["/etc/gpuworkspace/README-WORKSPACE.md"]["content"]
    assert "export GPUWS_WORKSPACE=/workspace\n" in files["/etc/profile.d/gpuworkspace.sh"]["content"]
    assert all(f["permissions"] == "0644" for f in files.values())
