"""Event recording as client-go's EventRecorder does it: core/v1 Events, repeats aggregated by count."""

from __future__ import annotations

import hashlib

from ..resources import find
from ..store import Obj
from ..verbs import Verbs, now_rfc3339

EVENTS = find("", "v1", "events")


def record_event(
    verbs: Verbs,
    involved: Obj,
    event_type: str,
    reason: str,
    message: str,
    *,
    component: str,
    host: str = "",
) -> Obj:
    """Create (or bump the count of) the Event for ``involved``; returns the stored Event."""
    assert EVENTS is not None
    meta = involved["metadata"]
    namespace = meta.get("namespace") or "default"
    ref = {
        "kind": involved.get("kind"),
        "namespace": meta.get("namespace", ""),
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "apiVersion": involved.get("apiVersion"),
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    digest = hashlib.sha1(f"{ref['uid']}/{event_type}/{reason}/{message}".encode()).hexdigest()[:16]
    name = f"{meta['name']}.{digest}"
    now = now_rfc3339()
    existing = verbs.store.get(EVENTS, namespace, name)
    if existing is not None:
        patch = {"count": int(existing.get("count") or 1) + 1, "lastTimestamp": now}
        obj, _ = verbs.patch(EVENTS, namespace, name, patch, "application/merge-patch+json")
        return obj
    source = {"component": component, **({"host": host} if host else {})}
    body = {
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {k: v for k, v in ref.items() if v},
        "reason": reason,
        "message": message,
        "type": event_type,
        "source": source,
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "reportingComponent": component,
        "reportingInstance": host,
    }
    obj, _ = verbs.create(EVENTS, namespace, body)
    return obj
