"""Conformance: authentication, RBAC, fault injection and the request log, as a client sees them.

Driven through kubernetes_asyncio (and kubectl, where installed) against a DevCluster started with
``auth=True`` / ``rbac_enabled=True``; faults through ``cluster.faults`` and ``/_devcluster/faults``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import shutil
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from gpuworkspace_devcluster.apiserver import RequestRecord
from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.faults import FaultRule
from gpuworkspace_devcluster.testing import BackgroundCluster

from .conftest import Kubectl
from .test_api_verbs import NS, make_ns, pod, status_of

SA_NS, SA_NAME = "jhub", "hub"
SA_USER = f"system:serviceaccount:{SA_NS}:{SA_NAME}"
RBAC_GROUP = "rbac.authorization.k8s.io"
LIST_PODS_FORBIDDEN = (
    f'pods is forbidden: User "{SA_USER}" cannot list resource "pods" in API group "" in the namespace "{NS}"'
)


# ----------------------------------------------------------------- helpers
@asynccontextmanager
async def connect(kubeconfig: Path) -> AsyncIterator[client.ApiClient]:
    """A kubernetes_asyncio client configured from ``kubeconfig``, as a user would build one."""
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api_client:
        yield api_client


async def eventually(check: Callable[[], Awaitable[Any]], within: float = 10.0) -> Any:
    """Retry ``check`` (an async callable) until it returns something truthy; TimeoutError after ``within``s."""
    async with asyncio.timeout(within):
        while True:
            result = await check()
            if result:
                return result
            await asyncio.sleep(0.05)


async def raw(
    cluster: DevCluster, method: str, path: str, token: str | None = None, body: Any = None
) -> tuple[int, dict[str, str], bytes]:
    """One plain HTTP request (status, headers, body), with ``token`` as the bearer token if given."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    async with (
        aiohttp.ClientSession(headers=headers) as session,
        session.request(method, cluster.url + path, data=data) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


def token_of(kubeconfig: Path) -> str:
    return yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]


def role(name: str, rules: list[dict[str, Any]], namespace: str | None = NS) -> dict[str, Any]:
    kind = "Role" if namespace else "ClusterRole"
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": f"{RBAC_GROUP}/v1", "kind": kind, "metadata": meta, "rules": rules}


def binding(name: str, role_kind: str, role_name: str, namespace: str | None = NS) -> dict[str, Any]:
    kind = "RoleBinding" if namespace else "ClusterRoleBinding"
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": SA_NS}],
    }


POD_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete"]}
]


async def forbidden(call: Awaitable[Any]) -> dict[str, Any]:
    """Await ``call``, expect a 403, return its Status body."""
    with pytest.raises(ApiException) as err:
        await call
    assert err.value.status == 403, err.value
    body = status_of(err.value)
    assert (body["kind"], body["status"], body["reason"], body["code"]) == (
        "Status",
        "Failure",
        "Forbidden",
        403,
    )
    return body


async def request_log(cluster: DevCluster, token: str) -> list[dict[str, Any]]:
    status, headers, data = await raw(cluster, "GET", "/_devcluster/requests", token)
    assert status == 200 and headers["Content-Type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in data.splitlines() if line.strip()]


# ---------------------------------------------------------------- fixtures
@pytest.fixture
async def secure(tmp_path: Path) -> AsyncIterator[DevCluster]:
    """A cluster that authenticates every request and authorizes it with RBAC."""
    async with DevCluster(tmp_path / "state", auth=True, rbac_enabled=True, bookmark_interval_s=0.5) as c:
        yield c


@pytest.fixture
async def admin(secure: DevCluster) -> AsyncIterator[client.ApiClient]:
    async with connect(secure.kubeconfig) as api_client:
        yield api_client


@pytest.fixture
async def hub(secure: DevCluster) -> AsyncIterator[client.ApiClient]:
    """kubernetes_asyncio authenticated as the ServiceAccount jhub/hub (no bindings yet)."""
    async with connect(secure.service_account_kubeconfig(SA_NS, SA_NAME)) as api_client:
        yield api_client


# -------------------------------------------------------------------- auth
async def test_request_without_token_is_401_unauthorized(tmp_path: Path) -> None:
    async with DevCluster(tmp_path / "state", auth=True) as cluster:
        expected = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }
        for path, token in (
            ("/api/v1/namespaces/default/pods", None),
            ("/api/v1/namespaces", "not-a-token"),
            ("/version", None),
            ("/_devcluster/faults", None),
        ):
            status, headers, body = await raw(cluster, "GET", path, token)
            assert status == 401, path
            assert headers["Content-Type"].startswith("application/json")
            assert json.loads(body) == expected, path
        # kubernetes_asyncio without credentials gets the same, as an ApiException.
        cfg = client.Configuration(host=cluster.url)
        async with client.ApiClient(cfg) as anonymous:
            with pytest.raises(ApiException) as err:
                await client.CoreV1Api(anonymous).list_namespace()
        assert err.value.status == 401 and status_of(err.value)["reason"] == "Unauthorized"


