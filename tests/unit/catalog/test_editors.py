"""Editors: the image declares what it contains, the profile offers within it, the catalog refuses the rest."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuworkspace_spawner.catalog import CatalogError, build_profile_list, load_catalog
from gpuworkspace_spawner.catalog.model import Catalog

from .conftest import IMAGE, catalog_doc, profile_doc, write_yaml
from .test_vm_profiles import vm_doc

REPO = Path(__file__).resolve().parents[3]
BOTH = {"reference": IMAGE, "editors": ["jupyterlab", "code-server"]}


def _refused(tmp_path: Path, *docs: dict[str, Any]) -> str:
    path = write_yaml(tmp_path / "profiles.yaml", catalog_doc(), *docs)
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    return str(caught.value).replace(str(path), "profiles.yaml")


def test_code_server_with_an_image_that_does_not_declare_it_is_refused(tmp_path: Path) -> None:
    doc = profile_doc("cpu", ide={"default": "jupyterlab", "choices": ["jupyterlab", "code-server"]})
    assert _refused(tmp_path, doc) == (
        "invalid workspace catalog: 1 problem\n"
        "  profiles.yaml: profile \"cpu\": spec.ide.choices[1]: offers 'code-server', but the image does not "
        "declare it (spec.image.editors: [jupyterlab]); an image that contains code-server and "
        "jupyter-server-proxy (jupyter-vscode-proxy) may declare it (see docs/reference/image-contract.md), "
        "else remove 'code-server' here"
    )


def test_the_short_ide_form_and_an_explicit_editors_list_are_checked_too(tmp_path: Path) -> None:
    lab_only = {"reference": IMAGE, "editors": ["jupyterlab"]}
    text = _refused(
        tmp_path,
        profile_doc("short", ide="code-server"),
        profile_doc("declared", image=lab_only, ide="code-server"),
        profile_doc("code-only", image={"reference": IMAGE, "editors": ["code-server"]}, ide="jupyterlab"),
    )
    assert text.startswith("invalid workspace catalog: 3 problems\n")
    assert "profile \"short\": spec.ide: offers 'code-server'" in text
    assert "profile \"declared\": spec.ide: offers 'code-server', but the image does not declare it " in text
    assert "profile \"code-only\": spec.ide: offers 'jupyterlab', but the image does not declare it " in text
    assert (
        "(spec.image.editors: [code-server]); an image that contains jupyterhub-singleuser and JupyterLab"
        in text
    )


def test_a_vm_declares_its_editors_next_to_its_golden_image(tmp_path: Path) -> None:
    text = _refused(tmp_path, vm_doc("vm", ide={"choices": ["jupyterlab", "code-server"]}))
    assert (
        "profile \"vm\": spec.ide.choices[1]: offers 'code-server', but the image does not declare it "
        "(spec.vm.dataSource.editors: [jupyterlab])"
    ) in text
    doc = vm_doc("vm", ide={"choices": ["jupyterlab", "code-server"]})
    doc["spec"]["vm"]["dataSource"]["editors"] = ["jupyterlab", "code-server"]
    (profile,) = load_catalog(write_yaml(tmp_path / "ok.yaml", catalog_doc(), doc)).profiles
    assert profile.editors == ("code-server", "jupyterlab")
    assert profile.ide.choices == ("jupyterlab", "code-server") and profile.ide.default == "code-server"


def test_without_ide_a_profile_offers_what_its_image_declares(tmp_path: Path) -> None:
    docs = [
        profile_doc("short"),
        profile_doc("both", image=BOTH),
        profile_doc("default-only", image=BOTH, ide={"default": "jupyterlab"}),
    ]
    catalog = load_catalog(write_yaml(tmp_path / "c.yaml", catalog_doc(), *docs))
    got = {p.slug: (p.image, p.editors, p.ide.choices, p.ide.default) for p in catalog.profiles}
    assert got == {
        "short": (IMAGE, ("jupyterlab",), ("jupyterlab",), "jupyterlab"),
        "both": (IMAGE, ("code-server", "jupyterlab"), ("code-server", "jupyterlab"), "code-server"),
        "default-only": (IMAGE, ("code-server", "jupyterlab"), ("code-server", "jupyterlab"), "jupyterlab"),
    }
    forms = {e["slug"]: e.get("profile_options", {}) for e in build_profile_list(catalog, "x", [])}
    assert forms["short"] == {} and list(forms["both"]["ide"]["choices"]) == ["code-server", "jupyterlab"]


@pytest.mark.parametrize(
    ("image", "field", "words"),
    [
        pytest.param(
            {"reference": IMAGE}, "spec.image.editors", "required field is missing", id="no-editors"
        ),
        pytest.param({"editors": ["jupyterlab"]}, "spec.image.reference", "required", id="no-reference"),
        pytest.param(
            {"reference": IMAGE, "editors": ["vim"]},
            "spec.image.editors[0]",
            "'vim' is not an editor",
            id="vim",
        ),
        pytest.param({"reference": IMAGE, "editors": []}, "spec.image.editors", "non-empty", id="empty"),
        pytest.param(
            {"reference": "quay.io/jupyter/base-notebook:latest", "editors": ["jupyterlab"]},
            "spec.image.reference",
            "must be pinned by digest",
            id="tag",
        ),
        pytest.param(
            {"reference": IMAGE, "editors": ["jupyterlab"], "ports": [8080]},
            "spec.image.ports",
            "unknown field",
            id="unknown-field",
        ),
        pytest.param("has space", "spec.image", "is not an image reference", id="short-form"),
    ],
)
def test_image_section_errors_name_the_field(tmp_path: Path, image: object, field: str, words: str) -> None:
    path = write_yaml(tmp_path / "c.yaml", catalog_doc(), profile_doc("p", image=image, ide="jupyterlab"))
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    found = [(p.profile, p.field, p.message) for p in caught.value.problems]
    assert any(f == ("p", field, m) for f in found for m in [f[2]] if words in m), found


def _catalog_texts() -> dict[str, dict[str, str]]:
    """Every catalog the project ships, as files: the demo, the Helm ConfigMaps, the e2e stack's (demo + extra)."""
    demo = {p.name: p.read_text() for p in (REPO / "hub_config" / "catalog").glob("*.yaml")}
    helm: dict[str, str] = {}
    for path in sorted((REPO / "helm-values" / "extra-manifests").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            labels = ((doc or {}).get("metadata") or {}).get("labels") or {}
            if doc.get("kind") == "ConfigMap" and labels.get("gpuworkspace.dev/catalog") == "true":
                helm.update(doc["data"])
    extra = (REPO / "tests" / "e2e" / "catalog-extra.yaml").read_text()
    return {"hub_config": demo, "helm": helm, "e2e": {**demo, "zz-e2e-extra.yaml": extra}}


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Catalog]:
    catalogs = {}
    for name, texts in _catalog_texts().items():
        where = tmp_path_factory.mktemp(name)
        for file, text in texts.items():
            (where / file).write_text(text)
        catalogs[name] = load_catalog(where)
    return catalogs


