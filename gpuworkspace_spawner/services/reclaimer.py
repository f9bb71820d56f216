"""The disk reclaimer: deletes retained home disks once their retention period has ended.

``gpuworkspace-reclaimer --namespace gpu-workspaces`` runs as a JupyterHub managed service (or any
Deployment with list/watch/delete on persistentvolumeclaims and create on events). Each pass lists the
retained claims and the pods, asks :func:`decide_reclaim` about each claim (fail closed: anything
unclear keeps the disk) and deletes with uid + resourceVersion preconditions, so a claim re-adopted
between the decision and the delete survives. Between passes it watches the retained claims and
sleeps until the earliest ``retain-until``; it never polls.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..audit import AuditRecord, build_audit_event, log_audit
from ..k8s import Conflict, KubernetesError, NotFound, gateway
from ..lifecycle.retention import decide_reclaim
from ..manifests.names import (
    ANN_SERVERNAME,
    ANN_USERNAME,
    DISK_HOME,
    DISK_RETAINED,
    LABEL_DISK,
    LABEL_DISK_STATE,
)

log = logging.getLogger("gpuworkspace.reclaimer")
RETAINED_SELECTOR = f"{LABEL_DISK}={DISK_HOME},{LABEL_DISK_STATE}={DISK_RETAINED}"
RESYNC_S = 3600


@dataclass(frozen=True)
class Outcome:
    claim: str
    action: str  # deleted | kept | would-delete | changed
    reason: str
    retain_until: datetime | None


def claims_in_use(pods: Iterable[Mapping[str, Any]]) -> set[str]:
    """Claim names mounted by pods that have not finished."""
    used: set[str] = set()
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                used.add(claim)
    return used


async def reclaim_once(
    api: Any, namespace: str, *, now: datetime, dry_run: bool = False, request_timeout: float = 30
) -> tuple[list[Outcome], str]:
    """One pass; returns the outcomes and the claim list's resourceVersion (to watch from)."""
    listed = await gateway.list_pvcs(api, namespace, RETAINED_SELECTOR, request_timeout=request_timeout)
    pods = await gateway.list_pods(api, namespace, "", request_timeout=request_timeout)
    in_use = claims_in_use(pods["items"])
    outcomes = []
    for claim in listed["items"]:
        name = claim["metadata"]["name"]
        verdict = decide_reclaim(claim, now=now, in_use=name in in_use)
        if verdict.action != "delete":
            outcomes.append(Outcome(name, "kept", verdict.reason, verdict.retain_until))
        elif dry_run:
            outcomes.append(Outcome(name, "would-delete", verdict.reason, verdict.retain_until))
        else:
            outcomes.append(
                await _delete(api, namespace, claim, verdict.reason, verdict.retain_until, request_timeout)
            )
    return outcomes, str(listed["metadata"].get("resourceVersion", ""))


async def _delete(
    api: Any,
    namespace: str,
    claim: Mapping[str, Any],
    reason: str,
    until: datetime | None,
    request_timeout: float,
) -> Outcome:
    meta = claim["metadata"]
    try:
        await gateway.delete_pvc(
            api,
            namespace,
            meta["name"],
            uid=meta["uid"],
            resource_version=meta["resourceVersion"],
            request_timeout=request_timeout,
        )
    except (Conflict, NotFound) as exc:
        return Outcome(
            meta["name"], "changed", f"not deleted, the claim changed since the decision: {exc}", until
        )
    annotations = meta.get("annotations") or {}
    record = AuditRecord(
        action="disk-reclaimed",
        user=annotations.get(ANN_USERNAME, ""),
        server=annotations.get(ANN_SERVERNAME, ""),
        namespace=namespace,
        kind="PersistentVolumeClaim",
        name=meta["name"],
        message=f"Home disk deleted: {reason}",
        uid=meta["uid"],
    )
    now = datetime.now(UTC)
    log_audit(record, now=now)
    try:
        event = build_audit_event(record, now=now, instance=socket.gethostname())
        await gateway.create_event(api, namespace, event, request_timeout=request_timeout)
    except KubernetesError as exc:
        log.warning("Could not record the reclaim event for %s: %s", meta["name"], exc)
    return Outcome(meta["name"], "deleted", reason, until)


def next_wake_s(outcomes: Sequence[Outcome], now: datetime) -> int:
    """Seconds until the earliest kept disk is due (at most RESYNC_S)."""
    due = [o.retain_until for o in outcomes if o.action == "kept" and o.retain_until and o.retain_until > now]
    if not due:
        return RESYNC_S
    return max(1, min(RESYNC_S, int((min(due) - now).total_seconds()) + 1))


async def run(namespace: str, *, once: bool, dry_run: bool) -> int:
    api = await gateway.connect()
    try:
        while True:
            now = datetime.now(UTC)
            outcomes, version = await reclaim_once(api, namespace, now=now, dry_run=dry_run)
            for outcome in outcomes:
                log.info("%s: %s (%s)", outcome.claim, outcome.action, outcome.reason)
            if once:
                return 0
            try:
                await gateway.wait_for_claim_change(
                    api, namespace, RETAINED_SELECTOR, version, next_wake_s(outcomes, now)
                )
            except KubernetesError as exc:  # e.g. 410 Gone: the next pass lists again
                log.info("Watch ended (%s); listing again", exc)
    finally:
        await api.api_client.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuworkspace-reclaimer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", default="gpu-workspaces", help="namespace of the home disks")
    parser.add_argument("--once", action="store_true", help="one pass, then exit")
    parser.add_argument("--dry-run", action="store_true", help="report what would be deleted; delete nothing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return asyncio.run(run(args.namespace, once=args.once, dry_run=args.dry_run))


if __name__ == "__main__":
    raise SystemExit(main())
