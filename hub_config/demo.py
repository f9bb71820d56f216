"""The local demo: devcluster + mock OIDC provider + JupyterHub, in the foreground until Ctrl-C.

``make demo`` runs ``.venv/bin/python hub_config/demo.py``. In order, it starts

1. the devcluster (``gpuworkspace-devcluster up --state-dir .state/devcluster``): a simulated GPU
   cluster whose pods are real local processes; it waits for the kubeconfig and for the API to answer;
2. oidc-provider-mock on http://127.0.0.1:9480 with the users alice (group researchers), bob
   (researchers, gpu-users) and admin (a hub admin): its login page has one button per user;
3. JupyterHub with ``hub_config/jupyterhub_config.py`` (JupyterHub starts configurable-http-proxy).

Then it prints the URL to open. Ctrl-C stops the hub (and with it the running workspaces; their
disks persist under ``.state/devcluster/volumes``), the provider and the devcluster, in that order.
The devcluster's and the provider's output goes to ``.state/logs/``; the hub's to the terminal.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import importlib.util
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from typing import IO, Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BIN = Path(sys.executable).parent

USERS: tuple[dict[str, Any], ...] = (
    {"sub": "alice", "preferred_username": "alice", "email": "alice@example.org", "groups": ["researchers"]},
    {
        "sub": "bob",
        "preferred_username": "bob",
        "email": "bob@example.org",
        "groups": ["researchers", "gpu-users"],
    },
    {"sub": "admin", "preferred_username": "admin", "email": "admin@example.org", "groups": []},
)


class Failed(Exception):
    """A start-up step failed; the message says what to do."""


class Child:
    """A subprocess in its own process group, so that Ctrl-C reaches only the demo, which stops it."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path | None) -> None:
        self.name, self.log = name, log
        out: IO[bytes] | None = log.open("ab") if log else None
        try:
            self.popen = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT if out else None,
                start_new_session=True,
            )
        finally:
            if out:
                out.close()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout_s: float) -> None:
        if self.alive():
            print(f"demo: stopping {self.name}", flush=True)
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # whatever it left behind in its group
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)


def wait_for(check: Callable[[], bool], timeout_s: float, what: str, child: Child) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not child.alive():
            where = f"; see {child.log}" if child.log else ""
            raise Failed(f"{child.name} exited with status {child.popen.returncode}{where}")
        with contextlib.suppress(OSError, ValueError, KeyError):
            if check():
                return
        time.sleep(0.2)
    raise Failed(f"timed out after {timeout_s:.0f}s waiting for {what}")


def answers(url: str, context: ssl.SSLContext | None = None, headers: dict[str, str] | None = None) -> bool:
    """True when ``url`` answers 200 (an HTTP error status, such as the proxy's 404, is False)."""
    try:
        req = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(req, timeout=3, context=context) as resp:
            return bool(resp.status == HTTPStatus.OK)
    except urllib.error.HTTPError:
        return False


def port_free(port: int) -> bool:
    """True unless something listens on the port (connections in TIME_WAIT from a last run don't count)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def api_access(kubeconfig: Path) -> tuple[str, ssl.SSLContext | None, dict[str, str]]:
    """The devcluster API's base URL, TLS context and auth header, from its kubeconfig."""
    doc = yaml.safe_load(kubeconfig.read_text())
    cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
    context = None
    if "certificate-authority-data" in cluster:
        context = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
    headers = {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}
    return str(cluster["server"]).rstrip("/"), context, headers


def devcluster_answers(kubeconfig: Path) -> bool:
    """True once the kubeconfig is complete and GET /version answers through it."""
    server, context, headers = api_access(kubeconfig)
    return answers(server + "/version", context, headers)


KUEUE_QUEUES = REPO / "helm-values" / "extra-manifests" / "64-kueue-queues.yaml"
TEAM_DIRECTORY = REPO / "helm-values" / "extra-manifests" / "31-team-directory.yaml"
# apiVersion/kind -> the collection's path under the API server (no discovery: these are all we create)
COLLECTIONS = {
    "kueue.x-k8s.io/v1beta2/ResourceFlavor": "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
    "kueue.x-k8s.io/v1beta2/WorkloadPriorityClass": "/apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses",
    "kueue.x-k8s.io/v1beta2/ClusterQueue": "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
    "kueue.x-k8s.io/v1beta2/LocalQueue": "/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues",
    "v1/PersistentVolumeClaim": "/api/v1/namespaces/{namespace}/persistentvolumeclaims",
}


