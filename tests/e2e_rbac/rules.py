"""The RBAC rules under test, and which of them a request of the devcluster's log used.

A request log record names the verb, ``resource[/subresource]`` (the plural), namespace and name, but
not the API group; the group is every group that serves that plural (``events`` is served by both the
core group and ``events.k8s.io``). Every request of the run is also asserted allowed, so a candidate
group no rule grants cannot hide a denial.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuworkspace_spawner.devcluster.rbac import RequestAttributes, rule_allows
from gpuworkspace_spawner.devcluster.resources import (
    KUBEVIRT_SUBRESOURCE_GROUP,
    KUBEVIRT_VM_ACTIONS,
    RESOURCE_TYPES,
)

from .conftest import HUB_SA, MANIFESTS, load_documents, manifest_files

HUB_USER = f"system:serviceaccount:{HUB_SA[0]}:{HUB_SA[1]}"


@dataclass(frozen=True)
class Rule:
    """One PolicyRule of a Role (``namespace`` set) or ClusterRole, bound to the hub's ServiceAccount."""

    source: str  # the file, relative to helm-values/extra-manifests (or the fixture's name)
    kind: str
    namespace: str
    role: str
    index: int
    rule: dict[str, Any] = field(hash=False, compare=False)

    @property
    def id(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        what = ",".join(self.rule["resources"])
        return f"{self.source}:{self.kind}/{where}{self.role}#{self.index}:{what}"

    def applies_in(self, namespace: str) -> bool:
        return not self.namespace or self.namespace == namespace


def _bound_to_hub(doc: dict[str, Any]) -> bool:
    return any(
        s.get("kind") == "ServiceAccount" and (s.get("namespace"), s.get("name")) == HUB_SA
        for s in doc.get("subjects") or []
    )


def all_rules() -> list[Rule]:
    """Every rule of every Role/ClusterRole that some binding in the same files gives the hub."""
    docs = [(path, doc) for path in manifest_files() for doc in load_documents(path)]
    bound = {
        (d["roleRef"]["kind"], d["metadata"].get("namespace", ""), d["roleRef"]["name"])
        for _, d in docs
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding") and _bound_to_hub(d)
    }
    rules = []
    for path, doc in docs:
        if doc["kind"] not in ("Role", "ClusterRole"):
            continue
        namespace = doc["metadata"].get("namespace", "")
        if (doc["kind"], namespace, doc["metadata"]["name"]) not in bound:
            raise AssertionError(f"{path.name}: {doc['kind']} {doc['metadata']['name']} is bound to nobody")
        source = str(path.relative_to(MANIFESTS)) if path.is_relative_to(MANIFESTS) else path.name
        for i, rule in enumerate(doc["rules"]):
            rules.append(Rule(source, doc["kind"], namespace, doc["metadata"]["name"], i, rule))
    return rules


def _groups_serving(plural: str) -> set[str]:
    return {rt.group for rt in RESOURCE_TYPES if rt.plural == plural}


def attributes(record: dict[str, Any]) -> list[RequestAttributes]:
    """What a logged request asked for, once per API group that serves its resource."""
    resource, _, subresource = record["resource"].partition("/")
    groups = {KUBEVIRT_SUBRESOURCE_GROUP} if subresource in KUBEVIRT_VM_ACTIONS else _groups_serving(resource)
    return [
        RequestAttributes(
            verb=record["verb"],
            api_group=group,
            resource=resource,
            subresource=subresource,
            namespace=record["namespace"],
            name=record["name"],
        )
        for group in sorted(groups)
    ]


def grants(rule: Rule) -> list[tuple[str, str, str]]:
    """(verb, group, resource) triples the rule grants."""
    r = rule.rule
    return [(v, g, res) for v in r["verbs"] for g in r["apiGroups"] for res in r["resources"]]


def uses(rule: Rule, records: Iterable[dict[str, Any]]) -> dict[tuple[str, str, str], int]:
    """How many requests each of the rule's grants allowed (a grant no request used counts 0)."""
    counts = dict.fromkeys(grants(rule), 0)
    for record in records:
        if not rule.applies_in(record["namespace"]):
            continue
        for attrs in attributes(record):
            if rule_allows(rule.rule, attrs):
                combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
                key = (attrs.verb, attrs.api_group, combined)
                if key in counts:
                    counts[key] += 1
    return counts


def covers(rule: Rule, record: dict[str, Any]) -> bool:
    """Whether ``rule`` allows the logged request (for some API group that serves its resource)."""
    return rule.applies_in(record["namespace"]) and any(
        rule_allows(rule.rule, attrs) for attrs in attributes(record)
    )


def sole_uses(rule: Rule, rules: Iterable[Rule], records: Iterable[dict[str, Any]]) -> int:
    """Requests ``rule`` allows and no other rule does: each would be denied without it."""
    others = [r for r in rules if r != rule]
    return sum(1 for rec in records if covers(rule, rec) and not any(covers(o, rec) for o in others))
