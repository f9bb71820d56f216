"""VM mode builders: golden scenarios, schema validation (core objects strictly by kubernetes_validate,
the DataVolume and VirtualMachine against the CDI and KubeVirt Swagger files, strictly) and the properties
that must hold: the token only in the Secret, no owner on the disk, names that never collide."""

from __future__ import annotations

import copy
import functools
import inspect
import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft4Validator  # type: ignore[import-untyped]

from gpuworkspace_devcluster.openapi import find_shared_schemas
from gpuworkspace_devcluster.sim.guest import ENV_FILE, parse_env_file
from gpuworkspace_spawner.catalog.model import (
    NodePool,
    Placement,
    Resources,
    Security,
    VmGpu,
    VmSpec,
    WorkspaceProfile,
)
from gpuworkspace_spawner.manifests import names, vm
from gpuworkspace_spawner.manifests.names import WorkspaceContext, WorkspaceIdentity
from gpuworkspace_spawner.manifests.vm import (
    VmNames,
    build_cloud_init_secret,
    build_root_disk,
    build_start_patch,
    build_stop_patch,
    build_vm,
    build_vm_service,
    env_file,
    vm_names,
)
from tests.unit.manifests.golden import assert_golden, validate
from tests.unit.manifests.scenarios import ALICE, CATALOG_VERSION, CPU

TOKEN = "TOKEN-PLACEHOLDER-0123456789abcdef"
ENV = {
    "JUPYTERHUB_API_TOKEN": TOKEN,
    "JUPYTERHUB_API_URL": "http://hub:8081/hub/api",
    "JUPYTERHUB_SERVICE_PREFIX": "/user/alice/",
    "JUPYTERHUB_USER": "alice",
    "GPUWORKSPACE_PROFILE": "vm-workstation",
}

VM_WORKSTATION = WorkspaceProfile(
    slug="vm-workstation",
    display_name="Linux VM workstation (root disk kept)",
    runtime="vm",
    vm=VmSpec(
        data_source_name="ubuntu-24-04-gpu",
        data_source_namespace="vm-images",
        cores=8,
        guest_memory="16Gi",
        root_disk_size="40Gi",
        root_disk_class="ceph-rbd",
        root_disk_max_size="200Gi",
    ),
    # "guaranteed 2, burst to 8": requests without limits (seed 001 §6)
    resources=Resources(requests={"cpu": "2", "memory": "16Gi"}),
    placement=Placement(
        gpu_mode="none", node_pool=NodePool(name="cpu", node_selector={"gpuworkspace.dev/pool": "cpu"})
    ),
    cost_center="research-platform",
)

VM_GPU = WorkspaceProfile(
    slug="vm-h100",
    display_name="Linux VM with one H100",
    runtime="vm",
    vm=VmSpec(
        data_source_name="ubuntu-24-04-gpu",
        data_source_namespace="vm-images",
        cores=8,
        sockets=2,
        guest_memory="64Gi",
        root_disk_size="200Gi",
        gpus=(VmGpu(name="gpu1", device_name="nvidia.com/GH100_H100_SXM5_80GB"),),
    ),
    resources=Resources(requests={"cpu": "16", "memory": "64Gi"}, limits={"cpu": "16", "memory": "64Gi"}),
    placement=Placement(
        gpu_mode="exclusive",
        node_pool=NodePool(
            name="gpu-passthrough",
            node_selector={"gpuworkspace.dev/pool": "gpu-passthrough"},
            tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
        ),
    ),
    security=Security(network_profile="egress-git-registry"),
    cost_center="research/nlp",
    team="nlp",
)


def vm_context(
    profile: WorkspaceProfile = VM_WORKSTATION, identity: WorkspaceIdentity = ALICE
) -> tuple[WorkspaceContext, VmNames]:
    vm_objects = vm_names(identity)
    ws = WorkspaceContext(
        identity=identity,
        profile=profile,
        catalog_version=CATALOG_VERSION,
        ide="jupyterlab",
        home_claim=vm_objects.disk,
        team=profile.team or "",
        team_source="catalog" if profile.team else "",
    )
    return ws, vm_objects


