"""Two simulated devclusters side by side on one machine, as `make test`'s parallel processes run them.

Each has its own instance (gpuworkspace_devcluster/addresses.py): the same pod in both runs, serves
port 8888 on its own address, and each Service gets a ClusterIP from its own range. Instance
:data:`SIDE_BY_SIDE` is kept for this test: tests/conftest.py gives the test processes the others.
"""

from __future__ import annotations

import ipaddress
import shutil
import urllib.request
from pathlib import Path

import pytest

from gpuworkspace_devcluster.addresses import (
    MAX_INSTANCES,
    NODES_PER_INSTANCE,
    instance_from_env,
    node_octet,
    service_cidr,
)
from gpuworkspace_devcluster.testing import BackgroundCluster

from ..conftest import Kubectl
from .test_e2e_pods import apply, eventually, get
from .test_services import PREFIX, lite_pod, service

pytestmark = pytest.mark.kubectl
SIDE_BY_SIDE = MAX_INSTANCES - 1


def test_two_devclusters_run_the_same_pod_side_by_side(tmp_path: Path) -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed on this machine")
    mine = instance_from_env()
    assert mine != SIDE_BY_SIDE
    with (
        BackgroundCluster(tmp_path / "a", simulate=True, instance=mine) as a,
        BackgroundCluster(tmp_path / "b", simulate=True, instance=SIDE_BY_SIDE) as b,
    ):
        clusters = {mine: Kubectl(a.kubeconfig), SIDE_BY_SIDE: Kubectl(b.kubeconfig)}
        for kubectl in clusters.values():
            apply(kubectl, lite_pod("web", "web"), service("web", "web", 80, 8888))
        for instance, kubectl in clusters.items():
            pod = eventually(
                lambda k=kubectl: (
                    (p := get(k, "pod", "web"))["status"]["podIP"]
                    and all(c["ready"] for c in p["status"]["containerStatuses"])
                    and p
                ),
                60,
                f"pod web Ready in instance {instance}",
            )
            ip = ipaddress.ip_address(pod["status"]["podIP"])
            node = next(
                i
                for i in range(NODES_PER_INSTANCE)
                if ip in ipaddress.ip_network(f"127.{node_octet(instance, i)}.0.0/16")
            )
            assert pod["status"]["hostIP"] == f"127.{node_octet(instance, node)}.0.1"
            with urllib.request.urlopen(f"http://{ip}:8888{PREFIX}api", timeout=10) as answer:
                assert answer.status == 200
            cluster_ip = get(kubectl, "service", "web")["spec"]["clusterIP"]
            assert ipaddress.ip_address(cluster_ip) in ipaddress.ip_network(service_cidr(instance))
        assert (
            get(clusters[mine], "pod", "web")["status"]["podIP"]
            != get(clusters[SIDE_BY_SIDE], "pod", "web")["status"]["podIP"]
        )