async def test_admin_and_service_account_kubeconfigs_authenticate(tmp_path: Path) -> None:
    async with DevCluster(tmp_path / "state", auth=True) as cluster:
        async with connect(cluster.kubeconfig) as admin_api:
            names = {ns.metadata.name for ns in (await client.CoreV1Api(admin_api).list_namespace()).items}
            assert {"default", "kube-system"} <= names
            assert cluster.api.request_log[-1].user == "system:admin"
        async with connect(cluster.service_account_kubeconfig(SA_NS, SA_NAME)) as sa_api:
            await client.CoreV1Api(sa_api).list_namespaced_pod("default")  # no RBAC: allowed
            last = cluster.api.request_log[-1]
            assert (last.user, last.verb, last.resource, last.status) == (SA_USER, "list", "pods", 200)


# -------------------------------------------------------------------- RBAC
async def test_rbac_role_binding_grants_exactly_its_verbs(
    secure: DevCluster, admin: client.ApiClient, hub: client.ApiClient
) -> None:
    await make_ns(admin)
    sa_core = client.CoreV1Api(hub)
    body = await forbidden(sa_core.list_namespaced_pod(NS))
    assert body["message"] == LIST_PODS_FORBIDDEN
    assert secure.api.request_log[-1].user == SA_USER and secure.api.request_log[-1].status == 403

    rbac_api = client.RbacAuthorizationV1Api(admin)
    await rbac_api.create_namespaced_role(NS, role("pod-manager", POD_RULES))
    await rbac_api.create_namespaced_role_binding(NS, binding("hub-pods", "Role", "pod-manager"))

    assert (await sa_core.list_namespaced_pod(NS)).items == []
    created = await sa_core.create_namespaced_pod(NS, pod("p0"))
    assert created.metadata.name == "p0"
    assert (await sa_core.read_namespaced_pod("p0", NS)).metadata.uid == created.metadata.uid

    # Verbs and resources the Role does not name stay forbidden.
    body = await forbidden(sa_core.delete_namespaced_persistent_volume_claim("home", NS))
    assert body["message"] == (
        f'persistentvolumeclaims "home" is forbidden: User "{SA_USER}" cannot delete resource '
        f'"persistentvolumeclaims" in API group "" in the namespace "{NS}"'
    )
    body = await forbidden(sa_core.patch_namespaced_pod("p0", NS, {"metadata": {"labels": {"a": "b"}}}))
    assert body["message"] == (
        f'pods "p0" is forbidden: User "{SA_USER}" cannot patch resource "pods" in API group "" '
        f'in the namespace "{NS}"'
    )
    body = await forbidden(sa_core.connect_post_namespaced_pod_exec("p0", NS, command="ls"))
    assert body["message"] == (
        f'pods "p0" is forbidden: User "{SA_USER}" cannot create resource "pods/exec" in API group "" '
        f'in the namespace "{NS}"'
    )
    # A RoleBinding grants only in its own namespace.
    body = await forbidden(sa_core.list_namespaced_pod("default"))
    assert body["message"] == LIST_PODS_FORBIDDEN.replace(f'"{NS}"', '"default"')

    await sa_core.delete_namespaced_pod("p0", NS)  # delete was granted


