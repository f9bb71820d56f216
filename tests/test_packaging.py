"""The package installs, declares what it ships, and keeps its layering contracts."""

from __future__ import annotations

import configparser
import email.parser
import importlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
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
    assert scripts["gpuworkspace-reclaimer"] == "gpuworkspace_spawner.services.reclaimer:main"


def test_devcluster_is_its_own_distribution_with_its_command() -> None:
    """`gpuworkspace-devcluster` comes with the devcluster's distribution (devcluster/), not the spawner's."""
    spawner, devcluster = configparser.ConfigParser(), configparser.ConfigParser()
    spawner.read(REPO / "setup.cfg")
    devcluster.read(REPO / "devcluster" / "setup.cfg")
    assert devcluster["metadata"]["name"] == "gpuworkspace-devcluster"
    assert (
        "gpuworkspace-devcluster = gpuworkspace_devcluster.cli:main"
        in devcluster["options.entry_points"]["console_scripts"]
    )
    assert "devcluster" not in spawner["options.entry_points"]["console_scripts"]
    assert "devcluster" not in spawner["options.extras_require"]


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
    assert {"test", "docs", "lint"} <= set(meta.get_all("Provides-Extra") or [])
    requires = " ".join(importlib.metadata.requires(DIST) or [])
    assert "jupyterhub-kubespawner" in requires
    assert "jupyterhub<7,>=5.3" in requires or "jupyterhub>=5.3,<7" in requires


