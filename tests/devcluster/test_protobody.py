"""The protobuf body decoder: kubectl's own bodies decode to kubectl's own JSON; malformed ones are refused.

The oracle for a generator is kubectl itself: the body it would POST (logged at -v=9 against a server that
is not there) must decode to exactly what ``--dry-run=client -o json`` prints for the same command, which
is Go's encoding/json of the same Go object. No devcluster is started here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuworkspace_devcluster import protobody
from gpuworkspace_devcluster.errors import ApiError
from gpuworkspace_devcluster.resources import ResourceType, find

CONFIGMAPS = find("", "v1", "configmaps")
assert CONFIGMAPS is not None
_DEAD_SERVER = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: ns1}}]
current-context: c
"""
_HEX_LINE = re.compile(r"^\s*[0-9a-f]{8}  ((?:[0-9a-f]{2} {1,2}){1,16})")


def _rt(group: str, plural: str) -> ResourceType:
    rt = find(group, "v1", plural)
    assert rt is not None, plural
    return rt


def _kubectl_env(tmp_path: Path) -> dict[str, str]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed on this machine")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(_DEAD_SERVER)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return env


def _posted_body(args: list[str], env: dict[str, str]) -> bytes:
    """The request body kubectl logs at -v=9 (as a hex dump; -v=8 cuts it at 1 KiB) before its POST fails."""
    proc = subprocess.run(
        ["kubectl", "-v=9", *args], check=False, capture_output=True, text=True, env=env, timeout=60
    )
    assert "Content-Type: application/vnd.kubernetes.protobuf" in proc.stderr, proc.stderr[-2000:]
    dump = proc.stderr.split('"Request Body" body=<', 1)[1].split("\n >", 1)[0]
    data = b""
    for line in dump.splitlines():
        found = _HEX_LINE.match(line)
        if found:
            data += bytes.fromhex(found.group(1).replace(" ", ""))
    return data


