"""Failure injection: what the node lifecycle, taint-eviction and pod GC controllers do on a node failure,
plus fault knobs the other components read (``ctx.components["faults"]``, a :class:`SimFaults`).

- :func:`node_not_ready`: the kubelet stops posting; after the grace period (here: at once) the node
  lifecycle controller sets every node condition to ``Unknown``/``NodeStatusUnknown``, swaps in the
  ``node.kubernetes.io/unreachable`` taints and marks the node's pods not ready. The pods' processes keep
  running (unreachable orphans): nothing stops them but fencing.
- :func:`add_out_of_service_taint`: ``node.kubernetes.io/out-of-service=nodeshutdown:NoExecute``. Taint
  eviction deletes the pods that do not tolerate it; on a node that is not Ready the pod GC controller
  then marks them Failed and force-deletes them (the attach/detach controller, in ``sim.csi``, detaches
  their volumes because the taint is present). :class:`OutOfServiceController` does the same for a taint
  added by any client (``kubectl taint node X node.kubernetes.io/out-of-service=nodeshutdown:NoExecute``).
- :func:`refresh_fenced_nodes` (NetworkFence): a node that becomes fenced has its pods' processes killed
  (:func:`stop_fenced_processes`), as a blocklisted RBD client's I/O fails; restartPolicy still applies.
- :class:`SimFaults`: slow image pulls by image prefix, slow volume operations, the Ceph blocklist
  (NetworkFence), unreachable nodes and XID errors; components ``subscribe`` to be told of changes.

Timing differs from a real cluster: the node controller's grace period (40-50 s) and taint eviction's
default toleration are not waited for; the injected state is the one those controllers reach.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..store import Obj
from ..verbs import clone, now_rfc3339
from . import csi
from .base import Key, SimController, rt_of
from .context import SimContext
from .events import record_event
from .topology import ready_conditions

log = logging.getLogger(__name__)
NODES, PODS = rt_of("", "nodes"), rt_of("", "pods")
PVCS, PVS = rt_of("", "persistentvolumeclaims"), rt_of("", "persistentvolumes")
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
NODE_CONTROLLER = "node-controller"
STATUS_UNKNOWN = ("NodeStatusUnknown", "Kubelet stopped posting node status.")
_TERMINAL = ("Succeeded", "Failed")


class FaultError(ValueError):
    """A bad fault setting; ``field`` names the key."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


@dataclass
class SimFaults:
    """Fault knobs shared by the components (``faults_of(ctx)``)."""

    slow_pull_s: dict[str, float] = field(default_factory=dict)  # image prefix -> extra pull seconds
    slow_disk_s: float = 0.0  # extra seconds per volume operation (provision, attach, mount, clone)
    blocklist: set[str] = field(default_factory=set)  # fenced CIDRs (Ceph OSD blocklist ranges)
    fenced_nodes: set[str] = field(default_factory=set)  # nodes whose InternalIP is blocklisted
    unreachable_nodes: set[str] = field(default_factory=set)  # kubelet stopped posting
    xid_errors: dict[str, int] = field(default_factory=dict)  # GPU uuid -> last XID
    _listeners: list[Callable[[SimFaults], None]] = field(default_factory=list, repr=False)

    def pull_delay(self, image: str) -> float:
        """Extra seconds for pulling ``image``: the longest matching prefix wins."""
        matches = [p for p in self.slow_pull_s if image.startswith(p)]
        return self.slow_pull_s[max(matches, key=len)] if matches else 0.0

    def subscribe(self, listener: Callable[[SimFaults], None]) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[SimFaults], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def changed(self) -> None:
        for listener in list(self._listeners):
            try:
                listener(self)
            except Exception:
                log.exception("devcluster faults: a listener failed")

    def to_json(self) -> dict[str, Any]:
        return {
            "slow_pull_s": dict(self.slow_pull_s),
            "slow_disk_s": self.slow_disk_s,
            "blocklist": sorted(self.blocklist),
            "fenced_nodes": sorted(self.fenced_nodes),
            "unreachable_nodes": sorted(self.unreachable_nodes),
            "xid_errors": dict(self.xid_errors),
        }

    def update_from_json(self, body: Mapping[str, Any]) -> None:
        """Apply the settable knobs present in ``body`` (validated first: all or nothing)."""
        if not isinstance(body, Mapping):
            raise FaultError("body", "must be a JSON object")
        unknown = set(body) - {"slow_pull_s", "slow_disk_s", "xid_errors"}
        if unknown:
            raise FaultError(
                sorted(unknown)[0], "unknown field (settable: slow_pull_s, slow_disk_s, xid_errors)"
            )
        pulls = self.slow_pull_s
        if "slow_pull_s" in body:
            raw = body["slow_pull_s"]
            if not isinstance(raw, Mapping):
                raise FaultError("slow_pull_s", "must be an object of image prefix -> seconds")
            pulls = {str(k): _seconds(f"slow_pull_s[{k!r}]", v) for k, v in raw.items()}
        disk = _seconds("slow_disk_s", body["slow_disk_s"]) if "slow_disk_s" in body else self.slow_disk_s
        xids = self.xid_errors
        if "xid_errors" in body:
            raw = body["xid_errors"]
            if not isinstance(raw, Mapping) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in raw.values()
            ):
                raise FaultError("xid_errors", "must be an object of GPU UUID -> XID number")
            xids = {str(k): int(v) for k, v in raw.items()}
        self.slow_pull_s, self.slow_disk_s, self.xid_errors = pulls, disk, xids
        self.changed()

    def clear(self) -> None:
        """Reset the settable knobs (fences and node state are undone by their own operations)."""
        self.slow_pull_s, self.slow_disk_s, self.xid_errors = {}, 0.0, {}
        self.changed()


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise FaultError(name, f"must be a number of seconds >= 0, not {value!r}")
    return float(value)


