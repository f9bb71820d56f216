"""Kubernetes NetworkPolicy semantics (networking.k8s.io/v1) as a pure function of a cluster model.

The devcluster stores NetworkPolicies but filters nothing, so what the shipped policies allow is proved
here instead. Each rule below quotes the API's own definition (k8s.io/api/networking/v1/types.go):

- A pod is isolated for a direction only when a policy in its namespace selects it
  (``spec.podSelector``: "An empty selector matches all pods in the policy's namespace") and that
  direction is one of the policy's ``policyTypes``. Then "traffic is allowed ... if the traffic matches
  at least one ingress rule across all of the NetworkPolicy objects whose podSelector matches the pod"
  (the same for egress): policies are a union of allow rules, none can deny.
- ``policyTypes`` unset: "policies that contain an egress section are assumed to affect egress, and
  all policies (whether or not they contain an ingress section) are assumed to affect ingress" (the API
  server's defaulting looks at ``len(egress) != 0``).
- Ingress is also allowed "if the traffic source is the pod's local node".
- A rule matches when both its ports and its peers match; "If this field is empty or missing, this
  rule matches all ports" and likewise all sources / destinations.
- Peers: ``podSelector`` alone selects pods "in the policy's own namespace"; ``namespaceSelector``
  alone "all pods in the namespaces selected"; both together the pods matching ``podSelector`` in
  those namespaces; ``ipBlock`` is a CIDR minus its ``except`` CIDRs. Whether an ipBlock matches pod IPs
  is left to the implementation; this model lets it (the cautious choice for proving denials).
- Ports: ``protocol`` defaults to TCP; no ``port`` "matches all port names and numbers"; ``port`` may be
  a number or a named container port of the destination pod; ``endPort`` makes an inclusive range.
- Label selectors: ``matchLabels`` and ``matchExpressions`` (In, NotIn, Exists, DoesNotExist) ANDed;
  empty matches everything, null (absent where a selector is required) nothing.

Services: NetworkPolicy docs leave open whether a Service's address is rewritten to its endpoint before
or after the policies are applied, so ``may_connect`` says True when either order allows a connection
(use it to prove denials), ``connects`` evaluates after the rewrite, as common CNIs do (use it to prove
that something works).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    ip: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ports: Mapping[str, tuple[int, str]] = field(default_factory=dict)  # named container ports
    node: str = "node-a"


@dataclass(frozen=True)
class Service:
    """A ClusterIP Service: ``ports`` maps the service port to (endpoint, target port)."""

    ip: str
    endpoints: tuple[tuple[Pod | str, int], ...]  # an endpoint is a pod or an address outside the pod network
    port: int
    protocol: str = "TCP"


@dataclass(frozen=True)
class Cluster:
    policies: tuple[Mapping[str, Any], ...]
    pods: tuple[Pod, ...] = ()
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # name -> labels
    services: tuple[Service, ...] = ()
    node_ips: Mapping[str, str] = field(default_factory=dict)  # node name -> address

    def namespace_labels(self, name: str) -> dict[str, str]:
        """A namespace's labels, with the name label the API server sets on every namespace (1.22+)."""
        return {**self.namespaces.get(name, {}), NAME_LABEL: name}

    def pod_at(self, ip: str) -> Pod | None:
        return next((p for p in self.pods if p.ip == ip), None)


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(_expression(e, labels) for e in selector.get("matchExpressions") or [])


