"""One culling cycle: gather the evidence, ask the policy, let the arbiter hook have its say, act, report.

The cycle is the only writer of :class:`.CullerState`. Nothing in it raises out of :meth:`Culler.run`
except a failure to list the running servers (without which there is nothing to decide); every other
failure (a probe, the attribution service, a stop, the hook) is logged, counted in the report's
``errors`` and leaves the server running.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from ...audit import Action as AuditAction
from ...audit import AuditRecord, write_audit
from .gpusource import GpuReading, GpuSource
from .hubapi import HttpError, HubApi, RunningServer
from .model import Action, Decision, Reason, Workspace
from .policy import decide_all
from .probes import ServerProber
from .state import CullerState, CycleReport, Key

log = logging.getLogger("gpuworkspace.culler")

SERVICE = "gpuworkspace-culler"
RECENT_STOPS = 200  # state.stopped keeps this many
AUDIT_WARNED: AuditAction = "workspace-cull-warned"
AUDIT_WITHDRAWN: AuditAction = "workspace-cull-warnings-withdrawn"
AUDIT_STOPPED: AuditAction = "workspace-stopped"

ArbiterResult = Decision | None
ArbiterHook = Callable[[Workspace, Decision], ArbiterResult | Awaitable[ArbiterResult]]


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Options:
    """How the cycle acts (the service's traitlets, resolved)."""

    concurrency: int = 10
    save_first: bool = False
    remove: bool = False
    arbiter: ArbiterHook | None = None


def build_workspace(server: RunningServer, reading: GpuReading | None) -> Workspace:
    """The hub's and the attribution service's evidence about one server (probe to come)."""
    return Workspace(
        user=server.user,
        server=server.name,
        started=server.started,
        hub_last_activity=server.last_activity,
        profile=server.profile or (reading.profile if reading else None),
        groups=server.groups,
        exempt_annotation=bool(reading and reading.cull_exempt),
        gpu=reading.gpu if reading else None,
        cpu=reading.cpu if reading else None,
    )


class Culler:
    """Runs cycles against the hub; ``clock`` is the only source of time (tests drive it)."""

    def __init__(
        self,
        state: CullerState,
        hub: HubApi,
        *,
        prober: ServerProber | None = None,
        gpu: GpuSource | None = None,
        options: Options = Options(),
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.state, self.hub, self.prober, self.gpu = state, hub, prober, gpu
        self.options = options
        self.clock = clock

    async def run(self) -> CycleReport:
        """One cycle; the report is also ``state.last_cycle``."""
        started_at = now = self.clock()
        http = self.hub.http
        first_request = http.requests
        errors: list[str] = []
        servers, readings = await self._list(now, errors)
        endpoints = {s.key: s for s in servers}  # each server's URL and its own probe token
        limit = asyncio.Semaphore(max(1, self.options.concurrency))  # probes, then stops
        workspaces = [build_workspace(s, readings.get(s.key)) for s in servers]
        workspaces, probed = await self._probe_all(workspaces, endpoints, now, limit, errors)
        given = self.state.book.all()
        decisions = decide_all(workspaces, self.state.policy, given, now=now)
        by_key = {w.key: w for w in workspaces}
        decisions = [await self._arbitrate(by_key[d.key], d, errors) for d in decisions]
        warned = sum(d.action is Action.WARN for d in decisions)
        stops = [d for d in decisions if d.action is Action.STOP]
        stopped = len(stops)
        if not self.state.dry_run:
            for decision in decisions:
                await self._apply_warnings(by_key[decision.key], decision, readings.get(decision.key), now)
        # the warnings given and the decisions change together, before the stops' awaits (save-first,
        # the hub): the API never shows warnings withdrawn beside the decision that gave them
        self._record(workspaces, decisions, readings)
        if not self.state.dry_run:

            async def stop(decision: Decision) -> int:
                ws = by_key[decision.key]
                async with limit:
                    server = endpoints[ws.key]
                    return await self._stop(ws, decision, readings.get(ws.key), server, now, errors)

            stopped = sum(await asyncio.gather(*(stop(d) for d in stops)))
        report = CycleReport(
            started_at=started_at,
            finished_at=self.clock(),
            servers=len(servers),
            probed=probed,
            requests=http.requests - first_request,
            warned=warned,
            stopped=stopped,
            dry_run=self.state.dry_run,
            errors=tuple(errors),
        )
        self.state.last_cycle = report
        log.info(
            "cycle: %d servers, %d probed, %d requests, %d warned, %d stopped%s, %d errors in %.1fs",
            report.servers,
            report.probed,
            report.requests,
            report.warned,
            report.stopped,
            " (dry run: nothing done)" if report.dry_run else "",
            len(report.errors),
            report.seconds,
        )
        return report

    async def _list(
        self, now: datetime, errors: list[str]
    ) -> tuple[list[RunningServer], dict[Key, GpuReading]]:
        """The running servers and the GPU readings, asked at the same time."""
        policy = self.state.policy
        reading = (
            self.gpu.read(busy_percent=policy.gpu_busy_percent, now=now, cpu_busy_cores=policy.cpu_busy_cores)
            if self.gpu
            else None
        )
        servers, readings = await asyncio.gather(self.hub.running_servers(), reading or _nothing())
        if self.gpu is not None and self.gpu.error is not None:
            errors.append(f"GPU evidence: {self.gpu.error}")
        return servers, readings

    async def _probe_all(
        self,
        workspaces: list[Workspace],
        endpoints: dict[Key, RunningServer],
        now: datetime,
        limit: asyncio.Semaphore,
        errors: list[str],
    ) -> tuple[list[Workspace], int]:
        """Each workspace with its server's evidence; how many servers were asked."""
        prober = self.prober
        if prober is None:
            return workspaces, 0
        prober.keep_only(endpoints)
        policy, book = self.state.policy, self.state.book

        async def one(ws: Workspace) -> tuple[Workspace, bool]:
            given = book.given(ws.key)
            idle_warned = any(w.reason is Reason.IDLE for w in given)

            def judge(candidate: Workspace) -> Decision:
                return decide_all([candidate], policy, {ws.key: given}, now=now)[0]

            async with limit:
                server = endpoints[ws.key]
                probe, asked = await prober.probe(
                    ws, server.url, judge, token=server.probe_token, idle_warned=idle_warned, now=now
                )
            if probe is not None and probe.error:
                errors.append(f"{_name(ws)}: probe failed: {probe.error}")
            return replace(ws, probe=probe), asked

        results = await asyncio.gather(*(one(ws) for ws in workspaces))
        return [ws for ws, _ in results], sum(asked for _, asked in results)

    async def _arbitrate(self, ws: Workspace, decision: Decision, errors: list[str]) -> Decision:
        """The arbiter hook's word on a WARN or STOP: None keeps it, a Decision replaces it."""
        hook = self.options.arbiter
        if hook is None or decision.action not in (Action.WARN, Action.STOP):
            return decision
        try:
            verdict: object = hook(ws, decision)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if verdict is None:
                return decision
            if not isinstance(verdict, Decision) or verdict.key != decision.key:
                raise TypeError(f"returned {verdict!r}, not None or a Decision for {_name(ws)}")
            if verdict.policy is None:  # the rules still apply to the server: keep showing them
                verdict = replace(verdict, policy=decision.policy)
            return verdict
        except Exception as e:
            log.exception("arbiter hook failed for %s: keeping the server", _name(ws))
            errors.append(f"{_name(ws)}: arbiter hook failed: {e}")
            return replace(
                decision,
                action=Action.KEEP,
                stage=None,
                message=f"kept: the arbiter hook failed ({e}); {decision.message}",
            )

    async def _apply_warnings(
        self, ws: Workspace, decision: Decision, reading: GpuReading | None, now: datetime
    ) -> None:
        book = self.state.book
        if decision.cancels_warnings and book.given(ws.key):
            book.clear(ws.key)
            await self._audit(AUDIT_WITHDRAWN, ws, decision, reading, now)
        if decision.action is Action.WARN:
            warning = book.record(decision, now=now)
            await self._audit(AUDIT_WARNED, ws, decision, reading, now, stage=warning.stage)

    async def _stop(
        self,
        ws: Workspace,
        decision: Decision,
        reading: GpuReading | None,
        server: RunningServer,
        now: datetime,
        errors: list[str],
    ) -> int:
        saved: list[str] = []
        if self.options.save_first and self.prober is not None:
            try:
                saved = await self.prober.checkpoint_open_notebooks(server.url, ws, token=server.probe_token)
            except HttpError as e:  # the stop goes ahead: the disk keeps everything saved
                errors.append(f"{_name(ws)}: save first failed: {e}")
        try:
            outcome = await self.hub.stop(ws.user, ws.server, remove=self.options.remove)
        except HttpError as e:
            log.error("stopping %s failed: %s", _name(ws), e)
            errors.append(f"{_name(ws)}: stop failed: {e}")
            return 0
        self.state.book.clear(ws.key)
        self.state.stopped.append((now, decision))
        del self.state.stopped[:-RECENT_STOPS]
        await self._audit(AUDIT_STOPPED, ws, decision, reading, now, outcome=outcome, checkpointed=saved)
        return 1

    async def _audit(
        self,
        action: AuditAction,
        ws: Workspace,
        decision: Decision,
        reading: GpuReading | None,
        now: datetime,
        **details: Any,
    ) -> None:
        gpu = ws.gpu
        record = AuditRecord(
            action=action,
            user=ws.user,
            server=ws.server,
            namespace=reading.namespace if reading else "",
            kind="Server",
            name=_name(ws),
            message=decision.message,
            profile=ws.profile or "",
            actor=SERVICE,
            details={
                "reason": str(decision.reason) if decision.reason else None,
                "stop_at": decision.stop_at.isoformat() if decision.stop_at else None,
                "last_activity": decision.last_activity.isoformat() if decision.last_activity else None,
                "activity_source": decision.activity_source,
                "idle_allocated_gpu_seconds": gpu.idle_allocated_gpu_seconds if gpu else None,
                **details,
            },
        )
        await write_audit(record, now=now)  # the hub API stops it: no Kubernetes client, no Event

    def _record(
        self, workspaces: Sequence[Workspace], decisions: Sequence[Decision], readings: dict[Key, GpuReading]
    ) -> None:
        state = self.state
        running = [w.key for w in workspaces]
        if not state.dry_run:
            state.book.keep_only(running)
        state.decisions = {d.key: d for d in decisions}
        state.idle_gpu_seconds = {
            key: r.gpu.idle_allocated_gpu_seconds
            for key, r in readings.items()
            if key in state.decisions and r.gpu.idle_allocated_gpu_seconds is not None
        }


async def _nothing() -> dict[Key, GpuReading]:
    return {}


def _name(ws: Workspace) -> str:
    return f"{ws.user}/{ws.server}" if ws.server else ws.user
