"""RBAC decisions and the messages a denied user sees, as the real API server gives them."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_devcluster.rbac import (
    ANONYMOUS,
    RequestAttributes,
    TokenAuthenticator,
    UserInfo,
    authorize,
    forbidden,
    forbidden_message,
)

HUB = UserInfo.service_account("jhub", "hub")
ALICE = UserInfo("alice", ("researchers", "system:authenticated"))
ADMIN = UserInfo("root", ("system:masters",))
RBAC_API = "rbac.authorization.k8s.io"


def role(name: str, rules: list[dict[str, Any]], namespace: str | None = None) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"kind": "Role" if namespace else "ClusterRole", "metadata": meta, "rules": rules}


def binding(
    name: str, ref_kind: str, ref: str, subjects: list[dict[str, Any]], namespace: str | None = None
) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC_API, "kind": ref_kind, "name": ref},
        "subjects": subjects,
    }


SA_HUB = {"kind": "ServiceAccount", "name": "hub", "namespace": "jhub"}
ROLES = [
    role(
        "spawner",
        [
            {
                "apiGroups": [""],
                "resources": ["pods", "persistentvolumeclaims", "services"],
                "verbs": ["get", "list", "watch", "create", "delete"],
            },
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
            {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachines", "*/status"], "verbs": ["*"]},
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": ["hub-config"],
                "verbs": ["get", "list", "update"],
            },
        ],
        namespace="gpu-workspaces",
    ),
    role("other", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}], namespace="elsewhere"),
]
CLUSTER_ROLES = [
    role("node-reader", [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]),
    role(
        "pv-viewer",
        [
            {
                "apiGroups": [""],
                "resources": ["persistentvolumes"],
                "resourceNames": ["pv-1"],
                "verbs": ["get"],
            }
        ],
    ),
    role(
        "event-writer",
        [{"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}],
    ),
    role("metrics", [{"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]}]),
]
ROLE_BINDINGS = [
    binding("hub-spawner", "Role", "spawner", [SA_HUB], namespace="gpu-workspaces"),
    binding("hub-events", "ClusterRole", "event-writer", [SA_HUB], namespace="gpu-workspaces"),
    binding(
        "local-sa",
        "Role",
        "spawner",
        [{"kind": "ServiceAccount", "name": "builder"}],
        namespace="gpu-workspaces",
    ),
    binding(
        "dangling", "Role", "does-not-exist", [{"kind": "User", "name": "carol"}], namespace="gpu-workspaces"
    ),
]
CLUSTER_ROLE_BINDINGS = [
    binding("hub-nodes", "ClusterRole", "node-reader", [SA_HUB]),
    binding(
        "researchers-pv",
        "ClusterRole",
        "pv-viewer",
        [{"kind": "Group", "name": "researchers", "apiGroup": RBAC_API}],
    ),
    binding(
        "alice-metrics", "ClusterRole", "metrics", [{"kind": "User", "name": "alice", "apiGroup": RBAC_API}]
    ),
    binding("sa-no-namespace", "ClusterRole", "node-reader", [{"kind": "ServiceAccount", "name": "builder"}]),
]


def decide(user: UserInfo, attrs: RequestAttributes) -> bool:
    return authorize(
        user,
        attrs,
        roles=ROLES,
        cluster_roles=CLUSTER_ROLES,
        role_bindings=ROLE_BINDINGS,
        cluster_role_bindings=CLUSTER_ROLE_BINDINGS,
    ).allowed


def req(verb: str, resource: str, namespace: str = "gpu-workspaces", **kw: str) -> RequestAttributes:
    return RequestAttributes(verb=verb, resource=resource, namespace=namespace, **kw)


@pytest.mark.parametrize(
    ("user", "attrs", "allowed"),
    [
        pytest.param(HUB, req("list", "pods"), True, id="role-binding-grants-list"),
        pytest.param(HUB, req("list", "pods", namespace="default"), False, id="role-binding-is-namespaced"),
        pytest.param(HUB, req("list", "pods", namespace=""), False, id="role-binding-not-cluster-wide"),
        pytest.param(HUB, req("patch", "pods", name="jupyter-alice"), False, id="verb-not-granted"),
        pytest.param(HUB, req("get", "pods", subresource="log", name="p"), True, id="subresource-granted"),
        pytest.param(
            HUB, req("create", "pods", subresource="exec", name="p"), False, id="subresource-needs-own-rule"
        ),
        pytest.param(HUB, req("get", "pods", api_group="kubevirt.io"), False, id="api-group-must-match"),
        pytest.param(
            HUB, req("deletecollection", "virtualmachines", api_group="kubevirt.io"), True, id="verb-wildcard"
        ),
        pytest.param(
            HUB,
            req("update", "virtualmachineinstances", api_group="kubevirt.io", subresource="status"),
            True,
            id="star-slash-subresource",
        ),
        pytest.param(
            HUB,
            req("get", "virtualmachineinstances", api_group="kubevirt.io"),
            False,
            id="star-slash-subresource-not-main-resource",
        ),
        pytest.param(HUB, req("get", "configmaps", name="hub-config"), True, id="resource-name-match"),
        pytest.param(HUB, req("get", "configmaps", name="other"), False, id="resource-name-mismatch"),
        pytest.param(HUB, req("list", "configmaps"), False, id="resource-names-never-allow-plain-list"),
        pytest.param(
            HUB, req("list", "configmaps", name="hub-config"), True, id="list-with-name-field-selector"
        ),
        pytest.param(
            HUB, req("create", "events", api_group="events.k8s.io"), True, id="rolebinding-to-clusterrole"
        ),
        pytest.param(
            HUB, req("create", "events", namespace="default"), False, id="clusterrole-scoped-to-binding-ns"
        ),
        pytest.param(HUB, req("watch", "nodes", namespace=""), True, id="cluster-role-binding"),
        pytest.param(
            ALICE, req("get", "persistentvolumes", namespace="", name="pv-1"), True, id="group-subject"
        ),
        pytest.param(
            ALICE,
            req("get", "persistentvolumes", namespace="", name="pv-2"),
            False,
            id="group-subject-other-name",
        ),
        pytest.param(
            UserInfo("system:serviceaccount:gpu-workspaces:builder"),
            req("create", "pods"),
            True,
            id="sa-subject-defaults-to-binding-namespace",
        ),
        pytest.param(
            UserInfo("system:serviceaccount:gpu-workspaces:builder"),
            req("get", "nodes", namespace=""),
            False,
            id="sa-subject-without-namespace-in-cluster-binding",
        ),
        pytest.param(UserInfo("hub"), req("list", "pods"), False, id="user-named-like-sa-is-not-the-sa"),
        pytest.param(
            ADMIN, req("delete", "namespaces", namespace="", name="kube-system"), True, id="system-masters"
        ),
        pytest.param(ANONYMOUS, req("get", "pods"), False, id="anonymous"),
        pytest.param(ALICE, RequestAttributes.non_resource("get", "/metrics"), True, id="non-resource-exact"),
        pytest.param(
            ALICE, RequestAttributes.non_resource("get", "/debug/pprof/heap"), True, id="non-resource-prefix"
        ),
        pytest.param(
            ALICE, RequestAttributes.non_resource("post", "/metrics"), False, id="non-resource-verb"
        ),
        pytest.param(
            HUB, RequestAttributes.non_resource("get", "/metrics"), False, id="non-resource-not-granted"
        ),
        pytest.param(HUB, RequestAttributes.non_resource("get", "/version"), True, id="discovery-version"),
        pytest.param(HUB, RequestAttributes.non_resource("get", "/openapi/v2"), True, id="discovery-openapi"),
        pytest.param(
            HUB, RequestAttributes.non_resource("get", "/apis/kubevirt.io/v1"), True, id="discovery-apis"
        ),
        pytest.param(
            ANONYMOUS, RequestAttributes.non_resource("get", "/healthz"), True, id="public-info-anonymous"
        ),
        pytest.param(
            ANONYMOUS, RequestAttributes.non_resource("get", "/api"), False, id="discovery-needs-authn"
        ),
        pytest.param(
            ALICE,
            req("create", "selfsubjectaccessreviews", namespace="", api_group="authorization.k8s.io"),
            True,
            id="basic-user-self-review",
        ),
    ],
)
def test_authorize(user: UserInfo, attrs: RequestAttributes, allowed: bool) -> None:
    assert decide(user, attrs) is allowed


def test_bootstrap_roles_can_be_left_out() -> None:
    decision = authorize(
        HUB,
        RequestAttributes.non_resource("get", "/version"),
        roles=[],
        cluster_roles=[],
        role_bindings=[],
        cluster_role_bindings=[],
        include_bootstrap=False,
    )
    assert not decision.allowed


@pytest.mark.parametrize(
    ("user", "attrs", "reason"),
    [
        pytest.param(
            HUB,
            req("list", "pods"),
            'RBAC: allowed by RoleBinding "hub-spawner/gpu-workspaces" of Role "spawner" to ServiceAccount "jhub/hub"',
            id="role-binding",
        ),
        pytest.param(
            ALICE,
            req("get", "persistentvolumes", namespace="", name="pv-1"),
            'RBAC: allowed by ClusterRoleBinding "researchers-pv" of ClusterRole "pv-viewer" to Group "researchers"',
            id="cluster-role-binding",
        ),
        pytest.param(
            UserInfo("carol"),
            req("get", "pods"),
            'RBAC: role.rbac.authorization.k8s.io "does-not-exist" not found',
            id="missing-role",
        ),
        pytest.param(UserInfo("dave"), req("get", "pods"), "", id="plain-denial"),
    ],
)
def test_decision_reason(user: UserInfo, attrs: RequestAttributes, reason: str) -> None:
    decision = authorize(
        user,
        attrs,
        roles=ROLES,
        cluster_roles=CLUSTER_ROLES,
        role_bindings=ROLE_BINDINGS,
        cluster_role_bindings=CLUSTER_ROLE_BINDINGS,
    )
    assert decision.reason == reason


@pytest.mark.parametrize(
    ("user", "attrs", "message"),
    [
        pytest.param(
            HUB,
            req("list", "pods"),
            'pods is forbidden: User "system:serviceaccount:jhub:hub" cannot list resource "pods" in API group "" '
            'in the namespace "gpu-workspaces"',
            id="namespaced-list",
        ),
        pytest.param(
            UserInfo("x"),
            req("get", "persistentvolumes", namespace="", name="pv-1"),
            'persistentvolumes "pv-1" is forbidden: User "x" cannot get resource "persistentvolumes" in API group "" '
            "at the cluster scope",
            id="cluster-scoped-named",
        ),
        pytest.param(
            ALICE,
            req("create", "pods", subresource="exec", name="jupyter-alice"),
            'pods "jupyter-alice" is forbidden: User "alice" cannot create resource "pods/exec" in API group "" '
            'in the namespace "gpu-workspaces"',
            id="subresource",
        ),
        pytest.param(
            ALICE,
            req("delete", "virtualmachines", api_group="kubevirt.io", name="vm-1"),
            'virtualmachines.kubevirt.io "vm-1" is forbidden: User "alice" cannot delete resource "virtualmachines" '
            'in API group "kubevirt.io" in the namespace "gpu-workspaces"',
            id="api-group-qualified",
        ),
        pytest.param(
            ANONYMOUS,
            RequestAttributes.non_resource("get", "/metrics"),
            'forbidden: User "system:anonymous" cannot get path "/metrics"',
            id="non-resource",
        ),
    ],
)
def test_forbidden_message(user: UserInfo, attrs: RequestAttributes, message: str) -> None:
    assert forbidden_message(user, attrs) == message


def test_forbidden_status_carries_reason_and_details() -> None:
    error = forbidden(UserInfo("carol"), req("get", "pods", name="p"), reason="RBAC: boom")
    status = error.to_status()
    assert (status["code"], status["reason"]) == (403, "Forbidden")
    assert status["message"].endswith('in the namespace "gpu-workspaces": RBAC: boom')
    assert status["details"] == {"name": "p", "kind": "pods"}


TOKENS = {
    "t-admin": {"user": "system:admin", "groups": ["system:masters"]},
    "t-hub": {"user": "system:serviceaccount:jhub:hub"},
    "t-alice": {"user": "alice", "groups": ["researchers"]},
}


@pytest.mark.parametrize(
    ("header", "user"),
    [
        pytest.param(
            "Bearer t-admin", UserInfo("system:admin", ("system:masters", "system:authenticated")), id="admin"
        ),
        pytest.param(
            "bearer t-alice", UserInfo("alice", ("researchers", "system:authenticated")), id="scheme-case"
        ),
        pytest.param("t-hub", HUB, id="raw-token-service-account"),
        pytest.param("Bearer nope", None, id="unknown-token"),
        pytest.param("Basic dXNlcjpwdw==", None, id="other-scheme"),
        pytest.param("", None, id="empty"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_token_authenticator(header: str | None, user: UserInfo | None) -> None:
    assert TokenAuthenticator.from_dict(TOKENS).authenticate(header) == user


def test_token_authenticator_is_a_live_view() -> None:
    tokens: dict[str, Any] = {}
    auth = TokenAuthenticator(tokens)
    tokens["late"] = {"user": "bob", "groups": []}
    auth.add("added", UserInfo("carol", ("ops",)))
    assert auth.authenticate("late") == UserInfo("bob", ("system:authenticated",))
    assert tokens["added"] == {"user": "carol", "groups": ["ops"]}


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        pytest.param([], "must be a mapping", id="not-a-mapping"),
        pytest.param({"t": {"user": "a", "role": "x"}}, "entry must be {user, groups}", id="unknown-key"),
        pytest.param({"t": {"groups": []}}, "'user' must be a non-empty string", id="missing-user"),
        pytest.param(
            {"t": {"user": "a", "groups": "admins"}}, "'groups' must be a list of strings", id="groups-string"
        ),
        pytest.param({"": {"user": "a"}}, "must be a non-empty string", id="empty-token"),
    ],
)
def test_token_file_errors(data: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        TokenAuthenticator.from_dict(data)
