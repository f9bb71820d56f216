"""load_catalog: valid layouts, and every class of error reported with its file, profile and field."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_spawner.catalog import CatalogError, CatalogProblem, load_catalog
from gpuworkspace_spawner.catalog.files import MAX_FILE_BYTES

from .conftest import DELETE, DIGEST, IMAGE, catalog_doc, gpu_doc, profile_doc, with_path, write_yaml

REPO = Path(__file__).resolve().parents[3]


def problems_of(path: Path) -> tuple[CatalogProblem, ...]:
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    return caught.value.problems


def test_sample_catalog_loads() -> None:
    catalog = load_catalog(REPO / "hub_config" / "catalog")
    assert catalog.version == "2026.12.1"
    assert [p.slug for p in catalog.profiles] == [
        "cpu-small",
        "cpu-team",
        "gpu-exclusive",
        "gpu-shared",
        "gpu-mig",
        "vm-workstation",
    ]
    assert catalog.default_profile is not None and catalog.default_profile.slug == "cpu-small"
    by_slug = {p.slug: p for p in catalog.profiles}
    assert by_slug["gpu-exclusive"].access.groups == frozenset({"gpu-users"})
    assert by_slug["gpu-mig"].resources.gpu == ("nvidia.com/mig-1g.10gb", "1")
    assert all(p.ide.default == "jupyterlab" for p in catalog.profiles)
    # base-notebook declares JupyterLab only; the VM's golden image declares both editors
    assert {p.slug: p.ide.choices for p in catalog.profiles} == {
        **{p.slug: ("jupyterlab",) for p in catalog.profiles if p.runtime == "container"},
        "vm-workstation": ("jupyterlab", "code-server"),
    }
    gpu_pool = by_slug["gpu-exclusive"].placement.node_pool
    assert gpu_pool is not None and gpu_pool.tolerations[0]["key"] == "nvidia.com/gpu"


def test_single_file_and_directory_give_the_same_profiles(tmp_path: Path, catalog_dir: Path) -> None:
    single = write_yaml(
        tmp_path / "one.yaml", catalog_doc(), profile_doc("cpu", default=True), gpu_doc("gpu")
    )
    from_file, from_dir = load_catalog(single), load_catalog(catalog_dir)
    assert [p.slug for p in from_file.profiles] == [p.slug for p in from_dir.profiles] == ["cpu", "gpu"]
    assert from_file.sources == (str(single),)
    assert from_dir.sources == (str(catalog_dir / "catalog.yaml"), str(catalog_dir / "profiles.yaml"))


def test_model_values_and_defaults(tmp_path: Path) -> None:
    doc = profile_doc(
        "full",
        storage={
            "home": {"class": "ceph-rbd", "size": "20Gi", "accessMode": "ReadWriteOncePod"},
            "scratch": {"type": "LocalEphemeral", "sizeLimit": "50Gi"},
            "shm": {"sizeLimit": "1Gi"},
            "datasets": {"claimName": "datasets", "readOnly": True},
            "models": {"claimName": "models", "subPath": "llm"},
            "teamDirectories": [
                {"name": "vision", "claimName": "team-fs", "subPath": "vision", "mountPath": "/team"}
            ],
        },
        session={"idleTimeout": "1h30m", "maxDuration": "2d", "warnings": ["5m", "30m"]},
        security={"serviceAccountToken": True, "networkProfile": "research-restricted", "runAsUser": 1001},
        ide="jupyterlab",
        costCenter="cc-42",
    )
    doc["spec"]["resources"]["requests"]["cpu"] = 1  # YAML ints are accepted as quantities
    profile = load_catalog(
        write_yaml(
            tmp_path / "c.yaml",
            catalog_doc(network={"blockedCidrs": [], "profiles": {"research-restricted": {}}}),
            doc,
        )
    ).profiles[0]
    assert profile.resources.requests["cpu"] == "1"
    assert profile.storage.home.access_mode == "ReadWriteOncePod"
    assert profile.storage.home.mount_path == "/home/jovyan"
    assert profile.storage.scratch.size_limit == "50Gi" and profile.storage.scratch.mount_path == "/scratch"
    assert profile.storage.datasets is not None and profile.storage.datasets.mount_path == "/data"
    assert profile.storage.models is not None and profile.storage.models.sub_path == "llm"
    assert profile.storage.models.read_only and profile.storage.models.mount_path == "/models"
    assert profile.storage.team_directories[0].read_only is True
    assert (profile.session.idle_timeout_s, profile.session.max_duration_s) == (5400, 172800)
    assert profile.session.warnings_s == (1800, 300)
    assert profile.security.service_account_token and profile.security.run_as_user == 1001
    assert (profile.ide.default, profile.ide.choices) == ("jupyterlab", ("jupyterlab",))
    assert profile.cost_center == "cc-42" and profile.source == str(tmp_path / "c.yaml")


def test_configmap_symlink_layout(tmp_path: Path) -> None:
    """A ConfigMap volume: ..2026_x/ holds the files, ..data → it, and top-level symlinks into ..data."""
    root = tmp_path / "cm"
    stamp = root / "..2026_12_01_10_00_00.123"
    write_yaml(stamp / "catalog.yaml", catalog_doc())
    write_yaml(stamp / "profiles.yaml", profile_doc("cpu"))
    os.symlink(stamp.name, root / "..data")
    for name in ("catalog.yaml", "profiles.yaml"):
        os.symlink(f"..data/{name}", root / name)
    catalog = load_catalog(root)
    assert [p.slug for p in catalog.profiles] == ["cpu"]
    assert catalog.sources == (str(root / "catalog.yaml"), str(root / "profiles.yaml"))


def test_hidden_and_other_files_are_skipped(catalog_dir: Path) -> None:
    (catalog_dir / ".hidden.yaml").write_text("not: [valid")
    (catalog_dir / "README.md").write_text("# notes")
    (catalog_dir / "sub").mkdir()
    write_yaml(catalog_dir / "sub" / "x.yaml", profile_doc("nested"))
    assert [p.slug for p in load_catalog(catalog_dir).profiles] == ["cpu", "gpu"]


def test_version_without_catalog_document_is_a_stable_content_hash(tmp_path: Path) -> None:
    first = write_yaml(tmp_path / "a" / "p.yaml", profile_doc("cpu", placement={"gpuMode": "none"}))
    second = write_yaml(tmp_path / "b" / "p.yaml", profile_doc("cpu", placement={"gpuMode": "none"}))
    version = load_catalog(first).version
    assert version.startswith("sha-") and len(version) == 16
    assert load_catalog(second).version == version
    write_yaml(second, profile_doc("cpu", placement={"gpuMode": "none"}, description="changed"))
    assert load_catalog(second).version != version


# (dotted path, value; DELETE removes) → (field reported, words in the message)
PROFILE_ERRORS = [
    pytest.param("spec.displayName", DELETE, "spec.displayName", "required", id="missing-displayName"),
    pytest.param("spec.image", DELETE, "spec.image", "required", id="missing-image"),
    pytest.param("spec.colour", "red", "spec.colour", "unknown field", id="unknown-spec-field"),
    pytest.param(
        "spec.storage.home.color", "x", "spec.storage.home.color", "unknown field", id="unknown-nested-field"
    ),
    pytest.param("spec.runtime", "docker", "spec.runtime", "is not one of", id="bad-runtime"),
    pytest.param(
        "spec.placement.gpuMode", "fast", "spec.placement.gpuMode", "'fast' is not one of", id="bad-gpuMode"
    ),
    pytest.param(
        "spec.placement.nodePool", "nope", "spec.placement.nodePool", "not a node pool", id="unknown-pool"
    ),
    pytest.param("spec.image", "repo/img:latest", "spec.image", "pinned by digest", id="tag-not-digest"),
    pytest.param("spec.image", "Bad Image", "spec.image", "not an image reference", id="image-whitespace"),
    pytest.param(
        "spec.image",
        "UPPER/img@sha256:" + DIGEST,
        "spec.image",
        "not a valid image reference",
        id="image-grammar",
    ),
    pytest.param(
        "spec.resources.limits.memory",
        "64GB",
        "spec.resources.limits.memory",
        "Kubernetes quantity",
        id="bad-quantity",
    ),
    pytest.param(
        "spec.resources.limits.memory",
        "-1Gi",
        "spec.resources.limits.memory",
        "Kubernetes quantity",
        id="negative-quantity",
    ),
    pytest.param(
        "spec.resources.limits.[amd.com/gpu]",
        "1",
        "spec.resources.limits.amd.com/gpu",
        "unknown field",
        id="unknown-resource",
    ),
    pytest.param(
        "spec.resources.requests.cpu",
        "4",
        "spec.resources.requests.cpu",
        "above its limit",
        id="request-above-limit",
    ),
    pytest.param(
        "spec.session.idleTimeout", "90x", "spec.session.idleTimeout", "not a duration", id="bad-duration"
    ),
    pytest.param(
        "spec.session.idleTimeout",
        3600,
        "spec.session.idleTimeout",
        "not a duration",
        id="duration-not-string",
    ),
    pytest.param(
        "spec.session.idleTimeout", "0m", "spec.session.idleTimeout", "not a duration", id="zero-duration"
    ),
    pytest.param(
        "spec.session",
        {"idleTimeout": "13h", "maxDuration": "12h"},
        "spec.session.idleTimeout",
        "never apply",
        id="idle-beyond-max",
    ),
    pytest.param(
        "spec.session",
        {"idleTimeout": "30m", "warnings": ["30m"]},
        "spec.session.warnings[0]",
        "shorter than idleTimeout",
        id="warning-not-shorter",
    ),
    pytest.param(
        "spec.session",
        {"idleTimeout": "30m", "warnings": ["5m", "5m"]},
        "spec.session.warnings",
        "twice",
        id="warning-twice",
    ),
    pytest.param(
        "spec.session",
        {"warnings": ["5m"]},
        "spec.session.warnings",
        "need an idleTimeout",
        id="warning-without-timeout",
    ),
    pytest.param("spec.ide", "vim", "spec.ide", "not an editor", id="ide-string"),
    pytest.param(
        "spec.ide",
        {"default": "code-server", "choices": ["jupyterlab"]},
        "spec.ide.default",
        "not one of the choices",
        id="ide-default-not-choice",
    ),
    pytest.param("spec.ide", {"choices": []}, "spec.ide.choices", "should be non-empty", id="ide-no-choices"),
    pytest.param(
        "spec.ide",
        {"choices": ["jupyterlab"], "theme": "dark"},
        "spec.ide.theme",
        "unknown field",
        id="ide-unknown-field",
    ),
    pytest.param(
        "spec.storage.datasets",
        {"claimName": "ds", "readOnly": False},
        "spec.storage.datasets.readOnly",
        "always mounted read-only",
        id="datasets-writable",
    ),
    pytest.param(
        "spec.storage.models",
        {"mountPath": "/models"},
        "spec.storage.models.claimName",
        "required",
        id="models-without-claim",
    ),
    pytest.param(
        "spec.storage.home.mountPath", "home", "spec.storage.home.mountPath", "absolute", id="relative-mount"
    ),
    pytest.param(
        "spec.storage.scratch.mountPath",
        "/scratch/../etc",
        "spec.storage.scratch.mountPath",
        "'..'",
        id="dotdot-mount",
    ),
    pytest.param(
        "spec.storage.scratch.mountPath",
        "/home/jovyan/",
        "spec.storage.scratch.mountPath",
        "already used by spec.storage.home.mountPath",
        id="duplicate-mount",
    ),
    pytest.param(
        "spec.storage.scratch.mountPath",
        "/dev/shm",
        "spec.storage.scratch.mountPath",
        "reserved",
        id="reserved-mount",
    ),
    pytest.param(
        "spec.storage.scratch.type", "Ceph", "spec.storage.scratch.type", "LocalEphemeral", id="scratch-type"
    ),
    pytest.param(
        "spec.storage.home.size", "500Mi", "spec.storage.home.size", "at least 1Gi", id="home-too-small"
    ),
    pytest.param(
        "spec.storage.home.accessMode",
        "ReadWriteMany",
        "spec.storage.home.accessMode",
        "is not one of",
        id="home-rwx",
    ),
    pytest.param(
        "spec.storage.teamDirectories",
        [
            {"name": "a", "claimName": "fs", "mountPath": "/team"},
            {"name": "a", "claimName": "fs", "mountPath": "/team2"},
        ],
        "spec.storage.teamDirectories[1].name",
        "used twice",
        id="team-name-twice",
    ),
    pytest.param(
        "spec.storage.teamDirectories",
        [{"name": "a", "claimName": "fs", "mountPath": "/t", "subPath": "../x"}],
        "spec.storage.teamDirectories[0].subPath",
        "'..'",
        id="team-subpath-escape",
    ),
    pytest.param("spec.security.runAsUser", 0, "spec.security.runAsUser", "never run as root", id="root"),
    pytest.param(
        "spec.security.serviceAccountToken",
        "yes",
        "spec.security.serviceAccountToken",
        "boolean",
        id="token-not-bool",
    ),
    pytest.param("spec.access.groups", "gpu-users", "spec.access.groups", "array", id="groups-not-list"),
    pytest.param(
        "spec.vm",
        {"dataSource": {"name": "ubuntu", "namespace": "vm-images"}},
        "spec.vm",
        "only allowed with runtime: vm",
        id="vm-without-runtime",
    ),
    pytest.param("spec.runtime", "vm", "spec.vm", "needs a vm section", id="runtime-vm-without-vm"),
    pytest.param("metadata.name", "GPU_Full", "metadata.name", "DNS-1123", id="bad-slug"),
    pytest.param("metadata.name", "x" * 64, "metadata.name", "DNS-1123", id="long-slug"),
    pytest.param("metadata.labels", {"a": "b"}, "metadata.labels", "unknown field", id="metadata-unknown"),
    pytest.param(
        "apiVersion", "v1", "apiVersion", "must be gpuworkspace.dev/v1alpha1", id="wrong-apiVersion"
    ),
    pytest.param("kind", "Pod", "kind", "not a known kind", id="wrong-kind"),
]


@pytest.mark.parametrize(("path", "value", "field", "words"), PROFILE_ERRORS)
def test_profile_error_names_file_profile_and_field(
    tmp_path: Path, path: str, value: Any, field: str, words: str
) -> None:
    bad = with_path(profile_doc("broken"), path, value)
    file = write_yaml(tmp_path / "profiles.yaml", catalog_doc(), profile_doc("fine"), bad)
    found = problems_of(file)
    assert any(p.field == field and words in p.message for p in found), found
    name = bad["metadata"]["name"]
    assert all(p.file == str(file) for p in found)
    assert all(p.profile == name for p in found if p.field == field)


# GPU mode against GPU resources: (mode, resource in requests and limits) → error words or None
GPU_MODES = [
    pytest.param("exclusive", "nvidia.com/gpu", None, id="exclusive-gpu"),
    pytest.param("mig", "nvidia.com/mig-1g.10gb", None, id="mig-slice"),
    pytest.param("mig", "nvidia.com/mig-3g.40gb", None, id="mig-other-slice"),
    pytest.param("time-sliced", "nvidia.com/gpu.shared", None, id="time-sliced-shared"),
    pytest.param("exclusive", "nvidia.com/gpu.shared", "needs nvidia.com/gpu", id="exclusive-needs-card"),
    pytest.param("mig", "nvidia.com/gpu", "nvidia.com/mig-", id="mig-needs-slice"),
    pytest.param("time-sliced", "nvidia.com/gpu", "nvidia.com/gpu.shared", id="time-sliced-needs-shared"),
    pytest.param("none", "nvidia.com/gpu", "gpuMode is none", id="none-with-gpu"),
    pytest.param("exclusive", "cpu", "needs nvidia.com/gpu", id="exclusive-without-gpu"),
]


@pytest.mark.parametrize(("mode", "resource", "words"), GPU_MODES)
def test_gpu_mode_cross_checks(tmp_path: Path, mode: str, resource: str, words: str | None) -> None:
    doc = gpu_doc("g", resource=resource, mode=mode)
    if resource == "cpu":
        doc = gpu_doc("g", mode=mode)
        for section in ("requests", "limits"):
            del doc["spec"]["resources"][section]["nvidia.com/gpu"]
    file = write_yaml(tmp_path / "c.yaml", catalog_doc(), doc)
    if words is None:
        assert load_catalog(file).profiles[0].placement.gpu_mode == mode
        return
    found = problems_of(file)
    assert [(p.profile, p.field) for p in found] == [("g", "spec.placement.gpuMode")]
    assert words in found[0].message


# GPU resource amounts: (resource, request, limit) → field and words
GPU_AMOUNTS = [
    pytest.param(
        "nvidia.com/gpu",
        "1",
        "2",
        "spec.resources.requests.nvidia.com/gpu",
        "must equal its limit",
        id="request-not-limit",
    ),
    pytest.param(
        "nvidia.com/gpu",
        "1",
        None,
        "spec.resources.limits.nvidia.com/gpu",
        "needs a limit",
        id="request-without-limit",
    ),
    pytest.param(
        "nvidia.com/gpu",
        "500m",
        "500m",
        "spec.resources.limits.nvidia.com/gpu",
        "whole numbers",
        id="fractional-gpu",
    ),
    pytest.param(
        "nvidia.com/gpu", "0", "0", "spec.resources.limits.nvidia.com/gpu", "at least 1", id="zero-gpu"
    ),
    pytest.param(
        "nvidia.com/gpu.shared",
        "2",
        "2",
        "spec.resources.limits.nvidia.com/gpu.shared",
        "one shared access",
        id="two-shared",
    ),
]


@pytest.mark.parametrize(("resource", "requested", "limit", "field", "words"), GPU_AMOUNTS)
def test_gpu_amounts(
    tmp_path: Path, resource: str, requested: str, limit: str | None, field: str, words: str
) -> None:
    mode = "time-sliced" if resource.endswith("shared") else "exclusive"
    doc = gpu_doc("g", resource=resource, mode=mode)
    doc["spec"]["resources"]["requests"][resource] = requested
    if limit is None:
        del doc["spec"]["resources"]["limits"][resource]
    else:
        doc["spec"]["resources"]["limits"][resource] = limit
    found = problems_of(write_yaml(tmp_path / "c.yaml", catalog_doc(), doc))
    assert any(p.field == field and words in p.message for p in found), found


def test_two_gpu_kinds_are_refused(tmp_path: Path) -> None:
    doc = gpu_doc("g")
    for section in ("requests", "limits"):
        doc["spec"]["resources"][section]["nvidia.com/gpu.shared"] = "1"
    found = problems_of(write_yaml(tmp_path / "c.yaml", catalog_doc(), doc))
    assert any(p.field == "spec.resources" and "one kind of GPU" in p.message for p in found), found


@pytest.mark.parametrize(
    ("allow", "image", "ok"),
    [
        pytest.param(False, IMAGE, True, id="digest"),
        pytest.param(
            False, f"quay.io/jupyter/base-notebook:2026-01-01@sha256:{DIGEST}", True, id="tag-and-digest"
        ),
        pytest.param(False, "quay.io/jupyter/base-notebook:2026-01-01", False, id="tag-refused"),
        pytest.param(False, "quay.io/jupyter/base-notebook", False, id="bare-refused"),
        pytest.param(False, "quay.io/jupyter/base-notebook@sha256:abc", False, id="short-digest"),
        pytest.param(True, "quay.io/jupyter/base-notebook:2026-01-01", True, id="tag-allowed"),
        pytest.param(True, "localhost:5000/team/img", True, id="registry-port-allowed"),
        pytest.param(True, IMAGE, True, id="digest-still-fine"),
    ],
)
def test_digest_rule_and_allow_image_tags(tmp_path: Path, allow: bool, image: str, ok: bool) -> None:
    file = write_yaml(tmp_path / "c.yaml", catalog_doc(allowImageTags=allow), profile_doc("p", image=image))
    if ok:
        catalog = load_catalog(file)
        assert catalog.allow_image_tags is allow and catalog.profiles[0].image == image
    else:
        assert [p.field for p in problems_of(file)] == ["spec.image"]


def test_all_errors_are_collected_at_once(tmp_path: Path) -> None:
    write_yaml(
        tmp_path / "a.yaml", catalog_doc(), with_path(profile_doc("one"), "spec.placement.gpuMode", "fast")
    )
    write_yaml(tmp_path / "b.yaml", with_path(profile_doc("two"), "spec.resources.limits.memory", "lots"))
    (tmp_path / "c.yaml").write_text("kind: WorkspaceProfile\nspec: [unclosed\n")
    bad_three = with_path(profile_doc("three"), "spec.session.idleTimeout", "soon")
    write_yaml(tmp_path / "d.yaml", with_path(bad_three, "spec.colour", "red"))
    found = problems_of(tmp_path)
    assert [p.file for p in found] == [
        str(tmp_path / n) for n in ("a.yaml", "b.yaml", "c.yaml", "d.yaml", "d.yaml")
    ]
    assert {p.profile for p in found} == {"one", "two", None, "three"}
    c_problem = next(p for p in found if p.file.endswith("c.yaml"))
    assert "line 3" in c_problem.message and "not valid YAML" in c_problem.message


def test_duplicate_slugs_across_files_name_both(tmp_path: Path) -> None:
    write_yaml(tmp_path / "a.yaml", catalog_doc(), profile_doc("cpu"))
    write_yaml(tmp_path / "b.yaml", profile_doc("cpu"))
    (problem,) = problems_of(tmp_path)
    assert (
        problem.file == str(tmp_path / "b.yaml")
        and problem.profile == "cpu"
        and problem.field == "metadata.name"
    )
    assert str(tmp_path / "a.yaml") in problem.message


def test_two_defaults_and_two_catalog_documents(tmp_path: Path) -> None:
    write_yaml(tmp_path / "a.yaml", catalog_doc(), profile_doc("one", default=True))
    write_yaml(tmp_path / "b.yaml", catalog_doc(), profile_doc("two", default=True))
    found = problems_of(tmp_path)
    assert {(p.file, p.field) for p in found} == {
        (str(tmp_path / "b.yaml"), "kind"),
        (str(tmp_path / "b.yaml"), "spec.default"),
    }
    assert any("'one'" in p.message for p in found)


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        pytest.param({"nodePools": {}}, "spec.version", "required", id="version-missing"),
        pytest.param({"version": 1.5}, "spec.version", "quote it", id="version-not-string"),
        pytest.param(
            {"version": "1", "allowImageTags": "yes"}, "spec.allowImageTags", "boolean", id="tags-not-bool"
        ),
        pytest.param(
            {"version": "1", "nodePools": {"GPU": {}}}, "spec.nodePools", "does not match", id="pool-name"
        ),
        pytest.param(
            {"version": "1", "nodePools": {"gpu": {"taints": []}}},
            "spec.nodePools.gpu.taints",
            "unknown field",
            id="pool-unknown-field",
        ),
        pytest.param(
            {"version": "1", "nodePools": {"gpu": {"nodeSelector": {"pool": True}}}},
            "spec.nodePools.gpu.nodeSelector.pool",
            "label value",
            id="selector-bool",
        ),
        pytest.param(
            {"version": "1", "nodePools": {"gpu": {"tolerations": [{"operator": "Maybe"}]}}},
            "spec.nodePools.gpu.tolerations[0].operator",
            "is not one of",
            id="toleration-operator",
        ),
        pytest.param({"version": "1", "extra": 1}, "spec.extra", "unknown field", id="catalog-unknown-field"),
    ],
)
def test_catalog_document_errors(tmp_path: Path, spec: dict[str, Any], field: str, words: str) -> None:
    doc = catalog_doc()
    doc["spec"] = spec
    found = problems_of(write_yaml(tmp_path / "c.yaml", doc, profile_doc("p", placement={"gpuMode": "none"})))
    assert any(p.field == field and words in p.message and p.profile is None for p in found), found


@pytest.mark.parametrize(
    ("text", "words"),
    [
        pytest.param("a: [1\n", "line 2", id="unclosed"),
        pytest.param("a: 1\na: 2\n", "duplicate key 'a'", id="duplicate-key"),
        pytest.param("- just\n- a list\n", "not a mapping", id="not-a-mapping"),
        pytest.param("a: !!binary aGk=\n", "bytes", id="binary"),
        pytest.param("1: one\n", "not a string", id="int-key"),
        pytest.param("a: &x [*x]\n", "recursive", id="recursive-alias"),
        pytest.param("\ufffd: \x00\n", "not valid YAML", id="control-character"),
    ],
)
def test_yaml_level_errors(tmp_path: Path, text: str, words: str) -> None:
    (tmp_path / "bad.yaml").write_text(text)
    write_yaml(tmp_path / "good.yaml", profile_doc("p", placement={"gpuMode": "none"}))
    found = problems_of(tmp_path)
    assert any(p.file == str(tmp_path / "bad.yaml") and words in p.message for p in found), found


def test_alias_bomb_is_refused(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    found = problems_of(tmp_path / "bomb.yaml")
    assert any("more than" in p.message for p in found), found


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        pytest.param("missing", "No such file", id="missing-path"),
        pytest.param("empty-dir", "no *.yaml", id="empty-directory"),
        pytest.param("empty-file", "no WorkspaceProfile", id="no-profiles"),
        pytest.param("catalog-only", "no WorkspaceProfile", id="catalog-without-profiles"),
        pytest.param("huge", "larger than 1024 KiB", id="huge-file"),
        pytest.param("latin1", "not UTF-8", id="not-utf8"),
    ],
)
def test_file_level_errors(tmp_path: Path, setup: str, words: str) -> None:
    path = tmp_path / "catalog"
    if setup == "empty-dir":
        path.mkdir()
    elif setup == "empty-file":
        path.write_text("# nothing yet\n---\n")
    elif setup == "catalog-only":
        write_yaml(path, catalog_doc())
    elif setup == "huge":
        path.write_text("# " + "x" * MAX_FILE_BYTES + "\n")
    elif setup == "latin1":
        path.write_bytes("displayName: caf\xe9\n".encode("latin-1"))
    found = problems_of(path)
    assert any(words in p.message and p.file == str(path) for p in found), found


def test_error_text_format(tmp_path: Path) -> None:
    file = write_yaml(
        tmp_path / "gpu.yaml", catalog_doc(), with_path(gpu_doc("gpu-full"), "spec.placement.gpuMode", "fast")
    )
    with pytest.raises(CatalogError) as caught:
        load_catalog(file)
    text = str(caught.value)
    assert text.splitlines()[0] == "invalid workspace catalog: 1 problem"
    assert text.splitlines()[1].strip() == (
        f"{file}: profile \"gpu-full\": spec.placement.gpuMode: 'fast' is not one of "
        "['exclusive', 'mig', 'time-sliced', 'none']"
    )
    assert str(CatalogProblem("f.yaml", None, "", "broken")) == "f.yaml: broken"


def test_dates_and_dotted_versions_stay_text(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(
        "apiVersion: gpuworkspace.dev/v1alpha1\nkind: WorkspaceCatalog\nmetadata: {name: c}\n"
        "spec: {version: 2026-12-01, nodePools: {cpu: {}}}\n"
    )
    write_yaml(tmp_path / "p.yaml", profile_doc("p"))
    assert load_catalog(tmp_path).version == "2026-12-01"
