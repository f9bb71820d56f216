"""kube-proxy for the simulated cluster: ClusterIP Services that route.

ClusterIPs come from the devcluster's service range (``--service-cluster-ip-range``
``127.96.0.0/16``, :data:`~gpuworkspace_devcluster.defaults.SERVICE_CIDR`), which is loopback, so the
host can reach them. For every TCP port of every Service with a ClusterIP, :class:`ServiceProxy` listens on
``clusterIP:port`` while the Service has endpoints for that port, and splices each connection to one
endpoint's ``podIP:port`` (round-robin), bytes both ways with half-closes, so HTTP, websockets and any
other TCP protocol pass through unchanged. The connection to the pod is made from the client's own
loopback address, so the pod sees the client's IP, as behind kube-proxy (no SNAT).

Like kube-proxy it reads EndpointSlices (``kubernetes.io/service-name``), for selector-less Services
too: ready endpoints (a null ``ready`` counts as ready); when none is ready, serving terminating ones.
A Service port without such endpoints has no listener, so a connection is refused as kube-proxy's REJECT
rule refuses it; a connection that races an endpoint's removal is reset. Established connections outlive
endpoint and Service changes (as conntrack entries do) until either side closes or the simulation stops.

A listener that cannot bind (the address is in use, or a ClusterIP outside loopback that the host has
not got) does not stop anything: it is logged, recorded once as a ``Warning`` Event
``FailedToListen`` on the Service (devcluster-only: the real kube-proxy programs rules and never binds),
and retried every :data:`RETRY_BIND_S` seconds while the address is in use (an address the host has not
got, on the Service's next change).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import itertools
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..store import Obj, TypeKey
from .base import Key, SimController, rt_of
from .context import SimContext
from .endpoints import SERVICE_NAME_LABEL
from .events import record_event

log = logging.getLogger(__name__)
SERVICES, SLICES = rt_of("", "services"), rt_of("discovery.k8s.io", "endpointslices")
RETRY_BIND_S = 2.0
CONNECT_TIMEOUT_S = 5.0
_CHUNK = 64 * 1024
Addr = tuple[str, int]


@dataclass
class _Route:
    """One ``clusterIP:port``: its backends and, while it has any, its listener."""

    service: tuple[str, str]
    port_name: str
    backends: list[Addr] = field(default_factory=list)
    server: asyncio.Server | None = None
    turn: itertools.count[int] = field(default_factory=itertools.count)

    def pick(self) -> Addr | None:
        if not self.backends:
            return None
        return self.backends[next(self.turn) % len(self.backends)]


def _ready_endpoints(slices: Iterable[Obj], port_name: str, protocol: str) -> list[Addr]:
    """kube-proxy's choice of endpoints for one Service port: ready ones, else serving terminating ones."""
    ready: list[Addr] = []
    fallback: list[Addr] = []
    for s in slices:
        if s.get("addressType", "IPv4") != "IPv4":
            continue
        port = next(
            (
                p
                for p in s.get("ports") or []
                if (p.get("name") or "") == port_name and p.get("protocol", "TCP") == protocol
            ),
            None,
        )
        if port is None or port.get("port") is None:
            continue
        for endpoint in s.get("endpoints") or []:
            addresses = endpoint.get("addresses") or []
            if not addresses:
                continue
            addr = (str(addresses[0]), int(port["port"]))
            cond = endpoint.get("conditions") or {}
            if cond.get("ready") is not False:
                ready.append(addr)
            elif cond.get("serving") and cond.get("terminating"):
                fallback.append(addr)
    return sorted(set(ready or fallback))


