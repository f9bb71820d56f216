"""The shipped values through the z2jh chart's own hub configuration, and the services started as the
cluster would start them.

``z2jh/`` vendors the chart's ``jupyterhub_config.py`` and ``z2jh.py`` (4.4.0, unchanged but for a
header). They are run as in the hub pod, for every combination docs/how-to/install-with-z2jh.md names:
the Helm-merged values in the chart Secret's ``values.yaml``, a generated ``hub.services.<name>.apiToken``
per service (the chart's templates/hub/secret.yaml), the name ConfigMap, and the environment the hub pod
has (``POD_NAMESPACE``, ``HUB_SERVICE_PORT``, ``KUBERNETES_SERVICE_HOST`` ...). Their fixed
``/usr/local/etc/jupyterhub/`` paths point at a temporary directory; the catalog mount at one built from
the catalog ConfigMaps; tornado's curl HTTP client (not installed here) is not configured.

Then each service starts, far enough to reach the cluster (the first Kubernetes request arrives at a
TLS API stub with the ServiceAccount's token) or, for the culler, the hub API (with its token):

- a hub-managed one (a ``command``) with exactly the environment JupyterHub gives it: its real
  ``Service.start`` up to the ``Popen``, which gets ``_ServiceSpawner.get_env()``;
- an external one (extra-manifests' Deployments) with its container's environment, the Secret's token
  and what the kubelet adds (``KUBERNETES_SERVICE_HOST``/``PORT``).

Only addresses differ from a cluster: ``--listen`` on a free loopback port, the hub's name ``hub``
resolved to a local hub API stub, the ServiceAccount files in a temporary directory (tests/helm/in_pod.py).
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import sys
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from jupyterhub import orm
from jupyterhub.objects import Hub
from jupyterhub.services import service as jupyterhub_service
from tornado.httpclient import AsyncHTTPClient
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

import gpuworkspace_spawner
from tests.helm import (
    BASE,
    RELEASE_NAMESPACE,
    SHARED,
    SKIP_NO_SHARED,
    coalesce,
    combinations,
    deployments,
    load_yaml,
    manifests,
    user_values,
)
from tests.helm.pod import (
    Cluster,
    fake_cluster,
    hub_api_stub,
    image_environment,
    local_command,
    poke,
    run_until,
)

pytestmark = [pytest.mark.skipif(SHARED is None, reason=SKIP_NO_SHARED), pytest.mark.timeout(300)]

Z2JH = Path(__file__).resolve().parent / "z2jh"
CHART_ETC = "/usr/local/etc/jupyterhub/"
CATALOG_MOUNT = "/etc/gpuworkspace/catalog"
COMBOS = [pytest.param(files, id=name) for name, files in combinations()]
# jupyterhub.name-templates with the default fullnameOverride (""): each name is its short name.
NAMES = ("hub", "proxy-api", "proxy-http", "proxy-public", "singleuser", "image-pull-secret", "priority")
NAMES += ("user-scheduler", "user-scheduler-deploy", "user-placeholder", "hub-serviceaccount", "proxy")
# The hub pod's environment: the chart's env entries, and the Service links the kubelet adds.
POD_ENV = {
    "POD_NAMESPACE": RELEASE_NAMESPACE,
    "HELM_RELEASE_NAME": "jhub",
    "CONFIGPROXY_AUTH_TOKEN": "proxy-token",
    "HUB_SERVICE_HOST": "10.96.0.10",
    "HUB_SERVICE_PORT": "8081",
    "PROXY_API_SERVICE_HOST": "10.96.0.11",
    "PROXY_API_SERVICE_PORT": "8001",
    "PROXY_PUBLIC_SERVICE_HOST": "10.96.0.12",
    "PROXY_PUBLIC_SERVICE_PORT": "80",
}
EXTERNAL = {"gpuworkspace-disks", "gpuworkspace-attribution", "gpuworkspace-jobs"}
POKED = {"gpuworkspace-jobs": "jobs"}  # what a caller asks a service for (default: workspaces)


@functools.cache
def _chart_defaults() -> dict[str, Any]:
    assert SHARED is not None
    return load_yaml(SHARED / "z2jh-values.defaults.yaml")  # type: ignore[no-any-return]


def helm_values(user: Mapping[str, Any]) -> dict[str, Any]:
    """What the chart puts in its Secret's values.yaml: the coalesced values, Chart and Release."""
    values = coalesce(_chart_defaults(), user)
    values["Chart"] = {"Name": "jupyterhub", "Version": "4.4.0", "AppVersion": "5.5.0"}
    values["Release"] = {"Name": "jhub", "Namespace": RELEASE_NAMESPACE, "Service": "Helm"}
    return values


