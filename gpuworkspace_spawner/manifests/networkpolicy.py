"""The workspace namespace's NetworkPolicies, built from the catalog's network profiles.

Pure. NetworkPolicies only allow (k8s.io/api/networking/v1: traffic to or from a selected pod is allowed
when it matches at least one rule of any policy selecting the pod), so the namespace gets:

- ``gpuworkspace-default-deny``: selects every pod, Ingress and Egress, no rule: nothing in or out
  unless another policy allows it;
- ``gpuworkspace-workspaces``: every workspace (pods and VM launcher pods carry z2jh's
  ``component: singleuser-server``) accepts the hub and the proxy on the server port, and may call the
  hub API and the cluster DNS;
- ``gpuworkspace-network-<profile>`` per catalog network profile: egress to exactly its allow-list,
  for workspaces labelled ``gpuworkspace.dev/network-profile: <profile>``.

Every allowed CIDR gets the blocked ranges it contains as ``except`` entries (the catalog refuses a
CIDR inside one), so no rule covers the metadata server, ``100.64.0.0/10`` or the cluster's ranges.
``render_network_policies`` writes the file shipped as ``helm-values/extra-manifests/50-networkpolicies.yaml``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

import yaml

from gpuworkspace_spawner.catalog.network import EgressAllow, NetworkProfile, NetworkSettings, parse_cidr
from gpuworkspace_spawner.manifests.names import LABEL_NETWORK_PROFILE, label_value

SERVER_PORT = 8888  # a container's notebook-port and a VM guest's server (manifests/vm.py NOTEBOOK_PORT)
HUB_API_PORT = 8081
DNS_PORT = 53
PART_OF = {"app.kubernetes.io/part-of": "gpuworkspace-spawner"}
WORKSPACE_LABELS = {"app": "jupyterhub", "component": "singleuser-server"}
CLUSTER_DNS_LABELS = {"k8s-app": "kube-dns"}  # CoreDNS keeps kube-dns's label (kubeadm, EKS, GKE, AKS)
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace since Kubernetes 1.22
GENERATED_HEADER = """\
# Generated from the catalog's network profiles; do not edit. Regenerate after changing the catalog's
# network section (tests/unit/networkpolicy checks this file against hub_config/catalog):
#   python -m gpuworkspace_spawner.catalog hub_config/catalog --network-policies \\
#       > helm-values/extra-manifests/50-networkpolicies.yaml
# Default deny in and out for every pod of the workspace namespace; workspaces (pods and VM launcher
# pods) accept the hub and proxy on the server port and reach the hub API and the cluster DNS; each
# network profile adds its egress allow-list. Metadata servers, 100.64.0.0/10 and the catalog's
# blockedCidrs (the API server, the Service and Pod ranges) are an `except` of every allowed CIDR.
"""


@dataclass(frozen=True)
class PolicyScope:
    """Where the policies go and whom they trust: the workspace namespace, the hub's namespace and release."""

    namespace: str = "gpu-workspaces"
    hub_namespace: str = "jhub"
    release: str = "jhub"
    dns_namespace: str = "kube-system"


def _policy(scope: PolicyScope, name: str, selector: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": scope.namespace, "labels": dict(PART_OF)},
        "spec": {"podSelector": {"matchLabels": selector} if selector else {}, **spec},
    }


def _in_namespace(namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}},
        "podSelector": {"matchLabels": labels},
    }


def _z2jh_pod(scope: PolicyScope, component: str) -> dict[str, Any]:
    """z2jh's hub or proxy pod: its chart labels (``component``, ``app``, ``release``) in its namespace."""
    labels = {"app": "jupyterhub", "component": component, "release": scope.release}
    return _in_namespace(scope.hub_namespace, labels)


def build_default_deny(scope: PolicyScope) -> dict[str, Any]:
    return _policy(scope, "gpuworkspace-default-deny", {}, {"policyTypes": ["Ingress", "Egress"]})


def build_workspace_policy(scope: PolicyScope) -> dict[str, Any]:
    """Hub and proxy in on the server port; out to the hub API and the cluster DNS (UDP and TCP)."""
    hub, proxy = _z2jh_pod(scope, "hub"), _z2jh_pod(scope, "proxy")
    dns = _in_namespace(scope.dns_namespace, dict(CLUSTER_DNS_LABELS))
    spec = {
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [hub, proxy], "ports": [{"port": SERVER_PORT, "protocol": "TCP"}]}],
        "egress": [
            {"to": [_z2jh_pod(scope, "hub")], "ports": [{"port": HUB_API_PORT, "protocol": "TCP"}]},
            {"to": [dns], "ports": [{"port": DNS_PORT, "protocol": p} for p in ("UDP", "TCP")]},
        ],
    }
    return _policy(scope, "gpuworkspace-workspaces", dict(WORKSPACE_LABELS), spec)


def ip_block(cidr: str, excepts: tuple[str, ...], blocked: tuple[str, ...]) -> dict[str, Any]:
    """``cidr`` minus the excepts and blocked ranges strictly inside it (merged, sorted)."""
    network = parse_cidr(cidr)
    inside = [
        net
        for text in (*excepts, *blocked)
        if (net := parse_cidr(text)).version == network.version and net != network and net.subnet_of(network)  # type: ignore[arg-type]
    ]
    if any(network.version == b.version and network.subnet_of(b) for b in map(parse_cidr, blocked)):  # type: ignore[arg-type]
        raise ValueError(f"{cidr} lies inside a blocked range")  # the catalog refuses this
    merged = sorted(ipaddress.collapse_addresses(inside))  # type: ignore[type-var]
    block: dict[str, Any] = {"cidr": network.with_prefixlen}
    if merged:
        block["except"] = [net.with_prefixlen for net in merged]
    return block


def _egress_rule(allow: EgressAllow, blocked: tuple[str, ...]) -> dict[str, Any]:
    ports = []
    for port in allow.ports:
        entry: dict[str, Any] = {"port": port.port, "protocol": port.protocol}
        if port.end_port is not None and port.end_port != port.port:
            entry["endPort"] = port.end_port
        ports.append(entry)
    peers = [{"ipBlock": ip_block(cidr, allow.excepts, blocked)} for cidr in allow.cidrs]
    return {"to": peers, "ports": ports}


def build_profile_policy(
    scope: PolicyScope, profile: NetworkProfile, blocked: tuple[str, ...]
) -> dict[str, Any]:
    """Egress to the profile's allow-list, for workspaces labelled with the profile."""
    selector = {**WORKSPACE_LABELS, LABEL_NETWORK_PROFILE: label_value(profile.name)}
    spec = {"policyTypes": ["Egress"], "egress": [_egress_rule(a, blocked) for a in profile.egress]}
    policy = _policy(scope, f"gpuworkspace-network-{profile.name}", selector, spec)
    if profile.description:
        policy["metadata"]["annotations"] = {"gpuworkspace.dev/description": profile.description}
    return policy


def build_network_policies(
    network: NetworkSettings, scope: PolicyScope | None = None
) -> list[dict[str, Any]]:
    """Default deny, the workspaces' baseline, then one policy per network profile (by name)."""
    scope = scope or PolicyScope()
    blocked = network.all_blocked
    profiles = [build_profile_policy(scope, network.profiles[n], blocked) for n in sorted(network.profiles)]
    return [build_default_deny(scope), build_workspace_policy(scope), *profiles]


def render_network_policies(network: NetworkSettings, scope: PolicyScope | None = None) -> str:
    """The policies as one multi-document YAML file with the generated-file header."""
    documents = build_network_policies(network, scope)
    body = yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False, width=110)
    return GENERATED_HEADER + body
