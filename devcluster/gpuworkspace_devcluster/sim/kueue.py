"""Kueue in the devcluster: the batch/v1 Job integration and the admission scheduler, as a thin shell.

- Kueue's Job webhook (``pkg/controller/jobs/job/job_webhook.go``): a Job labelled
  ``kueue.x-k8s.io/queue-name`` is created suspended.
- The job reconciler (``pkg/controller/jobframework/reconciler.go``): one Workload per Job (owner: the Job);
  an admitted Workload unsuspends its Job with the flavors' nodeLabels/tolerations injected; an evicted
  one re-suspends it with the template restored; a finished Job finishes its Workload.
- The scheduler (``pkg/scheduler/scheduler.go``): each cycle hands every ClusterQueue, LocalQueue and
  Workload to :func:`.kueueadmit.decide_admissions` and writes its verdicts, then the queues' status.
- Kueue's metrics (``pkg/metrics/metrics.go``, :mod:`.kueuemetrics`): each admission and preemption is
  reported as the scheduler reports it; ``/metrics`` is served on loopback behind Kueue's metrics Service.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

from ..resources import ResourceType
from ..store import Obj, TypeKey
from ..verbs import clone, now_rfc3339
from . import kueueobjs as ko
from .base import BY_KEY, Key, SimController
from .context import SimContext
from .kueueadmit import AdmissionPlan, decide_admissions
from .kueuemetrics import KueueMetrics, MetricsEndpoint

log = logging.getLogger(__name__)
JOBS: TypeKey = ("batch", "jobs")
WORKLOADS: TypeKey = (ko.GROUP, "workloads")
CQS: TypeKey = (ko.GROUP, "clusterqueues")
LQS: TypeKey = (ko.GROUP, "localqueues")
FLAVORS: TypeKey = (ko.GROUP, "resourceflavors")
WPCS: TypeKey = (ko.GROUP, "workloadpriorityclasses")
CYCLE: Key = (CQS, "", "")  # the scheduling cycle: one key for every change that can change an admission


class KueueController(SimController):
    name = "kueue"
    watches = (JOBS, WORKLOADS, CQS, LQS, FLAVORS, WPCS)

    def __init__(self, ctx: SimContext, *, metrics_port: int | None = 0) -> None:
        super().__init__(ctx.verbs)
        self.metrics = KueueMetrics(self._live_by_queue)
        self.endpoint = (
            MetricsEndpoint(self.metrics, ctx.verbs, port=metrics_port) if metrics_port is not None else None
        )

    async def start(self) -> None:
        self.verbs.mutating_webhooks.append(suspend_queued_job)
        if self.endpoint is not None:
            await self.endpoint.start()
        await super().start()

    async def stop(self) -> None:
        if suspend_queued_job in self.verbs.mutating_webhooks:
            self.verbs.mutating_webhooks.remove(suspend_queued_job)
        if self.endpoint is not None:
            await self.endpoint.stop()
        await super().stop()

    def _live_by_queue(self) -> Iterator[tuple[str, Obj]]:
        """(ClusterQueue, workload) of every unfinished workload whose LocalQueue points at one."""
        lqs = {
            (o["metadata"]["namespace"], o["metadata"]["name"]): o for o in self.store.items(self._rt(LQS))
        }
        for wl in self.store.items(self._rt(WORKLOADS)):
            if ko.is_true(wl, "Finished"):
                continue
            meta = wl["metadata"]
            lq = lqs.get((meta["namespace"], (wl.get("spec") or {}).get("queueName", "")))
            queue = ((lq or {}).get("spec") or {}).get("clusterQueue")
            if queue:
                yield queue, wl

    def keys_for(self, key: TypeKey, obj: Obj, old: Obj | None) -> Iterable[Key]:
        meta = obj["metadata"]
        if key == JOBS:
            return [(JOBS, meta.get("namespace", ""), meta["name"]), CYCLE]
        if key == WORKLOADS:
            owners = [o["name"] for o in meta.get("ownerReferences") or [] if o.get("kind") == "Job"]
            return [CYCLE, *((JOBS, meta.get("namespace", ""), name) for name in owners)]
        return [CYCLE]

    async def reconcile(self, target: Key) -> None:
        if target == CYCLE:
            self.cycle()
        elif target[0] == JOBS:
            job = self.get(target)
            if job is not None and ko.QUEUE_LABEL in (job["metadata"].get("labels") or {}):
                self.sync_job(job)

    # ---------------------------------------------------------------- jobs
    def _rt(self, key: TypeKey) -> ResourceType:
        return BY_KEY[key]

    def sync_job(self, job: Obj) -> None:
        meta = job["metadata"]
        ns = meta["namespace"]
        wl = self.store.get(self._rt(WORKLOADS), ns, ko.workload_name(meta["name"], meta["uid"]))
        if wl is None:
            self._create_workload(job)
            return
        finished = _job_finished(job)
        if finished is not None:
            if not ko.is_true(wl, "Finished"):
                reason, message = finished
                self._write_conditions(wl, [("Finished", "True", reason, message)])
            return
        suspended = ko.job_suspended(job)
        admitted = ko.is_true(wl, "Admitted")
        if admitted and suspended:
            self._start_job(job, wl)
        elif not admitted and not suspended:
            self._stop_job(job, wl)

    def _create_workload(self, job: Obj) -> None:
        name = (job["metadata"].get("labels") or {}).get(ko.PRIORITY_LABEL)
        priority = None
        if name:
            wpc = self.store.get(self._rt(WPCS), "", name)
            if wpc is None:
                log.warning(
                    "devcluster kueue: job %s: workloadPriorityClass %s not found",
                    job["metadata"]["name"],
                    name,
                )
                return
            priority = (name, int(wpc.get("value") or 0))
        if not (job.get("spec") or {}).get("suspend"):
            self._set_suspend(job, True, None)
        self.verbs.create(self._rt(WORKLOADS), job["metadata"]["namespace"], ko.build_workload(job, priority))

    def _start_job(self, job: Obj, wl: Obj) -> None:
        assignments = ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []
        template = (job.get("spec") or {}).get("template") or {}
        for flavor_name in sorted({f for a in assignments for f in (a.get("flavors") or {}).values()}):
            template = ko.inject_flavor(template, self.store.get(self._rt(FLAVORS), "", flavor_name))
        self._set_suspend(job, False, template)

    def _stop_job(self, job: Obj, wl: Obj) -> None:
        """``job_controller.go`` ``Stop``, three writes as Kueue makes them: suspend (with the
        ``kueue.x-k8s.io/stopping`` annotation, so an interrupted stop is resumed), reset ``status.startTime``
        through the status subresource (the API allows new scheduling directives only for a suspended Job that
        never started), then restore the pod set's template (``RestorePodSetsInfo``) and drop the annotation.
        Each write carries the resourceVersion it read (``clientutil.Patch`` with an optimistic lock)."""
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        if not ko.job_suspended(job):
            new = clone(job)
            new["spec"]["suspend"] = True
            new["metadata"].setdefault("annotations", {})[ko.STOPPING_ANNOTATION] = "true"
            job = self.verbs.update(self._rt(JOBS), ns, name, new)[0]
        if (job.get("status") or {}).get("startTime"):
            status = {k: v for k, v in job["status"].items() if k != "startTime"}
            job = self.verbs.update(
                self._rt(JOBS), ns, name, {**job, "status": status}, subresource="status"
            )[0]
        pod_sets = (wl.get("spec") or {}).get("podSets") or [{}]
        new = clone(job)
        new["spec"]["template"] = ko.restore_template(
            new["spec"].get("template") or {}, pod_sets[0].get("template") or {}
        )
        annotations = new["metadata"].get("annotations") or {}
        annotations.pop(ko.STOPPING_ANNOTATION, None)
        if not annotations:
            new["metadata"].pop("annotations", None)
        if new != job:
            self.verbs.update(self._rt(JOBS), ns, name, new)

    def _set_suspend(self, job: Obj, suspend: bool, template: Obj | None) -> None:
        new = clone(job)
        new["spec"]["suspend"] = suspend
        if template is not None:
            new["spec"]["template"] = template
        self.verbs.update(self._rt(JOBS), job["metadata"]["namespace"], job["metadata"]["name"], new)

    # --------------------------------------------------------------- cycle
    def cycle(self) -> None:
        cqs = {o["metadata"]["name"]: o for o in self.store.items(self._rt(CQS))}
        flavors = {o["metadata"]["name"] for o in self.store.items(self._rt(FLAVORS))}
        lqs = {
            (o["metadata"]["namespace"], o["metadata"]["name"]): o for o in self.store.items(self._rt(LQS))
        }
        queues = {}
        for name, cq in cqs.items():
            spec = ko.queue_spec(cq)
            if all(fq.flavor in flavors for g in spec.groups for fq in g.flavors):
                queues[name] = spec
        views, blocked = [], {}
        live = [wl for wl in self.store.items(self._rt(WORKLOADS)) if not ko.is_true(wl, "Finished")]
        for wl in live:
            meta = wl["metadata"]
            lq = lqs.get((meta["namespace"], (wl.get("spec") or {}).get("queueName", "")))
            cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue", "")
            if lq is None:
                blocked[(meta["namespace"], meta["name"])] = (
                    f"LocalQueue {wl['spec'].get('queueName')} doesn't exist"
                )
            elif cq_name not in cqs:
                blocked[(meta["namespace"], meta["name"])] = f"ClusterQueue {cq_name} doesn't exist"
            elif cq_name not in queues:
                blocked[(meta["namespace"], meta["name"])] = f"ClusterQueue {cq_name} is inactive"
            else:
                views.append(ko.workload_view(wl, cq_name))
        plan = decide_admissions(queues, views)
        self._apply(plan, blocked, {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in live})
        self._queue_status(cqs, queues, lqs)

    def _apply(
        self, plan: AdmissionPlan, blocked: dict[tuple[str, str], str], live: dict[tuple[str, str], Obj]
    ) -> None:
        now = now_rfc3339()
        for admit in plan.admit:
            wl = live[admit.key]
            conditions = ko.previously(list((wl.get("status") or {}).get("conditions") or []), now)
            conditions = ko.set_condition(
                conditions,
                "QuotaReserved",
                "True",
                "QuotaReserved",
                f"Quota reserved in ClusterQueue {admit.cluster_queue}",
                now,
            )
            conditions = ko.set_condition(
                conditions, "Admitted", "True", "Admitted", "The workload is admitted", now
            )
            status = {**(wl.get("status") or {}), "conditions": conditions}
            status["admission"] = ko.admission_status(admit.cluster_queue, admit.assignments)
            self._write_status(wl, status)
            self.metrics.admitted(admit.cluster_queue, wl, time.time())
        for pending in plan.pending:
            self._write_conditions(
                live[pending.key], [("QuotaReserved", "False", "Pending", pending.message)]
            )
        for key, message in blocked.items():
            self._write_conditions(live[key], [("QuotaReserved", "False", "Inadmissible", message)])
        for preempt in plan.preempt:
            wl = live[preempt.key]
            held = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
            self.metrics.evicted(held, wl, "Preempted")
            self._write_conditions(
                wl,
                [
                    ("Evicted", "True", "Preempted", preempt.message),
                    ("Preempted", "True", "InClusterQueue", preempt.message),
                    ("Requeued", "True", "Preempted", preempt.message),
                    ("QuotaReserved", "False", "Pending", preempt.message),
                    ("Admitted", "False", "NoReservation", "The workload has no reservation"),
                ],
                drop_admission=True,
            )

    def _write_conditions(
        self, wl: Obj, changes: list[tuple[str, str, str, str]], *, drop_admission: bool = False
    ) -> None:
        now = now_rfc3339()
        status = dict(wl.get("status") or {})
        conditions = list(status.get("conditions") or [])
        for kind, value, reason, message in changes:
            conditions = ko.set_condition(conditions, kind, value, reason, message, now)
        status["conditions"] = conditions
        if drop_admission:
            status.pop("admission", None)
        self._write_status(wl, status)

    def _write_status(self, obj: Obj, status: Obj, key: TypeKey = WORKLOADS) -> None:
        if status == obj.get("status"):
            return
        meta = obj["metadata"]
        current = self.store.get(self._rt(key), meta.get("namespace", ""), meta["name"]) or obj
        self.verbs.update(
            self._rt(key),
            meta.get("namespace", ""),
            meta["name"],
            {**current, "status": status},
            subresource="status",
        )

    def _queue_status(
        self, cqs: dict[str, Obj], queues: dict[str, Any], lqs: dict[tuple[str, str], Obj]
    ) -> None:
        workloads = [w for w in self.store.items(self._rt(WORKLOADS)) if not ko.is_true(w, "Finished")]
        counts: dict[Any, list[int]] = {}  # by LocalQueue (namespace, name) and by ClusterQueue name
        views: dict[str, list[Any]] = {}
        for wl in workloads:
            meta = wl["metadata"]
            lq_key = (meta["namespace"], (wl.get("spec") or {}).get("queueName", ""))
            cq_name = ((lqs.get(lq_key) or {}).get("spec") or {}).get("clusterQueue", "")
            holds = ko.is_true(wl, "QuotaReserved")
            row = [int(not holds), int(holds), int(ko.is_true(wl, "Admitted"))]
            for k in (lq_key, cq_name):
                counts[k] = [a + b for a, b in zip(counts.get(k, [0, 0, 0]), row, strict=True)]
            if holds:
                views.setdefault(cq_name, []).append(ko.workload_view(wl, cq_name))
        for name, cq in cqs.items():
            pending, reserving, admitted = counts.get(name, [0, 0, 0])
            active = name in queues
            status = {
                **(cq.get("status") or {}),
                "pendingWorkloads": pending,
                "reservingWorkloads": reserving,
                "admittedWorkloads": admitted,
                "conditions": ko.set_condition(
                    list((cq.get("status") or {}).get("conditions") or []),
                    "Active",
                    "True" if active else "False",
                    "Ready" if active else "FlavorNotFound",
                    "Can admit new workloads"
                    if active
                    else "Can't admit new workloads: references missing ResourceFlavor(s)",
                    now_rfc3339(),
                ),
            }
            if active:
                spec = queues[name]
                nominal = {
                    (fq.flavor, r): q for g in spec.groups for fq in g.flavors for r, q in fq.nominal.items()
                }
                totals = ko.flavor_totals(views.get(name, []), spec, nominal)
                status["flavorsReservation"] = totals
                status["flavorsUsage"] = totals
            self._write_status(cq, status, CQS)
        for key, lq in lqs.items():
            pending, reserving, admitted = counts.get(key, [0, 0, 0])
            status = {
                **(lq.get("status") or {}),
                "pendingWorkloads": pending,
                "reservingWorkloads": reserving,
                "admittedWorkloads": admitted,
            }
            self._write_status(lq, status, LQS)


def suspend_queued_job(rt: ResourceType, obj: Obj) -> None:
    """Kueue's Job webhook ``Default``: a Job that names a queue is created suspended."""
    if rt.key == JOBS and ko.QUEUE_LABEL in ((obj.get("metadata") or {}).get("labels") or {}):
        obj.setdefault("spec", {})["suspend"] = True


def _job_finished(job: Obj) -> tuple[str, str] | None:
    """``job_controller.go::Finished``: (reason, message) once the Job is Complete or Failed; the message is
    the Job condition's (the Job controller always writes one; the fallbacks are ours)."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Complete":
            return "Succeeded", cond.get("message") or "Job finished successfully"
        if cond.get("type") == "Failed":
            return "Failed", cond.get("message") or "Job failed"
    return None
