"""csi-addons' NetworkFence controller with ceph-csi's fencing: CIDRs into the Ceph OSD blocklist.

``csiaddons.openshift.io/v1alpha1`` NetworkFence (cluster-scoped). As the csi-addons controller does:
add the ``csiaddons.openshift.io/network-fence`` finalizer, validate the spec (``Failed`` with
"Failed to validate Networkfence parameters: …"), fence or unfence, then write ``status.result``
``Succeeded`` with ``message`` "fencing operation successful" / "unfencing operation successful"
(``FenceOperationSuccessfulMessage``/``UnFenceOperationSuccessfulMessage``), or ``Failed`` with the
driver's error. It reconciles only new generations (a ``GenerationChangedPredicate``). Deleting a CR
only drops the finalizer: the blocklist entries stay, so unfence (``fenceState: Unfenced``) first.

Fencing blocklists the CIDRs (:class:`~.failures.SimFaults` ``blocklist``); every node whose InternalIP
falls in one is fenced (``fenced_nodes``, :func:`is_fenced`), and the kubelet of a fenced node stops its
pods' processes, as a blocklisted RBD client's I/O fails. Not modelled: NetworkFenceClass lookup (a
class name is accepted as naming the sim's Ceph driver), the CSIAddonsNode leader election, and any
driver name check (every driver fences the one simulated Ceph cluster).
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

from ..store import Obj, TypeKey
from ..verbs import clone
from .base import Key, SimController, rt_of
from .context import SimContext
from .failures import blocklisted, faults_of, node_ip, refresh_fenced_nodes

NETWORKFENCES = rt_of("csiaddons.openshift.io", "networkfences")
NODES = rt_of("", "nodes")
FINALIZER = "csiaddons.openshift.io/network-fence"
FENCE_OK = "fencing operation successful"
UNFENCE_OK = "unfencing operation successful"
SUCCEEDED, FAILED = "Succeeded", "Failed"


def validate_spec(spec: Any) -> str | None:
    """csi-addons' ``validateNetworkFenceSpec``: the error text, or None."""
    if not isinstance(spec, dict):
        return "NetworkFence resource is empty"
    if spec.get("networkFenceClassName"):
        return None if spec.get("cidrs") is not None else "required parameter spec.cidrs is not specified"
    if not spec.get("driver"):
        return "required parameter driver is not specified"
    if spec.get("cidrs") is None:
        return "required parameter cidrs is not specified"
    return None


def parse_cidrs(cidrs: Any) -> list[str] | str:
    """ceph-csi's view of ``spec.cidrs``: normalized networks, or its error text."""
    if not isinstance(cidrs, list) or not cidrs:
        return (
            "rpc error: code = InvalidArgument desc = failed to get list of CIDRs: the CIDR cannot be empty"
        )
    out = []
    for cidr in cidrs:
        try:
            out.append(str(ipaddress.ip_network(str(cidr), strict=False)))
        except ValueError:
            return (
                f'rpc error: code = Internal desc = failed to add blocklist range "{cidr}": '
                f"invalid CIDR address: {cidr}"
            )
    return out


def is_fenced(ctx: SimContext, node: str) -> bool:
    """Whether ``node``'s InternalIP is in the Ceph blocklist (its RBD/CephFS I/O is blocked)."""
    return blocklisted(node_ip(ctx.verbs.store.get(NODES, "", node)), faults_of(ctx).blocklist)


class NetworkFenceController(SimController):
    """Fences after ``delay_s`` (the sidecar's round trip to the Ceph monitors)."""

    name = "networkfence"
    watches: tuple[TypeKey, ...] = (("csiaddons.openshift.io", "networkfences"), ("", "nodes"))

    def __init__(self, ctx: SimContext, *, delay_s: float = 0.2) -> None:
        super().__init__(ctx.verbs)
        self.ctx = ctx
        self.delay_s = delay_s
        self._done: dict[str, tuple[str, int]] = {}  # name -> (uid, generation) handled
        self._due: dict[tuple[str, int], float] = {}  # (uid, generation) -> loop time to act

    def keys_for(self, key: TypeKey, obj: Obj, old: Obj | None) -> list[Key]:
        if key == ("", "nodes"):  # a node (re)appearing or changing address may now be fenced
            return [(key, "", "")]
        return [(key, "", obj["metadata"]["name"])]

    async def reconcile(self, target: Key) -> None:
        if target[0] == ("", "nodes"):
            refresh_fenced_nodes(self.ctx)
            return
        fence = self.get(target)
        if fence is None:
            return
        meta = fence["metadata"]
        name, uid, generation = meta["name"], meta["uid"], int(meta.get("generation", 1))
        if meta.get("deletionTimestamp"):
            self._drop_finalizer(fence)
            self._done.pop(name, None)
            return
        if self._done.get(name) == (uid, generation):
            return  # GenerationChangedPredicate: status and metadata updates do not trigger
        spec = fence.get("spec")
        problem = validate_spec(spec)
        if problem is not None or not isinstance(spec, dict):
            self._done[name] = (uid, generation)
            self._status(fence, FAILED, f"Failed to validate Networkfence parameters: {problem or 'no spec'}")
            return
        if FINALIZER not in (meta.get("finalizers") or []):
            new = clone(fence)
            new["metadata"]["finalizers"] = [*(meta.get("finalizers") or []), FINALIZER]
            fence = self.verbs.update(NETWORKFENCES, "", name, new)[0]
        now = asyncio.get_running_loop().time()
        if (uid, generation) not in self._due:
            self._due[(uid, generation)] = now + self.delay_s
            if self.delay_s > 0:
                self.requeue_after(target, self.delay_s)
        if now < self._due[(uid, generation)]:
            return  # the timer brings us back
        del self._due[(uid, generation)]
        self._done[name] = (uid, generation)
        cidrs = parse_cidrs(spec.get("cidrs"))
        if isinstance(cidrs, str):
            self._status(fence, FAILED, cidrs)
            return
        faults = faults_of(self.ctx)
        fenced = spec.get("fenceState", "Fenced") == "Fenced"
        if fenced:
            faults.blocklist.update(cidrs)
        else:
            faults.blocklist.difference_update(cidrs)
        faults.changed()
        refresh_fenced_nodes(self.ctx)
        self._status(fence, SUCCEEDED, FENCE_OK if fenced else UNFENCE_OK)

    def _status(self, fence: Obj, result: str, message: str) -> None:
        status = {**(fence.get("status") or {}), "result": result, "message": message}
        if status == fence.get("status"):
            return
        current = self.store.get(NETWORKFENCES, "", fence["metadata"]["name"]) or fence
        self.verbs.update(
            NETWORKFENCES, "", fence["metadata"]["name"], {**current, "status": status}, subresource="status"
        )

    def _drop_finalizer(self, fence: Obj) -> None:
        finalizers = fence["metadata"].get("finalizers") or []
        if FINALIZER not in finalizers:
            return
        new = clone(fence)
        new["metadata"]["finalizers"] = [f for f in finalizers if f != FINALIZER]
        self.verbs.update(NETWORKFENCES, "", fence["metadata"]["name"], new)
