"""A workspace cannot hand work to the cluster behind the platform's back (issue 17): jobs go through
the jobs API (gpuworkspace-jobs, its own identity), never through a Kubernetes credential in the
workspace.

Against the RBAC-enforcing devcluster of this package (exactly the shipped RBAC): alice's workspace
pod mounts no ServiceAccount token, and neither credential a workspace could come by is allowed to
create a Job: its ServiceAccount (``system:serviceaccount:gpu-workspaces:default``, the identity any
token of that pod would carry) gets 403 Forbidden, and the single-user server's own hub API token,
which the workspace does hold, is no Kubernetes credential at all (401). Nothing is created. (The
job pods the service creates mount no token either: ``tests/e2e/test_jobs.py`` reads the live Job.)

The ServiceAccount's token comes from the devcluster's token file (``Devcluster(service_accounts=)``),
the same way the services' identities get theirs: what is tested is the authorization of that user,
however its token was issued.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.harness import HubStack

from .conftest import WORKSPACE_SA, kubectl, user_of

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

NS = "gpu-workspaces"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "from-the-notebook",
        "namespace": NS,
        "labels": {"kueue.x-k8s.io/queue-name": "training"},
    },
    "spec": {
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "train", "image": "python:3.11", "command": ["python", "-c", "1"]}],
            }
        }
    },
}


def _workspace_pod(stack: HubStack) -> dict[str, Any]:
    selector = "gpuworkspace.dev/user=alice,gpuworkspace.dev/server=idn,component=singleuser-server"
    (pod,) = json.loads(kubectl(stack.kubeconfig, "-n", NS, "get", "pods", "-l", selector, "-o", "json"))[
        "items"
    ]
    return pod  # type: ignore[no-any-return]


def _hub_token(stack: HubStack, pod: dict[str, Any]) -> str:
    """The single-user server's hub API token, as the pod gets it (its env, or the Secret it names)."""
    (env,) = [e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "JUPYTERHUB_API_TOKEN"]
    if "value" in env:
        return str(env["value"])
    ref = env["valueFrom"]["secretKeyRef"]
    secret = json.loads(kubectl(stack.kubeconfig, "-n", NS, "get", "secret", ref["name"], "-o", "json"))
    return base64.b64decode(secret["data"][ref["key"]]).decode()


def _as_token(stack: HubStack, token: str, path: Path) -> Path:
    """The admin kubeconfig (same server and CA) with ``token`` as its only user."""
    doc = yaml.safe_load(stack.kubeconfig.read_text())
    doc["users"] = [{"name": "workspace", "user": {"token": token}}]
    for context in doc["contexts"]:
        context["context"]["user"] = "workspace"
    path.write_text(yaml.safe_dump(doc))
    return path


def _create_job(kubeconfig: Path) -> str:
    """kubectl's error for ``create job`` with ``kubeconfig`` (the test fails if it is allowed)."""
    with pytest.raises(RuntimeError) as refused:
        # --validate=false: the create itself, not kubectl's schema download, is what must be refused
        kubectl(kubeconfig, "-n", NS, "create", "--validate=false", "-f", "-", input_text=json.dumps(JOB))
    return str(refused.value)


def test_the_workspace_cannot_create_a_job_in_the_kubernetes_api(
    rbac_stack: HubStack, tmp_path: Path
) -> None:
    stack = rbac_stack
    stack.hub.start_server("alice", "idn", {"profile": "cpu-small"})
    stack.hub.wait_ready("alice", "idn")
    try:
        pod = _workspace_pod(stack)
        spec = pod["spec"]
        assert spec["automountServiceAccountToken"] is False
        assert (NS, spec.get("serviceAccountName") or "default") == WORKSPACE_SA
        projected = [
            v
            for v in spec.get("volumes") or []
            for s in (v.get("projected") or {}).get("sources") or []
            if "serviceAccountToken" in s
        ]
        mounts = [m["mountPath"] for c in spec["containers"] for m in c.get("volumeMounts") or []]
        assert projected == [] and not [m for m in mounts if m.startswith(TOKEN_PATH)], (projected, mounts)

        as_sa = _create_job(stack.devcluster.service_account_kubeconfig(*WORKSPACE_SA))
        assert (
            "(Forbidden)" in as_sa
            and f'User "{user_of(WORKSPACE_SA)}" cannot create resource "jobs"' in as_sa
        )

        as_hub_token = _create_job(_as_token(stack, _hub_token(stack, pod), tmp_path / "kubeconfig"))
        assert "You must be logged in to the server" in as_hub_token and "Unauthorized" in as_hub_token

        jobs = json.loads(kubectl(stack.kubeconfig, "-n", NS, "get", "jobs", "-o", "json"))["items"]
        assert [j["metadata"]["name"] for j in jobs if j["metadata"]["name"] == JOB["metadata"]["name"]] == []
    finally:
        stack.hub.stop_server("alice", "idn")
