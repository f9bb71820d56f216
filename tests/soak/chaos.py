"""The chaos conductor: workers run lifecycle operations while faults, restarts and node failures hit.

Continuous: 5 % of the hub's and services' API requests fail with 500/429/503/504, and their watches are
cut at random (devcluster fault rules aimed at kubernetes_asyncio's User-Agent; the kubectl observer is
spared). Every ``chaos_every`` operations one event, in turn: a hub restart while workers run, a managed
service killed (JupyterHub restarts it), a node failure with the fencing runbook (workers paused).

Every wait has a deadline (:class:`Limits`) that ends as a finding in ``tally.errors`` naming what was
waited for, never as a hang: the pause before a node failure, a worker waiting for the pause to end,
and the whole run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.e2e.harness import HubStack, wait_for
from tests.e2e.test_node_failure import fence
from tests.e2e.test_workspace_lifecycle import NS, get_json, kubectl

from .workload import HubUnreachable, Tally, Worker

UA_OF_PRODUCT = "OpenAPI-Generator*"  # kubernetes_asyncio: the hub, KubeSpawner and the services
SERVICES = ("attribution", "culler", "reclaimer", "disks")
EVENTS = ("hub-restart", "node-failure", "service-restart")


@dataclass(frozen=True)
class Limits:
    """How long the conductor waits for each thing before it records a finding and goes on."""

    pause_s: float = 400.0  # the operations in flight to finish before a node failure
    resume_s: float = 900.0  # a worker, for paused operations to be handed out again
    run_s: float = 3600.0  # the whole run: then the workers still busy are a finding


@dataclass
class Report:
    tally: Tally = field(default_factory=Tally)
    chaos: dict[str, int] = field(default_factory=dict)
    fencing_refusals: int = 0
    product_requests: int = 0  # API requests of the hub and services (kubernetes_asyncio)
    error_answers: int = 0  # of those, answered 429/500/503/504
    seconds: float = 0.0


class Conductor:
    def __init__(
        self,
        stack: HubStack,
        *,
        ops: int,
        seed: int,
        workers: int = 3,
        error_rate: float = 0.05,
        limits: Limits = Limits(),
    ):
        self.stack, self.ops, self.seed, self.error_rate = stack, ops, seed, error_rate
        self.limits = limits
        self.report = Report()
        self.workers = [Worker(stack, f"soak{i}", seed * 100 + i, self.report.tally) for i in range(workers)]
        self.chaos_every = max(10, ops // 12)
        self._done = 0
        self._lock = threading.Lock()
        self._running = threading.Event()  # cleared while a node-failure event needs the cluster still
        self._running.set()
        self._stopping = threading.Event()  # set when the run passed its deadline
        self._in_flight = 0

    # ------------------------------------------------------------------------------ the run
    def run(self) -> Report:
        t0 = time.monotonic()
        for worker in self.workers:
            self.stack.hub.api("POST", f"/users/{worker.user}")
        self._faults_on()
        threads = [threading.Thread(target=self._work, args=(w,), daemon=True) for w in self.workers]
        for thread in threads:
            thread.start()
        next_event, turn, next_count = self.chaos_every, 0, time.monotonic() + 5
        deadline = t0 + self.limits.run_s
        self.stack.requests_log(clear=True)
        while any(t.is_alive() for t in threads):
            if time.monotonic() > deadline:
                self._give_up()
                break
            if self._done >= next_event:
                self._event(EVENTS[turn % len(EVENTS)])
                turn, next_event = turn + 1, next_event + self.chaos_every
            if time.monotonic() > next_count:
                self._count_requests()
                next_count = time.monotonic() + 5
            time.sleep(0.2)
        self._count_requests()
        self.stack.devcluster.control("/_devcluster/faults", None, "DELETE")
        self.report.seconds = time.monotonic() - t0
        return self.report

    def _give_up(self) -> None:
        """The run passed its deadline: a finding naming what each worker still does; workers stop
        after their current operation (they are daemon threads: a stuck one does not hold the run)."""
        self._stopping.set()
        self._running.set()
        busy = [f"{w.user}: {w.doing}" for w in self.workers if w.doing]
        self.report.tally.errors.append(
            f"the run passed its deadline of {self.limits.run_s:.0f} s after {self._done} of {self.ops} "
            f"operations; still in flight: {busy or 'none'}"
        )

    def _work(self, worker: Worker) -> None:
        while not self._stopping.is_set():
            if not self._running.wait(self.limits.resume_s):
                self.report.tally.errors.append(
                    f"{worker.user}: operations still paused after {self.limits.resume_s:.0f} s "
                    "(a chaos event never handed them out again); the worker stops"
                )
                return
            with self._lock:
                if self._done >= self.ops:
                    return
                if not self._running.is_set():
                    continue
                self._done += 1
                self._in_flight += 1
            try:
                self._busy(worker)
            finally:
                with self._lock:
                    self._in_flight -= 1

    @contextlib.contextmanager
    def _paused(self) -> Iterator[None]:
        """Stop handing out operations and wait for those in flight (a node failure wants a still hub);
        hand them out again on leaving, whatever happened, a pause that timed out included."""
        with self._lock:
            self._running.clear()
        try:
            wait_for(
                lambda: self._in_flight == 0,
                self.limits.pause_s,
                "the operations in flight to finish",
                interval_s=0.2,
            )
            yield
        finally:
            self._running.set()

    def _busy(self, worker: Worker) -> None:
        try:
            worker.step()
        except HubUnreachable as exc:
            self.report.tally.errors.append(f"{worker.user}: the hub did not come back: {exc}")
        except Exception as exc:  # a soak surprise is a finding, not the end of the run
            self.report.tally.errors.append(f"{worker.user}: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------------------ faults
    def _faults_on(self) -> None:
        rules = [
            {
                "error_rate": self.error_rate,
                "status_codes": [500, 429, 503, 504],
                "user_agent": UA_OF_PRODUCT,
            },
            {"verb": "watch", "watch_drop_rate": 0.05, "user_agent": UA_OF_PRODUCT},
        ]
        status, body = self.stack.devcluster.control(
            "/_devcluster/faults", {"seed": self.seed, "rules": rules}, "PUT"
        )
        assert status == 200, body

    def _count_requests(self) -> None:
        """Read and empty the request log (it is bounded): the product's requests and error answers.
        The records are kept in the stack's directory (``soak-requests.jsonl``) for a post-mortem."""
        records = self.stack.requests_log(clear=True)
        with (self.stack.log_dir / "soak-requests.jsonl").open("a") as out:
            out.writelines(json.dumps(r) + "\n" for r in records)
        for record in records:
            if record["user_agent"].startswith("OpenAPI-Generator"):
                self.report.product_requests += 1
                self.report.error_answers += record["status"] in (429, 500, 503, 504)

    # ------------------------------------------------------------------------------ events
    def _event(self, kind: str) -> None:
        self.report.chaos[kind] = self.report.chaos.get(kind, 0) + 1
        try:
            if kind == "hub-restart":
                began = time.monotonic()
                self.report.tally.hub_restarts.append((began, began + 3600))
                self.stack.restart_hub()
                self.report.tally.hub_restarts[-1] = (began, time.monotonic())
            elif kind == "service-restart":
                self._kill_service(SERVICES[self.report.chaos[kind] % len(SERVICES)])
            else:
                with self._paused():
                    self._node_failure()
        except Exception as exc:
            self.report.tally.errors.append(f"chaos {kind}: {type(exc).__name__}: {exc}")

    def _kill_service(self, name: str) -> None:
        """SIGKILL a managed service; JupyterHub notices the exit and starts it again."""
        found = self._service_pids(name)
        for pid in found:
            os.kill(pid, signal.SIGKILL)
        if not found:
            self.report.tally.errors.append(f"chaos service-restart: no {name} process found")
            return
        wait_for(lambda: set(self._service_pids(name)) - set(found), 60, f"JupyterHub to start {name} again")

    def _service_pids(self, name: str) -> list[int]:
        """The hub's children running ``gpuworkspace_spawner.services.<name>``."""
        hub = self.stack.hub.proc._popen
        argv = ["pgrep", "-P", str(hub.pid), "-f", f"gpuworkspace_spawner.services.{name}"] if hub else []
        out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout if argv else ""
        return [int(pid) for pid in out.split()]

    def _node_failure(self) -> None:
        """A node hosting a container workspace stops answering and its pods are force-deleted (what the
        pod GC or an impatient admin does). Starting that workspace elsewhere is refused until the
        runbook fences the node; then it starts on another node with its data; then the node is repaired."""
        pods = [
            p
            for p in get_json(self.stack, "pods", "-l", "gpuworkspace.dev/user")["items"]
            if p["spec"].get("nodeName")
            and "gpuworkspace.dev/vm" not in p["metadata"].get("labels", {})
            and not p["metadata"].get("deletionTimestamp")
        ]
        if not pods:
            self.report.chaos["node-failure-skipped"] = self.report.chaos.get("node-failure-skipped", 0) + 1
            return
        # a GPU workspace if there is one: the GPU pool has a second node to start it on once fenced
        pods.sort(key=lambda p: p["metadata"]["labels"].get("gpuworkspace.dev/profile") != "gpu-shared")
        node = pods[0]["spec"]["nodeName"]
        annotations = pods[0]["metadata"]["annotations"]
        user, name = annotations["gpuworkspace.dev/username"], annotations["gpuworkspace.dev/servername"]
        worker = next(w for w in self.workers if w.user == user)
        server = worker.servers[name]
        self._node_action(node, "not-ready")
        worker.began = time.monotonic()
        try:
            kubectl(self.stack, "wait", "--for=condition=Ready=Unknown", f"node/{node}", "--timeout=30s")
            for pod in pods:
                if pod["spec"]["nodeName"] == node:
                    kubectl(
                        self.stack, "delete", "pod", pod["metadata"]["name"], "--force", "--grace-period=0"
                    )
            worker.stop(server)  # the hub notices within a poll; the user or an admin may stop it first
            status, body = worker.api("POST", f"/users/{user}/servers/{name}", {"profile": server.profile})
            if status == 409 and "another node" in str(body):
                self.report.fencing_refusals += 1
            else:
                self.report.tally.errors.append(
                    f"node failure: a start of {user}/{name} answered {status} {body}"
                )
            wait_for(lambda: self._not_running(worker, name), 60, "the refused start to be cleaned up")
            fence(self.stack, node)
            worker.start(server)  # now it may start elsewhere, with its data (the marker is checked)
            self.report.tally.ops["start_after_fencing"] += 1
            self.report.tally.outcomes["start-after-fencing:" + ("ok" if server.running else "failed")] += 1
        finally:
            self._node_action(node, "recover")
            kubectl(self.stack, "delete", "networkfence", f"fence-{node}", "--ignore-not-found")
            kubectl(self.stack, "taint", "node", node, "node.kubernetes.io/out-of-service-", check=False)
            kubectl(self.stack, "wait", "--for=condition=Ready=True", f"node/{node}", "--timeout=60s")

            def untainted() -> bool:
                taints = get_json(self.stack, "node", node)["spec"].get("taints") or []
                return not [t for t in taints if t["key"].startswith("node.kubernetes.io/")]

            wait_for(untainted, 60, f"{node} to lose its unreachable taints")

    def _not_running(self, worker: Worker, server: str) -> bool:
        model = worker.hub_servers().get(server)
        return model is None or not (model.get("ready") or model.get("pending"))

    def _node_action(self, node: str, action: str) -> None:
        status, body = self.stack.devcluster.control(
            "/_devcluster/sim/node", {"node": node, "action": action}
        )
        assert status == 200, body


