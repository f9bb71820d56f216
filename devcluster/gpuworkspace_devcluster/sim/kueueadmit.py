"""Kueue's admission cycle as a pure function: queue quotas + workloads in, admissions/preemptions out.

One call is one scheduling cycle of Kueue's scheduler (``pkg/scheduler/scheduler.go::schedule``):
pending workloads are taken highest priority first, then oldest (BestEffortFIFO), each is given the first
flavor of every resource group that fits (``pkg/scheduler/flavorassigner/flavorassigner.go``), with the
same messages Kueue writes when none fits. Quota is ``nominalQuota``, plus what the ClusterQueue may borrow
from unused quota in its cohort up to ``borrowingLimit``. With ``preemption.withinClusterQueue:
LowerPriority`` a workload that does not fit evicts the fewest lower-priority workloads of its own
ClusterQueue (``pkg/scheduler/preemption/preemption.go``); it is admitted in a later cycle, once they are
gone, as in Kueue. The controller in :mod:`.kueue` turns the verdicts into API writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal

Usage = dict[tuple[str, str, str], Decimal]  # (cluster queue, flavor, resource) -> amount in use
WorkloadKey = tuple[str, str]  # (namespace, name)
POD_SET_PREFIX = "couldn't assign flavors to pod set"
IN_CLUSTER_QUEUE = "prioritization in the ClusterQueue"  # preemption.HumanReadablePreemptionReasons


@dataclass(frozen=True)
class FlavorQuota:
    """One ``resourceGroups[].flavors[]`` entry: per resource its nominal quota and borrowing limit."""

    flavor: str
    nominal: Mapping[str, Decimal]
    borrowing_limit: Mapping[str, Decimal | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ResourceGroup:
    covered: tuple[str, ...]
    flavors: tuple[FlavorQuota, ...]


@dataclass(frozen=True)
class QueueSpec:
    """A ClusterQueue as the cycle sees it."""

    name: str
    groups: tuple[ResourceGroup, ...]
    cohort: str = ""
    preempt_lower_priority: bool = False


@dataclass(frozen=True)
class PodSet:
    name: str
    count: int
    per_pod: Mapping[str, Decimal]  # requests of one pod


@dataclass(frozen=True)
class Assignment:
    """``status.admission.podSetAssignments[]``: the flavor of each resource and the total usage."""

    name: str
    count: int
    flavors: Mapping[str, str]
    usage: Mapping[str, Decimal]


@dataclass(frozen=True)
class WorkloadView:
    key: WorkloadKey
    uid: str
    cluster_queue: str
    priority: int
    created: str  # creationTimestamp (RFC 3339 sorts as text)
    pod_sets: tuple[PodSet, ...]
    admitted: tuple[Assignment, ...] | None = None  # set while it holds a quota reservation
    job_uid: str = ""


@dataclass(frozen=True)
class Admit:
    key: WorkloadKey
    cluster_queue: str
    assignments: tuple[Assignment, ...]


@dataclass(frozen=True)
class Pending:
    key: WorkloadKey
    message: str


@dataclass(frozen=True)
class Preempt:
    key: WorkloadKey
    cluster_queue: str
    message: str


@dataclass(frozen=True)
class AdmissionPlan:
    admit: tuple[Admit, ...] = ()
    pending: tuple[Pending, ...] = ()
    preempt: tuple[Preempt, ...] = ()


def quantity_text(value: Decimal) -> str:
    """A quantity as Kueue prints it in messages (whole numbers plain, fractions in milli-units)."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int(value * 1000)}m"


def usage_of(queues: Mapping[str, QueueSpec], workloads: Iterable[WorkloadView]) -> Usage:
    """What the admitted workloads hold, per (cluster queue, flavor, resource)."""
    used: Usage = {}
    for wl in workloads:
        if wl.admitted is None or wl.cluster_queue not in queues:
            continue
        for assignment in wl.admitted:
            for resource, flavor in assignment.flavors.items():
                k = (wl.cluster_queue, flavor, resource)
                used[k] = used.get(k, Decimal(0)) + assignment.usage.get(resource, Decimal(0))
    return used


