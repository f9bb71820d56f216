"""The code-server stand-in (sim/codeserver.py) and the image that carries it (sim/images.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from jupyter_vscode_proxy import setup_vscode

from gpuworkspace_devcluster.sim import codeserver, images
from gpuworkspace_devcluster.sim.guest import code_server_config, free_port

DIGEST = "0" * 63 + "1"


@pytest.mark.parametrize(
    ("argv", "bind", "port", "sock", "folder"),
    [
        pytest.param(  # jupyter-vscode-proxy 0.7's command line
            ["--auth", "none", "--disable-telemetry", "--port=4321", "/home/jovyan"],
            None,
            4321,
            None,
            "/home/jovyan",
            id="vscode-proxy",
        ),
        pytest.param(
            [
                "--auth",
                "none",
                "--disable-telemetry",
                "--socket",
                "/tmp/cs.sock",
                "--socket-mode",
                "0600",
                ".",
            ],
            None,
            None,
            "/tmp/cs.sock",
            ".",
            id="vscode-proxy-socket",
        ),
        pytest.param(  # the VM image contract's (sim/guest.py)
            ["--bind-addr", "127.0.0.1:8080", "--auth", "none", "--disable-telemetry"],
            "127.0.0.1:8080",
            None,
            None,
            ".",
            id="image-contract",
        ),
    ],
)
def test_standin_reads_code_server_command_lines(
    argv: list[str], bind: str | None, port: int | None, sock: str | None, folder: str
) -> None:
    args = codeserver.parse(argv)
    assert (args.bind_addr, args.port, args.socket, args.folder) == (bind, port, sock, folder)


def test_the_workspace_image_has_code_server_on_its_path_and_base_notebook_has_not() -> None:
    image = images.lookup(f"gpuworkspace.dev/workspace-notebook@sha256:{DIGEST}")
    base = images.lookup(f"quay.io/jupyter/base-notebook@sha256:{DIGEST}")
    assert image is not None and base is not None and image.kind == base.kind == "notebook"
    found = shutil.which("code-server", path=image.env["PATH"])
    assert found == os.path.join(images.STANDIN_BIN, "code-server") and os.access(found, os.X_OK)
    assert shutil.which("code-server", path=base.env.get("PATH", images.IMAGE_PATH)) is None


def _serve(argv: list[str], path: str, url: str) -> tuple[int, str]:
    env = {**os.environ, "PATH": f"{images.STANDIN_BIN}:{Path(sys.executable).parent}:/usr/bin:/bin"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(url + path, timeout=2) as resp:
                    return resp.status, resp.read().decode()
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_standin_answers_jupyter_vscode_proxys_command_with_its_page(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    image = images.lookup(f"gpuworkspace.dev/workspace-notebook@sha256:{DIGEST}")
    assert image is not None
    monkeypatch.setenv("PATH", image.env["PATH"])  # jupyter-vscode-proxy looks code-server up on PATH
    command = setup_vscode()["command"](port=port, unix_socket="")  # what the container image runs
    argv = [c.format(port=port) for c in command]
    assert argv[0] == "code-server"
    status, page = _serve(argv, "/some/path?folder=/etc", f"http://127.0.0.1:{port}")
    assert status == 200 and codeserver.MARKER in page and "path: /some/path?folder=/etc" in page


def test_the_guest_config_proxies_vscode_to_code_server_on_the_guest_loopback() -> None:
    server = code_server_config(8080)["ServerProxy"]["servers"]["vscode"]
    assert server["port"] == 8080 and server["command"][:3] == [
        "code-server",
        "--bind-addr",
        "127.0.0.1:{port}",
    ]
    port = free_port()
    argv = [
        c.format(port=port) for c in code_server_config(port)["ServerProxy"]["servers"]["vscode"]["command"]
    ]
    assert _serve(argv, "/", f"http://127.0.0.1:{port}")[0] == 200
