"""The simulated kubelet: one per node, running the pods bound to it as local processes.

``Kubelet(ctx, node_name, ip_octet)`` watches pods with ``spec.nodeName == node_name`` and runs a
:class:`~.podworker.PodWorker` per pod (admission, volumes, images, processes, probes, status, graceful
deletion). It owns the node's pod IPs (``127.<ip_octet>.x.y``, the node's range in its devcluster instance,
addresses.py; persisted in ``sim/kubelet-<node>.json`` with
the node's image cache, so a restart never hands out a live IP), renews the node's Lease
(``kube-node-lease/<node>``) and re-posts the Node's conditions. It registers itself as
``ctx.components["kubelet:<node>"]``.

Wiring (the DevCluster's job): start it after the API emulator, add ``node_name`` to
``Controllers.kubelet_nodes`` (or pass ``register=controllers.kubelet_nodes.add``) so terminating pods wait
for it, and stop it before the store closes. After a DevCluster restart it treats containers it finds
"running" in the stored status as lost by a node reboot: they count as exits (255, ``Unknown``) and are
restarted under restartPolicy, restartCount+1, same pod IP.

Failure injection: ``stop_heartbeats()`` cuts the node off (no Lease renewals, no Node or pod status, no
reaction to API changes; the processes keep running as unreachable orphans); ``resume()`` reconnects and
catches up. ``kill_pod(ns, name, sig)`` signals a pod's containers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from ..errors import ApiError
from ..podio import ExecContext, LocalDirRuntime
from ..store import Obj, TypeKey
from ..verbs import now_rfc3339
from . import csi, eviction, mountns, podenv
from .base import Key, SimController, rt_of
from .context import SimContext
from .events import record_event
from .lite_pool import LitePool
from .podlaunch import HostInfo
from .podvolumes import PodVolumes
from .podworker import PodWorker
from .procs import ContainerProcess, kill_marked
from .tokenmanager import TokenManager

log = logging.getLogger(__name__)
PODS, NODES, LEASES = rt_of("", "pods"), rt_of("", "nodes"), rt_of("coordination.k8s.io", "leases")
SECRETS, CONFIGMAPS = rt_of("", "secrets"), rt_of("", "configmaps")
VAS = rt_of("storage.k8s.io", "volumeattachments")
LEASE_NAMESPACE = "kube-node-lease"
_IPS_PER_BLOCK = 254  # x.1 … x.254 per third octet
_NODE_CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)


@dataclass
class KubeletConfig:
    """Timings: the real kubelet's by default, except where a faster dev loop matters (noted)."""

    pull_delay_s: float = 0.2  # every pull takes this long (real: network-bound)
    slow_pulls: dict[str, float] = field(default_factory=dict)  # image prefix → extra pull seconds
    backoff_base_s: float = 10.0  # CrashLoopBackOff and ImagePullBackOff: 10 s doubling…
    backoff_max_s: float = 300.0  # …to 5 min
    backoff_reset_s: float = 600.0  # a container that ran this long starts its back-off over
    lease_interval_s: float = 10.0
    lease_duration_s: int = 40
    node_status_interval_s: float = 60.0  # real: 5 min unless something changed
    probe_period_cap_s: float | None = 2.0  # probes run at least this often (real: periodSeconds)
    volume_retry_s: float = 2.0  # retry of a volume or container config that is not ready
    mount_timeout_s: float = 120.0  # then a FailedMount "timed out waiting for the condition"
    register_node: bool = False  # create a minimal Node when none exists (the topology usually does)
    lite_pool: bool = True  # lite-singleuser servers share one process per node (sim/lite_pool.py)
    eviction_interval_s: float = 10.0  # the eviction manager's monitoring period (sim/eviction.py)


