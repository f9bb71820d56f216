"""Server-side defaulting, as the real API server's defaulters and built-in admission do.

Pure functions: ``apply_defaults(rt, obj, ctx)`` mutates a fresh copy the caller owns.
Only the defaults clients observably rely on are filled in (kubectl describe, KubeSpawner,
the simulated controllers).
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .addresses import service_cidr
from .resources import ResourceType

Obj = dict[str, Any]


@dataclass
class DefaultingContext:
    """What defaulting may look at: the default StorageClass and a ClusterIP allocator."""

    default_storage_class: str | None
    allocate_cluster_ip: Callable[[], str]


def container_defaults(container: Obj) -> None:
    """``SetDefaults_Container`` (pods and pod templates)."""
    image = container.get("image", "")
    tagless = ":" not in image.rsplit("/", 1)[-1] and "@" not in image
    pull = "Always" if tagless or image.endswith(":latest") else "IfNotPresent"
    container.setdefault("imagePullPolicy", pull)
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")
    # DefaultingFunc: requests default to limits when only limits are set
    res = container["resources"]
    if res.get("limits") and not res.get("requests"):
        res["requests"] = dict(res["limits"])


def _qos_class(spec: Obj) -> str:
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    requests_any = limits_all = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        requests_any = requests_any or bool(req) or bool(lim)
        for name in ("cpu", "memory"):
            if name not in lim or (name in req and str(req[name]) != str(lim[name])):
                guaranteed = False
        limits_all = limits_all or bool(lim)
    if not requests_any:
        return "BestEffort"
    return "Guaranteed" if guaranteed and limits_all else "Burstable"


def _pod_defaults(pod: Obj) -> None:
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    sa = spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", sa)
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        container_defaults(c)
    # DefaultTolerationSeconds admission plugin
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key for t in tolerations):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    status = pod.setdefault("status", {})
    status.setdefault("phase", "Pending")
    status.setdefault("qosClass", _qos_class(spec))


def _service_defaults(svc: Obj, ctx: DefaultingContext) -> None:
    spec = svc.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    if spec["type"] != "ExternalName" and "clusterIP" not in spec:
        spec["clusterIP"] = ctx.allocate_cluster_ip()
    if spec.get("clusterIP") and "clusterIPs" not in spec:
        spec["clusterIPs"] = [spec["clusterIP"]]
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    svc.setdefault("status", {"loadBalancer": {}})


def _pvc_defaults(pvc: Obj, ctx: DefaultingContext) -> None:
    spec = pvc.setdefault("spec", {})
    spec.setdefault("volumeMode", "Filesystem")
    # DefaultStorageClass admission plugin: only when the field is absent (not when "")
    if "storageClassName" not in spec and ctx.default_storage_class:
        spec["storageClassName"] = ctx.default_storage_class
    pvc.setdefault("status", {}).setdefault("phase", "Pending")


def _pv_defaults(pv: Obj) -> None:
    spec = pv.setdefault("spec", {})
    spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
    spec.setdefault("volumeMode", "Filesystem")
    pv.setdefault("status", {}).setdefault("phase", "Pending")


def _namespace_defaults(ns: Obj) -> None:
    ns.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    ns.setdefault("status", {}).setdefault("phase", "Active")
    labels = ns["metadata"].setdefault("labels", {})
    labels["kubernetes.io/metadata.name"] = ns["metadata"]["name"]


def _secret_defaults(secret: Obj) -> None:
    secret.setdefault("type", "Opaque")
    string_data = secret.pop("stringData", None) or {}
    data = secret.setdefault("data", {}) if string_data else secret.get("data")
    for key, value in string_data.items():
        assert data is not None
        data[key] = base64.b64encode(str(value).encode()).decode()


def _event_defaults(event: Obj) -> None:
    # core/v1 Event's time fields and reporting fields have no omitempty: Go serialises them always.
    for key in ("firstTimestamp", "lastTimestamp", "eventTime"):
        event.setdefault(key, None)
    event.setdefault("reportingComponent", "")
    event.setdefault("reportingInstance", "")
    event.setdefault("source", {})


def _storageclass_defaults(sc: Obj) -> None:
    sc.setdefault("reclaimPolicy", "Delete")
    sc.setdefault("volumeBindingMode", "Immediate")


_POD_SPEC_DEFAULTS: dict[str, Any] = {
    "restartPolicy": "Always",
    "dnsPolicy": "ClusterFirst",
    "schedulerName": "default-scheduler",
    "terminationGracePeriodSeconds": 30,
    "securityContext": dict,
}


def _cronjob_defaults(cronjob: Obj) -> None:
    """``SetDefaults_CronJob`` (k8s.io/kubernetes pkg/apis/batch/v1/defaults.go), then the generated
    defaulters' ``SetDefaults_PodSpec`` and container defaults for the job template's pod template."""
    spec = cronjob.setdefault("spec", {})
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    pod = spec.setdefault("jobTemplate", {}).setdefault("spec", {}).setdefault("template", {})
    pod_spec = pod.setdefault("spec", {})
    for key, value in _POD_SPEC_DEFAULTS.items():
        pod_spec.setdefault(key, value() if callable(value) else value)
    for container in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
        if isinstance(container, dict):
            container_defaults(container)


def _priorityclass_defaults(pc: Obj) -> None:
    # SetDefaults_PriorityClass (pkg/apis/scheduling/v1/defaults.go)
    pc.setdefault("preemptionPolicy", "PreemptLowerPriority")


_SIMPLE: dict[tuple[str, str], Callable[[Obj], None]] = {
    ("", "pods"): _pod_defaults,
    ("", "persistentvolumes"): _pv_defaults,
    ("", "namespaces"): _namespace_defaults,
    ("", "secrets"): _secret_defaults,
    ("", "events"): _event_defaults,
    ("storage.k8s.io", "storageclasses"): _storageclass_defaults,
    ("batch", "cronjobs"): _cronjob_defaults,
    ("scheduling.k8s.io", "priorityclasses"): _priorityclass_defaults,
}


def apply_defaults(rt: ResourceType, obj: Obj, ctx: DefaultingContext) -> None:
    """Fill in server defaults for a new object (create) in place."""
    simple = _SIMPLE.get(rt.key)
    if simple is not None:
        simple(obj)
    elif rt.key == ("", "services"):
        _service_defaults(obj, ctx)
    elif rt.key == ("", "persistentvolumeclaims"):
        _pvc_defaults(obj, ctx)


def apply_update_defaults(rt: ResourceType, obj: Obj) -> None:
    """Defaults that also apply to updates (stringData is write-only)."""
    if rt.key == ("", "secrets"):
        _secret_defaults(obj)
    elif rt.key == ("", "pods"):
        for c in list(obj.get("spec", {}).get("containers") or []):
            container_defaults(c)
    elif rt.key in (("batch", "cronjobs"), ("scheduling.k8s.io", "priorityclasses")):
        _SIMPLE[rt.key](obj)  # decoding defaults every write, updates too


# The --service-cluster-ip-range of devcluster instance 0 (each instance has its own, addresses.py).
# Loopback, so that the host can reach ClusterIPs (the simulation's kube-proxy listens on them,
# sim/serviceproxy.py); clients treat the IP as opaque, as they must on any cluster (each picks its own
# range; kubeadm's default is 10.96.0.0/12).
SERVICE_CIDR = service_cidr(0)


class ClusterIPAllocator:
    """Allocates service IPs from the service range (:data:`SERVICE_CIDR`), skipping ``used`` ones."""

    def __init__(self, cidr: str = SERVICE_CIDR, used: set[str] | None = None) -> None:
        self._net = ipaddress.ip_network(cidr)
        self._used = set(used or ())
        self._next = 10  # .1 is kubernetes.default

    def __call__(self) -> str:
        while True:
            ip = str(self._net.network_address + self._next)
            self._next += 1
            if ip not in self._used:
                self._used.add(ip)
                return ip
