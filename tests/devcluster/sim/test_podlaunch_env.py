"""Which simulated containers run this checkout's package: the Jupyter server of a single-user image does
(a workspace image built with the package's scheduler extra has the notebook-jobs backend), a job's
papermill in the same image does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuworkspace_devcluster.sim import images, podlaunch
from gpuworkspace_devcluster.sim.podvolumes import MountTable

IMAGE = "quay.io/jupyter/base-notebook@sha256:" + "0" * 64
HOST = podlaunch.HostInfo(
    python="/usr/bin/python3", bin_dir="/venv/bin", as_root=False, exists=lambda p: True
)


@pytest.mark.parametrize(
    ("container", "env", "gets_package"),
    [
        pytest.param({"name": "notebook"}, {"JUPYTERHUB_API_TOKEN": "t"}, True, id="single-user-server"),
        pytest.param(
            {"name": "job", "command": ["papermill", "a.ipynb", "/outputs/a.ipynb"]},
            {},
            False,
            id="job-papermill",
        ),
    ],
)
def test_the_single_user_server_runs_this_checkouts_package(
    tmp_path: Path, container: dict[str, object], env: dict[str, str], gets_package: bool
) -> None:
    image = images.lookup(IMAGE)
    assert image is not None
    pod = {"metadata": {"name": "p"}}
    launch = podlaunch.plan(pod, container, image, env, MountTable(root=tmp_path), "127.10.0.2", HOST)
    paths = launch.env.get("PYTHONPATH", "").split(":")
    for root in podlaunch.PACKAGE_ROOTS:
        assert (root in paths) is gets_package


def test_the_package_roots_are_this_checkouts_devcluster_and_spawner() -> None:
    """From a checkout, both distributions' code comes from it: devcluster/ and the repository root."""
    devcluster_root, checkout_root = (Path(p) for p in podlaunch.PACKAGE_ROOTS)
    assert (devcluster_root / "gpuworkspace_devcluster" / "sim" / "guest.py").is_file()
    assert (checkout_root / "gpuworkspace_spawner" / "spawner.py").is_file()
