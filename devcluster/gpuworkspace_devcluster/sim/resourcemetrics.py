"""What a simulated node serves for metrics, on its InternalIP: the kubelet's ``/metrics/resource`` and
``/metrics`` (port 10250) and, on GPU nodes, dcgm-exporter's ``/metrics`` (port 9400, rendered by
:mod:`.dcgm`), with the GPU operator's discovery objects. :class:`DcgmExporter` runs both.

The kubelet port is HTTPS when the cluster serves TLS, as a real kubelet's: its serving certificate
(node IP and name) is signed by the cluster CA, as with ``serverTLSBootstrap`` (clients verify it with
the kubeconfig's CA), and a request needs a bearer token the API authenticates and that RBAC allows
``get`` on ``nodes/metrics`` (webhook authentication and authorization: 401, 403 otherwise). Without
TLS it is plain HTTP with no checks (a test cluster's).

``/metrics/resource`` is what metrics-server scrapes. Families, help texts, label names and the
per-sample millisecond timestamps are the kubelet's (``pkg/kubelet/metrics/collectors/resource_metrics.go``):
``container_cpu_usage_seconds_total``, ``container_memory_working_set_bytes``,
``container_start_time_seconds``, their ``pod_*`` and ``node_*`` sums and ``resource_scrape_error``.
Values come from the container's real local process tree where the kubelet knows its pid (``/proc``:
utime+stime of the tree and of its reaped children, RSS as the working set), else from the pod's
scripted workload (``cpu_cores`` integrated over time, ``memory_bytes``), else 0. The node's usage is
the sum of its pods' (no system overhead).

The kubelet's ``/metrics`` here carries only its volume stats families (``kubelet_volume_stats_*``,
``pkg/kubelet/metrics/collectors/volume_stats.go``) with labels ``namespace`` and
``persistentvolumeclaim``, for the claims of our CSI drivers mounted by unfinished pods on the node:
used bytes are the volume directory's apparent size (as :func:`.csi.volume_usage`), capacity the PV's,
available their difference. The inode families are the kubelet's too (``kubelet_volume_stats_inodes``,
``…_inodes_free``, ``…_inodes_used``: a CSI volume's come from the driver's ``NodeGetVolumeStats``,
``pkg/volume/csi/csi_metrics.go``, which Ceph CSI answers with ``statfs`` of the mounted file system):
inodes used are the files and directories under the volume directory plus its root (what ``du
--inodes`` counts), the total is what ``mkfs.ext4`` gives the RBD image (one inode per 16 KiB, the
``inode_ratio`` of e2fsprogs' default ``mke2fs.conf``), free their difference.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from aiohttp import web

from ..errors import ApiError
from ..rbac import RequestAttributes
from ..resources import ResourceType
from ..store import Obj, TypeKey
from ..verbs import Verbs
from .base import Key, SimController, rt_of
from .context import SimContext
from .csi import DRIVERS, bound_volume, pod_claims, pod_on_node, size_of, volume_dir
from .dcgm import ExporterOptions, Gpu, card_power, load_counters, node_inventory, render_metrics
from .failures import SimFaults, faults_of, node_ip, pods_on
from .workloads import WorkloadBook, workload_book

log = logging.getLogger(__name__)

_FAMILIES = (
    (
        "container_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the container in core-seconds",
    ),
    ("container_memory_working_set_bytes", "gauge", "Current working set of the container in bytes"),
    ("container_start_time_seconds", "gauge", "Start time of the container since unix epoch in seconds"),
    ("node_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the node in core-seconds"),
    ("node_memory_working_set_bytes", "gauge", "Current working set of the node in bytes"),
    ("pod_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the pod in core-seconds"),
    ("pod_memory_working_set_bytes", "gauge", "Current working set of the pod in bytes"),
    (
        "resource_scrape_error",
        "gauge",
        "1 if there was an error while getting container metrics, 0 otherwise",
    ),
)
METRIC_NAMES = tuple(name for name, _, _ in _FAMILIES)
# Go's 'g' formatting with the shortest precision writes %e below 1e-4 and from 1e6 (precision 6) on.
_MIN_FIXED_EXP, _MAX_FIXED_EXP = -4, 6
_STAT_FIELDS = 15  # proc(5) stat fields 3..17 (state .. cstime)


@dataclass(frozen=True)
class ContainerUsage:
    namespace: str
    pod: str
    container: str
    cpu_seconds: float
    memory_bytes: float
    start_time: float | None = None  # epoch seconds


def go_float(value: float) -> str:
    """``strconv.FormatFloat(v, 'g', -1, 64)``, as Go's Prometheus text encoder writes sample values."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    point = len(digits) + exponent  # decimal point position within the digits
    exp10 = point - 1
    prefix = "-" if sign else ""
    if exp10 < _MIN_FIXED_EXP or exp10 >= _MAX_FIXED_EXP:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{prefix}{mantissa}e{'+' if exp10 >= 0 else '-'}{abs(exp10):02d}"
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{text}"
    if point >= len(text):
        return f"{prefix}{text}{'0' * (point - len(text))}"
    return f"{prefix}{text[:point]}.{text[point:]}"