def _build_wheel(tmp_path: Path, source: Path, files: list[str]) -> zipfile.ZipFile:
    """Build a wheel offline (this venv's setuptools and wheel) from a copy of ``files`` of ``source``, so
    the build leaves nothing in the checkout."""
    tree = tmp_path / "src"
    tree.mkdir()
    for name in files:
        if (source / name).is_dir():
            shutil.copytree(source / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(source / name, tree / name)  # follows devcluster/LICENSE's link
    argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    result = subprocess.run(
        [*argv, "--disable-pip-version-check", "-w", str(tmp_path / "dist"), str(tree)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    return zipfile.ZipFile(wheel)


def _metadata(wheel: zipfile.ZipFile, name: str) -> str:
    (path,) = [n for n in wheel.namelist() if n.endswith(f".dist-info/{name}")]
    return wheel.read(path).decode()


@pytest.mark.slow
def test_the_spawners_wheel_ships_no_devcluster(tmp_path: Path) -> None:
    """`pip install gpuworkspace-spawner` pulls no emulator code: no module, no command, no dependency."""
    wheel = _build_wheel(
        tmp_path, REPO, ["setup.cfg", "pyproject.toml", "README.md", "LICENSE", "gpuworkspace_spawner"]
    )
    names = wheel.namelist()
    assert "gpuworkspace_spawner/spawner.py" in names
    assert "gpuworkspace_spawner/py.typed" in names
    assert [n for n in names if "devcluster" in n.lower()] == []
    meta = email.parser.Parser().parsestr(_metadata(wheel, "METADATA"))
    requires = meta.get_all("Requires-Dist") or []
    assert any(r.startswith("jupyterhub-kubespawner") for r in requires)
    assert [r for r in requires if "devcluster" in r.lower()] == []
    assert "devcluster" not in (meta.get_all("Provides-Extra") or [])
    assert "devcluster" not in _metadata(wheel, "entry_points.txt")


@pytest.mark.slow
def test_the_devclusters_wheel_builds_with_its_data_and_command(tmp_path: Path) -> None:
    wheel = _build_wheel(
        tmp_path,
        REPO / "devcluster",
        ["setup.cfg", "pyproject.toml", "README.md", "LICENSE", "gpuworkspace_devcluster"],
    )
    names = wheel.namelist()
    for data in (
        "gpuworkspace_devcluster/cli.py",
        "gpuworkspace_devcluster/sim/topology.yaml",
        "gpuworkspace_devcluster/sim/standin-bin/code-server",
        "gpuworkspace_devcluster/k8sproto/k8s-api.binpb",
    ):
        assert data in names
    assert [n for n in names if n.startswith("gpuworkspace_spawner/")] == []
    assert "gpuworkspace-devcluster = gpuworkspace_devcluster.cli:main" in _metadata(
        wheel, "entry_points.txt"
    )
    meta = email.parser.Parser().parsestr(_metadata(wheel, "METADATA"))
    assert meta["Name"] == "gpuworkspace-devcluster"
    assert [r for r in meta.get_all("Requires-Dist") or [] if "spawner" in r] == []


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


@pytest.mark.parametrize("folder", [".", "devcluster"], ids=["spawner", "devcluster"])
def test_import_contracts_are_kept(folder: str) -> None:
    result = subprocess.run(
        [_lint_imports(), "--no-cache"],
        cwd=REPO / folder,
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
    for sub in ("manifests", "lifecycle", "catalog", "jobs", "k8s", "services"):
        _write(tmp_path, f"{pkg}/{sub}/__init__.py")
    _write(tmp_path, f"{pkg}/__init__.py", "from gpuworkspace_devcluster import tool\n")
    _write(tmp_path, "gpuworkspace_devcluster/__init__.py")
    _write(tmp_path, "gpuworkspace_devcluster/tool.py", "import kubernetes_asyncio\nimport tornado\n")
    _write(tmp_path, f"{pkg}/services/culler/__init__.py", "import gpuworkspace_devcluster.tool\n")
    for core in ("model", "state", "precedence"):
        _write(tmp_path, f"{pkg}/services/culler/{core}.py")
    _write(tmp_path, f"{pkg}/services/culler/policy.py", "import tornado.httpclient\n")
    _write(tmp_path, f"{pkg}/manifests/pod.py", "from gpuworkspace_spawner.services import culler\n")
    _write(tmp_path, f"{pkg}/catalog/loading.py", "import tornado.web\n")
    _write(tmp_path, f"{pkg}/lifecycle/fencing.py", "from gpuworkspace_spawner import k8s\n")
    _write(tmp_path, f"{pkg}/jobs/manifests.py", "import kubernetes_asyncio\n")
    _write(tmp_path, f"{pkg}/k8s/client.py", "import gpuworkspace_spawner.spawner\n")
    _write(tmp_path, f"{pkg}/spawner.py", "import kubernetes_asyncio\n")
    _write(tmp_path, f"{pkg}/spawnerports.py")
    _write(tmp_path, f"{pkg}/runtimes/__init__.py")
    _write(tmp_path, f"{pkg}/runtimes/vm.py", "from gpuworkspace_spawner import spawnerports\n")
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
    _write(tmp_path, f"{pkg}/services/reclaimer.py")
    _write(
        tmp_path,
        f"{pkg}/services/culler/web.py",
        "from gpuworkspace_spawner.services.disks import owndisks\n",
    )
    _write(tmp_path, f"{pkg}/services/access.py", "from jupyterhub.services.auth import check_scopes\n")
    for kit in ("serving", "hubenv", "kubelets", "lean_imports"):
        _write(tmp_path, f"{pkg}/services/{kit}.py")
    _write(tmp_path, f"{pkg}/services/handling.py", "from gpuworkspace_spawner.services.jobs import app\n")
    _write(tmp_path, f"{pkg}/services/jobs/app.py")
    _write(tmp_path, f"{pkg}/manifests/names.py")
    _write(tmp_path, f"{pkg}/catalog/model.py", "from gpuworkspace_spawner.manifests import names\n")
    _write(tmp_path, f"{pkg}/jobs/state.py", "from jupyterhub import orm\n")
    # allowed: k8s/ imports the client library; the catalog's command line renders network policies
    _write(tmp_path, f"{pkg}/k8s/gateway.py", "import kubernetes_asyncio\n")
    _write(tmp_path, f"{pkg}/manifests/networkpolicy.py")
    _write(
        tmp_path, f"{pkg}/catalog/__main__.py", "from gpuworkspace_spawner.manifests import networkpolicy\n"
    )
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
    assert "0 kept, 18 broken" in out, out
    for expected in (
        # the devcluster's distribution: from the root package's own __init__ and from a subpackage
        "gpuworkspace_spawner is not allowed to import gpuworkspace_devcluster",
        "gpuworkspace_spawner -> gpuworkspace_devcluster (l.1)",
        "gpuworkspace_spawner.services.culler -> gpuworkspace_devcluster (l.1)",
        "gpuworkspace_spawner.manifests.pod -> gpuworkspace_spawner.services.culler",
        "gpuworkspace_spawner.catalog is not allowed to import tornado",
        "gpuworkspace_spawner.lifecycle is not allowed to import gpuworkspace_spawner.k8s",
        "gpuworkspace_spawner.jobs is not allowed to import kubernetes_asyncio",
        "gpuworkspace_spawner.k8s is not allowed to import gpuworkspace_spawner.spawner",
        # a runtime borrows the spawner's ports through their protocol, never imports the spawner's side
        "gpuworkspace_spawner.runtimes is not allowed to import gpuworkspace_spawner.spawnerports",
        "gpuworkspace_spawner.services.attribution.rules is not allowed to import tornado",
        "gpuworkspace_spawner.agent is not allowed to import gpuworkspace_spawner.k8s",
        "gpuworkspace_spawner.services.culler.policy is not allowed to import tornado",
        "gpuworkspace_spawner.services.disks.owndisks is not allowed to import tornado",
        "gpuworkspace_spawner.scheduler.mapping is not allowed to import tornado",
        "gpuworkspace_spawner.scheduler is not allowed to import gpuworkspace_spawner.k8s",
        "gpuworkspace_spawner.services.jobs -> gpuworkspace_spawner.scheduler.mapping",
        # only k8s/ imports the client library
        "gpuworkspace_spawner.spawner -> kubernetes_asyncio",
        # the pure core's layers: catalog under manifests
        "gpuworkspace_spawner.catalog.model -> gpuworkspace_spawner.manifests.names",
        # services stand alone
        "gpuworkspace_spawner.services.culler.web -> gpuworkspace_spawner.services.disks.owndisks",
        # the kit sits below the services it serves
        "gpuworkspace_spawner.services.handling is not allowed to import gpuworkspace_spawner.services.jobs",
        "gpuworkspace_spawner.services.access is not allowed to import jupyterhub",
        "gpuworkspace_spawner.jobs is not allowed to import jupyterhub",
        "gpuworkspace_spawner.labextension.figures is not allowed to import jupyter_server",
        "gpuworkspace_spawner.labextension is not allowed to import gpuworkspace_spawner.k8s",
        "gpuworkspace_spawner.services.disks.page -> gpuworkspace_spawner.labextension.figures",
    ):
        assert expected in out, f"{expected!r} not reported:\n{result.stdout}"


def test_the_devclusters_contract_catches_an_import_of_the_spawner(tmp_path: Path) -> None:
    """devcluster/setup.cfg's contract: the emulator imports nothing of the spawner, indirectly neither."""
    _write(tmp_path, "gpuworkspace_spawner/__init__.py")
    _write(tmp_path, "gpuworkspace_spawner/manifests.py")
    _write(tmp_path, "gpuworkspace_devcluster/__init__.py")
    _write(tmp_path, "gpuworkspace_devcluster/sim/__init__.py")
    _write(tmp_path, "gpuworkspace_devcluster/sim/kubelet.py", "from ..store import x\n")
    _write(tmp_path, "gpuworkspace_devcluster/store.py", "from gpuworkspace_spawner import manifests\n")
    result = subprocess.run(
        [_lint_imports(), "--no-cache", "--config", str(REPO / "devcluster" / "setup.cfg")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = " ".join(result.stdout.split())
    assert result.returncode == 1, result.stdout + result.stderr
    assert "0 kept, 1 broken" in out, out
    assert "gpuworkspace_devcluster is not allowed to import gpuworkspace_spawner" in out, out
    assert "gpuworkspace_devcluster.store -> gpuworkspace_spawner" in out, out


def _mypy_targets() -> list[str]:
    """What `make lint` passes to mypy (the Makefile's MYPY_TARGETS)."""
    out = subprocess.run(
        ["make", "-s", "-p", "-C", str(REPO)], capture_output=True, text=True, check=False
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("MYPY_TARGETS"))
    return line.split("=", 1)[1].split()


def test_mypy_checks_the_whole_package_strictly(tmp_path: Path) -> None:
    """`make lint` runs mypy on every module of the package with --strict (setup.cfg), and it fires: a
    module of the package with an untyped function, or one subclassing an untyped class, is refused."""
    assert "gpuworkspace_spawner" in _mypy_targets()
    copy = tmp_path / "gpuworkspace_spawner"
    copy.mkdir()
    (copy / "__init__.py").write_text("")
    (copy / "probe.py").write_text(
        textwrap.dedent(
            """
            from kubespawner import KubeSpawner


            def untyped(x):
                return x


            class Spawner(KubeSpawner):
                pass
            """
        )
    )
    mypy = [sys.executable, "-m", "mypy", "--config-file", str(REPO / "setup.cfg"), "--no-incremental"]
    result = subprocess.run(
        [*mypy, "--no-pretty", str(copy)], check=False, cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "probe.py:5: error: Function is missing a type annotation" in result.stdout, result.stdout
    assert 'Class cannot subclass "KubeSpawner" (has type "Any")' in result.stdout, result.stdout
