"""What ``kubectl get`` shows for devcluster objects: server-side Table printing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuworkspace_devcluster import resources
from gpuworkspace_devcluster.errors import ApiError
from gpuworkspace_devcluster.tables import (
    build_table,
    eval_jsonpath,
    format_quantity,
    human_duration,
    parse_jsonpath,
    pod_status,
    table_version,
)

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
KUBECTL_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def rt(group: str, plural: str) -> resources.ResourceType:
    found = next((r for r in resources.RESOURCE_TYPES if r.group == group and r.plural == plural), None)
    assert found is not None
    return found


def cells(group: str, plural: str, obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """The single row as {column name: cell}, like kubectl -o wide would show it."""
    table = build_table(rt(group, plural), [obj], now=NOW, **kw)
    names = [c["name"] for c in table["columnDefinitions"]]
    return dict(zip(names, table["rows"][0]["cells"], strict=True))


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        pytest.param(-5, "<invalid>", id="future-beyond-skew"),
        pytest.param(-1.5, "0s", id="future-within-skew"),
        pytest.param(0, "0s", id="now"),
        pytest.param(5, "5s", id="seconds"),
        pytest.param(119, "119s", id="under-two-minutes"),
        pytest.param(120, "2m", id="two-minutes"),
        pytest.param(182, "3m2s", id="minutes-seconds"),
        pytest.param(600, "10m", id="ten-minutes"),
        pytest.param(10799, "179m", id="under-three-hours"),
        pytest.param(3 * 3600 + 60, "3h1m", id="hours-minutes"),
        pytest.param(8 * 3600 + 59 * 60, "8h", id="eight-hours"),
        pytest.param(47 * 3600, "47h", id="under-two-days"),
        pytest.param(2 * 86400 + 3 * 3600, "2d3h", id="days-hours"),
        pytest.param(40 * 86400, "40d", id="days"),
        pytest.param(3 * 365 * 86400 + 5 * 86400, "3y5d", id="years-days"),
        pytest.param(9 * 365 * 86400, "9y", id="years"),
    ],
)
def test_human_duration(seconds: float, shown: str) -> None:
    assert human_duration(seconds) == shown


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        pytest.param("10Gi", "10Gi", id="binary"),
        pytest.param("1024Mi", "1Gi", id="binary-normalized"),
        pytest.param("1536Mi", "1536Mi", id="binary-not-divisible"),
        pytest.param("0.5Gi", "512Mi", id="fractional-binary"),
        pytest.param("1000", "1k", id="plain-number"),
        pytest.param("1.5", "1500m", id="fraction"),
        pytest.param("1000M", "1G", id="decimal-normalized"),
        pytest.param("1e3", "1e3", id="exponent"),
        pytest.param(None, "0", id="missing"),
    ],
)
def test_quantities_print_canonically(raw: str | None, shown: str) -> None:
    assert format_quantity(raw) == shown


def container(
    state: dict[str, Any], *, ready: bool = False, restarts: int = 0, **extra: Any
) -> dict[str, Any]:
    return {"name": "notebook", "state": state, "ready": ready, "restartCount": restarts, **extra}


def pod(
    containers: list[dict[str, Any]] | None = None,
    *,
    phase: str = "Pending",
    inits: list[dict[str, Any]] | None = None,
    init_specs: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    meta: dict[str, Any] | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if containers is not None:
        status["containerStatuses"] = containers
    if inits is not None:
        status["initContainerStatuses"] = inits
    if reason:
        status["reason"] = reason
    spec = {"containers": [{"name": "notebook"}], "initContainers": init_specs or []}
    return {
        "metadata": {"name": "jupyter-alice", "creationTimestamp": ago(600), **(meta or {})},
        "spec": spec,
        "status": status,
    }


RUNNING = {"running": {"startedAt": ago(60)}}
READY = {"type": "Ready", "status": "True"}
CRASHED = {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": ago(180)}}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(pod(), ("0/1", "Pending", "0"), id="pending-unscheduled"),
        pytest.param(
            pod([container({"waiting": {"reason": "ContainerCreating"}})]),
            ("0/1", "ContainerCreating", "0"),
            id="container-creating",
        ),
        pytest.param(
            pod([container({"waiting": {"reason": "ErrImagePull", "message": "pull failed"}})]),
            ("0/1", "ErrImagePull", "0"),
            id="err-image-pull",
        ),
        pytest.param(
            pod([container({"waiting": {"reason": "ImagePullBackOff"}})]),
            ("0/1", "ImagePullBackOff", "0"),
            id="image-pull-backoff",
        ),
        pytest.param(
            pod([container(RUNNING, ready=True)], phase="Running", conditions=[READY]),
            ("1/1", "Running", "0"),
            id="running",
        ),
        pytest.param(
            pod(
                [container({"waiting": {"reason": "CrashLoopBackOff"}}, restarts=5, lastState=CRASHED)],
                phase="Running",
            ),
            ("0/1", "CrashLoopBackOff", "5 (3m ago)"),
            id="crash-loop-with-last-restart",
        ),
        pytest.param(
            pod([container({"terminated": {"exitCode": 0, "reason": "Completed"}})], phase="Succeeded"),
            ("0/1", "Completed", "0"),
            id="completed",
        ),
        pytest.param(
            pod([container({"terminated": {"exitCode": 137}})], phase="Failed"),
            ("0/1", "ExitCode:137", "0"),
            id="terminated-without-reason",
        ),
        pytest.param(
            pod([container({"terminated": {"exitCode": 0, "signal": 9}})], phase="Failed"),
            ("0/1", "Signal:9", "0"),
            id="terminated-by-signal",
        ),
        pytest.param(
            pod([container(RUNNING, ready=True)], phase="Running", meta={"deletionTimestamp": ago(1)}),
            ("1/1", "Terminating", "0"),
            id="terminating",
        ),
        pytest.param(
            pod([container(RUNNING)], phase="Running", reason="NodeLost", meta={"deletionTimestamp": ago(1)}),
            ("0/1", "Unknown", "0"),
            id="node-lost",
        ),
        pytest.param(pod(phase="Failed", reason="Evicted"), ("0/1", "Evicted", "0"), id="evicted"),
        pytest.param(
            pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]),
            ("0/1", "SchedulingGated", "0"),
            id="scheduling-gated",
        ),
        pytest.param(
            pod(
                [container({"waiting": {"reason": "PodInitializing"}})],
                inits=[container({"running": {}}) | {"name": "fetch"}],
                init_specs=[{"name": "fetch"}],
            ),
            ("0/1", "Init:0/1", "0"),
            id="init-running",
        ),
        pytest.param(
            pod(
                [container({"waiting": {"reason": "PodInitializing"}})],
                inits=[
                    container({"waiting": {"reason": "CrashLoopBackOff"}}, restarts=2) | {"name": "fetch"}
                ],
                init_specs=[{"name": "fetch"}],
            ),
            ("0/1", "Init:CrashLoopBackOff", "2"),
            id="init-crash-loop",
        ),
        pytest.param(
            pod(
                [container({"waiting": {"reason": "PodInitializing"}})],
                inits=[container({"terminated": {"exitCode": 1, "reason": "Error"}}) | {"name": "fetch"}],
                init_specs=[{"name": "fetch"}],
            ),
            ("0/1", "Init:Error", "0"),
            id="init-error",
        ),
        pytest.param(
            pod(
                [container(RUNNING, ready=True)],
                phase="Running",
                conditions=[READY, {"type": "Initialized", "status": "True"}],
                inits=[container(RUNNING, ready=True, started=True) | {"name": "proxy"}],
                init_specs=[{"name": "proxy", "restartPolicy": "Always"}],
            ),
            ("2/2", "Running", "0"),
            id="sidecar-counts-as-container",
        ),
        pytest.param(
            pod(
                [
                    container({"terminated": {"exitCode": 0, "reason": "Completed"}}),
                    container(RUNNING, ready=True),
                ],
                phase="Running",
            ),
            ("1/1", "NotReady", "0"),
            id="completed-with-running-sibling-not-ready",
        ),
    ],
)
def test_pod_ready_status_restarts(obj: dict[str, Any], expected: tuple[str, str, str]) -> None:
    assert pod_status(obj, NOW) == expected


def test_pod_row_wide_columns_and_metadata() -> None:
    obj = pod([container(RUNNING, ready=True)], phase="Running", conditions=[READY])
    obj["metadata"]["resourceVersion"] = "42"
    obj["spec"] |= {"nodeName": "gpu-node-1", "readinessGates": [{"conditionType": "example.com/ready"}]}
    obj["status"] |= {"podIP": "10.244.1.7", "podIPs": [{"ip": "10.244.1.7"}]}
    table = build_table(rt("", "pods"), [obj], now=NOW)
    assert [(c["name"], c["priority"]) for c in table["columnDefinitions"]] == [
        ("Name", 0),
        ("Ready", 0),
        ("Status", 0),
        ("Restarts", 0),
        ("Age", 0),
        ("IP", 1),
        ("Node", 1),
        ("Nominated Node", 1),
        ("Readiness Gates", 1),
    ]
    assert table["rows"][0]["cells"] == [
        "jupyter-alice",
        "1/1",
        "Running",
        "0",
        "10m",
        "10.244.1.7",
        "gpu-node-1",
        "<none>",
        "0/1",
    ]
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "42"}
    assert table["rows"][0]["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }


def test_succeeded_pod_row_carries_completed_condition() -> None:
    table = build_table(rt("", "pods"), [pod([], phase="Succeeded")], now=NOW)
    assert table["rows"][0]["conditions"] == [
        {
            "type": "Completed",
            "status": "True",
            "reason": "Succeeded",
            "message": "The pod has completed successfully.",
        }
    ]


def node(conditions: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    labels = {
        "node-role.kubernetes.io/control-plane": "",
        "node-role.kubernetes.io/gpu": "",
        "kubernetes.io/role": "worker",
    }
    return {
        "metadata": {"name": "gpu-node-1", "creationTimestamp": ago(40 * 86400), "labels": labels},
        "spec": spec,
        "status": {
            "conditions": conditions,
            "nodeInfo": {
                "kubeletVersion": "v1.30.2",
                "osImage": "Ubuntu 22.04.4 LTS",
                "kernelVersion": "6.5.0",
            },
            "addresses": [
                {"type": "InternalIP", "address": "192.168.1.10"},
                {"type": "Hostname", "address": "n1"},
            ],
        },
    }


@pytest.mark.parametrize(
    ("obj", "status"),
    [
        pytest.param(node([{"type": "Ready", "status": "True"}]), "Ready", id="ready"),
        pytest.param(node([{"type": "Ready", "status": "Unknown"}]), "NotReady", id="not-ready"),
        pytest.param(
            node([{"type": "Ready", "status": "True"}], unschedulable=True),
            "Ready,SchedulingDisabled",
            id="cordoned",
        ),
        pytest.param(node([]), "Unknown", id="no-ready-condition"),
    ],
)
def test_node_status(obj: dict[str, Any], status: str) -> None:
    row = cells("", "nodes", obj)
    assert row["Status"] == status
    assert (row["Roles"], row["Age"], row["Version"]) == ("control-plane,gpu,worker", "40d", "v1.30.2")
    assert (row["Internal-IP"], row["External-IP"], row["Container-Runtime"]) == (
        "192.168.1.10",
        "<none>",
        "<unknown>",
    )


def test_node_without_role_labels() -> None:
    obj = node([])
    obj["metadata"]["labels"] = {"kubernetes.io/hostname": "n1"}
    assert cells("", "nodes", obj)["Roles"] == "<none>"


PVC_BOUND: dict[str, Any] = {
    "metadata": {"name": "home-alice", "creationTimestamp": ago(3 * 86400)},
    "spec": {
        "accessModes": ["ReadWriteOncePod", "ReadWriteOnce"],
        "storageClassName": "ceph-rbd",
        "volumeName": "pv-1",
    },
    "status": {
        "phase": "Bound",
        "capacity": {"storage": "10240Mi"},
        "accessModes": ["ReadWriteOnce", "ReadWriteOncePod"],
    },
}
PVC_PENDING: dict[str, Any] = {
    "metadata": {"name": "scratch", "creationTimestamp": ago(30)},
    "spec": {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "5Gi"}},
        "volumeMode": "Block",
    },
    "status": {"phase": "Pending"},
}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            PVC_BOUND,
            ["home-alice", "Bound", "pv-1", "10Gi", "RWO,RWOP", "ceph-rbd", "<unset>", "3d", "Filesystem"],
            id="bound",
        ),
        pytest.param(
            PVC_PENDING, ["scratch", "Pending", "", "", "", "", "<unset>", "30s", "Block"], id="pending"
        ),
        pytest.param(
            PVC_BOUND | {"metadata": PVC_BOUND["metadata"] | {"deletionTimestamp": ago(1)}},
            [
                "home-alice",
                "Terminating",
                "pv-1",
                "10Gi",
                "RWO,RWOP",
                "ceph-rbd",
                "<unset>",
                "3d",
                "Filesystem",
            ],
            id="terminating",
        ),
    ],
)
def test_pvc_rows(obj: dict[str, Any], expected: list[Any]) -> None:
    assert build_table(rt("", "persistentvolumeclaims"), [obj], now=NOW)["rows"][0]["cells"] == expected


def test_pv_row() -> None:
    obj = {
        "metadata": {"name": "pv-1", "creationTimestamp": ago(3 * 86400)},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "claimRef": {"namespace": "gpu-workspaces", "name": "home-alice"},
            "storageClassName": "ceph-rbd",
        },
        "status": {"phase": "Bound"},
    }
    assert cells("", "persistentvolumes", obj) == {
        "Name": "pv-1",
        "Capacity": "10Gi",
        "Access Modes": "RWO",
        "Reclaim Policy": "Delete",
        "Status": "Bound",
        "Claim": "gpu-workspaces/home-alice",
        "StorageClass": "ceph-rbd",
        "VolumeAttributesClass": "<unset>",
        "Reason": "",
        "Age": "3d",
        "VolumeMode": "Filesystem",
    }


@pytest.mark.parametrize(
    ("spec", "status", "expected"),
    [
        pytest.param(
            {
                "clusterIP": "10.96.12.3",
                "clusterIPs": ["10.96.12.3"],
                "ports": [{"port": 8888, "protocol": "TCP"}],
                "selector": {"app": "jupyter", "user": "alice"},
            },
            {},
            ["ClusterIP", "10.96.12.3", "<none>", "8888/TCP", "app=jupyter,user=alice"],
            id="cluster-ip",
        ),
        pytest.param(
            {
                "type": "NodePort",
                "clusterIP": "10.96.0.9",
                "ports": [{"port": 22, "nodePort": 30022}, {"port": 53, "protocol": "UDP"}],
            },
            {},
            ["NodePort", "10.96.0.9", "<none>", "22:30022/TCP,53/UDP", "<none>"],
            id="node-port",
        ),
        pytest.param(
            {"type": "LoadBalancer", "clusterIP": "10.96.0.10", "ports": [{"port": 443}]},
            {},
            ["LoadBalancer", "10.96.0.10", "<pending>", "443/TCP", "<none>"],
            id="load-balancer-pending",
        ),
        pytest.param(
            {"type": "LoadBalancer", "clusterIP": "10.96.0.10", "ports": [{"port": 443}]},
            {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}, {"hostname": "lb.example.org"}]}},
            ["LoadBalancer", "10.96.0.10", "203.0.113.9,lb.example.org", "443/TCP", "<none>"],
            id="load-balancer",
        ),
        pytest.param(
            {"clusterIP": "None"}, {}, ["ClusterIP", "None", "<none>", "<none>", "<none>"], id="headless"
        ),
    ],
)
def test_service_rows(spec: dict[str, Any], status: dict[str, Any], expected: list[Any]) -> None:
    obj = {
        "metadata": {"name": "jupyter-alice", "creationTimestamp": ago(60)},
        "spec": spec,
        "status": status,
    }
    row = build_table(rt("", "services"), [obj], now=NOW)["rows"][0]["cells"]
    assert row == ["jupyter-alice", *expected[:4], "60s", expected[4]]


@pytest.mark.parametrize(
    ("group", "plural", "obj", "expected"),
    [
        pytest.param(
            "",
            "namespaces",
            {"metadata": {"name": "gpu-workspaces"}, "status": {"phase": "Terminating"}},
            ["gpu-workspaces", "Terminating", "<unknown>"],
            id="namespace",
        ),
        pytest.param(
            "",
            "secrets",
            {
                "metadata": {"name": "hub-token", "creationTimestamp": ago(5)},
                "type": "kubernetes.io/tls",
                "data": {"tls.crt": "", "tls.key": ""},
            },
            ["hub-token", "kubernetes.io/tls", 2, "5s"],
            id="secret",
        ),
        pytest.param(
            "",
            "configmaps",
            {
                "metadata": {"name": "cfg", "creationTimestamp": ago(5)},
                "data": {"a": "1"},
                "binaryData": {"b": ""},
            },
            ["cfg", 2, "5s"],
            id="configmap",
        ),
        pytest.param(
            "",
            "serviceaccounts",
            {"metadata": {"name": "hub", "creationTimestamp": ago(5)}},
            ["hub", 0, "5s"],
            id="serviceaccount",
        ),
        pytest.param(
            "storage.k8s.io",
            "storageclasses",
            {
                "metadata": {
                    "name": "ceph-rbd",
                    "creationTimestamp": ago(5),
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                },
                "provisioner": "rbd.csi.ceph.com",
                "allowVolumeExpansion": True,
                "volumeBindingMode": "WaitForFirstConsumer",
            },
            ["ceph-rbd (default)", "rbd.csi.ceph.com", "Delete", "WaitForFirstConsumer", True, "5s"],
            id="default-storageclass",
        ),
        pytest.param(
            "storage.k8s.io",
            "volumeattachments",
            {
                "metadata": {"name": "csi-123", "creationTimestamp": ago(5)},
                "spec": {
                    "attacher": "rbd.csi.ceph.com",
                    "nodeName": "n1",
                    "source": {"persistentVolumeName": "pv-1"},
                },
                "status": {"attached": True},
            },
            ["csi-123", "rbd.csi.ceph.com", "pv-1", "n1", True, "5s"],
            id="volumeattachment",
        ),
        pytest.param(
            "coordination.k8s.io",
            "leases",
            {
                "metadata": {"name": "spawner", "creationTimestamp": ago(5)},
                "spec": {"holderIdentity": "hub-0"},
            },
            ["spawner", "hub-0", "5s"],
            id="lease",
        ),
        pytest.param(
            "",
            "endpoints",
            {
                "metadata": {"name": "svc", "creationTimestamp": ago(5)},
                "subsets": [
                    {"addresses": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}], "ports": [{"port": 8888}]}
                ],
            },
            ["svc", "10.0.0.1:8888,[fd00::1]:8888", "5s"],
            id="endpoints",
        ),
        pytest.param(
            "",
            "endpoints",
            {"metadata": {"name": "svc", "creationTimestamp": ago(5)}},
            ["svc", "<none>", "5s"],
            id="endpoints-empty",
        ),
        pytest.param(
            "discovery.k8s.io",
            "endpointslices",
            {
                "metadata": {"name": "svc-abc", "creationTimestamp": ago(5)},
                "addressType": "IPv4",
                "ports": [{"port": 8888}, {"name": "metrics"}],
                "endpoints": [{"addresses": [f"10.0.0.{i}"]} for i in range(5)],
            },
            ["svc-abc", "IPv4", "8888,metrics", "10.0.0.0,10.0.0.1,10.0.0.2 + 2 more...", "5s"],
            id="endpointslice",
        ),
        pytest.param(
            "rbac.authorization.k8s.io",
            "rolebindings",
            {
                "metadata": {"name": "hub", "creationTimestamp": ago(5)},
                "roleRef": {"kind": "Role", "name": "spawner"},
                "subjects": [
                    {"kind": "ServiceAccount", "namespace": "jhub", "name": "hub"},
                    {"kind": "User", "name": "alice"},
                    {"kind": "Group", "name": "admins"},
                ],
            },
            ["hub", "Role/spawner", "5s", "alice", "admins", "jhub/hub"],
            id="rolebinding-wide",
        ),
        pytest.param(
            "rbac.authorization.k8s.io",
            "roles",
            {"metadata": {"name": "spawner", "creationTimestamp": "2024-04-30T10:00:00+02:00"}},
            ["spawner", "2024-04-30T08:00:00Z"],
            id="role-default-created-at",
        ),
        pytest.param(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            {
                "metadata": {
                    "name": "virtualmachines.kubevirt.io",
                    "creationTimestamp": "2024-01-02T03:04:05Z",
                }
            },
            ["virtualmachines.kubevirt.io", "2024-01-02T03:04:05Z"],
            id="crd-default-created-at",
        ),
    ],
)
def test_builtin_rows(group: str, plural: str, obj: dict[str, Any], expected: list[Any]) -> None:
    assert build_table(rt(group, plural), [obj], now=NOW)["rows"][0]["cells"] == expected


def test_default_columns_are_name_and_created_at() -> None:
    table = build_table(rt("rbac.authorization.k8s.io", "clusterroles"), [], now=NOW)
    assert [(c["name"], c["type"], c["format"]) for c in table["columnDefinitions"]] == [
        ("Name", "string", "name"),
        ("Created At", "date", ""),
    ]


@pytest.mark.parametrize(
    ("group", "obj"),
    [
        pytest.param(
            "",
            {
                "metadata": {"name": "jupyter-alice.17c"},
                "type": "Warning",
                "reason": "BackOff",
                "count": 7,
                "message": 'Back-off pulling image "bad:tag"\n',
                "firstTimestamp": ago(3600),
                "lastTimestamp": ago(30),
                "involvedObject": {
                    "kind": "Pod",
                    "name": "jupyter-alice",
                    "fieldPath": "spec.containers{notebook}",
                },
                "source": {"component": "kubelet", "host": "gpu-node-1"},
            },
            id="core-v1",
        ),
        pytest.param(
            "events.k8s.io",
            {
                "metadata": {"name": "jupyter-alice.17c"},
                "type": "Warning",
                "reason": "BackOff",
                "deprecatedCount": 7,
                "note": 'Back-off pulling image "bad:tag"',
                "eventTime": ago(3600),
                "series": {"count": 7, "lastObservedTime": ago(30)},
                "reportingController": "kubelet",
                "reportingInstance": "gpu-node-1",
                "regarding": {
                    "kind": "Pod",
                    "name": "jupyter-alice",
                    "fieldPath": "spec.containers{notebook}",
                },
            },
            id="events-k8s-io",
        ),
    ],
)
def test_event_rows(group: str, obj: dict[str, Any]) -> None:
    assert cells(group, "events", obj) == {
        "Last Seen": "30s",
        "Type": "Warning",
        "Reason": "BackOff",
        "Object": "pod/jupyter-alice",
        "Subobject": "spec.containers{notebook}",
        "Source": "kubelet, gpu-node-1",
        "Message": 'Back-off pulling image "bad:tag"',
        "First Seen": "60m",
        "Count": 7,
        "Name": "jupyter-alice.17c",
    }


VM_COLUMNS: list[dict[str, Any]] = [
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Status",
        "type": "string",
        "jsonPath": ".status.printableStatus",
        "description": "Human status",
    },
    {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status"},
    {"name": "IP", "type": "string", "jsonPath": ".status.interfaces[0].ipAddress", "priority": 1},
    {"name": "CIDRs", "type": "string", "jsonPath": ".spec.cidrs"},
    {"name": "CPUs", "type": "integer", "jsonPath": ".spec.cpus"},
    {"name": "Running", "type": "boolean", "jsonPath": ".spec.running"},
    {"name": "Started", "type": "date", "jsonPath": ".status.startedAt", "format": "date-time"},
]
VM: dict[str, Any] = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachine",
    "metadata": {
        "name": "vm-alice",
        "namespace": "gpu-workspaces",
        "creationTimestamp": ago(2 * 86400 + 3 * 3600),
    },
    "spec": {"running": True, "cpus": 4.0, "cidrs": ["10.0.0.0/24", "fd00::/64"]},
    "status": {
        "printableStatus": "Running",
        "conditions": [{"type": "Paused", "status": "False"}, {"type": "Ready", "status": "True"}],
        "interfaces": [{"ipAddress": "10.0.2.15"}],
        "startedAt": "not-a-time",
    },
}


def test_custom_resource_printer_columns() -> None:
    table = build_table(rt("kubevirt.io", "virtualmachines"), [VM], now=NOW, extra_columns=VM_COLUMNS)
    heads = table["columnDefinitions"]
    assert [h["name"] for h in heads] == ["Name", *(c["name"] for c in VM_COLUMNS)]
    assert heads[2]["description"] == "Human status"
    assert heads[3]["description"].endswith(".status.conditions[?(@.type=='Ready')].status")
    assert (heads[4]["priority"], heads[8]["format"]) == (1, "date-time")
    assert table["rows"][0]["cells"] == [
        "vm-alice",
        "2d3h",
        "Running",
        "True",
        "10.0.2.15",
        '["10.0.0.0/24","fd00::/64"]',
        4,
        True,
        "<invalid>",
    ]


def test_custom_resource_missing_fields_are_null() -> None:
    bare = {"metadata": {"name": "vm-bob", "creationTimestamp": ago(5)}}
    row = build_table(rt("kubevirt.io", "virtualmachines"), [bare], now=NOW, extra_columns=VM_COLUMNS)[
        "rows"
    ][0]
    assert row["cells"] == ["vm-bob", "5s", None, None, None, None, None, None, None]


def test_custom_resource_without_columns_gets_age() -> None:
    table = build_table(rt("cdi.kubevirt.io", "datavolumes"), [VM], now=NOW)
    assert [(c["name"], c["type"]) for c in table["columnDefinitions"]] == [
        ("Name", "string"),
        ("Age", "date"),
    ]
    assert table["rows"][0]["cells"] == ["vm-alice", "2d3h"]


def test_custom_resource_bad_jsonpath_is_a_server_error() -> None:
    with pytest.raises(ApiError) as info:
        build_table(
            rt("kubevirt.io", "virtualmachines"),
            [VM],
            now=NOW,
            extra_columns=[{"name": "X", "type": "string", "jsonPath": "..x"}],
        )
    assert info.value.code == 500


@pytest.mark.parametrize(
    ("path", "found"),
    [
        pytest.param(".status.printableStatus", ["Running"], id="field"),
        pytest.param("{.status.conditions[-1].type}", ["Ready"], id="braces-negative-index"),
        pytest.param(".status.conditions[*].type", ["Paused", "Ready"], id="wildcard"),
        pytest.param(".status.conditions[?(@.status!='True')].type", ["Paused"], id="filter-not-equal"),
        pytest.param(".spec.cidrs[0:1]", ["10.0.0.0/24"], id="slice"),
        pytest.param("$.metadata['namespace']", ["gpu-workspaces"], id="quoted-key"),
        pytest.param(".spec[?(@.cpus > 2)]", [], id="filter-on-non-list"),
        pytest.param(".status.interfaces[3].ipAddress", [], id="index-out-of-range"),
        pytest.param(".status.nope.deeper", [], id="missing-key"),
    ],
)
def test_jsonpath_subset(path: str, found: list[Any]) -> None:
    assert eval_jsonpath(parse_jsonpath(path), VM) == found


@pytest.mark.parametrize(
    ("include", "expected"),
    [
        pytest.param("None", None, id="none"),
        pytest.param("Object", VM, id="object"),
        pytest.param(
            "Metadata",
            {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": VM["metadata"]},
            id="metadata",
        ),
    ],
)
def test_include_object(include: str, expected: dict[str, Any] | None) -> None:
    row = build_table(rt("kubevirt.io", "virtualmachines"), [VM], now=NOW, include_object=include)["rows"][0]
    assert row.get("object") == expected


def test_list_metadata_and_bad_include_object() -> None:
    list_meta = {"resourceVersion": "77", "continue": "tok", "remainingItemCount": 3, "selfLink": "x"}
    table = build_table(rt("", "configmaps"), [], now=NOW, list_meta=list_meta)
    assert table["metadata"] == {"resourceVersion": "77", "continue": "tok", "remainingItemCount": 3}
    assert table["rows"] == []
    with pytest.raises(ApiError) as info:
        build_table(rt("", "configmaps"), [], now=NOW, include_object="Everything")
    assert (info.value.code, info.value.reason) == (400, "BadRequest")


@pytest.mark.parametrize(
    ("accept", "version"),
    [
        pytest.param(KUBECTL_ACCEPT, "v1", id="kubectl"),
        pytest.param("application/json;as=Table;v=v1beta1;g=meta.k8s.io", "v1beta1", id="v1beta1"),
        pytest.param("application/json", None, id="plain-json"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_table_version_from_accept(accept: str | None, version: str | None) -> None:
    assert table_version(accept) == version