def create_objects(kubeconfig: Path, manifest: Path) -> list[str]:
    """Create a manifest's objects in the devcluster as ``kubectl create -f`` would (kubectl is not
    installed by ``make``); one that exists is kept. Returns ``Kind/name`` of each object created."""
    server, context, auth = api_access(kubeconfig)
    headers = {"Content-Type": "application/json", **auth}
    created = []
    for obj in (o for o in yaml.safe_load_all(manifest.read_text()) if o):
        where = f"{obj['apiVersion']}/{obj['kind']}"
        if where not in COLLECTIONS:
            raise Failed(f"{manifest.name}: the demo cannot create a {where} (only {', '.join(COLLECTIONS)})")
        url = server + COLLECTIONS[where].format(namespace=obj["metadata"].get("namespace", ""))
        request = urllib.request.Request(url, json.dumps(obj).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10, context=context):
                created.append(f"{obj['kind']}/{obj['metadata']['name']}")
        except urllib.error.HTTPError as exc:
            if exc.code != HTTPStatus.CONFLICT:
                raise Failed(
                    f"creating {obj['kind']} {obj['metadata']['name']}: {exc.code} {exc.read()[:300]!r}"
                ) from exc
    return created


def apply_kueue_queues(kubeconfig: Path, manifest: Path = KUEUE_QUEUES) -> list[str]:
    """The Helm values' Kueue objects (the job profiles' queue and priorities), created once."""
    return create_objects(kubeconfig, manifest)


def apply_team_directory(kubeconfig: Path, manifest: Path = TEAM_DIRECTORY) -> list[str]:
    """The Helm values' team directory claim (cpu-team's ~/team, where jobs write results), created once."""
    return create_objects(kubeconfig, manifest)


def choose_spawner(requested: str) -> str:
    if requested != "auto":
        return requested
    if os.environ.get("GPUWS_SPAWNER"):
        return os.environ["GPUWS_SPAWNER"]
    if importlib.util.find_spec("gpuworkspace_spawner.spawner") is not None:
        return "gpuworkspace"
    print("demo: gpuworkspace_spawner.spawner is not there yet; using plain KubeSpawner", flush=True)
    return "kubespawner"


def crypt_key(data_dir: Path) -> str:
    """JUPYTERHUB_CRYPT_KEY from the environment, else one kept in the hub's data directory."""
    if os.environ.get("JUPYTERHUB_CRYPT_KEY"):
        return os.environ["JUPYTERHUB_CRYPT_KEY"]
    path = data_dir / "crypt_key"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(secrets.token_hex(32))
    return path.read_text().strip()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="demo.py", description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--state-dir", type=Path, default=REPO / ".state" / "devcluster", help="devcluster state"
    )
    parser.add_argument(
        "--port", type=int, default=8000, help="the port to open in a browser (default: 8000)"
    )
    parser.add_argument("--hub-port", type=int, default=8081, help="the hub's own port (default: 8081)")
    parser.add_argument("--proxy-api-port", type=int, default=8001, help="the proxy's API (default: 8001)")
    parser.add_argument("--oidc-port", type=int, default=9480, help="the mock OIDC provider (default: 9480)")
    parser.add_argument(
        "--spawner",
        choices=("auto", "gpuworkspace", "kubespawner"),
        default="auto",
        help="auto: $GPUWS_SPAWNER, else gpuworkspace when it is installed, else kubespawner",
    )
    return parser.parse_args(argv)


