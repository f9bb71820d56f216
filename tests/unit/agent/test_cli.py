"""``gpuworkspace-agent`` as a process: serves /metrics, stops cleanly on SIGTERM."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuworkspace_spawner.agent.cli import build_parser, parse_listen


def test_listen_forms() -> None:
    assert parse_listen("0.0.0.0:9500") == ("0.0.0.0", 9500)
    assert parse_listen("[::]:9500") == ("::", 9500)
    assert parse_listen(":9500") == ("", 9500)
    for bad in ("9500", "host:", "host:99999"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_listen(bad)


def test_node_name_defaults_to_the_downward_api_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-node-b")
    assert build_parser().parse_args([]).node_name == "gpu-node-b"


def test_serves_metrics_and_stops_on_sigterm() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "gpuworkspace_spawner.agent", "--listen", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(
        [*argv, "--node-name", "n1"], env={**os.environ}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline, text = time.monotonic() + 20, ""
        while time.monotonic() < deadline and not text:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                    text = resp.read().decode()
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                time.sleep(0.1)
        up = [
            s for f in text_string_to_metric_families(text) for s in f.samples if s.name.endswith("nvml_up")
        ]
        assert [s.labels for s in up] == [{"node": "n1"}]  # 0 here (no driver), 1 on a GPU node
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0, out.decode()
    assert b"stopping" in out
