"""Pure translations between Kueue's API objects and the admission core (:mod:`.kueueadmit`).

Names, labels, conditions and messages are Kueue 0.19's: ``pkg/controller/jobframework/workload_names.go``
(Workload names), ``pkg/controller/jobs/job/job_controller.go`` (pod sets of a batch Job),
``pkg/workload/workload.go`` (conditions), ``pkg/controller/core/clusterqueue_controller.go`` (status).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from ..quantity import parse_quantity
from ..store import owner_ref
from .kueueadmit import Assignment, FlavorQuota, PodSet, QueueSpec, ResourceGroup, WorkloadView, quantity_text

Obj = dict[str, Any]
GROUP = "kueue.x-k8s.io"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
STOPPING_ANNOTATION = "kueue.x-k8s.io/stopping"  # job_controller.go StoppingAnnotation
# labels the Job controller manages: not copied into the Workload, kept on restore (job_controller.go)
MANAGED_LABELS = (
    "job-name",
    "controller-uid",
    "batch.kubernetes.io/job-name",
    "batch.kubernetes.io/controller-uid",
)
MAIN = "main"  # a batch Job has one pod set


def workload_name(job_name: str, job_uid: str, kind: str = "Job", group: str = "batch") -> str:
    """``GetWorkloadNameForOwnerWithGVK``: ``<kind>-<name>`` (cut to 247) + ``-`` + 5 hex of a SHA-1."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{job_name}\n{job_uid}".encode(), usedforsecurity=False)
    return f"{f'{kind.lower()}-{job_name}'[: 253 - 1 - 5]}-{digest.hexdigest()[:5]}"


def pod_requests(template_spec: Obj) -> dict[str, Decimal]:
    """A pod's requests: the sum over its containers (requests, else limits, as the API server defaults)."""
    total: dict[str, Decimal] = {}
    for container in template_spec.get("containers") or []:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in merged.items():
            total[name] = total.get(name, Decimal(0)) + parse_quantity(value)
    return total


def job_pod_count(job: Obj) -> int:
    """``job_controller.go::podsCount``: parallelism (default 1), capped by completions."""
    spec = job.get("spec") or {}
    count = int(spec.get("parallelism", 1))
    if spec.get("completions") is not None:
        count = min(count, int(spec["completions"]))
    return count


def job_suspended(job: Obj) -> bool:
    """``job_controller.go::IsSuspended``: ``spec.suspend`` and no stop in progress (stopping annotation)."""
    annotations = job["metadata"].get("annotations") or {}
    return bool((job.get("spec") or {}).get("suspend")) and annotations.get(STOPPING_ANNOTATION) != "true"


def pod_set_template(job: Obj) -> Obj:
    """``PodSets``: the Job's template without the labels the Job controller manages (``cleanManagedLabels``)."""
    template = dict((job.get("spec") or {}).get("template") or {})
    meta = dict(template.get("metadata") or {})
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in MANAGED_LABELS}
    if labels:
        meta["labels"] = labels
    else:
        meta.pop("labels", None)
    return {**template, "metadata": meta}


def build_workload(job: Obj, priority: tuple[str, int] | None) -> Obj:
    """The Workload Kueue's job reconciler creates for a queue-labelled batch Job."""
    meta = job["metadata"]
    template = pod_set_template(job)
    spec: Obj = {
        "active": True,
        "queueName": meta["labels"][QUEUE_LABEL],
        "podSets": [{"name": MAIN, "count": job_pod_count(job), "template": template}],
    }
    if priority is not None:
        spec["priorityClassRef"] = {"group": GROUP, "kind": "WorkloadPriorityClass", "name": priority[0]}
        spec["priority"] = priority[1]
    return {
        "apiVersion": f"{GROUP}/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(meta["name"], meta["uid"]),
            "namespace": meta["namespace"],
            "labels": {JOB_UID_LABEL: meta["uid"]},
            "ownerReferences": [owner_ref({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta})],
        },
        "spec": spec,
    }


def queue_spec(cq: Obj) -> QueueSpec:
    spec = cq.get("spec") or {}
    groups = []
    for group in spec.get("resourceGroups") or []:
        flavors = []
        for flavor in group.get("flavors") or []:
            nominal: dict[str, Decimal] = {}
            limits: dict[str, Decimal | None] = {}
            for res in flavor.get("resources") or []:
                nominal[res["name"]] = parse_quantity(res["nominalQuota"])
                limit = res.get("borrowingLimit")
                limits[res["name"]] = None if limit is None else parse_quantity(limit)
            flavors.append(FlavorQuota(flavor["name"], nominal, limits))
        groups.append(ResourceGroup(tuple(group.get("coveredResources") or ()), tuple(flavors)))
    within = ((spec.get("preemption") or {}).get("withinClusterQueue")) or "Never"
    return QueueSpec(
        cq["metadata"]["name"], tuple(groups), spec.get("cohortName") or "", within == "LowerPriority"
    )


