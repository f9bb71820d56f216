"""The whole local stack as subprocesses: devcluster, mock OIDC provider, JupyterHub (which starts CHP).

Used by the e2e tests (``tests/e2e/conftest.py``), the spawn benchmark
(``tests/benchmarks/bench_spawn.py``) and, for the same start/stop logic, the demo launcher.

- :class:`Devcluster` runs ``gpuworkspace-devcluster up`` (on a free port, with the pod, node and
  ClusterIP ranges of this process's devcluster instance, ``$GPUWS_DEVCLUSTER_INSTANCE``: several
  stacks run side by side) and reads its request log.
- :class:`OidcMock` runs ``oidc-provider-mock`` on a port of :func:`stack_port` with the predefined users alice, bob
  and admin (one-click buttons on its authorization page).
- :class:`Hub` runs ``jupyterhub`` with ``hub_config/jupyterhub_config.py`` (through a small wrapper
  that adds an admin service token), on ports of :func:`stack_port`, and can be restarted alone.
- :class:`HubStack` is the three together as a context manager.

Every process runs in its own session (process group); ``stop()`` sends SIGTERM to the leader, waits,
then kills what is left of the group. An ``atexit`` hook stops whatever is still running, so an
interrupted test run does not leave a devcluster holding its instance's addresses.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import re
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from gpuworkspace_devcluster.addresses import instance_from_env

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HUB_CONFIG = REPO / "hub_config" / "jupyterhub_config.py"
USER_AGENT = "gpuws-e2e-harness"  # our own calls to the devcluster are told apart in its request log

# alice may use everything open to researchers, bob also the GPU profiles, admin is a hub admin.
OIDC_USERS: tuple[dict[str, Any], ...] = (
    {"sub": "alice", "preferred_username": "alice", "email": "alice@example.org", "groups": ["researchers"]},
    {
        "sub": "bob",
        "preferred_username": "bob",
        "email": "bob@example.org",
        "groups": ["researchers", "gpu-users"],
    },
    {"sub": "admin", "preferred_username": "admin", "email": "admin@example.org", "groups": []},
)

Json = Any
_LIVE: dict[Proc, None] = {}  # running processes, in start order


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# The ports of a stack's listeners, which bind the same port again after a restart (the hub, its proxy,
# a managed service JupyterHub starts again after it died). Not from the OS's ephemeral range
# (ip_local_port_range, 32768-60999 by default), where any outgoing connection on the machine may take
# the port while its listener is down, and from a block of this process's devcluster instance, so a
# stack in another test process never picks it either.
PORT_BLOCK_START, PORT_BLOCK_SIZE = 20000, 500
_next_offset: dict[int, int] = {}


def stack_port() -> int:
    """A port of this devcluster instance's block that nothing listens on now (each call the next one)."""
    instance = instance_from_env()
    start = PORT_BLOCK_START + instance * PORT_BLOCK_SIZE
    for _ in range(PORT_BLOCK_SIZE):
        offset = _next_offset.get(instance, 0)
        _next_offset[instance] = (offset + 1) % PORT_BLOCK_SIZE
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", start + offset))
            except OSError:
                continue
        return start + offset
    raise RuntimeError(
        f"no free port in {start}-{start + PORT_BLOCK_SIZE - 1} (devcluster instance {instance})"
    )


def wait_for(
    check: Callable[[], Any],
    timeout_s: float,
    what: str,
    proc: Proc | None = None,
    interval_s: float = 0.1,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Any:
    """Poll ``check`` until it returns something truthy; fail early when ``proc`` has exited.

    Every wait has its deadline: past ``timeout_s`` it ends as a :class:`TimeoutError` that names
    ``what`` was waited for and the last error, never as a hang (``clock``/``sleep``: for tests)."""
    deadline, last = clock() + timeout_s, None
    while clock() < deadline:
        if proc is not None and not proc.alive:
            raise RuntimeError(
                f"{proc.name} exited ({proc.returncode}) while waiting for {what}:\n{proc.tail()}"
            )
        try:
            value = check()
        except (OSError, ValueError, KeyError) as exc:
            value, last = None, exc
        if value:
            return value
        sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s}s waiting for {what} (last error: {last!r})")


