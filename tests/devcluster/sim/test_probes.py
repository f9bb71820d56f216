"""The prober alone (no cluster): when a container counts as started and ready, as the kubelet decides.

kubernetes/kubernetes ``pkg/kubelet/prober/prober_manager.go`` ``manager.UpdatePodStatus``: a running
container without a startup worker is started; a started one without a readiness worker is ready at
once, whatever listens on its ports. Each run ends at a callback or at a deadline that fails the test
(a finding, not a speed check).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from gpuworkspace_devcluster.sim import probes

Obj = dict[str, Any]
HOST = "127.0.0.1"
DEADLINE_S = 10.0


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class Calls:
    """Records the prober's callbacks in order; ``seen`` fires when ``until`` has happened."""

    def __init__(self, until: Any) -> None:
        self.log: list[tuple[str, Any]] = []
        self.until, self.seen = until, asyncio.Event()

    def _add(self, name: str, value: Any = None) -> None:
        self.log.append((name, value))
        if self.until(self.log):
            self.seen.set()

    def callbacks(self) -> dict[str, Any]:
        return {
            "on_started": lambda: self._add("started"),
            "on_ready": lambda ok: self._add("ready", ok),
            "on_unhealthy": self._add,
            "on_kill": lambda why: self._add("kill", why),
        }


async def run_until(container: Obj, calls: Calls, exec_run: probes.ExecRun | None = None) -> None:
    async def no_exec(argv: list[str], limit_s: float) -> tuple[int, str]:
        raise AssertionError(f"no exec probe expected, got {argv}")

    prober = probes.Prober(container, HOST, exec_run or no_exec, calls.callbacks(), period_cap_s=0.02)
    task = asyncio.ensure_future(prober.run())
    try:
        await asyncio.wait_for(calls.seen.wait(), DEADLINE_S)
    except TimeoutError:
        raise AssertionError(f"the prober never got there; it reported {calls.log}") from None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_container_without_readiness_probe_is_ready_though_nothing_listens() -> None:
    container = {"name": "c", "ports": [{"containerPort": closed_port()}]}
    calls = Calls(lambda log: ("ready", True) in log)
    await run_until(container, calls)
    assert calls.log == [("started", None), ("ready", True)]


async def test_a_tcp_readiness_probe_on_a_closed_port_never_makes_it_ready() -> None:
    port = closed_port()
    container = {
        "name": "c",
        "ports": [{"containerPort": port}],
        "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1},
    }
    calls = Calls(lambda log: sum(name == "Readiness" for name, _ in log) >= 3)
    await run_until(container, calls)
    assert ("ready", True) not in calls.log
    assert calls.log[1] == ("Readiness", f"dial tcp {HOST}:{port}: connect: connection refused")


async def test_without_readiness_probe_ready_waits_for_the_startup_probe() -> None:
    answers = [1, 1, 0]  # the startup probe fails twice, then succeeds

    async def exec_run(argv: list[str], limit_s: float) -> tuple[int, str]:
        code = answers.pop(0)
        return code, "not yet" if code else ""

    container = {
        "name": "c",
        "startupProbe": {"exec": {"command": ["check"]}, "failureThreshold": 5, "periodSeconds": 1},
    }
    calls = Calls(lambda log: ("ready", True) in log)
    await run_until(container, calls, exec_run)
    assert [name for name, _ in calls.log] == ["Startup", "Startup", "started", "ready"]
