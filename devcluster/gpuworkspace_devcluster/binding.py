"""``POST pods/NAME/binding`` semantics, shared by the API server and the simulated scheduler.

A binding sets ``spec.nodeName`` (which a normal update forbids once set) and the ``PodScheduled=True``
condition in one write, as the real registry's ``assignPod`` does.
"""

from __future__ import annotations

from .errors import ApiError
from .resources import find
from .store import Obj
from .verbs import Verbs, now_rfc3339

PODS = find("", "v1", "pods")


def bound_pod(pod: Obj, node: str, now: str, annotations: dict[str, str] | None = None) -> Obj:
    """``pod`` assigned to ``node`` (a new dict; ``pod`` is not changed)."""
    bound = dict(pod)
    bound["spec"] = {**pod["spec"], "nodeName": node}
    if annotations:
        meta = dict(pod["metadata"])
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        bound["metadata"] = meta
    conds = [c for c in (pod.get("status", {}).get("conditions") or []) if c.get("type") != "PodScheduled"]
    conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now})
    bound["status"] = {**pod.get("status", {}), "conditions": conds}
    return bound


def bind_pod(
    verbs: Verbs, pod: Obj, node: str, *, uid: str | None = None, annotations: dict[str, str] | None = None
) -> Obj:
    """Bind the stored pod named like ``pod`` to ``node``; returns the stored pod.

    Raises 404 when the pod is gone, 409 when its uid differs (``uid``, default ``pod``'s) or it is
    already assigned, 500 when it is being deleted — the registry's answers.
    """
    assert PODS is not None
    meta = pod["metadata"]
    name = meta["name"]
    current = verbs.get(PODS, meta.get("namespace", ""), name)
    want_uid = uid if uid is not None else meta.get("uid")
    if want_uid and current["metadata"].get("uid") != want_uid:
        raise ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on pods "{name}": Precondition failed: UID in precondition: '
            f"{want_uid}, UID in object meta: {current['metadata'].get('uid')}",
        )
    if current["metadata"].get("deletionTimestamp"):
        raise ApiError(
            500,
            "InternalError",
            f"Internal error occurred: pod {name} is being deleted, cannot be assigned to a host",
        )
    assigned = current.get("spec", {}).get("nodeName")
    if assigned:
        raise ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned to node '
            f'"{assigned}"',
        )
    # Binding writes spec.nodeName, which a normal update forbids: the registry writes it directly.
    return verbs.store.put(PODS, bound_pod(current, node, now_rfc3339(), annotations))
