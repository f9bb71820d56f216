"""The simulated guest OS of a KubeVirt VM: what a virt-launcher pod's ``compute`` container runs.

``python -m gpuworkspace_devcluster.sim.guest [--ip IP] [ignored virt-launcher args...]``

The kubelet runs this for images ``quay.io/kubevirt/virt-launcher:*`` (see ``sim/virtlauncher.py``) with:

- ``GPUWORKSPACE_MOUNTS``: JSON, container mountPath -> host directory, for every volumeMount;
- ``GUEST_ROOT_DISK``: the mountPath of the boot disk's PVC (``/var/run/kubevirt-private/vmi-disks/<vol>``).
  Its host directory *is* the guest's ``/``: guest path ``/etc/x`` is ``<root>/etc/x``, so ``/etc``,
  ``/opt``, ``/usr/local``, ``/var`` and ``/home`` live on the disk and survive stop/start;
- ``GUEST_CLOUD_INIT``: the mountPath of the ``cloudInitNoCloud.secretRef`` secret (key ``userdata``, or
  ``userData``), or ``GUEST_USERDATA``: inline ``userData``; ``GUEST_VMI``: the VMI name (the hostname);
- ``POD_IP`` or ``--ip IP`` (``--ServerApp.ip=IP``): the address the server binds (default 127.0.0.1).

Boot (the documented cloud-init subset; user data is ``#cloud-config`` YAML, or a ``#!`` script run by
``sh``): ``/etc/hostname`` is set; ``write_files`` entries (``path``, ``content``, ``encoding``
``text``/``b64``/``base64``/``gz+b64``, ``permissions`` like ``'0600'``, ``append``, ``defer``) are written
under the root; then ``bootcmd`` and ``runcmd`` entries run (a string via ``sh -c``, a list as argv) on the
host with cwd = the root and ``GUEST_ROOT`` = its host path -- so they must use relative paths or
``$GUEST_ROOT``. Unlike real cloud-init, write_files and runcmd run on *every* boot (real: once per instance),
so a new API token in the secret takes effect on the next start. Other keys are ignored. Everything is
logged to ``/var/log/cloud-init-output.log`` (under the root) and stdout.

Then the single-user "service" starts, as a systemd unit in the golden image would: its environment is the
container's plus ``/etc/gpuworkspace/singleuser.env`` (``KEY=VALUE`` lines, ``#`` comments, optional quotes
and ``export``); ``SINGLEUSER_COMMAND`` there is the command line (default ``jupyterhub-singleuser`` when
``JUPYTERHUB_API_TOKEN`` is set, else ``jupyter-server``; executables are looked up in this interpreter's
bin dir first), run with ``--ServerApp.root_dir=<root>`` (or ``SINGLEUSER_ROOT_DIR``, a guest path),
``--ServerApp.ip=<pod IP> --ServerApp.port=8888`` (``SINGLEUSER_PORT``) and ``--allow-root`` when running
as root. ``HOME`` (a guest path, default ``/root``) and ``JUPYTERHUB_SERVICE_URL``'s host are mapped to the
root / pod IP. SIGTERM (the pod's deletion) stops the server and exits 0 -- a clean guest shutdown; if the
server exits by itself the guest "powers off" with its exit code.

The golden image follows the image contract (``docs/reference/image-contract.md``) for both editors: its
Jupyter server proxies ``/vscode/`` to code-server on the guest's loopback port 8080 with
jupyter-server-proxy (started on first use), so code-server is only reachable through the single-user
server's hub authentication; the VM exposes 8888 alone. Here code-server is the stand-in of
``sim/codeserver.py`` (``standin-bin/`` is put in front of ``PATH``), and, because every simulated guest
shares the host's loopback, the guest's port 8080 is a free host port chosen at boot (``CODE_SERVER_PORT``
is what the real image uses). The image's config is written to a private directory named by
``JUPYTER_CONFIG_PATH``, not onto the root disk.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

import yaml

ENV_FILE = "/etc/gpuworkspace/singleuser.env"
OUTPUT_LOG = "/var/log/cloud-init-output.log"
PORT = 8888
CLOUD_INIT = "Cloud-init v. 24.1.3-0ubuntu3.3"
STOP_TIMEOUT_S = 20.0
CODE_SERVER_PORT = 8080  # the golden image's code-server, on the guest's loopback only
STANDIN_BIN = Path(__file__).with_name("standin-bin")
_T0 = time.monotonic()


def host_dir(container_path: str, mounts: dict[str, str]) -> Path | None:
    """The host directory behind a container path (the longest mount prefix wins)."""
    path = container_path.rstrip("/") or "/"
    for mount in sorted(mounts, key=len, reverse=True):
        base = mount.rstrip("/") or "/"
        if path == base or path.startswith(base.rstrip("/") + "/"):
            return Path(mounts[mount]) / path[len(base) :].lstrip("/")
    return None


class Guest:
    def __init__(self, root: Path, log: IO[str]) -> None:
        self.root, self.log = root, log

    def path(self, guest_path: str) -> Path | None:
        """A guest path on the host; None if it would escape the root."""
        target = (self.root / guest_path.lstrip("/")).resolve()
        return target if target == self.root.resolve() or self.root.resolve() in target.parents else None

    def say(self, message: str) -> None:
        for stream in (self.log, sys.stdout):
            stream.write(message + "\n")
            stream.flush()

    def write_files(self, entries: list[dict[str, Any]]) -> None:
        for entry in entries:
            target = self.path(str(entry.get("path", "")))
            if target is None or not entry.get("path"):
                self.say(f"write_files: skipping invalid path {entry.get('path')!r}")
                continue
            content = entry.get("content", "")
            data = content.encode() if isinstance(content, str) else bytes(content or b"")
            encoding = str(entry.get("encoding", "text")).lower()
            if encoding in ("b64", "base64", "gz+b64", "gzip+base64", "gz+base64", "gzip+b64"):
                data = base64.b64decode(data)
            if encoding.startswith(("gz", "gzip")):
                data = gzip.decompress(data)
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("ab" if entry.get("append") else "wb") as f:
                f.write(data)
            target.chmod(int(str(entry.get("permissions", "0644")), 8))

    def run(self, commands: list[Any], env: dict[str, str], stage: str) -> None:
        for command in commands:
            argv = ["sh", "-c", command] if isinstance(command, str) else [str(a) for a in command]
            try:
                done = subprocess.run(
                    argv,
                    cwd=self.root,
                    env=env,
                    stdout=self.log,
                    stderr=subprocess.STDOUT,
                    timeout=600,
                    check=False,
                )
                if done.returncode:
                    self.say(f"{stage}: {shlex.join(argv)} exited with {done.returncode}")
            except (OSError, subprocess.TimeoutExpired) as exc:
                self.say(f"{stage}: {shlex.join(argv)} failed: {exc}")


def read_userdata(mounts: dict[str, str]) -> str:
    if os.environ.get("GUEST_CLOUD_INIT"):
        secret = host_dir(os.environ["GUEST_CLOUD_INIT"], mounts)
        for key in ("userdata", "userData"):
            if secret is not None and (secret / key).is_file():
                return (secret / key).read_text()
    return os.environ.get("GUEST_USERDATA", "")


def parse_env_file(text: str) -> dict[str, str]:
    out = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        parts = shlex.split(value, comments=False) if value.strip() else [""]
        out[key.strip()] = " ".join(parts)
    return out


def server_argv(env: dict[str, str], root_dir: Path, ip: str, bin_dir: Path) -> list[str]:
    command = shlex.split(env.get("SINGLEUSER_COMMAND", ""))
    if not command:
        command = ["jupyterhub-singleuser" if env.get("JUPYTERHUB_API_TOKEN") else "jupyter-server"]
    if os.sep not in command[0] and (bin_dir / command[0]).exists():
        command[0] = str(bin_dir / command[0])
    port = env.get("SINGLEUSER_PORT", str(PORT))
    args = [f"--ServerApp.root_dir={root_dir}", f"--ServerApp.ip={ip}", f"--ServerApp.port={port}"]
    args.append("--ServerApp.open_browser=False")
    return [*command, *args, *(["--allow-root"] if os.geteuid() == 0 else [])]


def boot(guest: Guest, mounts: dict[str, str]) -> dict[str, str]:
    """cloud-init's part of the boot; returns the service environment."""
    stamp = datetime.now(UTC).strftime("%a, %d %b %Y %H:%M:%S +0000")
    guest.say(f"{CLOUD_INIT} running 'init' at {stamp}. Up {time.monotonic() - _T0:.2f} seconds.")
    text = read_userdata(mounts)
    config: dict[str, Any] = {}
    if text.lstrip().startswith("#cloud-config"):
        loaded = yaml.safe_load(text)
        config = loaded if isinstance(loaded, dict) else {}
    hostname = os.environ.get("GUEST_VMI") or os.environ.get("HOSTNAME", "")
    etc = guest.path("/etc")
    if hostname and etc is not None:
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hostname").write_text(hostname + "\n")
    files = [e for e in config.get("write_files") or [] if isinstance(e, dict)]
    guest.write_files([e for e in files if not e.get("defer")])
    env = {**os.environ, "GUEST_ROOT": str(guest.root)}
    guest.run(list(config.get("bootcmd") or []), env, "bootcmd")
    if text.lstrip().startswith("#!"):
        guest.run([["sh", "-c", text]], env, "user-script")
    guest.run(list(config.get("runcmd") or []), env, "runcmd")
    guest.write_files([e for e in files if e.get("defer")])
    env_file = guest.path(ENV_FILE)
    if env_file is not None and env_file.is_file():
        file_env = parse_env_file(env_file.read_text())
        env.update(file_env)
        env["GUEST_HOME"] = file_env.get("HOME", "/root")  # a guest path; HOME itself is mapped below
    stamp = datetime.now(UTC).strftime("%a, %d %b %Y %H:%M:%S +0000")
    uptime = time.monotonic() - _T0
    guest.say(
        f"{CLOUD_INIT} finished at {stamp}. Datasource DataSourceNoCloud [seed=/dev/vdb].  Up {uptime:.2f} seconds"
    )
    return env