def http(
    method: str,
    url: str,
    body: Json = None,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
    timeout: float = 30,
) -> tuple[int, bytes]:
    """One HTTP request; the status and body (errors are answers too, not exceptions)."""
    data = json.dumps(body).encode() if body is not None else None
    hdrs = {"User-Agent": USER_AGENT, **(headers or {})}
    if data is not None:
        hdrs.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class Proc:
    """A subprocess in its own process group, its output in a log file."""

    def __init__(
        self, name: str, argv: list[str], log_path: Path, env: dict[str, str], cwd: Path | None = None
    ) -> None:
        self.name, self.argv, self.log_path, self.env, self.cwd = name, argv, log_path, env, cwd
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"==== {time.strftime('%H:%M:%S')} start: {' '.join(self.argv)}\n".encode())
            log.flush()
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        _LIVE[self] = None
        return self

    @property
    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def stop(self, timeout_s: float = 20.0, sig: int = signal.SIGTERM) -> None:
        """SIGTERM (or ``sig``) to the leader, wait, then SIGKILL the whole group."""
        popen, self._popen = self._popen, None
        _LIVE.pop(self, None)
        if popen is None:
            return
        if popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(popen.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGKILL)  # children the leader left behind (the group id is its pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(5)

    def tail(self, lines: int = 60) -> str:
        try:
            with self.log_path.open(errors="replace") as f:
                return "".join(deque(f, maxlen=lines))
        except OSError:
            return ""


@atexit.register
def _stop_leftovers() -> None:
    # Last started, first stopped: the hub before the devcluster.
    for proc in reversed(list(_LIVE)):
        proc.stop(timeout_s=10)