def render_resource_metrics(containers: Iterable[ContainerUsage], now: float) -> str:
    """The body of ``GET /metrics/resource``: containers, their pods' sums, the node's sum."""
    ts = str(int(now * 1000))
    items = sorted(containers, key=lambda c: (c.container, c.namespace, c.pod))
    pods: dict[tuple[str, str], list[float]] = {}
    for c in items:
        acc = pods.setdefault((c.namespace, c.pod), [0.0, 0.0])
        acc[0] += c.cpu_seconds
        acc[1] += c.memory_bytes

    def clabels(c: ContainerUsage) -> str:
        return f'container="{c.container}",namespace="{c.namespace}",pod="{c.pod}"'

    samples: dict[str, list[str]] = {name: [] for name in METRIC_NAMES}
    for c in items:
        samples["container_cpu_usage_seconds_total"].append(
            f"{{{clabels(c)}}} {go_float(c.cpu_seconds)} {ts}"
        )
        samples["container_memory_working_set_bytes"].append(
            f"{{{clabels(c)}}} {go_float(c.memory_bytes)} {ts}"
        )
        if c.start_time is not None:
            start_ms = str(int(c.start_time * 1000))
            samples["container_start_time_seconds"].append(
                f"{{{clabels(c)}}} {go_float(c.start_time)} {start_ms}"
            )
    for (ns, pod), (cpu, mem) in sorted(pods.items()):
        samples["pod_cpu_usage_seconds_total"].append(
            f'{{namespace="{ns}",pod="{pod}"}} {go_float(cpu)} {ts}'
        )
        samples["pod_memory_working_set_bytes"].append(
            f'{{namespace="{ns}",pod="{pod}"}} {go_float(mem)} {ts}'
        )
    total_cpu = sum(v[0] for v in pods.values())
    total_mem = sum(v[1] for v in pods.values())
    samples["node_cpu_usage_seconds_total"].append(f" {go_float(total_cpu)} {ts}")
    samples["node_memory_working_set_bytes"].append(f" {go_float(total_mem)} {ts}")
    samples["resource_scrape_error"].append(" 0")
    out = []
    for name, kind, help_text in sorted(_FAMILIES):
        out.append(f"# HELP {name} [STABLE] {help_text}\n# TYPE {name} {kind}\n")
        out.extend(f"{name}{line}\n" for line in samples[name])
    return "".join(out)


_VOLUME_FAMILIES = (  # (family, help) as pkg/kubelet/metrics/collectors/volume_stats.go describes them
    ("kubelet_volume_stats_available_bytes", "Number of available bytes in the volume"),
    ("kubelet_volume_stats_capacity_bytes", "Capacity in bytes of the volume"),
    ("kubelet_volume_stats_inodes", "Maximum number of inodes in the volume"),
    ("kubelet_volume_stats_inodes_free", "Number of free inodes in the volume"),
    ("kubelet_volume_stats_inodes_used", "Number of used inodes in the volume"),
    ("kubelet_volume_stats_used_bytes", "Number of used bytes in the volume"),
)
EXT4_INODE_RATIO = 16384  # bytes per inode: e2fsprogs' mke2fs.conf [defaults] inode_ratio


