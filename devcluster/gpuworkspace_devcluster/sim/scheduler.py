"""The simulated kube-scheduler: binds pending pods, or marks them Unschedulable with the real message.

Decisions come from :func:`placement.decide_placement` (pure); this controller gathers its inputs
(nodes, the pods holding resources per node, the state of the pod's claims), binds through
:func:`binding.bind_pod` and records the ``Scheduled`` / ``FailedScheduling`` events.
Like the real scheduling queue it retries an unschedulable pod when something it depends on
changes (a node, a pod freeing resources, a claim, a PV, a VolumeAttachment), no sooner than its
backoff (1 s doubling to 10 s), and at the latest after ``flush_after_s``.
WaitForFirstConsumer claims get ``volume.kubernetes.io/selected-node`` and the pod is bound once
they are (the CSI provisioner binds them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from ..binding import bind_pod
from ..store import Obj, TypeKey
from ..verbs import clone, now_rfc3339
from .base import Key, SimController, rt_of
from .context import SimContext
from .events import record_event
from .placement import (
    TERMINAL_PHASES,
    ClaimState,
    NodeFit,
    Placement,
    Resources,
    decide_placement,
    pod_requests,
)

__all__ = ["SCHEDULER_NAME", "ClaimState", "NodeFit", "Placement", "Scheduler", "decide_placement"]

SCHEDULER_NAME = "default-scheduler"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
PODS, NODES = ("", "pods"), ("", "nodes")
PVCS, PVS = ("", "persistentvolumeclaims"), ("", "persistentvolumes")
VOLUME_ATTACHMENTS, STORAGE_CLASSES = (
    ("storage.k8s.io", "volumeattachments"),
    ("storage.k8s.io", "storageclasses"),
)
INITIAL_BACKOFF_S, MAX_BACKOFF_S = 1.0, 10.0


def _pod_claims(pod: Obj) -> list[tuple[str, bool]]:
    """(claim name, from a generic ephemeral volume) for every claim the pod mounts."""
    out = []
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        if vol.get("persistentVolumeClaim"):
            out.append((vol["persistentVolumeClaim"].get("claimName", ""), False))
        elif vol.get("ephemeral"):
            out.append((f"{pod['metadata']['name']}-{vol.get('name')}", True))
    return out


def _node_signature(node: Obj) -> Any:
    """What in a Node can change a scheduling decision (heartbeats alone do not)."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    conds = sorted((c.get("type"), c.get("status")) for c in status.get("conditions") or [])
    return (
        node["metadata"].get("labels"),
        spec.get("taints"),
        spec.get("unschedulable"),
        status.get("allocatable"),
        conds,
    )


def _pod_signature(pod: Obj) -> Any:
    spec = {k: v for k, v in (pod.get("spec") or {}).items() if k != "nodeName"}
    return (spec, pod["metadata"].get("labels"), pod["metadata"].get("deletionTimestamp"))


