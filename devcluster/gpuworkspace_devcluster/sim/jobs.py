"""The Job controller and the TTL-after-finished controller of kube-controller-manager, simulated.

The I/O shell around :func:`sim.jobstate.plan_job`: it lists a Job's pods (by controller ownerReference),
applies the plan through the API verbs (pods from ``spec.template`` named ``<job>-<5 random>`` with the
generated labels, a controller ownerReference and the ``batch.kubernetes.io/job-tracking`` finalizer;
Events SuccessfulCreate/SuccessfulDelete/Completed/BackoffLimitExceeded/DeadlineExceeded/Suspended/
Resumed from ``job-controller``), and removes the tracking finalizer from pods of a deleted Job so the
garbage collector can finish them. ``ttlSecondsAfterFinished`` deletes a finished Job with
``propagationPolicy: Foreground`` once the time since its Complete/Failed condition has passed
(``pkg/controller/ttlafterfinished``). Job pods are ordinary pods: the scheduler places them and the
simulated kubelet runs their command (``sim/images.py`` says which images run what).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable
from typing import Any

from ..jobspec import TRACKING_FINALIZER, condition
from ..store import Obj, TypeKey, owner_ref
from ..tables import parse_time
from ..verbs import now_rfc3339
from .base import Key, SimController, rt_of
from .context import SimContext
from .csi import drop_finalizers, merge_patch
from .events import record_event
from .jobstate import INDEX_KEY, plan_job

JOBS = rt_of("batch", "jobs")
PODS = rt_of("", "pods")
COMPONENT = "job-controller"
TTL_COMPONENT = "ttl-after-finished-controller"


def _epoch(value: Any) -> float | None:
    when = parse_time(value)
    return when.timestamp() if when else None


def _owner(pod: Obj) -> tuple[str, str]:
    """(uid, name) of the pod's controlling Job, or empty strings."""
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Job" and ref.get("apiVersion") == "batch/v1":
            return str(ref.get("uid", "")), str(ref.get("name", ""))
    return "", ""


def _owner_uid(pod: Obj) -> str:
    return _owner(pod)[0]


def _last_failure(pods: list[Obj]) -> float | None:
    """When the newest failure happened: a failed container's finishedAt, or a deleted pod's deletion
    (``getFinishedTime`` falls back to the deletion timestamp)."""
    times: list[float | None] = []
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") == "Failed":
            times += [
                _epoch(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
                for cs in status.get("containerStatuses") or []
            ]
        elif status.get("phase") != "Succeeded" and pod["metadata"].get("deletionTimestamp"):
            times.append(_epoch(pod["metadata"]["deletionTimestamp"]))
    found = [t for t in times if t is not None]
    return max(found) if found else None


def pod_from_template(job: Obj, index: int | None = None) -> Obj:
    """The pod the Job controller creates (``GetPodFromTemplate`` with a controller ownerReference); for
    an Indexed Job, with its completion index (annotation, label, hostname ``<job>-<index>`` and the
    ``JOB_COMPLETION_INDEX`` variable, as ``addCompletionIndexEnvVariables`` sets them)."""
    meta, template = job["metadata"], (job.get("spec") or {}).get("template") or {}
    tmeta = template.get("metadata") or {}
    owner = owner_ref({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta})
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{meta['name']}-",
            "labels": dict(tmeta.get("labels") or {}),
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [owner],
            "finalizers": [TRACKING_FINALIZER],
        },
        "spec": copy.deepcopy(template.get("spec") or {}),
    }
    if index is not None:
        _add_index(pod, meta["name"], index)
    return pod


def _add_index(pod: Obj, job_name: str, index: int) -> None:
    """``addCompletionIndexAnnotation``/``addCompletionIndexEnvVariables``, the index label and hostname."""
    meta, spec = pod["metadata"], pod["spec"]
    meta["generateName"] = f"{job_name}-{index}-"
    meta["annotations"][INDEX_KEY] = str(index)
    meta["labels"][INDEX_KEY] = str(index)
    spec.setdefault("hostname", f"{job_name}-{index}")
    ref = {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_KEY}']"}}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        env = container.setdefault("env", [])
        if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
            env.append({"name": "JOB_COMPLETION_INDEX", "valueFrom": ref})


