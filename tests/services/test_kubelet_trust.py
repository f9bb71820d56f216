"""No bearer token to an unverified kubelet: the disk service's volume stats and the attribution service's
CPU/memory scrape send the service's Kubernetes token only to a kubelet whose serving certificate verifies
against the cluster CA (the kubeconfig's, as a pod's ServiceAccount ca.crt would be).

Each kubelet here is a local HTTPS server that records the Authorization header of every request it gets.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import Configuration
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from gpuworkspace_spawner.services.attribution.model import NodeInfo
from gpuworkspace_spawner.services.attribution.sources import KubernetesSource, Settings
from gpuworkspace_spawner.services.disks.metrics import VolumeStats
from gpuworkspace_spawner.services.kubelets import KubeletAccess

TOKEN = "the-service-token"
VOLUME_STATS = """\
# TYPE kubelet_volume_stats_capacity_bytes gauge
kubelet_volume_stats_capacity_bytes{namespace="ws",persistentvolumeclaim="home-alice"} 1000
# TYPE kubelet_volume_stats_used_bytes gauge
kubelet_volume_stats_used_bytes{namespace="ws",persistentvolumeclaim="home-alice"} 250
"""
RESOURCE = """\
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="c",namespace="ws",pod="jupyter-alice"} 10 1800000000000
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="c",namespace="ws",pod="jupyter-alice"} 4096 1800000000000
"""


@dataclass
class Kubelet:
    """A TLS server standing for one kubelet: what it was sent, and where it listens."""

    port: int
    seen: list[str | None] = field(default_factory=list)  # Authorization header of each request


class _Recording(web.RequestHandler):
    def initialize(self, kubelet: Kubelet, body: str) -> None:
        self.kubelet, self.body = kubelet, body

    def get(self) -> None:
        self.kubelet.seen.append(self.request.headers.get("Authorization"))
        self.finish(self.body)


@pytest.fixture
def cluster_ca() -> trustme.CA:
    return trustme.CA(organization_name="cluster CA")


@pytest.fixture
async def serve_kubelet() -> AsyncIterator[Callable[[trustme.CA | None, str], Kubelet]]:
    """``serve(ca, host)``: a kubelet with a serving certificate for ``host`` signed by ``ca`` (None: HTTP)."""
    servers: list[HTTPServer] = []

    def serve(ca: trustme.CA | None, host: str = "127.0.0.1") -> Kubelet:
        sock, port = bind_unused_port()
        kubelet = Kubelet(port)
        handlers: list[Any] = [
            (path, _Recording, {"kubelet": kubelet, "body": body})
            for path, body in (("/metrics", VOLUME_STATS), ("/metrics/resource", RESOURCE))
        ]
        context = None
        if ca is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ca.issue_cert(host).configure_cert(context)
        server = HTTPServer(web.Application(handlers), ssl_options=context)
        server.add_sockets([sock])
        servers.append(server)
        return kubelet

    yield serve
    for server in servers:
        server.stop()


@pytest.fixture
async def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster_ca: trustme.CA) -> Path:
    """The service's Kubernetes client configuration: the cluster CA and a token, as a kubeconfig."""
    monkeypatch.setattr(Configuration, "_default", None)  # load_kube_config sets the default: undone after
    cluster = {
        "server": "https://127.0.0.1:6443",
        "certificate-authority-data": base64.b64encode(cluster_ca.cert_pem.bytes()).decode(),
    }
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "svc", "user": {"token": TOKEN}}],
                "contexts": [{"name": "svc@c", "context": {"cluster": "c", "user": "svc"}}],
                "current-context": "svc@c",
            }
        )
    )
    await kube_config.load_kube_config(config_file=str(path))
    return path


def node(port_owner: Kubelet) -> dict[str, Any]:
    return {
        "metadata": {"name": f"node-{port_owner.port}"},
        "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]},
    }


async def volume_stats(kubelet: Kubelet, access: KubeletAccess) -> VolumeStats:
    stats = VolumeStats(access, min_age_s=0)
    await stats.refresh([node(kubelet)])
    return stats


@pytest.mark.usefixtures("kubeconfig")
async def test_a_kubelet_verified_by_the_cluster_ca_gets_the_token_and_answers(
    serve_kubelet: Callable[..., Kubelet], cluster_ca: trustme.CA
) -> None:
    kubelet = serve_kubelet(cluster_ca)
    stats = await volume_stats(kubelet, KubeletAccess(port=kubelet.port))
    assert kubelet.seen == [f"Bearer {TOKEN}"]
    assert stats.failed_nodes == [] and stats.errors == []
    assert stats.usage[("ws", "home-alice")].used == 250