# ---------------------------------------------------------------------------------- the audit
def orphans(stack: HubStack, users: list[str]) -> tuple[list[str], list[str]]:
    """Compute objects no hub server accounts for, and hub servers with no compute object."""
    active: set[tuple[str, str]] = set()
    for user in users:
        status, model = stack.hub.api("GET", f"/users/{user}")
        for name, server in ((model or {}).get("servers") or {}).items() if status == 200 else ():
            if server.get("ready") or server.get("pending"):
                active.add((user, name))
    compute: dict[tuple[str, str], str] = {}
    for kind in ("pods", "vmi"):
        for item in get_json(stack, kind, "-l", "gpuworkspace.dev/user")["items"]:
            meta = item["metadata"]
            annotations = meta.get("annotations") or {}
            if meta.get("deletionTimestamp") or "gpuworkspace.dev/username" not in annotations:
                continue
            key = (annotations["gpuworkspace.dev/username"], annotations["gpuworkspace.dev/servername"])
            compute[key] = f"{kind}/{meta['name']}"
    for vm in get_json(stack, "vm", "-l", "gpuworkspace.dev/user")["items"]:
        annotations = vm["metadata"].get("annotations") or {}
        if vm["spec"].get("runStrategy") != "Halted" and "gpuworkspace.dev/username" in annotations:
            key = (annotations["gpuworkspace.dev/username"], annotations["gpuworkspace.dev/servername"])
            compute.setdefault(
                key, f"vm/{vm['metadata']['name']} (runStrategy {vm['spec'].get('runStrategy')})"
            )
    orphaned = sorted(f"{obj} of {u}/{s}" for (u, s), obj in compute.items() if (u, s) not in active)
    ghosts = sorted(f"{u}/{s}" for (u, s) in active if (u, s) not in compute)
    return orphaned, ghosts


