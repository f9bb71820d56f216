"""What the shipped NetworkPolicies let a workspace do, proved with the evaluator over a model cluster.

The policies are the files under helm-values/extra-manifests/ (50-networkpolicies.yaml is generated
from hub_config/catalog: checked first), plus the hub's and the proxy's rules from values.yaml (z2jh
adds its own on top; leaving them out only makes the model stricter). The workspaces' labels come
from the real builders: ``build_workspace_pod`` for containers, ``build_vm``'s template (KubeVirt copies
it onto the virt-launcher pod) for VMs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuworkspace_spawner.catalog import load_catalog
from gpuworkspace_spawner.catalog.network import ALWAYS_BLOCKED, NetworkProfile, NetworkSettings, parse_cidr
from gpuworkspace_spawner.manifests.names import WorkspaceContext, WorkspaceIdentity
from gpuworkspace_spawner.manifests.networkpolicy import build_network_policies, render_network_policies
from gpuworkspace_spawner.manifests.pod import build_workspace_pod
from gpuworkspace_spawner.manifests.vm import build_vm, vm_names
from tests.unit.networkpolicy.evaluator import (
    Cluster,
    Pod,
    Service,
    connects,
    ip_block_reaches,
    may_connect,
    selector_matches,
)

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = REPO / "helm-values" / "extra-manifests"
GENERATED = MANIFESTS / "50-networkpolicies.yaml"
CATALOG = load_catalog(REPO / "hub_config" / "catalog")
VALUES = yaml.safe_load((REPO / "helm-values" / "values.yaml").read_text())
GOLDEN_POD = yaml.safe_load((REPO / "tests" / "unit" / "golden" / "kubespawner-pod.yaml").read_text())
WS_NS, HUB_NS = "gpu-workspaces", "jhub"

API_SERVER = "192.168.49.2"  # the control plane's address: listed in the demo catalog's blockedCidrs
NODE = "192.168.49.3"
METADATA, CGNAT, INTERNET, GITHUB = "169.254.169.254", "100.64.0.1", "1.1.1.1", "140.82.114.4"


def shipped_policies() -> list[dict[str, Any]]:
    docs = [d for p in sorted(MANIFESTS.rglob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    return [d for d in docs if d["kind"] == "NetworkPolicy"]


def z2jh_policies() -> list[dict[str, Any]]:
    """The hub's and proxy's rules this package sets in values.yaml, as z2jh renders them (the part we add)."""

    def selecting(component: str, spec: dict[str, Any]) -> dict[str, Any]:
        labels = {"app": "jupyterhub", "component": component, "release": "jhub"}
        return {
            "metadata": {"name": component, "namespace": HUB_NS},
            "spec": {"podSelector": {"matchLabels": labels}, **spec},
        }

    hub = VALUES["hub"]["networkPolicy"]
    proxy = VALUES["proxy"]["chp"]["networkPolicy"]
    return [
        selecting(
            "hub", {"policyTypes": ["Ingress", "Egress"], "ingress": hub["ingress"], "egress": hub["egress"]}
        ),
        selecting("proxy", {"policyTypes": ["Egress"], "egress": proxy["egress"]}),
    ]


def _context(user: str, slug: str) -> WorkspaceContext:
    profile = CATALOG.get(slug)
    assert profile is not None, slug
    identity = WorkspaceIdentity(user=user, server="", namespace=WS_NS, release="jhub")
    home = vm_names(identity).disk if profile.runtime == "vm" else f"home-{user}"
    return WorkspaceContext(identity, profile, CATALOG.version, "jupyterlab", home)


def container(user: str, slug: str, ip: str) -> Pod:
    pod = build_workspace_pod(GOLDEN_POD, _context(user, slug))
    ports = {
        p["name"]: (p["containerPort"], p.get("protocol", "TCP"))
        for c in pod["spec"]["containers"]
        for p in c.get("ports", [])
    }
    return Pod(f"jupyter-{user}", WS_NS, ip, pod["metadata"]["labels"], ports)


def launcher(user: str, slug: str, ip: str) -> Pod:
    ws = _context(user, slug)
    names = vm_names(ws.identity)
    labels = build_vm(ws, names)["spec"]["template"]["metadata"]["labels"]
    kubevirt = {"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": names.vm}
    return Pod(f"virt-launcher-{names.vm}", WS_NS, ip, {**labels, **kubevirt}, {})


ALICE = container("alice", "cpu-small", "10.244.1.20")  # no network profile
BOB = container("bob", "gpu-exclusive", "10.244.2.21")  # git-registry-storage
CAROL = launcher("carol", "vm-workstation", "10.244.1.22")  # a VM, internet-https
WORKSPACES = (ALICE, BOB, CAROL)
HUB = Pod(
    "hub",
    HUB_NS,
    "10.244.0.10",
    {"app": "jupyterhub", "component": "hub", "release": "jhub"},
    {"http": (8081, "TCP"), "culler": (10103, "TCP")},
)
ATTRIBUTION = Pod(
    "gpuworkspace-attribution",
    HUB_NS,
    "10.244.0.13",
    {
        "app.kubernetes.io/name": "gpuworkspace-attribution",
        "app.kubernetes.io/part-of": "gpuworkspace-spawner",
    },
    {"http": (10102, "TCP")},
)
PROXY = Pod("proxy", HUB_NS, "10.244.0.11", {"app": "jupyterhub", "component": "proxy", "release": "jhub"})
# another pod of the release, labelled for network access to servers like the proxy, but neither hub nor proxy
SCHEDULER = Pod(
    "user-scheduler",
    HUB_NS,
    "10.244.0.12",
    {
        "app": "jupyterhub",
        "component": "user-scheduler",
        "release": "jhub",
        "hub.jupyter.org/network-access-singleuser": "true",
    },
)
DNS = Pod(
    "coredns",
    "kube-system",
    "10.244.0.5",
    {"k8s-app": "kube-dns"},
    {"dns": (53, "UDP"), "dns-tcp": (53, "TCP")},
)
IMPORTER = Pod("cdi-upload-carol", WS_NS, "10.244.1.30", {"app": "containerized-data-importer"})
SERVICES = (
    Service("10.96.0.1", ((API_SERVER, 6443),), 443),  # default/kubernetes
    Service("10.96.0.10", ((DNS, 53),), 53, "UDP"),
    Service("10.96.0.10", ((DNS, 53),), 53, "TCP"),
    Service("10.96.12.34", ((HUB, 8081),), 8081),  # jhub/hub
    Service("10.96.12.34", ((HUB, 10103),), 10103),  # jhub/hub, extraPorts: the culler
    Service("10.96.12.35", ((ATTRIBUTION, 10102),), 10102),  # jhub/gpuworkspace-attribution
)
WORLD = Cluster(
    policies=(*shipped_policies(), *z2jh_policies()),
    pods=(*WORKSPACES, HUB, PROXY, ATTRIBUTION, SCHEDULER, DNS, IMPORTER),
    services=SERVICES,
    node_ips={"node-a": NODE},
)
ids = pytest.mark.parametrize("ws", WORKSPACES, ids=lambda p: p.name)


def test_the_shipped_file_is_what_the_builder_renders_from_the_demo_catalog() -> None:
    assert GENERATED.read_text() == render_network_policies(CATALOG.network), (
        "regenerate: python -m gpuworkspace_spawner.catalog hub_config/catalog --network-policies "
        "> helm-values/extra-manifests/50-networkpolicies.yaml"
    )


def test_the_model_uses_the_shipped_labels() -> None:
    assert BOB.labels["gpuworkspace.dev/network-profile"] == "git-registry-storage"
    assert CAROL.labels["gpuworkspace.dev/network-profile"] == "internet-https"
    assert "gpuworkspace.dev/network-profile" not in ALICE.labels
    deny = next(p for p in WORLD.policies if p["metadata"]["name"] == "gpuworkspace-default-deny")
    assert all(selector_matches(deny["spec"]["podSelector"], p.labels) for p in (*WORKSPACES, IMPORTER))


@ids
@pytest.mark.parametrize("protocol", ["UDP", "TCP"])
def test_dns_only_through_the_cluster_dns(ws: Pod, protocol: str) -> None:
    assert connects(WORLD, ws, "10.96.0.10", 53, protocol)
    for resolver in ("8.8.8.8", "10.0.0.2", "192.168.1.1", "172.16.0.2", METADATA):
        assert not may_connect(WORLD, ws, resolver, 53, protocol), resolver


@ids
@pytest.mark.parametrize(
    ("address", "port"),
    [
        pytest.param(METADATA, 80, id="metadata"),
        pytest.param(CGNAT, 443, id="cgnat"),
        pytest.param("10.96.0.1", 443, id="apiserver-service"),
        pytest.param(API_SERVER, 6443, id="apiserver-endpoint"),
        pytest.param(API_SERVER, 443, id="apiserver-endpoint-443"),
        pytest.param(NODE, 10250, id="kubelet"),
        pytest.param(INTERNET, 80, id="internet-http"),
        pytest.param(HUB.ip, 8000, id="hub-other-port"),
        pytest.param(PROXY.ip, 8000, id="proxy"),
    ],
)
def test_blocked_destinations(ws: Pod, address: str, port: int) -> None:
    assert not may_connect(WORLD, ws, address, port)


@ids
def test_the_hub_api_is_reachable(ws: Pod) -> None:
    assert connects(WORLD, ws, "10.96.12.34", 8081)
    assert connects(WORLD, ws, HUB.ip, 8081)


@ids
def test_only_the_hub_and_the_proxy_reach_the_server(ws: Pod) -> None:
    assert connects(WORLD, PROXY, ws.ip, 8888)
    assert connects(WORLD, HUB, ws.ip, 8888)
    assert not may_connect(WORLD, SCHEDULER, ws.ip, 8888)
    assert not may_connect(WORLD, PROXY, ws.ip, 22)
    assert not may_connect(WORLD, IMPORTER, ws.ip, 8888)


@pytest.mark.parametrize("port", [8888, 22, 443])
def test_workspaces_never_reach_each_other(port: int) -> None:
    for source in WORKSPACES:
        for target in WORKSPACES:
            if source is not target:
                assert not may_connect(WORLD, source, target.ip, port), (source.name, target.name)


def test_internet_https_reaches_public_addresses_on_443_only() -> None:
    assert connects(WORLD, CAROL, INTERNET, 443)
    assert connects(WORLD, CAROL, GITHUB, 443)
    assert not may_connect(WORLD, CAROL, INTERNET, 80)
    for private in ("10.20.0.5", "172.16.5.5", "192.168.7.7", API_SERVER, METADATA, CGNAT):
        assert not may_connect(WORLD, CAROL, private, 443), private
    assert not may_connect(WORLD, ALICE, INTERNET, 443)
    assert not may_connect(WORLD, BOB, INTERNET, 443)


def _samples(cidr: str) -> list[str]:
    net = parse_cidr(cidr)
    return [str(net.network_address + 1), str(net.broadcast_address - 1)]


def _outside(cidr: str) -> str:
    net = parse_cidr(cidr)
    return str(net.broadcast_address + 1)


def _profile_cases() -> list[Any]:
    cases = []
    for name, profile in sorted(CATALOG.network.profiles.items()):
        for rule in profile.egress:
            for cidr in rule.cidrs:
                for address in _samples(cidr):
                    if any(
                        parse_cidr(e).overlaps(parse_cidr(address))
                        for e in (*rule.excepts, *CATALOG.network.all_blocked)
                    ):
                        continue
                    for port in rule.ports:
                        cases.append(
                            pytest.param(
                                name, address, port.port, port.protocol, id=f"{name}-{address}-{port.port}"
                            )
                        )
    return cases


WORKSPACE_BY_PROFILE = {"git-registry-storage": BOB, "internet-https": CAROL}


def test_every_demo_network_profile_has_a_workspace_in_the_model() -> None:
    assert set(WORKSPACE_BY_PROFILE) == set(CATALOG.network.profiles)


@pytest.mark.parametrize(("profile", "address", "port", "protocol"), _profile_cases())
def test_a_profile_reaches_its_listed_destinations_and_only_those(
    profile: str, address: str, port: int, protocol: str
) -> None:
    ws = WORKSPACE_BY_PROFILE[profile]
    assert connects(WORLD, ws, address, port, protocol)
    assert not may_connect(WORLD, ALICE, address, port, protocol)  # no profile: nothing
    listed = {p.port for r in CATALOG.network.profiles[profile].egress for p in r.ports}
    unlisted = next(p for p in range(1, 65536) if p not in listed)
    assert not may_connect(WORLD, ws, address, unlisted, protocol)


def test_git_registry_storage_is_exactly_its_allow_list() -> None:
    assert connects(WORLD, BOB, GITHUB, 22)
    assert connects(WORLD, BOB, "10.20.0.9", 443)  # the internal registry
    assert connects(WORLD, BOB, "10.30.0.4", 7480)  # the Ceph object gateway
    assert not may_connect(WORLD, BOB, "10.30.0.4", 22)
    assert not may_connect(WORLD, BOB, "10.20.1.9", 443)  # next to the registry's /24
    assert not may_connect(WORLD, BOB, _outside("140.82.112.0/20"), 443)


BLOCKED = sorted(
    {*CATALOG.network.all_blocked, f"{METADATA}/32", "100.64.0.0/10", f"{API_SERVER}/32", "10.96.0.1/32"}
)


@pytest.mark.parametrize("blocked", BLOCKED)
def test_no_allowed_cidr_covers_a_blocked_address(blocked: str) -> None:
    """Set-level, for every address at once: no ipBlock a workspace's egress may use overlaps ``blocked``."""
    for policy in WORLD.policies:
        if policy["metadata"]["namespace"] != WS_NS:
            continue
        for rule in policy["spec"].get("egress") or []:
            assert rule.get("to"), f"{policy['metadata']['name']}: a rule without 'to' allows every address"
            for peer in rule["to"]:
                if "ipBlock" in peer:
                    assert not ip_block_reaches(peer["ipBlock"], blocked), (policy["metadata"]["name"], peer)