async def test_rolebinding_to_clusterrole_is_namespace_scoped(
    admin: client.ApiClient, hub: client.ApiClient
) -> None:
    await make_ns(admin)
    rbac_api = client.RbacAuthorizationV1Api(admin)
    await rbac_api.create_cluster_role(
        role("pod-reader", [{**POD_RULES[0], "verbs": ["list"]}], namespace=None)
    )
    await rbac_api.create_namespaced_role_binding(NS, binding("hub-reader", "ClusterRole", "pod-reader"))
    sa_core = client.CoreV1Api(hub)
    assert (await sa_core.list_namespaced_pod(NS)).items == []
    await forbidden(sa_core.list_namespaced_pod("default"))
    await forbidden(sa_core.list_pod_for_all_namespaces())


async def test_cluster_scoped_resources_need_a_cluster_role_binding(
    admin: client.ApiClient, hub: client.ApiClient
) -> None:
    await make_ns(admin)
    sa_core = client.CoreV1Api(hub)
    body = await forbidden(sa_core.list_node())
    assert body["message"] == (
        f'nodes is forbidden: User "{SA_USER}" cannot list resource "nodes" in API group "" at the cluster scope'
    )
    rbac_api = client.RbacAuthorizationV1Api(admin)
    node_rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    # A namespaced Role naming nodes does not reach cluster-scoped requests.
    await rbac_api.create_namespaced_role(NS, role("nodes-in-ns", node_rules))
    await rbac_api.create_namespaced_role_binding(NS, binding("hub-nodes-in-ns", "Role", "nodes-in-ns"))
    await forbidden(sa_core.list_node())

    await rbac_api.create_cluster_role(role("node-reader", node_rules, namespace=None))
    await rbac_api.create_cluster_role_binding(binding("hub-node-reader", "ClusterRole", "node-reader", None))
    nodes = await sa_core.list_node()
    assert isinstance(nodes.items, list)  # allowed now


async def test_discovery_is_open_to_any_authenticated_user(secure: DevCluster, hub: client.ApiClient) -> None:
    versions = await client.CoreApi(hub).get_api_versions()
    assert versions.versions == ["v1"]
    groups = await client.ApisApi(hub).get_api_versions()
    assert RBAC_GROUP in {g.name for g in groups.groups}
    info = await client.VersionApi(hub).get_code()
    assert info.major and info.git_version
    resources = await client.CoreV1Api(hub).get_api_resources()
    assert "pods" in {r.name for r in resources.resources}
    assert all(r.user == SA_USER and r.status == 200 for r in secure.api.request_log[-4:])


async def test_admin_endpoints_are_forbidden_to_a_service_account(secure: DevCluster) -> None:
    token = token_of(secure.service_account_kubeconfig(SA_NS, SA_NAME))
    config_body = {"rules": [{"error_rate": 1.0}]}
    for method, path in (
        ("GET", "/_devcluster/faults"),
        ("PUT", "/_devcluster/faults"),
        ("DELETE", "/_devcluster/faults"),
        ("GET", "/_devcluster/requests"),
    ):
        status, _, data = await raw(secure, method, path, token, config_body if method == "PUT" else None)
        assert status == 403, (method, path)
        body = json.loads(data)
        assert body["reason"] == "Forbidden"
        assert body["message"].startswith(f'forbidden: User "{SA_USER}" cannot ')
        assert body["message"].endswith(f' path "{path}"')
    assert secure.faults.rules() == {}  # the PUT did not get through
    # The admin may use them.
    status, _, data = await raw(secure, "GET", "/_devcluster/faults", secure.admin_token)
    assert status == 200 and json.loads(data) == {"seed": 0, "rules": []}


async def test_forbidden_admin_request_leaves_no_unawaited_coroutine(secure: DevCluster) -> None:
    token = token_of(secure.service_account_kubeconfig(SA_NS, SA_NAME))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status, _, _ = await raw(secure, "GET", "/_devcluster/faults", token)
        gc.collect()
    assert status == 403
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []


async def test_non_resource_verb_is_the_http_method(secure: DevCluster, admin: client.ApiClient) -> None:
    token = token_of(secure.service_account_kubeconfig(SA_NS, SA_NAME))
    rbac_api = client.RbacAuthorizationV1Api(admin)
    await rbac_api.create_cluster_role(
        role("faults-reader", [{"nonResourceURLs": ["/_devcluster/*"], "verbs": ["get"]}], namespace=None)
    )
    await rbac_api.create_cluster_role_binding(
        binding("hub-faults-reader", "ClusterRole", "faults-reader", None)
    )
    status, _, _ = await raw(secure, "GET", "/_devcluster/faults", token)
    assert status == 200
    status, _, data = await raw(secure, "PUT", "/_devcluster/faults", token, {"rules": [{"error_rate": 1.0}]})
    assert status == 403, "a 'get' grant must not allow PUT"
    assert json.loads(data)["message"] == f'forbidden: User "{SA_USER}" cannot put path "/_devcluster/faults"'


async def test_forbidden_details_omit_empty_fields(hub: client.ApiClient) -> None:
    body = await forbidden(client.CoreV1Api(hub).list_namespaced_pod(NS))
    assert body["details"] == {"kind": "pods"}


async def test_forbidden_names_a_missing_role(admin: client.ApiClient, hub: client.ApiClient) -> None:
    await make_ns(admin)
    await client.RbacAuthorizationV1Api(admin).create_namespaced_role_binding(
        NS, binding("hub-missing", "Role", "missing")
    )
    body = await forbidden(client.CoreV1Api(hub).list_namespaced_pod(NS))
    assert (
        body["message"] == f'{LIST_PODS_FORBIDDEN}: RBAC: role.rbac.authorization.k8s.io "missing" not found'
    )


# ---------------------------------------------------------- RBAC + kubectl
# client-go (kubectl) sends kubeconfig credentials only over TLS, so this needs DevCluster(tls=True).


@pytest.fixture
def secure_bg(tmp_path: Path) -> Iterator[BackgroundCluster]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed on this machine")
    with BackgroundCluster(
        tmp_path / "state", auth=True, rbac_enabled=True, bookmark_interval_s=0.5, tls=True
    ) as bg:
        yield bg


RBAC_MANIFEST = f"""
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: pod-manager
  namespace: {NS}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: hub-pods
  namespace: {NS}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: pod-manager
subjects:
- kind: ServiceAccount
  name: {SA_NAME}
  namespace: {SA_NS}
"""


@pytest.mark.kubectl
def test_kubectl_as_service_account_before_and_after_binding(
    secure_bg: BackgroundCluster, tmp_path: Path
) -> None:
    kubectl = Kubectl(secure_bg.kubeconfig)  # the admin
    assert secure_bg.cluster is not None
    cluster = secure_bg.cluster
    sa_kubeconfig = secure_bg.call(lambda: cluster.service_account_kubeconfig(SA_NS, SA_NAME))
    as_sa = ("--kubeconfig", str(sa_kubeconfig))
    # apply, not `create namespace`: typed creates send protobuf, which the devcluster refuses (415).
    kubectl("apply", "-f", "-", input=f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n")

    denied = kubectl(*as_sa, "get", "pods", "-n", NS, check=False)
    assert denied.returncode != 0
    assert f"Error from server (Forbidden): {LIST_PODS_FORBIDDEN}" in denied.stderr

    manifest = tmp_path / "rbac.yaml"
    manifest.write_text(RBAC_MANIFEST)
    kubectl("apply", "-f", str(manifest))
    kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(pod("p0")))

    allowed = kubectl(*as_sa, "get", "pods", "-n", NS, "-o", "name")
    assert allowed.stdout.split() == ["pod/p0"]
    still_denied = kubectl(*as_sa, "get", "nodes", check=False)
    assert still_denied.returncode != 0
    assert (
        f'Error from server (Forbidden): nodes is forbidden: User "{SA_USER}" cannot list resource "nodes" '
        'in API group "" at the cluster scope'
    ) in still_denied.stderr