def faults_of(ctx: SimContext) -> SimFaults:
    faults = ctx.components.get("faults")
    if not isinstance(faults, SimFaults):
        faults = ctx.components["faults"] = SimFaults()
    return faults


def slow_image_pull(ctx: SimContext, image_prefix: str, seconds: float) -> None:
    faults = faults_of(ctx)
    if seconds:
        faults.slow_pull_s[image_prefix] = _seconds("seconds", seconds)
    else:
        faults.slow_pull_s.pop(image_prefix, None)
    faults.changed()


def slow_disk(ctx: SimContext, seconds: float) -> None:
    faults = faults_of(ctx)
    faults.slow_disk_s = _seconds("seconds", seconds)
    faults.changed()


# ----------------------------------------------------------------- node helpers
def node_ip(node: Obj | None) -> str | None:
    for addr in (node or {}).get("status", {}).get("addresses") or []:
        if addr.get("type") == "InternalIP":
            return str(addr.get("address"))
    return None


def node_ready(node: Obj) -> bool:
    conds = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def blocklisted(ip: str | None, cidrs: Iterable[str]) -> bool:
    if not ip:
        return False
    addr = ipaddress.ip_address(ip)
    return any(addr in ipaddress.ip_network(c, strict=False) for c in cidrs)


def refresh_fenced_nodes(ctx: SimContext) -> set[str]:
    """Recompute which nodes the blocklist covers; tell subscribers when that changes."""
    faults = faults_of(ctx)
    fenced = {
        n["metadata"]["name"]
        for n in ctx.verbs.store.items(NODES)
        if blocklisted(node_ip(n), faults.blocklist)
    }
    if fenced != faults.fenced_nodes:
        newly = fenced - faults.fenced_nodes
        faults.fenced_nodes = fenced
        faults.changed()
        for node in sorted(newly):
            stop_fenced_processes(ctx, node)
    return fenced


def stop_fenced_processes(ctx: SimContext, node: str) -> int:
    """A blocklisted node's RBD/CephFS I/O fails, so its pods' processes die (SIGKILL to every container the
    node's kubelet runs, also the pods already force-deleted from the API); returns how many were signalled."""
    kubelet = _kubelet(ctx, node)
    workers = getattr(kubelet, "workers", None) or {}
    return sum(int(kubelet.kill_pod(ns, name, signal.SIGKILL)) for ns, name in list(workers))


