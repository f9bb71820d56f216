"""Sources' payloads → the attribution model (pure: text, JSON and API objects in, plain data out).

Direct scrapes are Prometheus text parsed with ``prometheus_client``'s parser: dcgm-exporter
(:func:`parse_dcgm`), the node agent (:func:`parse_agent`) and the kubelet's ``/metrics/resource``
(:func:`parse_resource_metrics`, :func:`cpu_rates`). In Prometheus mode the same models come from
``/api/v1/query`` vectors of the queries in :data:`PROMQL` (:func:`prometheus_vector_to_devices`,
:func:`prometheus_vector_to_processes`, :func:`prometheus_vector_to_usage`), and trends from
``/api/v1/query_range`` matrices (:func:`prometheus_matrix_to_points`). Kubernetes objects become
:class:`.NodeInfo` (:func:`node_info`) and :class:`.WorkspacePod` (:func:`workspace_pod`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ...catalog.units import GPU_RESOURCE, SHARED_GPU_RESOURCE, parse_quantity
from ...manifests.names import (
    ANN_CULL_EXEMPT,
    ANN_PROFILE,
    ANN_SERVERNAME,
    ANN_USERNAME,
    KIND_JOB,
    LABEL_COST_CENTER,
    LABEL_GPU_MODE,
    LABEL_JOB,
    LABEL_KIND,
    LABEL_PROFILE,
    LABEL_RUNTIME,
    LABEL_SERVER,
    LABEL_USER,
    workspace_names,
)
from .model import ContainerUsage, DeviceSample, NodeInfo, ProcessSample, WorkspacePod

Row = tuple[str, Mapping[str, str], float]  # (sample name, labels, value)
Points = list[tuple[float, float]]

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
POWER = "DCGM_FI_DEV_POWER_USAGE"
XID = "DCGM_FI_DEV_XID_ERRORS"
DCGM_FIELDS = (GPU_UTIL, GR_ENGINE_ACTIVE, FB_USED, FB_FREE, FB_RESERVED, POWER, XID)

AGENT_MEMORY = "gpuworkspace_agent_gpu_process_memory_bytes"
AGENT_SM_UTIL = "gpuworkspace_agent_gpu_process_sm_utilization_percent"
AGENT_PROCESSES = "gpuworkspace_agent_gpu_processes"
AGENT_NVML_UP = "gpuworkspace_agent_nvml_up"

CPU_SECONDS = "container_cpu_usage_seconds_total"
WORKING_SET = "container_memory_working_set_bytes"
MIB = 1024 * 1024
NVIDIA_PREFIX = "nvidia.com/"
MIG_PREFIX = "nvidia.com/mig-"

# Where a Prometheus series names its node: relabelled target labels first, then dcgm-exporter's own.
NODE_LABELS = ("node", "kubernetes_node", "Hostname", "hostname")

_DCGM_SELECTOR = "|".join(DCGM_FIELDS)
PROMQL: Mapping[str, str] = {
    # Instant queries (GET /api/v1/query?query=...): one vector each, every series keeps __name__.
    "devices": f'{{__name__=~"{_DCGM_SELECTOR}"}}',
    "processes": f'{{__name__=~"{AGENT_SM_UTIL}|{AGENT_MEMORY}|{AGENT_PROCESSES}"}}',
    "agent_up": f"{AGENT_NVML_UP} == 1",
    "cpu": f'sum by (namespace, pod) (rate({CPU_SECONDS}{{container!=""}}[2m]))',
    "memory": f'sum by (namespace, pod) ({WORKING_SET}{{container!=""}})',
    # Range queries (GET /api/v1/query_range?query=...&start=&end=&step=) for trends.
    "trend:cluster:gpu_util": f"avg({GPU_UTIL})",
    # by every label that may name the node (dcgm-exporter after 4.5.3 writes `hostname`, before `Hostname`)
    "trend:node:gpu_util": f"avg by ({', '.join(NODE_LABELS)}) ({GPU_UTIL})",
    "trend:pod:gpu_util": f'avg by (namespace, pod) ({GPU_UTIL}{{pod!=""}})',
}


def _value(v: float) -> float | None:
    return None if math.isnan(v) else v


class SeriesCache:
    """Parsed series names and labels, by the text of the series, for scrapes repeated every cycle.

    A scrape repeats the same series with new values each time; parsing dozens of labels per line
    with ``prometheus_client``'s parser is what a collector cycle would spend most of its CPU on. The
    first time a series appears its line goes through that parser; afterwards only the value (and
    timestamp) after the series text is read. Bounded: emptied when it holds ``max_series``.
    """

    def __init__(self, max_series: int = 200_000) -> None:
        self.max_series = max_series
        # keyed by the label set's text: one entry serves every metric family of an entity
        self._labels: dict[str, dict[str, str]] = {}

    def __len__(self) -> int:
        return len(self._labels)

    def samples(self, text: str) -> Iterator[tuple[str, Mapping[str, str], float, float | None]]:
        """(name, labels, value, timestamp in s) of every sample line; comments and blanks skipped."""
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            brace = line.find("{")
            if brace < 0:  # no labels: "name value [timestamp]"
                name, _, rest = line.partition(" ")
                key, labels = "", _NO_LABELS
            else:
                end = line.rfind("}")
                name, key, rest = line[:brace], line[brace : end + 1], line[end + 1 :]
                labels = self._labels.get(key) or self._learn(key, line)
            values = rest.split()
            if not name or not values:
                continue
            timestamp = float(values[1]) / 1000 if len(values) > 1 else None
            yield name, labels, float(values[0]), timestamp

    def _learn(self, key: str, line: str) -> dict[str, str]:
        parsed = [s for f in text_string_to_metric_families(line + "\n") for s in f.samples]
        labels = {k: sys.intern(v) for k, v in parsed[0].labels.items()} if parsed else {}
        if len(self._labels) >= self.max_series:
            self._labels.clear()
        self._labels[key] = labels
        return labels


_NO_LABELS: Mapping[str, str] = MappingProxyType({})


def _text_rows(text: str, cache: SeriesCache | None = None) -> Iterator[Row]:
    if cache is not None:
        for name, labels, value, _ts in cache.samples(text):
            yield name, labels, value
        return
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            yield s.name, s.labels, float(s.value)


# ------------------------------------------------------------------------------------------ dcgm
def _devices(rows: Iterable[Row], node_of: Callable[[Mapping[str, str]], str]) -> list[DeviceSample]:
    """Group dcgm rows by entity (node, card, GPU instance); several series per entity (``vgpu``) merge."""
    values: dict[tuple[str, str, str, str | None], dict[str, float | None]] = {}
    meta: dict[tuple[str, str, str, str | None], dict[str, Any]] = {}
    for name, labels, value in rows:
        if name not in DCGM_FIELDS:
            continue
        node = node_of(labels)
        key = (node, labels.get("gpu", ""), labels.get("UUID", ""), labels.get("GPU_I_ID") or None)
        values.setdefault(key, {})[name] = _value(value)
        m = meta.setdefault(
            key, {"model": labels.get("modelName", ""), "profile": labels.get("GPU_I_PROFILE"), "pods": []}
        )
        ref = (labels.get("namespace", ""), labels.get("pod", ""))
        if ref[1] and ref not in m["pods"]:
            m["pods"].append(ref)
    out = []
    for key, v in values.items():
        node, gpu, uuid, instance = key
        m = meta[key]
        util = v.get(GPU_UTIL) if instance is None else None
        if util is None and v.get(GR_ENGINE_ACTIVE) is not None:
            util = float(v[GR_ENGINE_ACTIVE] or 0.0) * 100
        used, free = v.get(FB_USED), v.get(FB_FREE)
        total = None if used is None or free is None else used + free + (v.get(FB_RESERVED) or 0.0)
        out.append(
            DeviceSample(
                node=node,
                gpu=gpu,
                uuid=uuid,
                model=m["model"],
                util_percent=util,
                mem_used_mib=used,
                mem_total_mib=total,
                power_w=v.get(POWER),
                xid=int(v.get(XID) or 0),
                mig_profile=m["profile"] if instance is not None else None,
                mig_instance=instance,
                pods=tuple(m["pods"]),
            )
        )
    return sorted(out, key=_device_order)


def _device_order(d: DeviceSample) -> tuple[str, int, str, int, str]:
    inst = d.mig_instance or ""
    return (
        d.node,
        int(d.gpu) if d.gpu.isdigit() else 1 << 30,
        d.gpu,
        int(inst) if inst.isdigit() else -1,
        inst,
    )


def parse_dcgm(text: str, node: str, cache: SeriesCache | None = None) -> list[DeviceSample]:
    """dcgm-exporter's ``/metrics`` of ``node``: one sample per card or MIG instance.

    MIG instances (series with ``GPU_I_ID``) take ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` x 100 as their
    utilisation (their ``DCGM_FI_DEV_GPU_UTIL`` reads 0); cards fall back to it when GPU_UTIL is absent.
    Empty ``pod`` labels (an unattributed device) name no pod.
    """
    return _devices(_text_rows(text, cache), lambda _labels: node)


# ----------------------------------------------------------------------------------------- agent
def _processes(rows: Iterable[Row], node_of: Callable[[Mapping[str, str]], str]) -> list[ProcessSample]:
    """Agent rows summed per (node, card UUID, pod uid): a pod's processes on MIG instances of one card add up."""
    acc: dict[tuple[str, str, str], list[float]] = {}
    for name, labels, value in rows:
        if name not in (AGENT_MEMORY, AGENT_SM_UTIL, AGENT_PROCESSES) or math.isnan(value):
            continue
        key = (node_of(labels), labels.get("uuid", ""), labels.get("pod_uid", ""))
        a = acc.setdefault(key, [0.0, 0.0, 0.0])
        a[(AGENT_SM_UTIL, AGENT_MEMORY, AGENT_PROCESSES).index(name)] += value
    return [
        ProcessSample(
            node=node,
            gpu_uuid=uuid,
            pod_uid=uid,
            sm_util_percent=a[0],
            mem_used_bytes=a[1],
            processes=int(a[2]),
        )
        for (node, uuid, uid), a in sorted(acc.items())
    ]


def parse_agent(text: str, node: str, cache: SeriesCache | None = None) -> list[ProcessSample]:
    """The node agent's ``/metrics``: per pod and card, its processes' SM utilisation and memory."""
    return _processes(_text_rows(text, cache), lambda _labels: node)


def agent_nvml_up(text: str) -> bool:
    """Whether the agent's NVML answered (``gpuworkspace_agent_nvml_up`` is 1)."""
    return any(name == AGENT_NVML_UP and value == 1 for name, _, value in _text_rows(text))


# --------------------------------------------------------------------------------------- kubelet
ResourceTotals = dict[tuple[str, str], tuple[float, float, float | None]]


def parse_resource_metrics(text: str, cache: SeriesCache | None = None) -> ResourceTotals:
    """The kubelet's ``/metrics/resource``: (namespace, pod) → (cpu seconds, working set bytes, ts in ms).

    Containers of a pod are summed; the timestamp is the latest sample's (None when the kubelet sent none).
    """
    acc: dict[tuple[str, str], list[Any]] = {}
    rows = (
        cache.samples(text)
        if cache is not None
        else (
            (s.name, s.labels, float(s.value), None if s.timestamp is None else float(s.timestamp))
            for f in text_string_to_metric_families(text)
            for s in f.samples
        )
    )
    for name, labels, value, timestamp in rows:
        if name not in (CPU_SECONDS, WORKING_SET) or not labels.get("pod"):
            continue
        a = acc.setdefault((labels.get("namespace", ""), labels["pod"]), [0.0, 0.0, None])
        a[0 if name == CPU_SECONDS else 1] += value
        if timestamp is not None:
            ms = timestamp * 1000
            a[2] = ms if a[2] is None else max(a[2], ms)
    return {key: (a[0], a[1], a[2]) for key, a in acc.items()}


def cpu_rates(prev: ResourceTotals, cur: ResourceTotals, dt: float) -> list[ContainerUsage]:
    """CPU cores from two scrapes ``dt`` seconds apart (the samples' own timestamps when both have one).

    A pod seen once, or whose counter went back (restarted), has ``cpu_cores`` None; memory is the
    current working set.
    """
    out = []
    for (ns, pod), (cpu, mem, ts) in sorted(cur.items()):
        cores: float | None = None
        before = prev.get((ns, pod))
        if before is not None:
            span = (ts - before[2]) / 1000 if ts is not None and before[2] is not None else dt
            if span > 0 and cpu >= before[0]:
                cores = (cpu - before[0]) / span
        out.append(ContainerUsage(namespace=ns, pod=pod, cpu_cores=cores, memory_bytes=mem))
    return out


# ------------------------------------------------------------------------------------ Prometheus
def _vector(result: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, str], float]]:
    data = result.get("data") or {}
    if result.get("status", "success") != "success" or data.get("resultType") != "vector":
        raise ValueError(f"not a Prometheus vector result: {str(result)[:200]}")
    for item in data.get("result") or []:
        yield item.get("metric") or {}, float(item["value"][1])


def _node_label(labels: Mapping[str, str]) -> str:
    return next((labels[k] for k in NODE_LABELS if labels.get(k)), "")


def prometheus_vector_to_devices(result: Mapping[str, Any]) -> list[DeviceSample]:
    """An instant ``PROMQL["devices"]`` answer → the same samples as :func:`parse_dcgm` gives."""
    rows = ((labels.get("__name__", ""), labels, v) for labels, v in _vector(result))
    return _devices(rows, _node_label)


def prometheus_vector_to_processes(result: Mapping[str, Any]) -> list[ProcessSample]:
    """An instant ``PROMQL["processes"]`` answer → the same samples as :func:`parse_agent` gives."""
    rows = ((labels.get("__name__", ""), labels, v) for labels, v in _vector(result))
    return _processes(rows, _node_label)


def prometheus_agent_nodes(result: Mapping[str, Any]) -> frozenset[str]:
    """An instant ``PROMQL["agent_up"]`` answer → the nodes whose agent reads NVML."""
    return frozenset(_node_label(labels) for labels, v in _vector(result) if v == 1)


def prometheus_vector_to_usage(cpu: Mapping[str, Any], memory: Mapping[str, Any]) -> list[ContainerUsage]:
    """Instant ``PROMQL["cpu"]`` and ``PROMQL["memory"]`` answers → usage per pod."""
    acc: dict[tuple[str, str], list[float | None]] = {}
    for i, result in enumerate((cpu, memory)):
        for labels, v in _vector(result):
            key = (labels.get("namespace", ""), labels.get("pod", ""))
            if key[1]:
                acc.setdefault(key, [None, None])[i] = _value(v)
    return [ContainerUsage(ns, pod, a[0], a[1]) for (ns, pod), a in sorted(acc.items())]


def prometheus_matrix_to_points(result: Mapping[str, Any]) -> list[tuple[dict[str, str], Points]]:
    """A ``/api/v1/query_range`` answer → (labels, [(t, v), ...]) per series, NaN points dropped."""
    data = result.get("data") or {}
    if result.get("status", "success") != "success" or data.get("resultType") != "matrix":
        raise ValueError(f"not a Prometheus matrix result: {str(result)[:200]}")
    out = []
    for item in data.get("result") or []:
        points = [(float(t), float(v)) for t, v in item.get("values") or [] if not math.isnan(float(v))]
        out.append((dict(item.get("metric") or {}), points))
    return out


# ------------------------------------------------------------------------------------ Kubernetes
def _quantities(raw: Mapping[str, Any] | None) -> dict[str, float]:
    out = {}
    for name, text in (raw or {}).items():
        try:
            out[str(name)] = float(parse_quantity(str(text)))
        except ValueError:
            continue
    return out


def _taint(t: Mapping[str, Any]) -> str:
    value = t.get("value")
    return f"{t.get('key', '')}{'=' + str(value) if value else ''}:{t.get('effect', '')}"


def node_info(node_obj: Mapping[str, Any]) -> NodeInfo:
    """A Node object → :class:`.NodeInfo` (Ready condition, taints, quantities as numbers)."""
    meta, spec, status = (node_obj.get(k) or {} for k in ("metadata", "spec", "status"))
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    address = next(
        (a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"), None
    )
    return NodeInfo(
        name=str(meta.get("name", "")),
        ready=ready,
        unschedulable=bool(spec.get("unschedulable", False)),
        taints=tuple(_taint(t) for t in spec.get("taints") or []),
        capacity=_quantities(status.get("capacity")),
        allocatable=_quantities(status.get("allocatable")),
        labels=dict(meta.get("labels") or {}),
        address=address,
    )


def _pod_resources(spec: Mapping[str, Any], kind: str) -> dict[str, float]:
    """Effective pod resources: the containers' sum, or the largest init container's when larger."""
    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for name, v in _quantities((c.get("resources") or {}).get(kind)).items():
            total[name] = total.get(name, 0.0) + v
    for c in spec.get("initContainers") or []:
        for name, v in _quantities((c.get("resources") or {}).get(kind)).items():
            total[name] = max(total.get(name, 0.0), v)
    return total


def _gpu_mode(labels: Mapping[str, str], gpus: Mapping[str, int]) -> str:
    if labels.get(LABEL_GPU_MODE):
        return labels[LABEL_GPU_MODE]
    if any(n.startswith(MIG_PREFIX) for n in gpus):
        return "mig"
    if SHARED_GPU_RESOURCE in gpus:
        return "time-sliced"
    return "exclusive" if gpus else "none"


def _epoch(stamp: Any) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


READ_LABELS = (
    LABEL_USER,
    LABEL_SERVER,
    LABEL_PROFILE,
    LABEL_RUNTIME,
    LABEL_COST_CENTER,
    LABEL_GPU_MODE,
    LABEL_KIND,
    LABEL_JOB,
)
READ_ANNOTATIONS = (ANN_USERNAME, ANN_SERVERNAME, ANN_PROFILE, ANN_CULL_EXEMPT)


def pod_essentials(pod_obj: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a pod :func:`workspace_pod` reads (what a watch cache needs to hold of it): 2,000
    workspace pods' other labels and annotations (KubeSpawner's among them) took ~8 MiB."""
    meta, spec, status = (pod_obj.get(k) or {} for k in ("metadata", "spec", "status"))
    kept_meta = ("name", "namespace", "uid", "deletionTimestamp")
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return {
        "metadata": {
            **{k: meta[k] for k in kept_meta if k in meta},
            "labels": {k: labels[k] for k in READ_LABELS if k in labels},
            "annotations": {k: annotations[k] for k in READ_ANNOTATIONS if k in annotations},
        },
        "spec": {
            "nodeName": spec.get("nodeName"),
            **{
                kind: [
                    {"name": c.get("name"), "resources": c.get("resources") or {}}
                    for c in spec.get(kind) or []
                ]
                for kind in ("containers", "initContainers")
            },
        },
        "status": {"phase": status.get("phase"), "startTime": status.get("startTime")},
    }


def workspace_pod(pod_obj: Mapping[str, Any]) -> WorkspacePod | None:
    """A pod → :class:`.WorkspacePod`, or None when it is no workspace or holds nothing.

        Workspaces carry our user label (container pods, and our VMs' virt-launcher pods); so do the pods of
        the jobs users submit (kind ``job``, told apart by ``gpuworkspace.dev/kind=job``). Only pods bound
        to a node that may still hold devices count: Running, or Pending with a node; terminating pods are
        kept (they hold their devices until they are gone). Names come from the exact-name annotations only: a
    pod without them is attributed to nobody.
    """
    meta, spec, status = (pod_obj.get(k) or {} for k in ("metadata", "spec", "status"))
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    phase = str(status.get("phase") or "Pending")
    node = spec.get("nodeName")
    names = workspace_names(meta)  # exact names only: a label value may be another user's name hashed
    if LABEL_USER not in labels or names is None or not node or phase not in ("Running", "Pending"):
        return None
    user, server = names
    limits, requests = _pod_resources(spec, "limits"), _pod_resources(spec, "requests")
    gpus = {
        name: int(v)
        for name, v in {**requests, **limits}.items()
        if name.startswith(NVIDIA_PREFIX) and int(v) > 0
    }
    return WorkspacePod(
        namespace=str(meta.get("namespace", "")),
        pod=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        user=str(user),
        server=str(server),
        profile=str(annotations.get(ANN_PROFILE) or labels.get(LABEL_PROFILE, "")),
        gpu_mode=_gpu_mode(labels, gpus),
        runtime=str(labels.get(LABEL_RUNTIME) or "container"),
        node=str(node),
        phase=phase,
        cost_center=str(labels.get(LABEL_COST_CENTER, "")),
        cpu_request=requests.get("cpu", 0.0),
        cpu_limit=limits.get("cpu"),
        memory_request=requests.get("memory", 0.0),
        memory_limit=limits.get("memory"),
        gpu_resources=gpus,
        started_at=_epoch(status.get("startTime")),
        cull_exempt=str(annotations.get(ANN_CULL_EXEMPT, "")).lower() == "true",
        kind=KIND_JOB if labels.get(LABEL_KIND) == KIND_JOB else "workspace",
        job=str(labels.get(LABEL_JOB, "")) if labels.get(LABEL_KIND) == KIND_JOB else "",
    )


def is_shared_resource(name: str) -> bool:
    """A time-slicing resource (``nvidia.com/gpu.shared`` or another renamed ``*.shared``)."""
    return name == SHARED_GPU_RESOURCE or (name.startswith(NVIDIA_PREFIX) and name.endswith(".shared"))


def is_dcgm_resource(name: str) -> bool:
    """A resource whose devices dcgm-exporter sees (whole, shared or MIG); the rest are passthrough."""
    return name == GPU_RESOURCE or name.startswith(MIG_PREFIX) or is_shared_resource(name)