# ---------------------------------------------------------- fault injection
async def test_injected_429_has_retry_after_then_requests_succeed(
    api: client.ApiClient, cluster: DevCluster
) -> None:
    await make_ns(api)
    rule_id = cluster.faults.add(
        FaultRule(verb="list", resource="pods", error_rate=1.0, status_codes=(429,), count=2)
    )
    core = client.CoreV1Api(api)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            await core.list_namespaced_pod(NS)
        assert err.value.status == 429
        assert err.value.headers["Retry-After"] == "1"
        body = status_of(err.value)
        assert (body["kind"], body["reason"], body["code"]) == ("Status", "TooManyRequests", 429)
        assert body["details"]["retryAfterSeconds"] == 1
    assert cluster.faults.remaining(rule_id) == 0
    assert (await core.list_namespaced_pod(NS)).items == []
    await core.create_namespaced_pod(NS, pod("a"))  # other verbs were never affected
    statuses = [r.status for r in cluster.api.request_log if (r.verb, r.resource) == ("list", "pods")]
    assert statuses == [429, 429, 200]


@pytest.mark.parametrize(
    ("code", "reason", "message"),
    [
        (500, "InternalError", "Internal error occurred: injected fault"),
        (503, "ServiceUnavailable", "the server is currently unable to handle the request"),
        (504, "Timeout", "Timeout: request did not complete within requested timeout - injected fault"),
    ],
)
async def test_injected_server_errors_are_status_objects(
    api: client.ApiClient, cluster: DevCluster, code: int, reason: str, message: str
) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod(NS, pod("a"))
    cluster.faults.add(
        FaultRule(verb="get", resource="pods", namespace=NS, error_rate=1.0, status_codes=(code,), count=1)
    )
    with pytest.raises(ApiException) as err:
        await core.read_namespaced_pod("a", NS)
    assert err.value.status == code
    body = status_of(err.value)
    assert (body["kind"], body["status"], body["reason"], body["code"], body["message"]) == (
        "Status",
        "Failure",
        reason,
        code,
        message,
    )
    assert "Retry-After" not in err.value.headers
    assert (await core.read_namespaced_pod("a", NS)).metadata.name == "a"


async def test_injected_latency_delays_the_answer(api: client.ApiClient, cluster: DevCluster) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod(NS, pod("a"))
    cluster.faults.add(FaultRule(verb="get", resource="pods", latency_s=0.3, count=1))
    started = time.monotonic()
    assert (await core.read_namespaced_pod("a", NS)).metadata.name == "a"
    assert time.monotonic() - started >= 0.3
    record = cluster.api.request_log[-1]
    assert (record.verb, record.status) == ("get", 200) and record.duration_s >= 0.3


async def _outcomes(cluster: DevCluster, n: int = 50) -> list[int | None]:
    """Status code of each of ``n`` pod lists (None for success)."""
    out: list[int | None] = []
    async with connect(cluster.kubeconfig) as api_client:
        core = client.CoreV1Api(api_client)
        for _ in range(n):
            try:
                await core.list_namespaced_pod("default")
                out.append(None)
            except ApiException as exc:
                out.append(exc.status)
    return out


async def test_same_seed_gives_same_failures(tmp_path: Path) -> None:
    rule = FaultRule(verb="list", resource="pods", error_rate=0.3)
    runs: dict[str, list[int | None]] = {}
    for label, seed in (("a", 7), ("b", 7), ("c", 8)):
        async with DevCluster(tmp_path / label, seed=seed) as cluster:
            cluster.faults.add(rule)
            runs[label] = await _outcomes(cluster)
    assert runs["a"] == runs["b"]
    assert runs["a"] != runs["c"]
    failures = [code for code in runs["a"] if code is not None]
    assert 0 < len(failures) < 50 and set(failures) <= {500, 429, 504}
    # The same configuration PUT over the admin endpoint reproduces the in-process run.
    async with DevCluster(tmp_path / "d") as cluster:
        status, _, _ = await raw(
            cluster, "PUT", "/_devcluster/faults", cluster.admin_token, {"seed": 7, "rules": [rule.to_dict()]}
        )
        assert status == 200
        assert await _outcomes(cluster) == runs["a"]