class Scheduler(SimController):
    name = "scheduler"
    watches = (PODS, NODES, PVCS, PVS, VOLUME_ATTACHMENTS)

    def __init__(
        self, ctx: SimContext, *, scheduler_name: str = SCHEDULER_NAME, flush_after_s: float = 60.0
    ) -> None:
        super().__init__(ctx.verbs)
        self.ctx = ctx
        self.scheduler_name = scheduler_name
        self.flush_after_s = flush_after_s
        self._unscheduled: set[Key] = set()  # our pods waiting for a node
        self._on_node: dict[str, dict[Key, Obj]] = {}  # node → pods holding resources there
        self._node_of: dict[Key, str] = {}
        self._requests: dict[str, Resources] = {}  # pod uid → effective requests (immutable spec)
        self._attempts: dict[Key, int] = {}
        self._not_before: dict[Key, float] = {}  # backoff: loop time of the next allowed attempt
        self._timer_due: dict[Key, float] = {}

    # ------------------------------------------------------------ triggers
    def keys_for(self, key: TypeKey, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if key == PODS:
            return self._pod_changed(obj, old)
        gone = (
            self.store.get(rt_of(*key), obj["metadata"].get("namespace", ""), obj["metadata"]["name"]) is None
        )
        if key == NODES and old is not None and not gone and _node_signature(obj) == _node_signature(old):
            return []
        if key == PVCS:
            ns, claim = obj["metadata"].get("namespace"), obj["metadata"]["name"]
            return [k for k in sorted(self._unscheduled) if k[1] == ns and self._uses(k, claim)]
        return sorted(self._unscheduled)

    def _uses(self, target: Key, claim: str) -> bool:
        pod = self.get(target)
        return pod is not None and any(name == claim for name, _ in _pod_claims(pod))

    def _pod_changed(self, pod: Obj, old: Obj | None) -> list[Key]:
        meta = pod["metadata"]
        target: Key = (PODS, meta.get("namespace", ""), meta["name"])
        gone = self.store.get(rt_of(*PODS), target[1], target[2]) is None
        node: str = (pod.get("spec") or {}).get("nodeName") or ""
        holds = bool(node) and not gone and (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES
        freed = False
        previous = self._node_of.get(target)
        if previous is not None and (not holds or previous != node):
            self._on_node.get(previous, {}).pop(target, None)
            del self._node_of[target]
            freed = True
        if holds:
            self._on_node.setdefault(node, {})[target] = pod
            self._node_of[target] = node
        if gone:
            self._requests.pop(meta.get("uid", ""), None)
        if not gone and not node and self._ours(pod):
            self._unscheduled.add(target)
            return [target] if old is None or _pod_signature(old) != _pod_signature(pod) else []
        self._unscheduled.discard(target)
        return sorted(self._unscheduled) if freed else []

    def _ours(self, pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        return (
            spec.get("schedulerName", SCHEDULER_NAME) == self.scheduler_name
            and not pod["metadata"].get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES
        )

    # ---------------------------------------------------------- reconcile
    async def reconcile(self, target: Key) -> None:
        if target[0] != PODS:
            return
        pod = self.get(target)
        if pod is None or (pod.get("spec") or {}).get("nodeName") or not self._ours(pod):
            self._forget(target)
            return
        now = asyncio.get_running_loop().time()
        wait = self._not_before.get(target, 0.0) - now
        if wait > 0:
            self._later(target, wait)
            return
        claims = self.claim_states(pod)
        placement = decide_placement(
            pod,
            list(self.store.items(rt_of(*NODES))),
            {node: list(pods.values()) for node, pods in self._on_node.items()},
            claims,
            requests_of=self._requests_of,
        )
        if placement.node is None:
            self._unschedulable(target, pod, placement.message)
            return
        waiting = [c for c in claims if not c.bound and c.wait_for_first_consumer]
        if waiting:  # PreBind: let the provisioner create the volumes on the chosen node first
            self._select_node(pod, waiting, placement.node)
            return
        bound = bind_pod(self.verbs, pod, placement.node)
        self._forget(target)
        ns, name = target[1], target[2]
        message = f"Successfully assigned {ns}/{name} to {placement.node}"
        record_event(self.verbs, bound, "Normal", "Scheduled", message, component=self.scheduler_name)

    def _unschedulable(self, target: Key, pod: Obj, message: str) -> None:
        attempts = self._attempts[target] = self._attempts.get(target, 0) + 1
        backoff = min(INITIAL_BACKOFF_S * 2 ** (attempts - 1), MAX_BACKOFF_S)
        self._not_before[target] = asyncio.get_running_loop().time() + backoff
        self._later(target, self.flush_after_s)
        conds = (pod.get("status") or {}).get("conditions") or []
        old = next((c for c in conds if c.get("type") == "PodScheduled"), None)
        if old is None or (old.get("status"), old.get("reason"), old.get("message")) != (
            "False",
            "Unschedulable",
            message,
        ):
            since = old["lastTransitionTime"] if old and old.get("status") == "False" else now_rfc3339()
            cond = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": since,
            }
            new = clone(pod)
            status = new.setdefault("status", {})
            status["conditions"] = [c for c in conds if c.get("type") != "PodScheduled"] + [cond]
            pod, _ = self.verbs.update(rt_of(*PODS), target[1], target[2], new, subresource="status")
        record_event(self.verbs, pod, "Warning", "FailedScheduling", message, component=self.scheduler_name)

    def _select_node(self, pod: Obj, claims: list[ClaimState], node: str) -> None:
        pvcs = rt_of(*PVCS)
        ns = pod["metadata"].get("namespace", "")
        for claim in claims:
            if claim.selected_node != node:
                patch = {"metadata": {"annotations": {SELECTED_NODE: node}}}
                self.verbs.patch(pvcs, ns, claim.name, patch, "application/merge-patch+json")

    def _later(self, target: Key, delay: float) -> None:
        """One timer per pod: keep an earlier pending one, else arm a new one."""
        now = asyncio.get_running_loop().time()
        due = self._timer_due.get(target)
        if due is not None and now < due <= now + delay:
            return
        self._timer_due[target] = now + delay
        self.requeue_after(target, delay)

    def _forget(self, target: Key) -> None:
        self._unscheduled.discard(target)
        for table in (self._attempts, self._not_before, self._timer_due):
            table.pop(target, None)

    def _requests_of(self, pod: Obj) -> Resources:
        uid = pod["metadata"].get("uid", "")
        cached = self._requests.get(uid)
        if cached is None:
            cached = self._requests[uid] = pod_requests(pod)
        return cached

    # --------------------------------------------------------------- claims
    def claim_states(self, pod: Obj) -> list[ClaimState]:
        """The state of every claim ``pod`` uses, read from the store."""
        ns = pod["metadata"].get("namespace", "")
        out = []
        for name, ephemeral in _pod_claims(pod):
            pvc = self.store.get(rt_of(*PVCS), ns, name)
            if pvc is None:
                out.append(ClaimState(name, exists=False, ephemeral=ephemeral))
                continue
            spec = pvc.get("spec") or {}
            sc = self.store.get(rt_of(*STORAGE_CLASSES), "", spec.get("storageClassName") or "")
            volume = spec.get("volumeName") or ""
            bound = bool(volume) and (pvc.get("status") or {}).get("phase") == "Bound"
            pv = self.store.get(rt_of(*PVS), "", volume) if bound else None
            modes = tuple(spec.get("accessModes") or ())
            out.append(
                ClaimState(
                    name,
                    ephemeral=ephemeral,
                    bound=bound,
                    wait_for_first_consumer=(sc or {}).get("volumeBindingMode") == "WaitForFirstConsumer",
                    selected_node=(pvc["metadata"].get("annotations") or {}).get(SELECTED_NODE, ""),
                    access_modes=modes,
                    pv_node_affinity=(((pv or {}).get("spec") or {}).get("nodeAffinity") or {}).get(
                        "required"
                    ),
                    attached_to=self._attached_nodes(volume) if bound else (),
                    rwop_users=self._rwop_users(pod, name) if "ReadWriteOncePod" in modes else (),
                )
            )
        return out

    def _attached_nodes(self, pv: str) -> tuple[str, ...]:
        nodes = set()
        for va in self.store.items(rt_of(*VOLUME_ATTACHMENTS)):
            spec = va.get("spec") or {}
            if (spec.get("source") or {}).get("persistentVolumeName") == pv and (va.get("status") or {}).get(
                "attached"
            ):
                nodes.add(spec.get("nodeName", ""))
        return tuple(sorted(nodes))

    def _rwop_users(self, pod: Obj, claim: str) -> tuple[str, ...]:
        ns, uid = pod["metadata"].get("namespace"), pod["metadata"].get("uid")
        users = []
        for pods in self._on_node.values():
            for other in pods.values():
                meta = other["metadata"]
                same = meta.get("namespace") == ns and meta.get("uid") != uid
                if same and any(name == claim for name, _ in _pod_claims(other)):
                    users.append(f"{ns}/{meta['name']}")
        return tuple(sorted(users))
