"""The culler's plain data: the evidence gathered per running server, the policy, and decisions (pure).

The I/O shell (:mod:`.probes`, :mod:`.cycle`) builds one :class:`Workspace` per running server from
the hub (``last_activity``, ``started``, the profile in ``user_options``, the user's groups), the
single-user server (``/api/status``, ``/api/kernels``, ``/api/terminals``) and the attribution service
(GPU mode, utilisation, idle-allocated GPU time). :mod:`.policy` turns a workspace, the
:class:`Policy` and the warnings already given into a :class:`Decision`. Times are timezone-aware UTC
``datetime`` objects; durations are seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

# GPU modes as the catalog names them (catalog.model.GpuMode), plus a VM's passthrough card.
GPU_MODES = ("exclusive", "mig", "time-sliced", "passthrough", "none")


class Action(StrEnum):
    KEEP = "keep"  # active, or idle but not yet within the first warning's lead time
    WARN = "warn"  # give warning stage ``Decision.stage`` now
    STOP = "stop"  # every stage was given and the stop time has come: stop the server (disk kept)
    EXEMPT = "exempt"  # never culled (user, group, profile or annotation exemption)


class Reason(StrEnum):
    """Why a server is to be stopped (what a warning announces)."""

    IDLE = "idle"  # no activity of any kind within the idle timeout
    MAX_DURATION = "max-duration"  # running longer than the profile's maximum session, busy or not


@dataclass(frozen=True)
class Kernel:
    """One kernel as ``GET /api/kernels`` lists it."""

    id: str
    execution_state: str  # busy | idle | starting | dead | ...
    last_activity: datetime | None
    connections: int = 0


@dataclass(frozen=True)
class Terminal:
    """One terminal as ``GET /api/terminals`` lists it."""

    name: str
    last_activity: datetime | None


@dataclass(frozen=True)
class Probe:
    """What the single-user server said about itself: this cycle, or remembered from earlier ones.

    ``kernels``/``terminals`` are None when they were not asked for (the shell skips them when
    ``/api/status`` already shows recent activity) or could not be read; ``error`` says why a probe
    failed (the policy then relies on the other evidence and never treats a failed probe as idle
    evidence by itself; a probe that failed before reading anything lets the hub's record stand in).
    """

    last_activity: datetime | None = None  # /api/status: the server's own last activity
    kernels: tuple[Kernel, ...] | None = None
    terminals: tuple[Terminal, ...] | None = None
    error: str | None = None


@dataclass(frozen=True)
class GpuEvidence:
    """The workspace's GPUs as the attribution service reports them."""

    mode: str  # one of GPU_MODES
    allocated: float  # GPUs (fractions for shared/MIG)
    util_percent: float | None = None  # latest sample; None: not visible (passthrough, no exporter)
    last_busy: datetime | None = None  # last time a sample was at or above the busy threshold
    idle_allocated_gpu_seconds: float | None = None  # from the attribution service's accounting


@dataclass(frozen=True)
class CpuEvidence:
    """The workspace's CPU use as the attribution service reports it (the kubelet's, per pod).

    Node-level evidence the user's code cannot forge to the culler: a process busy in a terminal that
    prints nothing (a copy, a build, a training loop) shows here and nowhere in the server's API.
    """

    used_cores: float | None = None  # latest figure; None: not measured
    last_busy: datetime | None = None  # last time it was at or above the busy threshold


@dataclass(frozen=True)
class Workspace:
    """A running server and the evidence about it."""

    user: str
    server: str  # "" for the default server
    started: datetime | None = None
    hub_last_activity: datetime | None = None  # evidence only without the server's own (see policy)
    profile: str | None = None  # the catalog profile slug from user_options
    groups: frozenset[str] = frozenset()
    exempt_annotation: bool = False  # the workspace carries gpuworkspace.dev/cull-exempt: "true"
    gpu: GpuEvidence | None = None  # None: no GPU, or no attribution data
    probe: Probe | None = None  # None: the server was not probed
    cpu: CpuEvidence | None = None  # None: no attribution data

    @property
    def key(self) -> tuple[str, str]:
        return (self.user, self.server)


class Source(StrEnum):
    """Where a value of a workspace's effective policy came from (see :func:`.policy.effective`)."""

    CONFIG_PROFILE = "culler config: profile"  # idle_timeout_by_profile, max_duration_by_profile, ...
    CATALOG = "catalog"  # the profile's session section, what its spawn card shows
    CONFIG_GPU_MODE = "culler config: gpu mode"  # idle_timeout_by_gpu_mode
    DEFAULT = "default"  # idle_timeout, max_duration, warn_before


@dataclass(frozen=True)
class ProfileSession:
    """One catalog profile's ``session`` section (what its spawn card promises) and its GPU mode."""

    idle_timeout: float | None = None  # session.idleTimeout; None: not set
    max_duration: float | None = None  # session.maxDuration
    warn_before: tuple[float, ...] | None = None  # session.warnings, descending; None: not set
    gpu_mode: str | None = None  # placement.gpuMode


@dataclass(frozen=True)
class Policy:
    """The culling rules (the service's traitlets, resolved). Durations in seconds; 0 = never.

    The ``*_by_profile`` mappings are the culler's own configuration; ``catalog`` is the profiles'
    session sections. How they compose per workspace: :func:`.policy.effective`.
    """

    idle_timeout: float = 3600.0
    idle_timeout_by_gpu_mode: Mapping[str, float] = field(default_factory=dict)
    idle_timeout_by_profile: Mapping[str, float] = field(default_factory=dict)  # wins over everything
    max_duration: float = 0.0
    max_duration_by_profile: Mapping[str, float] = field(default_factory=dict)
    warn_before: tuple[float, ...] = (1800.0, 300.0)  # lead times of the staged warnings, descending
    warn_before_by_profile: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    catalog: Mapping[str, ProfileSession] = field(default_factory=dict)  # per profile slug
    gpu_busy_percent: float = 10.0  # a GPU sample at or above this is activity
    cpu_busy_cores: float = 0.25  # the pod's CPU use at or above this many cores is activity (0: never)
    exempt_users: frozenset[str] = frozenset()
    exempt_groups: frozenset[str] = frozenset()
    exempt_profiles: frozenset[str] = frozenset()
    # where long runs go instead (the jobs service): added to every warning of a max-duration stop and of
    # a workspace holding a GPU, the two cases where a user was most likely running something long
    handoff: str = ""


@dataclass(frozen=True)
class Effective:
    """The rules that apply to one workspace, each with where it came from."""

    idle_timeout: float
    idle_timeout_source: Source
    max_duration: float
    max_duration_source: Source
    warn_before: tuple[float, ...]
    warn_before_source: Source


@dataclass(frozen=True)
class Warning:
    """A warning already given to a workspace (the shell keeps these; activity clears idle ones)."""

    stage: int  # index into the workspace's lead times (Effective.warn_before)
    reason: Reason
    given_at: datetime
    stop_at: datetime


@dataclass(frozen=True)
class Decision:
    """What to do with one workspace now, and why (shown on the status page and in audit records)."""

    user: str
    server: str
    action: Action
    message: str  # one human sentence: "idle since 10:02 (kernel k1 idle, no terminal, GPU 0 %)"
    reason: Reason | None = None  # what a WARN/STOP is for
    stage: int | None = None  # the warning stage to give (WARN)
    stop_at: datetime | None = None  # when the server will be stopped if nothing changes
    last_activity: datetime | None = None  # the latest activity of any kind
    activity_source: str | None = None  # which evidence that was: "hub", "kernel k1", "terminal 1", "gpu"
    cancels_warnings: bool = False  # activity since the last warning: forget the warnings given
    handoff: bool = False  # this workspace's warnings offer the jobs hand-off (Policy.handoff applies)
    policy: Effective | None = None  # the rules applied (None: exempt, no rule was worked out)

    @property
    def key(self) -> tuple[str, str]:
        return (self.user, self.server)