def test_the_always_blocked_ranges_cover_the_metadata_servers() -> None:
    always = [parse_cidr(c) for c, _ in ALWAYS_BLOCKED]
    for address in (f"{METADATA}/32", "fd00:ec2::254/128", "100.64.0.0/10"):
        net = parse_cidr(address)
        assert any(net.version == a.version and net.subnet_of(a) for a in always), address  # type: ignore[arg-type]


def test_without_the_cluster_ranges_in_blocked_cidrs_the_api_server_would_be_reachable() -> None:
    """The proof can fail: an internet profile in a catalog that forgot its blockedCidrs opens the API server."""
    internet = CATALOG.network.profiles["internet-https"]
    careless = NetworkSettings(
        blocked_cidrs=(),
        profiles={
            "internet-https": NetworkProfile(
                "internet-https",
                egress=tuple(
                    type(rule)(cidrs=rule.cidrs, ports=rule.ports, excepts=()) for rule in internet.egress
                ),
            )
        },
    )
    world = Cluster((*build_network_policies(careless), *z2jh_policies()), WORLD.pods, services=SERVICES)
    assert may_connect(world, CAROL, "10.96.0.1", 443)  # policy applied before the Service rewrite
    assert may_connect(world, CAROL, API_SERVER, 443)  # a managed control plane listening on 443
    assert not may_connect(world, CAROL, METADATA, 443)  # always blocked all the same


