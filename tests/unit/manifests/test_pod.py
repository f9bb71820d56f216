"""The workspace pod patch over KubeSpawner's pod: golden scenarios and the properties that must hold."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from gpuworkspace_spawner.catalog.model import Placement, Security, WorkspaceProfile
from gpuworkspace_spawner.manifests import names
from gpuworkspace_spawner.manifests.pod import build_workspace_pod
from tests.unit.manifests.golden import assert_golden, validate
from tests.unit.manifests.scenarios import CPU, GPU_EXCLUSIVE, MIG, context, load_yaml


@pytest.fixture
def kubespawner_pod() -> dict[str, Any]:
    pod: dict[str, Any] = load_yaml("kubespawner-pod.yaml")
    validate(pod)
    return pod


def _container(pod: dict[str, Any], name: str = "notebook") -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def _mounts(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in _container(pod)["volumeMounts"]}


def _volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod["spec"]["volumes"]}


@pytest.mark.parametrize(
    ("golden", "profile"),
    [
        pytest.param("pod-cpu.yaml", CPU, id="cpu"),
        pytest.param("pod-gpu-exclusive.yaml", GPU_EXCLUSIVE, id="gpu-exclusive"),
        pytest.param("pod-mig.yaml", MIG, id="mig"),
    ],
)
def test_pod_golden(golden: str, profile: WorkspaceProfile, kubespawner_pod: dict[str, Any]) -> None:
    before = copy.deepcopy(kubespawner_pod)
    pod = build_workspace_pod(kubespawner_pod, context(profile))
    assert kubespawner_pod == before, "the input pod was mutated"
    validate(pod)
    assert_golden(golden, pod)


def test_output_shares_nothing_with_the_input(kubespawner_pod: dict[str, Any]) -> None:
    pod = build_workspace_pod(kubespawner_pod, context(CPU))
    before = copy.deepcopy(kubespawner_pod)
    _container(pod)["env"].append({"name": "X", "value": "y"})
    pod["spec"]["tolerations"][0]["value"] = "changed"
    pod["metadata"]["labels"]["x"] = "y"
    assert kubespawner_pod == before


def test_labels_keep_kubespawner_and_add_workspace_and_z2jh(kubespawner_pod: dict[str, Any]) -> None:
    ws = context(GPU_EXCLUSIVE, replace(context(CPU).identity, release="hub-prod"))
    labels = build_workspace_pod(kubespawner_pod, ws)["metadata"]["labels"]
    assert labels["heritage"] == "jupyterhub"
    assert labels["hub.jupyter.org/username"] == "alice"
    assert labels["app"] == "jupyterhub"
    assert labels["component"] == "singleuser-server"
    assert labels["release"] == "hub-prod"
    assert labels["hub.jupyter.org/network-access-hub"] == "true"
    assert ws.labels.items() <= labels.items()


def test_home_replaces_z2jh_home_volume(kubespawner_pod: dict[str, Any]) -> None:
    pod = build_workspace_pod(kubespawner_pod, context(CPU, claim="home-alice"))
    volumes = _volumes(pod)
    assert "volume-alice" not in volumes  # orphaned by our home mount: its claim must not be required
    assert volumes["home"] == {"name": "home", "persistentVolumeClaim": {"claimName": "home-alice"}}
    assert _mounts(pod)["/home/jovyan"] == {"name": "home", "mountPath": "/home/jovyan"}
    assert _container(pod)["workingDir"] == "/home/jovyan"


def test_host_path_volumes_and_their_mounts_are_stripped(kubespawner_pod: dict[str, Any]) -> None:
    kubespawner_pod["spec"]["volumes"].append(
        {"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}}
    )
    kubespawner_pod["spec"]["volumes"].append({"name": "keep-me", "secret": {"secretName": "ssh"}})
    _container(kubespawner_pod)["volumeMounts"] += [
        {"name": "docker", "mountPath": "/var/run/docker.sock"},
        {"name": "keep-me", "mountPath": "/home/jovyan/.ssh", "readOnly": True},
    ]
    kubespawner_pod["spec"]["containers"].append(
        {"name": "sidecar", "image": "busybox", "volumeMounts": [{"name": "docker", "mountPath": "/sock"}]}
    )
    kubespawner_pod["spec"]["initContainers"] = [
        {"name": "init", "image": "busybox", "volumeMounts": [{"name": "docker", "mountPath": "/sock"}]}
    ]
    pod = build_workspace_pod(kubespawner_pod, context(CPU))
    validate(pod)
    assert not any("hostPath" in v for v in pod["spec"]["volumes"])
    every_container = pod["spec"]["containers"] + pod["spec"]["initContainers"]
    assert all(m["name"] != "docker" for c in every_container for m in c.get("volumeMounts", []))
    assert _mounts(pod)["/home/jovyan/.ssh"]["name"] == "keep-me"
    assert "keep-me" in _volumes(pod)


def test_storage_convention(kubespawner_pod: dict[str, Any]) -> None:
    pod = build_workspace_pod(kubespawner_pod, context(GPU_EXCLUSIVE))
    mounts, volumes = _mounts(pod), _volumes(pod)
    assert volumes["scratch"]["emptyDir"] == {"sizeLimit": "500Gi"}
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    assert mounts["/dev/shm"]["name"] == "shm"
    assert mounts["/data"] == {"name": "datasets", "mountPath": "/data", "readOnly": True, "subPath": "v3"}
    assert volumes["datasets"]["persistentVolumeClaim"] == {"claimName": "datasets-cephfs", "readOnly": True}
    assert mounts["/models"]["readOnly"] is True
    assert mounts["/teams/nlp"]["readOnly"] is False
    assert volumes[mounts["/teams/nlp"]["name"]]["persistentVolumeClaim"] == {"claimName": "team-nlp"}
    assert mounts["/teams/docs"]["readOnly"] is True
    assert mounts["/teams/docs"]["subPath"] == "public"
    assert "readOnly" not in volumes["home"]["persistentVolumeClaim"]


def test_unbounded_scratch_and_shm_omit_size_limit(kubespawner_pod: dict[str, Any]) -> None:
    volumes = _volumes(build_workspace_pod(kubespawner_pod, context(MIG)))
    assert volumes["scratch"]["emptyDir"] == {}
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory"}


def test_hardening(kubespawner_pod: dict[str, Any]) -> None:
    kubespawner_pod["spec"].update(hostNetwork=True, hostPID=True, hostIPC=True, enableServiceLinks=True)
    kubespawner_pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": "home-alice", "uid": "u1"}
    ]
    _container(kubespawner_pod)["securityContext"] = {
        "privileged": True,
        "capabilities": {"add": ["SYS_ADMIN"]},
    }
    pod = build_workspace_pod(kubespawner_pod, context(GPU_EXCLUSIVE))
    spec = pod["spec"]
    assert (spec["hostNetwork"], spec["hostPID"], spec["hostIPC"], spec["enableServiceLinks"]) == (False,) * 4
    assert "ownerReferences" not in pod["metadata"]
    assert _container(pod)["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1001,
        "runAsGroup": 1001,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert spec["securityContext"]["fsGroup"] == 1001
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


@pytest.mark.parametrize("token", [pytest.param(True, id="token"), pytest.param(False, id="no-token")])
def test_service_account_token_follows_profile(token: bool, kubespawner_pod: dict[str, Any]) -> None:
    profile = replace(CPU, security=Security(service_account_token=token))
    assert (
        build_workspace_pod(kubespawner_pod, context(profile))["spec"]["automountServiceAccountToken"]
        is token
    )


def test_resources_are_replaced(kubespawner_pod: dict[str, Any]) -> None:
    resources = _container(build_workspace_pod(kubespawner_pod, context(MIG)))["resources"]
    assert resources == {
        "requests": {"cpu": "2", "memory": "16Gi", "nvidia.com/mig-1g.10gb": "1"},
        "limits": {"memory": "16Gi", "nvidia.com/mig-1g.10gb": "1"},
    }


def test_placement_merges_selector_and_tolerations(kubespawner_pod: dict[str, Any]) -> None:
    kubespawner_pod["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "a"}
    spec = build_workspace_pod(kubespawner_pod, context(GPU_EXCLUSIVE))["spec"]
    assert spec["nodeSelector"] == {
        "topology.kubernetes.io/zone": "a",
        "gpuworkspace.dev/pool": "gpu-interactive",
    }
    keys = [t["key"] for t in spec["tolerations"]]
    assert keys == ["hub.jupyter.org/dedicated", "hub.jupyter.org_dedicated", "nvidia.com/gpu"]
    assert spec["runtimeClassName"] == "nvidia"


def test_no_node_pool_keeps_placement(kubespawner_pod: dict[str, Any]) -> None:
    spec = build_workspace_pod(kubespawner_pod, context(CPU))["spec"]
    assert "nodeSelector" not in spec
    assert "runtimeClassName" not in spec
    assert spec["tolerations"] == kubespawner_pod["spec"]["tolerations"]


def test_cpu_only_workspace_sees_no_gpu(kubespawner_pod: dict[str, Any]) -> None:
    _container(kubespawner_pod)["env"].append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})
    env = _container(build_workspace_pod(kubespawner_pod, context(CPU)))["env"]
    assert [e for e in env if e["name"] == "NVIDIA_VISIBLE_DEVICES"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
    ]
    assert {"name": "JUPYTERHUB_USER", "value": "alice"} in env
    gpu_env = _container(build_workspace_pod(kubespawner_pod, context(GPU_EXCLUSIVE)))["env"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in gpu_env


def test_server_port_is_named(kubespawner_pod: dict[str, Any]) -> None:
    _container(kubespawner_pod)["ports"] = [
        {"containerPort": 8888},
        {"containerPort": 9100, "name": "metrics"},
    ]
    ports = _container(build_workspace_pod(kubespawner_pod, context(CPU)))["ports"]
    assert ports == [
        {"containerPort": 8888, "name": "notebook-port"},
        {"containerPort": 9100, "name": "metrics"},
    ]


def test_annotations_add_raw_names(kubespawner_pod: dict[str, Any]) -> None:
    annotations = build_workspace_pod(kubespawner_pod, context(CPU))["metadata"]["annotations"]
    assert annotations["hub.jupyter.org/username"] == "alice"
    assert annotations[names.ANN_USERNAME] == "alice"
    assert annotations[names.ANN_PROFILE] == "cpu-small"
    assert annotations[names.ANN_IDE] == "code-server"


def test_runtime_class_without_pool(kubespawner_pod: dict[str, Any]) -> None:
    profile = replace(CPU, placement=Placement(runtime_class_name="gvisor"))
    assert build_workspace_pod(kubespawner_pod, context(profile))["spec"]["runtimeClassName"] == "gvisor"


def test_no_readiness_probe_is_added(kubespawner_pod: dict[str, Any]) -> None:
    """Ready stays "the container runs" (Kubernetes' default, as KubeSpawner's pods have it): the start
    itself waits for the server's port, and the hub reports it ready then, never before the pod is Ready."""
    assert "readinessProbe" not in _container(build_workspace_pod(kubespawner_pod, context(CPU)))


def test_a_readiness_probe_the_deployment_configured_stays(kubespawner_pod: dict[str, Any]) -> None:
    pod = copy.deepcopy(kubespawner_pod)
    mine = {"httpGet": {"path": "/user/alice/api", "port": 8888}, "periodSeconds": 5}
    next(c for c in pod["spec"]["containers"] if c["name"] == "notebook")["readinessProbe"] = mine
    assert _container(build_workspace_pod(pod, context(CPU)))["readinessProbe"] == mine
