"""The workspace namespace refuses privileged, hostPath, hostNetwork and hostPID pods (Pod Security
Admission, level baseline, from its labels in extra-manifests/00-namespaces.yaml), and admits every pod
that a workspace needs: the spawner's pods (the golden fixtures of tests/unit/golden) and KubeVirt's
virt-launcher pods for VM workspaces.

The verdicts come from :mod:`gpuworkspace_devcluster.podsecurity`, a port of the upstream
baseline checks; its messages are compared with upstream's own test expectations below.

The virt-launcher pods are built by :func:`virt_launcher_pod` with the security-relevant fields
KubeVirt renders (kubevirt/kubevirt at d923fdb8): ``computePodSecurityContext`` and
``renderLaunchManifest`` in pkg/virt-controller/services/template.go, ``securityContext`` and
``requiredCapabilities`` in rendercontainer.go, the emptyDir, PVC and hostDisk volumes in
rendervolumes.go. The VMI is non-root (uid 107) unless KubeVirt's ``Root`` feature gate is on (the
VMI mutating webhook's ``markAsNonroot``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpuworkspace_devcluster.podsecurity import (
    LABEL_PREFIX,
    PolicyLabelError,
    enforced_policy,
    evaluate_baseline,
    pod_admission,
)
from gpuworkspace_spawner.catalog.model import WorkspaceProfile
from gpuworkspace_spawner.manifests.pod import build_workspace_pod
from gpuworkspace_spawner.manifests.vm import build_vm
from tests.helm import REPO, WORKSPACE_NAMESPACE, load_yaml, manifests
from tests.unit.manifests.scenarios import CPU, GPU_EXCLUSIVE, MIG, context
from tests.unit.manifests.test_vm import VM_GPU, VM_WORKSTATION, vm_context

GOLDEN = REPO / "tests" / "unit" / "golden"
NON_ROOT_UID = 107  # kubevirt pkg/util/util.go NonRootUID
POLICY = "baseline:v1.33"


def _namespace_labels(name: str) -> dict[str, str]:
    namespace = next(d for _, d in manifests() if d["kind"] == "Namespace" and d["metadata"]["name"] == name)
    return dict(namespace["metadata"].get("labels") or {})


def virt_launcher_pod(vm: dict[str, Any], *, root: bool = False) -> dict[str, Any]:
    """The virt-launcher pod KubeVirt creates for ``vm`` in the VM's namespace (security fields)."""
    vmi = vm["spec"]["template"]
    uid = 0 if root else NON_ROOT_UID
    pod_security: dict[str, Any] = {"fsGroup": NON_ROOT_UID, "runAsUser": uid}  # computePodSecurityContext
    if not root:
        pod_security |= {"runAsGroup": uid, "runAsNonRoot": True}
    capabilities: dict[str, Any] = {"add": ["NET_BIND_SERVICE"] + (["SYS_NICE"] if root else [])}
    container_security: dict[str, Any] = {"runAsUser": uid, "runAsNonRoot": not root}  # securityContext()
    if not root:  # WithNonRoot + WithDropALLCapabilities
        capabilities["drop"] = ["ALL"]
        container_security |= {"runAsGroup": uid, "allowPrivilegeEscalation": False}
    container_security["capabilities"] = capabilities
    volumes: list[dict[str, Any]] = [
        {"name": n, "emptyDir": {}}
        for n in ("private", "public", "sockets", "virt-bin-share-dir", "libvirt-runtime", "ephemeral-disks")
    ]
    volumes += [{"name": "container-disks", "emptyDir": {}}, {"name": "hotplug-disks", "emptyDir": {}}]
    for volume in vmi["spec"].get("volumes") or []:
        claim = (volume.get("dataVolume") or volume.get("persistentVolumeClaim") or {}).get("name")
        claim = claim or (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            volumes.append({"name": volume["name"], "persistentVolumeClaim": {"claimName": claim}})
        if "hostDisk" in volume:  # handleHostDisk (the HostDisk feature gate)
            path = volume["hostDisk"]["path"].rpartition("/")[0]
            volumes.append({"name": volume["name"], "hostPath": {"path": path, "type": "DirectoryOrCreate"}})
    limits = {
        "devices.kubevirt.io/kvm": "1",
        "devices.kubevirt.io/tun": "1",
        "devices.kubevirt.io/vhost-net": "1",
    }
    limits |= {gpu["deviceName"]: "1" for gpu in vmi["spec"]["domain"]["devices"].get("gpus") or []}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"virt-launcher-{vm['metadata']['name']}-",
            "namespace": vm["metadata"]["namespace"],
            "labels": {**vmi["metadata"]["labels"], "kubevirt.io": "virt-launcher"},
        },
        "spec": {
            "securityContext": pod_security,
            "containers": [
                {
                    "name": "compute",
                    "image": "quay.io/kubevirt/virt-launcher",
                    "command": ["/usr/bin/virt-launcher-monitor"],
                    "securityContext": container_security,
                    "resources": {"limits": limits, "requests": dict(limits)},
                }
            ],
            "volumes": volumes,
            "enableServiceLinks": False,
            "restartPolicy": "Never",
        },
    }


