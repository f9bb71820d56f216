"""Audit records: one per workspace transition, as a JSON log line and a Kubernetes Event.

Building the record and the Event is pure (:func:`build_audit_event`, :func:`audit_line`);
:func:`write_audit` is the one way every emitter (the spawner's runtimes, each service) writes a record:
the log line always, the Event when given an API client. :func:`log_audit` is its log-only half, for the
hub's synchronous steps that never become Events.
The log line goes to the ``gpuworkspace.audit`` logger as one JSON object, so a log pipeline can
index it without parsing prose.
"""

from __future__ import annotations

import json
import logging
import socket
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from .k8s import KubernetesError, gateway

AUDIT_LOGGER = "gpuworkspace.audit"
COMPONENT = "gpuworkspace-spawner"

Action = Literal[
    "disk-created",
    "disk-adopted",
    "disk-retained",
    "disk-reclaimed",
    "disk-refused",
    "workspace-starting",
    "workspace-started",
    "workspace-start-failed",
    "workspace-stopped",
    "workspace-rejected",
    "duplicate-pod-removed",
    # self-healing container workspaces (selfhealing.py): a lost pod rebuilt, or given up on
    "workspace-rebuilt",
    "workspace-rebuild-failed",
    # the disk admin service (services/disks): resize, snapshot, restore, early reclaim
    "disk-resize-requested",
    "disk-resized",
    "disk-snapshotted",
    "disk-restore-started",
    "disk-restored",
    "disk-restore-failed",
    "disk-operation-refused",
    "disk-snapshot-failed",  # a scheduled snapshot was not ready (services/disks/scheduling.py)
    "disk-snapshot-pruned",  # a scheduled snapshot beyond the profile's keep-count was deleted
    "disk-transferred",  # an admin gave a disk to another owner (lifecycle/ownership.py)
    # the idle culler (services/culler): staged warnings before a stop ("workspace-stopped" above)
    "workspace-cull-warned",
    "workspace-cull-warnings-withdrawn",
    # the jobs service (services/jobs): a notebook or script handed off to the cluster's queue
    "job-submitted",
    "job-submit-failed",
    "job-cancelled",
]

# the records of a start: they carry what it runs (manifests/provenance.py build_start_details)
START_ACTIONS: frozenset[str] = frozenset(
    {"workspace-starting", "workspace-started", "workspace-start-failed"}
)

# Event reasons are CamelCase, like the kubelet's.
_REASONS: dict[str, str] = {
    "disk-created": "WorkspaceDiskCreated",
    "disk-adopted": "WorkspaceDiskAdopted",
    "disk-retained": "WorkspaceDiskRetained",
    "disk-reclaimed": "WorkspaceDiskReclaimed",
    "disk-refused": "WorkspaceDiskRefused",
    "workspace-starting": "WorkspaceStarting",
    "workspace-started": "WorkspaceStarted",
    "workspace-start-failed": "WorkspaceStartFailed",
    "workspace-stopped": "WorkspaceStopped",
    "workspace-rejected": "WorkspaceRejected",
    "duplicate-pod-removed": "WorkspaceDuplicateRemoved",
    "workspace-rebuilt": "WorkspaceRebuilt",
    "workspace-rebuild-failed": "WorkspaceRebuildFailed",
    "disk-resize-requested": "WorkspaceDiskResizing",
    "disk-resized": "WorkspaceDiskResized",
    "disk-snapshotted": "WorkspaceDiskSnapshotted",
    "disk-restore-started": "WorkspaceDiskRestoring",
    "disk-restored": "WorkspaceDiskRestored",
    "disk-restore-failed": "WorkspaceDiskRestoreFailed",
    "disk-operation-refused": "WorkspaceDiskOperationRefused",
    "disk-snapshot-failed": "WorkspaceDiskSnapshotFailed",
    "disk-snapshot-pruned": "WorkspaceDiskSnapshotPruned",
    "disk-transferred": "WorkspaceDiskTransferred",
    "workspace-cull-warned": "WorkspaceCullWarned",
    "workspace-cull-warnings-withdrawn": "WorkspaceCullWarningsWithdrawn",
    "job-submitted": "WorkspaceJobSubmitted",
    "job-submit-failed": "WorkspaceJobSubmitFailed",
    "job-cancelled": "WorkspaceJobCancelled",
}
_WARNINGS = {
    "disk-refused",
    "workspace-rebuilt",
    "workspace-rebuild-failed",
    "workspace-start-failed",
    "workspace-rejected",
    "duplicate-pod-removed",
    "disk-restore-failed",
    "disk-operation-refused",
    "disk-snapshot-failed",
    "job-submit-failed",
}


@dataclass(frozen=True)
class AuditRecord:
    action: Action
    user: str
    server: str
    namespace: str
    kind: str  # the object the transition is about: PersistentVolumeClaim, Pod
    name: str
    message: str
    profile: str = ""
    catalog_version: str = ""
    uid: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    actor: str = ""  # the hub user or service that asked (admin operations); "" for the spawner's own


def build_audit_event(record: AuditRecord, *, now: datetime, instance: str) -> dict[str, Any]:
    """A core/v1 Event on the record's object (``kubectl describe pvc`` shows it); its message names the
    actor when one asked (``… (by alice)``)."""
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    involved = {"apiVersion": "v1", "kind": record.kind, "name": record.name, "namespace": record.namespace}
    if record.uid:
        involved["uid"] = record.uid
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{record.name}.", "namespace": record.namespace},
        "involvedObject": involved,
        "reason": _REASONS[record.action],
        "message": (f"{record.message} (by {record.actor})" if record.actor else record.message)[:1024],
        "type": "Warning" if record.action in _WARNINGS else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def audit_line(record: AuditRecord, *, now: datetime) -> str:
    body = {"ts": now.astimezone(UTC).isoformat(), "audit": True, **asdict(record)}
    return json.dumps(body, sort_keys=True, default=str)


def log_audit(record: AuditRecord, *, now: datetime, logger: logging.Logger | None = None) -> None:
    """One JSON line on ``logger`` (in the hub: the hub's own log), else the ``gpuworkspace.audit`` logger."""
    (logger or logging.getLogger(AUDIT_LOGGER)).info("audit %s", audit_line(record, now=now))


async def write_audit(
    record: AuditRecord,
    *,
    api: Any = None,
    request_timeout: float = 30.0,
    now: datetime | None = None,
    logger: logging.Logger | None = None,
) -> None:
    """Log ``record`` (:func:`log_audit`), then, when ``api`` is given, create its Event in
    ``record.namespace``. An Event the API refuses is logged as a warning and never fails the operation
    it records (the log line was already written)."""
    now = now or datetime.now(UTC)
    log_audit(record, now=now, logger=logger)
    if api is None:
        return
    event = build_audit_event(record, now=now, instance=socket.gethostname())
    try:
        await gateway.create_event(api, record.namespace, event, request_timeout=request_timeout)
    except KubernetesError as exc:
        (logger or logging.getLogger(AUDIT_LOGGER)).warning(
            "Could not record audit event %s for %s: %s", record.action, record.name, exc
        )