def condition(wl: Obj, kind: str) -> Obj | None:
    for cond in (wl.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def is_true(wl: Obj, kind: str) -> bool:
    cond = condition(wl, kind)
    return cond is not None and cond.get("status") == "True"


def admission_of(wl: Obj) -> tuple[Assignment, ...] | None:
    admission = (wl.get("status") or {}).get("admission")
    if not admission or not is_true(wl, "QuotaReserved"):
        return None
    return tuple(
        Assignment(
            psa["name"],
            int(psa.get("count", 1)),
            dict(psa.get("flavors") or {}),
            {r: parse_quantity(q) for r, q in (psa.get("resourceUsage") or {}).items()},
        )
        for psa in admission.get("podSetAssignments") or []
    )


def workload_view(wl: Obj, cluster_queue: str) -> WorkloadView:
    meta = wl["metadata"]
    spec = wl.get("spec") or {}
    pod_sets = tuple(
        PodSet(
            ps.get("name", MAIN),
            int(ps.get("count", 1)),
            pod_requests((ps.get("template") or {}).get("spec") or {}),
        )
        for ps in spec.get("podSets") or []
    )
    return WorkloadView(
        key=(meta["namespace"], meta["name"]),
        uid=meta.get("uid", ""),
        cluster_queue=cluster_queue,
        priority=int(spec.get("priority") or 0),
        created=meta.get("creationTimestamp", ""),
        pod_sets=pod_sets,
        admitted=admission_of(wl),
        job_uid=(meta.get("labels") or {}).get(JOB_UID_LABEL, ""),
    )


def admission_status(cluster_queue: str, assignments: Iterable[Assignment]) -> Obj:
    return {
        "clusterQueue": cluster_queue,
        "podSetAssignments": [
            {
                "name": a.name,
                "count": a.count,
                "flavors": dict(a.flavors),
                "resourceUsage": {r: quantity_text(q) for r, q in a.usage.items()},
            }
            for a in assignments
        ],
    }


def set_condition(
    conditions: list[Obj], kind: str, status: str, reason: str, message: str, now: str
) -> list[Obj]:
    """``apimeta.SetStatusCondition``: lastTransitionTime changes only when the status does."""
    out = [dict(c) for c in conditions]
    for cond in out:
        if cond.get("type") == kind:
            if cond.get("status") != status:
                cond["lastTransitionTime"] = now
            cond |= {"status": status, "reason": reason, "message": message}
            return out
    out.append(
        {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": now}
    )
    return out


def previously(conditions: list[Obj], now: str) -> list[Obj]:
    """On re-admission Kueue flips Evicted/Preempted/Requeued-by-preemption to False, "Previously: ..."."""
    out = conditions
    for kind in ("Evicted", "Preempted"):
        cond = next((c for c in out if c.get("type") == kind and c.get("status") == "True"), None)
        if cond is not None:
            out = set_condition(out, kind, "False", "QuotaReserved", f"Previously: {cond['message']}", now)
    return out


def flavor_totals(
    views: Iterable[WorkloadView], queue: QueueSpec, nominal_of: Mapping[tuple[str, str], Decimal]
) -> list[Obj]:
    """``status.flavorsReservation``/``flavorsUsage``: total and borrowed per flavor and resource."""
    used: dict[tuple[str, str], Decimal] = {}
    for view in views:
        for a in view.admitted or ():
            for resource, flavor in a.flavors.items():
                used[(flavor, resource)] = used.get((flavor, resource), Decimal(0)) + a.usage.get(
                    resource, Decimal(0)
                )
    out = []
    for group in queue.groups:
        for fq in group.flavors:
            resources = []
            for resource in group.covered:
                total = used.get((fq.flavor, resource), Decimal(0))
                borrowed = max(Decimal(0), total - nominal_of.get((fq.flavor, resource), Decimal(0)))
                resources.append(
                    {"name": resource, "total": quantity_text(total), "borrowed": quantity_text(borrowed)}
                )
            out.append({"name": fq.flavor, "resources": resources})
    return out


def inject_flavor(template: Obj, flavor: Obj | None) -> Obj:
    """The pod template with the flavor's nodeLabels merged into nodeSelector and its tolerations appended."""
    out = {**template, "spec": dict(template.get("spec") or {})}
    spec = (flavor or {}).get("spec") or {}
    if spec.get("nodeLabels"):
        out["spec"]["nodeSelector"] = {**(out["spec"].get("nodeSelector") or {}), **spec["nodeLabels"]}
    tolerations = list(out["spec"].get("tolerations") or [])
    for toleration in spec.get("tolerations") or []:
        if toleration not in tolerations:
            tolerations.append(toleration)
    if tolerations:
        out["spec"]["tolerations"] = tolerations
    return out


def restore_template(template: Obj, original: Obj) -> Obj:
    """``RestorePodSetsInfo`` + ``podset.RestorePodSpec``: the pod set's labels (plus the Job-managed labels
    the template has), annotations, nodeSelector, tolerations and schedulingGates, as the Workload keeps them."""
    meta, spec = dict(template.get("metadata") or {}), dict(template.get("spec") or {})
    old_meta, old_spec = original.get("metadata") or {}, original.get("spec") or {}
    labels = dict(old_meta.get("labels") or {})
    labels |= {k: v for k, v in (meta.get("labels") or {}).items() if k in MANAGED_LABELS}
    for target, source, key in (
        (meta, {"labels": labels or None}, "labels"),
        (meta, old_meta, "annotations"),
        (spec, old_spec, "nodeSelector"),
        (spec, old_spec, "tolerations"),
        (spec, old_spec, "schedulingGates"),
    ):
        if source.get(key):
            target[key] = source[key]
        else:
            target.pop(key, None)
    return {**template, "metadata": meta, "spec": spec}