# ------------------------------------------------------------------ strict Swagger validation
def _strict(node: Any) -> Any:
    """The Swagger schema with ``additionalProperties: false`` wherever properties are listed (what the
    API server's ``fieldValidation=Strict`` does for these kinds)."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        key: {name: _strict(s) for name, s in value.items()} if key == "properties" else _strict(value)
        for key, value in node.items()
    }
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


@functools.cache
def _swagger_validator(filename: str, definition: str) -> Draft4Validator:
    shared = find_shared_schemas()
    if shared is None or not (shared / filename).is_file():
        pytest.skip(f"{filename} is not in the shared schemas folder (../shared/schemas)")
    defs = json.loads(Path(shared / filename).read_text())["definitions"]
    return Draft4Validator({"definitions": _strict(defs), "$ref": f"#/definitions/{definition}"})


def validate_swagger(obj: dict[str, Any], filename: str, definition: str) -> None:
    errors = sorted(_swagger_validator(filename, definition).iter_errors(obj), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_strict_validator_refuses_unknown_fields() -> None:
    ws, n = vm_context()
    wrong = build_vm(ws, n)
    wrong["spec"]["template"]["spec"]["domain"]["cpu"]["vcpus"] = 8
    with pytest.raises(AssertionError, match="vcpus"):
        validate_swagger(wrong, "kubevirt-swagger.json", "v1.VirtualMachine")


# ------------------------------------------------------------------ golden scenarios
@pytest.mark.parametrize(
    ("golden", "profile"),
    [
        pytest.param("vm-workstation.yaml", VM_WORKSTATION, id="burstable-no-gpu"),
        pytest.param("vm-gpu.yaml", VM_GPU, id="exclusive-passthrough"),
    ],
)
def test_vm_golden(golden: str, profile: WorkspaceProfile) -> None:
    ws, n = vm_context(profile)
    obj = build_vm(ws, n)
    validate_swagger(obj, "kubevirt-swagger.json", "v1.VirtualMachine")
    assert_golden(golden, obj)


def test_root_disk_golden() -> None:
    ws, n = vm_context()
    dv = build_root_disk(ws, n)
    validate_swagger(dv, "cdi-swagger.json", "v1beta1.DataVolume")
    assert_golden("dv-root.yaml", dv)


def test_cloud_init_secret_golden() -> None:
    ws, n = vm_context()
    secret = build_cloud_init_secret(ws, n, ENV)
    validate(secret)
    assert_golden("secret-cloudinit.yaml", secret)


def test_service_golden() -> None:
    ws, n = vm_context()
    service = build_vm_service(ws, n)
    validate(service)
    assert_golden("service-vm.yaml", service)


# ------------------------------------------------------------------ properties
def test_vm_references_its_disk_and_secret_and_owns_nothing() -> None:
    ws, n = vm_context()
    obj = build_vm(ws, n)
    spec = obj["spec"]
    assert spec["runStrategy"] == "Halted"
    assert "dataVolumeTemplates" not in spec
    assert "ownerReferences" not in obj["metadata"]
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert volumes["rootdisk"] == {"name": "rootdisk", "dataVolume": {"name": n.disk}}
    assert volumes["cloudinitdisk"]["cloudInitNoCloud"] == {"secretRef": {"name": n.secret}}
    assert spec["template"]["spec"]["evictionStrategy"] == "None"
    assert obj["metadata"]["labels"][names.LABEL_RUNTIME] == "vm"


def test_code_server_choice_exposes_only_the_authenticated_notebook_port() -> None:
    """code-server stays on the guest's loopback 8080, proxied by the server on 8888 behind the hub's
    login (docs/reference/image-contract.md): neither the VM's interface nor its Service opens 8080."""
    ws, n = vm_context(replace(VM_WORKSTATION, editors=("code-server", "jupyterlab")))
    ws = replace(ws, ide="code-server")
    obj = build_vm(ws, n)
    (interface,) = obj["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"]
    assert [p["port"] for p in interface["ports"]] == [8888]  # masquerade forwards only listed ports
    assert [(p["port"], p["targetPort"]) for p in build_vm_service(ws, n)["spec"]["ports"]] == [(8888, 8888)]
    assert obj["spec"]["template"]["metadata"]["annotations"][names.ANN_IDE] == "code-server"