def catalog_dir(target: Path) -> Path:
    """The catalog mount: every key of every catalog ConfigMap (the hub projects all three)."""
    target.mkdir()
    for _, doc in manifests():
        if doc["kind"] == "ConfigMap" and "gpuworkspace.dev/catalog" in doc["metadata"].get("labels", {}):
            for key, text in doc["data"].items():
                (target / key).write_text(text)
    return target


class ChartHub:
    """The chart's hub configuration as loaded in the hub pod, with the chart Secret's files."""

    def __init__(self, tmp: Path, user: Mapping[str, Any]) -> None:
        self.etc = tmp / "etc-jupyterhub"
        (self.etc / "secret").mkdir(parents=True)
        (self.etc / "config").mkdir()
        values = helm_values(user)
        (self.etc / "secret" / "values.yaml").write_text(yaml.safe_dump(values))
        self.tokens = {name: secrets.token_hex(32) for name in values["hub"].get("services") or {}}
        secret = {f"hub.services.{name}.apiToken": token for name, token in self.tokens.items()}
        secret["hub.config.JupyterHub.cookie_secret"] = secrets.token_hex(32)
        secret["hub.config.CryptKeeper.keys"] = secrets.token_hex(32)
        for key, value in secret.items():
            (self.etc / "secret" / key).write_text(value)
        for name in NAMES:
            (self.etc / "config" / name).write_text(name)
        for name in ("jupyterhub_config.py", "z2jh.py"):
            text = (Z2JH / name).read_text().replace(CHART_ETC, f"{self.etc}/")
            (self.etc / name).write_text(text)
        self.catalog = catalog_dir(tmp / "catalog")
        # what the pod mounts: the catalog volume, and hub.extraFiles (from the chart's Secret)
        self.mounts = {CATALOG_MOUNT: self.catalog}
        for name, extra in (values["hub"].get("extraFiles") or {}).items():
            self.mounts[extra["mountPath"]] = tmp / "extra-files" / name
            self.mounts[extra["mountPath"]].parent.mkdir(exist_ok=True)
            self.mounts[extra["mountPath"]].write_text(extra["stringData"])

    def secret(self, key: str) -> str:
        path = self.etc / "secret" / key
        if not path.exists():
            raise AssertionError(f"the chart's Secret `hub` has no key {key!r}")
        return path.read_text()

    def load(self, mp: pytest.MonkeyPatch, cluster: Mapping[str, str]) -> Config:
        """Run the chart's jupyterhub_config.py (its extraConfig included) in the hub pod's environment."""
        mp.delenv("KUBECONFIG", raising=False)  # the pod has none: in-cluster config or nothing
        for name, value in {**POD_ENV, **cluster}.items():
            mp.setenv(name, value)
        mp.setattr(AsyncHTTPClient, "configure", classmethod(lambda cls, impl, **kwargs: None))
        real = gpuworkspace_spawner.load_catalog_or_exit

        def load_catalog(path: str) -> Any:
            assert path == CATALOG_MOUNT, f"the catalog is read from {path!r}, mounted at {CATALOG_MOUNT}"
            return real(str(self.catalog))

        mp.setattr(gpuworkspace_spawner, "load_catalog_or_exit", load_catalog)
        mp.setattr(sys, "path", list(sys.path))  # the chart's file inserts its directory
        sys.modules.pop("z2jh", None)  # z2jh caches the values it read (lru_cache)
        try:
            return PyFileConfigLoader("jupyterhub_config.py", path=str(self.etc)).load_config()
        finally:
            sys.modules.pop("z2jh", None)


