"""What a container start means on this host: argv, environment and working dir. Pure.

The environment is the image's (``PATH``, ``HOME``, ``LANG``…) under the container's own (``env``,
``envFrom``), plus ``HOSTNAME`` = pod name, ``GPUWORKSPACE_MOUNTS`` (JSON container path → host dir) and
``GPUWORKSPACE_ROOT`` (the container's root dir on the host). ``HOME`` and the working dir are translated
through the mount table, so a PVC mounted at ``/home/jovyan`` is the process's home and cwd. ``PATH`` gets
this interpreter's bin dir in front; a KubeVirt launcher's guest gets ``PYTHONPATH`` = this package's
root. Jupyter servers are bound to the pod IP and rooted in the mapped dir
(see ``images.server_args``); ``$(VAR)`` references in command and args are expanded as Kubernetes does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import images
from .podenv import expand_all
from .podvolumes import MountTable

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The simulated guest (``python -m ...sim.guest``) is this copy of the package, not whichever one the
# interpreter would import: a devcluster run from a checkout boots that checkout's guest.
PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    server: bool


@dataclass(frozen=True)
class HostInfo:
    python: str  # the interpreter that runs python:* and the lite server
    bin_dir: str  # where jupyterhub-singleuser and jupyter-server live
    as_root: bool
    exists: Callable[[str], bool]


def plan(
    pod: dict[str, Any],
    container: dict[str, Any],
    image: images.Image,
    own_env: Mapping[str, str],
    mounts: MountTable,
    pod_ip: str,
    host: HostInfo,
) -> LaunchPlan:
    env: dict[str, str] = {"PATH": DEFAULT_PATH, "HOSTNAME": pod["metadata"]["name"], "HOME": image.home}
    env.update(image.env)
    env.update(own_env)
    argv = images.container_argv(
        image, expand_all(container.get("command") or [], env), expand_all(container.get("args") or [], env)
    )
    cmd = images.host_command(image, argv, env, python=host.python, bin_dir=host.bin_dir, exists=host.exists)
    cwd = mounts.to_host(container.get("workingDir") or image.workdir)
    env.update(
        HOME=str(mounts.to_host(env["HOME"])),
        PATH=f"{host.bin_dir}:{env['PATH']}",
        GPUWORKSPACE_MOUNTS=mounts.as_env(),
        GPUWORKSPACE_ROOT=str(mounts.root),
    )
    args = cmd.args
    if image.kind == "launcher":
        env["POD_IP"] = pod_ip
        env["PYTHONPATH"] = ":".join(filter(None, [PACKAGE_ROOT, env.get("PYTHONPATH")]))
        args = [*args, f"--ip={pod_ip}"]
    if cmd.server:
        if env.get("JUPYTERHUB_SERVICE_URL"):
            env["JUPYTERHUB_SERVICE_URL"] = images.rebind_service_url(env["JUPYTERHUB_SERVICE_URL"], pod_ip)
        root = cwd
        if env.get("JUPYTERHUB_ROOT_DIR"):
            root = mounts.to_host(env["JUPYTERHUB_ROOT_DIR"].replace("~", image.home, 1))
            env["JUPYTERHUB_ROOT_DIR"] = str(root)
        args = images.server_args(
            args, pod_ip, lambda p: str(mounts.to_host(p)), str(root), as_root=host.as_root
        )
    return LaunchPlan([*cmd.exe, *args], env, cwd, cmd.server)
