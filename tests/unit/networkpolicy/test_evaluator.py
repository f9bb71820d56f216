"""The NetworkPolicy evaluator against the cases the Kubernetes API documents (evaluator.py quotes them)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.networkpolicy.evaluator import (
    Cluster,
    Pod,
    Service,
    connects,
    egress_allowed,
    ingress_allowed,
    ip_block_reaches,
    may_connect,
    policy_types,
    selector_matches,
)

WEB = Pod("web", "app", "10.0.0.10", {"role": "web"}, ports={"http": (8080, "TCP")})
DB = Pod("db", "app", "10.0.0.11", {"role": "db"}, ports={"pg": (5432, "TCP")}, node="node-b")
OTHER = Pod("client", "other", "10.0.1.5", {"role": "web"})
MONITOR = Pod("prom", "monitoring", "10.0.2.5", {"role": "prometheus"})
PODS = (WEB, DB, OTHER, MONITOR)
NAMESPACES = {"app": {"team": "a"}, "other": {"team": "b"}, "monitoring": {"team": "ops"}}


def policy(spec: dict[str, Any], namespace: str = "app", name: str = "p") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def cluster(*policies: dict[str, Any], **extra: Any) -> Cluster:
    return Cluster(policies=policies, pods=PODS, namespaces=NAMESPACES, **extra)


DENY_ALL = policy({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}, name="deny")


def test_a_pod_no_policy_selects_is_not_isolated() -> None:
    world = cluster()
    assert egress_allowed(world, WEB, "8.8.8.8", 53, "UDP")
    assert ingress_allowed(world, DB, "203.0.113.9", 1)


def test_an_empty_selector_selects_every_pod_of_its_namespace_only() -> None:
    world = cluster(DENY_ALL)
    assert not egress_allowed(world, WEB, "8.8.8.8", 443)
    assert not ingress_allowed(world, DB, OTHER.ip, 5432)
    assert egress_allowed(world, OTHER, DB.ip, 5432)  # a policy in "app" does not select "other"'s pods


@pytest.mark.parametrize(
    ("spec", "types"),
    [
        pytest.param({"podSelector": {}}, {"Ingress"}, id="no-rules-means-ingress"),
        pytest.param({"podSelector": {}, "egress": [{}]}, {"Ingress", "Egress"}, id="egress-section"),
        pytest.param({"podSelector": {}, "egress": []}, {"Ingress"}, id="empty-egress-is-no-section"),
        pytest.param({"podSelector": {}, "policyTypes": ["Egress"]}, {"Egress"}, id="explicit"),
    ],
)
def test_policy_types_default_from_the_sections(spec: dict[str, Any], types: set[str]) -> None:
    assert policy_types(spec) == types


def test_an_ingress_only_policy_leaves_egress_open() -> None:
    world = cluster(policy({"podSelector": {"matchLabels": {"role": "db"}}}))
    assert not ingress_allowed(world, DB, WEB.ip, 5432)
    assert egress_allowed(world, DB, "8.8.8.8", 443)
    assert ingress_allowed(world, WEB, OTHER.ip, 8080)  # not selected


def test_policies_are_a_union_of_allow_rules() -> None:
    allow_web = policy(
        {
            "podSelector": {"matchLabels": {"role": "db"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "web"}}}]}],
        },
        name="allow",
    )
    world = cluster(DENY_ALL, allow_web)
    assert ingress_allowed(world, DB, WEB.ip, 5432)
    assert not ingress_allowed(world, DB, MONITOR.ip, 5432)


def test_ingress_from_the_pods_own_node_is_always_allowed() -> None:
    world = cluster(DENY_ALL, node_ips={"node-b": "192.168.1.2", "node-a": "192.168.1.1"})
    assert ingress_allowed(world, DB, "192.168.1.2", 5432)
    assert not ingress_allowed(world, DB, "192.168.1.1", 5432)


def _db_ingress_from(*peers: dict[str, Any]) -> Cluster:
    spec = {"podSelector": {"matchLabels": {"role": "db"}}, "ingress": [{"from": list(peers)}]}
    return cluster(policy(spec))


WEB_PODS = {"podSelector": {"matchLabels": {"role": "web"}}}
TEAM_B = {"namespaceSelector": {"matchLabels": {"team": "b"}}}


@pytest.mark.parametrize(
    ("peers", "web", "other", "monitor"),
    [
        pytest.param([WEB_PODS], True, False, False, id="podSelector-alone-is-the-policy-namespace"),
        pytest.param([TEAM_B], False, True, False, id="namespaceSelector-alone-is-all-its-pods"),
        pytest.param([{**TEAM_B, **WEB_PODS}], False, True, False, id="both-in-one-peer-are-ANDed"),
        pytest.param([TEAM_B, WEB_PODS], True, True, False, id="two-peers-are-ORed"),
        pytest.param([{"namespaceSelector": {}}], True, True, True, id="empty-namespaceSelector-all"),
        pytest.param(
            [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
            False,
            False,
            True,
            id="the-automatic-name-label",
        ),
        pytest.param(
            [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.1.0/24"]}}], True, False, True, id="ipBlock"
        ),
    ],
)
def test_peers(peers: list[dict[str, Any]], web: bool, other: bool, monitor: bool) -> None:
    world = _db_ingress_from(*peers)
    assert [ingress_allowed(world, DB, p.ip, 5432) for p in (WEB, OTHER, MONITOR)] == [web, other, monitor]


@pytest.mark.parametrize(
    ("expression", "matches"),
    [
        pytest.param({"key": "team", "operator": "In", "values": ["a", "b"]}, True, id="In"),
        pytest.param({"key": "team", "operator": "NotIn", "values": ["a"]}, False, id="NotIn"),
        pytest.param({"key": "tier", "operator": "NotIn", "values": ["x"]}, True, id="NotIn-absent-key"),
        pytest.param({"key": "team", "operator": "Exists"}, True, id="Exists"),
        pytest.param({"key": "team", "operator": "DoesNotExist"}, False, id="DoesNotExist"),
    ],
)
def test_match_expressions(expression: dict[str, Any], matches: bool) -> None:
    assert selector_matches({"matchExpressions": [expression]}, {"team": "a"}) is matches


def test_null_selector_matches_nothing_and_empty_everything() -> None:
    assert not selector_matches(None, {"a": "b"})
    assert selector_matches({}, {})


def _web_egress(*ports: dict[str, Any], to: list[dict[str, Any]] | None = None) -> Cluster:
    rule: dict[str, Any] = {"ports": list(ports)}
    if to is not None:
        rule["to"] = to
    return cluster(
        policy({"podSelector": {"matchLabels": {"role": "web"}}, "policyTypes": ["Egress"], "egress": [rule]})
    )


def test_ports_protocol_defaults_to_tcp() -> None:
    world = _web_egress({"port": 53})
    assert egress_allowed(world, WEB, "8.8.8.8", 53, "TCP")
    assert not egress_allowed(world, WEB, "8.8.8.8", 53, "UDP")


def test_a_port_entry_without_port_matches_every_port_of_its_protocol() -> None:
    world = _web_egress({"protocol": "UDP"})
    assert egress_allowed(world, WEB, "8.8.8.8", 40000, "UDP")
    assert not egress_allowed(world, WEB, "8.8.8.8", 40000, "TCP")


def test_end_port_is_an_inclusive_range() -> None:
    world = _web_egress({"port": 30000, "endPort": 30002})
    assert [egress_allowed(world, WEB, "1.2.3.4", p) for p in (29999, 30000, 30002, 30003)] == [
        False,
        True,
        True,
        False,
    ]


def test_named_ports_resolve_on_the_destination_pod() -> None:
    world = _web_egress({"port": "pg"})
    assert egress_allowed(world, WEB, DB.ip, 5432)
    assert not egress_allowed(world, WEB, DB.ip, 5433)
    assert not egress_allowed(world, WEB, "203.0.113.1", 5432)  # no pod, no named port


def test_empty_rule_allows_everything_and_empty_to_allows_every_destination() -> None:
    assert egress_allowed(_web_egress(to=[]), WEB, "8.8.8.8", 1)
    assert not egress_allowed(_web_egress(to=[{"ipBlock": {"cidr": "1.0.0.0/8"}}]), WEB, "8.8.8.8", 1)


def test_ip_block_except_and_address_families() -> None:
    world = _web_egress(to=[{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}}])
    assert egress_allowed(world, WEB, "8.8.8.8", 443)
    assert not egress_allowed(world, WEB, "169.254.169.254", 80)
    assert not egress_allowed(world, WEB, "2001:db8::1", 443)


@pytest.mark.parametrize(
    ("block", "target", "reaches"),
    [
        pytest.param(
            {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}, "169.254.169.254/32", False, id="excepted"
        ),
        pytest.param(
            {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}, "169.254.0.0/16", True, id="partly"
        ),
        pytest.param(
            {"cidr": "10.0.0.0/24", "except": ["10.0.0.0/25", "10.0.0.128/25"]},
            "10.0.0.0/8",
            False,
            id="all-excepted",
        ),
        pytest.param({"cidr": "10.96.0.0/12"}, "10.96.0.1/32", True, id="inside"),
        pytest.param({"cidr": "10.0.0.0/8"}, "0.0.0.0/0", True, id="contains"),
        pytest.param({"cidr": "::/0"}, "10.0.0.0/8", False, id="other-family"),
    ],
)
def test_ip_block_reaches(block: dict[str, Any], target: str, reaches: bool) -> None:
    assert ip_block_reaches(block, target) is reaches


def test_services_are_evaluated_at_their_endpoints_and_may_be_before_the_rewrite() -> None:
    dns = Service("10.96.0.10", ((MONITOR, 53),), 53, "UDP")
    to_pod = _web_egress(
        {"port": 53, "protocol": "UDP"},
        to=[{"namespaceSelector": {}, "podSelector": {"matchLabels": {"role": "prometheus"}}}],
    )
    world = Cluster(to_pod.policies, PODS, NAMESPACES, services=(dns,))
    assert connects(world, WEB, "10.96.0.10", 53, "UDP")
    to_vip = _web_egress({"port": 53, "protocol": "UDP"}, to=[{"ipBlock": {"cidr": "10.96.0.10/32"}}])
    world = Cluster(to_vip.policies, PODS, NAMESPACES, services=(dns,))
    assert not connects(world, WEB, "10.96.0.10", 53, "UDP")  # after the rewrite: the pod IP is not allowed
    assert may_connect(world, WEB, "10.96.0.10", 53, "UDP")  # before it: an implementation may allow it


def test_malformed_peers_are_refused() -> None:
    with pytest.raises(ValueError, match="ipBlock"):
        egress_allowed(
            _web_egress(to=[{"ipBlock": {"cidr": "1.0.0.0/8"}, "podSelector": {}}]), WEB, "1.1.1.1", 1
        )
    with pytest.raises(ValueError, match="needs"):
        egress_allowed(_web_egress(to=[{}]), WEB, "1.1.1.1", 1)
