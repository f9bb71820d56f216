"""The simulated cluster behind the API emulator: topology, scheduler, kubelets, CSI, CDI, KubeVirt, DCGM,
endpoints controllers and kube-proxy.

``Simulation(cluster).start()`` applies the topology and starts every component in dependency order
(storage before the scheduler, the scheduler before the kubelets); ``stop()`` stops them in reverse,
killing every process the kubelets started.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cdi import CdiController
from .context import SimContext
from .control import control_handlers
from .csi import CsiController
from .csi_attach import AttachController
from .csi_resize import ResizeController
from .devices import DeviceManager
from .endpoints import EndpointsController, EndpointSliceController
from .failures import OutOfServiceController
from .jobs import JobController
from .kubelet import Kubelet, KubeletConfig, KubeletRuntime
from .kubevirt import KubeVirtController
from .kueue import KueueController
from .netfence import NetworkFenceController
from .resourcemetrics import DcgmExporter
from .scheduler import Scheduler
from .serviceproxy import ServiceProxy
from .snapshots import SnapshotController
from .topology import apply_topology, load_topology

if TYPE_CHECKING:
    from ..cluster import DevCluster

log = logging.getLogger(__name__)


class Simulation:
    def __init__(
        self,
        cluster: DevCluster,
        topology: Path | str | None = None,
        *,
        kubelet_config: KubeletConfig | None = None,
        serve_metrics: bool = True,
        instance: int = 0,
    ) -> None:
        self.cluster = cluster
        self.instance = instance
        self.topology_path = topology
        self.kubelet_config = kubelet_config
        self.serve_metrics = serve_metrics
        self.ctx: SimContext | None = None
        self.components: list[Any] = []

    async def start(self) -> SimContext:
        cluster = self.cluster
        state_dir = cluster.pod_runtime.state_dir
        ctx = SimContext(
            verbs=cluster.verbs,
            state_dir=Path(state_dir),
            pod_runtime=cluster.pod_runtime,
            topology=load_topology(self.topology_path, instance=self.instance),
            cluster=cluster,
        )
        topology = await apply_topology(ctx)
        ctx.devices = DeviceManager(ctx.state_dir, topology)
        self.ctx = ctx
        self.components = [
            CsiController(ctx),
            AttachController(ctx),
            ResizeController(ctx),
            SnapshotController(ctx),
            CdiController(ctx),
            Scheduler(ctx),
            KubeVirtController(ctx),
            KueueController(ctx),
            NetworkFenceController(ctx),
            OutOfServiceController(ctx),
            EndpointsController(ctx),
            EndpointSliceController(ctx),
            ServiceProxy(ctx),
            JobController(ctx),
        ]
        self.components += [
            Kubelet(
                ctx,
                node.name,
                node.ip_octet,
                self.kubelet_config,
                register=cluster.controllers.kubelet_nodes.add,
            )
            for node in topology.nodes
        ]
        if self.serve_metrics:
            self.components.append(DcgmExporter(ctx))
        for component in self.components:
            await component.start()
        cluster.api.pod_io.runtime = KubeletRuntime(ctx)
        cluster.api.config.extra_handlers.update(control_handlers(ctx))
        log.info("devcluster simulation: %d nodes, %d components", len(topology.nodes), len(self.components))
        return ctx

    async def stop(self) -> None:
        for component in reversed(self.components):
            try:
                await component.stop()
            except Exception:
                log.exception("devcluster simulation: stopping %s failed", component)
        self.components = []

    async def settle(self, rounds: int = 3) -> None:
        """Wait until every controller's queue is drained (timers may still fire later)."""
        for _ in range(rounds):
            await asyncio.gather(*(c.settle() for c in self.components if hasattr(c, "settle")))