def disks_now(stack: HubStack) -> dict[str, str]:
    """Every workspace claim now: name → uid."""
    return {c["metadata"]["name"]: c["metadata"]["uid"] for c in get_json(stack, "pvc")["items"]}


def describe(report: Report, extra: dict[str, Any]) -> str:
    tally = report.tally
    lines = [
        f"chaos soak: {sum(tally.ops.values())} operations in {report.seconds:.0f} s",
        f"  operations: {dict(sorted(tally.ops.items()))}",
        f"  outcomes:   {dict(sorted(tally.outcomes.items()))}",
        f"  chaos:      {report.chaos}; fencing refusals {report.fencing_refusals}",
        f"  API faults: {report.error_answers} of the hub's and services' {report.product_requests} "
        f"requests answered 429/5xx ({100 * report.error_answers / max(1, report.product_requests):.1f} %)",
        *(f"  {k}: {v}" for k, v in extra.items()),
        f"  failed spawns: {len(tally.failed_spawns)} (without a reason: {len(tally.unexplained_failures)}); "
        f"operations cut short by a hub restart: {len(tally.interrupted)}",
        *(f"    {i}" for i in tally.interrupted[:20]),
        *(f"    {f}" for f in tally.failed_spawns[:40]),
        f"  soak surprises: {len(tally.errors)}",
        *(f"    {e}" for e in tally.errors[:40]),
    ]
    return "\n".join(lines)


__all__ = ["NS", "Conductor", "Limits", "Report", "describe", "disks_now", "orphans"]
