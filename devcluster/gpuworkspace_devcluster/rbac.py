"""RBAC authorization and bearer-token authentication, as the real API server does them.

:func:`authorize` follows ``plugin/pkg/auth/authorizer/rbac``: ClusterRoleBindings apply everywhere,
RoleBindings (to a Role or a ClusterRole) only in their namespace; a rule matches on verbs, apiGroups,
``resource`` or ``resource/subresource`` (``*`` and ``*/subresource`` wildcards) and resourceNames,
or on nonResourceURLs (trailing ``*`` is a prefix). resourceNames never match a request without a name
(create, deletecollection, list/watch without a ``metadata.name`` field selector). Members of
``system:masters`` are always allowed. Bootstrap discovery roles are included by default, so every
authenticated user may ``get`` ``/api``, ``/apis``, ``/version``, ``/openapi/v2`` and the health paths.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from .errors import ApiError

Obj = dict[str, Any]

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
SA_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()

    @classmethod
    def service_account(cls, namespace: str, name: str) -> UserInfo:
        """The user a ServiceAccount token authenticates as."""
        groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED)
        return cls(f"{SA_PREFIX}{namespace}:{name}", groups)


ANONYMOUS = UserInfo("system:anonymous", (UNAUTHENTICATED,))


@dataclass(frozen=True)
class RequestAttributes:
    """What a request asks to do. A non-resource request has ``path`` set and no ``resource``."""

    verb: str
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    @property
    def is_resource_request(self) -> bool:
        return bool(self.resource) or not self.path

    @classmethod
    def non_resource(cls, verb: str, path: str) -> RequestAttributes:
        return cls(verb=verb, path=path)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


def _rule(
    verbs: list[str], urls: list[str] | None = None, groups: list[str] | None = None, **kw: list[str]
) -> Obj:
    rule: Obj = {"verbs": verbs}
    if urls:
        rule["nonResourceURLs"] = urls
    if groups is not None:
        rule["apiGroups"] = groups
    return {**rule, **kw}


_HEALTH = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
BOOTSTRAP_CLUSTER_ROLES: tuple[Obj, ...] = tuple(
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    }
    for name, rules in (
        (
            "system:discovery",
            [_rule(["get"], [*_HEALTH, "/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*"])],
        ),
        ("system:public-info-viewer", [_rule(["get"], _HEALTH)]),
        (
            "system:basic-user",
            [
                _rule(
                    ["create"],
                    groups=["authorization.k8s.io"],
                    resources=["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                _rule(["create"], groups=["authentication.k8s.io"], resources=["selfsubjectreviews"]),
            ],
        ),
    )
)
BOOTSTRAP_CLUSTER_ROLE_BINDINGS: tuple[Obj, ...] = tuple(
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups],
    }
    for name, groups in (
        ("system:discovery", [AUTHENTICATED]),
        ("system:public-info-viewer", [AUTHENTICATED, UNAUTHENTICATED]),
        ("system:basic-user", [AUTHENTICATED]),
    )
)


def _matches(values: list[str] | None, wanted: str) -> bool:
    return any(v in ("*", wanted) for v in values or [])


def _resource_matches(rule: Obj, attrs: RequestAttributes) -> bool:
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    for resource in rule.get("resources") or []:
        if resource in ("*", combined) or (attrs.subresource and resource == f"*/{attrs.subresource}"):
            return True
    return False


def rule_allows(rule: Obj, attrs: RequestAttributes) -> bool:
    """``RuleAllows``: does one PolicyRule grant the request?"""
    if not _matches(rule.get("verbs"), attrs.verb):
        return False
    if not attrs.is_resource_request:
        return any(
            url in ("*", attrs.path) or (url.endswith("*") and attrs.path.startswith(url.rstrip("*")))
            for url in rule.get("nonResourceURLs") or []
        )
    names = rule.get("resourceNames") or []
    return (
        _matches(rule.get("apiGroups"), attrs.api_group)
        and _resource_matches(rule, attrs)
        and (not names or attrs.name in names)
    )


def _applies_to(user: UserInfo, subject: Obj, namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name", "")
    if kind == "User":
        return bool(user.name == name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":  # a RoleBinding's SA subject defaults to the binding's namespace
        sa_namespace = subject.get("namespace") or namespace
        return bool(sa_namespace) and user.name == f"{SA_PREFIX}{sa_namespace}:{name}"
    return False


def _describe(subject: Obj) -> str:
    name = subject.get("name", "")
    if subject.get("kind") == "ServiceAccount" and subject.get("namespace"):
        name = f"{subject['namespace']}/{name}"
    return f'{subject.get("kind")} "{name}"'


def _by_name(objs: list[Obj], namespace: str | None = None) -> dict[str, Obj]:
    return {
        (o.get("metadata") or {}).get("name", ""): o
        for o in objs
        if namespace is None or (o.get("metadata") or {}).get("namespace") == namespace
    }


def _bindings(
    user: UserInfo, namespace: str, role_bindings: list[Obj], cluster_role_bindings: list[Obj]
) -> Iterator[tuple[Obj, Obj, str]]:
    """(binding, matching subject, binding namespace) for every binding that applies to ``user``."""
    scoped = [(b, "") for b in cluster_role_bindings]
    if namespace:
        scoped += [
            (b, namespace) for b in role_bindings if (b.get("metadata") or {}).get("namespace") == namespace
        ]
    for binding, ns in scoped:
        subject = next((s for s in binding.get("subjects") or [] if _applies_to(user, s, ns)), None)
        if subject is not None:
            yield binding, subject, ns


def authorize(
    user: UserInfo,
    attrs: RequestAttributes,
    *,
    roles: list[Obj],
    cluster_roles: list[Obj],
    role_bindings: list[Obj],
    cluster_role_bindings: list[Obj],
    include_bootstrap: bool = True,
) -> Decision:
    """Allow when some binding that applies to ``user`` grants a rule matching ``attrs``.

    The reason names the granting binding (``RBAC: allowed by ClusterRoleBinding "x" of ClusterRole
    "y" to User "z"``); a denial's reason lists roles that bindings reference but that do not exist.
    """
    if MASTERS in user.groups:
        return Decision(True, f'allowed by group "{MASTERS}"')
    if include_bootstrap:
        cluster_roles = [*BOOTSTRAP_CLUSTER_ROLES, *cluster_roles]
        cluster_role_bindings = [*BOOTSTRAP_CLUSTER_ROLE_BINDINGS, *cluster_role_bindings]
    all_roles, all_cluster_roles = _by_name(roles, attrs.namespace or None), _by_name(cluster_roles)
    errors: list[str] = []
    for binding, subject, ns in _bindings(user, attrs.namespace, role_bindings, cluster_role_bindings):
        ref = binding.get("roleRef") or {}
        kind, role_name = ref.get("kind", ""), ref.get("name", "")
        role = all_roles.get(role_name) if kind == "Role" and ns else all_cluster_roles.get(role_name)
        if role is None or kind not in ("Role", "ClusterRole"):
            errors.append(f'{kind.lower()}.rbac.authorization.k8s.io "{role_name}" not found')
            continue
        if any(rule_allows(rule, attrs) for rule in role.get("rules") or []):
            binding_name = (binding.get("metadata") or {}).get("name", "")
            source = f'RoleBinding "{binding_name}/{ns}"' if ns else f'ClusterRoleBinding "{binding_name}"'
            return Decision(
                True, f'RBAC: allowed by {source} of {kind} "{role_name}" to {_describe(subject)}'
            )
    if not errors:
        return Decision(False, "")
    return Decision(False, "RBAC: " + (errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"))


def forbidden_message(user: UserInfo, attrs: RequestAttributes, reason: str = "") -> str:
    """The 403 message, e.g. ``pods is forbidden: User "x" cannot list resource "pods" in API group ""
    in the namespace "ns"``; a non-empty authorizer ``reason`` is appended after ``": "``."""
    if not attrs.is_resource_request:
        text = f'forbidden: User "{user.name}" cannot {attrs.verb} path "{attrs.path}"'
    else:
        resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
        why = f'User "{user.name}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.api_group}"'
        why = f"{why} {scope}"
        qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
        text = (
            f'{qualified} "{attrs.name}" is forbidden: {why}'
            if attrs.name
            else f"{qualified} is forbidden: {why}"
        )
    return f"{text}: {reason}" if reason else text


def forbidden(user: UserInfo, attrs: RequestAttributes, reason: str = "") -> ApiError:
    """The 403 ``Forbidden`` Status the API server returns for a denied request."""
    details = {"name": attrs.name, "group": attrs.api_group, "kind": attrs.resource}
    details = {k: v for k, v in details.items() if v} if attrs.is_resource_request else {}
    return ApiError(403, "Forbidden", forbidden_message(user, attrs, reason), details=details or None)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


class TokenAuthenticator:
    """Static bearer tokens (like ``--token-auth-file``) from ``{token: {"user": name, "groups": [...]}}``.

    The mapping given is used live (tokens added to it later authenticate too). Every user also gets
    ``system:authenticated``; ServiceAccount users (``system:serviceaccount:<ns>:<name>``) also get
    their ServiceAccount groups.
    """

    def __init__(self, tokens: MutableMapping[str, Any] | None = None) -> None:
        self._tokens: MutableMapping[str, Any] = tokens if tokens is not None else {}

    @classmethod
    def from_dict(cls, data: Any) -> TokenAuthenticator:
        """Like the constructor, but checks every entry first (ValueError naming the bad one)."""
        if not isinstance(data, Mapping):
            raise ValueError("tokens must be a mapping of token -> {user, groups}")
        for token, entry in data.items():
            _entry_user(token, entry)
        return cls(dict(data))

    def add(self, token: str, user: UserInfo) -> None:
        self._tokens[token] = {"user": user.name, "groups": list(user.groups)}

    def authenticate(self, token: str | None) -> UserInfo | None:
        """The user for a bearer token (or a whole ``Bearer <token>`` header value); None if unknown."""
        scheme, _, rest = (token or "").strip().partition(" ")
        token = rest.strip() if rest and scheme.lower() == "bearer" else (token or "").strip()
        entry = self._tokens.get(token) if token else None
        return None if entry is None else _entry_user(token, entry)


def _entry_user(token: Any, entry: Any) -> UserInfo:
    """A token-file entry as the authenticated user; ValueError when malformed."""
    label = f"token {str(token)[:4]}..."
    if not isinstance(token, str) or not token:
        raise ValueError(f"token {token!r}: must be a non-empty string")
    if not isinstance(entry, Mapping) or set(entry) - {"user", "groups"}:
        raise ValueError(f"{label}: entry must be {{user, groups}}, got {entry!r}")
    name, groups = entry.get("user"), entry.get("groups", [])
    if not isinstance(name, str) or not name:
        raise ValueError(f"{label}: 'user' must be a non-empty string")
    if not isinstance(groups, list | tuple) or not all(isinstance(g, str) for g in groups):
        raise ValueError(f"{label}: 'groups' must be a list of strings")
    groups = list(groups)
    if name.startswith(SA_PREFIX) and name.count(":") == 3:  # noqa: PLR2004
        namespace, sa_name = name.removeprefix(SA_PREFIX).split(":")
        groups += UserInfo.service_account(namespace, sa_name).groups
    return UserInfo(name, tuple(dict.fromkeys([*groups, AUTHENTICATED])))
