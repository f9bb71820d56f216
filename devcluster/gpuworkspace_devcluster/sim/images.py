"""The simulated node's image store: which images "exist" and what running one means on this host.

Pure. Processes are not isolated, so an image only decides defaults (entrypoint, command, working dir,
home, env) and how the command maps to a host executable:

- single-user images (repository ending in ``/base-notebook``, ``/minimal-notebook``, ``/scipy-notebook``,
  ``/datascience-notebook``, ``/pytorch-notebook``, ``/k8s-singleuser-sample`` or ``jupyterhub/singleuser``)
  run ``jupyterhub-singleuser`` from this interpreter's bin directory. docker-stacks' ``start-notebook.py``
  runs ``jupyterhub-singleuser`` when ``JUPYTERHUB_API_TOKEN`` is set, else ``jupyter-server`` (JupyterLab
  is not installed here; the real image runs ``jupyter lab``);
- ``python:*`` runs this interpreter for ``python``/``python3``;
- ``busybox``/``alpine``/``ubuntu``/``debian`` run ``/bin/sh`` (``/bin/bash``) for shell commands;
- ``gpuworkspace.dev/workspace-notebook:*`` is a notebook image built by the image contract
  (``docs/reference/image-contract.md``): base-notebook plus code-server and jupyter-vscode-proxy. It runs
  like the single-user images, with ``sim/standin-bin`` in front of ``PATH``: jupyter-vscode-proxy (installed
  here) finds its ``code-server``, the stand-in of ``sim/codeserver.py`` (code-server cannot be installed);
  it also has ``papermill`` (the image contract's notebook-job tool: a JobProfile's notebook runs
  ``papermill in.ipynb out.ipynb``), run from this interpreter's bin directory; the docker-stacks images
  have no papermill, so a notebook job on one fails like a real one (``executable file not found``);
- ``gpuworkspace.dev/lite-singleuser:*`` runs ``python -m ...sim.lite_server`` for ``jupyterhub-singleuser``:
  one small process answering like the single-user server, for scale tests (the kubelet serves these
  launches as listeners in one shared process per node, ``sim/lite_pool.py``);
- ``quay.io/jupyterhub/jupyterhub`` (and ``docker.io/jupyterhub/jupyterhub``) is JupyterHub's own image
  (jupyterhub/jupyterhub ``Dockerfile``: ``WORKDIR /srv/jupyterhub``, ``CMD ["jupyterhub"]``): ``jupyterhub``
  runs the installed JupyterHub through ``sim/hubrun.py``, which reads the config file the pod mounts (or
  ``jupyterhub_config.py`` in the working dir, as the real one does) and binds all-interfaces addresses to
  the pod IP; the image has no configurable-http-proxy, like a z2jh hub pod whose proxy runs elsewhere
  (``ConfigurableHTTPProxy.should_start = False``);
- anything else does not exist: pulling it fails like a registry's "not found".

Jupyter servers are told to bind the pod IP (``--ip``, ``JUPYTERHUB_SERVICE_URL``'s host; KubeSpawner
sends ``http://0.0.0.0:8888/...``, and every pod binding 0.0.0.0:8888 would collide on one host), and get
``--allow-root`` when the kubelet runs as root (the real images run as ``jovyan``).
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

NOTEBOOK_REPOS = (
    "/base-notebook",
    "/minimal-notebook",
    "/scipy-notebook",
    "/datascience-notebook",
    "/pytorch-notebook",
    "/k8s-singleuser-sample",
)
LITE_REPO = "gpuworkspace.dev/lite-singleuser"
WORKSPACE_REPO = "gpuworkspace.dev/workspace-notebook"  # declares code-server: the stand-in is on its PATH
WORKSPACE_TOOLS = ("papermill",)  # what the image contract adds for notebook jobs (image-contract.md)
STANDIN_BIN = posixpath.join(posixpath.dirname(__file__), "standin-bin")
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # podlaunch.DEFAULT_PATH
LITE_MODULE = "gpuworkspace_devcluster.sim.lite_server"
# KubeVirt's launcher runs the simulated guest (sim/guest.py), which boots from the root disk's directory.
LAUNCHER_REPO = "quay.io/kubevirt/virt-launcher"
GUEST_MODULE = "gpuworkspace_devcluster.sim.guest"
HUB_REPOS = ("quay.io/jupyterhub/jupyterhub", "docker.io/jupyterhub/jupyterhub")
HUB_MODULE = "gpuworkspace_devcluster.sim.hubrun"
# configurable-http-proxy, which JupyterHub's image installs with npm: this checkout's (scripts/bootstrap.sh)
NODE_BIN = posixpath.normpath(
    posixpath.join(posixpath.dirname(__file__), "..", "..", "..", "node_modules", ".bin")
)
SHELL_IMAGES = {"busybox": 2_167_176, "alpine": 3_653_482, "ubuntu": 29_754_422, "debian": 48_492_154}
_NOTEBOOK_ENV = {
    "NB_USER": "jovyan",
    "NB_UID": "1000",
    "NB_GID": "100",
    "SHELL": "/bin/bash",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "LANGUAGE": "C.UTF-8",
    "JUPYTER_PORT": "8888",
}
_SERVER_EXES = ("jupyterhub-singleuser", "jupyter-server", "jupyter-lab", "jupyter-notebook")
_START_SCRIPTS = ("start-notebook.py", "start-notebook.sh", "start-singleuser.py", "start-singleuser.sh")
_IP_FLAGS = ("--ip", "--ServerApp.ip", "--NotebookApp.ip")
_ROOT_FLAGS = (
    "--notebook-dir",
    "--ServerApp.root_dir",
    "--ServerApp.notebook_dir",
    "--NotebookApp.notebook_dir",
)


@dataclass(frozen=True)
class Image:
    """A known image: its normalized reference and the defaults a container of it starts with."""

    kind: str  # notebook | lite | python | shell | launcher | hub
    ref: str  # docker.io/library/python:3.11
    size: int  # bytes, for the Pulled event
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    workdir: str = "/"
    home: str = "/root"
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def image_id(self) -> str:
        """What containerd reports as imageID: ``repo@sha256:<digest>`` (a stable fake digest)."""
        repo = self.ref.rsplit("@", 1)[0]
        if ":" in repo.rsplit("/", 1)[-1]:
            repo = repo.rsplit(":", 1)[0]
        return f"{repo}@sha256:{hashlib.sha256(self.ref.encode()).hexdigest()}"


def normalize(image: str) -> tuple[str, str]:
    """``python:3.11`` → (``docker.io/library/python``, ``3.11``) as containerd names it; tag may be ``@sha…``."""
    name, _, digest = image.partition("@")
    tag = ""
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = name.rsplit(":", 1)
    first = name.split("/", 1)[0]
    if "/" not in name or not ("." in first or ":" in first or first == "localhost"):
        name = f"docker.io/{name}" if "/" in name else f"docker.io/library/{name}"
    if digest:
        return name, "@" + digest
    return name, tag or "latest"


def lookup(image: str) -> Image | None:
    """The known image for a container's ``image`` field, or None (the registry says not found)."""
    repo, tag = normalize(image)
    ref = repo + (tag if tag.startswith("@") else f":{tag}")
    path = repo.split("/", 1)[1]
    if repo.endswith(NOTEBOOK_REPOS) or path == "jupyterhub/singleuser" or repo == WORKSPACE_REPO:
        start = "start-notebook.py" if "notebook" in path else "jupyterhub-singleuser"
        env = _NOTEBOOK_ENV
        if repo == WORKSPACE_REPO:
            env = {**_NOTEBOOK_ENV, "PATH": f"{STANDIN_BIN}:{IMAGE_PATH}"}
        return Image(
            "notebook",
            ref,
            1_073_741_824 if "scipy" in path or "data" in path or "pytorch" in path else 297_530_368,
            ("tini", "-g", "--"),
            (start,),
            "/home/jovyan",
            "/home/jovyan",
            env,
        )
    if repo == LAUNCHER_REPO:
        return Image("launcher", ref, 412_090_368, (), ("/usr/bin/virt-launcher-monitor",))
    if repo in HUB_REPOS:
        env = {"LANG": "C.UTF-8", "PATH": f"{NODE_BIN}:{IMAGE_PATH}"}
        return Image("hub", ref, 281_018_368, (), ("jupyterhub",), "/srv/jupyterhub", "/root", env)
    if repo == LITE_REPO:
        return Image("lite", ref, 12_582_912, (), ("jupyterhub-singleuser",), "/home/jovyan", "/home/jovyan")
    if path == "library/python":
        return Image("python", ref, 1_019_215_872, (), ("python3",), env={"LANG": "C.UTF-8"})
    if path.startswith("library/") and path[8:] in SHELL_IMAGES:
        shell = "sh" if path[8:] in ("busybox", "alpine") else "bash"
        return Image("shell", ref, SHELL_IMAGES[path[8:]], (), (shell,))
    return None