@dataclass(frozen=True)
class VolumeStat:
    namespace: str
    claim: str
    used: int
    capacity: int
    inodes_used: int = 1  # the root directory

    @property
    def inodes(self) -> int:
        return max(self.capacity // EXT4_INODE_RATIO, self.inodes_used)

    def value(self, family: str) -> int:
        return {
            "kubelet_volume_stats_available_bytes": max(self.capacity - self.used, 0),
            "kubelet_volume_stats_capacity_bytes": self.capacity,
            "kubelet_volume_stats_inodes": self.inodes,
            "kubelet_volume_stats_inodes_free": self.inodes - self.inodes_used,
            "kubelet_volume_stats_inodes_used": self.inodes_used,
            "kubelet_volume_stats_used_bytes": self.used,
        }[family]


def render_volume_stats(stats: Iterable[VolumeStat]) -> str:
    """The volume stats families of the kubelet's ``GET /metrics`` (gauges, no timestamps)."""
    items = sorted(stats, key=lambda v: (v.namespace, v.claim))
    out = []
    for name, help_text in _VOLUME_FAMILIES:
        out.append(f"# HELP {name} [ALPHA] {help_text}\n# TYPE {name} gauge\n")
        for v in items:
            value = v.value(name)
            labels = f'namespace="{v.namespace}",persistentvolumeclaim="{v.claim}"'
            out.append(f"{name}{{{labels}}} {go_float(float(value))}\n")
    return "".join(out)


def mounted_volumes(ctx: SimContext, node: str) -> list[tuple[str, str, Path, int]]:
    """(namespace, claim, volume directory, capacity bytes) of the claims that unfinished pods on
    ``node`` mount, each once (reads the store: call it on the event loop)."""
    seen: dict[tuple[str, str], tuple[str, str, Path, int]] = {}
    for pod in pods_on(ctx, node):
        if not pod_on_node(pod):
            continue
        ns = pod["metadata"].get("namespace", "")
        for claim in pod_claims(pod):
            pv = bound_volume(ctx, ns, claim) or {}
            csi = pv.get("spec", {}).get("csi") or {}
            if (ns, claim) in seen or csi.get("driver") not in DRIVERS:
                continue
            capacity = size_of(pv["spec"].get("capacity", {}).get("storage"))
            seen[(ns, claim)] = (ns, claim, volume_dir(ctx, csi["volumeHandle"]), capacity)
    return list(seen.values())


def usage_of(path: Path) -> tuple[int, int]:
    """(apparent bytes, inodes) under ``path``: the files' sizes (as :func:`.csi.volume_usage`), and the
    files, directories and links plus ``path`` itself (blocking: use a thread)."""
    used, inodes = 0, 1
    for root, dirs, files in os.walk(path):
        inodes += len(dirs) + len(files)
        for name in files:
            try:
                used += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return used, inodes


def _volume_stats(volumes: Sequence[tuple[str, str, Path, int]]) -> list[VolumeStat]:
    stats = []
    for ns, claim, path, capacity in volumes:
        used, inodes = usage_of(path)
        stats.append(VolumeStat(ns, claim, used, capacity, inodes))
    return stats


# ------------------------------------------------------------------ /proc reading
class ProcSnapshot:
    """One pass over ``/proc``: per-process CPU time, RSS and parent, for process-tree sums."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self.tick = os.sysconf("SC_CLK_TCK")
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.proc = proc
        self.parent: dict[int, int] = {}
        self.cpu: dict[int, float] = {}
        for entry in proc.iterdir() if proc.is_dir() else ():
            if entry.name.isdigit():
                self._read(int(entry.name))

    def _read(self, pid: int) -> None:
        try:
            raw = (self.proc / str(pid) / "stat").read_text()
        except OSError:
            return
        rest = raw[raw.rfind(")") + 2 :].split()
        if len(rest) < _STAT_FIELDS:
            return
        # fields 4 (ppid) and 14-17 (utime, stime, cutime, cstime) of proc(5), counted from field 3
        self.parent[pid] = int(rest[1])
        self.cpu[pid] = sum(int(x) for x in rest[11:15]) / self.tick

    def rss(self, pid: int) -> int:
        try:
            return int((self.proc / str(pid) / "statm").read_text().split()[1]) * self.page
        except (OSError, IndexError, ValueError):
            return 0

    def tree(self, pid: int) -> list[int]:
        children: dict[int, list[int]] = {}
        for child, parent in self.parent.items():
            children.setdefault(parent, []).append(child)
        out, todo = [], [pid]
        while todo:
            current = todo.pop()
            if current in self.cpu:
                out.append(current)
                todo.extend(children.get(current, ()))
        return out

    def usage(self, pid: int) -> tuple[float, int] | None:
        """(cpu seconds, RSS bytes) of ``pid`` and its descendants; None when it is gone."""
        procs = self.tree(pid)
        if not procs:
            return None
        return sum(self.cpu[p] for p in procs), sum(self.rss(p) for p in procs)


def _epoch(stamp: Any) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def collect_usage(
    pods: Iterable[Obj],
    pids: Mapping[tuple[str, str], Mapping[str, int]],
    workloads: WorkloadBook,
    now: float,
    snapshot: ProcSnapshot | None = None,
) -> list[ContainerUsage]:
    """Usage of every running container of ``pods``; ``pids[(ns, pod)][container]`` is its main process."""
    out: list[ContainerUsage] = []
    for pod in pods:
        meta = pod["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        running = [
            s
            for s in pod.get("status", {}).get("containerStatuses") or []
            if "running" in (s.get("state") or {})
        ]
        if not running:
            continue
        scripted = workloads.sample(uid=meta.get("uid", ""), namespace=ns, name=name, now=now)
        share = 1.0 / len(running)
        for status in running:
            container = status.get("name", "")
            started = _epoch(status["state"]["running"].get("startedAt"))
            pid = pids.get((ns, name), {}).get(container)
            usage = None
            if pid is not None:
                snapshot = snapshot or ProcSnapshot()
                usage = snapshot.usage(pid)
            if usage is not None:
                cpu, mem = usage[0], float(usage[1])
            else:
                cpu = (scripted.cpu_seconds or 0.0) * share
                mem = (scripted.memory_bytes or 0.0) * share
            out.append(ContainerUsage(ns, name, container, cpu, mem, started))
    return out


# ------------------------------------------------------------------------------- serving
DCGM_PORT, KUBELET_PORT = 9400, 10250
NAMESPACE, SERVICE, PORT_NAME = "gpu-operator", "nvidia-dcgm-exporter", "gpu-metrics"
APP_LABELS = {"app": "nvidia-dcgm-exporter"}
SLICE_NAME = f"{SERVICE}-devcluster"
BOOT_UPTIME_S = 86400.0  # the energy counter starts as if the card had idled a day since boot
RETRY_BIND_S = 5.0
_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
NODES = rt_of("", "nodes")
_NAMESPACES, _SERVICES, _ENDPOINTS = rt_of("", "namespaces"), rt_of("", "services"), rt_of("", "endpoints")
_SLICES = rt_of("discovery.k8s.io", "endpointslices")


def discovery_objects(
    addresses: Sequence[tuple[str, str, bool]], port: int
) -> list[tuple[ResourceType, Obj]]:
    """The GPU operator's Service ``gpu-operator/nvidia-dcgm-exporter`` and, as its endpoints controller
    would publish them, Endpoints and an EndpointSlice for ``(node, ip, ready)`` addresses. The Service
    has no selector (no exporter pods exist), so nothing else manages its endpoints."""
    svc_port = {"name": PORT_NAME, "port": port, "protocol": "TCP"}
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(port)}
    subset: dict[str, Any] = {}
    for key, ready in (("addresses", True), ("notReadyAddresses", False)):
        found = [{"ip": ip, "nodeName": n} for n, ip, r in addresses if r is ready]
        if found:
            subset[key] = found
    slice_labels = {
        **APP_LABELS,
        "kubernetes.io/service-name": SERVICE,
        "endpointslice.kubernetes.io/managed-by": "devcluster.gpuworkspace.dev",
    }
    endpoints = [
        {"addresses": [ip], "conditions": {"ready": r, "serving": r, "terminating": False}, "nodeName": n}
        for n, ip, r in addresses
    ]
    meta = {"name": SERVICE, "namespace": NAMESPACE, "labels": APP_LABELS}
    return [
        (_NAMESPACES, {"metadata": {"name": NAMESPACE}}),
        (
            _SERVICES,
            {
                "metadata": {**meta, "annotations": annotations},
                "spec": {"ports": [{**svc_port, "targetPort": port}]},
            },
        ),
        (_ENDPOINTS, {"metadata": meta, "subsets": [{**subset, "ports": [svc_port]}] if subset else []}),
        (
            _SLICES,
            {
                "metadata": {**meta, "name": SLICE_NAME, "labels": slice_labels},
                "addressType": "IPv4",
                "endpoints": endpoints,
                "ports": [svc_port],
            },
        ),
    ]


def ensure_object(verbs: Verbs, rt: ResourceType, body: Obj, compare: tuple[str, ...] = ()) -> None:
    """Create ``body`` if missing; else bring its ``compare`` fields in line."""
    meta = body["metadata"]
    namespace = meta.get("namespace", "")
    current = verbs.store.get(rt, namespace, meta["name"])
    if current is None:
        verbs.create(rt, namespace, {"apiVersion": rt.api_version, "kind": rt.kind, **body})
    elif any(current.get(k) != body.get(k) for k in compare):
        verbs.update(rt, namespace, meta["name"], {**current, **{k: body.get(k) for k in compare}})


@dataclass
class _Site:
    ip: str
    runner: web.AppRunner


def _gpu_node(node: Obj, gpus: Sequence[Gpu]) -> bool:
    capacity = node.get("status", {}).get("capacity") or {}
    return bool(gpus) or any(k.startswith("nvidia.com/") for k in capacity)


class DcgmExporter(SimController):
    """Per GPU node dcgm-exporter on ``<InternalIP>:9400/metrics``; per node the kubelet's
    ``/metrics/resource`` on ``<InternalIP>:10250``. Both stop answering while the node is unreachable
    (:func:`~.failures.node_not_ready`); its discovery address then moves to ``notReadyAddresses``."""

    name = "dcgm-exporter"
    watches: tuple[TypeKey, ...] = (("", "nodes"),)

    def __init__(
        self,
        ctx: SimContext,
        *,
        port: int = DCGM_PORT,
        kubelet_port: int | None = KUBELET_PORT,
        options: ExporterOptions | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(ctx.verbs)
        self.ctx = ctx
        self.port, self.kubelet_port = port, kubelet_port
        self.options = options or ExporterOptions()
        if self.options.collectors is None:
            self.options = replace(self.options, collectors=tuple(load_counters()))
        self.clock = clock
        self._sites: dict[tuple[str, str], _Site] = {}
        self._energy: dict[str, tuple[float, float, float]] = {}  # uuid -> (time, watts, mJ)

    @property
    def workloads(self) -> WorkloadBook:
        return workload_book(self.ctx)

    async def start(self) -> None:
        faults_of(self.ctx).subscribe(self._faults_changed)
        await super().start()

    async def stop(self) -> None:
        faults_of(self.ctx).unsubscribe(self._faults_changed)
        await super().stop()
        for site in self._sites.values():
            await site.runner.cleanup()
        self._sites.clear()

    def _faults_changed(self, _faults: SimFaults) -> None:
        for node in self.store.items(NODES):
            self.enqueue(("", "nodes"), node)

    # ------------------------------------------------------------------ rendering
    def render(self, node: str, now: float | None = None) -> str:
        """``GET /metrics`` of the exporter on ``node``."""
        now = self.clock() if now is None else now
        gpus, allocations = node_inventory(self.ctx.devices, node)
        pods = {p["metadata"]["uid"]: p for p in pods_on(self.ctx, node)}
        power = card_power(gpus, allocations, pods, self.workloads, now)
        xids = faults_of(self.ctx).xid_errors
        gpus = [
            replace(g, energy_mj=self._meter(g.uuid, power[g.uuid], now), last_xid=xids.get(g.uuid, 0))
            if g.uuid in power
            else g
            for g in gpus
        ]
        return render_metrics(node, gpus, allocations, pods, self.workloads, now, options=self.options)

    def render_resource(self, node: str, now: float | None = None) -> str:
        """``GET /metrics/resource`` of the kubelet on ``node``."""
        now = self.clock() if now is None else now
        pods = pods_on(self.ctx, node)
        kubelet = self.ctx.components.get(f"kubelet:{node}")
        pids: dict[tuple[str, str], Mapping[str, int]] = {}
        if kubelet is not None and hasattr(kubelet, "container_pids"):
            for pod in pods:
                ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
                pids[(ns, name)] = kubelet.container_pids(ns, name)
        return render_resource_metrics(collect_usage(pods, pids, self.workloads, now), now)

    def _meter(self, uuid: str, watts: float, now: float) -> float:
        """The card's energy counter: power integrated (trapezoids) over the scrapes."""
        last = self._energy.get(uuid)
        if last is None:
            total = watts * 1000 * BOOT_UPTIME_S
        else:
            then, before, total = last
            total += (before + watts) / 2 * 1000 * max(0.0, now - then)
            now = max(now, then)
        self._energy[uuid] = (now, watts, total)
        return total

    # -------------------------------------------------------------------- serving
    async def reconcile(self, target: Key) -> None:
        name = target[2]
        node = self.get(target)
        ip = node_ip(node) if node is not None and not node["metadata"].get("deletionTimestamp") else None
        want: dict[str, int] = {}
        if node is not None and ip and name not in faults_of(self.ctx).unreachable_nodes:
            if _gpu_node(node, node_inventory(self.ctx.devices, name)[0]):
                want["dcgm"] = self.port
            if self.kubelet_port:
                want["kubelet"] = self.kubelet_port
        for kind in ("dcgm", "kubelet"):
            if not await self._ensure_site(name, kind, ip if kind in want else None, want.get(kind, 0)):
                self.requeue_after(target, RETRY_BIND_S)
        self._sync_discovery()

    async def _ensure_site(self, node: str, kind: str, ip: str | None, port: int) -> bool:
        site = self._sites.get((node, kind))
        if site is not None and site.ip == ip:
            return True
        if site is not None:
            del self._sites[(node, kind)]
            await site.runner.cleanup()
        if ip is None:
            return True
        render = self.render if kind == "dcgm" else self.render_resource

        cluster = self.ctx.cluster
        tls = cluster.serving_context(ip, node) if kind == "kubelet" and cluster is not None else None

        async def handler(request: web.Request) -> web.Response:
            refused = self._refused(request, node) if tls is not None else None
            if refused is not None:
                return refused
            return web.Response(body=render(node).encode(), headers={"Content-Type": _CONTENT_TYPE})

        app = web.Application()
        app.router.add_get("/metrics" if kind == "dcgm" else "/metrics/resource", handler)
        if kind == "kubelet":

            async def volume_stats(request: web.Request) -> web.Response:
                refused = self._refused(request, node) if tls is not None else None
                if refused is not None:
                    return refused
                stats = await asyncio.to_thread(_volume_stats, mounted_volumes(self.ctx, node))
                body = render_volume_stats(stats).encode()
                return web.Response(body=body, headers={"Content-Type": _CONTENT_TYPE})

            app.router.add_get("/metrics", volume_stats)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        try:
            await web.TCPSite(runner, ip, port, reuse_address=True, ssl_context=tls).start()
        except OSError as exc:
            log.warning("devcluster %s: cannot serve %s on %s:%s: %s", self.name, kind, ip, port, exc)
            await runner.cleanup()
            return False
        self._sites[(node, kind)] = _Site(ip, runner)
        return True

    def _refused(self, request: web.Request, node: str) -> web.Response | None:
        """The kubelet's answer when the API does not authenticate the caller or authorize
        ``get nodes/metrics`` on ``node`` (its webhook auth), else None."""
        attrs = RequestAttributes(verb="get", resource="nodes", subresource="metrics", name=node)
        try:
            self.ctx.cluster.api.review(
                request.headers.get("Authorization", ""), attrs, request.headers.get("User-Agent", "")
            )
        except ApiError as exc:
            if exc.code == 401:  # noqa: PLR2004
                return web.Response(status=401, text="Unauthorized")
            return web.Response(status=exc.code, text=exc.message)
        return None

    def _sync_discovery(self) -> None:
        addresses: list[tuple[str, str, bool]] = []  # (node, ip, ready)
        for node in sorted(self.store.items(NODES), key=lambda n: n["metadata"]["name"]):
            name, ip = node["metadata"]["name"], node_ip(node)
            if ip and _gpu_node(node, node_inventory(self.ctx.devices, name)[0]):
                addresses.append((name, ip, (name, "dcgm") in self._sites))
        if not addresses and self.store.get(_SERVICES, NAMESPACE, SERVICE) is None:
            return
        for rt, body in discovery_objects(addresses, self.port):
            ensure_object(self.verbs, rt, body, compare=("subsets", "endpoints", "ports"))