def start(args: argparse.Namespace, children: list[Child]) -> str:
    """Start the three services in order; returns the URL to open."""
    state_dir: Path = args.state_dir.resolve()
    data_dir, log_dir = state_dir.parent / "hub", state_dir.parent / "logs"
    for path in (state_dir, data_dir, log_dir):
        path.mkdir(parents=True, exist_ok=True)
    ports = {
        "--port": args.port,
        "--hub-port": args.hub_port,
        "--proxy-api-port": args.proxy_api_port,
        "--oidc-port": args.oidc_port,
    }
    for option, port in ports.items():
        if not port_free(port):
            raise Failed(
                f"port {port} is in use: stop what holds it (`ss -ltnp 'sport = :{port}'`) or pass {option}"
            )
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1")

    kubeconfig = state_dir / "kubeconfig"
    kubeconfig.unlink(missing_ok=True)  # the devcluster writes it again once its API answers
    print(f"demo: starting the devcluster (log: {log_dir / 'devcluster.log'})", flush=True)
    # `gpuworkspace-devcluster up`, run by this interpreter (the devcluster is its own distribution)
    argv = [sys.executable, "-m", "gpuworkspace_devcluster", "up", "--state-dir", str(state_dir)]
    children.append(dc := Child("the devcluster", argv, env, log_dir / "devcluster.log"))
    wait_for(lambda: kubeconfig.exists() and devcluster_answers(kubeconfig), 90, "the devcluster API", dc)
    made = apply_kueue_queues(kubeconfig)  # the job profiles' queue: docs/how-to/job-queues.md
    print(f"demo: Kueue queues for jobs: {', '.join(made) or 'already there'}", flush=True)
    made = apply_team_directory(kubeconfig)  # cpu-team's ~/team, where the jobs write their results
    print(f"demo: the team directory: {', '.join(made) or 'already there'}", flush=True)

    oidc_url = f"http://127.0.0.1:{args.oidc_port}"
    print(f"demo: starting oidc-provider-mock at {oidc_url} (log: {log_dir / 'oidc.log'})", flush=True)
    argv = [str(BIN / "oidc-provider-mock"), "--port", str(args.oidc_port)]
    for user in USERS:
        argv += ["--user-claims", json.dumps(user)]
    children.append(oidc := Child("oidc-provider-mock", argv, env | {"NO_COLOR": "1"}, log_dir / "oidc.log"))
    wait_for(lambda: answers(f"{oidc_url}/.well-known/openid-configuration"), 30, "the OIDC provider", oidc)

    hub_env = env | {
        "GPUWS_STATE_DIR": str(state_dir),
        "KUBECONFIG": str(kubeconfig),
        "GPUWS_PUBLIC_PORT": str(args.port),
        "GPUWS_HUB_PORT": str(args.hub_port),
        "GPUWS_PROXY_API_PORT": str(args.proxy_api_port),
        "GPUWS_OIDC_URL": oidc_url,
        "GPUWS_DATA_DIR": str(data_dir),
        "GPUWS_SPAWNER": choose_spawner(args.spawner),
        "JUPYTERHUB_CRYPT_KEY": crypt_key(data_dir),
    }
    print(f"demo: starting JupyterHub with GPUWS_SPAWNER={hub_env['GPUWS_SPAWNER']}", flush=True)
    # cleanup_servers: Ctrl-C on the demo stops the workspaces too (a real hub leaves them running).
    argv = [
        str(BIN / "jupyterhub"),
        "-f",
        str(HERE / "jupyterhub_config.py"),
        "--JupyterHub.cleanup_servers=True",
    ]
    children.append(hub := Child("JupyterHub", argv, hub_env, None))
    url = f"http://127.0.0.1:{args.port}"
    wait_for(lambda: answers(f"{url}/hub/api/"), 90, "JupyterHub", hub)
    return url


def banner(url: str, kubeconfig: Path) -> str:
    return f"""
================================================================================
 The demo is running: open {url}
 1. Click "Sign in with the mock OIDC provider".
 2. On the provider's page click a user under "Authenticate predefined users":
      alice (group researchers)   bob (researchers, gpu-users)   admin (hub admin)
    or type any other name into the "sub" box and click Authorize (a user
    without groups).
 3. Pick a profile and click Start: JupyterLab opens after a few seconds.
 kubectl: export KUBECONFIG={kubeconfig}
 Stop everything with Ctrl-C.
================================================================================"""


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM stops the demo the way Ctrl-C does


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    children: list[Child] = []
    # Ctrl-C raises KeyboardInterrupt even where the shell started us with SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    status = 0
    try:
        url = start(args, children)
        print(banner(url, args.state_dir.resolve() / "kubeconfig"), flush=True)
        while True:
            if dead := [c for c in children if not c.alive()]:
                raise Failed(f"{dead[0].name} exited with status {dead[0].popen.returncode}")
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("\ndemo: interrupted", flush=True)
    except Failed as exc:
        print(f"demo: {exc}", file=sys.stderr, flush=True)
        status = 1
    finally:
        # a second Ctrl-C must not cut the clean-up short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for child in reversed(children):
            child.stop(timeout_s=30)
        print("demo: stopped", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