@pytest.mark.usefixtures("kubeconfig")
@pytest.mark.parametrize(
    ("signer", "host", "reason"),
    [
        pytest.param("unknown", "127.0.0.1", "unable to get local issuer certificate", id="unknown-ca"),
        pytest.param("cluster", "10.9.9.9", "IP address mismatch", id="certificate-for-another-node"),
    ],
)
async def test_an_unverified_kubelet_gets_no_token_and_the_node_is_reported(
    serve_kubelet: Callable[..., Kubelet], cluster_ca: trustme.CA, signer: str, host: str, reason: str
) -> None:
    kubelet = serve_kubelet(cluster_ca if signer == "cluster" else trustme.CA(), host)
    stats = await volume_stats(kubelet, KubeletAccess(port=kubelet.port))
    assert kubelet.seen == []  # not even a request without the token: the handshake stopped it
    assert stats.usage == {} and stats.failed_nodes == [f"node-{kubelet.port}"]
    (error,) = stats.errors
    assert "serving certificate not verified against" in error and reason in error
    assert error.endswith("no token sent")


async def test_with_no_ca_to_verify_against_nothing_is_sent(
    serve_kubelet: Callable[..., Kubelet], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client configuration with a token but no CA, and no --kubelet-ca: fail closed, with the reason."""
    conf = Configuration()
    conf.api_key["BearerToken"] = f"Bearer {TOKEN}"
    monkeypatch.setattr(Configuration, "_default", conf)
    kubelet = serve_kubelet(trustme.CA())
    stats = await volume_stats(kubelet, KubeletAccess(port=kubelet.port))
    assert kubelet.seen == []
    (error,) = stats.errors
    assert "no CA to verify kubelet serving certificates" in error and "no token sent" in error


@pytest.mark.usefixtures("kubeconfig")
async def test_an_unreadable_kubelet_ca_file_is_named(
    serve_kubelet: Callable[..., Kubelet], cluster_ca: trustme.CA, tmp_path: Path
) -> None:
    kubelet = serve_kubelet(cluster_ca)
    missing = tmp_path / "kubelet-ca.crt"
    stats = await volume_stats(kubelet, KubeletAccess(port=kubelet.port, ca_file=missing))
    assert kubelet.seen == []
    (error,) = stats.errors
    assert f"cannot read the kubelet CA {missing}" in error and "no token sent" in error


@pytest.mark.usefixtures("kubeconfig")
async def test_an_explicit_kubelet_ca_replaces_the_cluster_ca(
    serve_kubelet: Callable[..., Kubelet], tmp_path: Path
) -> None:
    """Kubelets signed by their own CA (not the cluster's): ``--kubelet-ca`` names it."""
    kubelet_ca = trustme.CA()
    ca_file = tmp_path / "kubelet-ca.crt"
    kubelet_ca.cert_pem.write_to_path(str(ca_file))
    kubelet = serve_kubelet(kubelet_ca)
    stats = await volume_stats(kubelet, KubeletAccess(port=kubelet.port, ca_file=ca_file))
    assert kubelet.seen == [f"Bearer {TOKEN}"] and stats.errors == []


@pytest.mark.usefixtures("kubeconfig")
async def test_plain_http_kubelets_get_no_token(serve_kubelet: Callable[..., Kubelet]) -> None:
    kubelet = serve_kubelet(None)
    stats = await volume_stats(kubelet, KubeletAccess(scheme="http", port=kubelet.port))
    assert kubelet.seen == [None] and stats.errors == []


# ------------------------------------------------------------------ the attribution service's scrape
@pytest.mark.usefixtures("kubeconfig")
async def test_attribution_sends_the_token_only_to_the_verified_kubelet(
    serve_kubelet: Callable[..., Kubelet], cluster_ca: trustme.CA
) -> None:
    good = serve_kubelet(cluster_ca)
    rogue = serve_kubelet(trustme.CA())
    source = KubernetesSource(Settings(kubelet_port=good.port, agent_service=None, timeout_s=5))
    nodes = [NodeInfo(name="good", ready=True, address="127.0.0.1")]
    try:
        usage, errors = await source._kubelets(nodes, now=1.0)
        assert good.seen == [f"Bearer {TOKEN}"] and errors == []
        assert [(u.pod, u.memory_bytes) for u in usage] == [("jupyter-alice", 4096)]
        source.settings = Settings(kubelet_port=rogue.port, agent_service=None, timeout_s=5)
        rogue_nodes = [NodeInfo(name="rogue", ready=True, address="127.0.0.1")]
        usage, errors = await source._kubelets(rogue_nodes, now=2.0)
    finally:
        source.http.close()
    assert rogue.seen == [] and usage == []
    (error,) = errors
    assert error.startswith("kubelet rogue: serving certificate not verified against")
    assert error.endswith("no token sent")


async def test_attribution_with_no_ca_scrapes_nothing_and_says_why(
    serve_kubelet: Callable[..., Kubelet], monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = Configuration()
    conf.api_key["BearerToken"] = f"Bearer {TOKEN}"
    monkeypatch.setattr(Configuration, "_default", conf)
    kubelet = serve_kubelet(trustme.CA())
    source = KubernetesSource(Settings(kubelet_port=kubelet.port, agent_service=None, timeout_s=5))
    try:
        usage, errors = await source._kubelets([NodeInfo(name="n", ready=True, address="127.0.0.1")], now=1.0)
    finally:
        source.http.close()
    assert kubelet.seen == [] and usage == []
    (error,) = errors
    assert (
        error.startswith("kubelet: no CA to verify kubelet serving certificates") and "no token sent" in error
    )
