"""resolve_user_options: a decision table over what arrives from the form or the REST API."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuworkspace_spawner.catalog import OptionsError, Selection, load_catalog, resolve_user_options
from gpuworkspace_spawner.catalog.model import Catalog

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def sample() -> Catalog:
    return load_catalog(REPO / "hub_config" / "catalog")


@pytest.mark.parametrize(
    ("options", "groups", "profile", "ide"),
    [
        pytest.param({}, [], "cpu-small", "jupyterlab", id="empty-gives-default"),
        pytest.param(None, [], "cpu-small", "jupyterlab", id="none-gives-default"),
        pytest.param({"profile": ""}, [], "cpu-small", "jupyterlab", id="empty-profile"),
        pytest.param({"profile": "gpu-mig"}, [], "gpu-mig", "jupyterlab", id="profile-default-ide"),
        pytest.param(
            {"profile": "vm-workstation", "ide": "code-server"},
            [],
            "vm-workstation",
            "code-server",
            id="ide-choice",
        ),
        pytest.param(
            {"profile": ["vm-workstation"], "ide": ["code-server"]},
            [],
            "vm-workstation",
            "code-server",
            id="form-lists",
        ),
        pytest.param(
            {"profile": "gpu-exclusive"}, ["gpu-users"], "gpu-exclusive", "jupyterlab", id="group-access"
        ),
        pytest.param({"ide": "jupyterlab"}, [], "cpu-small", "jupyterlab", id="ide-on-default-profile"),
    ],
)
def test_accepted(sample: Catalog, options: object, groups: list[str], profile: str, ide: str) -> None:
    selection = resolve_user_options(sample, options, user="alice", groups=groups)
    assert isinstance(selection, Selection)
    assert (selection.profile.slug, selection.ide) == (profile, ide)


@pytest.mark.parametrize(
    ("options", "reason", "words"),
    [
        pytest.param(["gpu-mig"], "malformed-options", "named values", id="not-a-dict"),
        pytest.param({"profile": 3}, "malformed-options", "'profile' must be a text value", id="non-string"),
        pytest.param({"profile": ["a", "b"]}, "malformed-options", "text value", id="two-values"),
        pytest.param(
            {"image": "evil:latest"},
            "malformed-options",
            "Unknown server option: image. Known options: profile, ide",
            id="unknown-key",
        ),
        pytest.param({"profile": "x" * 300}, "malformed-options", "too long", id="oversized-value"),
        pytest.param({f"k{i}": "v" for i in range(17)}, "malformed-options", "Too many", id="too-many-keys"),
        pytest.param({1: "v"}, "malformed-options", "names must be short text", id="non-string-key"),
        pytest.param(
            {"profile": "gpu-huge"},
            "unknown-profile",
            "cpu-small, cpu-team, gpu-shared, gpu-mig",
            id="unknown-profile",
        ),
        pytest.param(
            {"profile": "gpu-exclusive"},
            "unknown-profile",  # refused like a profile that does not exist
            "There is no profile 'gpu-exclusive' you may use",
            id="forbidden",
        ),
        pytest.param(
            {"profile": "vm-workstation", "ide": "vim"},
            "unknown-option",
            "Choose one of: jupyterlab, code-server",
            id="unknown-ide",
        ),
        pytest.param(  # its image (base-notebook, the short form) declares JupyterLab only
            {"profile": "gpu-mig", "ide": "code-server"},
            "unknown-option",
            "The editor 'code-server' is not available in the profile 'gpu-mig'. Choose one of: jupyterlab",
            id="editor-the-image-lacks",
        ),
    ],
)
def test_refused(sample: Catalog, options: object, reason: str, words: str) -> None:
    with pytest.raises(OptionsError) as caught:
        resolve_user_options(sample, options, user="alice", groups=[])
    assert caught.value.reason == reason
    assert words in caught.value.message and str(caught.value) == caught.value.message


def test_forbidden_does_not_reveal_access_rules(sample: Catalog) -> None:
    with pytest.raises(OptionsError) as caught:
        resolve_user_options(sample, {"profile": "gpu-exclusive"}, user="alice", groups=[])
    assert "gpu-users" not in caught.value.message
    assert "cpu-small, cpu-team, gpu-shared, gpu-mig" in caught.value.message


def test_no_accessible_profile(tmp_path: Path) -> None:
    from .conftest import catalog_doc, profile_doc, write_yaml

    catalog = load_catalog(
        write_yaml(tmp_path / "c.yaml", catalog_doc(), profile_doc("p", access={"users": ["root-admin"]}))
    )
    with pytest.raises(OptionsError) as caught:
        resolve_user_options(catalog, {}, user="alice", groups=[])
    assert caught.value.reason == "forbidden-profile"