class JobController(SimController):
    """batch/v1 Jobs: pods, counts, conditions, suspend, deadlines, backoff, TTL."""

    name = "job-controller"
    watches: tuple[TypeKey, ...] = (JOBS.key, PODS.key)

    def __init__(self, ctx: SimContext) -> None:
        super().__init__(ctx.verbs)
        self.ctx = ctx

    def keys_for(self, key: TypeKey, obj: Obj, old: Obj | None) -> Iterable[Key]:
        meta = obj["metadata"]
        if key == JOBS.key:
            return [(key, meta["namespace"], meta["name"])]
        uid, job = _owner(obj)
        return [(JOBS.key, meta["namespace"], job)] if uid and job else []

    def _pods(self, namespace: str, uid: str) -> list[Obj]:
        return [p for p in self.store.items(PODS, namespace) if _owner_uid(p) == uid]

    async def reconcile(self, target: Key) -> None:
        namespace, name = target[1], target[2]
        job = self.get(target)
        if job is None or job["metadata"].get("deletionTimestamp"):
            self._release_orphans(namespace, name, job)
            return
        uid = job["metadata"]["uid"]
        pods = self._pods(namespace, uid)
        now_s = time.time()
        start_s = _epoch((job.get("status") or {}).get("startTime"))
        plan = plan_job(job, pods, now_rfc3339(), now_s, start_s, _last_failure(pods))
        by_name = {p["metadata"]["name"]: p for p in pods}
        for pod_name in plan.release:
            drop_finalizers(self.verbs, PODS, by_name[pod_name], TRACKING_FINALIZER)
        for pod_name in plan.delete:
            pod = by_name[pod_name]
            drop_finalizers(
                self.verbs, PODS, self.store.get(PODS, namespace, pod_name) or pod, TRACKING_FINALIZER
            )
            self.verbs.delete(PODS, namespace, pod_name, {})
            record_event(
                self.verbs, job, "Normal", "SuccessfulDelete", f"Deleted pod: {pod_name}", component=COMPONENT
            )
        for i in range(plan.create):
            index = plan.indexes[i] if plan.indexes else None
            pod, _warnings = self.verbs.create(PODS, namespace, pod_from_template(job, index))
            created = pod["metadata"]["name"]
            record_event(
                self.verbs, job, "Normal", "SuccessfulCreate", f"Created pod: {created}", component=COMPONENT
            )
        if plan.status != (job.get("status") or {}):
            # guarded by the resourceVersion read, as the controller's UpdateStatus is: a status computed
            # from a Job that changed meanwhile (Kueue's Stop resets startTime) is retried, not written
            rv = job["metadata"]["resourceVersion"]
            patch = {"metadata": {"resourceVersion": rv}, "status": plan.status}
            job = merge_patch(self.verbs, JOBS, job, patch, status=True)
        for event_type, reason, message in plan.events:
            record_event(self.verbs, job, event_type, reason, message, component=COMPONENT)
        if plan.finished:
            self._ttl(target, job, now_s)
        elif plan.requeue_s is not None:
            self.requeue_after(target, plan.requeue_s)

    def _ttl(self, target: Key, job: Obj, now_s: float) -> None:
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        done = condition(job, "Complete") or condition(job, "Failed")
        if ttl is None or done is None:
            return
        finished_s = _epoch(done.get("lastTransitionTime")) or now_s
        remaining = finished_s + float(ttl) - now_s
        if remaining > 0:
            self.requeue_after(target, remaining + 0.05)
            return
        meta = job["metadata"]
        options = {"propagationPolicy": "Foreground", "preconditions": {"uid": meta["uid"]}}
        self.verbs.delete(JOBS, meta["namespace"], meta["name"], options)

    def _release_orphans(self, namespace: str, name: str, job: Obj | None) -> None:
        """A deleted (or deleting) Job's pods lose the tracking finalizer (``canRemoveFinalizer``: the Job is
        terminating), so the garbage collector can delete them."""
        for pod in self.store.items(PODS, namespace):
            uid, owner = _owner(pod)
            if owner != name or (job is not None and uid != job["metadata"]["uid"]):
                continue
            drop_finalizers(self.verbs, PODS, pod, TRACKING_FINALIZER)
