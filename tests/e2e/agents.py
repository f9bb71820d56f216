"""Node agents for e2e tests: one real ``gpuworkspace-agent`` per GPU node of the devcluster, on the
fake NVML, published through the Kubernetes API as the DaemonSet and the endpoints controller would.

    with start_agents(stack.devcluster.state_dir, stack.devcluster.url, stack.kubeconfig) as urls:
        ...  # urls: node -> "http://127.10.0.1:9500/metrics"

Each agent listens on its node's InternalIP (``127.<o>.0.1`` in the devcluster instance's range, read from the Node) port 9500 (a free
port when 9500 is taken there), with ``--proc-root <state>/sim/proc/<node>``. The selector-less
Service ``gpuworkspace-agent`` (port ``metrics``) and an EndpointSlice (label
``kubernetes.io/service-name``, one endpoint per node with ``nodeName``) go in with
``kubectl apply -f -`` (JSON; kubectl's generator commands send protobuf, which the devcluster
refuses) and are deleted on exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .harness import BIN, Proc, wait_for

SERVICE = "gpuworkspace-agent"
PORT = 9500
FAKE_NVML = "gpuworkspace_devcluster.sim.fakenvml"
GPU_NODES = ("gpu-node-a", "gpu-node-b")


def _port_on(ip: str) -> int:
    for port in (PORT, 0):
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the agent's server does
            try:
                sock.bind((ip, port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise RuntimeError(f"no free port on {ip}")


def discovery_objects(namespace: str, endpoints: Sequence[tuple[str, str, int]]) -> list[dict[str, Any]]:
    """Namespace, Service and EndpointSlice for ``(node, ip, port)`` agents."""
    ports = sorted({port for _, _, port in endpoints})
    labels = {"app.kubernetes.io/name": SERVICE}
    slices = [
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{SERVICE}-{port}",
                "namespace": namespace,
                "labels": {
                    **labels,
                    "kubernetes.io/service-name": SERVICE,
                    "endpointslice.kubernetes.io/managed-by": "e2e.gpuworkspace.dev",
                },
            },
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": [ip], "nodeName": node, "conditions": {"ready": True, "serving": True}}
                for node, ip, p in endpoints
                if p == port
            ],
            "ports": [{"name": "metrics", "port": port, "protocol": "TCP"}],
        }
        for port in ports
    ]
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": namespace, "labels": labels},
        "spec": {"ports": [{"name": "metrics", "port": PORT, "protocol": "TCP"}]},
    }
    namespace_obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    return [namespace_obj, service, *slices]


def _kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    done = subprocess.run(
        ["kubectl", *args], check=False, input=stdin, capture_output=True, text=True, env=env, timeout=60
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def internal_ip(kubeconfig: Path, node: str) -> str:
    """The node's InternalIP as the API reports it (``127.<10+i>.0.1`` in the devcluster)."""
    node_obj = json.loads(_kubectl(kubeconfig, "get", "node", node, "-o", "json"))
    return next(a["address"] for a in node_obj["status"]["addresses"] if a["type"] == "InternalIP")


@contextlib.contextmanager
def start_agents(
    devcluster_state_dir: Path,
    control_url: str,
    kubeconfig: Path,
    nodes: Sequence[str] = GPU_NODES,
    namespace: str = "gpuworkspace-system",
    log_dir: Path | None = None,
) -> Iterator[dict[str, str]]:
    """Run the agents and publish them; yields node -> metrics URL."""
    state = Path(devcluster_state_dir)
    logs = log_dir or state / "agent-logs"
    logs.mkdir(parents=True, exist_ok=True)
    procs: list[Proc] = []
    endpoints: list[tuple[str, str, int]] = []
    try:
        for node in nodes:
            ip = internal_ip(kubeconfig, node)
            port = _port_on(ip)
            env = {
                **os.environ,
                "GPUWS_FAKE_NVML_URL": control_url,
                "GPUWS_FAKE_NVML_KUBECONFIG": str(kubeconfig),
                "GPUWS_FAKE_NVML_NODE": node,
                "NODE_NAME": node,
            }
            argv = [
                str(BIN / "gpuworkspace-agent"),
                *("--listen", f"{ip}:{port}", "--nvml-module", FAKE_NVML),
                *("--proc-root", str(state / "sim" / "proc" / node)),
            ]
            proc = Proc(f"agent-{node}", argv, logs / f"agent-{node}.log", env).start()
            procs.append(proc)
            endpoints.append((node, ip, port))
        for (node, ip, port), proc in zip(endpoints, procs, strict=True):
            wait_for(lambda ip=ip, port=port: _answers(ip, port), 30, f"the agent on {node}", proc)
        _kubectl(kubeconfig, "apply", "-f", "-", stdin=_stream(discovery_objects(namespace, endpoints)))
        yield {node: f"http://{ip}:{port}/metrics" for node, ip, port in endpoints}
    finally:
        if endpoints:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                _kubectl(kubeconfig, "delete", "-n", namespace, "service", SERVICE, "--ignore-not-found")
                _kubectl(
                    kubeconfig,
                    *("delete", "-n", namespace, "endpointslices", "--ignore-not-found"),
                    *("-l", f"kubernetes.io/service-name={SERVICE}"),
                )
        for proc in reversed(procs):
            proc.stop()


def _stream(objs: list[dict[str, Any]]) -> str:
    return "\n---\n".join(json.dumps(obj) for obj in objs)


def _answers(ip: str, port: int) -> bool:
    with socket.create_connection((ip, port), timeout=1):
        return True
