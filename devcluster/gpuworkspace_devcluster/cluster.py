"""``DevCluster``: the API emulator wired together, as an async context manager or a foreground server."""

from __future__ import annotations

import base64
import dataclasses
import logging
import secrets
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson
import trustme
import yaml
from aiohttp import web

from . import crds, rbac
from .addresses import check_instance, instance_from_env, service_cidr
from .apiserver import ApiServer, ApiServerConfig
from .controllers import Controllers
from .errors import ApiError
from .faults import FaultInjector
from .podio import LocalDirRuntime, PodIO
from .resources import find
from .satokens import TokenIssuer
from .sim.simulation import Simulation
from .store import Store
from .verbs import Verbs
from .vmactions import run_vm_action

log = logging.getLogger(__name__)
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
ADMIN_PATH = "/_devcluster"


@dataclass(frozen=True)
class ClusterOptions:
    """How a DevCluster serves; pass as ``options=`` or as keyword overrides."""

    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port
    auth: bool = False  # require bearer tokens from the kubeconfigs this cluster writes
    rbac_enabled: bool = False  # authorize with the stored RBAC objects (implies auth)
    seed: int = 0  # fault injection seed
    bookmark_interval_s: float = 5.0
    persist: bool = True  # keep objects under the state dir (like etcd)
    tls: bool = False  # serve HTTPS with a CA kept in the state dir (kubectl sends tokens only over TLS)
    simulate: bool = False  # run the simulated cluster (nodes, scheduler, kubelets, CSI, CDI, KubeVirt, DCGM)
    topology: str | None = None  # topology YAML for the simulation (default: sim/topology.yaml)
    # which loopback ranges pods, nodes and ClusterIPs use (addresses.py): several devclusters, each its own
    instance: int = field(default_factory=instance_from_env)