def _quota(cq: QueueSpec, flavor: str, resource: str) -> tuple[Decimal, Decimal | None]:
    for group in cq.groups:
        for fq in group.flavors:
            if fq.flavor == flavor and resource in fq.nominal:
                return fq.nominal[resource], fq.borrowing_limit.get(resource)
    return Decimal(0), Decimal(0)


def _capacity(
    queues: Mapping[str, QueueSpec], used: Usage, cq: QueueSpec, flavor: str, resource: str
) -> tuple[Decimal, Decimal]:
    """(available now, maximum capacity) of ``resource`` in ``flavor`` for ``cq``, borrowing included."""
    nominal, limit = _quota(cq, flavor, resource)
    own_free = nominal - used.get((cq.name, flavor, resource), Decimal(0))
    if not cq.cohort:
        return own_free, nominal
    members = [q for q in queues.values() if q.cohort == cq.cohort]
    cohort_nominal = sum((_quota(q, flavor, resource)[0] for q in members), Decimal(0))
    cohort_used = sum((used.get((q.name, flavor, resource), Decimal(0)) for q in members), Decimal(0))
    maximum = cohort_nominal if limit is None else min(cohort_nominal, nominal + limit)
    available = min(cohort_nominal - cohort_used, maximum - (nominal - own_free))
    return available, maximum


def _fit_flavor(
    queues: Mapping[str, QueueSpec], used: Usage, cq: QueueSpec, fq: FlavorQuota, need: Mapping[str, Decimal]
) -> str | None:
    """None when every needed resource fits in the flavor, else Kueue's reason for the first that does not."""
    for resource, amount in need.items():
        if resource not in fq.nominal:
            return f"flavor {fq.flavor} has no quota for {resource}"  # not reached: groups cover all flavors
        available, maximum = _capacity(queues, used, cq, fq.flavor, resource)
        if amount > maximum:
            return (
                f"insufficient quota for {resource} in flavor {fq.flavor}, request > maximum capacity "
                f"({quantity_text(amount)} > {quantity_text(maximum)})"
            )
        if amount > available:
            return (
                f"insufficient unused quota for {resource} in flavor {fq.flavor}, "
                f"{quantity_text(amount - available)} more needed"
            )
    return None


def assign_flavors(
    queues: Mapping[str, QueueSpec], used: Usage, cq: QueueSpec, wl: WorkloadView
) -> tuple[tuple[Assignment, ...] | None, str]:
    """The flavors for every pod set of ``wl`` (with the usage they take), or None and Kueue's message."""
    trial = dict(used)
    out: list[Assignment] = []
    for ps in wl.pod_sets:
        total = {r: q * ps.count for r, q in ps.per_pod.items() if q > 0}
        flavors: dict[str, str] = {}
        for resource in total:
            if not any(resource in g.covered for g in cq.groups):
                return None, f"{POD_SET_PREFIX} {ps.name}: resource {resource} unavailable in ClusterQueue"
        for group in cq.groups:
            need = {r: q for r, q in total.items() if r in group.covered}
            if not need:
                continue
            reasons: list[str] = []
            for fq in group.flavors:
                reason = _fit_flavor(queues, trial, cq, fq, need)
                if reason is None:
                    flavors |= dict.fromkeys(need, fq.flavor)
                    break
                reasons.append(reason)
            else:
                return None, f"{POD_SET_PREFIX} {ps.name}: {', '.join(reasons)}"
        for resource, flavor in flavors.items():
            k = (cq.name, flavor, resource)
            trial[k] = trial.get(k, Decimal(0)) + total[resource]
        out.append(Assignment(ps.name, ps.count, flavors, total))
    return tuple(out), ""