@pytest.fixture
def chart(tmp_path: Path) -> Iterator[Any]:
    def make(user: Mapping[str, Any], cluster: Mapping[str, str]) -> tuple[ChartHub, Config]:
        hub = ChartHub(tmp_path / f"chart{len(made)}", user)
        made.append(hub)
        return hub, hub.load(mp, cluster)

    made: list[ChartHub] = []
    with pytest.MonkeyPatch.context() as mp:
        yield make


CLUSTER_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


# ------------------------------------------------------------------------------ registration
@pytest.mark.parametrize("files", COMBOS)
def test_the_chart_registers_the_services_with_their_tokens_and_roles(
    files: tuple[Path, ...], chart: Any
) -> None:
    hub, c = chart(user_values(*files), CLUSTER_ENV)
    services = {s["name"]: s for s in c.JupyterHub.services}
    assert services.keys() == {
        "gpuworkspace-disks",
        "gpuworkspace-attribution",
        "gpuworkspace-culler",
        "gpuworkspace-jobs",
    }
    for name, service in services.items():
        assert service["api_token"] == hub.tokens[name], f"{name}: not the Secret's token"
    own_services = {d["metadata"]["name"]: d for _, d in manifests() if d["kind"] == "Service"}
    for name in EXTERNAL:
        assert "command" not in services[name], f"{name} runs as its own Deployment"
        url = urlparse(services[name]["url"])
        assert url.hostname in own_services and url.port in {
            p["port"] for p in own_services[url.hostname]["spec"]["ports"]
        }
    culler = services["gpuworkspace-culler"]
    assert culler["command"][:3] == ["python3", "-m", "gpuworkspace_spawner.services.culler.app"]
    assert culler["environment"] == CLUSTER_ENV  # the extraConfig passes the API server on
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert roles["gpuworkspace-culler"]["services"] == ["gpuworkspace-culler"]
    assert roles["gpuworkspace-attribution"]["scopes"] == ["list:groups", "read:groups"]
    assert "access:services!service=gpuworkspace-disks" in roles["user"]["scopes"]
    assert c.JupyterHub.spawner_class == "gpuworkspace"
    assert c.KubeSpawner.namespace == "gpu-workspaces"  # hub.config wins over the chart's POD_NAMESPACE


@pytest.mark.parametrize("files", COMBOS)
def test_workspaces_submit_notebook_jobs_with_their_own_token(files: tuple[Path, ...], chart: Any) -> None:
    """JupyterLab's notebook jobs: the server's token gets the jobs service's access scope and nothing
    broader, the server uses our jupyter-scheduler backend, and knows the jobs API's in-cluster URL."""
    _, c = chart(user_values(*files), CLUSTER_ENV)
    assert sorted(c.KubeSpawner.server_token_scopes) == [
        "access:servers!server",
        "access:services!service=gpuworkspace-attribution",
        "access:services!service=gpuworkspace-culler",
        "access:services!service=gpuworkspace-jobs",
        "users:activity!user",
    ]
    backend = "gpuworkspace_spawner.scheduler.backend"
    assert f"--SchedulerApp.scheduler_class={backend}.GPUWorkspaceScheduler" in c.KubeSpawner.args
    url = urlparse(c.KubeSpawner.environment["GPUWS_JOBS_URL"])
    service = next(
        d for _, d in manifests() if d["kind"] == "Service" and d["metadata"]["name"] == "gpuworkspace-jobs"
    )
    assert url.hostname == f"gpuworkspace-jobs.{service['metadata']['namespace']}"
    assert url.port in {p["port"] for p in service["spec"]["ports"]}
    assert url.path == "/services/gpuworkspace-jobs/api/v1"


def _service_port(name: str, namespace: str, hub: Mapping[str, Any]) -> set[int]:
    """The ports of Service ``name`` in ``namespace``: extra-manifests' own, or the chart's hub Service
    (8081 plus hub.service.extraPorts)."""
    if (name, namespace) == ("hub", RELEASE_NAMESPACE):
        return {8081, *(p["port"] for p in hub["service"]["extraPorts"])}
    return {
        p["port"]
        for _, d in manifests()
        if d["kind"] == "Service" and (d["metadata"]["name"], d["metadata"]["namespace"]) == (name, namespace)
        for p in d["spec"]["ports"]
    }


