"""Against a real jupyter_server: the culler's probes never count as the server's activity.

jupyter_server's ``APIHandler.update_api_activity`` records every authenticated API request as the
server's ``last_activity`` (what ``/api/status`` reports and jupyterhub-singleuser sends to the hub),
unless the handler opts out (``/api/status`` does) or the request carries ``no_track_activity``.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuworkspace_spawner.services.culler.hubapi import Http, parse_time
from gpuworkspace_spawner.services.culler.model import Action, Decision, Reason, Workspace
from gpuworkspace_spawner.services.culler.probes import ServerProber

pytestmark = pytest.mark.slow

TOKEN = "culler-test-token"


@dataclass
class Server:
    base: str
    http: Http

    async def get(self, path: str) -> object:
        return await self.http.get_json(f"{self.base}/api/{path}", what=path)

    async def last_activity(self) -> datetime:
        status = await self.get("status")
        assert isinstance(status, dict)
        at = parse_time(status["last_activity"])
        assert at is not None
        return at


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def jupyter_server(tmp_path: Path) -> Iterator[str]:
    pytest.importorskip("jupyter_server")
    pytest.importorskip("ipykernel")
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "jupyter_server",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={TOKEN}",
        f"--ServerApp.root_dir={tmp_path}",
        "--no-browser",
    ]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_DATA_DIR": str(tmp_path)}
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


@pytest.fixture
async def server(jupyter_server: str) -> AsyncIterator[Server]:
    http = Http(TOKEN, timeout=5)
    up = Server(jupyter_server, http)
    try:
        for _ in range(100):  # up to ~10 s for the server to listen
            try:
                await up.get("status")
                break
            except Exception:
                await asyncio.sleep(0.1)
        else:
            pytest.fail("jupyter_server did not start within 10 s")
        response = await http.fetch(
            f"{jupyter_server}/api/kernels", what="start a kernel", method="POST", body=json.dumps({})
        )
        assert response.code == 201, response.body
        yield up
    finally:
        http.close()


def always_warn(ws: Workspace) -> Decision:
    """A judge that makes the prober read everything it can: status, kernels and terminals."""
    return Decision(ws.user, ws.server, Action.WARN, "test", reason=Reason.IDLE, stage=0)


async def test_probes_do_not_move_the_servers_last_activity(server: Server) -> None:
    await asyncio.sleep(1.0)  # the kernel's start-up messages are over
    before = await server.last_activity()
    prober = ServerProber(server.http, server.base)
    started = datetime.now(UTC) - timedelta(hours=2)
    for n in range(3):
        ws = Workspace("alice", "", started=started)
        probe, asked = await prober.probe(
            ws, "/", always_warn, token=TOKEN, idle_warned=False, now=datetime.now(UTC)
        )
        assert asked and probe is not None and probe.error is None, probe
        assert probe.kernels and len(probe.kernels) == 1 and probe.terminals == ()
        if n == 0:
            await prober.checkpoint_open_notebooks("/", ws, token=TOKEN)  # api/sessions (none open here)
        await asyncio.sleep(0.1)
    assert await server.last_activity() == before

    await server.get("kernels")  # the same request without no_track_activity: it counts
    assert await server.last_activity() > before