def cdi_worker_pod() -> dict[str, Any]:
    """A CDI clone or upload pod in the workspace namespace: containerized-data-importer (c07cdb6f)
    pkg/controller/common/util.go SetRestrictedSecurityContext applied to it."""
    restricted = {
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "runAsUser": NON_ROOT_UID,
    }
    return {
        "metadata": {"name": "cdi-upload-ws-alice--default-root"},
        "spec": {
            "containers": [{"name": "cdi-upload-server", "securityContext": restricted}],
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "fsGroup": NON_ROOT_UID},
            "volumes": [{"name": "cdi-data-vol", "persistentVolumeClaim": {"claimName": "x"}}],
        },
    }


def _workspace_pod(profile: WorkspaceProfile = GPU_EXCLUSIVE) -> dict[str, Any]:
    """The pod the spawner creates: its pure patch over KubeSpawner's pod (tests/unit's scenarios,
    whose outputs are the golden fixtures pod-cpu.yaml, pod-gpu-exclusive.yaml, pod-mig.yaml)."""
    return build_workspace_pod(load_yaml(GOLDEN / "kubespawner-pod.yaml"), context(profile))


def _vm(profile: WorkspaceProfile) -> dict[str, Any]:
    """The VirtualMachine the spawner creates (golden vm-workstation.yaml, vm-gpu.yaml)."""
    return build_vm(*vm_context(profile))


ADMITTED = [
    pytest.param(lambda p=p: _workspace_pod(p), id=f"workspace-{p.slug}") for p in (CPU, GPU_EXCLUSIVE, MIG)
]
ADMITTED += [
    pytest.param(lambda p=p: virt_launcher_pod(_vm(p)), id=f"virt-launcher-{p.slug}")
    for p in (VM_WORKSTATION, VM_GPU)
]
ADMITTED += [pytest.param(cdi_worker_pod, id="cdi-worker")]


def test_the_pods_checked_here_are_the_golden_ones() -> None:
    for profile, golden in (
        (CPU, "pod-cpu.yaml"),
        (GPU_EXCLUSIVE, "pod-gpu-exclusive.yaml"),
        (MIG, "pod-mig.yaml"),
    ):
        assert _workspace_pod(profile) == load_yaml(GOLDEN / golden)
    for profile, golden in ((VM_WORKSTATION, "vm-workstation.yaml"), (VM_GPU, "vm-gpu.yaml")):
        assert _vm(profile) == load_yaml(GOLDEN / golden)


def _refusal(labels: dict[str, str], pod: dict[str, Any]) -> str | None:
    refusal, warnings = pod_admission(labels, pod)
    assert warnings == []
    return refusal


