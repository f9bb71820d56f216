"""What a runtime is handed: the workspace it runs (a frozen context) and the ports it may use.

The context is plain data, built by the spawner from its traits, the user and the resolved profile
selection. The ports are the spawner's I/O that a runtime borrows: the API client and KubeSpawner's
watch caches (reflectors), the audit writer and the log, the disk limits and the server's disk retention.
A runtime never reaches into the spawner beyond :class:`Ports`.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ..audit import Action
from ..manifests.names import WorkspaceContext, WorkspaceIdentity


@dataclass(frozen=True)
class RuntimeContext:
    """One workspace, as a runtime sees it for one call (start, stop, poll, delete...)."""

    identity: WorkspaceIdentity  # user, server, namespace, release, owner: names and selector labels
    workspace: WorkspaceContext | None  # the resolved profile selection; None when known from state only
    pod_name: str  # KubeSpawner's pod name (a container workspace's pod)
    home_claim: str  # the home claim's name (a VM: its root disk's)
    request_timeout: float  # seconds, one API request
    retry_timeout: float  # seconds, repeated requests and waits for a watch to follow
    unschedulable_timeout: float  # seconds a start may wait unschedulable before it fails
    attach_failure_timeout: float  # seconds a pod may fail to attach or mount its disk before it fails
    retention_days: float  # the hub's retention for profiles that set none

    @property
    def log_name(self) -> str:
        """``user`` or ``user:server``, as JupyterHub's logs name a server."""
        server = self.identity.server
        return f"{self.identity.user}:{server}" if server else self.identity.user

    def started(self) -> WorkspaceContext:
        """The selection of a start (a start always has one)."""
        if self.workspace is None:
            raise RuntimeError(f"no profile selection for {self.identity.user}/{self.identity.server}")
        return self.workspace


class Ports(Protocol):
    """The spawner's I/O a runtime may use (implemented by :class:`~gpuworkspace_spawner.spawnerports.SpawnerPorts`)."""

    @property
    def api(self) -> Any:
        """KubeSpawner's shared client, for :mod:`gpuworkspace_spawner.k8s.gateway`."""

    @property
    def log(self) -> Any:
        """The spawner's logger (``%``-style arguments)."""

    async def audit(
        self, action: Action, kind: str, name: str, message: str, obj: dict[str, Any] | None = None
    ) -> None:
        """Log an audit record, and write it as an Event when the hub's ``audit_events`` asks."""

    def log_record(self, action: Action, kind: str, name: str, message: str) -> None:
        """Log an audit record only (no Event)."""

    def rejected(self) -> bool:
        """The start was refused before it wrote anything (a disk limit): nothing to record as an Event."""

    async def watch(self, key: str, reflector_class: Any, **kwargs: Any) -> Any:
        """Start (once) and return the spawner's reflector ``key`` (KubeSpawner's ``_start_reflector``)."""

    def watching(self, key: str) -> bool:
        """Whether this hub process watches ``key`` (KubeSpawner's reflectors are per process)."""

    def cached(self, key: str, name: str) -> dict[str, Any] | None:
        """Object ``name`` of this namespace in reflector ``key``'s cache; None when not watched or absent."""

    async def watch_pods(self) -> None:
        """Start (once) KubeSpawner's pod reflector."""

    def pods(self) -> list[dict[str, Any]]:
        """The pod watch cache (empty before the pod reflector starts)."""

    def events_of(self, pod_name: str) -> list[dict[str, Any]]:
        """The event watch cache's events of pod ``pod_name``."""

    def env(self) -> dict[str, str]:
        """The single-user server's environment (``Spawner.get_env``: the hub token among it)."""

    def new_disk_guard(self, kind: str, name: str) -> AbstractAsyncContextManager[None]:
        """Around the create of a new disk: refuses past the hub's disk limits (:mod:`.limiting`)."""

    def use_home_claim(self, name: str, *, ensured: bool = False) -> None:
        """The claim this start uses as the workspace's disk; ``ensured``: it exists now (from then on
        KubeSpawner keeps its name in the hub state)."""

    def home_claim_base(self) -> str:
        """The home claim's name from ``pvc_name_template`` (before any older claim is chosen instead)."""

    async def start_pod(self) -> Any:
        """KubeSpawner's own start (the pod from ``get_pod_manifest``): its URL."""

    async def next_pod_change(self, limit_s: float) -> bool:
        """Wait for the next change of this server's pod in the pod watch cache (False: none in ``limit_s`` seconds)."""

    def started_pod_url(self, *, not_uid: str | None) -> str | None:
        """The URL of this server's pod once every container of it runs, for a pod other than ``not_uid``;
        None before that, or when KubeSpawner's start still has work to do once the pod runs (internal
        SSL, services, ``after_pod_created_hook``)."""

    async def accepts_connections(self, url: str, limit_s: float) -> bool:
        """One TCP connect to ``url``'s host and port, closed at once: True when it was accepted."""

    async def stop_pod(self, now: bool) -> None:
        """KubeSpawner's own stop (through self-healing, which marks the stop first)."""

    async def poll_pod(self) -> int | None:
        """KubeSpawner's own poll (through self-healing, which may rebuild a lost pod)."""

    def pod_events(self) -> list[dict[str, Any]]:
        """KubeSpawner's events of this start's pod."""

    def remember_pod(self, pod: dict[str, Any] | None) -> None:
        """Keep the started pod: what self-healing rebuilds a lost one from."""

    async def retain_disks(self, now: datetime, why: str, *, home_shared: bool, vm: bool) -> None:
        """Retain every disk of the server (:func:`gpuworkspace_spawner.retaining.retain_server_disks`)."""
