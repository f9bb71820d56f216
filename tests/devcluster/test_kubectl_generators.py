"""Conformance: kubectl's generators (`kubectl create KIND …`, protobuf bodies) against the devcluster.

Each command runs with the real kubectl; the object must be stored as a real API server stores it
(defaults included), answered in JSON, printed right by ``-o yaml``, and not stored on a server dry run.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuworkspace_devcluster.resources import find
from gpuworkspace_devcluster.testing import BackgroundCluster

from .conftest import Kubectl

pytestmark = pytest.mark.kubectl
NS = "team-a"


def _stored(bg: BackgroundCluster, group: str, plural: str, name: str, ns: str = NS) -> Any:
    rt = find(group, "v1", plural)
    assert rt is not None and bg.cluster is not None
    cluster = bg.cluster
    return bg.call(lambda: cluster.store.get(rt, ns if rt.namespaced else "", name))


def _tls_files(tmp_path: Path) -> tuple[str, str, bytes]:
    trustme = pytest.importorskip("trustme")
    cert = trustme.CA().issue_cert("hub.example.test")
    cert_path, key_path = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    return str(cert_path), str(key_path), cert_path.read_bytes()


def _b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def test_every_generator_creates_its_object(kubectl: Kubectl, bg: BackgroundCluster, tmp_path: Path) -> None:
    cert, key, cert_pem = _tls_files(tmp_path)
    n = ["-n", NS]
    checks: list[tuple[list[str], tuple[str, str, str], Callable[[Any], bool]]] = [
        (
            ["create", "namespace", NS],
            ("", "namespaces", NS),
            lambda o: (
                o["status"]["phase"] == "Active"
                and o["metadata"]["labels"] == {"kubernetes.io/metadata.name": NS}
            ),
        ),
        (
            ["create", "configmap", "hub-config", *n, "--from-literal=greeting=hello"],
            ("", "configmaps", "hub-config"),
            lambda o: o["data"] == {"greeting": "hello"},
        ),
        (
            ["create", "secret", "generic", "db", *n, "--from-literal=password=s3cret"],
            ("", "secrets", "db"),
            lambda o: o["type"] == "Opaque" and o["data"] == {"password": _b64("s3cret")},
        ),
        (
            ["create", "secret", "tls", "hub-tls", *n, f"--cert={cert}", f"--key={key}"],
            ("", "secrets", "hub-tls"),
            lambda o: o["type"] == "kubernetes.io/tls" and o["data"]["tls.crt"] == _b64(cert_pem),
        ),
        (
            ["create", "serviceaccount", "builder", *n],
            ("", "serviceaccounts", "builder"),
            lambda o: o["metadata"]["namespace"] == NS,
        ),
        (
            ["create", "job", "once", *n, "--image=busybox:1.36", "--", "sh", "-c", "echo hi"],
            ("batch", "jobs", "once"),
            lambda o: (
                o["spec"]["template"]["spec"]["containers"][0]["command"] == ["sh", "-c", "echo hi"]
                and o["spec"]["backoffLimit"] == 6  # defaulted: kubectl sends no backoffLimit
                and o["spec"]["template"]["spec"]["restartPolicy"] == "Never"
            ),
        ),
        (
            ["create", "cronjob", "nightly", *n, "--image=busybox", "--schedule=0 3 * * *"],
            ("batch", "cronjobs", "nightly"),
            lambda o: (
                o["spec"]["schedule"] == "0 3 * * *"
                and o["spec"]["concurrencyPolicy"] == "Allow"
                and o["spec"]["successfulJobsHistoryLimit"] == 3
                and o["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
            ),
        ),
        (
            ["create", "role", "reader", *n, "--verb=get,list", "--resource=pods,configmaps"],
            ("rbac.authorization.k8s.io", "roles", "reader"),
            lambda o: (
                o["rules"]
                == [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "configmaps"]}]
            ),
        ),
        (
            [
                "create",
                "rolebinding",
                "read",
                *n,
                "--role=reader",
                "--user=bob",
                f"--serviceaccount={NS}:builder",
            ],
            ("rbac.authorization.k8s.io", "rolebindings", "read"),
            lambda o: (
                o["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}
                and [s["name"] for s in o["subjects"]] == ["bob", "builder"]
            ),
        ),
        (
            ["create", "quota", "gpu-quota", *n, "--hard=pods=4,requests.nvidia.com/gpu=2"],
            ("", "resourcequotas", "gpu-quota"),
            lambda o: o["spec"]["hard"] == {"pods": "4", "requests.nvidia.com/gpu": "2"},
        ),
        (
            ["create", "clusterrole", "gpu-viewer", "--verb=get", "--resource=nodes"],
            ("rbac.authorization.k8s.io", "clusterroles", "gpu-viewer"),
            lambda o: o["rules"] == [{"verbs": ["get"], "apiGroups": [""], "resources": ["nodes"]}],
        ),
        (
            ["create", "service", "clusterip", "hub", *n, "--tcp=8081:8081"],
            ("", "services", "hub"),
            lambda o: o["spec"]["ports"][0]["targetPort"] == 8081 and o["spec"]["clusterIP"],
        ),
        (
            ["create", "priorityclass", "batch-low", "--value=0", "--description=background work"],
            ("scheduling.k8s.io", "priorityclasses", "batch-low"),
            lambda o: o["value"] == 0 and o["preemptionPolicy"] == "PreemptLowerPriority",
        ),
    ]
    for args, (group, plural, name), check in checks:
        proc = kubectl(*args)
        assert " created" in proc.stdout, (args, proc.stdout, proc.stderr)
        stored = _stored(bg, group, plural, name)
        assert stored is not None and check(stored), (args, stored)
    job = kubectl("create", "job", "manual-run", *n, "--from=cronjob/nightly", "-o", "json")
    made = json.loads(job.stdout)
    assert made["metadata"]["annotations"] == {"cronjob.kubernetes.io/instantiate": "manual"}
    assert made["metadata"]["ownerReferences"][0]["name"] == "nightly"
    table = kubectl("get", "cronjobs,resourcequotas", *n).stdout
    assert "nightly" in table and "0 3 * * *" in table and "gpu-quota" in table
    assert "batch-low" in kubectl("get", "priorityclasses").stdout


def test_yaml_output_and_server_dry_run(kubectl: Kubectl, bg: BackgroundCluster) -> None:
    kubectl("create", "namespace", NS)
    out = kubectl(
        "create", "configmap", "preview", "-n", NS, "--from-literal=a=1", "--dry-run=server", "-o", "yaml"
    )
    shown = yaml.safe_load(out.stdout)
    assert shown["kind"] == "ConfigMap" and shown["data"] == {"a": "1"}
    assert shown["metadata"]["namespace"] == NS and shown["metadata"]["uid"]  # filled by the server
    assert _stored(bg, "", "configmaps", "preview") is None  # a dry run stores nothing
    out = kubectl("create", "priorityclass", "high", "--value=100000", "--global-default", "-o", "yaml")
    shown = yaml.safe_load(out.stdout)
    assert (shown["value"], shown["globalDefault"], shown["preemptionPolicy"]) == (
        100000,
        True,
        "PreemptLowerPriority",
    )
    assert shown["metadata"]["creationTimestamp"] and shown["metadata"]["resourceVersion"]
    again = kubectl("create", "configmap", "preview", "-n", NS, "--from-literal=a=1")
    assert again.stdout.strip() == "configmap/preview created"
    dup = kubectl("create", "configmap", "preview", "-n", NS, "--from-literal=a=1", check=False)
    assert dup.returncode == 1
    assert 'configmaps "preview" already exists' in dup.stderr