def pods_on(ctx: SimContext, node: str) -> list[Obj]:
    return [p for p in ctx.verbs.store.items(PODS) if p.get("spec", {}).get("nodeName") == node]


def _kubelet(ctx: SimContext, node: str) -> Any:
    return ctx.components.get(f"kubelet:{node}")


def _get_node(ctx: SimContext, node: str) -> Obj:
    return ctx.verbs.get(NODES, "", node)  # raises NotFound for an unknown node


def _set_taints(ctx: SimContext, node: Obj, taints: list[Obj]) -> Obj:
    if taints == (node.get("spec", {}).get("taints") or []):
        return node
    new = clone(node)
    new.setdefault("spec", {})["taints"] = taints or None
    if not taints:
        new["spec"].pop("taints")
    return ctx.verbs.update(NODES, "", node["metadata"]["name"], new)[0]


def _set_conditions(ctx: SimContext, node: Obj, wanted: Mapping[str, tuple[str, str, str]]) -> Obj:
    """Set condition type -> (status, reason, message); keeps heartbeats, moves transition times."""
    now = now_rfc3339()
    conds = [dict(c) for c in node.get("status", {}).get("conditions") or []]
    for ctype, (status, reason, message) in wanted.items():
        cond = next((c for c in conds if c.get("type") == ctype), None)
        if cond is None:
            cond = {"type": ctype, "lastHeartbeatTime": now}
            conds.append(cond)
        if cond.get("status") != status:
            cond["lastTransitionTime"] = now
        cond.update(status=status, reason=reason, message=message)
    if conds == (node.get("status", {}).get("conditions") or []):
        return node
    new = clone(node)
    new.setdefault("status", {})["conditions"] = conds
    return ctx.verbs.update(NODES, "", node["metadata"]["name"], new, subresource="status")[0]


def _set_pod_ready(ctx: SimContext, pod: Obj, ready: bool) -> bool:
    conds = [dict(c) for c in pod.get("status", {}).get("conditions") or []]
    cond = next((c for c in conds if c.get("type") == "Ready"), None)
    want = "True" if ready else "False"
    if cond is None or cond.get("status") == want:
        return False
    cond.update(status=want, lastTransitionTime=now_rfc3339())
    meta = pod["metadata"]
    ctx.verbs.patch(
        PODS,
        meta["namespace"],
        meta["name"],
        {"status": {"conditions": conds}},
        "application/merge-patch+json",
        subresource="status",
    )
    return True


# ------------------------------------------------------------------- node failure
def node_not_ready(ctx: SimContext, node: str) -> Obj:
    """The kubelet of ``node`` stops posting status; returns the Node as the node controller leaves it."""
    obj = _get_node(ctx, node)
    kubelet = _kubelet(ctx, node)
    if kubelet is not None and hasattr(kubelet, "stop_heartbeats"):
        kubelet.stop_heartbeats()
    faults = faults_of(ctx)
    faults.unreachable_nodes.add(node)
    faults.changed()
    was_ready = node_ready(obj)
    types = [c.get("type") for c in obj.get("status", {}).get("conditions") or []] or ["Ready"]
    obj = _set_conditions(ctx, obj, {t: ("Unknown", *STATUS_UNKNOWN) for t in types})
    now = now_rfc3339()
    taints = [t for t in obj.get("spec", {}).get("taints") or [] if t.get("key") != NOT_READY]
    if not any(t.get("key") == UNREACHABLE and t.get("effect") == "NoSchedule" for t in taints):
        taints.append({"key": UNREACHABLE, "effect": "NoSchedule"})
    if not any(t.get("key") == UNREACHABLE and t.get("effect") == "NoExecute" for t in taints):
        taints.append({"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": now})
    obj = _set_taints(ctx, obj, taints)
    if was_ready:
        record_event(
            ctx.verbs,
            obj,
            "Normal",
            "NodeNotReady",
            f"Node {node} status is now: NodeNotReady",
            component=NODE_CONTROLLER,
        )
    for pod in pods_on(ctx, node):
        if pod.get("status", {}).get("phase") not in _TERMINAL and _set_pod_ready(ctx, pod, False):
            record_event(
                ctx.verbs, pod, "Warning", "NodeNotReady", "Node is not ready", component=NODE_CONTROLLER
            )
    gc_out_of_service(ctx, node)
    return obj


