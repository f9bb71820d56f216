"""The catalog's network section: profiles become the model, every mistake names its file and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_spawner.catalog import CatalogError, load_catalog
from gpuworkspace_spawner.catalog.network import EgressAllow, NetworkProfile, PortRange
from tests.unit.catalog.conftest import catalog_doc, profile_doc, write_yaml

GIT = {"cidrs": ["140.82.112.0/20"], "ports": [22, {"port": 443}]}


def network(**profiles: Any) -> dict[str, Any]:
    return {"blockedCidrs": ["10.96.0.0/12", "192.168.49.2"], "profiles": profiles}


def load(tmp_path: Path, net: dict[str, Any], **security: Any) -> Any:
    profile = profile_doc("cpu", security=security) if security else profile_doc("cpu")
    return load_catalog(write_yaml(tmp_path / "c.yaml", catalog_doc(network=net), profile))


def problems(tmp_path: Path, net: dict[str, Any], **security: Any) -> list[tuple[str | None, str, str]]:
    with pytest.raises(CatalogError) as caught:
        load(tmp_path, net, **security)
    for problem in caught.value.problems:
        assert problem.file.endswith("c.yaml")
    return [(p.profile, p.field, p.message) for p in caught.value.problems]


def test_profiles_become_the_model_with_canonical_cidrs(tmp_path: Path) -> None:
    storage = {
        "cidrs": ["10.30.0.7", "2001:db8::/32"],
        "except": ["2001:db8:1::/48"],
        "ports": [{"port": 30000, "endPort": 30010, "protocol": "UDP"}],
    }
    catalog = load(
        tmp_path,
        network(git={"description": "GitHub", "egress": [GIT]}, storage={"egress": [storage]}),
        networkProfile="git",
    )
    assert catalog.profiles[0].security.network_profile == "git"
    assert catalog.network.blocked_cidrs == ("10.96.0.0/12", "192.168.49.2/32")
    assert catalog.network.profiles["git"] == NetworkProfile(
        "git", "GitHub", (EgressAllow(("140.82.112.0/20",), (PortRange(22), PortRange(443))),)
    )
    assert catalog.network.profiles["storage"].egress[0] == EgressAllow(
        ("10.30.0.7/32", "2001:db8::/32"), (PortRange(30000, 30010, "UDP"),), ("2001:db8:1::/48",)
    )


def test_a_catalog_without_network_has_no_profiles(tmp_path: Path) -> None:
    catalog = load_catalog(write_yaml(tmp_path / "c.yaml", catalog_doc(), profile_doc()))
    assert catalog.network.profiles == {} and catalog.network.blocked_cidrs == ()
    assert "169.254.0.0/16" in catalog.network.all_blocked


BAD_RULES = [
    pytest.param(
        {"cidrs": ["10.0.0.0/33"], "ports": [443]}, "cidrs[0]", "'10.0.0.0/33' is not a CIDR", id="bad-prefix"
    ),
    pytest.param(
        {"cidrs": ["github.com"], "ports": [443]}, "cidrs[0]", "'github.com' is not a CIDR", id="hostname"
    ),
    pytest.param(
        {"cidrs": ["10.1.2.3/8"], "ports": [443]},
        "cidrs[0]",
        "host bits set; the network is 10.0.0.0/8",
        id="host-bits",
    ),
    pytest.param(
        {"cidrs": ["169.254.169.254/32"], "ports": [80]},
        "cidrs[0]",
        "inside 169.254.0.0/16, which no profile may reach: link-local",
        id="metadata",
    ),
    pytest.param({"cidrs": ["100.64.0.0/10"], "ports": [80]}, "cidrs[0]", "inside 100.64.0.0/10", id="cgnat"),
    pytest.param(
        {"cidrs": ["10.96.0.0/16"], "ports": [443]},
        "cidrs[0]",
        "listed in spec.network.blockedCidrs (10.96.0.0/12)",
        id="service-range",
    ),
    pytest.param(
        {"cidrs": ["192.168.49.2/32"], "ports": [6443]}, "cidrs[0]", "inside 192.168.49.2/32", id="api-server"
    ),
    pytest.param(
        {"cidrs": ["10.0.0.0/24"], "except": ["10.1.0.0/24"], "ports": [443]},
        "except[0]",
        "not strictly inside any of this rule's cidrs",
        id="except-outside",
    ),
    pytest.param(
        {"cidrs": ["10.0.0.0/24"], "except": ["10.0.0.0/24"], "ports": [443]},
        "except[0]",
        "not strictly inside",
        id="except-equal",
    ),
    pytest.param(
        {"cidrs": ["10.0.0.0/24"], "ports": [{"port": 443, "endPort": 80}]},
        "ports[0].endPort",
        "80 is below port 443",
        id="end-port",
    ),
    pytest.param(
        {"cidrs": ["10.0.0.0/24"], "ports": [0]}, "ports[0]", "0 is not a port number", id="port-zero"
    ),
    pytest.param(
        {"cidrs": ["10.0.0.0/24"], "ports": [{"port": 70000}]},
        "ports[0].port",
        "70000 is not a port number",
        id="port-too-big",
    ),
    pytest.param(
        {"cidrs": ["10.0.0.0/24"], "ports": [{"port": 53, "protocol": "ICMP"}]},
        "ports[0].protocol",
        "'ICMP' is not one of",
        id="protocol",
    ),
    pytest.param({"cidrs": ["10.0.0.0/24"]}, "ports", "required field is missing", id="no-ports"),
    pytest.param({"cidrs": [], "ports": [443]}, "cidrs", "should be non-empty", id="no-cidrs"),
    pytest.param(
        {"cidrs": ["10.0.0.0/24"], "ports": [443], "hosts": ["x"]},
        "hosts",
        "unknown field",
        id="unknown-field",
    ),
]


@pytest.mark.parametrize(("rule", "where", "message"), BAD_RULES)
def test_a_bad_rule_is_named_by_file_profile_and_field(
    tmp_path: Path, rule: dict[str, Any], where: str, message: str
) -> None:
    found = problems(tmp_path, network(git={"egress": [GIT, rule]}))
    field = f"spec.network.profiles.git.egress[1].{where}"
    assert any(f == field and message in m for _, f, m in found), found


def test_blocked_cidrs_are_required_and_checked(tmp_path: Path) -> None:
    found = problems(tmp_path, {"profiles": {}})
    assert (None, "spec.network.blockedCidrs", "required field is missing") in found
    found = problems(tmp_path, {"blockedCidrs": ["10.96.0.1/12"]})
    assert (
        None,
        "spec.network.blockedCidrs[0]",
        "'10.96.0.1/12' has host bits set; the network is 10.96.0.0/12",
    ) in found


def test_a_profile_naming_an_unknown_network_profile_is_refused(tmp_path: Path) -> None:
    found = problems(tmp_path, network(git={"egress": [GIT]}), networkProfile="internet")
    message = "'internet' is not a network profile of this catalog (network.profiles in the WorkspaceCatalog document); known profiles: git"
    assert ("cpu", "spec.security.networkProfile", message) in found


def test_every_network_problem_is_reported_in_one_pass(tmp_path: Path) -> None:
    bad = {"egress": [{"cidrs": ["bad", "169.254.0.0/24"], "except": ["1.0.0.0/8"], "ports": [443]}]}
    found = problems(tmp_path, network(bad=bad))
    fields = sorted(f for _, f, _ in found)
    prefix = "spec.network.profiles.bad.egress[0]"
    assert fields == [f"{prefix}.cidrs[0]", f"{prefix}.cidrs[1]", f"{prefix}.except[0]"]