def test_every_shipped_catalog_loads_and_offers_only_declared_editors(shipped: dict[str, Catalog]) -> None:
    for name, catalog in shipped.items():
        offered = {p.slug: set(p.ide.choices) - set(p.editors) for p in catalog.profiles}
        assert {slug: extra for slug, extra in offered.items() if extra} == {}, name
    helm = {p.slug: p for p in shipped["helm"].profiles}
    assert helm["vm-workstation"].ide.choices == ("jupyterlab", "code-server")
    assert all(p.ide.choices == ("jupyterlab",) for p in helm.values() if p.runtime == "container")


def test_a_shipped_catalog_that_offered_code_server_with_base_notebook_would_be_refused(
    tmp_path: Path,
) -> None:
    cpu = (REPO / "hub_config" / "catalog" / "cpu.yaml").read_text()
    assert "ide: jupyterlab\n" in cpu
    shutil.copytree(REPO / "hub_config" / "catalog", tmp_path / "c")
    (tmp_path / "c" / "cpu.yaml").write_text(
        cpu.replace(
            "ide: jupyterlab\n", "ide: {default: jupyterlab, choices: [jupyterlab, code-server]}\n", 1
        )
    )
    with pytest.raises(CatalogError) as caught:
        load_catalog(tmp_path / "c")
    ((file, profile, field),) = [(Path(p.file).name, p.profile, p.field) for p in caught.value.problems]
    assert (file, profile, field) == ("cpu.yaml", "cpu-small", "spec.ide.choices[1]")