# ------------------------------------------------------------------------------ the namespace
def test_the_workspace_namespace_enforces_baseline_at_a_pinned_version() -> None:
    labels = _namespace_labels(WORKSPACE_NAMESPACE)
    assert enforced_policy(labels) == ("baseline", "v1.33")
    for mode in ("warn", "audit"):
        assert labels[f"{LABEL_PREFIX}{mode}"] == "restricted", mode
        assert labels[f"{LABEL_PREFIX}{mode}-version"] == "v1.33", mode


def test_no_shipped_role_can_relabel_a_namespace() -> None:
    """Whoever may update a Namespace may set enforce: privileged on it."""
    for _, doc in manifests():
        for rule in doc.get("rules") or []:
            if "" in rule.get("apiGroups", []) and {"namespaces", "*"} & set(rule.get("resources", [])):
                assert not {"update", "patch", "*"} & set(rule["verbs"]), (doc["metadata"], rule)


# ------------------------------------------------------------------------------ admitted
@pytest.mark.parametrize("build", ADMITTED)
def test_what_a_workspace_needs_is_admitted(build: Callable[[], dict[str, Any]]) -> None:
    pod = build()
    assert _refusal(_namespace_labels(WORKSPACE_NAMESPACE), pod) is None
    assert evaluate_baseline(pod).allowed


# ------------------------------------------------------------------------------ refused
def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = pod
        for key in parents:
            node = node[int(key)] if key.isdigit() else node.setdefault(key, {})
        node[last] = value

    return change


def _add_volume(volume: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda pod: pod["spec"]["volumes"].append(volume)


HOST_VOLUME = {"name": "host-root", "hostPath": {"path": "/"}}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            _set("spec.containers.0.securityContext.privileged", True),
            'privileged (container "notebook" must not set securityContext.privileged=true)',
            id="privileged",
        ),
        pytest.param(_add_volume(HOST_VOLUME), 'hostPath volumes (volume "host-root")', id="hostPath"),
        pytest.param(_set("spec.hostNetwork", True), "host namespaces (hostNetwork=true)", id="hostNetwork"),
        pytest.param(_set("spec.hostPID", True), "host namespaces (hostPID=true)", id="hostPID"),
        pytest.param(_set("spec.hostIPC", True), "host namespaces (hostIPC=true)", id="hostIPC"),
        pytest.param(
            _set("spec.containers.0.securityContext.capabilities", {"add": ["SYS_ADMIN"]}),
            'non-default capabilities (container "notebook" must not include "SYS_ADMIN" in '
            "securityContext.capabilities.add)",
            id="SYS_ADMIN",
        ),
        pytest.param(
            _set("spec.containers.0.ports", [{"containerPort": 8888, "hostPort": 8888}]),
            'hostPort (container "notebook" uses hostPort 8888)',
            id="hostPort",
        ),
        pytest.param(
            _set("spec.securityContext.seccompProfile", {"type": "Unconfined"}),
            'seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")',
            id="seccomp-unconfined",
        ),
    ],
)
def test_a_workspace_pod_made_dangerous_is_refused_with_the_reason(
    change: Callable[[dict[str, Any]], None], message: str
) -> None:
    pod = _workspace_pod()
    change(pod)
    refusal = _refusal(_namespace_labels(WORKSPACE_NAMESPACE), pod)
    assert refusal == f'violates PodSecurity "{POLICY}": {message}'


def test_every_reason_is_listed_in_upstreams_order() -> None:
    pod = _workspace_pod()
    _set("spec.containers.0.securityContext.privileged", True)(pod)
    _add_volume(HOST_VOLUME)(pod)
    pod["spec"] |= {"hostPID": True, "hostNetwork": True}
    verdict = evaluate_baseline(pod)
    assert verdict.reasons == ("host namespaces", "hostPath volumes", "privileged")
    assert str(verdict).startswith(
        f'violates PodSecurity "{POLICY}": host namespaces (hostNetwork=true, hostPID=true), '
    )


