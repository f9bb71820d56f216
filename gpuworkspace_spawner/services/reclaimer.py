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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..audit import AuditRecord, write_audit
from ..k8s import Conflict, KubernetesError, NotFound, custom, gateway
from ..k8s.kinds import DATA_VOLUMES
from ..k8s.observing import first_change
from ..lifecycle.retention import decide_reclaim, pods_using_claim
from ..manifests.names import (
    ANN_SERVERNAME,
    ANN_USERNAME,
    DISK_HOME,
    DISK_RETAINED,
    LABEL_DISK,
    LABEL_DISK_STATE,
)
from .reclaimstats import ReclaimStats, make_metrics_app
from .serving import run_service

log = logging.getLogger("gpuworkspace.reclaimer")
RETAINED_SELECTOR = f"{LABEL_DISK}={DISK_HOME},{LABEL_DISK_STATE}={DISK_RETAINED}"
# VM root disks: the DataVolume is the handle (CDI owns the claim and deletes it with the DataVolume).
RETAINED_ROOT_SELECTOR = f"{LABEL_DISK}=root,{LABEL_DISK_STATE}={DISK_RETAINED}"
RESYNC_S = 3600
RETRY_S = 30  # after a pass that failed with a Kubernetes error
MAX_PORT = 65535


@dataclass(frozen=True)
class Outcome:
    claim: str
    action: str  # deleted | kept | would-delete | changed
    reason: str
    retain_until: datetime | None


async def reclaim_once(
    api: Any,
    namespace: str,
    *,
    now: datetime,
    dry_run: bool = False,
    request_timeout: float = 30,
    custom_api: Any = None,
) -> tuple[list[Outcome], str]:
    """One pass over retained home claims and VM root disks; the outcomes and the claims' resourceVersion."""
    custom_api = custom_api or custom.custom_api(api)
    listed = await gateway.list_pvcs(api, namespace, RETAINED_SELECTOR, request_timeout=request_timeout)
    pods = await gateway.list_pods(api, namespace, "", request_timeout=request_timeout)
    pod_items = pods["items"]

    def in_use_by(name: str) -> bool:
        return bool(pods_using_claim(pod_items, name, namespace))

    outcomes = []
    data_volumes = await custom.list_namespaced(
        custom_api,
        DATA_VOLUMES,
        namespace,
        label_selector=RETAINED_ROOT_SELECTOR,
        request_timeout=request_timeout,
    )
    for dv in data_volumes:
        name = dv["metadata"]["name"]
        verdict = decide_reclaim(dv, now=now, in_use=in_use_by(name))
        if verdict.action != "delete" or dry_run:
            action = "kept" if verdict.action != "delete" else "would-delete"
            outcomes.append(Outcome(name, action, verdict.reason, verdict.retain_until))
        else:
            outcomes.append(
                await _delete(
                    api, namespace, dv, verdict.reason, verdict.retain_until, request_timeout, custom_api
                )
            )
    for claim in listed["items"]:
        name = claim["metadata"]["name"]
        verdict = decide_reclaim(claim, now=now, in_use=in_use_by(name))
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
    custom_api: Any = None,
) -> Outcome:
    """Delete a retained claim, or a retained root-disk DataVolume (CDI deletes its claim with it)."""
    meta = claim["metadata"]
    kind = "DataVolume" if claim.get("kind") == "DataVolume" else "PersistentVolumeClaim"
    precondition = {"uid": meta["uid"], "resource_version": meta["resourceVersion"]}
    try:
        if kind == "DataVolume":
            await custom.delete(
                custom_api,
                DATA_VOLUMES,
                namespace,
                meta["name"],
                **precondition,
                request_timeout=request_timeout,
            )
        else:
            await gateway.delete_pvc(
                api, namespace, meta["name"], **precondition, request_timeout=request_timeout
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
        kind=kind,
        name=meta["name"],
        message=f"{'Root' if kind == 'DataVolume' else 'Home'} disk deleted: {reason}",
        uid=meta["uid"],
    )
    await write_audit(record, api=api, request_timeout=request_timeout)
    return Outcome(meta["name"], "deleted", reason, until)


def next_wake_s(outcomes: Sequence[Outcome], now: datetime) -> int:
    """Seconds until the earliest kept disk is due (at most RESYNC_S)."""
    due = [o.retain_until for o in outcomes if o.action == "kept" and o.retain_until and o.retain_until > now]
    if not due:
        return RESYNC_S
    return max(1, min(RESYNC_S, int((min(due) - now).total_seconds()) + 1))


async def run(namespace: str, *, once: bool, dry_run: bool, metrics_listen: str = "") -> int:
    api = await gateway.connect()
    stats = ReclaimStats()
    server = None
    if metrics_listen:
        host, _, port = metrics_listen.rpartition(":")
        server = make_metrics_app(stats).listen(int(port), address=host)
        log.info("Metrics on %s/metrics", metrics_listen)
    try:
        while True:
            now = datetime.now(UTC)
            try:
                outcomes, version = await reclaim_once(api, namespace, now=now, dry_run=dry_run)
            except KubernetesError as exc:
                stats.record_failure()
                if once:
                    raise
                log.error("Reclaim pass failed (retrying in %d s): %s", RETRY_S, exc)
                await asyncio.sleep(RETRY_S)
                continue
            stats.record_pass(outcomes, now)
            for outcome in outcomes:
                log.info("%s: %s (%s)", outcome.claim, outcome.action, outcome.reason)
            if once:
                return 0
            await _wait_for_a_change(api, namespace, version, next_wake_s(outcomes, now))
    finally:
        if server is not None:
            server.stop()
        await api.api_client.close()


async def _wait_for_a_change(api: Any, namespace: str, version: str, timeout_s: int) -> None:
    """Sleep until a retained home claim or root disk changes, or until the next disk is due."""
    root_disks = custom.lister(custom.custom_api(api), DATA_VOLUMES).list_objects
    watches = [
        asyncio.ensure_future(
            first_change(
                list_method,
                namespace,
                label_selector=selector,
                resource_version=version,
                timeout_s=timeout_s,
            )
        )
        for list_method, selector in (
            (api.list_namespaced_persistent_volume_claim, RETAINED_SELECTOR),
            (root_disks, RETAINED_ROOT_SELECTOR),
        )
    ]
    pending = set(watches)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            errors = [e for e in (t.exception() for t in done) if e is not None]
            if all(isinstance(e, NotFound) for e in errors) and errors and pending:
                continue  # a kind this cluster does not serve (no CDI): wait on the others
            for error in errors:
                if not isinstance(error, KubernetesError):
                    raise error
                log.info("Watch ended (%s); listing again", error)  # e.g. 410 Gone
            return
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def _listen_address(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) <= MAX_PORT or ":" in host:
        raise argparse.ArgumentTypeError(f"{value!r}: expected [HOST]:PORT, e.g. :9502 or 127.0.0.1:10104")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuworkspace-reclaimer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", default="gpu-workspaces", help="namespace of the home disks")
    parser.add_argument("--once", action="store_true", help="one pass, then exit")
    parser.add_argument("--dry-run", action="store_true", help="report what would be deleted; delete nothing")
    parser.add_argument(
        "--metrics-listen",
        default=None,  # not "": argparse passes a string default through ``type`` too
        type=_listen_address,
        help="serve Prometheus metrics at /metrics on [HOST]:PORT (':9502': every interface; default: none)",
    )
    args = parser.parse_args(argv)
    listen = args.metrics_listen or ""
    return run_service(run(args.namespace, once=args.once, dry_run=args.dry_run, metrics_listen=listen))


if __name__ == "__main__":
    raise SystemExit(main())
