"""Services that route: the endpoints controllers and kube-proxy of the simulated cluster.

One ``BackgroundCluster(simulate=True)`` for the module, driven with kubectl; traffic is plain HTTP and
TCP to ClusterIPs (``127.96.0.0/16``, loopback, so the test process reaches them like a pod would).
Pods are cheap ones: lite single-user servers and a small Python TCP echo server.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_devcluster.addresses import instance_from_env, service_cidr
from gpuworkspace_devcluster.defaults import SERVICE_CIDR, ClusterIPAllocator
from gpuworkspace_devcluster.sim.endpoints import endpoint_subsets, find_port, slice_groups
from gpuworkspace_devcluster.testing import BackgroundCluster

from ..conftest import Kubectl
from .test_e2e_pods import apply, eventually, get

pytestmark = pytest.mark.kubectl
NS = "gpu-workspaces"
# a client outside every devcluster instance's ranges (addresses.py)
CLIENT_IP = "127.250.0.1"
LITE = "gpuworkspace.dev/lite-singleuser:latest"
PREFIX = "/user/svc/"
Obj = dict[str, Any]
ECHO = """
import os, socket, threading
srv = socket.create_server((os.environ["POD_IP"], 7007))
def serve(conn, peer):
    with conn:
        while data := conn.recv(65536):
            conn.sendall(f"{peer[0]} {os.environ['POD_IP']}\\n".encode() if data == b"who?\\n" else data)
while True:
    conn, peer = srv.accept()
    threading.Thread(target=serve, args=(conn, peer), daemon=True).start()