def test_other_pods_of_the_workspace_namespace_are_isolated_both_ways() -> None:
    """Default deny covers pods that are not workspaces (a CDI upload pod, anything else created there)."""
    for address, port, protocol in ((INTERNET, 443, "TCP"), ("10.96.0.10", 53, "UDP"), (HUB.ip, 8081, "TCP")):
        assert not may_connect(WORLD, IMPORTER, address, port, protocol), address
    for source in (HUB, PROXY, ALICE):
        assert not may_connect(WORLD, source, IMPORTER.ip, 8443), source.name


STATUS_EGRESS = "gpuworkspace-workspaces-to-status"  # extra-manifests/52-workspace-status-egress.yaml


@ids
def test_the_jupyterlab_extension_reaches_the_attribution_service_and_the_culler(ws: Pod) -> None:
    """Its server part asks both with the server's own token (docs/reference/jupyterlab-extension.md)."""
    assert connects(WORLD, ws, "10.96.12.35", 10102)  # GPUWS_ATTRIBUTION_URL
    assert connects(WORLD, ws, "10.96.12.34", 10103)  # GPUWS_CULLER_URL
    for port in (8080, 9090, 22):  # nothing else of either pod
        assert not may_connect(WORLD, ws, ATTRIBUTION.ip, port), port
    assert not may_connect(WORLD, ws, HUB.ip, 8001)
    assert not may_connect(WORLD, IMPORTER, ATTRIBUTION.ip, 10102)  # not workspaces: still nothing


