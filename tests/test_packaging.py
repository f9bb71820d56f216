"""The package installs, declares what it ships, and keeps its layering contracts."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DIST = "gpuworkspace-spawner"


def _lint_imports() -> str:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports is not installed next to this Python: run `make venv`")
    return exe


def test_package_imports_and_has_a_version() -> None:
    import gpuworkspace_spawner

    assert gpuworkspace_spawner.__version__ == importlib.metadata.version(DIST)
    assert (Path(gpuworkspace_spawner.__file__).parent / "py.typed").is_file()


@pytest.mark.parametrize("name", ["manifests", "lifecycle", "catalog", "k8s"])
def test_layer_packages_exist(name: str) -> None:
    module = importlib.import_module(f"gpuworkspace_spawner.{name}")
    assert module.__doc__


def test_console_script_is_declared() -> None:
    scripts = {
        ep.name: ep.value
        for ep in importlib.metadata.distribution(DIST).entry_points
        if ep.group == "console_scripts"
    }
    assert scripts["gpuworkspace-devcluster"] == "gpuworkspace_spawner.devcluster.cli:main"
    assert scripts["gpuworkspace-reclaimer"] == "gpuworkspace_spawner.services.reclaimer:main"


def test_spawner_entry_point_and_public_surface() -> None:
    """`c.JupyterHub.spawner_class = "gpuworkspace"` works, and the façade exports exactly this."""
    import gpuworkspace_spawner
    from gpuworkspace_spawner.spawner import GPUWorkspaceSpawner

    (ep,) = [
        e for e in importlib.metadata.entry_points(group="jupyterhub.spawners") if e.name == "gpuworkspace"
    ]
    assert ep.load() is GPUWorkspaceSpawner
    assert sorted(gpuworkspace_spawner.__all__) == ["GPUWorkspaceSpawner", "load_catalog_or_exit"]
    assert gpuworkspace_spawner.GPUWorkspaceSpawner is GPUWorkspaceSpawner
    ours = {
        "catalog_path",
        "retention_days",
        "unschedulable_timeout",
        "attach_failure_timeout",
        "audit_events",
        "self_healing",
        "heal_backoff",
        "heal_window",
        "heal_max_restarts",
    }
    for name in ours:  # every option is documented where JupyterHub users look: --help-all and the docs
        assert GPUWorkspaceSpawner.class_traits()[name].help.strip()


def test_metadata() -> None:
    meta = importlib.metadata.metadata(DIST)
    assert meta["Requires-Python"] == ">=3.11"
    assert {"devcluster", "test", "docs", "lint"} <= set(meta.get_all("Provides-Extra") or [])
    requires = " ".join(importlib.metadata.requires(DIST) or [])
    assert "jupyterhub-kubespawner" in requires
    assert "jupyterhub<7,>=5.3" in requires or "jupyterhub>=5.3,<7" in requires


def test_license_is_bsd_3_clause() -> None:
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License\n")
    assert "Copyright (c) 2026, gpuworkspace-spawner contributors" in text
    assert "3. Neither the name of the copyright holder nor the names of its" in text
    meta = importlib.metadata.metadata(DIST)
    assert "BSD-3-Clause" in (meta.get("License-Expression") or meta.get("License") or "")


def test_pyproject_holds_only_the_build_system() -> None:
    import tomllib

    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert set(data) == {"build-system"}


def test_import_contracts_are_kept() -> None:
    result = subprocess.run(
        [_lint_imports(), "--no-cache"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def _write(root: Path, relpath: str, source: str = "") -> None:
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source) or '"""Module."""\n')


def test_import_contracts_catch_violations(tmp_path: Path) -> None:
    """The same contracts, run over a small copy of the package that breaks each of them."""
    pkg = "gpuworkspace_spawner"
    for sub in ("manifests", "lifecycle", "catalog", "jobs", "k8s", "devcluster", "services"):
        _write(tmp_path, f"{pkg}/{sub}/__init__.py")
    _write(tmp_path, f"{pkg}/__init__.py", "from gpuworkspace_spawner.devcluster import tool\n")
    _write(tmp_path, f"{pkg}/devcluster/tool.py", "import kubernetes_asyncio\nimport tornado\n")
    _write(
        tmp_path, f"{pkg}/services/culler/__init__.py", "from gpuworkspace_spawner.devcluster import tool\n"
    )
    for core in ("model", "state", "precedence"):
        _write(tmp_path, f"{pkg}/services/culler/{core}.py")
    _write(tmp_path, f"{pkg}/services/culler/policy.py", "import tornado.httpclient\n")
    _write(tmp_path, f"{pkg}/manifests/pod.py", "from gpuworkspace_spawner.services import culler\n")
    _write(tmp_path, f"{pkg}/catalog/loading.py", "import tornado.web\n")
    _write(tmp_path, f"{pkg}/lifecycle/fencing.py", "from gpuworkspace_spawner import k8s\n")
    _write(tmp_path, f"{pkg}/jobs/manifests.py", "import kubernetes_asyncio\n")
    _write(tmp_path, f"{pkg}/k8s/client.py", "import gpuworkspace_spawner.spawner\n")
    _write(tmp_path, f"{pkg}/spawner.py", "import kubernetes_asyncio\n")
    _write(tmp_path, f"{pkg}/vmruntime.py", "")
    for core in ("model", "parsing", "rules", "aggregate", "history", "views", "access", "charts"):
        _write(tmp_path, f"{pkg}/services/attribution/{core}.py")
    _write(tmp_path, f"{pkg}/services/attribution/__init__.py")
    _write(tmp_path, f"{pkg}/services/attribution/rules.py", "import tornado.ioloop\n")
    _write(tmp_path, f"{pkg}/agent/__init__.py", "from gpuworkspace_spawner.k8s import client\n")
    _write(tmp_path, f"{pkg}/services/disks/__init__.py")
    _write(tmp_path, f"{pkg}/services/disks/owndisks.py", "import tornado.web\n")
    _write(tmp_path, f"{pkg}/scheduler/__init__.py")
    _write(tmp_path, f"{pkg}/scheduler/mapping.py", "import tornado.escape\n")
    _write(tmp_path, f"{pkg}/scheduler/backend.py", "from gpuworkspace_spawner.k8s import client\n")
    _write(
        tmp_path, f"{pkg}/services/jobs/__init__.py", "from gpuworkspace_spawner.scheduler import mapping\n"
    )
    _write(tmp_path, f"{pkg}/labextension/__init__.py")
    _write(tmp_path, f"{pkg}/labextension/figures.py", "import jupyter_server\n")
    _write(tmp_path, f"{pkg}/labextension/handlers.py", "from gpuworkspace_spawner.k8s import client\n")
    _write(
        tmp_path, f"{pkg}/services/disks/page.py", "from gpuworkspace_spawner.labextension import figures\n"
    )

    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [_lint_imports(), "--no-cache", "--config", str(REPO / "setup.cfg")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = " ".join(result.stdout.split())  # the report wraps long lines
    assert result.returncode == 1, result.stdout + result.stderr
    assert "0 kept, 14 broken" in out, out
    for expected in (
        # forbidden: indirect, through services
        "gpuworkspace_spawner.manifests.pod -> gpuworkspace_spawner.services.culler",
        # protected: the root package's own __init__
        "gpuworkspace_spawner -> gpuworkspace_spawner.devcluster.tool",
        "gpuworkspace_spawner.catalog is not allowed to import tornado",
        "gpuworkspace_spawner.lifecycle is not allowed to import gpuworkspace_spawner.k8s",
        "gpuworkspace_spawner.jobs is not allowed to import kubernetes_asyncio",
        "gpuworkspace_spawner.k8s is not allowed to import gpuworkspace_spawner.spawner",
        "gpuworkspace_spawner.services.attribution.rules is not allowed to import tornado",
        "gpuworkspace_spawner.agent is not allowed to import gpuworkspace_spawner.k8s",
        "gpuworkspace_spawner.services.culler.policy is not allowed to import tornado",
        "gpuworkspace_spawner.services.disks.owndisks is not allowed to import tornado",
        "gpuworkspace_spawner.scheduler.mapping is not allowed to import tornado",
        "gpuworkspace_spawner.scheduler is not allowed to import gpuworkspace_spawner.k8s",
        "gpuworkspace_spawner.services.jobs -> gpuworkspace_spawner.scheduler.mapping",
        "gpuworkspace_spawner.labextension.figures is not allowed to import jupyter_server",
        "gpuworkspace_spawner.labextension is not allowed to import gpuworkspace_spawner.k8s",
        "gpuworkspace_spawner.services.disks.page -> gpuworkspace_spawner.labextension.figures",
    ):
        assert expected in out, f"{expected!r} not reported:\n{result.stdout}"
