"""What the simulated components share: the API verbs, the state dir, the topology, GPU devices."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..podio import LocalDirRuntime
from ..verbs import Verbs


@dataclass
class SimContext:
    verbs: Verbs
    state_dir: Path
    pod_runtime: LocalDirRuntime
    topology: Any = None  # sim.topology.Topology
    devices: Any = None  # sim.devices.DeviceManager
    components: dict[str, Any] = field(default_factory=dict)
    cluster: Any = None  # the DevCluster: its CA signs the kubelets' serving certificates, its API authorizes

    def path(self, *parts: str) -> Path:
        return self.state_dir.joinpath(*parts)
