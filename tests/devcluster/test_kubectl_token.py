"""Conformance: ``kubectl create token`` (a TokenRequest) against the devcluster, with the real kubectl."""

from __future__ import annotations

import pytest

from gpuworkspace_devcluster.testing import BackgroundCluster

from .conftest import Kubectl

pytestmark = pytest.mark.kubectl


def test_kubectl_create_token_gives_a_token_the_api_server_authenticates(
    kubectl: Kubectl, bg: BackgroundCluster
) -> None:
    kubectl("create", "serviceaccount", "robot", "-n", "default")
    token = kubectl("create", "token", "robot", "-n", "default", "--duration=20m").stdout.strip()
    cluster = bg.cluster
    assert cluster is not None
    user = bg.call(lambda: cluster.verbs.tokens.authenticate(cluster.store, token))
    assert user is not None and user.name == "system:serviceaccount:default:robot"
    refused = kubectl("create", "token", "ghost", "-n", "default", check=False)
    assert refused.returncode != 0 and 'serviceaccounts "ghost" not found' in refused.stderr
    short = kubectl("create", "token", "robot", "-n", "default", "--duration=1m", check=False)
    assert short.returncode != 0 and "may not specify a duration less than 10 minutes" in short.stderr
