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

from gpuworkspace_devcluster.rbac import RequestAttributes, rule_allows
from gpuworkspace_devcluster.resources import (
    KUBEVIRT_SUBRESOURCE_GROUP,
    KUBEVIRT_VM_ACTIONS,
    RESOURCE_TYPES,
)

from .conftest import HUB_SA, IDENTITIES, MANIFESTS, load_documents, manifest_files, user_of

HUB_USER = user_of(HUB_SA)
USERS = tuple(user_of(identity) for identity in IDENTITIES)


@dataclass(frozen=True)
class Rule:
    """One PolicyRule of a Role (``namespace`` set) or ClusterRole, bound to one ServiceAccount (``user``)."""

    source: str  # the file, relative to helm-values/extra-manifests (or the fixture's name)
    kind: str
    namespace: str
    role: str
    index: int
    user: str  # system:serviceaccount:<namespace>:<name> of the one ServiceAccount bound to the role
    rule: dict[str, Any] = field(hash=False, compare=False)

    @property
    def id(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        what = ",".join(self.rule["resources"])
        return f"{self.source}:{self.kind}/{where}{self.role}#{self.index}:{what}"

    def applies_in(self, namespace: str) -> bool:
        return not self.namespace or self.namespace == namespace


def _subjects(doc: dict[str, Any]) -> set[str]:
    """The users of the ServiceAccounts a binding names."""
    return {
        user_of((s["namespace"], s["name"]))
        for s in doc.get("subjects") or []
        if s.get("kind") == "ServiceAccount"
    }


def all_rules() -> list[Rule]:
    """Every rule of every Role/ClusterRole, with the one identity of the run a binding gives it to."""
    docs = [(path, doc) for path in manifest_files() for doc in load_documents(path)]
    bound: dict[tuple[str, str, str], set[str]] = {}
    for _, d in docs:
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            key = (d["roleRef"]["kind"], d["metadata"].get("namespace", ""), d["roleRef"]["name"])
            bound.setdefault(key, set()).update(_subjects(d))
    rules = []
    for path, doc in docs:
        if doc["kind"] not in ("Role", "ClusterRole"):
            continue
        namespace = doc["metadata"].get("namespace", "")
        users = bound.get((doc["kind"], namespace, doc["metadata"]["name"]), set())
        if len(users) != 1 or not users <= set(USERS):
            raise AssertionError(
                f"{path.name}: {doc['kind']} {doc['metadata']['name']} is bound to {sorted(users) or 'nobody'}, "
                f"not to exactly one of {USERS}"
            )
        (user,) = users
        source = str(path.relative_to(MANIFESTS)) if path.is_relative_to(MANIFESTS) else path.name
        for i, rule in enumerate(doc["rules"]):
            rules.append(Rule(source, doc["kind"], namespace, doc["metadata"]["name"], i, user, rule))
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
    """How many requests of the rule's identity each of its grants allowed (a grant no request used
    counts 0)."""
    counts = dict.fromkeys(grants(rule), 0)
    for record in records:
        if record["user"] != rule.user or not rule.applies_in(record["namespace"]):
            continue
        for attrs in attributes(record):
            if rule_allows(rule.rule, attrs):
                combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
                key = (attrs.verb, attrs.api_group, combined)
                if key in counts:
                    counts[key] += 1
    return counts


def covers(rule: Rule, record: dict[str, Any]) -> bool:
    """Whether ``rule`` allows the logged request (its identity's, for some API group that serves its
    resource)."""
    return (
        record["user"] == rule.user
        and rule.applies_in(record["namespace"])
        and any(rule_allows(rule.rule, attrs) for attrs in attributes(record))
    )


def sole_uses(rule: Rule, rules: Iterable[Rule], records: Iterable[dict[str, Any]]) -> int:
    """Requests ``rule`` allows and no other rule of its identity does: each would be denied without it."""
    others = [r for r in rules if r != rule and r.user == rule.user]
    return sum(1 for rec in records if covers(rule, rec) and not any(covers(o, rec) for o in others))