@pytest.mark.parametrize("files", COMBOS)
def test_workspaces_find_the_status_services_by_their_in_cluster_services(
    files: tuple[Path, ...], chart: Any
) -> None:
    """The JupyterLab extension's server part (docs/reference/jupyterlab-extension.md): its two URLs
    name a real Service port and the service's own prefix, the ones the hub registers the service with."""
    values = user_values(*files)
    _, c = chart(values, CLUSTER_ENV)
    registered = {s["name"]: urlparse(s["url"]) for s in c.JupyterHub.services}
    for variable, service in (
        ("GPUWS_ATTRIBUTION_URL", "gpuworkspace-attribution"),
        ("GPUWS_CULLER_URL", "gpuworkspace-culler"),
    ):
        url = urlparse(c.KubeSpawner.environment[variable])
        host, _, namespace = (url.hostname or "").partition(".")
        assert namespace == RELEASE_NAMESPACE, f"{variable}: {url.hostname} is not in {RELEASE_NAMESPACE}"
        assert url.port in _service_port(host, namespace, values["hub"]), f"{variable}: no such Service port"
        assert (host, url.port) == (registered[service].hostname, registered[service].port), variable
        assert url.path == f"/services/{service}/api/v1", variable


@pytest.mark.parametrize("files", COMBOS)
def test_every_deployment_token_is_one_the_chart_generates(files: tuple[Path, ...], chart: Any) -> None:
    hub, _ = chart(user_values(*files), CLUSTER_ENV)
    for name, container in deployments().items():
        refs = [e["valueFrom"]["secretKeyRef"] for e in container.get("env", []) if "valueFrom" in e]
        for ref in refs:
            assert ref["name"] == "hub", f"Deployment {name}: reads Secret {ref['name']}, not the chart's"
            assert ref["key"] == f"hub.services.{name}.apiToken", f"Deployment {name}: {ref['key']}"
            hub.secret(ref["key"])
        assert bool(refs) == (name in EXTERNAL), f"Deployment {name}: a token only for a hub service"


# ------------------------------------------------------------------------------ starting them
def jupyterhub_start(spec: Mapping[str, Any], hub_connect_url: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment JupyterHub's Service.start hands to Popen for a managed service."""
    url = urlparse(spec["url"]) if spec.get("url") else None
    server = None
    if url is not None:
        prefix = f"/services/{spec['name']}/"
        server = orm.Server(
            proto=url.scheme, ip=url.hostname, port=url.port, base_url=prefix, cookie_name="x"
        )
    service = jupyterhub_service.Service(
        name=spec["name"],
        command=spec["command"],
        environment=spec.get("environment") or {},
        url=spec.get("url") or "",
        api_token=spec["api_token"],
        app=types.SimpleNamespace(
            public_url="", internal_ssl=False, internal_certs_location="", internal_trust_bundles={}
        ),
        hub=Hub(ip="", port=8081, base_url="/hub/", connect_url=hub_connect_url),
        orm=types.SimpleNamespace(server=server),
    )
    seen: dict[str, Any] = {}

    class Started(Exception):
        pass

    def start(spawner: Any) -> None:
        seen["cmd"], seen["env"] = list(spawner.cmd), spawner.get_env()
        raise Started

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jupyterhub_service._ServiceSpawner, "start", start)
        with pytest.raises(Started):
            asyncio.run(service.start())
    return seen["cmd"], seen["env"]


def _bearer_reached(cluster: Cluster) -> Any:
    return lambda: any(auth == f"Bearer {cluster.token}" for _, _, auth in cluster.api.seen())


