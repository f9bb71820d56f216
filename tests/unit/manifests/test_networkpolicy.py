"""The NetworkPolicy builder: valid objects, blocked ranges as ``except`` of every CIDR that contains them."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml

from gpuworkspace_spawner.catalog.__main__ import main
from gpuworkspace_spawner.catalog.network import EgressAllow, NetworkProfile, NetworkSettings, PortRange
from gpuworkspace_spawner.manifests.networkpolicy import (
    PolicyScope,
    build_network_policies,
    ip_block,
    render_network_policies,
)
from tests.unit.manifests.golden import validate

REPO = Path(__file__).resolve().parents[3]
BLOCKED = (
    "169.254.0.0/16",
    "100.64.0.0/10",
    "fe80::/10",
    "fd00:ec2::254/128",
    "10.96.0.0/12",
    "10.244.0.0/16",
)
ANYWHERE = EgressAllow(("0.0.0.0/0", "::/0"), (PortRange(443), PortRange(30000, 30010, "UDP")))
SETTINGS = NetworkSettings(
    blocked_cidrs=("10.96.0.0/12", "10.244.0.0/16"),
    profiles={
        "web": NetworkProfile("web", "HTTPS anywhere", (ANYWHERE,)),
        "git": NetworkProfile("git", egress=(EgressAllow(("140.82.112.0/20",), (PortRange(22),)),)),
    },
)


def test_every_policy_is_a_valid_kubernetes_object() -> None:
    policies = build_network_policies(SETTINGS)
    assert [p["metadata"]["name"] for p in policies] == [
        "gpuworkspace-default-deny",
        "gpuworkspace-workspaces",
        "gpuworkspace-network-git",
        "gpuworkspace-network-web",
    ]
    for policy in policies:
        validate(policy)


def test_blocked_ranges_inside_a_cidr_become_its_excepts_per_family() -> None:
    assert ip_block("0.0.0.0/0", (), BLOCKED) == {
        "cidr": "0.0.0.0/0",
        "except": ["10.96.0.0/12", "10.244.0.0/16", "100.64.0.0/10", "169.254.0.0/16"],
    }
    assert ip_block("::/0", (), BLOCKED) == {"cidr": "::/0", "except": ["fd00:ec2::254/128", "fe80::/10"]}
    assert ip_block("140.82.112.0/20", (), BLOCKED) == {"cidr": "140.82.112.0/20"}


def test_excepts_are_merged_with_the_blocked_ranges() -> None:
    block = ip_block("10.0.0.0/8", ("10.0.0.0/9", "10.200.0.0/16"), BLOCKED)
    assert block == {"cidr": "10.0.0.0/8", "except": ["10.0.0.0/9", "10.200.0.0/16", "10.244.0.0/16"]}


def test_a_cidr_inside_a_blocked_range_is_refused() -> None:
    with pytest.raises(ValueError, match="inside a blocked range"):
        ip_block("169.254.169.254/32", (), BLOCKED)


def test_a_profile_selects_the_workspaces_labelled_with_it_for_egress_only() -> None:
    web = build_network_policies(SETTINGS)[3]
    assert web["spec"]["podSelector"] == {
        "matchLabels": {
            "app": "jupyterhub",
            "component": "singleuser-server",
            "gpuworkspace.dev/network-profile": "web",
        }
    }
    assert web["spec"]["policyTypes"] == ["Egress"]
    assert web["metadata"]["annotations"] == {"gpuworkspace.dev/description": "HTTPS anywhere"}
    assert web["spec"]["egress"][0]["ports"] == [
        {"port": 443, "protocol": "TCP"},
        {"port": 30000, "protocol": "UDP", "endPort": 30010},
    ]


def test_the_scope_names_the_namespaces_and_release() -> None:
    scope = PolicyScope(namespace="ws", hub_namespace="hub-ns", release="prod")
    baseline = build_network_policies(NetworkSettings(), scope)[1]
    assert baseline["metadata"]["namespace"] == "ws"
    hub = baseline["spec"]["ingress"][0]["from"][0]
    assert hub["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "hub-ns"}}
    assert hub["podSelector"]["matchLabels"] == {"app": "jupyterhub", "component": "hub", "release": "prod"}


def test_no_profiles_still_denies_by_default() -> None:
    policies = build_network_policies(NetworkSettings())
    assert len(policies) == 2
    assert policies[0]["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


def test_the_cli_prints_the_shipped_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(REPO / "hub_config" / "catalog"), "--network-policies"]) == 0
    shipped = REPO / "helm-values" / "extra-manifests" / "50-networkpolicies.yaml"
    assert capsys.readouterr().out == shipped.read_text()
    assert render_network_policies(SETTINGS).startswith("# Generated from the catalog's network profiles")


def test_the_cli_prints_problems_instead_of_policies_for_a_bad_catalog(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("kind: WorkspaceCatalog\n")
    assert main([str(bad), "--network-policies"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "invalid workspace catalog" in captured.err


def test_ip_blocks_pass_the_api_servers_validation() -> None:
    """The API server (ValidateIPBlock) refuses an except entry that is not strictly inside its cidr;
    kubernetes-validate's schema does not check it."""
    shipped = yaml.safe_load_all(
        (REPO / "helm-values" / "extra-manifests" / "50-networkpolicies.yaml").read_text()
    )
    for policy in [*build_network_policies(SETTINGS), *shipped]:
        for rule in policy["spec"].get("egress", []):
            for peer in rule["to"]:
                block = peer.get("ipBlock")
                if block is None:
                    continue
                cidr = ipaddress.ip_network(block["cidr"])  # strict: no host bits
                for text in block.get("except", []):
                    net = ipaddress.ip_network(text)
                    assert net.version == cidr.version and net.subnet_of(cidr) and net != cidr, (block, text)  # type: ignore[arg-type]