def pull_error(image: str) -> str:
    """containerd's message for an image the registry does not have."""
    repo, tag = normalize(image)
    ref = repo + (tag if tag.startswith("@") else f":{tag}")
    return (
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": '
        f'failed to resolve reference "{ref}": {ref}: not found'
    )


def container_argv(image: Image, command: Sequence[str], args: Sequence[str]) -> list[str]:
    """The argv Kubernetes runs: command overrides ENTRYPOINT (and drops CMD), args override CMD."""
    if command:
        return [*command, *args]
    return [*image.entrypoint, *(args or image.cmd)]


@dataclass(frozen=True)
class HostCommand:
    exe: list[str]  # the host executable (and interpreter options)
    args: list[str]
    server: bool  # a Jupyter server: bound to the pod IP, root dir mapped

    @property
    def argv(self) -> list[str]:
        return [*self.exe, *self.args]


def host_command(
    image: Image,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    python: str,
    bin_dir: str,
    exists: Callable[[str], bool],
) -> HostCommand:
    """Map the container argv onto host executables (tini is dropped: the kubelet reaps its children)."""
    argv = _drop_tini(list(argv))
    if image.kind == "launcher":  # the pod's own virt-launcher-monitor command means "boot the guest"
        return HostCommand([python, "-m", GUEST_MODULE], [], False)
    if not argv:
        return HostCommand([], [], False)
    exe, rest = posixpath.basename(argv[0]), argv[1:]
    if exe in _START_SCRIPTS:
        hub = "singleuser" in exe or bool(env.get("JUPYTERHUB_API_TOKEN"))
        exe = "jupyterhub-singleuser" if hub else "jupyter-server"
    if exe == "jupyter" and rest[:1] and rest[0] in ("lab", "server", "notebook"):
        exe, rest = "jupyter-server", rest[1:]
    if exe == "jupyterhub" and image.kind == "hub":
        return HostCommand([python, "-m", HUB_MODULE], rest, False)
    if exe in _SERVER_EXES:
        if image.kind == "lite":
            return HostCommand([python, "-m", LITE_MODULE], rest, True)
        name = exe if exe in ("jupyterhub-singleuser", "jupyter-server") else "jupyter-server"
        return HostCommand([posixpath.join(bin_dir, name)], rest, True)
    provided = _provided(image, exe, python=python, bin_dir=bin_dir, exists=exists)
    if provided is not None:
        return HostCommand(provided, rest, False)
    if argv[0].startswith("/") and not exists(argv[0]):
        return HostCommand([exe], rest, False)  # not on this host: look it up on PATH
    return HostCommand([argv[0]], rest, False)


