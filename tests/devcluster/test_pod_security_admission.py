"""Conformance: Pod Security Admission from the namespace's labels, as the real API server answers
(the checks: devcluster/gpuworkspace_devcluster/podsecurity.py, tested against upstream in
tests/helm/test_pod_security.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.helm import manifests

NS = "gpu-workspaces"


def pod(name: str, **security: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "notebook", "image": "quay.io/jupyter/base-notebook", "securityContext": security}
            ]
        },
    }


async def make_ns(api: client.ApiClient, labels: dict[str, str]) -> None:
    await client.CoreV1Api(api).create_namespace({"metadata": {"name": NS, "labels": labels}})


def shipped_labels() -> dict[str, str]:
    """gpu-workspaces' labels in helm-values/extra-manifests/00-namespaces.yaml."""
    ns = next(d for _, d in manifests() if d["kind"] == "Namespace" and d["metadata"]["name"] == NS)
    return dict(ns["metadata"]["labels"])


async def test_the_shipped_namespace_refuses_a_privileged_pod_and_stores_nothing(
    api: client.ApiClient,
) -> None:
    await make_ns(api, shipped_labels())
    core = client.CoreV1Api(api)
    for dry_run in ("All", None):
        with pytest.raises(ApiException) as caught:
            await core.create_namespaced_pod(NS, pod("root", privileged=True), dry_run=dry_run)
        assert caught.value.status == 403
        status = json.loads(caught.value.body)
        assert status["reason"] == "Forbidden"
        assert status["message"] == (
            'pods "root" is forbidden: violates PodSecurity "baseline:v1.33": '
            'privileged (container "notebook" must not set securityContext.privileged=true)'
        )
    assert (await core.list_namespaced_pod(NS)).items == []


async def test_the_shipped_namespace_refuses_host_namespaces_and_paths(api: client.ApiClient) -> None:
    await make_ns(api, shipped_labels())
    host = pod("host")
    host["spec"] |= {
        "hostNetwork": True,
        "hostPID": True,
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
    }
    with pytest.raises(ApiException) as caught:
        await client.CoreV1Api(api).create_namespaced_pod(NS, host)
    assert json.loads(caught.value.body)["message"] == (
        'pods "host" is forbidden: violates PodSecurity "baseline:v1.33": '
        'host namespaces (hostNetwork=true, hostPID=true), hostPath volumes (volume "root")'
    )


async def test_the_shipped_namespace_admits_an_unprivileged_pod(api: client.ApiClient) -> None:
    await make_ns(api, shipped_labels())
    created = await client.CoreV1Api(api).create_namespaced_pod(
        NS, pod("ok", allowPrivilegeEscalation=False, capabilities={"drop": ["ALL"]})
    )
    assert created.metadata.name == "ok"


async def test_an_unlabelled_namespace_admits_anything(api: client.ApiClient) -> None:
    await make_ns(api, {})
    created = await client.CoreV1Api(api).create_namespaced_pod(NS, pod("root", privileged=True))
    assert created.spec.containers[0].security_context.privileged is True


async def test_restricted_warns_that_only_baseline_is_checked(api: client.ApiClient) -> None:
    await make_ns(api, {"pod-security.kubernetes.io/enforce": "restricted"})
    raw = await client.CoreV1Api(api).create_namespaced_pod(NS, pod("ok"), _preload_content=False)
    assert raw.status == 201
    assert raw.headers["Warning"] == (
        '299 - "PodSecurity \\"restricted:latest\\": this API server checks only its baseline rules"'
    )
