"""Which idle timeout, maximum session and warning lead times apply to one workspace, and why (pure).

Four places can set them: the culler's configuration per profile (``idle_timeout_by_profile``,
``max_duration_by_profile``, ``warn_before_by_profile``), the catalog profile's ``session`` section
(what the spawn card shows), the culler's configuration per GPU mode (``idle_timeout_by_gpu_mode``)
and the culler's defaults (``idle_timeout``, ``max_duration``, ``warn_before``). :func:`effective`
composes them, most specific first:

- **idle timeout**: the culler's per-profile setting; else the *shorter* of the catalog's
  ``session.idleTimeout`` and the GPU mode's timeout (either alone when only one is set; ``0``, never,
  counts as the longest); else the default.
- **maximum session**: the culler's per-profile setting; else the catalog's ``session.maxDuration``;
  else the default.
- **warning lead times**: the culler's per-profile setting; else the catalog's ``session.warnings``;
  else the default. A GPU mode has no lead times of its own.

Why the shorter of catalog and GPU mode. A GPU mode's timeout is the operator's rule for a kind of
card (the GPU-sharing overlay: "stop idle sharers sooner than whole cards"); the catalog's is the
profile author's promise on the card. Letting the catalog win (as before) made every GPU-mode timeout
dead for any profile that states its own, which every shipped GPU profile does; letting the GPU mode
win would stop users *later* than their card says whenever the mode's timeout is the longer one. The
shorter of the two keeps the operator's rule for every profile of that mode and never keeps a server
longer than its card promises; a card that promises more than its mode allows is logged when the
culler starts (:func:`lead_time_warnings`). An operator who wants a profile longer than its mode
names it in ``idle_timeout_by_profile``, which wins over both.

The GPU mode is the one the attribution service reports for the workspace, else the catalog
profile's ``placement.gpuMode`` (so a mode's timeout holds while the attribution service is away).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from .model import Effective, Policy, ProfileSession, Source, Workspace

_NEVER = ProfileSession()
T = TypeVar("T")


def gpu_mode_of(workspace: Workspace, policy: Policy) -> str | None:
    """The attribution service's GPU mode for the workspace, else its catalog profile's; None: unknown."""
    if workspace.gpu is not None:
        return workspace.gpu.mode
    return _session(workspace, policy).gpu_mode


def effective(workspace: Workspace, policy: Policy) -> Effective:
    """The rules that apply to ``workspace`` and where each came from (the module's precedence)."""
    session = _session(workspace, policy)
    idle, idle_from = _idle_timeout(workspace, policy, session)
    longest, longest_from = _first(
        _configured(workspace, policy.max_duration_by_profile),
        session.max_duration,
        policy.max_duration,
    )
    leads, leads_from = _first(
        _configured(workspace, policy.warn_before_by_profile),
        session.warn_before or None,  # a profile without warnings leaves the default's
        policy.warn_before,
    )
    return Effective(
        idle_timeout=idle,
        idle_timeout_source=idle_from,
        max_duration=longest,
        max_duration_source=longest_from,
        warn_before=tuple(leads),
        warn_before_source=leads_from,
    )


def shorter(a: float, b: float) -> float:
    """The shorter of two timeouts, where ``0`` (never) is longer than any other."""
    if a <= 0:
        return b
    if b <= 0:
        return a
    return min(a, b)


def _session(workspace: Workspace, policy: Policy) -> ProfileSession:
    if workspace.profile is None:
        return _NEVER
    return policy.catalog.get(workspace.profile, _NEVER)


def _configured(workspace: Workspace, by_profile: Mapping[str, T]) -> T | None:
    if workspace.profile is None:
        return None
    return by_profile.get(workspace.profile)


def _first(configured: T | None, catalog: T | None, default: T) -> tuple[T, Source]:
    if configured is not None:
        return configured, Source.CONFIG_PROFILE
    if catalog is not None:
        return catalog, Source.CATALOG
    return default, Source.DEFAULT


def _idle_timeout(workspace: Workspace, policy: Policy, session: ProfileSession) -> tuple[float, Source]:
    configured = _configured(workspace, policy.idle_timeout_by_profile)
    if configured is not None:
        return configured, Source.CONFIG_PROFILE
    mode = gpu_mode_of(workspace, policy)
    by_mode = policy.idle_timeout_by_gpu_mode.get(mode) if mode is not None else None
    catalog = session.idle_timeout
    if catalog is not None and by_mode is not None:
        if shorter(catalog, by_mode) == catalog:  # a tie: the card's own value
            return catalog, Source.CATALOG
        return by_mode, Source.CONFIG_GPU_MODE
    if catalog is not None:
        return catalog, Source.CATALOG
    if by_mode is not None:
        return by_mode, Source.CONFIG_GPU_MODE
    return policy.idle_timeout, Source.DEFAULT


def _lead_time_warning(
    leads_from: str, leads: Sequence[float], timeout_from: str, timeout: float
) -> list[str]:
    long = [lead for lead in leads if timeout > 0 and lead >= timeout]
    if not long:
        return []
    return [
        f"{leads_from} {max(long):g} s >= {timeout_from} {timeout:g} s: the first idle warning "
        "comes at the first cycle after the last activity"
    ]


def _named(source: Source, profile: str, gpu_mode: str | None, leads: bool) -> str:
    """The setting a value of the effective policy came from, as an operator would look for it."""
    if source is Source.CATALOG:
        return f"catalog profile {profile!r} session.{'warnings' if leads else 'idleTimeout'}"
    if source is Source.CONFIG_GPU_MODE:
        return f"idle_timeout_by_gpu_mode[{gpu_mode!r}]"
    option = "CullerApp.warn_before" if leads else "idle_timeout"
    return f"{option}_by_profile[{profile!r}]" if source is Source.CONFIG_PROFILE else option


def lead_time_warnings(policy: Policy) -> list[str]:
    """What an operator should know at start, from the policy alone: lead times as long as an idle
    timeout in effect (warnings would start right after activity), and catalog profiles whose card
    promises a longer idle timeout than their GPU mode's (the shorter applies: :mod:`.precedence`)."""
    out: list[str] = []
    timeouts = {"idle_timeout": policy.idle_timeout}
    timeouts |= {f"idle_timeout_by_gpu_mode[{k!r}]": v for k, v in policy.idle_timeout_by_gpu_mode.items()}
    for name, timeout in timeouts.items():
        out += _lead_time_warning("CullerApp.warn_before", policy.warn_before, name, timeout)
    profiles = sorted({*policy.idle_timeout_by_profile, *policy.warn_before_by_profile, *policy.catalog})
    for slug in profiles:
        rules = effective(Workspace(user="", server="", profile=slug), policy)
        session = policy.catalog.get(slug, ProfileSession())
        mode = session.gpu_mode
        leads_from = _named(rules.warn_before_source, slug, mode, leads=True)
        timeout_from = _named(rules.idle_timeout_source, slug, mode, leads=False)
        out += _lead_time_warning(leads_from, rules.warn_before, timeout_from, rules.idle_timeout)
        if rules.idle_timeout_source is Source.CONFIG_GPU_MODE and session.idle_timeout is not None:
            out.append(
                f"catalog profile {slug!r} promises session.idleTimeout {session.idle_timeout:g} s, but "
                f"{timeout_from} {rules.idle_timeout:g} s is shorter and applies; set "
                f"CullerApp.idle_timeout_by_profile[{slug!r}] to keep the card's"
            )
    return list(dict.fromkeys(out))  # a profile on the defaults repeats a line above