def test_burstable_vm_sets_requests_without_limits() -> None:
    ws, n = vm_context()
    domain = build_vm(ws, n)["spec"]["template"]["spec"]["domain"]
    assert domain["resources"] == {"requests": {"cpu": "2", "memory": "16Gi"}}
    assert domain["cpu"] == {"cores": 8, "sockets": 1, "threads": 1}
    assert domain["memory"] == {"guest": "16Gi"}
    assert "gpus" not in domain["devices"]


def test_vm_without_resources_leaves_them_to_kubevirt() -> None:
    ws, n = vm_context(replace(VM_WORKSTATION, resources=Resources()))
    assert "resources" not in build_vm(ws, n)["spec"]["template"]["spec"]["domain"]


def test_template_labels_reach_the_launcher_pod_and_the_service_selects_them() -> None:
    identity = replace(ALICE, release="hub-prod")
    ws, n = vm_context(VM_GPU, identity)
    labels = build_vm(ws, n)["spec"]["template"]["metadata"]["labels"]
    assert ws.labels.items() <= labels.items()
    assert labels["component"] == "singleuser-server" and labels["app"] == "jupyterhub"
    assert labels["release"] == "hub-prod"
    assert labels["hub.jupyter.org/network-access-hub"] == "true"
    selector = build_vm_service(ws, n)["spec"]["selector"]
    assert selector == {names.LABEL_VM: n.vm} and selector.items() <= labels.items()


def test_root_disk_is_rwo_kept_after_completion_and_never_owned() -> None:
    ws, n = vm_context()
    dv = build_root_disk(ws, n)
    assert dv["metadata"]["name"] == n.disk == ws.home_claim
    assert "ownerReferences" not in dv["metadata"]
    assert dv["spec"]["storage"]["accessModes"] == ["ReadWriteOnce"]
    assert dv["metadata"]["annotations"]["cdi.kubevirt.io/storage.deleteAfterCompletion"] == "false"
    labels = dv["metadata"]["labels"]
    assert labels[names.LABEL_DISK] == names.DISK_ROOT == "root"
    assert labels[names.LABEL_DISK_STATE] == names.DISK_ACTIVE
    assert ws.identity.owns(dv["metadata"])


def test_root_disk_without_class_uses_the_default_storage_class() -> None:
    assert VM_WORKSTATION.vm is not None
    profile = replace(VM_WORKSTATION, vm=replace(VM_WORKSTATION.vm, root_disk_class=None))
    ws, n = vm_context(profile)
    dv = build_root_disk(ws, n)
    validate_swagger(dv, "cdi-swagger.json", "v1beta1.DataVolume")
    assert "storageClassName" not in dv["spec"]["storage"]


def _serialized(obj: dict[str, Any]) -> str:
    return json.dumps(obj) + yaml.safe_dump(obj)


@pytest.mark.parametrize("profile", [VM_WORKSTATION, VM_GPU], ids=["workstation", "gpu"])
def test_token_appears_only_in_the_secret(profile: WorkspaceProfile) -> None:
    ws, n = vm_context(profile)
    secret = build_cloud_init_secret(ws, n, ENV)
    assert TOKEN in _serialized(secret["stringData"])
    assert TOKEN not in _serialized(secret["metadata"])
    for other in (build_vm(ws, n), build_vm_service(ws, n), build_root_disk(ws, n)):
        assert TOKEN not in _serialized(other)


