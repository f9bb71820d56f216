"""Container probes as the kubelet's prober runs them: httpGet, tcpSocket, exec (grpc: a TCP connect).

Failure messages follow the kubelet's (Go's net/http wording). Readiness follows the kubelet's
``UpdatePodStatus`` (kubernetes/kubernetes ``pkg/kubelet/prober/prober_manager.go``,
``manager.UpdatePodStatus``): a running container is started once its startupProbe (if any) has
succeeded, and a started container with no readinessProbe is ready at once ("no readinessProbe ->
always ready"), whether or not anything listens on its ports; one with a readinessProbe is ready only
after ``successThreshold`` successes. So, as on a real cluster, "Ready" says nothing about a server
answering unless the pod declares a probe for it. Periods are capped by ``period_cap_s`` to keep tests
fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
ExecRun = Callable[[list[str], float], Awaitable[tuple[int, str]]]  # (argv, limit_s) -> (code, output)


@dataclass(frozen=True)
class Result:
    ok: bool
    message: str = ""


def _port(container: Obj, port: Any) -> int:
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    return 0


async def _connect(host: str, port: int, limit_s: float, tls: bool = False) -> Any:
    ctx = None
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # the kubelet does not verify either
    return await asyncio.wait_for(asyncio.open_connection(host, port, ssl=ctx), limit_s)


async def http_get(container: Obj, spec: Obj, pod_ip: str, limit_s: float) -> Result:
    host, port = spec.get("host") or pod_ip, _port(container, spec.get("port"))
    scheme = (spec.get("scheme") or "HTTP").lower()
    path = spec.get("path") or "/"
    path = path if path.startswith("/") else "/" + path
    url = f"{scheme}://{host}:{port}{path}"
    headers = {"Host": f"{host}:{port}", "User-Agent": "kube-probe/1.33", "Accept": "*/*"}
    headers.update({h["name"]: h["value"] for h in spec.get("httpHeaders") or []})
    try:
        reader, writer = await _connect(host, port, limit_s, scheme == "https")
    except TimeoutError:
        return Result(
            False, f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
        )
    except OSError as exc:
        return Result(False, f'Get "{url}": {_dial_error(host, port, exc)}')
    try:
        lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(f"GET {path} HTTP/1.1\r\n{lines}Connection: close\r\n\r\n".encode())
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), limit_s)
    except (OSError, TimeoutError):
        return Result(
            False, f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
        )
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    parts = status_line.split()
    code = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    if 200 <= code < 400:  # noqa: PLR2004 (HTTP status classes)
        return Result(True)
    return Result(False, f"HTTP probe failed with statuscode: {code}")


def _dial_error(host: str, port: int, exc: OSError) -> str:
    reason = (
        "connection refused"
        if isinstance(exc, ConnectionRefusedError)
        else (exc.strerror or str(exc)).lower()
    )
    return f"dial tcp {host}:{port}: connect: {reason}"


async def tcp_open(host: str, port: int, limit_s: float) -> Result:
    try:
        _, writer = await _connect(host, port, limit_s)
    except TimeoutError:
        return Result(False, f"dial tcp {host}:{port}: i/o timeout")
    except OSError as exc:
        return Result(False, _dial_error(host, port, exc))
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return Result(True)


async def run_probe(container: Obj, probe: Obj, pod_ip: str, exec_run: ExecRun) -> Result:
    limit_s = float(probe.get("timeoutSeconds") or 1)
    if "httpGet" in probe:
        return await http_get(container, probe["httpGet"], pod_ip, limit_s)
    if "tcpSocket" in probe or "grpc" in probe:
        spec = probe.get("tcpSocket") or probe.get("grpc") or {}
        return await tcp_open(spec.get("host") or pod_ip, _port(container, spec.get("port")), limit_s)
    if "exec" in probe:
        argv = list(probe["exec"].get("command") or [])
        try:
            code, output = await exec_run(argv, limit_s)
        except TimeoutError:
            return Result(False, f"command {argv!r} timed out")
        except OSError as exc:
            return Result(False, str(exc))
        return Result(code == 0, output)
    return Result(True)


class Prober:
    """Runs one container instance's startup, readiness and liveness probes until cancelled.

    Callbacks: ``on_started()``, ``on_ready(bool)``, ``on_unhealthy(kind, message)`` for every failed
    probe (an ``Unhealthy`` event), ``on_kill(message)`` when liveness or startup gives up.
    """

    def __init__(
        self,
        container: Obj,
        pod_ip: str,
        exec_run: ExecRun,
        callbacks: dict[str, Callable[..., None]],
        period_cap_s: float | None,
    ) -> None:
        self.container, self.pod_ip, self.exec_run = container, pod_ip, exec_run
        self.cb, self.cap = callbacks, period_cap_s

    def _period(self, probe: Obj) -> float:
        period = float(probe.get("periodSeconds") or 10)
        return min(period, self.cap) if self.cap is not None else period

    def _delay(self, probe: Obj) -> float:
        delay = float(probe.get("initialDelaySeconds") or 0)
        return min(delay, self.cap) if self.cap is not None else delay

    async def run(self) -> None:
        startup = self.container.get("startupProbe")
        if startup and not await self._startup(startup):
            return
        self.cb["on_started"]()
        await asyncio.gather(self._readiness(), self._liveness())

    async def _startup(self, probe: Obj) -> bool:
        await asyncio.sleep(self._delay(probe))
        failures, threshold = 0, int(probe.get("failureThreshold") or 3)
        while True:
            result = await run_probe(self.container, probe, self.pod_ip, self.exec_run)
            if result.ok:
                return True
            failures += 1
            self.cb["on_unhealthy"]("Startup", result.message)
            if failures >= threshold:
                self.cb["on_kill"]("failed startup probe")
                return False
            await asyncio.sleep(self._period(probe))

    async def _readiness(self) -> None:
        probe = self.container.get("readinessProbe")
        if not probe:  # the kubelet: no readiness worker, so a started, running container is ready
            self.cb["on_ready"](True)
            return
        await asyncio.sleep(self._delay(probe))
        ready, successes, failures = False, 0, 0
        need_ok, need_fail = int(probe.get("successThreshold") or 1), int(probe.get("failureThreshold") or 3)
        while True:
            result = await run_probe(self.container, probe, self.pod_ip, self.exec_run)
            successes, failures = (successes + 1, 0) if result.ok else (0, failures + 1)
            if not result.ok:
                self.cb["on_unhealthy"]("Readiness", result.message)
            if not ready and successes >= need_ok:
                ready = True
                self.cb["on_ready"](True)
            elif ready and failures >= need_fail:
                ready = False
                self.cb["on_ready"](False)
            await asyncio.sleep(self._period(probe))

    async def _liveness(self) -> None:
        probe = self.container.get("livenessProbe")
        if not probe:
            return
        await asyncio.sleep(self._delay(probe))
        failures, threshold = 0, int(probe.get("failureThreshold") or 3)
        while True:
            result = await run_probe(self.container, probe, self.pod_ip, self.exec_run)
            failures = 0 if result.ok else failures + 1
            if not result.ok:
                self.cb["on_unhealthy"]("Liveness", result.message)
                if failures >= threshold:
                    self.cb["on_kill"]("failed liveness probe")
                    return
            await asyncio.sleep(self._period(probe))