def _client_json(args: list[str], env: dict[str, str]) -> Any:
    out = subprocess.run(
        ["kubectl", "--dry-run=client", "-o", "json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def _tls_pair(tmp_path: Path) -> tuple[str, str]:
    trustme = pytest.importorskip("trustme")
    cert = trustme.CA().issue_cert("example.test")
    cert_path, key_path = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    return str(cert_path), str(key_path)


GENERATORS = [
    pytest.param(["create", "namespace", "team-a"], ("", "namespaces"), id="namespace"),
    pytest.param(
        ["create", "configmap", "c1", "--from-literal=a=b", "--from-literal=empty="],
        ("", "configmaps"),
        id="configmap",
    ),
    pytest.param(
        ["create", "secret", "generic", "s1", "--from-literal=password=s3cr\u00e9t", "--type=Opaque"],
        ("", "secrets"),
        id="secret-generic",
    ),
    pytest.param(
        ["create", "secret", "tls", "t1", "--cert=CERT", "--key=KEY"], ("", "secrets"), id="secret-tls"
    ),
    pytest.param(
        [
            "create",
            "secret",
            "docker-registry",
            "d1",
            "--docker-server=r.example",
            "--docker-username=u",
            "--docker-password=p",
        ],
        ("", "secrets"),
        id="secret-docker-registry",
    ),
    pytest.param(["create", "serviceaccount", "sa1"], ("", "serviceaccounts"), id="serviceaccount"),
    pytest.param(
        ["create", "job", "j1", "--image=busybox:1.36", "--", "sh", "-c", "echo hi"],
        ("batch", "jobs"),
        id="job",
    ),
    pytest.param(
        ["create", "cronjob", "cj", "--image=busybox", "--schedule=*/5 * * * *", "--restart=Never"],
        ("batch", "cronjobs"),
        id="cronjob",
    ),
    pytest.param(
        ["create", "rolebinding", "rb1", "--role=r1", "--user=bob", "--serviceaccount=ns1:sa1"],
        ("rbac.authorization.k8s.io", "rolebindings"),
        id="rolebinding",
    ),
    pytest.param(
        ["create", "clusterrolebinding", "crb1", "--clusterrole=view", "--group=devs"],
        ("rbac.authorization.k8s.io", "clusterrolebindings"),
        id="clusterrolebinding",
    ),
    pytest.param(
        ["create", "quota", "q1", "--hard=pods=2,requests.cpu=500m,limits.memory=1Gi", "--scopes=BestEffort"],
        ("", "resourcequotas"),
        id="quota",
    ),
    pytest.param(
        ["create", "priorityclass", "pc0", "--value=0", "--preemption-policy=Never"],
        ("scheduling.k8s.io", "priorityclasses"),
        id="priorityclass-zero",
    ),
    pytest.param(
        ["create", "service", "clusterip", "svc1", "--tcp=80:8080", "--tcp=443:https"],
        ("", "services"),
        id="service",
    ),
    pytest.param(
        ["create", "service", "nodeport", "svc2", "--tcp=80:8080", "--node-port=30080"],
        ("", "services"),
        id="service-nodeport",
    ),
]


@pytest.mark.parametrize(("args", "where"), GENERATORS)
def test_kubectl_body_decodes_to_kubectls_own_json(
    args: list[str], where: tuple[str, str], tmp_path: Path
) -> None:
    env = _kubectl_env(tmp_path)
    if "--cert=CERT" in args:
        cert, key = _tls_pair(tmp_path)
        args = [a.replace("CERT", cert).replace("KEY", key) for a in args]
    decoded = protobody.decode(_posted_body(args, env), _rt(*where))
    assert decoded == _client_json(args, env)


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    unknown = protobody.message_class("k8s.io.apimachinery.pkg.runtime.Unknown")()
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind, unknown.raw = api_version, kind, raw  # type: ignore[attr-defined]
    return protobody.MAGIC + unknown.SerializeToString()


def _configmap_bytes(**fields: Any) -> bytes:
    cm = protobody.message_class("k8s.io.api.core.v1.ConfigMap")()
    cm.metadata.name = "c1"  # type: ignore[attr-defined]
    for key, value in fields.items():
        getattr(cm, key).update(value)
    return cm.SerializeToString()


def test_binary_data_is_base64_and_times_are_rfc3339_or_null() -> None:
    cm = protobody.message_class("k8s.io.api.core.v1.ConfigMap")()
    cm.metadata.name = "c1"  # type: ignore[attr-defined]
    cm.metadata.creationTimestamp.SetInParent()  # type: ignore[attr-defined]  # Go's zero time: empty
    cm.metadata.deletionTimestamp.seconds = 1_700_000_000  # type: ignore[attr-defined]
    cm.metadata.deletionTimestamp.nanos = 5  # type: ignore[attr-defined]  # dropped, as time_proto.go does
    cm.binaryData["blob"] = b"\x00\xff"  # type: ignore[attr-defined]
    body = protobody.decode(_envelope("v1", "ConfigMap", cm.SerializeToString()), CONFIGMAPS)
    assert body["binaryData"] == {"blob": "AP8="}
    assert body["metadata"]["creationTimestamp"] is None
    assert body["metadata"]["deletionTimestamp"] == "2023-11-14T22:13:20Z"


def test_int_or_string_and_inline_fields() -> None:
    svc = protobody.message_class("k8s.io.api.core.v1.Service")()
    svc.metadata.name = "s"  # type: ignore[attr-defined]
    named, numbered = svc.spec.ports.add(), svc.spec.ports.add()  # type: ignore[attr-defined]
    named.port, named.targetPort.type, named.targetPort.strVal = 80, 1, "http"
    numbered.port, numbered.targetPort.type, numbered.targetPort.intVal = 81, 0, 8081
    body = protobody.decode(_envelope("v1", "Service", svc.SerializeToString()), _rt("", "services"))
    assert [p["targetPort"] for p in body["spec"]["ports"]] == ["http", 8081]
    vol = protobody.message_class("k8s.io.api.core.v1.Volume")()
    vol.name = "cfg"  # type: ignore[attr-defined]
    vol.volumeSource.configMap.localObjectReference.name = "hub-config"  # type: ignore[attr-defined]
    assert protobody.to_json(vol) == {"name": "cfg", "configMap": {"name": "hub-config"}}


MALFORMED = [
    pytest.param(
        b"",
        "the object provided is unrecognized (must be of type ConfigMap): empty data (<empty>)",
        id="empty",
    ),
    pytest.param(
        b'{"kind":"ConfigMap"}',
        "the object provided is unrecognized (must be of type ConfigMap): provided data does not appear to be a "
        'protobuf message, expected prefix [107 56 115 0] ({"kind":"ConfigMap"})',
        id="json-labelled-protobuf",
    ),
    pytest.param(
        protobody.MAGIC,
        "the object provided is unrecognized (must be of type ConfigMap): empty body (6b387300)",
        id="magic-only",
    ),
    pytest.param(
        protobody.MAGIC + b"\x0a\xff",
        "the object provided is unrecognized (must be of type ConfigMap): proto: runtime.Unknown: illegal or "
        "truncated wire data (6b3873000aff)",
        id="truncated-envelope",
    ),
    pytest.param(
        _envelope("v1", "ConfigMap", b"\x0a\x05ab"),
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: proto: ConfigMap: illegal or truncated wire data',
        id="truncated-object",
    ),
    pytest.param(
        _envelope("v1", "Gadget", b""),
        'Gadget in version "v1" cannot be handled as a ConfigMap: no kind "Gadget" is registered for version "v1"',
        id="unknown-kind",
    ),
    pytest.param(
        _envelope("example.com/v1", "ConfigMap", b""),
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: no kind "ConfigMap" is registered for version '
        '"example.com/v1"',
        id="unknown-group",
    ),
]


@pytest.mark.parametrize(("raw", "message"), MALFORMED)
def test_malformed_bodies_are_bad_requests_naming_what_is_wrong(raw: bytes, message: str) -> None:
    with pytest.raises(ApiError) as caught:
        protobody.decode(raw, CONFIGMAPS)
    assert (caught.value.code, caught.value.reason, caught.value.message) == (400, "BadRequest", message)


def test_kind_defaults_from_the_url_when_the_envelope_has_none() -> None:
    body = protobody.decode(_envelope("", "", _configmap_bytes(data={"k": "v"})), CONFIGMAPS)
    assert (body["apiVersion"], body["kind"], body["data"]) == ("v1", "ConfigMap", {"k": "v"})


def test_only_vendored_built_in_kinds_are_served() -> None:
    assert protobody.serves(CONFIGMAPS)
    assert protobody.serves(_rt("scheduling.k8s.io", "priorityclasses"))
    assert not protobody.serves(_rt("", "pods"))  # not sent by a generator: 415, see the devcluster docs
    vms = find("kubevirt.io", "v1", "virtualmachines")
    assert vms is not None and not protobody.serves(vms)  # custom resources never speak protobuf
