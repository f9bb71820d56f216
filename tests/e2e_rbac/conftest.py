"""One stack for the least-privilege e2e: a devcluster that enforces RBAC, holding exactly the RBAC of
``helm-values/extra-manifests/`` and z2jh's hub Role, and a hub that authenticates as the ServiceAccount
``jhub/hub``, as it does in the hub pod, with each service that talks to Kubernetes authenticating as
its own ServiceAccount (``jhub/gpuworkspace-disks`` ..., as its Deployment does).

Package-scoped like ``tests/e2e``'s stack: it starts once, and `make test` keeps the package in one
test process (tests/conftest.py), whose devclusters use that process's instance.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.harness import REPO, Devcluster, HubStack

HERE = Path(__file__).resolve().parent
MANIFESTS = REPO / "helm-values" / "extra-manifests"
Z2JH_ROLE = HERE / "z2jh-hub-role.yaml"
HUB_SA = ("jhub", "hub")  # z2jh's hub ServiceAccount in the release namespace the manifests use
# Each service's own ServiceAccount (its Deployment's), and the hub_config variable naming its kubeconfig.
SERVICE_SAS = {
    ("jhub", "gpuworkspace-disks"): "GPUWS_DISKS_KUBECONFIG",
    ("jhub", "gpuworkspace-attribution"): "GPUWS_ATTRIBUTION_KUBECONFIG",
    ("jhub", "gpuworkspace-reclaimer"): "GPUWS_RECLAIMER_KUBECONFIG",
    ("jhub", "gpuworkspace-jobs"): "GPUWS_JOBS_KUBECONFIG",
}
IDENTITIES = (HUB_SA, *SERVICE_SAS)
# The identity of a workspace's pod (and a job's): no serviceAccountName, so its namespace's `default`.
# It gets a token here only so that a test can call the API as it; its pods mount none.
WORKSPACE_SA = ("gpu-workspaces", "default")
KUEUE_OBJECTS = HERE / "kueue-objects.yaml"
# Not applied: the devcluster serves no apps/v1 (the agent's DaemonSet and the services' Deployments
# cannot be stored or run: the hub runs the services as local processes, each as its Deployment's
# ServiceAccount). Services are applied; NetworkPolicies are stored but not enforced (not RBAC). Nor
# does it serve ResourceQuota or LimitRange (tests/helm/test_limits.py checks those).
SKIPPED_KINDS = {"DaemonSet", "Deployment", "ResourceQuota", "LimitRange"}


def user_of(identity: tuple[str, str]) -> str:
    return f"system:serviceaccount:{identity[0]}:{identity[1]}"


def manifest_files() -> list[Path]:
    """The extra manifests in the order an admin applies them (namespaces first), then z2jh's Role."""
    top = sorted(MANIFESTS.glob("*.yaml"))
    return [*top, *sorted(MANIFESTS.glob("*/*.yaml")), Z2JH_ROLE]


def load_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kubectl(kubeconfig: Path, *args: str, input_text: str | None = None) -> str:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    done = subprocess.run(
        ["kubectl", *args], check=False, env=env, capture_output=True, text=True, input=input_text, timeout=60
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def apply_manifests(kubeconfig: Path) -> None:
    for path in manifest_files():
        for doc in load_documents(path):
            if doc["kind"] not in SKIPPED_KINDS:
                kubectl(kubeconfig, "apply", "-f", "-", input_text=json.dumps(doc))


def catalog_from_configmaps(target: Path) -> Path:
    """The catalog directory the hub pod mounts: every key of the three catalog ConfigMaps, one file each."""
    target.mkdir(parents=True)
    for path in MANIFESTS.rglob("*.yaml"):
        for doc in load_documents(path):
            if doc["kind"] == "ConfigMap" and "gpuworkspace.dev/catalog" in doc["metadata"]["labels"]:
                for key, text in doc["data"].items():
                    (target / key).write_text(text)
    return target


@pytest.fixture(scope="package")
def rbac_stack() -> Iterator[HubStack]:
    workdir = Path(tempfile.mkdtemp(prefix="gpuws-e2e-rbac-"))
    hub_dir = workdir / "hub-sa"  # the hub's $GPUWS_STATE_DIR: only the ServiceAccounts' kubeconfigs
    env = {
        "GPUWS_STATE_DIR": str(hub_dir),
        "KUBECONFIG": str(hub_dir / "kubeconfig"),
        **{variable: str(hub_dir / f"kubeconfig-{sa[1]}") for sa, variable in SERVICE_SAS.items()},
        "GPUWS_ATTRIBUTION_INTERVAL": "2",
        # as helm-values/values.yaml runs it: watching workspace pods in their namespace only
        "GPUWS_ATTRIBUTION_ARGS": "--namespace gpu-workspaces",
        "GPUWS_CULLER": "0",  # the culler never calls Kubernetes (and has no identity): nothing to prove
    }
    stack = HubStack(
        workdir, spawner="gpuworkspace", catalog=catalog_from_configmaps(workdir / "catalog"), extra_env=env
    )
    stack.devcluster = Devcluster(
        workdir / "devcluster", stack.log_dir, rbac=True, service_accounts=(*IDENTITIES, WORKSPACE_SA)
    )
    try:
        stack.devcluster.start()
        apply_manifests(stack.kubeconfig)
        kubectl(stack.kubeconfig, "apply", "-f", str(KUEUE_OBJECTS))
        hub_dir.mkdir()
        shutil.copy(stack.devcluster.service_account_kubeconfig(*HUB_SA), hub_dir / "kubeconfig")
        for sa in SERVICE_SAS:
            shutil.copy(stack.devcluster.service_account_kubeconfig(*sa), hub_dir / f"kubeconfig-{sa[1]}")
        stack.oidc.start()
        stack.hub.start()
    except BaseException:
        stack.dump_logs()
        stack.close()
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    try:
        yield stack
    finally:
        stack.close()
        if not os.environ.get("GPUWS_E2E_KEEP"):
            shutil.rmtree(workdir, ignore_errors=True)