class ServiceProxy(SimController):
    """Listens on Service ClusterIPs and forwards to endpoints (see the module docstring)."""

    name = "kube-proxy"
    watches: tuple[TypeKey, ...] = (SERVICES.key, SLICES.key)

    def __init__(self, ctx: SimContext, *, retry_bind_s: float = RETRY_BIND_S) -> None:
        super().__init__(ctx.verbs)
        self.ctx = ctx
        self.retry_bind_s = retry_bind_s
        self.routes: dict[Addr, _Route] = {}
        self._by_service: dict[tuple[str, str], set[Addr]] = {}
        self._warned: set[tuple[str, str, Addr, str]] = set()  # (ns, service, addr, reason) already reported
        self._connections: set[asyncio.Task[None]] = set()
        ctx.components["kube-proxy"] = self

    def keys_for(self, key: TypeKey, obj: Obj, old: Obj | None) -> Iterable[Key]:
        meta = obj["metadata"]
        ns = meta.get("namespace", "")
        if key == SERVICES.key:
            return [(SERVICES.key, ns, meta["name"])]
        names = {
            ((o or {}).get("metadata", {}).get("labels") or {}).get(SERVICE_NAME_LABEL) for o in (obj, old)
        }
        return [(SERVICES.key, ns, n) for n in names if n]

    async def stop(self) -> None:
        await super().stop()
        for route in self.routes.values():
            if route.server is not None:
                route.server.close()
        self.routes.clear()
        self._by_service.clear()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    # ---------------------------------------------------------------- reconcile
    def listening(self, ip: str, port: int) -> bool:
        route = self.routes.get((ip, port))
        return route is not None and route.server is not None

    def _desired(self, service: Obj | None) -> dict[Addr, tuple[str, list[Addr]]]:
        if service is None or service["metadata"].get("deletionTimestamp"):
            return {}
        spec = service.get("spec") or {}
        if spec.get("type") == "ExternalName":
            return {}
        ips = [ip for ip in spec.get("clusterIPs") or [spec.get("clusterIP")] if ip and ip != "None"]
        meta = service["metadata"]
        slices = [
            s
            for s in self.store.items(SLICES, meta.get("namespace", ""))
            if (s["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL) == meta["name"]
        ]
        out: dict[Addr, tuple[str, list[Addr]]] = {}
        for sp in spec.get("ports") or []:
            protocol = sp.get("protocol", "TCP")
            if protocol != "TCP" or not sp.get("port"):
                continue
            backends = _ready_endpoints(slices, sp.get("name") or "", protocol)
            for ip in ips:
                with contextlib.suppress(ValueError):
                    if isinstance(ipaddress.ip_address(ip), ipaddress.IPv4Address):
                        out[(ip, int(sp["port"]))] = (sp.get("name") or "", backends)
        return out

    async def reconcile(self, target: Key) -> None:
        _, ns, name = target
        service = self.get(target)
        desired = self._desired(service)
        key = (ns, name)
        for addr in self._by_service.get(key, set()) - set(desired):
            await self._drop(addr)
        self._by_service[key] = set(desired)
        if not desired:
            del self._by_service[key]
            self._warned = {w for w in self._warned if (w[0], w[1]) != key}
        retry = False
        for addr, (port_name, backends) in desired.items():
            route = self.routes.get(addr)
            if route is None or route.service != key:
                if route is not None:  # the address moved to this Service
                    await self._drop(addr)
                route = self.routes[addr] = _Route(key, port_name)
            route.port_name, route.backends = port_name, backends
            if backends and route.server is None:
                retry |= not await self._listen(addr, route, service)
            elif not backends and route.server is not None:
                route.server.close()
                route.server = None
        if retry:
            self.requeue_after(target, self.retry_bind_s)

    async def _drop(self, addr: Addr) -> None:
        route = self.routes.pop(addr, None)
        if route is not None and route.server is not None:
            route.server.close()

    async def _listen(self, addr: Addr, route: _Route, service: Obj | None) -> bool:
        """Start the listener; False when it should be retried later."""
        ip, port = addr

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._connections.add(task)
            try:
                await self._forward(addr, reader, writer)
            finally:
                self._connections.discard(task)

        try:
            route.server = await asyncio.start_server(handle, ip, port, reuse_address=True)
        except OSError as exc:
            in_use = exc.errno == errno.EADDRINUSE
            reason = "address in use" if in_use else exc.strerror or str(exc)
            warn_key = (route.service[0], route.service[1], addr, reason)
            if warn_key not in self._warned:
                self._warned.add(warn_key)
                retrying = "retrying" if in_use else "not retrying until the Service changes"
                message = f"cannot listen on {ip}:{port} for the Service: {reason}; {retrying}"
                log.warning("devcluster %s: %s/%s: %s", self.name, *route.service, message)
                if service is not None:
                    record_event(
                        self.verbs, service, "Warning", "FailedToListen", message, component=self.name
                    )
            return not in_use
        self._warned = {w for w in self._warned if w[:3] != (*route.service, addr)}
        return True

    # ------------------------------------------------------------------ traffic
    async def _forward(self, addr: Addr, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        route = self.routes.get(addr)
        backend = route.pick() if route is not None else None
        if backend is None:  # raced with the last endpoint's removal: reset, as a REJECT does
            writer.transport.abort()
            return
        peer = writer.get_extra_info("peername")
        try:
            upstream = await asyncio.wait_for(self._connect(backend, peer), CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            log.debug("devcluster %s: %s:%s -> %s:%s: %s", self.name, *addr, *backend, exc)
            writer.transport.abort()
            return
        up_reader, up_writer = upstream
        pumps = [
            asyncio.ensure_future(_pump(reader, up_writer)),
            asyncio.ensure_future(_pump(up_reader, writer)),
        ]
        try:
            await asyncio.gather(*pumps)
        except (ConnectionError, OSError):  # a reset on either side resets the other
            for w in (writer, up_writer):
                w.transport.abort()
        finally:
            for pump in pumps:
                pump.cancel()
            for w in (writer, up_writer):
                w.close()

    @staticmethod
    async def _connect(backend: Addr, peer: object) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Connect from the client's loopback address when possible (the pod sees the client's IP)."""
        source = peer[0] if isinstance(peer, tuple) and peer else None
        if source and ipaddress.ip_address(source).is_loopback:
            with contextlib.suppress(OSError):
                return await asyncio.open_connection(*backend, local_addr=(source, 0))
        return await asyncio.open_connection(*backend)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF, then half-close the other side (a reset raises)."""
    while data := await reader.read(_CHUNK):
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof() and not writer.is_closing():
        writer.write_eof()