def _guest_env(secret: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """What the simulated guest's cloud-init does with the Secret: the file entry and the parsed env."""
    userdata = secret["stringData"]["userdata"]
    assert userdata.startswith("#cloud-config\n")
    files = yaml.safe_load(userdata)["write_files"]
    (entry,) = [f for f in files if f["path"] == ENV_FILE]  # the others are the guide (conventions.py)
    assert all(TOKEN not in f["content"] and f["permissions"] == "0644" for f in files if f is not entry)
    return entry, parse_env_file(entry["content"])


def test_cloud_init_writes_the_env_file_for_root_only() -> None:
    ws, n = vm_context()
    entry, env = _guest_env(build_cloud_init_secret(ws, n, ENV))
    assert entry["path"] == ENV_FILE == vm.ENV_FILE
    assert entry["permissions"] == "0600"
    assert env == ENV


TRICKY = [
    "",
    " leading and trailing ",
    "it's",
    'say "hi"',
    "$HOME `id` $(id) ; rm -rf / & | > <",
    "a  b\tc",
    "# not a comment",
    "=x=y=",
    "back\\slash",
    "ünïcødé ✓",
    "export X=1",
]


@pytest.mark.parametrize("value", TRICKY)
def test_env_values_round_trip_through_the_guest(value: str) -> None:
    ws, n = vm_context()
    env = {"JUPYTERHUB_API_TOKEN": TOKEN, "TRICKY": value}
    assert _guest_env(build_cloud_init_secret(ws, n, env))[1] == env


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True),
        st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=sorted(vm._LINE_BREAKS))),
        max_size=6,
    )
)
def test_any_env_round_trips(env: dict[str, str]) -> None:
    ws, n = vm_context()
    assert _guest_env(build_cloud_init_secret(ws, n, env))[1] == env


@pytest.mark.parametrize(
    ("env", "words"),
    [
        pytest.param({"BAD-KEY": "x"}, "not an environment variable name", id="key"),
        pytest.param({"1X": "x"}, "not an environment variable name", id="key-digit"),
        pytest.param({"X": "a\nb"}, "line break", id="newline"),
        pytest.param({"X": "a\u2028b"}, "line break", id="unicode-line-separator"),
        pytest.param({"X": "a\0b"}, "NUL", id="nul"),
    ],
)
def test_env_file_refuses_what_a_line_cannot_hold(env: dict[str, str], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        env_file(env)


def test_builders_refuse_a_container_profile_and_a_foreign_disk() -> None:
    ws, n = vm_context()
    container = replace(ws, profile=CPU)
    foreign = replace(ws, home_claim="home-alice")
    for builder in (build_root_disk, build_vm, build_vm_service):
        with pytest.raises(ValueError, match="not a VM profile"):
            builder(container, n)
        with pytest.raises(ValueError, match="not the VM's root disk"):
            builder(foreign, n)
    with pytest.raises(ValueError, match="not a VM profile"):
        build_cloud_init_secret(container, n, ENV)


def test_inputs_are_not_shared_with_outputs() -> None:
    ws, n = vm_context(VM_GPU)
    before = copy.deepcopy(ws)
    obj = build_vm(ws, n)
    obj["spec"]["template"]["spec"]["nodeSelector"]["x"] = "y"
    obj["spec"]["template"]["spec"]["tolerations"][0]["value"] = "changed"
    obj["spec"]["template"]["spec"]["domain"]["resources"]["requests"]["cpu"] = "1"
    assert ws == before


def test_start_and_stop_patches() -> None:
    assert build_start_patch() == {"spec": {"runStrategy": "Always"}}
    assert build_stop_patch() == {"spec": {"runStrategy": "Halted"}}


# ------------------------------------------------------------------ names
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # DNS-1035: a Service name starts with a letter


@pytest.mark.parametrize(
    ("user", "server", "vm_name"),
    [
        pytest.param("alice", "", "ws-alice--default", id="default-server"),
        pytest.param("alice", "gpu", "ws-alice--gpu", id="named-server"),
        pytest.param("user01", "", "ws-user01--default", id="digits"),
    ],
)
def test_plain_names(user: str, server: str, vm_name: str) -> None:
    n = vm_names(WorkspaceIdentity(user=user, server=server, namespace="ns"))
    assert n == VmNames(vm=vm_name, disk=f"{vm_name}-root", secret=f"{vm_name}-cloudinit", service=vm_name)


@pytest.mark.parametrize(
    ("user", "server"),
    [
        pytest.param("alice@example.com", "", id="email"),
        pytest.param("Alice", "", id="upper-case"),
        pytest.param("alice", "default", id="server-named-default"),
        pytest.param("a--b", "c", id="double-dash-user"),
        pytest.param("a", "-b", id="dash-server"),
        pytest.param("x" * 60, "", id="long"),
        pytest.param("@@@", "!!!", id="nothing-readable"),
    ],
)
def test_hashed_names(user: str, server: str) -> None:
    n = vm_names(WorkspaceIdentity(user=user, server=server, namespace="ns"))
    assert n.vm.startswith("wsx-") and re.search(r"-[0-9a-f]{12}$", n.vm)
    for name in (n.vm, n.disk, n.secret, n.service):
        assert len(name) <= 63 and _DNS_LABEL.fullmatch(name), name


def test_names_do_not_collide_on_the_usual_ambiguities() -> None:
    pairs = [("a", ""), ("a", "default"), ("a-", "b"), ("a", "-b"), ("a--b", "c"), ("a", "b--c"), ("A", "")]
    built = {vm_names(WorkspaceIdentity(user=u, server=s, namespace="ns")).vm for u, s in pairs}
    assert len(built) == len(pairs)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=70), st.text(max_size=70)), min_size=2, max_size=8, unique=True))
