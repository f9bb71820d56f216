"""$GPUWS_EDITORS: the editors a profile's image declares, in every workspace's environment (JupyterLab's
launcher shows "Open VS Code" only where it names code-server: labextension/editors.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuworkspace_spawner.labextension.editors import PAGE_OPTION, declared_editors, page_options
from gpuworkspace_spawner.manifests.conventions import editors_env, workspace_env
from gpuworkspace_spawner.manifests.vm import build_cloud_init_secret
from tests.unit.manifests.test_vm import ENV, VM_WORKSTATION, _guest_env, vm_context


@pytest.mark.parametrize(
    ("editors", "value"),
    [
        pytest.param(("jupyterlab",), "jupyterlab", id="jupyterlab-only"),
        pytest.param(("code-server", "jupyterlab"), "code-server,jupyterlab", id="both"),
    ],
)
def test_the_environment_names_the_declared_editors(editors: tuple[str, ...], value: str) -> None:
    assert editors_env(editors) == {"GPUWS_EDITORS": value}  # type: ignore[arg-type]


def test_a_vm_with_code_server_tells_its_guest_through_the_cloud_init_secret() -> None:
    profile = replace(VM_WORKSTATION, editors=("code-server", "jupyterlab"))
    ws, names = vm_context(profile)
    env = {**ENV, **editors_env(profile.editors)}
    _entry, guest = _guest_env(build_cloud_init_secret(ws, names, env))
    assert guest["GPUWS_EDITORS"] == "code-server,jupyterlab"
    assert declared_editors(guest) == ("code-server", "jupyterlab")


def test_the_page_gets_the_editors_and_nothing_else() -> None:
    assert page_options({"GPUWS_EDITORS": "jupyterlab, code-server"}) == {
        PAGE_OPTION: "jupyterlab,code-server"
    }
    assert page_options({}) == {PAGE_OPTION: ""}  # no Open VS Code where the spawner said nothing
    hostile = {"GPUWS_EDITORS": "code-server,<script>,code-server,,JupyterLab"}
    assert declared_editors(hostile) == ("code-server",)


def test_the_spawners_environment_names_the_profile_its_editors_and_the_conventions() -> None:
    """What GPUWorkspaceSpawner.get_env adds (manifests.conventions.workspace_env), for a VM with code-server."""
    profile = replace(VM_WORKSTATION, editors=("code-server", "jupyterlab"))
    env = workspace_env(profile, catalog_version="2026.12.1", ide="code-server")
    assert env["GPUWORKSPACE_PROFILE"] == profile.slug and env["GPUWORKSPACE_IDE"] == "code-server"
    assert env["GPUWORKSPACE_CATALOG_VERSION"] == "2026.12.1"
    assert env["GPUWS_EDITORS"] == "code-server,jupyterlab"
    assert env["GPUWS_WORKSPACE"] == "/workspace"  # the conventions' variables too