def _without(world: Cluster, name: str, edit: Any = None) -> Cluster:
    """``world`` with policy ``name`` removed, or replaced by ``edit(policy)``."""
    policies = []
    for policy in world.policies:
        if policy["metadata"]["name"] != name:
            policies.append(policy)
        elif edit is not None:
            policies.append(edit(policy))
    return Cluster(tuple(policies), world.pods, services=world.services, node_ips=world.node_ips)


def _first_peer_only(policy: Mapping[str, Any]) -> dict[str, Any]:
    """The policy with only the first peer of its first ingress rule (the proxy, before the additions)."""
    spec = dict(policy["spec"])
    first, *rest = spec["ingress"]
    spec["ingress"] = [{**first, "from": first["from"][:1]}, *rest]
    return {**policy, "spec": spec}


@pytest.mark.parametrize(
    ("policy", "edit", "port"),
    [
        (STATUS_EGRESS, None, 10102),
        (STATUS_EGRESS, None, 10103),
        ("gpuworkspace-attribution", _first_peer_only, 10102),
        ("hub", _first_peer_only, 10103),
    ],
    ids=["egress-attribution", "egress-culler", "attribution-ingress", "hub-ingress"],
)
def test_each_rule_for_the_extension_is_needed(policy: str, edit: Any, port: int) -> None:
    """Least privilege: without the egress policy, or without the workspace peer of either ingress rule,
    the path is closed."""
    address = {10102: "10.96.12.35", 10103: "10.96.12.34"}[port]
    assert connects(WORLD, ALICE, address, port)
    assert not connects(_without(WORLD, policy, edit), ALICE, address, port)
