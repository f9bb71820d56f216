"""The services' audit trail: a record as a JSON log line and, unless turned off, a Kubernetes Event.

One helper for every service that audits (disks, jobs, the reclaimer): the record and the Event are
built purely by :mod:`gpuworkspace_spawner.audit`; this sends them. An Event the API refuses is logged
as a warning and never fails the operation it records (the log line was already written).
"""

from __future__ import annotations

import logging
import socket
from datetime import UTC, datetime
from typing import Any

from ..audit import AuditRecord, build_audit_event, log_audit
from ..k8s import KubernetesError, gateway

log = logging.getLogger("gpuworkspace.audit")


async def record_audit(api: Any, record: AuditRecord, *, request_timeout: float, events: bool = True) -> None:
    """Log ``record``, then create its Event in ``record.namespace`` (when ``events``)."""
    now = datetime.now(UTC)
    log_audit(record, now=now)
    if not events:
        return
    event = build_audit_event(record, now=now, instance=socket.gethostname())
    try:
        await gateway.create_event(api, record.namespace, event, request_timeout=request_timeout)
    except KubernetesError as exc:
        log.warning("Could not record audit event %s for %s: %s", record.action, record.name, exc)
