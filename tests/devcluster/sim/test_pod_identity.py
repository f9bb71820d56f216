"""A pod's own identity, as on a real cluster: the ServiceAccount admission plugin's token volume, bound
tokens the API server authenticates (and RBAC authorizes), the master service's variables, and the
eviction manager's emptyDir ``sizeLimit``.

The cluster serves TLS with authentication and RBAC on, so what a pod can do is what its token allows.
Every check on a pod reads what its own process printed (its log) or what the API answered it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.errors import ApiError
from gpuworkspace_devcluster.sim import mountns
from gpuworkspace_devcluster.sim.base import rt_of
from gpuworkspace_devcluster.sim.context import SimContext
from gpuworkspace_devcluster.sim.kubelet import Kubelet

from .test_kubelet import NODE, NODES, OCTET, PODS, Sim, eventually, fast_config, marked_pids

Obj = dict[str, Any]
SAS, ROLES, BINDINGS = (
    rt_of("", "serviceaccounts"),
    rt_of("rbac.authorization.k8s.io", "roles"),
    rt_of("rbac.authorization.k8s.io", "rolebindings"),
)
NAMESPACES, WHY = mountns.available(sys.executable)
needs_namespaces = pytest.mark.skipif(not NAMESPACES, reason=f"no mount namespaces here: {WHY}")
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture
async def secure(tmp_path: Path) -> AsyncIterator[Sim]:
    """A TLS DevCluster with RBAC, and a kubelet that knows it (the master service's variables)."""
    options = {"bookmark_interval_s": 0.5, "tls": True, "rbac_enabled": True}
    async with DevCluster(tmp_path / "state", **options) as cluster:
        cluster.verbs.create(
            NODES, "", {"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}}
        )
        ctx = SimContext(cluster.verbs, cluster.state_dir or tmp_path, cluster.pod_runtime, cluster=cluster)
        config = fast_config()
        config.eviction_interval_s = 0.3
        kubelet = Kubelet(ctx, NODE, OCTET, config, register=cluster.controllers.kubelet_nodes.add)
        await kubelet.start()
        sim = Sim(cluster, ctx, kubelet)
        try:
            yield sim
        finally:
            await sim.kubelet.stop()
            await eventually(lambda: not marked_pids(tmp_path), 5, "every container process gone")


async def api(
    sim: Sim, path: str, token: str, method: str = "GET", body: Obj | None = None
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method,
            f"{sim.cluster.url}{path}",
            json=body,
            headers=headers,
            ssl=sim.cluster.client_ssl_context(),
        ) as resp,
    ):
        text = await resp.text()
    try:
        return resp.status, json.loads(text)
    except ValueError:
        return resp.status, text  # a pod log


async def log_has(sim: Sim, name: str, *needles: str, limit_s: float = 30.0) -> str:
    seen = ""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        status, seen = await api(sim, f"/api/v1/namespaces/default/pods/{name}/log", sim.cluster.admin_token)
        if status == 200 and all(n in seen for n in needles):
            return str(seen)
        await asyncio.sleep(0.1)
    raise AssertionError(f"{name}'s log lacks {needles}: {seen!r}")


def grant(sim: Sim, account: str, rules: list[Obj]) -> None:
    """A ServiceAccount with a Role bound to it in ``default``."""
    sim.verbs.create(SAS, "default", {"metadata": {"name": account}})
    sim.verbs.create(ROLES, "default", {"metadata": {"name": account}, "rules": rules})
    binding = {
        "metadata": {"name": account},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": "default"}],
    }
    sim.verbs.create(BINDINGS, "default", binding)


POD_READER = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]

IN_CLUSTER_SCRIPT = """
import asyncio, os
from kubernetes_asyncio import client, config

async def main():
    config.load_incluster_config()
    print("host", os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"], flush=True)
    async with client.ApiClient() as api:
        core = client.CoreV1Api(api)
        pods = await core.list_namespaced_pod(open("SA_DIR/namespace").read())
        print("pods:", sorted(p.metadata.name for p in pods.items), flush=True)
        try:
            await core.list_namespaced_secret("default")
        except client.ApiException as exc:
            print("secrets:", exc.status, flush=True)

asyncio.run(main())
""".replace("SA_DIR", SA_DIR)