def node_recover(ctx: SimContext, node: str) -> Obj:
    """The kubelet posts again: conditions back to healthy, unreachable taints gone, pods ready again."""
    kubelet = _kubelet(ctx, node)
    if kubelet is not None and hasattr(kubelet, "resume"):
        kubelet.resume()
    obj = _get_node(ctx, node)  # after resume(): its first heartbeat may already have updated the Node
    faults = faults_of(ctx)
    faults.unreachable_nodes.discard(node)
    faults.changed()
    was_ready = node_ready(obj)
    healthy = {c["type"]: (c["status"], c["reason"], c["message"]) for c in ready_conditions(now_rfc3339())}
    obj = _set_conditions(ctx, obj, healthy)
    obj = _set_taints(
        ctx,
        obj,
        [t for t in obj.get("spec", {}).get("taints") or [] if t.get("key") not in (UNREACHABLE, NOT_READY)],
    )
    if not was_ready:
        record_event(
            ctx.verbs,
            obj,
            "Normal",
            "NodeReady",
            f"Node {node} status is now: NodeReady",
            component="kubelet",
            host=node,
        )
    for pod in pods_on(ctx, node):
        statuses = pod.get("status", {}).get("containerStatuses") or []
        if (
            statuses
            and all(s.get("ready") for s in statuses)
            and not pod["metadata"].get("deletionTimestamp")
        ):
            _set_pod_ready(ctx, pod, True)
    return obj


def _tolerates(pod: Obj, taint: Obj) -> bool:
    """The scheduler's ``ToleratesTaint``: effect, then key with Exists or key and value with Equal."""
    for tol in pod.get("spec", {}).get("tolerations") or []:
        if tol.get("effect") not in (None, "", taint["effect"]):
            continue
        if tol.get("key") not in (None, "", taint["key"]):
            continue
        if tol.get("operator") == "Exists" or (
            tol.get("key") and tol.get("value", "") == taint.get("value", "")
        ):
            return True
    return False


def add_out_of_service_taint(ctx: SimContext, node: str) -> list[str]:
    """Taint ``node`` out-of-service; returns the pods (``ns/name``) removed from the API."""
    obj = _get_node(ctx, node)
    taints = list(obj.get("spec", {}).get("taints") or [])
    taint = next((t for t in taints if t.get("key") == OUT_OF_SERVICE), None)
    if taint is None:
        taint = {
            "key": OUT_OF_SERVICE,
            "value": "nodeshutdown",
            "effect": "NoExecute",
            "timeAdded": now_rfc3339(),
        }
        _set_taints(ctx, obj, [*taints, taint])
    for pod in pods_on(ctx, node):
        meta = pod["metadata"]
        if meta.get("deletionTimestamp") or _tolerates(pod, taint):
            continue
        # taint eviction: DisruptionTarget, an event, then an ordinary (graceful) delete
        conds = [
            c for c in pod.get("status", {}).get("conditions") or [] if c.get("type") != "DisruptionTarget"
        ]
        conds.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "lastTransitionTime": now_rfc3339(),
                "reason": "DeletionByTaintManager",
                "message": "Taint manager: deleting due to NoExecute taint",
            }
        )
        ctx.verbs.patch(
            PODS,
            meta["namespace"],
            meta["name"],
            {"status": {"conditions": conds}},
            "application/merge-patch+json",
            subresource="status",
        )
        record_event(
            ctx.verbs,
            pod,
            "Normal",
            "TaintManagerEviction",
            f"Marking for deletion Pod {meta['namespace']}/{meta['name']}",
            component="taint-eviction-controller",
        )
        ctx.verbs.delete(PODS, meta["namespace"], meta["name"], {})
    return gc_out_of_service(ctx, node)