def _expression(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise ValueError(f"unknown selector operator {operator!r}")


def policy_types(spec: Mapping[str, Any]) -> frozenset[str]:
    if spec.get("policyTypes"):
        return frozenset(spec["policyTypes"])
    return frozenset({"Ingress", "Egress"} if spec.get("egress") else {"Ingress"})


def in_ip_block(block: Mapping[str, Any], ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    network = ipaddress.ip_network(block["cidr"])
    if address.version != network.version or address not in network:
        return False
    return not any(address in ipaddress.ip_network(e) for e in block.get("except") or [])


def ip_block_reaches(block: Mapping[str, Any], target: str) -> bool:
    """Does the ipBlock match at least one address of the CIDR ``target`` (a set-level check)?"""
    wanted = ipaddress.ip_network(target)
    remaining = [ipaddress.ip_network(block["cidr"])]
    for text in block.get("except") or []:
        cut = ipaddress.ip_network(text)
        left = []
        for net in remaining:
            if net.version != cut.version or not net.overlaps(cut):
                left.append(net)
            elif cut.subnet_of(net):  # type: ignore[arg-type]
                left.extend(net.address_exclude(cut))  # type: ignore[arg-type]
            # else: net lies inside cut, nothing of it is left
        remaining = left
    return any(net.version == wanted.version and net.overlaps(wanted) for net in remaining)  # type: ignore[arg-type]


def _peer_matches(peer: Mapping[str, Any], policy_ns: str, cluster: Cluster, ip: str) -> bool:
    if "ipBlock" in peer:
        if "podSelector" in peer or "namespaceSelector" in peer:
            raise ValueError("an ipBlock peer may not also have a podSelector or namespaceSelector")
        return in_ip_block(peer["ipBlock"], ip)
    if "podSelector" not in peer and "namespaceSelector" not in peer:
        raise ValueError("a peer needs a podSelector, a namespaceSelector or an ipBlock")
    pod = cluster.pod_at(ip)
    if pod is None:
        return False
    if "namespaceSelector" in peer:
        if not selector_matches(peer["namespaceSelector"], cluster.namespace_labels(pod.namespace)):
            return False
    elif pod.namespace != policy_ns:
        return False
    return "podSelector" not in peer or selector_matches(peer["podSelector"], pod.labels)


def _port_matches(entry: Mapping[str, Any], destination: Pod | None, port: int, protocol: str) -> bool:
    if entry.get("protocol", "TCP") != protocol:
        return False
    if "port" not in entry:
        return True
    wanted = entry["port"]
    if isinstance(wanted, str):
        if "endPort" in entry:
            raise ValueError("endPort needs a numeric port")
        named = destination.ports.get(wanted) if destination is not None else None
        return named is not None and named == (port, protocol)
    return wanted <= port <= entry.get("endPort", wanted)


def _rule_matches(
    rule: Mapping[str, Any], peers_key: str, policy_ns: str, cluster: Cluster, conn: _Connection
) -> bool:
    ports = rule.get("ports") or []
    if ports and not any(_port_matches(p, conn.destination, conn.port, conn.protocol) for p in ports):
        return False
    peers = rule.get(peers_key) or []
    return not peers or any(_peer_matches(p, policy_ns, cluster, conn.peer_ip) for p in peers)


@dataclass(frozen=True)
class _Connection:
    peer_ip: str  # the other end: the destination for egress, the source for ingress
    destination: Pod | None  # where named ports are looked up
    port: int
    protocol: str


def _allowed(cluster: Cluster, pod: Pod, direction: str, conn: _Connection) -> bool:
    selecting = [
        p
        for p in cluster.policies
        if p["metadata"]["namespace"] == pod.namespace
        and selector_matches(p["spec"].get("podSelector", {}), pod.labels)
        and direction in policy_types(p["spec"])
    ]
    if not selecting:
        return True  # not isolated for this direction
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    return any(
        _rule_matches(rule, peers_key, p["metadata"]["namespace"], cluster, conn)
        for p in selecting
        for rule in p["spec"].get(key) or []
    )


def egress_allowed(cluster: Cluster, source: Pod, ip: str, port: int, protocol: str = "TCP") -> bool:
    return _allowed(cluster, source, "Egress", _Connection(ip, cluster.pod_at(ip), port, protocol))


def ingress_allowed(
    cluster: Cluster, destination: Pod, source_ip: str, port: int, protocol: str = "TCP"
) -> bool:
    if source_ip == cluster.node_ips.get(destination.node):
        return True  # "OR if the traffic source is the pod's local node"
    return _allowed(cluster, destination, "Ingress", _Connection(source_ip, destination, port, protocol))


def _direct(cluster: Cluster, source: Pod, ip: str, port: int, protocol: str) -> bool:
    if not egress_allowed(cluster, source, ip, port, protocol):
        return False
    destination = cluster.pod_at(ip)
    return destination is None or ingress_allowed(cluster, destination, source.ip, port, protocol)


def _targets(cluster: Cluster, ip: str, port: int, protocol: str) -> Iterable[tuple[str, int]]:
    for service in cluster.services:
        if service.ip == ip and service.port == port and service.protocol == protocol:
            for endpoint, target in service.endpoints:
                yield (endpoint.ip if isinstance(endpoint, Pod) else endpoint), target


def connects(cluster: Cluster, source: Pod, ip: str, port: int, protocol: str = "TCP") -> bool:
    """Can ``source`` open ``ip:port``, the Service address rewritten to an endpoint first?"""
    targets = list(_targets(cluster, ip, port, protocol))
    if not targets:
        return _direct(cluster, source, ip, port, protocol)
    return any(_direct(cluster, source, target, target_port, protocol) for target, target_port in targets)


def may_connect(cluster: Cluster, source: Pod, ip: str, port: int, protocol: str = "TCP") -> bool:
    """Does any conforming order (policy before or after the Service rewrite) let the connection through?"""
    if connects(cluster, source, ip, port, protocol):
        return True
    targets = list(_targets(cluster, ip, port, protocol))
    if not targets or not egress_allowed(cluster, source, ip, port, protocol):
        return False
    for target, target_port in targets:
        pod = cluster.pod_at(target)
        if pod is None or ingress_allowed(cluster, pod, source.ip, target_port, protocol):
            return True
    return False