def service_env(guest: Guest, env: dict[str, str], ip: str) -> tuple[dict[str, str], Path, Path]:
    """The server's environment, home directory and Jupyter root (guest paths mapped under the root)."""
    home = guest.path(env.get("GUEST_HOME", "/root")) or guest.root
    home.mkdir(parents=True, exist_ok=True)
    root_dir = guest.path(env["SINGLEUSER_ROOT_DIR"]) if env.get("SINGLEUSER_ROOT_DIR") else guest.root
    out = {**env, "HOME": str(home)}
    if env.get("JUPYTERHUB_SERVICE_URL"):
        url = urlsplit(env["JUPYTERHUB_SERVICE_URL"])
        out["JUPYTERHUB_SERVICE_URL"] = urlunsplit(url._replace(netloc=f"{ip}:{url.port or PORT}"))
    return out, home, root_dir or guest.root


def code_server_config(port: int) -> dict[str, Any]:
    """The golden image's Jupyter server config for code-server (the image contract's, with ``port``)."""
    command = ["code-server", "--bind-addr", "127.0.0.1:{port}", "--auth", "none", "--disable-telemetry"]
    server = {"command": command, "port": port, "timeout": 60, "launcher_entry": {"title": "VS Code"}}
    return {"ServerProxy": {"servers": {"vscode": server}}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def with_code_server(env: dict[str, str], config_dir: Path, port: int) -> dict[str, str]:
    """The service environment with the golden image's code-server wiring (see the module docstring)."""
    (config_dir / "jupyter_server_config.json").write_text(json.dumps(code_server_config(port), indent=1))
    paths = [str(config_dir), *filter(None, [env.get("JUPYTER_CONFIG_PATH")])]
    return {
        **env,
        "JUPYTER_CONFIG_PATH": os.pathsep.join(paths),
        "PATH": os.pathsep.join([str(STANDIN_BIN), env.get("PATH", os.defpath)]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="guest", add_help=False, allow_abbrev=False)
    parser.add_argument("--ip", "--ServerApp.ip", dest="ip", default=os.environ.get("POD_IP", "127.0.0.1"))
    args, _ignored = parser.parse_known_args(argv)
    mounts = json.loads(os.environ.get("GPUWORKSPACE_MOUNTS") or "{}")
    root = (
        host_dir(os.environ.get("GUEST_ROOT_DISK", ""), mounts) if os.environ.get("GUEST_ROOT_DISK") else None
    )
    if root is None or not root.is_dir():
        print(f"guest: no root disk (GUEST_ROOT_DISK={os.environ.get('GUEST_ROOT_DISK')!r})", file=sys.stderr)
        return 1
    log_path = root / OUTPUT_LOG.lstrip("/")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a") as log:
        guest = Guest(root, log)
        env, home, root_dir = service_env(guest, boot(guest, mounts), args.ip)
        config_dir = Path(tempfile.mkdtemp(prefix="guest-jupyter-"))
        port = free_port()
        env = with_code_server(env, config_dir, port)
        guest.say(f"code-server: guest port {CODE_SERVER_PORT} is host port {port}, proxied at /vscode/")
        command = server_argv(env, root_dir, args.ip, Path(sys.executable).parent)
        guest.say(f"starting single-user service: {shlex.join(command)}")
        server = subprocess.Popen(command, env=env, cwd=home)
        stopping: list[float] = []

        def stop(signum: int, frame: FrameType | None) -> None:
            if not stopping:
                guest.say(f"received signal {signum}: shutting down")
                stopping.append(time.monotonic())
                server.terminate()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        while server.poll() is None:
            if stopping and time.monotonic() - stopping[0] > STOP_TIMEOUT_S:
                server.kill()
            time.sleep(0.1)
        shutil.rmtree(config_dir, ignore_errors=True)
        guest.say(f"single-user service exited with {server.returncode}; powering off")
        return 0 if stopping else server.returncode


if __name__ == "__main__":
    sys.exit(main())