def gc_out_of_service(ctx: SimContext, node: str) -> list[str]:
    """Pod GC: on a not-Ready node with the out-of-service taint, fail and force-delete terminating pods."""
    obj = ctx.verbs.store.get(NODES, "", node)
    if obj is None or node_ready(obj):
        return []
    if not any(t.get("key") == OUT_OF_SERVICE for t in obj.get("spec", {}).get("taints") or []):
        return []
    removed = []
    for pod in pods_on(ctx, node):
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp"):
            continue
        ns, name = meta["namespace"], meta["name"]
        if pod.get("status", {}).get("phase") not in _TERMINAL:
            ctx.verbs.patch(
                PODS,
                ns,
                name,
                {"status": {"phase": "Failed"}},
                "application/merge-patch+json",
                subresource="status",
            )
        ctx.verbs.delete(PODS, ns, name, {"gracePeriodSeconds": 0})
        ctx.verbs.finish_deletion(PODS, ns, name)
        if ctx.verbs.store.get(PODS, ns, name) is None:
            removed.append(f"{ns}/{name}")
    return removed


class OutOfServiceController(SimController):
    """Taint eviction and pod GC for ``node.kubernetes.io/out-of-service`` however the taint got there
    (``kubectl taint``, a client, the control API): :func:`add_out_of_service_taint` on every change of a
    node that carries it (idempotent: pods already terminating are only force-deleted once it is not Ready)."""

    name = "out-of-service"
    watches = (NODES.key,)

    def __init__(self, ctx: SimContext) -> None:
        super().__init__(ctx.verbs)
        self.ctx = ctx

    async def reconcile(self, target: Key) -> None:
        node = self.get(target)
        taints = ((node or {}).get("spec") or {}).get("taints") or []
        if any(t.get("key") == OUT_OF_SERVICE and t.get("effect") == "NoExecute" for t in taints):
            add_out_of_service_taint(self.ctx, target[2])


def clear_out_of_service_taint(ctx: SimContext, node: str) -> Obj:
    obj = _get_node(ctx, node)
    return _set_taints(
        ctx, obj, [t for t in obj.get("spec", {}).get("taints") or [] if t.get("key") != OUT_OF_SERVICE]
    )


# ------------------------------------------------------------------ pods, volumes
def kill_pod_process(
    ctx: SimContext, namespace: str, name: str, sig: int = signal.SIGKILL, *, oom: bool = False
) -> int:
    """Signal a pod's container processes, as an OOM kill or a crash would; returns how many were signalled.

    Asks the pod's kubelet (``ctx.components["kubelet:<node>"]``): ``kill_pod(namespace, name, sig)`` when
    it has one, else the pids from ``container_pids(namespace, name)``.
    """
    pod = ctx.verbs.get(PODS, namespace, name)
    node = pod.get("spec", {}).get("nodeName")
    kubelet = _kubelet(ctx, node) if node else None
    if kubelet is None:
        return 0
    if hasattr(kubelet, "kill_pod"):
        return int(kubelet.kill_pod(namespace, name, sig, oom=oom))
    count = 0
    for pid in (
        kubelet.container_pids(namespace, name) if hasattr(kubelet, "container_pids") else {}
    ).values():
        try:
            os.kill(int(pid), sig)
            count += 1
        except ProcessLookupError:
            continue
    return count


def volume_handle(ctx: SimContext, namespace: str, pvc: str) -> str:
    """PVC -> bound PV -> ``spec.csi.volumeHandle`` (ValueError while unbound or not CSI)."""
    claim = ctx.verbs.get(PVCS, namespace, pvc)
    pv = ctx.verbs.store.get(PVS, "", claim.get("spec", {}).get("volumeName") or "")
    handle = ((pv or {}).get("spec", {}).get("csi") or {}).get("volumeHandle")
    if not handle:
        raise ValueError(f'persistentvolumeclaim "{pvc}" is not bound to a CSI volume')
    return str(handle)


def fill_volume(ctx: SimContext, namespace: str, pvc: str, leave_bytes: int = 0) -> int:
    """Bring the claim's volume to capacity (``sim.csi`` reports it full); returns the bytes added."""
    return csi.fill_volume(ctx, volume_handle(ctx, namespace, pvc), leave_bytes)


def unfill_volume(ctx: SimContext, namespace: str, pvc: str) -> None:
    csi.unfill_volume(ctx, volume_handle(ctx, namespace, pvc))