# ----------------------------------------------------------------------------------------------- pods
@needs_namespaces
async def test_a_pods_token_lists_what_its_role_allows_and_gets_403_otherwise(secure: Sim) -> None:
    grant(secure, "reader", POD_READER)
    container = {"name": "c", "image": "python:3.11", "command": ["python", "-c", IN_CLUSTER_SCRIPT]}
    pod = secure.create_pod("incluster", [container], serviceAccountName="reader", restartPolicy="Never")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access-"))
    assert pod["spec"]["containers"][0]["volumeMounts"] == [
        {"name": volume["name"], "readOnly": True, "mountPath": SA_DIR}
    ]
    text = await log_has(secure, "incluster", "pods:", "secrets:")
    assert f"host 127.0.0.1 {secure.cluster.port}" in text  # the master service: this API server
    assert "pods: ['incluster']" in text  # the CA file verified the API server's certificate
    assert "secrets: 403" in text


@needs_namespaces
async def test_a_pod_with_automount_false_has_no_token_dir(secure: Sim) -> None:
    script = f"ls {SA_DIR} 2>&1 || echo no-token-dir; echo host=$KUBERNETES_SERVICE_HOST"
    container = {"name": "c", "image": "busybox:1.36", "command": ["sh", "-c", script]}
    pod = secure.create_pod("plain", [container], automountServiceAccountToken=False, restartPolicy="Never")
    assert not pod["spec"].get("volumes") and not pod["spec"]["containers"][0].get("volumeMounts")
    assert pod["spec"]["serviceAccountName"] == "default"
    text = await log_has(secure, "plain", "no-token-dir", "host=127.0.0.1")
    assert "token" not in text.replace("no-token-dir", "")
    # the ServiceAccount's own field counts when the pod says nothing
    secure.verbs.create(
        SAS, "default", {"metadata": {"name": "quiet"}, "automountServiceAccountToken": False}
    )
    quiet = secure.create_pod("quiet", [container], serviceAccountName="quiet")
    assert not quiet["spec"].get("volumes")


async def test_a_pod_naming_a_missing_service_account_is_refused(secure: Sim) -> None:
    body = {
        "metadata": {"name": "orphan"},
        "spec": {"serviceAccountName": "ghost", "containers": [{"name": "c", "image": "busybox"}]},
    }
    status, answer = await api(
        secure, "/api/v1/namespaces/default/pods", secure.cluster.admin_token, "POST", body
    )
    assert status == 403, answer
    assert answer["message"] == (
        'pods "orphan" is forbidden: error looking up service account default/ghost: serviceaccount "ghost" not found'
    )
    assert secure.pod("orphan") is None


@needs_namespaces
async def test_a_deleted_pods_token_is_refused(secure: Sim) -> None:
    grant(secure, "reader", POD_READER)
    container = {
        "name": "c",
        "image": "busybox:1.36",
        "command": ["sh", "-c", f"cat {SA_DIR}/token; echo; sleep 300"],
    }
    secure.create_pod("holder", [container], serviceAccountName="reader", terminationGracePeriodSeconds=0)
    token = (await log_has(secure, "holder", "eyJ")).strip()
    status, answer = await api(secure, "/api/v1/namespaces/default/pods", token)
    assert status == 200 and [p["metadata"]["name"] for p in answer["items"]] == ["holder"]
    status, _ = await api(secure, "/api/v1/namespaces/default/secrets", token)
    assert status == 403
    secure.verbs.delete(PODS, "default", "holder", {"gracePeriodSeconds": 0})
    await eventually(lambda: secure.pod("holder") is None, 20, "pod gone")
    status, answer = await api(secure, "/api/v1/namespaces/default/pods", token)
    assert status == 401 and answer["reason"] == "Unauthorized"