def _release(used: Usage, wl: WorkloadView) -> Usage:
    out = dict(used)
    for assignment in wl.admitted or ():
        for resource, flavor in assignment.flavors.items():
            k = (wl.cluster_queue, flavor, resource)
            out[k] = out.get(k, Decimal(0)) - assignment.usage.get(resource, Decimal(0))
    return out


def find_victims(
    queues: Mapping[str, QueueSpec], used: Usage, wl: WorkloadView, admitted: Sequence[WorkloadView]
) -> list[WorkloadView]:
    """The fewest lower-priority workloads of ``wl``'s ClusterQueue whose eviction lets it fit ([] if none).

    Kueue's order (``candidatesOrdering``): lowest priority first, then the most recently created; then the
    minimal set is kept by trying to give back each chosen victim, last chosen first.
    """
    cq = queues[wl.cluster_queue]
    candidates = sorted(
        (c for c in admitted if c.cluster_queue == cq.name and c.priority < wl.priority),
        key=lambda c: (c.priority, _desc(c.created)),
    )
    chosen: list[WorkloadView] = []
    trial = used
    for candidate in candidates:
        chosen.append(candidate)
        trial = _release(trial, candidate)
        if assign_flavors(queues, trial, cq, wl)[0] is not None:
            break
    else:
        return []
    for victim in reversed(chosen[:-1]):
        back = dict(trial)
        for a in victim.admitted or ():
            for resource, flavor in a.flavors.items():
                k = (cq.name, flavor, resource)
                back[k] = back.get(k, Decimal(0)) + a.usage.get(resource, Decimal(0))
        if assign_flavors(queues, back, cq, wl)[0] is not None:
            chosen.remove(victim)
            trial = back
    return chosen


def _desc(text: str) -> tuple[int, ...]:
    return tuple(-ord(ch) for ch in text)


def preemption_message(preemptor: WorkloadView, cluster_queue: str) -> str:
    """``preemption.go::preemptionMessage`` for a preemption within the ClusterQueue (no cohort tree)."""
    return (
        f"Preempted to accommodate a workload (UID: {preemptor.uid or 'UNKNOWN'}, "
        f"JobUID: {preemptor.job_uid or 'UNKNOWN'}) due to {IN_CLUSTER_QUEUE}; "
        f"preemptor path: /{cluster_queue}; preemptee path: /{cluster_queue}"
    )


def decide_admissions(queues: Mapping[str, QueueSpec], workloads: Sequence[WorkloadView]) -> AdmissionPlan:
    """One admission cycle over every ClusterQueue (workloads of unknown queues are the caller's to report)."""
    admitted = [wl for wl in workloads if wl.admitted is not None and wl.cluster_queue in queues]
    waiting = sorted(
        (wl for wl in workloads if wl.admitted is None and wl.cluster_queue in queues),
        key=lambda wl: (-wl.priority, wl.created, wl.key),
    )
    used = usage_of(queues, admitted)
    admit: list[Admit] = []
    pending: list[Pending] = []
    preempt: list[Preempt] = []
    preempting: set[str] = set()  # one preemptor per ClusterQueue and cycle
    for wl in waiting:
        cq = queues[wl.cluster_queue]
        assignments, message = assign_flavors(queues, used, cq, wl)
        if assignments is not None:
            admit.append(Admit(wl.key, cq.name, assignments))
            admitted.append(replace(wl, admitted=assignments))
            for assignment in assignments:
                for resource, flavor in assignment.flavors.items():
                    k = (cq.name, flavor, resource)
                    used[k] = used.get(k, Decimal(0)) + assignment.usage[resource]
            continue
        pending.append(Pending(wl.key, message))
        if cq.preempt_lower_priority and cq.name not in preempting:
            victims = find_victims(queues, used, wl, admitted)
            if victims:
                preempting.add(cq.name)
                text = preemption_message(wl, cq.name)
                preempt += [Preempt(v.key, cq.name, text) for v in victims]
    return AdmissionPlan(tuple(admit), tuple(pending), tuple(preempt))