def micro_time() -> str:
    """A ``MicroTime`` (what Lease.renewTime carries)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _bin_dir() -> str:
    here = Path(sys.executable).parent
    if (here / "jupyterhub-singleuser").exists():
        return str(here)
    found = shutil.which("jupyterhub-singleuser")
    return str(Path(found).parent) if found else str(here)


class Kubelet(SimController):
    watches = (PODS.key, VAS.key, CONFIGMAPS.key, SECRETS.key)

    def __init__(
        self,
        ctx: SimContext,
        node_name: str,
        ip_octet: int,
        config: KubeletConfig | None = None,
        *,
        register: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(ctx.verbs)
        self.ctx, self.node, self.ip_octet = ctx, node_name, ip_octet
        self.name = f"kubelet-{node_name}"
        self.node_ip = f"127.{ip_octet}.0.1"
        self.config = config or KubeletConfig()
        as_root = os.geteuid() == 0
        self.volumes = PodVolumes(self.store, ctx.state_dir, node_name, self._volume_dir, as_root=as_root)
        self.tokens = TokenManager(self.store, lambda: self.verbs.tokens)
        namespaces, why = mountns.available(sys.executable)
        if not namespaces:
            log.warning(
                "devcluster %s: containers run without mount namespaces (%s): volumes are not at their "
                "mountPaths, a process sees host directories passed by option",
                self.name,
                why,
            )
        self.host = HostInfo(sys.executable, _bin_dir(), as_root, os.path.exists, namespaces)
        self.isolated = False
        self.workers: dict[tuple[str, str], PodWorker] = {}
        log_path = ctx.path("sim", f"lite-pool-{node_name}.log")
        self.lite_pool = LitePool(sys.executable, node_name, log_path) if self.config.lite_pool else None
        self._register = register
        self._state_file = ctx.path("sim", f"kubelet-{node_name}.json")
        self._ips: dict[str, str] = {}
        self._cursor = 0
        self._images: set[str] = set()
        self._deferred: set[Key] = set()
        self._heartbeat: asyncio.Task[None] | None = None
        ctx.components[f"kubelet:{node_name}"] = self

    @property
    def devices(self) -> Any:
        return self.ctx.devices

    # --------------------------------------------------------------- wiring
    async def start(self) -> None:
        if self._register is not None:
            self._register(self.node)
        self._load_state()
        mine = [p for p in self.store.items(PODS) if (p.get("spec") or {}).get("nodeName") == self.node]
        live = {p["metadata"]["uid"] for p in mine}
        mine_prefix = f"127.{self.ip_octet}."  # a state dir reused by another instance: its IPs are gone
        self._ips = {uid: ip for uid, ip in self._ips.items() if uid in live and ip.startswith(mine_prefix)}
        for pod in mine:
            ip = (pod.get("status") or {}).get("podIP")
            if ip and ip != self.node_ip and ip.startswith(mine_prefix):
                self._ips.setdefault(pod["metadata"]["uid"], ip)
        # processes left by a devcluster that died without stopping them: a node reboot ends them, and
        # empties the pods' memory-backed volumes (remounted when their pods start again)
        kill_marked(_container_ids(mine))
        for pod in mine:
            self.volumes.unmount_memory(pod)
        if self.devices is not None and hasattr(self.devices, "prune"):
            self.devices.prune(p["metadata"]["uid"] for p in self.store.items(PODS))
        self._save_state()
        await super().start()
        self._heartbeat = asyncio.create_task(self._heartbeats(), name=f"{self.name}-heartbeat")

    async def stop(self) -> None:
        """Stop watching and end every process of every pod (writes nothing: the API may be going away)."""
        await super().stop()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
        workers = list(self.workers.values())
        for worker in workers:
            worker.kill_now()
        await asyncio.gather(
            *(w.task for w in workers), *(t for w in workers for t in w.tasks), return_exceptions=True
        )
        for worker in workers:  # no tmpfs left mounted on the host once the node is down
            self.volumes.unmount_memory(worker.last_pod)
        if self.lite_pool is not None:
            self.lite_pool.close()
        self._save_state()

    def keys_for(self, key: TypeKey, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if key in (CONFIGMAPS.key, SECRETS.key):  # the volumes of running pods follow their sources
            ns = obj["metadata"].get("namespace", "")
            if obj.get("immutable") and old is not None:
                return []
            return [(PODS.key, w.ns, w.name) for w in self.workers.values() if w.ns == ns and w.sandbox]
        if key == VAS.key:
            if (obj.get("spec") or {}).get("nodeName") != self.node:
                return []
            return [(PODS.key, w.ns, w.name) for w in self.workers.values() if w.waiting_attach]
        nodes = {(obj.get("spec") or {}).get("nodeName"), ((old or {}).get("spec") or {}).get("nodeName")}
        if self.node not in nodes:
            return []
        meta = obj["metadata"]
        return [(key, meta.get("namespace", ""), meta["name"])]

    async def reconcile(self, target: Key) -> None:
        if target[0] != PODS.key:
            return
        if self.isolated:
            self._deferred.add(target)
            return
        _, ns, name = target
        pod = self.get(target)
        if pod is not None and (pod.get("spec") or {}).get("nodeName") != self.node:
            pod = None
        worker = self.workers.get((ns, name))
        if worker is not None:
            worker.wake()  # it re-reads the pod; a vanished or replaced pod gets terminated
            if pod is None or pod["metadata"]["uid"] == worker.uid:
                return
        if pod is not None:
            previous = worker.task if worker is not None else None
            self.workers[(ns, name)] = PodWorker(self, pod, previous)

    # ------------------------------------------------- what pod workers use
    def current_pod(self, namespace: str, name: str, uid: str) -> Obj | None:
        pod = self.store.get(PODS, namespace, name)
        if (
            pod is None
            or pod["metadata"].get("uid") != uid
            or (pod.get("spec") or {}).get("nodeName") != self.node
        ):
            return None
        return pod

    def record(self, pod: Obj, event_type: str, reason: str, message: str) -> None:
        if self.isolated:
            return
        try:
            record_event(self.verbs, pod, event_type, reason, message, component="kubelet", host=self.node)
        except ApiError as exc:  # e.g. its namespace is terminating
            log.debug("devcluster %s: event %s not recorded: %s", self.name, reason, exc.message)

    def write_status(self, pod: Obj, status: Obj) -> bool:
        if self.isolated:
            return False
        meta = pod["metadata"]
        fresh = self.current_pod(meta.get("namespace", ""), meta["name"], meta["uid"])
        if fresh is None:
            return False
        try:
            self.verbs.update(
                PODS,
                meta.get("namespace", ""),
                meta["name"],
                {**fresh, "status": status},
                subresource="status",
            )
        except ApiError as exc:
            log.debug("devcluster %s: status of %s not written: %s", self.name, meta["name"], exc.message)
            return False
        return True

    def delete_pod(self, pod: Obj) -> None:
        """What the kubelet sends once the containers are gone: a delete with grace 0 (finalizers still hold)."""
        meta = pod["metadata"]
        options = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        with contextlib.suppress(ApiError):
            self.verbs.delete(PODS, meta.get("namespace", ""), meta["name"], options)

    def env_sources(self) -> podenv.EnvSources:
        node = self.store.get(NODES, "", self.node) or {}
        cluster = self.ctx.cluster  # the API server pods reach (None: a bare API emulator in tests)
        return podenv.EnvSources(
            secret=lambda ns, n: self.store.get(SECRETS, ns, n),
            config_map=lambda ns, n: self.store.get(CONFIGMAPS, ns, n),
            node_allocatable=(node.get("status") or {}).get("allocatable") or {},
            token=self.tokens.token,
            service_env=podenv.master_service_env(cluster.host, cluster.port) if cluster is not None else {},
        )

    def allocate_ip(self, uid: str) -> str:
        if uid in self._ips:
            return self._ips[uid]
        used = set(self._ips.values())
        for _ in range(256 * _IPS_PER_BLOCK):
            self._cursor = self._cursor % (256 * _IPS_PER_BLOCK - 1) + 1
            block, host = divmod(self._cursor, _IPS_PER_BLOCK)
            ip = f"127.{self.ip_octet}.{block}.{host + 1}"
            if ip != self.node_ip and ip not in used:
                self._ips[uid] = ip
                self._save_state()
                return ip
        raise RuntimeError(f"{self.node}: no pod IPs left")

    def release_ip(self, uid: str) -> None:
        self.tokens.forget(uid)  # the pod is gone: so are its cached tokens
        if self._ips.pop(uid, None) is not None:
            self._save_state()

    def pulled(self, ref: str) -> bool:
        return ref in self._images

    def mark_pulled(self, ref: str) -> None:
        if ref not in self._images:
            self._images.add(ref)
            self._save_state()

    def pull_delay(self, image: str) -> float:
        extra = [s for p, s in self.config.slow_pulls.items() if image.startswith(p)]
        faults = self.ctx.components.get("faults")
        delay_of = getattr(faults, "pull_delay", None)  # failures.SimFaults' slow-pull knob
        injected = delay_of(image) if callable(delay_of) else 0.0
        return self.config.pull_delay_s + (max(extra) if extra else 0.0) + float(injected)

    def set_pull_delay(self, image_prefix: str, seconds: float) -> None:
        """Failure injection: pulls of images starting with ``image_prefix`` take ``seconds`` longer."""
        if seconds:
            self.config.slow_pulls[image_prefix] = seconds
        else:
            self.config.slow_pulls.pop(image_prefix, None)

    def write_log(self, pod: Obj, container: str, text: str) -> None:
        meta = pod["metadata"]
        self.ctx.pod_runtime.write_log(meta.get("namespace", ""), meta["name"], container, text)

    def rotate_log(self, pod: Obj, container: str) -> None:
        meta, runtime = pod["metadata"], self.ctx.pod_runtime
        current = runtime.log_file(meta.get("namespace", ""), meta["name"], container)
        if current.exists():
            current.replace(
                runtime.log_file(meta.get("namespace", ""), meta["name"], container, previous=True)
            )

    def worker_done(self, worker: PodWorker) -> None:
        if self.workers.get((worker.ns, worker.name)) is worker:
            del self.workers[(worker.ns, worker.name)]

    def _volume_dir(self, handle: str) -> Path:
        return csi.volume_dir(self.ctx, handle)

    # ------------------------------------------------------------- controls
    def kill_pod(self, namespace: str, name: str, sig: int, *, oom: bool = False) -> int:
        worker = self.workers.get((namespace, name))
        return worker.signal_all(sig, oom=oom) if worker is not None else 0

    def container_pids(self, namespace: str, name: str) -> dict[str, int]:
        worker = self.workers.get((namespace, name))
        if worker is None:
            return {}
        return {c: p.pid for c, p in worker.procs.items() if p.running}

    def exec_context(self, pod: Obj, container: str) -> ExecContext | None:
        """Where ``kubectl exec`` runs: the container's own cwd and environment (None unless running)."""
        worker = self.workers.get((pod["metadata"].get("namespace", ""), pod["metadata"]["name"]))
        proc = worker.procs.get(container) if worker is not None else None
        if proc is None or not proc.running or worker is None or worker.uid != pod["metadata"].get("uid"):
            return None
        prefix = proc.enter_prefix() if isinstance(proc, ContainerProcess) else []
        if prefix:  # inside the container's mount namespace, in its working dir
            return ExecContext(Path("/"), dict(proc.env), tuple(prefix), Path(f"/proc/{proc.pid}/root"))
        return ExecContext(proc.cwd, dict(proc.env))

    def stop_heartbeats(self) -> None:
        """Cut the node off the API: no heartbeats, no status, no reaction to changes; pods keep running."""
        self.isolated = True

    def resume(self) -> None:
        """Reconnect: post the node's status, then catch up with every change missed meanwhile."""
        if not self.isolated:
            return
        self.isolated = False
        self._beat(force_status=True)
        for pod in self.store.items(PODS):
            if (pod.get("spec") or {}).get("nodeName") == self.node:
                self._put((PODS.key, pod["metadata"].get("namespace", ""), pod["metadata"]["name"]))
        for target in self._deferred:
            self._put(target)
        self._deferred.clear()
        for worker in list(self.workers.values()):
            worker._written = None  # re-post: the node controller may have changed conditions meanwhile
            worker.wake()

    # ----------------------------------------------------------- heartbeats
    async def _heartbeats(self) -> None:
        next_eviction_check = time.monotonic() + self.config.eviction_interval_s
        while True:
            if not self.isolated:
                self._beat(force_status=False)
                if time.monotonic() >= next_eviction_check:
                    try:
                        await self._check_evictions()
                    except Exception:  # the heartbeat must go on
                        log.exception("devcluster %s: eviction check failed", self.name)
                    next_eviction_check = time.monotonic() + self.config.eviction_interval_s
            await asyncio.sleep(min(self.config.lease_interval_s, self.config.eviction_interval_s))

    async def _check_evictions(self) -> None:
        """The eviction manager's ``synchronize``, for emptyDir ``sizeLimit`` (sim/eviction.py)."""
        for worker in list(self.workers.values()):
            pod = worker.last_pod
            if not worker.sandbox or worker.terminal or worker.terminating or worker.evicted:
                continue
            message = await eviction.emptydir_message(pod, self.volumes.pod_dir(pod) / "volumes")
            if message is not None:
                log.info("devcluster %s: evicting %s/%s: %s", self.name, worker.ns, worker.name, message)
                worker.evict(message)

    _next_status = 0.0

    def _beat(self, *, force_status: bool) -> None:
        try:
            self._renew_lease()
            if force_status or time.monotonic() >= self._next_status:
                self._post_node_status()
                self._next_status = time.monotonic() + self.config.node_status_interval_s
        except ApiError as exc:
            log.warning("devcluster %s: heartbeat failed: %s", self.name, exc.message)

    def _renew_lease(self) -> None:
        lease = self.store.get(LEASES, LEASE_NAMESPACE, self.node)
        now = micro_time()
        if lease is not None:
            spec = {**(lease.get("spec") or {}), "holderIdentity": self.node, "renewTime": now}
            self.verbs.update(LEASES, LEASE_NAMESPACE, self.node, {**lease, "spec": spec})
            return
        node = self.store.get(NODES, "", self.node)
        owner = (
            [{"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": node["metadata"]["uid"]}]
            if node
            else []
        )
        body = {
            "metadata": {"name": self.node, **({"ownerReferences": owner} if owner else {})},
            "spec": {
                "holderIdentity": self.node,
                "leaseDurationSeconds": self.config.lease_duration_s,
                "acquireTime": now,
                "renewTime": now,
            },
        }
        self.verbs.create(LEASES, LEASE_NAMESPACE, body)

    def _post_node_status(self) -> None:
        node = self.store.get(NODES, "", self.node)
        if node is None:
            if not self.config.register_node:
                return
            labels = {
                "kubernetes.io/hostname": self.node,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            }
            node, _ = self.verbs.create(NODES, "", {"metadata": {"name": self.node, "labels": labels}})
        status = dict(node.get("status") or {})
        now = now_rfc3339()
        previous = {c.get("type"): c for c in status.get("conditions") or []}
        conditions = []
        for kind, value, reason, message in _NODE_CONDITIONS:
            prev = previous.get(kind) or {}
            since = prev.get("lastTransitionTime") if prev.get("status") == value else now
            conditions.append(
                {
                    "type": kind,
                    "status": value,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": since or now,
                    "reason": reason,
                    "message": message,
                }
            )
        kinds = {c[0] for c in _NODE_CONDITIONS}
        status["conditions"] = [
            c for c in status.get("conditions") or [] if c.get("type") not in kinds
        ] + conditions
        if not status.get("addresses"):
            status["addresses"] = [
                {"type": "InternalIP", "address": self.node_ip},
                {"type": "Hostname", "address": self.node},
            ]
        self.verbs.update(NODES, "", self.node, {**node, "status": status}, subresource="status")

    # ---------------------------------------------------------- persistence
    def _load_state(self) -> None:
        try:
            data = orjson.loads(self._state_file.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return
        self._ips = dict(data.get("ips") or {})
        self._cursor = int(data.get("cursor") or 0)
        self._images = set(data.get("images") or [])

    def _save_state(self) -> None:
        self._state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._state_file.with_suffix(".tmp")
        data = {"ips": self._ips, "cursor": self._cursor, "images": sorted(self._images)}
        tmp.write_bytes(orjson.dumps(data))
        tmp.replace(self._state_file)


def _container_ids(pods: Iterable[Obj]) -> set[str]:
    out = set()
    for pod in pods:
        status = pod.get("status") or {}
        for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
            if cs.get("containerID"):
                out.add(cs["containerID"].split("://", 1)[-1])
    return out


class KubeletRuntime(LocalDirRuntime):
    """podio's runtime with exec delegated to the pod's kubelet (its env, mounts and cwd).

    Wire with ``cluster.api.pod_io.runtime = KubeletRuntime(ctx)``; pods on nodes without a kubelet fall
    back to :class:`LocalDirRuntime`'s literal-env exec.
    """

    def __init__(self, ctx: SimContext) -> None:
        super().__init__(ctx.pod_runtime.state_dir)
        self.ctx = ctx

    def exec_context(self, pod: Obj, container: str) -> ExecContext | None:
        kubelet = self.ctx.components.get(f"kubelet:{(pod.get('spec') or {}).get('nodeName', '')}")
        if isinstance(kubelet, Kubelet):
            return kubelet.exec_context(pod, container)
        return super().exec_context(pod, container)