async def test_fault_config_over_admin_endpoint(secure: DevCluster, admin: client.ApiClient) -> None:
    await make_ns(admin)
    token = secure.admin_token
    rule = {"verb": "list", "resource": "pods", "error_rate": 1.0, "status_codes": [503], "count": 1}
    status, headers, data = await raw(
        secure, "PUT", "/_devcluster/faults", token, {"seed": 5, "rules": [rule]}
    )
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    expected = {
        "seed": 5,
        "rules": [{"id": 1, "remaining": 1, **FaultRule(**{**rule, "status_codes": (503,)}).to_dict()}],
    }
    assert json.loads(data) == expected
    status, _, data = await raw(secure, "GET", "/_devcluster/faults", token)
    assert status == 200 and json.loads(data) == expected

    core = client.CoreV1Api(admin)
    with pytest.raises(ApiException) as err:
        await core.list_namespaced_pod(NS)
    assert err.value.status == 503 and status_of(err.value)["reason"] == "ServiceUnavailable"
    _, _, data = await raw(secure, "GET", "/_devcluster/faults", token)
    assert json.loads(data)["rules"][0]["remaining"] == 0
    await core.list_namespaced_pod(NS)

    # The remaining count travels back in: a rule PUT with remaining 0 is spent.
    spent = {"seed": 5, "rules": [{**rule, "id": 3, "remaining": 0}]}
    status, _, data = await raw(secure, "PUT", "/_devcluster/faults", token, spent)
    assert status == 200 and json.loads(data)["rules"][0]["remaining"] == 0
    await core.list_namespaced_pod(NS)

    status, _, data = await raw(secure, "DELETE", "/_devcluster/faults", token)
    assert status == 200 and json.loads(data) == {"seed": 5, "rules": []}
    _, _, data = await raw(secure, "GET", "/_devcluster/faults", token)
    assert json.loads(data) == {"seed": 5, "rules": []}


@pytest.mark.parametrize(
    ("config_body", "problem"),
    [
        (b"{not json", "invalid fault configuration"),
        ([], "fault configuration must be a JSON object"),
        ({"rulez": []}, "unknown fault configuration key(s) rulez"),
        ({"seed": "7"}, "'seed' must be an integer"),
        ({"rules": {}}, "'rules' must be a list"),
        (
            {"rules": [{"verb": "list", "error_rate": 2}]},
            "rules[0]: fault rule 'error_rate' must be a number in [0, 1]",
        ),
        ({"rules": [{}, {"bogus": 1}]}, "rules[1]: unknown fault rule key(s) bogus"),
        (
            {"rules": [{"status_codes": [418]}]},
            "rules[0]: fault rule 'status_codes' must be a non-empty list",
        ),
        ({"rules": [{"latency_s": -1}]}, "rules[0]: fault rule 'latency_s' must be a finite number >= 0"),
        ({"rules": [{"count": 0}]}, "rules[0]: fault rule 'count' must be null or an integer >= 1"),
        ({"rules": [{"id": 1}, {"id": 1}]}, "rules[1]: fault rule id 1 already exists"),
        ({"rules": [5]}, "rules[0]: a fault rule must be a JSON object"),
    ],
)
async def test_invalid_fault_config_is_400_naming_the_problem(
    cluster: DevCluster, config_body: Any, problem: str
) -> None:
    token = cluster.admin_token
    good = {"seed": 3, "rules": [{"verb": "get", "latency_s": 0.01}]}
    status, _, before = await raw(cluster, "PUT", "/_devcluster/faults", token, good)
    assert status == 200
    status, headers, data = await raw(cluster, "PUT", "/_devcluster/faults", token, config_body)
    assert status == 400 and headers["Content-Type"].startswith("application/json")
    body = json.loads(data)
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "BadRequest", 400)
    assert body["message"].startswith("invalid fault configuration: ")
    assert problem in body["message"]
    _, _, after = await raw(cluster, "GET", "/_devcluster/faults", token)
    assert json.loads(after) == json.loads(before)  # a rejected PUT changes nothing