def _base_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    for name in ("KUBECONFIG", "JUPYTERHUB_API_TOKEN", "JUPYTERHUB_API_URL"):
        env.pop(name, None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


# --------------------------------------------------------------------------------- devcluster
class Devcluster:
    """``gpuworkspace-devcluster up --state-dir DIR`` and its admin endpoints."""

    def __init__(
        self,
        state_dir: Path,
        log_dir: Path,
        *,
        rbac: bool = False,
        service_accounts: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """``rbac``: authorize requests with the stored RBAC objects (``up --rbac``; the admin kubeconfig
        stays ``system:masters``). ``service_accounts``: ``(namespace, name)`` pairs that get a bearer
        token; after :meth:`start`, :meth:`service_account_kubeconfig` is a kubeconfig authenticating
        as ``system:serviceaccount:<namespace>:<name>``."""
        self.state_dir = state_dir.resolve()
        self.kubeconfig = self.state_dir / "kubeconfig"
        self.service_accounts = service_accounts
        # `gpuworkspace-devcluster up` with this interpreter: whichever copy of the devcluster it imports
        argv = [sys.executable, "-m", "gpuworkspace_devcluster", "up", "--state-dir", str(self.state_dir)]
        if rbac:
            argv.append("--rbac")
        self.proc = Proc("devcluster", argv, log_dir / "devcluster.log", _base_env())
        self.url = ""
        self._token = ""
        self._ssl: ssl.SSLContext | None = None

    def start(self, timeout_s: float = 60) -> Devcluster:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.unlink(missing_ok=True)  # rewritten once the API answers
        tokens = self._add_service_account_tokens()
        self.proc.start()
        wait_for(self.kubeconfig.exists, timeout_s, "the devcluster's kubeconfig", self.proc)
        wait_for(self._load_kubeconfig, 10, "a complete kubeconfig", self.proc)
        wait_for(lambda: self.get("/version")[0] == 200, timeout_s, "the devcluster API", self.proc)
        for (namespace, name), token in tokens.items():
            self._write_service_account_kubeconfig(namespace, name, token)
        return self

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        """The kubeconfig of a ServiceAccount named in ``service_accounts`` (written by :meth:`start`)."""
        return self.state_dir / f"kubeconfig-{namespace}-{name}"

    def _add_service_account_tokens(self) -> dict[tuple[str, str], str]:
        """A token per ServiceAccount in the devcluster's token file, which it reads when it starts
        (like ``--token-auth-file``); ServiceAccount users get their groups from the user name."""
        if not self.service_accounts:
            return {}
        path = self.state_dir / "tokens.json"
        known = json.loads(path.read_text()) if path.exists() else {}
        users = {entry["user"]: token for token, entry in known.items()}
        tokens = {}
        for namespace, name in self.service_accounts:
            user = f"system:serviceaccount:{namespace}:{name}"
            tokens[(namespace, name)] = users.get(user) or secrets.token_urlsafe(24)
            known[tokens[(namespace, name)]] = {"user": user, "groups": []}
        path.write_text(json.dumps(known))
        path.chmod(0o600)
        return tokens

    def _write_service_account_kubeconfig(self, namespace: str, name: str, token: str) -> None:
        """The admin kubeconfig (same server and CA) with the ServiceAccount's token as its user."""
        doc = yaml.safe_load(self.kubeconfig.read_text())
        user = f"system:serviceaccount:{namespace}:{name}"
        doc["users"] = [{"name": user, "user": {"token": token}}]
        doc["contexts"][0]["context"]["user"] = user
        path = self.service_account_kubeconfig(namespace, name)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        path.chmod(0o600)

    def _load_kubeconfig(self) -> bool:
        doc = yaml.safe_load(self.kubeconfig.read_text())
        cluster = doc["clusters"][0]["cluster"]
        self.url = cluster["server"].rstrip("/")
        self._token = doc["users"][0]["user"].get("token", "")
        if self.url.startswith("https"):
            ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
            self._ssl = ssl.create_default_context(cadata=ca)
        return True

    def get(self, path: str, method: str = "GET") -> tuple[int, bytes]:
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        return http(method, self.url + path, headers=headers, context=self._ssl)

    def control(self, path: str, body: Json, method: str = "POST") -> tuple[int, bytes]:
        """A call to the simulation's control API (``/_devcluster/sim/node`` etc.) with the admin token."""
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        return http(method, self.url + path, body, headers=headers, context=self._ssl)

    def requests_log(self, clear: bool = False) -> list[dict[str, Any]]:
        """The API request log (time, method, verb, resource, namespace, name, status, user agent, ...),
        without the admin endpoints and without this harness's own requests; ``clear`` empties it."""
        status, body = self.get("/_devcluster/requests", "DELETE" if clear else "GET")
        if status != 200:
            raise RuntimeError(f"/_devcluster/requests answered {status}: {body[:200]!r}")
        records = [json.loads(line) for line in body.splitlines() if line.strip()]
        return [r for r in records if r["verb"] and r["user_agent"] != USER_AGENT]

    def stop(self) -> None:
        self.proc.stop(timeout_s=30)


# ---------------------------------------------------------------------------------- OIDC mock
class OidcMock:
    """oidc-provider-mock with the predefined users; any client id and secret are accepted."""

    def __init__(self, log_dir: Path, port: int | None = None) -> None:
        self.port = port or stack_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [str(BIN / "oidc-provider-mock"), "--port", str(self.port)]
        for user in OIDC_USERS:
            argv += ["--user-claims", json.dumps(user)]
        env = _base_env() | {"NO_COLOR": "1"}
        self.proc = Proc("oidc-provider-mock", argv, log_dir / "oidc.log", env)

    def start(self, timeout_s: float = 30) -> OidcMock:
        self.proc.start()
        discovery = f"{self.url}/.well-known/openid-configuration"
        wait_for(
            lambda: http("GET", discovery, timeout=2)[0] == 200, timeout_s, "the OIDC provider", self.proc
        )
        return self

    def stop(self) -> None:
        self.proc.stop(timeout_s=10)


# ------------------------------------------------------------------------------------ the hub
_WRAPPER = """\
# Generated by tests/e2e/harness.py: the real configuration plus an admin service for the tests.
c = get_config()  # noqa: F821
load_subconfig({config!r})  # noqa: F821
c.JupyterHub.services.append({{"name": "e2e-admin", "api_token": {token!r}}})
c.JupyterHub.load_roles.extend([
    {{
        "name": "e2e-admin",
        "scopes": ["admin:users", "admin:servers", "admin:groups", "tokens", "access:servers", "read:hub", "list:users", "read:metrics"],
        "services": ["e2e-admin"],
    }}
])
c.JupyterHub.log_level = "DEBUG"
# Shorter than production, so the tests see failures and vanished pods in seconds, not minutes.
c.GPUWorkspaceSpawner.unschedulable_timeout = 5
c.Spawner.poll_interval = 5
c.GPUWorkspaceSpawner.heal_max_restarts = 2  # a crash loop gives up after ~15 s, not minutes
"""


# The hub-managed services' ports (hub_config/jupyterhub_config.py: GPUWS_<NAME>_PORT)
SERVICE_PORTS = ("DISKS", "ATTRIBUTION", "CULLER", "RECLAIMER_METRICS", "JOBS")


class Hub:
    """JupyterHub on ports of :func:`stack_port` with hub_config/jupyterhub_config.py; restartable alone."""

    def __init__(
        self,
        workdir: Path,
        devcluster: Devcluster,
        oidc: OidcMock,
        spawner: str = "kubespawner",
        catalog: Path | None = None,
        extra_env: dict[str, str] | None = None,
        *,
        extra_config: str = "",
    ) -> None:
        """``extra_config``: Python lines appended to the generated wrapper, after the real configuration
        and the harness's own settings (a benchmark's limits, a profile of its own)."""
        self.workdir = workdir.resolve()
        self.data_dir = self.workdir / "hub-data"
        self.public_port, self.hub_port, self.proxy_api_port = stack_port(), stack_port(), stack_port()
        # the hub's services too: JupyterHub starts one that died again, on the same port
        self.service_ports = {name: stack_port() for name in SERVICE_PORTS}
        self.url = f"http://127.0.0.1:{self.public_port}"
        self.api_url = f"{self.url}/hub/api"
        self.admin_token = secrets.token_hex(24)
        self.spawner = spawner
        config = self.workdir / "jupyterhub_config_e2e.py"
        self.workdir.mkdir(parents=True, exist_ok=True)
        config.write_text(_WRAPPER.format(config=str(HUB_CONFIG), token=self.admin_token) + extra_config)
        env = _base_env() | {
            "GPUWS_STATE_DIR": str(devcluster.state_dir),
            "KUBECONFIG": str(devcluster.kubeconfig),
            "GPUWS_PUBLIC_PORT": str(self.public_port),
            "GPUWS_HUB_PORT": str(self.hub_port),
            "GPUWS_PROXY_API_PORT": str(self.proxy_api_port),
            **{f"GPUWS_{name}_PORT": str(port) for name, port in self.service_ports.items()},
            "GPUWS_OIDC_URL": oidc.url,
            "GPUWS_DATA_DIR": str(self.data_dir),
            "GPUWS_SPAWNER": spawner,
            "JUPYTERHUB_CRYPT_KEY": secrets.token_hex(32),
        }
        if catalog is not None:
            env["GPUWS_CATALOG"] = str(catalog)
        env |= extra_env or {}
        argv = [str(BIN / "jupyterhub"), "-f", str(config)]
        self.proc = Proc("jupyterhub", argv, self.workdir / "logs" / "jupyterhub.log", env, cwd=self.workdir)

    def start(self, timeout_s: float = 90) -> Hub:
        self.proc.start()
        wait_for(lambda: self.api("GET", "/")[0] == 200, timeout_s, "JupyterHub behind the proxy", self.proc)
        return self

    def stop(self) -> None:
        self.proc.stop(timeout_s=30)

    def restart(self) -> None:
        self.stop()
        self.start()

    # ---------------------------------------------------------------- REST API helpers
    def api(self, method: str, path: str, body: Json = None, token: str | None = None) -> tuple[int, Json]:
        """A hub REST API call (``path`` below /hub/api) with the admin token; status and decoded JSON."""
        headers = {"Authorization": f"token {token or self.admin_token}"}
        status, raw = http(method, self.api_url + path, body, headers=headers)
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def server(self, user: str, name: str = "") -> dict[str, Any] | None:
        status, model = self.api("GET", f"/users/{user}")
        if status != 200:
            raise RuntimeError(f"GET /users/{user} answered {status}: {model}")
        return (model.get("servers") or {}).get(name)  # type: ignore[no-any-return]

    def start_server(self, user: str, name: str = "", options: Json = None) -> int:
        """POST the start; returns the status (201 ready at once, 202 pending). Creates the user if needed."""
        if self.api("GET", f"/users/{user}")[0] == 404:
            status, body = self.api("POST", f"/users/{user}")
            if status not in (200, 201):
                raise RuntimeError(f"creating user {user}: {status} {body}")
        path = f"/users/{user}/servers/{name}" if name else f"/users/{user}/server"
        status, body = self.api("POST", path, options if options is not None else {})
        if status not in (201, 202):
            raise RuntimeError(f"POST {path} answered {status}: {body}")
        return status

    def wait_ready(self, user: str, name: str = "", timeout_s: float = 150, interval_s: float = 0.05) -> None:
        def ready() -> bool:
            server = self.server(user, name)
            if server is None:
                raise RuntimeError(f"server {user}/{name} is gone (the start failed); see the hub log")
            return bool(server.get("ready"))

        wait_for(ready, timeout_s, f"server {user}/{name} ready", self.proc, interval_s)

    def stop_server(self, user: str, name: str = "", timeout_s: float = 90, interval_s: float = 0.05) -> None:
        path = f"/users/{user}/servers/{name}" if name else f"/users/{user}/server"
        status, body = self.api("DELETE", path)
        if status not in (202, 204):
            raise RuntimeError(f"DELETE {path} answered {status}: {body}")
        gone = lambda: self.server(user, name) is None  # noqa: E731
        wait_for(gone, timeout_s, f"server {user}/{name} stopped", self.proc, interval_s)


# ------------------------------------------------------------------------------- everything
class HubStack:
    """Devcluster + mock OIDC provider + JupyterHub, started in that order and stopped in reverse.

    ``with HubStack(tmp_dir, spawner="kubespawner") as stack:`` then ``stack.url``, ``stack.admin_token``,
    ``stack.kubeconfig``, ``stack.requests_log()``, ``stack.restart_hub()``, ``stack.hub.api(...)``.
    Logs are in ``<workdir>/logs``; :meth:`dump_logs` prints their tails.
    """

    def __init__(
        self,
        workdir: Path,
        spawner: str = "kubespawner",
        catalog: Path | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir.resolve()
        self.log_dir = self.workdir / "logs"
        self.devcluster = Devcluster(self.workdir / "devcluster", self.log_dir)
        self.oidc = OidcMock(self.log_dir)
        self.hub = Hub(self.workdir, self.devcluster, self.oidc, spawner, catalog, extra_env)

    @property
    def url(self) -> str:
        return self.hub.url

    @property
    def admin_token(self) -> str:
        return self.hub.admin_token

    @property
    def kubeconfig(self) -> Path:
        return self.devcluster.kubeconfig

    def requests_log(self, clear: bool = False) -> list[dict[str, Any]]:
        return self.devcluster.requests_log(clear)

    def restart_hub(self) -> None:
        """Stop and start JupyterHub (and so its proxy) only; the devcluster and all state stay."""
        self.hub.restart()

    def __enter__(self) -> HubStack:
        try:
            self.devcluster.start()
            self.oidc.start()
            self.hub.start()
        except BaseException:
            self.dump_logs()
            self.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.hub.stop()
        self.oidc.stop()
        self.devcluster.stop()

    def logs(self) -> Iterator[Proc]:
        yield from (self.devcluster.proc, self.oidc.proc, self.hub.proc)

    def dump_logs(self, lines: int = 80) -> None:
        for proc in self.logs():
            print(f"\n----- last {lines} lines of {proc.log_path}", file=sys.stderr)
            print(proc.tail(lines), file=sys.stderr)


def oidc_login(page: Any, stack: HubStack, user: str) -> None:
    """Log ``user`` in through the hub's login page and oidc-provider-mock (one button per user)."""
    page.goto(f"{stack.url}/hub/login")
    page.get_by_text(re.compile("Sign in with")).click()
    page.wait_for_url(f"{stack.oidc.url}/oauth2/authorize*")
    page.get_by_role("button", name=user, exact=True).click()
    page.wait_for_url(re.compile(r".*/hub/(spawn|home).*"))


@contextlib.contextmanager
def logged_in_page(
    browser: Any,
    stack: HubStack,
    user: str,
    viewport: dict[str, int] | None = None,
    timeout_ms: int = 30_000,
) -> Iterator[Any]:
    """A chromium page in a browser context of its own with ``user`` logged in (the hub serves its
    pages to a login cookie, not to an API token); the context is closed on leaving."""
    context = browser.new_context(viewport=viewport) if viewport else browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(timeout_ms)
        oidc_login(page, stack, user)
        yield page
    finally:
        context.close()