def test_names_are_valid_and_distinct(pairs: list[tuple[str, str]]) -> None:
    built = [vm_names(WorkspaceIdentity(user=u, server=s, namespace="ns")) for u, s in pairs]
    assert len({n.vm for n in built}) == len(pairs)
    for n in built:
        for name in (n.vm, n.disk, n.secret, n.service):
            assert len(name) <= 63 and _DNS_LABEL.fullmatch(name), name


# ------------------------------------------------------------------ API
SIGNATURES: list[tuple[Callable[..., Any], str]] = [
    (vm_names, "(identity: 'WorkspaceIdentity') -> 'VmNames'"),
    (build_root_disk, "(ws: 'WorkspaceContext', names: 'VmNames') -> 'dict[str, Any]'"),
    (
        build_cloud_init_secret,
        "(ws: 'WorkspaceContext', names: 'VmNames', env: 'Mapping[str, str]') -> 'dict[str, Any]'",
    ),
    (build_vm, "(ws: 'WorkspaceContext', names: 'VmNames') -> 'dict[str, Any]'"),
    (build_vm_service, "(ws: 'WorkspaceContext', names: 'VmNames') -> 'dict[str, Any]'"),
    (build_start_patch, "() -> 'dict[str, Any]'"),
    (build_stop_patch, "() -> 'dict[str, Any]'"),
]


@pytest.mark.parametrize(
    ("function", "signature"), [pytest.param(f, s, id=f.__name__) for f, s in SIGNATURES]
)
def test_signature(function: Callable[..., Any], signature: str) -> None:
    assert str(inspect.signature(function)) == signature


# ------------------------------------------------------------------ keeping the VM up to date
def test_a_vm_as_built_is_up_to_date_even_with_server_defaults() -> None:
    ws, n = vm_context()
    stored = build_vm(ws, n)
    stored["metadata"] |= {"uid": "u-1", "resourceVersion": "7", "generation": 3}
    stored["spec"]["runStrategy"] = "Always"
    domain = stored["spec"]["template"]["spec"]["domain"]
    domain["machine"] = {"type": "q35"}  # KubeVirt's defaults
    domain["firmware"] = {"uuid": "5d307ca9-b3ef-428c-8861-06e72d69f223"}
    stored["status"] = {"printableStatus": "Running"}
    assert not vm.vm_outdated(stored, build_vm(ws, n))


def test_another_profile_or_a_lost_disk_reference_makes_the_vm_outdated() -> None:
    ws, n = vm_context()
    stored = build_vm(ws, n)
    gpu_ws, _ = vm_context(VM_GPU)
    assert vm.vm_outdated(stored, build_vm(gpu_ws, n))  # the server switched to the GPU VM profile
    edited = replace(VM_WORKSTATION, resources=replace(VM_WORKSTATION.resources, limits={"cpu": "12"}))
    assert vm.vm_outdated(stored, build_vm(vm_context(edited)[0], n))  # the profile was edited
    no_disk = copy.deepcopy(stored)
    no_disk["spec"]["template"]["spec"]["volumes"][0]["dataVolume"]["name"] = "someone-elses"
    assert vm.vm_outdated(no_disk, build_vm(ws, n))
    relabelled = copy.deepcopy(stored)
    relabelled["metadata"]["labels"]["gpuworkspace.dev/profile"] = "old-profile"
    assert vm.vm_outdated(relabelled, build_vm(ws, n))