class DevCluster:
    """A local Kubernetes API server.

    ``async with DevCluster(tmp_path) as cluster:`` then use ``cluster.kubeconfig`` with any client.
    With ``auth=True`` every request needs a bearer token from a kubeconfig this cluster wrote;
    with ``rbac=True`` requests are also authorized against the stored RBAC objects.
    """

    def __init__(
        self, state_dir: Path | str | None = None, options: ClusterOptions | None = None, **overrides: Any
    ) -> None:
        opts = dataclasses.replace(options or ClusterOptions(), **overrides)
        self.options = opts
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.host, self.port = opts.host, opts.port
        self.persist, self.tls = opts.persist, opts.tls
        persist, seed, auth, rbac_enabled = opts.persist, opts.seed, opts.auth, opts.rbac_enabled
        bookmark_interval_s = opts.bookmark_interval_s
        self._ssl: ssl.SSLContext | None = None
        self._ca: trustme.CA | None = None
        self._ca_pem = b""
        self.store = Store(self.state_dir if persist else None)
        self.verbs = Verbs(self.store, service_cidr=service_cidr(check_instance(opts.instance)))
        self.faults = FaultInjector(seed)
        self.tokens: dict[str, dict[str, Any]] = {}
        self.admin_token = self._load_or_make_admin_token()
        self.verbs.tokens = TokenIssuer(self._load_or_make_signing_key())
        authenticator = rbac.TokenAuthenticator(self.tokens) if auth or rbac_enabled else None
        self.api = ApiServer(
            self.verbs,
            self.faults,
            ApiServerConfig(
                authenticator=authenticator,
                rbac_enabled=rbac_enabled,
                bookmark_interval_s=bookmark_interval_s,
                extra_handlers={
                    f"{ADMIN_PATH}/faults": self._admin_faults,
                    f"{ADMIN_PATH}/requests": self._admin_requests,
                },
            ),
        )
        self.api.vm_actions = lambda ns, name, action: run_vm_action(self.verbs, ns, name, action)
        self.controllers = Controllers(self.verbs)
        pods = find("", "v1", "pods")
        assert pods is not None
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        if self.state_dir is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="devcluster-")
        self.pod_runtime = LocalDirRuntime(self.state_dir or Path(self._scratch.name))  # type: ignore[union-attr]
        self.api.pod_io = PodIO(self.pod_runtime, get_pod=lambda ns, name: self.store.get(pods, ns, name))
        self._runner: web.AppRunner | None = None
        self.simulation: Simulation | None = None

    # -------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> DevCluster:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        self._bootstrap()
        await self.controllers.start()
        self._runner = web.AppRunner(
            self.api.app(), handle_signals=False, access_log=None, shutdown_timeout=1.0
        )
        await self._runner.setup()
        if self.tls:
            self._ssl = self._server_tls()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True, ssl_context=self._ssl)
        await site.start()
        server = site._server
        assert server is not None and server.sockets
        self.port = server.sockets[0].getsockname()[1]
        if self.options.simulate:
            self.simulation = Simulation(self, self.options.topology, instance=self.options.instance)
            await self.simulation.start()
        # Written last: a kubeconfig on disk means the cluster is ready to use.
        if self.state_dir is not None:
            self.write_kubeconfig(self.state_dir / "kubeconfig", "admin", self.admin_token)
        log.info("devcluster API serving at %s", self.url)

    async def stop(self) -> None:
        if self.simulation is not None:
            await self.simulation.stop()
            self.simulation = None
        self.store.close_all_watches()
        await self.controllers.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.store.close()
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def _server_tls(self) -> ssl.SSLContext:
        """A serving certificate from the cluster CA (``_load_or_make_ca``)."""
        assert self._ca is not None
        leaf = self._ca.issue_cert(self.host, "localhost", "127.0.0.1", "kubernetes.default.svc")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        leaf.configure_cert(context)
        return context

    def _load_or_make_ca(self) -> None:
        """The cluster CA, kept under the state dir (clients keep trusting it across restarts). Every
        cluster has one, TLS or not: it is what ``kube-root-ca.crt`` publishes into each namespace."""
        ca_cert = self.state_dir / "ca.crt" if self.state_dir is not None else None
        ca_key = self.state_dir / "ca.key" if self.state_dir is not None else None
        if ca_cert is not None and ca_key is not None and ca_cert.exists() and ca_key.exists():
            ca = trustme.CA.from_pem(ca_cert.read_bytes(), ca_key.read_bytes())
        else:
            ca = trustme.CA(organization_name="gpuworkspace devcluster")
            if ca_cert is not None and ca_key is not None:
                ca.cert_pem.write_to_path(str(ca_cert))
                ca.private_key_pem.write_to_path(str(ca_key))
                ca_key.chmod(0o600)
        self._ca, self._ca_pem = ca, ca.cert_pem.bytes()
        self.controllers.root_ca_pem = self._ca_pem.decode()

    def serving_context(self, *names: str) -> ssl.SSLContext | None:
        """A server SSL context with a certificate for ``names`` signed by the cluster CA (None without
        TLS): what a kubelet gets with ``serverTLSBootstrap`` and an approved CSR."""
        if self._ca is None or not self.tls:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ca.issue_cert(*names).configure_cert(context)
        return context

    def client_ssl_context(self) -> ssl.SSLContext | None:
        """An SSL context trusting this cluster's CA (None without TLS), for raw HTTP clients in tests."""
        if not self.tls:
            return None
        return ssl.create_default_context(cadata=self._ca_pem.decode())

    @property
    def kubeconfig(self) -> Path:
        assert self.state_dir is not None, "DevCluster needs a state_dir to write a kubeconfig"
        return self.state_dir / "kubeconfig"

    # ------------------------------------------------------------- identities
    def _load_or_make_admin_token(self) -> str:
        path = self.state_dir / "tokens.json" if self.state_dir is not None else None
        if path is not None and path.exists():
            self.tokens.update(orjson.loads(path.read_bytes()))
        for token, ident in self.tokens.items():
            if ident.get("user") == "system:admin":
                return token
        token = secrets.token_urlsafe(24)
        self.tokens[token] = {"user": "system:admin", "groups": ["system:masters", "system:authenticated"]}
        self._save_tokens()
        return token

    def _load_or_make_signing_key(self) -> bytes:
        """The ServiceAccount token signing key (``--service-account-key-file``), kept across restarts."""
        path = self.state_dir / "sa-signing.key" if self.state_dir is not None else None
        if path is not None and path.exists():
            return path.read_bytes()
        key = secrets.token_bytes(32)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(key)
            path.chmod(0o600)
        return key

    def _save_tokens(self) -> None:
        if self.state_dir is not None:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            path = self.state_dir / "tokens.json"
            path.write_bytes(orjson.dumps(self.tokens))
            path.chmod(0o600)

    def add_identity(self, name: str, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig (``DIR/kubeconfig-NAME``) authenticating as ``user``."""
        token = secrets.token_urlsafe(24)
        self.tokens[token] = {"user": user, "groups": [*groups, "system:authenticated"]}
        self._save_tokens()
        assert self.state_dir is not None
        return self.write_kubeconfig(self.state_dir / f"kubeconfig-{name}", name, token)

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        return self.add_identity(
            f"{namespace}-{name}",
            f"system:serviceaccount:{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}"),
        )

    def _cluster_entry(self) -> dict[str, str]:
        entry = {"server": self.url}
        if self.tls:
            entry["certificate-authority-data"] = base64.b64encode(self._ca_pem).decode()
        return entry

    def write_kubeconfig(self, path: Path, user: str, token: str) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "devcluster", "cluster": self._cluster_entry()}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [
                {
                    "name": f"{user}@devcluster",
                    "context": {"cluster": "devcluster", "user": user, "namespace": "default"},
                }
            ],
            "current-context": f"{user}@devcluster",
            "preferences": {},
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(config, sort_keys=False))
        tmp.chmod(0o600)
        tmp.replace(path)
        return path

    # -------------------------------------------------------------- bootstrap
    def _bootstrap(self) -> None:
        self._load_or_make_ca()
        namespaces = find("", "v1", "namespaces")
        crd_rt = find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert namespaces is not None and crd_rt is not None
        for name in SYSTEM_NAMESPACES:
            if self.store.get(namespaces, "", name) is None:
                self.verbs.create(namespaces, "", {"metadata": {"name": name}})
        for crd in crds.builtin_crds():
            if self.store.get(crd_rt, "", crd["metadata"]["name"]) is None:
                self.verbs.create(crd_rt, "", crd)
        self._ensure_default_service_accounts()

    def _ensure_default_service_accounts(self) -> None:
        namespaces, sas = find("", "v1", "namespaces"), find("", "v1", "serviceaccounts")
        assert namespaces is not None and sas is not None
        for ns in list(self.store.items(namespaces)):
            if not ns["metadata"].get("deletionTimestamp"):
                self.controllers.publish_namespace_defaults(ns["metadata"]["name"])

    # ----------------------------------------------------------------- admin
    async def _admin_faults(self, request: web.Request) -> web.StreamResponse:
        """GET: the fault rules; PUT: replace them ({"seed":..,"rules":[..]}); DELETE: clear."""
        if request.method == "PUT":
            try:
                self.faults = FaultInjector.from_json(orjson.loads(await request.read()))
            except (ValueError, orjson.JSONDecodeError) as exc:
                raise ApiError(400, "BadRequest", f"invalid fault configuration: {exc}") from exc
            self.api.faults = self.faults
        elif request.method == "DELETE":
            self.faults.clear()
        return web.Response(body=orjson.dumps(self.faults.to_json()), content_type="application/json")

    async def _admin_requests(self, request: web.Request) -> web.StreamResponse:
        """The request log as JSON lines: time, verb, resource, status, duration, user agent."""
        lines = [orjson.dumps(r.__dict__) for r in self.api.request_log]
        if request.method == "DELETE":
            self.api.request_log.clear()
        return web.Response(
            body=b"\n".join(lines) + (b"\n" if lines else b""), content_type="application/x-ndjson"
        )