@pytest.mark.parametrize("files", COMBOS)
def test_the_managed_culler_starts_and_reaches_the_hub_api(
    files: tuple[Path, ...], chart: Any, tmp_path: Path
) -> None:
    with fake_cluster(tmp_path) as cluster, hub_api_stub() as (hub_url, calls):
        hub, c = chart(user_values(*files), cluster.environ)
        spec = next(s for s in c.JupyterHub.services if s["name"] == "gpuworkspace-culler")
        cmd, env = jupyterhub_start(spec, hub_url)
        token = hub.tokens["gpuworkspace-culler"]
        argv, _ = local_command(cmd, cluster.service_account_dir, hub.mounts)
        ok, log = run_until(
            argv,
            env,
            lambda: any(auth == f"token {token}" for _, _, auth in calls.seen()),
            tmp_path / "culler.log",
        )
    assert ok, f"the culler never called the hub API with its token:\n{log}"


@pytest.mark.parametrize("name", sorted(deployments()))
def test_each_deployment_starts_and_reaches_the_cluster_as_its_service_account(
    name: str, chart: Any, tmp_path: Path
) -> None:
    container = deployments()[name]
    with fake_cluster(tmp_path) as cluster, hub_api_stub() as (hub_url, _):
        hub, _ = chart(load_yaml(BASE), cluster.environ)
        env = image_environment()
        for entry in container.get("env", []):
            if "valueFrom" in entry:
                env[entry["name"]] = hub.secret(entry["valueFrom"]["secretKeyRef"]["key"])
            else:  # the hub's Service name, as this machine reaches the stub
                env[entry["name"]] = entry["value"].replace("http://hub:8081", hub_url)
        env.update(cluster.environ)  # the kubelet's Service link for the API server
        argv, port = local_command(container["command"], cluster.service_account_dir, hub.mounts)
        ok, log = run_until(
            argv,
            env,
            _bearer_reached(cluster),
            tmp_path / f"{name}.log",
            # the disk service calls Kubernetes for a caller: list the workspaces' disks; the jobs
            # service: list the caller's jobs
            poke(f"http://127.0.0.1:{port}/services/{name}/api/v1/{POKED.get(name, 'workspaces')}")
            if port
            else lambda: None,
        )
    assert ok, f"Deployment {name} never reached the Kubernetes API with its token:\n{log}"


def _in_hub_pod(user: Mapping[str, Any], *, pass_environment: bool) -> dict[str, Any]:
    """The "in the hub pod" mode for the reclaimer: its Deployment's command as a managed service;
    without ``pass_environment``, the values' extraConfig that passes the API server on is left out."""
    values = yaml.safe_load(yaml.safe_dump(dict(user)))
    values["hub"]["services"]["gpuworkspace-reclaimer"] = {
        "command": deployments()["gpuworkspace-reclaimer"]["command"]
    }
    if not pass_environment:
        del values["hub"]["extraConfig"]["gpuworkspace-services"]
    return values  # type: ignore[no-any-return]


@pytest.mark.parametrize("pass_environment", [True, False], ids=["with-extraConfig", "without"])
def test_a_managed_kubernetes_service_needs_the_api_server_passed_on(
    pass_environment: bool, chart: Any, tmp_path: Path
) -> None:
    """JupyterHub drops KUBERNETES_SERVICE_HOST/PORT from a managed service's environment: without the
    values' extraConfig the reclaimer in the hub pod never reaches the cluster (it crash-loops)."""
    with fake_cluster(tmp_path) as cluster, hub_api_stub() as (hub_url, _):
        hub, c = chart(_in_hub_pod(load_yaml(BASE), pass_environment=pass_environment), cluster.environ)
        spec = next(s for s in c.JupyterHub.services if s["name"] == "gpuworkspace-reclaimer")
        cmd, env = jupyterhub_start(spec, hub_url)
        argv, _ = local_command(cmd, cluster.service_account_dir, hub.mounts)
        ok, log = run_until(argv, env, _bearer_reached(cluster), tmp_path / "reclaimer.log", timeout_s=20)
    if pass_environment:
        assert ok, f"the managed reclaimer never reached the Kubernetes API:\n{log}"
    else:
        assert not ok and "KUBERNETES_SERVICE_HOST" not in env, log
        # in-cluster config failed ("Service host/port is not set"), then it looked for a kubeconfig
        assert "kubernetes_asyncio.config.config_exception.ConfigException" in log, log
