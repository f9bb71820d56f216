"""Runtimes: how a workspace runs (a pod, a KubeVirt VM) behind one small protocol.

The spawner picks one with :func:`choose_runtime`: at a start from the selected profile's ``runtime``,
afterwards (stop, poll, delete, a hub restarted over a running server) from the runtime kept in the
hub state. It then orchestrates through :class:`Runtime` only; a new runtime (a batch job, another VM
flavour) is one new module here and one entry in :data:`RUNTIMES`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from ..lifecycle.spawning import ProgressStep
from ..lifecycle.state import WorkspaceState
from .container import ContainerRuntime
from .context import Ports, RuntimeContext
from .vm import VmRuntime

__all__ = ["RUNTIMES", "Ports", "Runtime", "RuntimeContext", "choose_evicted", "choose_runtime"]


class Runtime(Protocol):
    """One workspace's compute of one kind, over the disk that outlives it."""

    kind: str  # the profile's ``runtime`` and the hub state's ``gpuworkspace.runtime``
    # True: its compute is stopped at every start of another kind (cheap: read from watch caches every
    # start has); False: only when the hub state says this server last ran as this kind.
    evict_always: bool

    async def start(self, others: Sequence[Runtime]) -> str:
        """Ensure the disk, stop ``others``' compute of the workspace (one active compute per
        workspace), then start this compute; audited; the server's URL once it is ready."""

    async def stop(self, now: bool) -> None:
        """Stop the compute, keep the disk; audited."""

    async def poll(self) -> int | None:
        """``Spawner.poll``'s answer: None while it runs (or is meant to), else an exit status."""

    def progress(self) -> ProgressStep:
        """Where a start is now, from the watch caches (no API calls)."""

    def status(self, now: datetime) -> WorkspaceState | None:
        """The workspace's state for the home page; None before this hub watched the cluster."""

    async def evict(self) -> None:
        """Stop this kind's compute of the workspace, for a start of another kind (audited)."""

    async def delete(self, now: datetime, why: str, *, home_shared: bool) -> None:
        """Remove the server: every disk it owns is retained (never deleted), its compute removed."""


RUNTIMES: dict[str, type[ContainerRuntime] | type[VmRuntime]] = {
    "container": ContainerRuntime,
    "vm": VmRuntime,
}


def choose_runtime(kind: str, context: RuntimeContext, ports: Ports) -> Runtime:
    """The runtime ``kind`` (a profile's ``runtime`` or the hub state's) for ``context``."""
    try:
        runtime: Runtime = RUNTIMES[kind](context, ports)
    except KeyError:
        raise ValueError(f"unknown workspace runtime {kind!r} (known: {', '.join(RUNTIMES)})") from None
    return runtime


def choose_evicted(kind: str, last_kind: str | None, context: RuntimeContext, ports: Ports) -> list[Runtime]:
    """The runtimes of other kinds whose compute a start of ``kind`` stops first: those checked at every
    start, and the one this server last ran as (``last_kind``, from the hub state)."""
    return [
        cls(context, ports)
        for other, cls in RUNTIMES.items()
        if other != kind and (cls.evict_always or other == last_kind)
    ]