@pytest.mark.parametrize(
    ("vm", "root", "host_disk", "message"),
    [
        pytest.param(
            VM_GPU,
            True,
            False,
            'non-default capabilities (container "compute" must not include "SYS_NICE" in '
            "securityContext.capabilities.add)",
            id="kubevirt-Root-feature-gate",
        ),
        pytest.param(VM_WORKSTATION, False, True, 'hostPath volumes (volume "scratch")', id="hostDisk"),
    ],
)
def test_a_virt_launcher_beyond_what_kubevirt_needs_by_default_is_refused(
    vm: WorkspaceProfile, root: bool, host_disk: bool, message: str
) -> None:
    """KubeVirt's Root feature gate (SYS_NICE, uid 0) and HostDisk volumes are refused: the spawner
    uses neither, and a cluster that turns them on must exempt the namespace on purpose."""
    spec = _vm(vm)
    if host_disk:
        disk = {"name": "scratch", "hostDisk": {"path": "/var/scratch/disk.img", "type": "DiskOrCreate"}}
        spec["spec"]["template"]["spec"]["volumes"].append(disk)
    refusal = _refusal(_namespace_labels(WORKSPACE_NAMESPACE), virt_launcher_pod(spec, root=root))
    assert refusal == f'violates PodSecurity "{POLICY}": {message}'


# ------------------------------------------------------------------------------ the evaluator
@pytest.mark.parametrize(
    ("spec", "reason", "detail"),
    [
        pytest.param(  # policy/check_seLinuxOptions_test.go "invalid pod and containers"
            {
                "securityContext": {"seLinuxOptions": {"type": "foo", "user": "bar", "role": "baz"}},
                "containers": [
                    {"name": "a", "securityContext": {"seLinuxOptions": {"type": "container_t"}}},
                    {"name": "b", "securityContext": {"seLinuxOptions": {"type": "container_init_t"}}},
                    {"name": "c", "securityContext": {"seLinuxOptions": {"type": "container_kvm_t"}}},
                    {"name": "d", "securityContext": {"seLinuxOptions": {"type": "container_engine_t"}}},
                    {"name": "e", "securityContext": {"seLinuxOptions": {"type": "bar"}}},
                    {"name": "f", "securityContext": {"seLinuxOptions": {"user": "bar"}}},
                    {"name": "g", "securityContext": {"seLinuxOptions": {"role": "baz"}}},
                ],
            },
            "seLinuxOptions",
            'pod and containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: types "bar", "foo"; '
            "user may not be set; role may not be set",
            id="upstream-seLinuxOptions",
        ),
        pytest.param(  # policy/check_hostPorts_test.go "multiple containers, multiple host port"
            {
                "containers": [
                    {"name": "a", "ports": [{"hostPort": 0}]},
                    {"name": "b", "ports": [{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 20}]},
                    {"name": "c", "ports": [{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 30}]},
                ]
            },
            "hostPort",
            'containers "b", "c" use hostPorts 10, 20, 30',
            id="upstream-hostPorts",
        ),
        pytest.param(  # policy/check_appArmorProfile_test.go "pod Unconfined"
            {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}, "containers": [{"name": "a"}]},
            "forbidden AppArmor profile",
            'pod must not set AppArmor profile type to "Unconfined"',
            id="upstream-appArmor",
        ),
        pytest.param(
            {"securityContext": {"sysctls": [{"name": "kernel.msgmax"}, {"name": "net.ipv4.tcp_rmem"}]}},
            "forbidden sysctls",
            "kernel.msgmax",
            id="sysctls",
        ),
        pytest.param(
            {"initContainers": [{"name": "i", "securityContext": {"procMount": "Unmasked"}}]},
            "procMount",
            'container "i" must not set securityContext.procMount to "Unmasked"',
            id="procMount-init-container",
        ),
        pytest.param(
            {"ephemeralContainers": [{"name": "debug", "securityContext": {"privileged": True}}]},
            "privileged",
            'container "debug" must not set securityContext.privileged=true',
            id="privileged-ephemeral-container",
        ),
    ],
)
def test_the_evaluator_says_what_upstream_says(spec: dict[str, Any], reason: str, detail: str) -> None:
    verdict = evaluate_baseline({"spec": spec})
    assert [(f.reason, f.detail) for f in verdict.forbidden] == [(reason, detail)]


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param({}, None, id="unlabelled"),
        pytest.param({f"{LABEL_PREFIX}enforce": "baseline"}, ("baseline", "latest"), id="latest"),
        pytest.param({f"{LABEL_PREFIX}enforce": "privileged"}, ("privileged", "latest"), id="privileged"),
        pytest.param({f"{LABEL_PREFIX}warn": "restricted"}, None, id="warn-only"),
    ],
)
def test_enforced_policy(labels: dict[str, str], expected: tuple[str, str] | None) -> None:
    assert enforced_policy(labels) == expected