@needs_namespaces
async def test_an_emptydir_over_its_size_limit_gets_the_pod_evicted(secure: Sim) -> None:
    script = "dd if=/dev/zero of=/scratch/big bs=1024 count=3072 2>/dev/null; echo wrote; sleep 300"
    container = {
        "name": "c",
        "image": "busybox:1.36",
        "command": ["sh", "-c", script],
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
    }
    volumes = [{"name": "scratch", "emptyDir": {"sizeLimit": "2Mi"}}]
    secure.create_pod("hog", [container], volumes=volumes, automountServiceAccountToken=False)
    await log_has(secure, "hog", "wrote")
    await eventually(lambda: (secure.pod("hog") or {})["status"]["phase"] == "Failed", 20, "pod evicted")
    status = secure.pod("hog")["status"]  # type: ignore[index]
    message = 'Usage of EmptyDir volume "scratch" exceeds the limit "2Mi". '
    assert (status["reason"], status["message"]) == ("Evicted", message)
    assert status["containerStatuses"][0]["state"].get("terminated"), status
    assert ("Evicted", message) in secure.events("hog")
    assert secure.pod("hog") is not None  # an evicted pod stays, Failed, as on a real node
    # a pod under its limit keeps running
    container["command"] = ["sh", "-c", "dd if=/dev/zero of=/scratch/small bs=1024 count=512; sleep 300"]
    secure.create_pod("fits", [container], volumes=volumes, automountServiceAccountToken=False)
    await eventually(
        lambda: (secure.pod("fits") or {}).get("status", {}).get("phase") == "Running", 20, "runs"
    )
    await asyncio.sleep(1.0)  # three eviction checks
    assert secure.pod("fits")["status"]["phase"] == "Running"  # type: ignore[index]


# ------------------------------------------------------------------------------------- TokenRequest
async def test_token_request_binds_to_a_pod_and_checks_what_it_is_given(secure: Sim) -> None:
    grant(secure, "reader", POD_READER)
    admin = secure.cluster.admin_token
    base = "/api/v1/namespaces/default/serviceaccounts"
    status, answer = await api(secure, f"{base}/reader/token", admin, "POST", {"spec": {}})
    assert status == 201 and answer["kind"] == "TokenRequest", answer
    assert answer["spec"]["expirationSeconds"] == 3600
    assert answer["spec"]["audiences"] == ["https://kubernetes.default.svc.cluster.local"]
    token = answer["status"]["token"]
    status, review = await api(secure, "/api/v1/namespaces/default/pods", token)
    assert status == 200, review
    status, _ = await api(secure, "/api/v1/namespaces/default/configmaps", token)
    assert status == 403
    # another audience's token is not for this API server
    status, answer = await api(
        secure, f"{base}/reader/token", admin, "POST", {"spec": {"audiences": ["vault"]}}
    )
    status, _ = await api(secure, "/api/v1/namespaces/default/pods", answer["status"]["token"])
    assert status == 401
    # refusals name what is wrong
    status, answer = await api(
        secure, f"{base}/reader/token", admin, "POST", {"spec": {"expirationSeconds": 60}}
    )
    assert status == 422 and "may not specify a duration less than 10 minutes" in answer["message"]
    status, answer = await api(secure, f"{base}/ghost/token", admin, "POST", {"spec": {}})
    assert status == 404 and answer["message"] == 'serviceaccounts "ghost" not found'
    secure.create_pod("other", [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "300"]}])
    bound = {"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "other"}}}
    status, answer = await api(secure, f"{base}/reader/token", admin, "POST", bound)
    assert status == 400 and "to pod running with different serviceaccount name" in answer["message"]
    # a ServiceAccount may not mint its own tokens without RBAC allowing serviceaccounts/token
    status, _ = await api(secure, f"{base}/reader/token", token, "POST", {"spec": {}})
    assert status == 403


async def test_every_namespace_gets_the_default_account_and_the_root_ca(secure: Sim) -> None:
    namespaces, configmaps = rt_of("", "namespaces"), rt_of("", "configmaps")
    secure.verbs.create(namespaces, "", {"metadata": {"name": "team-a"}})
    await secure.cluster.controllers.settle()
    ca = secure.verbs.get(configmaps, "team-a", "kube-root-ca.crt")["data"]["ca.crt"]
    assert ca == secure.cluster._ca_pem.decode()
    assert secure.verbs.get(SAS, "team-a", "default")
    secure.verbs.delete(configmaps, "team-a", "kube-root-ca.crt", {})
    await eventually(
        lambda: secure.verbs.store.get(configmaps, "team-a", "kube-root-ca.crt"), 5, "republished"
    )
    with pytest.raises(ApiError):
        secure.verbs.get(SAS, "team-a", "ghost")
