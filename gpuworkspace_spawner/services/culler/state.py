"""What the culler knows between cycles: the warnings given, the last decisions, the last cycle's report.

Kept in memory only, on purpose: losing it (a restart) can only delay a stop, never hasten one — the
policy gives every warning stage again, each with its full lead time. The web handlers read it; the
cycle (:mod:`.cycle`) is its only writer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from .model import Action, Decision, Policy, Warning

Key = tuple[str, str]  # (user, server name; "" for the default server)


@dataclass(frozen=True)
class CycleReport:
    """One cycle's outcome, as the status API and the logs show it."""

    started_at: datetime
    finished_at: datetime
    servers: int  # running servers seen
    probed: int  # servers whose single-user server was asked
    requests: int  # HTTP requests made in the cycle (hub, servers, attribution)
    warned: int
    stopped: int
    dry_run: bool
    errors: tuple[str, ...] = ()  # "alice/gpu: probe failed: 503 ..." (never fatal to the cycle)

    @property
    def seconds(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()


class WarningBook:
    """The warnings given, per workspace, in stage order."""

    def __init__(self) -> None:
        self._given: dict[Key, list[Warning]] = {}

    def given(self, key: Key) -> Sequence[Warning]:
        return tuple(self._given.get(key, ()))

    def all(self) -> dict[Key, Sequence[Warning]]:
        return {k: tuple(v) for k, v in self._given.items()}

    def record(self, decision: Decision, *, now: datetime) -> Warning:
        """Record the warning a WARN decision gives."""
        assert decision.action is Action.WARN and decision.reason and decision.stop_at
        warning = Warning(
            stage=decision.stage or 0, reason=decision.reason, given_at=now, stop_at=decision.stop_at
        )
        self._given.setdefault(decision.key, []).append(warning)
        return warning

    def clear(self, key: Key) -> None:
        self._given.pop(key, None)

    def keep_only(self, keys: Iterable[Key]) -> None:
        """Forget workspaces that are no longer running."""
        alive = set(keys)
        for key in [k for k in self._given if k not in alive]:
            del self._given[key]

    def of_user(self, user: str) -> dict[str, Sequence[Warning]]:
        return {server: tuple(w) for (u, server), w in self._given.items() if u == user and w}


@dataclass
class CullerState:
    """Shared by the cycle (writer) and the web handlers (readers)."""

    policy: Policy
    dry_run: bool = False
    book: WarningBook = field(default_factory=WarningBook)
    decisions: dict[Key, Decision] = field(default_factory=dict)  # the last cycle's, per running server
    idle_gpu_seconds: dict[Key, float] = field(default_factory=dict)  # from the attribution service
    last_cycle: CycleReport | None = None
    stopped: list[tuple[datetime, Decision]] = field(default_factory=list)  # recent stops, newest last

    def upcoming(self) -> list[Decision]:
        """Decisions that lead to a stop (warned, or idle with a deadline), soonest first."""
        pending = [d for d in self.decisions.values() if d.action in (Action.WARN, Action.STOP) or d.stop_at]
        return sorted(pending, key=lambda d: (d.stop_at is None, d.stop_at or datetime.max))
