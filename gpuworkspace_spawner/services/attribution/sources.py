"""Where an :class:`~.model.Observation` comes from (I/O): the Kubernetes API, dcgm-exporter, the kubelets,
the node agent, or Prometheus.

- Nodes and workspace pods (label ``gpuworkspace.dev/user``; a VM's virt-launcher pod carries its VM's
  labels) are kept by list + watch through :mod:`gpuworkspace_spawner.k8s.observing`; no polling.
- dcgm-exporter and the node agent are found through the EndpointSlices of their Services and scraped
  each cycle, ``scrape_concurrency`` at a time (default 8); the kubelets' ``/metrics/resource`` on each
  node's InternalIP gives CPU (a rate between two scrapes) and memory. The kubelets get the service's token only over TLS verified
  against the cluster CA (:mod:`..kubelets`: never a token to an unverified peer).
- With a Prometheus URL, instant queries (:data:`.parsing.PROMQL`) replace the scrapes.

Scraped texts are cut to the families the parsers use (:func:`metric_lines`) before
``prometheus_client``'s parser sees them: dcgm-exporter sends about 25 families with the pod's labels
on every series, of which 7 are read (at 64 nodes x 8 GPUs that is 11.6 MB a cycle, 2.5 s of parser
CPU; 3.2 MB and 0.7 s after the cut). Cutting and parsing run on the collector's worker thread
(:mod:`.offloading`), one text at a time, so the event loop keeps answering the API during a cycle
(they held it up to ~20 ms a node).

A source that fails is named in ``Observation.failed_sources``; the cycle goes on with the others.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from ...k8s import KubernetesError, Unavailable
from ...k8s.observing import ObjectWatch, endpoint_slice_watch, node_watch, pod_watches
from ...manifests.names import LABEL_USER
from ..kubelets import (
    KubeletAccess,
    KubeletTrustError,
    Trust,
    describe_failure,
    kubelet_request,
    resolve_trust,
)
from . import parsing
from .model import ContainerUsage, DeviceSample, NodeInfo, Observation, ProcessSample, WorkspacePod
from .offloading import off_loop

log = logging.getLogger("gpuworkspace.attribution")
UsageKey = tuple[str, str]


class Source(Protocol):
    """What the collector reads from; tests pass a fake."""

    async def start(self) -> None: ...

    async def observe(self, now: float) -> Observation: ...

    async def stop(self) -> None: ...


@dataclass(frozen=True)
class Endpoint:
    node: str
    address: str
    port: int

    def url(self, scheme: str, path: str) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{scheme}://{host}:{self.port}{path}"


def slice_endpoints(slices: Iterable[Mapping[str, Any]], port_name: str) -> list[Endpoint]:
    """Ready endpoints of EndpointSlices, on the port named ``port_name`` (else the slice's first port)."""
    out: list[Endpoint] = []
    for item in slices:
        ports = item.get("ports") or []
        port = next((p for p in ports if p.get("name") == port_name), ports[0] if ports else None)
        if port is None or not port.get("port"):
            continue
        for endpoint in item.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False or not endpoint.get("addresses"):
                continue
            node = endpoint.get("nodeName") or (endpoint.get("targetRef") or {}).get("name") or ""
            out.append(Endpoint(str(node), str(endpoint["addresses"][0]), int(port["port"])))
    return sorted(set(out), key=lambda e: (e.node, e.address))


@dataclass(frozen=True)
class Settings:
    """Where the sources are; the command line fills it (app.py)."""

    namespaces: tuple[str, ...] = ()  # workspace namespaces; empty: all
    dcgm_service: tuple[str, str] = ("gpu-operator", "nvidia-dcgm-exporter")
    dcgm_port_name: str = "gpu-metrics"
    agent_service: tuple[str, str] | None = ("gpuworkspace-system", "gpuworkspace-agent")
    agent_port_name: str = "metrics"
    kubelet_scheme: str = "https"
    kubelet_port: int = 10250
    kubelet_ca: Path | None = None  # None: the cluster CA of the Kubernetes client configuration
    timeout_s: float = 5.0
    prometheus_url: str = ""
    prometheus_token: str = ""
    max_clients: int = 64
    scrape_concurrency: int = 8  # scrapes in flight at once (a cycle's answers would arrive together)


class Http:
    """GETs with one shared tornado client (``max_clients`` concurrent requests)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client = AsyncHTTPClient(force_instance=True, max_clients=settings.max_clients)

    async def get(self, url: str | HTTPRequest, headers: Mapping[str, str] | None = None) -> str:
        """The body of a GET of ``url`` (a prepared request is sent as it is: the kubelets')."""
        timeout = self.settings.timeout_s
        request = (
            url
            if isinstance(url, HTTPRequest)
            else HTTPRequest(
                url, headers=dict(headers or {}), request_timeout=timeout, connect_timeout=timeout
            )
        )
        response = await self.client.fetch(request)
        return str(response.body.decode())

    def close(self) -> None:
        self.client.close()


def metric_lines(text: str, names: Iterable[str]) -> str:
    """The lines of ``text`` (Prometheus text format) that belong to the families ``names``: their
    samples (exact sample name) and their ``# HELP`` / ``# TYPE`` lines; everything else is dropped.

    Parsing the result gives exactly the samples named ``names`` that parsing ``text`` gives (a
    malformed line of another family is no longer an error).
    """
    wanted = frozenset(names)
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip()
        if stripped.startswith("#"):
            parts = stripped.split(None, 3)
            if len(parts) > 2 and parts[1] in ("HELP", "TYPE") and parts[2] in wanted:  # noqa: PLR2004
                out.append(line)
            continue
        if stripped.partition("{")[0].partition(" ")[0].rstrip() in wanted:
            out.append(line)
    return "".join(out)


DCGM_FAMILIES = parsing.DCGM_FIELDS
KUBELET_FAMILIES = (parsing.CPU_SECONDS, parsing.WORKING_SET)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, HTTPClientError):
        return f"HTTP {exc.code}" if exc.code != 599 else str(exc.message or exc)  # noqa: PLR2004 - tornado's "no answer"
    return str(exc) or type(exc).__name__


class KubernetesSource:
    """Nodes and workspace pods by watch; GPU, process and CPU/memory figures by scraping (or Prometheus)."""

    def __init__(self, settings: Settings, http: Http | None = None) -> None:
        self.settings = settings
        self.http = http or Http(settings)
        self.prometheus = PrometheusQueries(settings, self.http) if settings.prometheus_url else None
        # the same series come back every cycle: their labels are parsed once (parsing.SeriesCache)
        self._series = {kind: parsing.SeriesCache() for kind in ("dcgm", "agent", "kubelet")}
        self.nodes: ObjectWatch | None = None
        self.pods: list[ObjectWatch] = []
        self.slices: dict[tuple[str, str], ObjectWatch] = {}  # scraped Service → its EndpointSlices
        self._usage_prev: dict[UsageKey, tuple[float, float, float | None]] = {}
        self._usage_prev_at: float | None = None
        self._pod_cache: tuple[int, tuple[WorkspacePod, ...]] = (-1, ())
        self._scrape_slots = asyncio.Semaphore(max(1, settings.scrape_concurrency))
        self._node_cache: tuple[int, tuple[NodeInfo, ...]] = (-1, ())

    async def start(self) -> None:
        self.nodes = node_watch(log)
        self.pods = pod_watches(log, LABEL_USER, self.settings.namespaces, keep=parsing.pod_essentials)
        s = self.settings
        if self.prometheus is None:
            for service in (s.dcgm_service, s.agent_service):
                if service is not None:
                    self.slices[service] = endpoint_slice_watch(log, *service)
        waits = [w.synced.wait() for w in (self.nodes, *self.pods, *self.slices.values())]
        try:
            await asyncio.wait_for(asyncio.gather(*waits), timeout=30)
        except TimeoutError:
            log.warning("The first node/pod lists have not arrived after 30 s; going on")

    async def stop(self) -> None:
        for w in (self.nodes, *self.pods, *self.slices.values()):
            if w is not None:
                await w.stop()
        self.http.close()

    # ----------------------------------------------------------------- Kubernetes objects
    def _node_infos(self) -> tuple[NodeInfo, ...]:
        assert self.nodes is not None
        if self._node_cache[0] != self.nodes.changes:
            infos = tuple(parsing.node_info(n) for _, n in sorted(self.nodes.objects.items()))
            self._node_cache = (self.nodes.changes, infos)
        return self._node_cache[1]

    def _workspaces(self) -> tuple[WorkspacePod, ...]:
        version = sum(w.changes for w in self.pods) + len(self.pods) * 1_000_003
        if self._pod_cache[0] != version:
            found = (parsing.workspace_pod(p) for w in self.pods for _, p in sorted(w.objects.items()))
            self._pod_cache = (version, tuple(p for p in found if p is not None))
        return self._pod_cache[1]

    # ------------------------------------------------------------------------ one cycle
    async def observe(self, now: float) -> Observation:
        watches = (self.nodes, *self.pods, *self.slices.values())
        failed = [f"kubernetes {w.what}: {w.error}" for w in watches if w and w.error]
        nodes, workspaces = self._node_infos(), self._workspaces()
        if self.prometheus is not None:
            devices, processes, agent_nodes, usage, errors = await self.prometheus.observe()
        else:
            (devices, e1), (processes, agent_nodes, e2), (usage, e3) = await asyncio.gather(
                self._dcgm(), self._agent(), self._kubelets(nodes, now)
            )
            errors = [*e1, *e2, *e3]
        return Observation(
            now=now,
            nodes=nodes,
            workspaces=workspaces,
            devices=tuple(devices),
            processes=tuple(processes),
            agent_nodes=frozenset(agent_nodes),
            usage=tuple(usage),
            failed_sources=tuple([*failed, *errors]),
        )

    def _endpoints(self, service: tuple[str, str], port_name: str) -> list[Endpoint]:
        """Ready endpoints from the watched EndpointSlices (the last good list while the watch fails)."""
        watched = self.slices[service]
        if watched.error and not watched.synced.is_set():
            raise Unavailable(503, watched.error)
        return slice_endpoints(list(watched.objects.values()), port_name)

    async def _get_cut(self, url: str | HTTPRequest, families: Iterable[str] | None) -> str:
        """A scrape cut to ``families`` (:func:`metric_lines`) as soon as it arrives, so that only
        the cut texts of a cycle's scrapes are held at once, not the whole ones.

        At most ``scrape_concurrency`` scrapes are in flight (waiting for a slot does not count
        toward a scrape's timeout): with all 128 of a 64-node cycle at once, their answers arrived
        together and the event loop spent up to 60 ms in one turn reading them while API requests
        waited; eight at a time keep each turn short and the cycle as long as before.
        """
        async with self._scrape_slots:
            text = await self.http.get(url)
            return text if families is None else await off_loop(metric_lines, text, families)

    async def _scrape(
        self,
        what: str,
        service: tuple[str, str],
        port_name: str,
        *,
        optional: bool = False,
        families: Iterable[str] | None = None,
    ) -> tuple[list[tuple[Endpoint, str]], list[str]]:
        """``/metrics`` of every ready endpoint of ``service``: (endpoint, text) pairs and failures.

        An ``optional`` source whose Service has no endpoints (not deployed) is no failure. With
        ``families`` the texts hold only those families' lines.
        """
        try:
            endpoints = self._endpoints(service, port_name)
        except KubernetesError as exc:
            return [], [f"{what} discovery {service[0]}/{service[1]}: {exc}"]
        if not endpoints and not optional:
            return [], [f"{what}: no ready endpoints in EndpointSlices of {service[0]}/{service[1]}"]
        results = await asyncio.gather(
            *(self._get_cut(e.url("http", "/metrics"), families) for e in endpoints), return_exceptions=True
        )
        texts: list[tuple[Endpoint, str]] = []
        errors: list[str] = []
        for endpoint, result in zip(endpoints, results, strict=True):
            if isinstance(result, BaseException):
                errors.append(f"{what} {endpoint.node or endpoint.address}: {_reason(result)}")
            else:
                texts.append((endpoint, result))
        return texts, errors

    async def _dcgm(self) -> tuple[list[DeviceSample], list[str]]:
        s = self.settings
        texts, errors = await self._scrape("dcgm", s.dcgm_service, s.dcgm_port_name, families=DCGM_FAMILIES)
        devices: list[DeviceSample] = []
        for endpoint, text in texts:
            try:
                devices.extend(await off_loop(parsing.parse_dcgm, text, endpoint.node, self._series["dcgm"]))
            except ValueError as exc:
                errors.append(f"dcgm {endpoint.node}: unparsable metrics: {exc}")
        return devices, errors

    async def _agent(self) -> tuple[list[ProcessSample], frozenset[str], list[str]]:
        """Per-process samples, the nodes whose agent read NVML this cycle, failures."""
        s = self.settings
        if s.agent_service is None:
            return [], frozenset(), []
        texts, errors = await self._scrape("agent", s.agent_service, s.agent_port_name, optional=True)
        processes: list[ProcessSample] = []
        up: set[str] = set()
        for endpoint, text in texts:
            try:
                processes.extend(parsing.parse_agent(text, endpoint.node, self._series["agent"]))
                if parsing.agent_nvml_up(text):
                    up.add(endpoint.node)
            except ValueError as exc:
                errors.append(f"agent {endpoint.node}: unparsable metrics: {exc}")
        return processes, frozenset(up), errors

    @property
    def kubelet_access(self) -> KubeletAccess:
        s = self.settings
        return KubeletAccess(s.kubelet_scheme, s.kubelet_port, s.kubelet_ca, s.timeout_s)

    async def _kubelets(
        self, nodes: Sequence[NodeInfo], now: float
    ) -> tuple[list[ContainerUsage], list[str]]:
        access = self.kubelet_access
        targets = [n for n in nodes if n.address]
        try:
            trust = await resolve_trust(access)
        except KubeletTrustError as exc:  # fail closed: no scrape, so no token; the figures are unavailable
            self._usage_prev, self._usage_prev_at = {}, None
            return [], [f"kubelet: {exc}"] if targets else []
        results = await asyncio.gather(
            *(
                self._get_cut(
                    kubelet_request(access, trust, n.address or "", "/metrics/resource"), KUBELET_FAMILIES
                )
                for n in targets
            ),
            return_exceptions=True,
        )
        return await self._kubelet_usage(targets, results, trust, now)

    async def _kubelet_usage(
        self, targets: Sequence[NodeInfo], results: Sequence[str | BaseException], trust: Trust, now: float
    ) -> tuple[list[ContainerUsage], list[str]]:
        current: dict[UsageKey, tuple[float, float, float | None]] = {}
        errors: list[str] = []
        for node, result in zip(targets, results, strict=True):
            if isinstance(result, BaseException):
                if node.ready:  # a NotReady node's kubelet is expected to be silent; the node shows it
                    errors.append(f"kubelet {node.name}: {describe_failure(result, trust)}")
                continue
            try:
                current.update(
                    await off_loop(parsing.parse_resource_metrics, result, self._series["kubelet"])
                )
            except ValueError as exc:
                errors.append(f"kubelet {node.name}: unparsable metrics: {exc}")
        dt = now - self._usage_prev_at if self._usage_prev_at is not None else 0.0
        usage = parsing.cpu_rates(self._usage_prev, current, dt)
        self._usage_prev, self._usage_prev_at = current, now
        return list(usage), errors


class PrometheusQueries:
    """Instant and range queries on a Prometheus HTTP API (``/api/v1/query``, ``/api/v1/query_range``)."""

    INSTANT = ("devices", "processes", "agent_up", "cpu", "memory")

    def __init__(self, settings: Settings, http: Http) -> None:
        self.base = settings.prometheus_url.rstrip("/")
        self.http = http
        token = settings.prometheus_token
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def query(self, promql: str) -> dict[str, Any]:
        """The whole answer (``status``, ``data``) of an instant query."""
        text = await self.http.get(f"{self.base}/api/v1/query?{urlencode({'query': promql})}", self.headers)
        return _answer(text)

    async def query_range(self, promql: str, start: float, end: float, step_s: float) -> dict[str, Any]:
        params = urlencode({"query": promql, "start": start, "end": end, "step": step_s})
        text = await self.http.get(f"{self.base}/api/v1/query_range?{params}", self.headers)
        return _answer(text)

    async def observe(
        self,
    ) -> tuple[list[DeviceSample], list[ProcessSample], frozenset[str], list[ContainerUsage], list[str]]:
        """Devices, agent processes (and the nodes whose agent reads NVML), CPU/memory, failures."""
        results = await asyncio.gather(
            *(self.query(parsing.PROMQL[n]) for n in self.INSTANT), return_exceptions=True
        )
        answers: dict[str, dict[str, Any]] = {}
        errors: list[str] = []
        for name, result in zip(self.INSTANT, results, strict=True):
            if isinstance(result, BaseException):
                errors.append(f"prometheus {name}: {_reason(result)}")
            else:
                answers[name] = result
        empty: dict[str, Any] = {"status": "success", "data": {"resultType": "vector", "result": []}}

        def get(name: str) -> dict[str, Any]:
            return answers.get(name, empty)

        try:
            return (
                parsing.prometheus_vector_to_devices(get("devices")),
                parsing.prometheus_vector_to_processes(get("processes")),
                parsing.prometheus_agent_nodes(get("agent_up")),
                parsing.prometheus_vector_to_usage(get("cpu"), get("memory")),
                errors,
            )
        except (ValueError, KeyError, TypeError) as exc:
            return [], [], frozenset(), [], [*errors, f"prometheus: unexpected answer: {exc}"]


def _answer(text: str) -> dict[str, Any]:
    body = json.loads(text)
    if not isinstance(body, dict) or body.get("status") != "success":
        raise ValueError(f"{body.get('errorType', 'error')}: {body.get('error', 'no data')}")
    return body
