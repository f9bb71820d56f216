"""Network profiles: the catalog's egress allow-lists, and the addresses no allow-list may ever open.

Pure. The WorkspaceCatalog document's ``network`` section names profiles; a WorkspaceProfile picks one
with ``security.networkProfile``. ``manifests/networkpolicy.py`` renders them as NetworkPolicies in a
namespace that denies all ingress and egress by default, so a destination is reachable only when an
allow-list names it. What no allow-list may name:

- ``ALWAYS_BLOCKED``: link-local (the cloud metadata servers at ``169.254.169.254`` and
  ``fd00:ec2::254``, node-local link addresses) and ``100.64.0.0/10`` (carrier-grade NAT, where some
  clouds and CNIs put node and metadata services);
- the catalog's ``network.blockedCidrs``: the cluster's own ranges (the API server's addresses, the
  Service and Pod ranges), which only the operator knows.

A rule whose CIDR contains one of them gets it as an ``except`` entry; a rule whose CIDR lies inside
one of them is an error. The checks here run on the schema-valid ``spec`` of the WorkspaceCatalog
document and yield ``(field, message)`` like ``checks.py``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

Protocol = Literal["TCP", "UDP", "SCTP"]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Finding = tuple[str, str]

ALWAYS_BLOCKED: tuple[tuple[str, str], ...] = (
    ("169.254.0.0/16", "link-local: the cloud metadata server 169.254.169.254"),
    ("100.64.0.0/10", "carrier-grade NAT: node and metadata services on some clouds"),
    ("fe80::/10", "IPv6 link-local"),
    ("fd00:ec2::254/128", "the IPv6 cloud metadata server"),
)


@dataclass(frozen=True)
class PortRange:
    """One destination port (``end_port``: the last of a range), as a NetworkPolicyPort."""

    port: int
    end_port: int | None = None
    protocol: Protocol = "TCP"


@dataclass(frozen=True)
class EgressAllow:
    """Destinations ``cidrs`` minus ``excepts``, on ``ports`` only."""

    cidrs: tuple[str, ...]
    ports: tuple[PortRange, ...]
    excepts: tuple[str, ...] = ()


@dataclass(frozen=True)
class NetworkProfile:
    name: str
    description: str = ""
    egress: tuple[EgressAllow, ...] = ()


@dataclass(frozen=True)
class NetworkSettings:
    """The catalog's ``network`` section (empty: no profiles, nothing blocked beyond ALWAYS_BLOCKED)."""

    blocked_cidrs: tuple[str, ...] = ()
    profiles: Mapping[str, NetworkProfile] = field(default_factory=dict)

    @property
    def all_blocked(self) -> tuple[str, ...]:
        """Every range no allow-list may open: ALWAYS_BLOCKED, then the catalog's."""
        return tuple(cidr for cidr, _ in ALWAYS_BLOCKED) + self.blocked_cidrs


def parse_cidr(text: str) -> Network:
    """``10.0.0.0/8`` (a bare address is a /32 or /128); ValueError with a message for people."""
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        try:
            loose = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise ValueError(f"{text!r} is not a CIDR (like 10.0.0.0/8 or 2001:db8::/32)") from exc
        raise ValueError(f"{text!r} has host bits set; the network is {loose.with_prefixlen}") from exc


def _within(inner: Network, outer: Network) -> bool:
    return inner.version == outer.version and inner.subnet_of(outer)  # type: ignore[arg-type]


def _parsed(items: list[Any], where: str) -> Iterator[tuple[str, Network | None, str | None]]:
    for index, text in enumerate(items):
        try:
            yield f"{where}[{index}]", parse_cidr(str(text)), None
        except ValueError as exc:
            yield f"{where}[{index}]", None, str(exc)


def _blocked(spec: Mapping[str, Any]) -> tuple[list[Finding], list[tuple[Network, str]]]:
    findings: list[Finding] = []
    blocked = [(parse_cidr(cidr), why + " (always blocked)") for cidr, why in ALWAYS_BLOCKED]
    for where, net, problem in _parsed(spec.get("blockedCidrs", []), "spec.network.blockedCidrs"):
        if net is None:
            findings.append((where, str(problem)))
        else:
            blocked.append((net, f"listed in spec.network.blockedCidrs ({net.with_prefixlen})"))
    return findings, blocked


def _rule_findings(
    rule: Mapping[str, Any], where: str, blocked: list[tuple[Network, str]]
) -> Iterator[Finding]:
    cidrs = []
    for path, net, problem in _parsed(rule.get("cidrs", []), f"{where}.cidrs"):
        if net is None:
            yield path, str(problem)
            continue
        cidrs.append(net)
        for outer, why in blocked:
            if _within(net, outer):
                yield (
                    path,
                    f"{net.with_prefixlen} lies inside {outer.with_prefixlen}, which no profile may reach: {why}",
                )
    for path, net, problem in _parsed(rule.get("except", []), f"{where}.except"):
        if net is None:
            yield path, str(problem)
        elif not any(_within(net, c) and net != c for c in cidrs):
            yield path, f"{net.with_prefixlen} is not strictly inside any of this rule's cidrs"
    for index, port in enumerate(rule.get("ports", [])):
        if isinstance(port, dict) and "endPort" in port and port["endPort"] < port["port"]:
            yield f"{where}.ports[{index}].endPort", f"{port['endPort']} is below port {port['port']}"


def network_findings(spec: Mapping[str, Any]) -> Iterator[Finding]:
    """Every problem of a schema-valid WorkspaceCatalog ``spec``'s ``network`` section."""
    network = spec.get("network", {})
    findings, blocked = _blocked(network)
    yield from findings
    for name, profile in network.get("profiles", {}).items():
        for index, rule in enumerate(profile.get("egress", [])):
            yield from _rule_findings(rule, f"spec.network.profiles.{name}.egress[{index}]", blocked)


def _port(value: int | Mapping[str, Any]) -> PortRange:
    if isinstance(value, int):
        return PortRange(port=value)
    return PortRange(
        port=value["port"],
        end_port=value.get("endPort"),
        protocol=cast(Protocol, value.get("protocol", "TCP")),
    )


def _canonical(items: list[str]) -> tuple[str, ...]:
    return tuple(parse_cidr(str(text)).with_prefixlen for text in items)


def build_network(spec: Mapping[str, Any]) -> NetworkSettings:
    """The ``network`` section (schema-valid, no findings) as NetworkSettings; CIDRs in canonical form."""
    network = spec.get("network", {})
    profiles = {
        name: NetworkProfile(
            name=name,
            description=profile.get("description", ""),
            egress=tuple(
                EgressAllow(
                    cidrs=_canonical(rule["cidrs"]),
                    ports=tuple(_port(p) for p in rule["ports"]),
                    excepts=_canonical(rule.get("except", [])),
                )
                for rule in profile.get("egress", [])
            ),
        )
        for name, profile in network.get("profiles", {}).items()
    }
    return NetworkSettings(blocked_cidrs=_canonical(network.get("blockedCidrs", [])), profiles=profiles)
