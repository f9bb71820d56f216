"""What a container start means on this host: argv, environment and working dir. Pure.

The environment is the image's (``PATH``, ``HOME``, ``LANG``…) under the container's own (``env``,
``envFrom``), plus ``HOSTNAME`` = pod name, ``GPUWORKSPACE_MOUNTS`` (JSON container path → host dir) and
``GPUWORKSPACE_ROOT`` (the container's root dir on the host). ``PATH`` gets this interpreter's bin dir in
front; a KubeVirt launcher's guest, JupyterHub's image and the Jupyter server of a single-user image get
``PYTHONPATH`` = this package's root.
Jupyter servers are bound to the pod IP (see ``images.server_args``); ``$(VAR)`` references in command and
args are expanded as Kubernetes does.

With ``HostInfo.namespaces`` (the kubelet runs as root) the process runs in a mount namespace of its own
(``sim/mountns.py``): the argv is the launcher's, which binds the volumes at their mountPaths, and the
working dir, ``HOME`` and Jupyter root dirs stay the container's own paths. Without it (and always for the
KubeVirt launcher, whose guest writes its disks by host path, and for lite servers, which share one
process per node), ``HOME`` and the working dir are translated through the mount table, so a PVC mounted at
``/home/jovyan`` is the process's home and cwd.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import images, mountns
from .podenv import expand_all
from .podvolumes import MountTable

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The simulated guest (``python -m ...sim.guest``) is this copy of the package, not whichever one the
# interpreter would import: a devcluster run from a checkout boots that checkout's guest. The images
# also have the spawner installed (its labextension, jupyter-scheduler backend, the hub's spawner): from
# a checkout, the repository root that holds this distribution's folder (devcluster/) holds it too.
PACKAGE_ROOTS = (str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[3]))


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]
    cwd: Path  # in the container's view when ``namespaced``, else on the host
    server: bool
    namespaced: bool = False  # argv is the launcher's: the process has its own mount namespace


@dataclass(frozen=True)
class HostInfo:
    python: str  # the interpreter that runs python:* and the lite server
    bin_dir: str  # where jupyterhub-singleuser and jupyter-server live
    as_root: bool
    exists: Callable[[str], bool]
    namespaces: bool = False  # containers get mount namespaces (sim/nslaunch.py)


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
    namespaced = host.namespaces and image.kind not in ("launcher", "lite")
    to_host: Callable[[str], Path] = Path if namespaced else mounts.to_host
    cwd = to_host(container.get("workingDir") or image.workdir)
    home = env["HOME"]
    env.update(
        HOME=str(to_host(home)),
        PATH=f"{host.bin_dir}:{env['PATH']}",
        GPUWORKSPACE_MOUNTS=mounts.as_env(),
        GPUWORKSPACE_ROOT=str(mounts.root),
    )
    args = cmd.args
    # the workspace image has this package installed (its jupyter-scheduler backend, the scheduler
    # extra), as the hub image has: a devcluster started from a checkout runs that checkout's code
    if image.kind in ("launcher", "hub") or (image.kind == "notebook" and cmd.server):
        env["PYTHONPATH"] = ":".join(filter(None, [*PACKAGE_ROOTS, env.get("PYTHONPATH")]))
    if image.kind == "launcher":
        env["POD_IP"] = pod_ip
        args = [*args, f"--ip={pod_ip}"]
    if image.kind == "hub":
        env["GPUWORKSPACE_POD_IP"] = pod_ip  # sim/hubrun.py binds all-interfaces addresses to it
    if cmd.server:
        if env.get("JUPYTERHUB_SERVICE_URL"):
            env["JUPYTERHUB_SERVICE_URL"] = images.rebind_service_url(env["JUPYTERHUB_SERVICE_URL"], pod_ip)
        root = cwd
        if env.get("JUPYTERHUB_ROOT_DIR"):
            root = to_host(env["JUPYTERHUB_ROOT_DIR"].replace("~", image.home, 1))
            env["JUPYTERHUB_ROOT_DIR"] = str(root)
        args = images.server_args(args, pod_ip, lambda p: str(to_host(p)), str(root), as_root=host.as_root)
    if not namespaced:
        return LaunchPlan([*cmd.exe, *args], env, cwd, cmd.server)
    env[mountns.SPEC_ENV] = json.dumps(mountns.spec(mounts, str(cwd), [home]))
    return LaunchPlan(mountns.launcher_argv(host.python, [*cmd.exe, *args]), env, cwd, cmd.server, True)