def _provided(
    image: Image, exe: str, *, python: str, bin_dir: str, exists: Callable[[str], bool]
) -> list[str] | None:
    """The host executable of a tool the image provides (interpreters, shells, the job tools), or None."""
    if exe in WORKSPACE_TOOLS and image.ref.startswith((f"{WORKSPACE_REPO}@", f"{WORKSPACE_REPO}:")):
        return [posixpath.join(bin_dir, exe)]
    if exe == "python" or (exe.startswith("python") and exe[6:].replace(".", "").isdigit()):
        return [python]
    if exe == "pip" or exe.startswith("pip3"):
        return [python, "-m", "pip"]
    if exe in ("sh", "ash", "bash"):
        return ["/bin/bash" if exe == "bash" and exists("/bin/bash") else "/bin/sh"]
    return None


def _drop_tini(argv: list[str]) -> list[str]:
    if argv and posixpath.basename(argv[0]) == "tini":
        argv = argv[argv.index("--") + 1 :] if "--" in argv else argv[1:]
    return argv


def server_args(
    argv: Sequence[str], pod_ip: str, to_host: Callable[[str], str], default_root: str, *, as_root: bool
) -> list[str]:
    """A Jupyter server's arguments: bound to the pod IP, root dir flags mapped to host dirs, ``--allow-root``."""
    out: list[str] = []
    has_ip = has_root = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, value = arg.partition("=")
        takes_next = not eq and flag in (*_IP_FLAGS, *_ROOT_FLAGS) and i + 1 < len(argv)
        if takes_next:
            value, i = argv[i + 1], i + 1
        if flag in _IP_FLAGS:
            has_ip, arg = True, f"{flag}={pod_ip}"
        elif flag in _ROOT_FLAGS:
            has_root, arg = True, f"{flag}={to_host(value)}"
        out.append(arg)
        i += 1
    extra = [] if has_ip else [f"--ip={pod_ip}"]
    if not has_root:
        extra.append(f"--ServerApp.root_dir={default_root}")
    if as_root and "--allow-root" not in out:
        extra.append("--allow-root")
    return extra + out


def rebind_service_url(url: str, pod_ip: str) -> str:
    """``JUPYTERHUB_SERVICE_URL`` with its host replaced by the pod IP (the port and prefix kept)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit((parts.scheme or "http", f"{pod_ip}{port}", parts.path, parts.query, parts.fragment))
