"""gpuworkspace_spawner.services.hubenv: the in-cluster variables reach every hub-managed service."""

from __future__ import annotations

import pytest

from gpuworkspace_spawner.services.hubenv import in_cluster_environment, pass_in_cluster_environment

POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "PATH": "/usr/bin"}


def test_managed_services_get_the_api_server_and_keep_their_own_environment() -> None:
    services = [
        {"name": "managed", "command": ["python3", "-m", "x"], "environment": {"A": "1"}},
        {"name": "own-host", "command": ["x"], "environment": {"KUBERNETES_SERVICE_HOST": "k8s.example"}},
        {"name": "external", "url": "http://gpuworkspace-disks:10101"},
    ]
    managed, own_host, external = pass_in_cluster_environment(services, POD)
    assert managed["environment"] == {
        "A": "1",
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
    }
    assert own_host["environment"]["KUBERNETES_SERVICE_HOST"] == "k8s.example"  # the service's value wins
    assert external == services[2] and "environment" not in external
    assert services[0]["environment"] == {"A": "1"}  # the input is not changed


def test_outside_a_pod_nothing_is_added() -> None:
    services = [{"name": "managed", "command": ["x"]}]
    assert pass_in_cluster_environment(services, {"PATH": "/usr/bin"}) == services


def test_half_an_api_server_is_an_error_naming_the_missing_variable() -> None:
    with pytest.raises(ValueError, match="KUBERNETES_SERVICE_HOST is set but KUBERNETES_SERVICE_PORT is not"):
        in_cluster_environment({"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