@pytest.mark.parametrize(
    ("labels", "error"),
    [
        pytest.param({f"{LABEL_PREFIX}enforce": "Baseline"}, "'Baseline' is not one of", id="level"),
        pytest.param(
            {f"{LABEL_PREFIX}enforce": "baseline", f"{LABEL_PREFIX}enforce-version": "1.33"},
            "'1.33' is not 'latest' or v<major>.<minor>",
            id="version",
        ),
    ],
)
def test_a_bad_policy_label_is_an_error_naming_it(labels: dict[str, str], error: str) -> None:
    with pytest.raises(PolicyLabelError, match=error):
        enforced_policy(labels)


def test_privileged_or_unlabelled_namespaces_admit_everything() -> None:
    pod = _workspace_pod()
    pod["spec"]["hostPID"] = True
    assert pod_admission({f"{LABEL_PREFIX}enforce": "privileged"}, pod) == (None, [])
    assert pod_admission({}, pod) == (None, [])


def test_restricted_is_enforced_with_the_baseline_checks_and_says_so() -> None:
    pod = _workspace_pod()
    labels = {f"{LABEL_PREFIX}enforce": "restricted", f"{LABEL_PREFIX}enforce-version": "v1.33"}
    assert pod_admission(labels, pod) == (
        None,
        ['PodSecurity "restricted:v1.33": this API server checks only its baseline rules'],
    )
    pod["spec"]["hostPID"] = True
    assert (
        pod_admission(labels, pod)[0]
        == 'violates PodSecurity "restricted:v1.33": host namespaces (hostPID=true)'
    )


def test_a_bad_label_refuses_the_pod_naming_the_label() -> None:
    refusal, _ = pod_admission({f"{LABEL_PREFIX}enforce": "strict"}, _workspace_pod())
    assert refusal == (
        "invalid Pod Security label on the namespace: "
        "pod-security.kubernetes.io/enforce: 'strict' is not one of privileged, baseline, restricted"
    )


def test_the_agent_namespace_stays_privileged() -> None:
    """The node agent needs hostPID (40-agent.yaml), so its namespace is the only privileged one."""
    assert enforced_policy(_namespace_labels("gpuworkspace-system")) == ("privileged", "latest")
    agent = next(d for _, d in manifests() if d["kind"] == "DaemonSet")
    assert "hostPID" in evaluate_baseline(agent["spec"]["template"]).forbidden[0].detail
    namespaces = [d["metadata"]["name"] for _, d in manifests() if d["kind"] == "Namespace"]
    privileged = [
        n for n in namespaces if (enforced_policy(_namespace_labels(n)) or ("",))[0] == "privileged"
    ]
    assert privileged == ["gpuworkspace-system"]