# -------------------------------------------------------------- request log
async def test_request_log_records_verbs_statuses_and_user_agent(
    api: client.ApiClient, cluster: DevCluster
) -> None:
    started = time.time()
    await make_ns(api)
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod(NS, pod("a"))
    await core.read_namespaced_pod("a", NS)
    with pytest.raises(ApiException):
        await core.read_namespaced_pod("missing", NS)
    await core.list_namespaced_pod(NS, label_selector="app=nb")
    seen = []
    async with watch.Watch().stream(core.list_namespaced_pod, NS, timeout_seconds=1) as stream:
        async for event in stream:  # ends when the server closes the watch at timeoutSeconds
            seen.append(event["raw_object"]["metadata"]["name"])
    assert seen == ["a"]
    token = api.configuration.api_key["BearerToken"].removeprefix("Bearer ")

    async def logged_watch() -> list[dict[str, Any]]:
        return [r for r in await request_log(cluster, token) if r["verb"] == "watch"]

    await eventually(logged_watch)
    records = await request_log(cluster, token)
    finished = time.time()
    by_call = {(r["method"], r["verb"], r["resource"], r["name"], r["status"]) for r in records}
    assert {
        ("POST", "create", "namespaces", "", 201),
        ("POST", "create", "pods", "", 201),
        ("GET", "get", "pods", "a", 200),
        ("GET", "get", "pods", "missing", 404),
        ("GET", "list", "pods", "", 200),
        ("GET", "watch", "pods", "", 200),
    } <= by_call
    fields = {f for f in RequestRecord.__dataclass_fields__}
    assert {"time", "verb", "resource", "status", "duration_s", "user_agent"} <= fields
    client_records = [r for r in records if r["verb"]]
    for r in client_records:
        assert set(r) == fields
        assert started - 1 <= r["time"] <= finished
        assert isinstance(r["duration_s"], float) and r["duration_s"] >= 0
        assert r["user_agent"] == api.user_agent and r["user_agent"].startswith("OpenAPI-Generator/")
        assert r["user"] == "system:admin"
    listed = next(r for r in client_records if r["verb"] == "list")
    assert parse_qs(listed["query"]) == {"labelSelector": ["app=nb"]}
    watched = next(r for r in client_records if r["verb"] == "watch")
    assert parse_qs(watched["query"])["timeoutSeconds"] == ["1"] and watched["duration_s"] >= 0.5

    # DELETE returns the log and clears it.
    status, _, data = await raw(cluster, "DELETE", "/_devcluster/requests", token)
    assert status == 200 and len(data.splitlines()) >= len(records)
    assert [r["method"] for r in await request_log(cluster, token)] == ["DELETE"]


# ------------------------------------------------- watch-forever under drops
async def test_watch_forever_survives_injected_drops(api: client.ApiClient, cluster: DevCluster) -> None:
    await make_ns(api)
    core = client.CoreV1Api(api)
    rv0 = (await core.list_namespaced_pod(NS)).metadata.resource_version
    cluster.faults.add(FaultRule(verb="watch", resource="pods", watch_drop_after_events=2))
    events: list[tuple[str, str, str]] = []

    async def consume() -> None:
        # No timeout_seconds: kubernetes_asyncio's own reconnect loop ("watch forever").
        async with watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=rv0) as stream:
            async for event in stream:
                meta = event["raw_object"]["metadata"]
                events.append((event["type"], meta["name"], meta["resourceVersion"]))
                if len(events) == 7:
                    break

    consumer = asyncio.create_task(consume())
    for i in range(7):  # created while the watch runs: some events replayed on resume, some live
        await core.create_namespaced_pod(NS, pod(f"p{i}"))
    await asyncio.wait_for(consumer, 30)

    assert [(t, n) for t, n, _ in events] == [("ADDED", f"p{i}") for i in range(7)]
    rvs = [int(rv) for _, _, rv in events]
    assert rvs == sorted(set(rvs))  # in order, no duplicates
    drop_rvs = [events[i][2] for i in (1, 3, 5)]  # the last event each dropped watch delivered

    # A watch appears in the request log once it ends; one more event ends the client's last one.
    await core.create_namespaced_pod(NS, pod("nudge"))

    async def watches() -> list[RequestRecord] | None:
        found = [r for r in cluster.api.request_log if (r.verb, r.resource) == ("watch", "pods")]
        return found if len(found) >= 4 else None

    records = await eventually(watches)
    resumed_from = [parse_qs(r.query).get("resourceVersion", [""])[0] for r in records]
    assert resumed_from[0] == rv0
    assert resumed_from[1:4] == drop_rvs
    assert all(r.status == 200 and r.user_agent == api.user_agent for r in records)