"""


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed on this machine")
    state: Path = tmp_path_factory.mktemp("services") / "state"
    with BackgroundCluster(state, simulate=True) as bg:
        yield Kubectl(bg.kubeconfig)


def lite_pod(name: str, app: str, *, port_name: str = "notebook") -> Obj:
    env = [
        {"name": "JUPYTERHUB_SERVICE_URL", "value": f"http://0.0.0.0:8888{PREFIX}"},
        {"name": "JUPYTERHUB_SERVICE_PREFIX", "value": PREFIX},
    ]
    container = {
        "name": "notebook",
        "image": LITE,
        "args": ["jupyterhub-singleuser"],
        "env": env,
        "ports": [{"name": port_name, "containerPort": 8888}],
        "readinessProbe": {"httpGet": {"path": f"{PREFIX}api", "port": 8888}, "periodSeconds": 1},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": app}},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]},
    }


def service(name: str, app: str, port: int, target: int | str, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS, "labels": {"team": "svc-tests"}},
        "spec": {
            "selector": {"app": app},
            "ports": [{"name": "http", "port": port, "targetPort": target}],
            **spec,
        },
    }


def ready_endpoints(kubectl: Kubectl, name: str, count: int = 1) -> Obj:
    def check() -> Obj | None:
        ep = get(kubectl, "endpoints", name)
        addresses = [a for s in ep.get("subsets") or [] for a in s.get("addresses") or []]
        return ep if len(addresses) == count else None

    return eventually(check, 20, f"{count} ready address(es) in Endpoints {name}")


def slices_of(kubectl: Kubectl, name: str) -> list[Obj]:
    out = kubectl("get", "endpointslices", "-n", NS, "-l", f"kubernetes.io/service-name={name}", "-o", "json")
    return json.loads(out.stdout)["items"]


def http(url: str) -> tuple[int, Obj, dict[str, str]]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status, json.loads(resp.read()), dict(resp.headers)


def refused(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=2) as sock:
            sock.settimeout(2)
            return sock.recv(1) == b""  # accepted, then closed or reset
    except (ConnectionRefusedError, ConnectionResetError):
        return True


# ------------------------------------------------------------------------------ pure parts
def test_cluster_ips_come_from_the_loopback_service_range() -> None:
    allocate = ClusterIPAllocator(used={"127.96.0.10"})
    ip = allocate()
    assert ip == "127.96.0.11" and ipaddress.ip_address(ip) in ipaddress.ip_network(SERVICE_CIDR)
    assert ipaddress.IPv4Network(SERVICE_CIDR).subnet_of(ipaddress.IPv4Network("127.0.0.0/8"))


def test_ports_resolve_per_pod_and_readiness_splits_addresses() -> None:
    def pod(name: str, ip: str, ready: bool, ports: list[Obj], **meta: Any) -> Obj:
        conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
        return {
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", **meta},
            "spec": {"nodeName": "cpu-node-a", "containers": [{"name": "c", "ports": ports}]},
            "status": {"phase": "Running", "podIP": ip, "conditions": conditions},
        }

    svc = service("s", "x", 80, "web")
    svc["metadata"]["uid"] = "svc-uid"
    named = [{"name": "web", "containerPort": 8080, "protocol": "TCP"}]
    pods = [
        pod("a", "127.12.0.3", True, named),
        pod("b", "127.12.0.2", False, named),
        pod("c", "127.12.0.4", True, [{"name": "other", "containerPort": 1}]),  # no "web": left out
        pod("d", "127.12.0.5", True, named, deletionTimestamp="2025-01-01T00:00:00Z"),
        pod("e", "", True, named),  # no IP yet
    ]
    assert find_port(pods[0], svc["spec"]["ports"][0]) == 8080
    assert find_port(pods[2], svc["spec"]["ports"][0]) is None
    (subset,) = endpoint_subsets(svc, pods)
    assert [a["ip"] for a in subset["addresses"]] == ["127.12.0.3"]
    assert [a["ip"] for a in subset["notReadyAddresses"]] == ["127.12.0.2"]
    assert subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    (endpoints,) = slice_groups(svc, pods, {"cpu-node-a": "devcluster-a"}).values()
    conditions = {e["targetRef"]["name"]: e["conditions"] for e in endpoints}
    assert conditions == {
        "a": {"ready": True, "serving": True, "terminating": False},
        "b": {"ready": False, "serving": False, "terminating": False},
        "d": {"ready": False, "serving": True, "terminating": True},
    }
    assert endpoints[0]["zone"] == "devcluster-a" and endpoints[0]["nodeName"] == "cpu-node-a"


# ------------------------------------------------------------------------------ end to end
def test_service_routes_http_to_a_ready_pod_and_publishes_endpoints(kubectl: Kubectl) -> None:
    apply(kubectl, lite_pod("web-a", "web"), service("web", "web", 80, "notebook"))
    svc = get(kubectl, "service", "web")
    cluster_ip = svc["spec"]["clusterIP"]
    assert ipaddress.ip_address(cluster_ip) in ipaddress.ip_network(service_cidr(instance_from_env()))
    ep = ready_endpoints(kubectl, "web")
    pod = get(kubectl, "pod", "web-a")
    pod_ip = pod["status"]["podIP"]
    (subset,) = ep["subsets"]
    (address,) = subset["addresses"]
    assert address["ip"] == pod_ip and address["nodeName"] == pod["spec"]["nodeName"]
    assert address["targetRef"] == {
        "kind": "Pod",
        "namespace": NS,
        "name": "web-a",
        "uid": pod["metadata"]["uid"],
    }
    assert subset["ports"] == [{"name": "http", "port": 8888, "protocol": "TCP"}]  # named targetPort resolved
    assert ep["metadata"]["labels"] == {
        "team": "svc-tests",
        "endpoints.kubernetes.io/managed-by": "endpoint-controller",
    }

    (es,) = slices_of(kubectl, "web")
    assert es["metadata"]["name"].startswith("web-") and es["addressType"] == "IPv4"
    assert (
        es["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"]
        == "endpointslice-controller.k8s.io"
    )
    owner = es["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Service", "web", True)
    assert es["ports"] == [{"name": "http", "port": 8888, "protocol": "TCP"}]
    (endpoint,) = es["endpoints"]
    assert endpoint["addresses"] == [pod_ip]
    assert endpoint["conditions"] == {"ready": True, "serving": True, "terminating": False}
    assert endpoint["targetRef"]["name"] == "web-a" and endpoint["nodeName"] == pod["spec"]["nodeName"]

    status, body, headers = eventually(
        lambda: http(f"http://{cluster_ip}:80{PREFIX}api"), 10, "HTTP via the ClusterIP"
    )
    assert status == 200 and "version" in body and headers["X-JupyterHub-Version"]

    table = kubectl("get", "endpoints", "web", "-n", NS).stdout
    assert f"{pod_ip}:8888" in table
    table = kubectl("get", "endpointslices", "-n", NS, "-l", "kubernetes.io/service-name=web").stdout
    assert "IPv4" in table and "8888" in table and pod_ip in table

    # the pod goes: endpoints empty, the ClusterIP refuses connections
    kubectl("delete", "pod", "web-a", "-n", NS, "--wait=false")
    eventually(lambda: not get(kubectl, "endpoints", "web").get("subsets"), 20, "Endpoints emptied")
    assert "<none>" in kubectl("get", "endpoints", "web", "-n", NS).stdout
    (placeholder,) = eventually(lambda: [s for s in slices_of(kubectl, "web") if not s.get("endpoints")], 10)
    assert "ports" not in placeholder  # the placeholder slice: no endpoints, no ports
    eventually(lambda: refused(cluster_ip, 80), 10, "connection refused without endpoints")

    # the Service goes: its Endpoints and slices with it, nothing listens
    kubectl("delete", "service", "web", "-n", NS)
    eventually(lambda: not slices_of(kubectl, "web"), 10, "EndpointSlices garbage-collected")
    assert kubectl("get", "endpoints", "web", "-n", NS, check=False).returncode != 0
    assert refused(cluster_ip, 80)


def test_tcp_streams_both_ways_round_robin_and_keep_the_client_ip(kubectl: Kubectl) -> None:
    def echo_pod(name: str) -> Obj:
        container = {
            "name": "echo",
            "image": "python:3.12",
            "command": ["python3", "-c", ECHO],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "ports": [{"name": "echo", "containerPort": 7007}],
            "readinessProbe": {"tcpSocket": {"port": 7007}, "periodSeconds": 1},
        }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": "echo"}},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]},
        }

    apply(kubectl, echo_pod("echo-a"), echo_pod("echo-b"), service("echo", "echo", 7000, 7007))
    cluster_ip = get(kubectl, "service", "echo")["spec"]["clusterIP"]
    ready_endpoints(kubectl, "echo", 2)
    pod_ips = {get(kubectl, "pod", n)["status"]["podIP"] for n in ("echo-a", "echo-b")}

    def exchange() -> tuple[str, str]:
        with socket.create_connection((cluster_ip, 7000), timeout=5, source_address=(CLIENT_IP, 0)) as sock:
            for i in range(3):  # several round trips on one connection
                sock.sendall(f"ping {i}\n".encode())
                assert sock.recv(100) == f"ping {i}\n".encode()
            sock.sendall(b"who?\n")
            client, server = sock.recv(100).decode().split()
            sock.sendall(b"x" * 200_000)
            sock.shutdown(socket.SHUT_WR)  # half-close: the rest of the echo still comes back
            got = b""
            while chunk := sock.recv(65536):
                got += chunk
            assert got == b"x" * 200_000
            return client, server

    seen = [eventually(exchange, 10, "echo via the ClusterIP") for _ in range(4)]
    assert {client for client, _ in seen} == {CLIENT_IP}  # the pod sees the client's address (no SNAT)
    assert {server for _, server in seen} == pod_ips  # round-robin over both pods
    kubectl("delete", "service", "echo", "-n", NS)
    kubectl("delete", "pod", "echo-a", "echo-b", "-n", NS, "--wait=false")


def test_a_port_conflict_is_reported_and_retried_without_harm(kubectl: Kubectl) -> None:
    ip = str(ipaddress.ip_network(service_cidr(instance_from_env()))[250 * 256 + 1])  # .250.1 of the range
    blocker = socket.create_server((ip, 8080))
    try:
        apply(kubectl, lite_pod("busy-a", "busy"), service("busy", "busy", 8080, 8888, clusterIP=ip))
        ready_endpoints(kubectl, "busy")

        def warned() -> bool:
            selector = "involvedObject.kind=Service,involvedObject.name=busy,reason=FailedToListen"
            out = kubectl("get", "events", "-n", NS, "--field-selector", selector, "-o", "json").stdout
            items = json.loads(out)["items"]
            return bool(items) and items[0]["type"] == "Warning" and "address in use" in items[0]["message"]

        eventually(warned, 10, "a FailedToListen warning")
    finally:
        blocker.close()
    status, _, _ = eventually(
        lambda: http(f"http://{ip}:8080{PREFIX}api"), 10, "the listener after the retry"
    )
    assert status == 200
    kubectl("delete", "service", "busy", "-n", NS)
    kubectl("delete", "pod", "busy-a", "-n", NS, "--wait=false")
