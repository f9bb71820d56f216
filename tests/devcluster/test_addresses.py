"""Devcluster instances: each has loopback ranges of its own, so several run on one machine."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml

from gpuworkspace_devcluster import cli
from gpuworkspace_devcluster.addresses import (
    INSTANCE_ENV,
    MAX_INSTANCES,
    NODES_PER_INSTANCE,
    instance_from_env,
    node_octet,
    service_cidr,
)
from gpuworkspace_devcluster.defaults import SERVICE_CIDR, ClusterIPAllocator
from gpuworkspace_devcluster.sim.topology import DEFAULT_TOPOLOGY, load_topology


def _node_net(instance: int, index: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"127.{node_octet(instance, index)}.0.0/16")


def test_instance_zero_keeps_the_addresses_a_single_devcluster_always_had() -> None:
    assert [node_octet(0, i) for i in range(3)] == [10, 11, 12]
    assert service_cidr(0) == SERVICE_CIDR == "127.96.0.0/16"
    topo = load_topology()
    assert topo.node("gpu-node-a").internal_ip == "127.10.0.1"


def test_no_two_instances_share_an_address_range() -> None:
    ranges = [
        (instance, what, net)
        for instance in range(MAX_INSTANCES)
        for what, net in [
            *((f"node {i}", _node_net(instance, i)) for i in range(NODES_PER_INSTANCE)),
            ("services", ipaddress.IPv4Network(service_cidr(instance))),
        ]
    ]
    for i, (inst_a, what_a, a) in enumerate(ranges):
        assert a.subnet_of(ipaddress.IPv4Network("127.0.0.0/8"))
        assert not a.overlaps(ipaddress.IPv4Network("127.0.0.0/16")), "127.0.x.y is the host's own"
        for inst_b, what_b, b in ranges[i + 1 :]:
            assert not a.overlaps(b), f"instance {inst_a} {what_a} overlaps instance {inst_b} {what_b}"


def test_a_topology_is_placed_in_its_instance_ranges() -> None:
    topo = load_topology(instance=3)
    assert [n.internal_ip for n in topo.nodes][:3] == ["127.40.0.1", "127.41.0.1", "127.42.0.1"]
    allocate = ClusterIPAllocator(service_cidr(3))
    assert allocate() == "127.99.0.10"


def test_the_instance_comes_from_the_environment_with_a_clear_error() -> None:
    assert instance_from_env({}) == 0
    assert instance_from_env({INSTANCE_ENV: " 2 "}) == 2
    for bad in ("x", "-1", str(MAX_INSTANCES)):
        with pytest.raises(
            ValueError, match=rf"\${INSTANCE_ENV}: .* is not a devcluster instance \(0 to 7\)"
        ):
            instance_from_env({INSTANCE_ENV: bad})
    with pytest.raises(ValueError, match="at most 10 nodes"):
        node_octet(0, NODES_PER_INSTANCE)


def test_a_topology_with_more_nodes_than_an_instance_has_ranges_is_refused(tmp_path: Path) -> None:
    data = yaml.safe_load(DEFAULT_TOPOLOGY.read_text())
    base = data["nodes"][-1]
    data["nodes"] += [
        {**base, "name": f"extra-{i}"} for i in range(NODES_PER_INSTANCE + 1 - len(data["nodes"]))
    ]
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match=r"big\.yaml: nodes: 11 nodes: a devcluster has at most 10"):
        load_topology(path)


def test_the_cli_refuses_an_instance_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["up", "--state-dir", str(tmp_path), "--instance", "9"])
    assert exited.value.code == 2
    assert "--instance: 9 is not a devcluster instance (0 to 7)" in capsys.readouterr().err
    monkeypatch.setenv(INSTANCE_ENV, "eight")
    with pytest.raises(SystemExit):
        cli.main(["up", "--state-dir", str(tmp_path)])
    assert f"${INSTANCE_ENV}: 'eight' is not a devcluster instance" in capsys.readouterr().err
