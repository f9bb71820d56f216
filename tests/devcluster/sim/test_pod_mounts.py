"""Pods see their volumes where their containers mount them (the kubelet's mount namespaces, sim/nslaunch.py).

Every check reads what the container's own process printed (pod logs through the API server) or did; the
host's side is only looked at to prove what did *not* reach it. Skipped where mount namespaces are not
available (the kubelet then falls back to host directories, and logs why).
"""

# ruff: noqa: F811 -- the tests take the imported ``sim`` fixture by name
from __future__ import annotations

import asyncio
import base64
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from gpuworkspace_devcluster.sim import images, mountns
from gpuworkspace_devcluster.sim.hubrun import rebind

from .test_kubelet import (
    CONFIGMAPS,
    PODS,
    PVCS,
    PVS,
    SECRETS,
    Sim,
    eventually,
    http_get,
    sim,  # noqa: F401 -- the fixture: a DevCluster with one kubelet
)
from .test_pod_identity import grant, secure  # noqa: F401 -- secure: the TLS + RBAC fixture
from .test_pod_identity import log_has as identity_log

Obj = dict[str, Any]
NAMESPACES, WHY = mountns.available(sys.executable)
needs_namespaces = pytest.mark.skipif(not NAMESPACES, reason=f"no mount namespaces here: {WHY}")
Z2JH_HUB_ROLE = Path(__file__).parents[2] / "e2e_rbac" / "z2jh-hub-role.yaml"  # z2jh's hub Role, verbatim
Z2JH_HUB_RULES = next(d for d in yaml.safe_load_all(Z2JH_HUB_ROLE.read_text()) if d["kind"] == "Role")[
    "rules"
]


async def pod_log(sim: Sim, name: str) -> str:
    status, text = await http_get(f"{sim.cluster.url}/api/v1/namespaces/default/pods/{name}/log")
    assert status == 200, text
    return text


async def log_has(sim: Sim, name: str, *needles: str, limit_s: float = 20.0) -> str:
    """The pod's log once it contains every needle (fails naming the log otherwise)."""
    seen = {"log": ""}

    async def check() -> bool:
        status, seen["log"] = await http_get(f"{sim.cluster.url}/api/v1/namespaces/default/pods/{name}/log")
        return status == 200 and all(n in seen["log"] for n in needles)  # 400 until the container started

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if await check():
            return seen["log"]
        await asyncio.sleep(0.1)
    raise AssertionError(f"{name}'s log lacks {needles}: {seen['log']!r}")


def shell(name: str, script: str, mounts: list[Obj], **extra: Any) -> Obj:
    return {
        "name": name,
        "image": "busybox:1.36",
        "command": ["sh", "-c", script],
        "volumeMounts": mounts,
        **extra,
    }


def bound_claim(sim: Sim, name: str, path: Path) -> None:
    """A PVC bound to a hostPath PV at ``path`` (what the PV controller would leave)."""
    path.mkdir(parents=True, exist_ok=True)
    sim.verbs.create(
        PVS,
        "",
        {
            "metadata": {"name": f"pv-{name}"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "hostPath": {"path": str(path)},
            },
        },
    )
    pvc, _ = sim.verbs.create(
        PVCS,
        "default",
        {
            "metadata": {"name": name},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "1Gi"}},
                "volumeName": f"pv-{name}",
            },
        },
    )
    sim.verbs.update(PVCS, "default", name, {**pvc, "status": {"phase": "Bound"}}, subresource="status")


# ------------------------------------------------------------------------------------------ pure parts
def test_jupyterhub_image_runs_the_installed_hub_and_unknown_images_do_not_exist() -> None:
    hub = images.lookup("quay.io/jupyterhub/jupyterhub:5.3")
    assert hub is not None and hub.kind == "hub"
    assert (hub.workdir, hub.cmd) == ("/srv/jupyterhub", ("jupyterhub",))
    assert hub.env["PATH"].split(":")[0] == images.NODE_BIN  # configurable-http-proxy, as the image has it
    argv = images.container_argv(hub, [], ["jupyterhub", "--config", "/etc/jupyterhub/jupyterhub_config.py"])
    cmd = images.host_command(hub, argv, {}, python="/py", bin_dir="/venv/bin", exists=lambda p: True)
    assert cmd.argv == ["/py", "-m", images.HUB_MODULE, "--config", "/etc/jupyterhub/jupyterhub_config.py"]
    assert images.lookup("quay.io/jupyterhub/k8s-hub:4.2.0") is None
    assert "not found" in images.pull_error("quay.io/jupyterhub/k8s-hub:4.2.0")
    assert rebind("http://:8081", "127.17.0.9") == "http://127.17.0.9:8081"
    assert rebind("http://0.0.0.0:8000/base/", "127.17.0.9") == "http://127.17.0.9:8000/base/"
    assert rebind("http://hub:8081", "127.17.0.9") == "http://hub:8081"


# ---------------------------------------------------------------------------------------------- pods
@needs_namespaces
async def test_secret_keys_items_and_modes_at_the_mount_path(sim: Sim) -> None:
    data = {"password": base64.b64encode(b"s3cret-value").decode(), "user": base64.b64encode(b"ada").decode()}
    sim.verbs.create(SECRETS, "default", {"metadata": {"name": "creds"}, "data": data})
    script = (
        "cat /etc/creds/password; echo; cat /etc/picked/login; echo; echo \"picked=$(ls /etc/picked | tr '\\n' ' ')\"; "
        "stat -L -c 'mode=%a' /etc/creds/user; echo x > /etc/creds/password || echo refused; sleep 300"
    )
    mounts = [{"name": "creds", "mountPath": "/etc/creds"}, {"name": "picked", "mountPath": "/etc/picked"}]
    volumes = [
        {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        {"name": "picked", "secret": {"secretName": "creds", "items": [{"key": "user", "path": "login"}]}},
    ]
    probe = {"exec": {"command": ["cat", "/etc/creds/password"]}, "periodSeconds": 1}
    sim.create_pod("reader", [shell("c", script, mounts, readinessProbe=probe)], volumes=volumes)
    text = await log_has(sim, "reader", "s3cret-value", "ada", "mode=400", "refused")
    assert "picked=login \n" in text  # items: only the listed key, at its path
    assert "Read-only file system" in text
    # an exec probe runs in the container's namespace too: the mounted file is there
    await eventually(lambda: sim.condition("reader", "Ready") == "True", 20, "Ready by exec probe")


@needs_namespaces
async def test_a_read_only_claim_refuses_writes_a_writable_one_keeps_them(sim: Sim, tmp_path: Path) -> None:
    bound_claim(sim, "data", tmp_path / "pv-data")
    (tmp_path / "pv-data" / "hello").write_text("from the disk\n")
    script = (
        "cat /ro/hello; echo x > /ro/new 2>&1 || echo ro-refused; "
        "echo x > /ro2/new 2>&1 || echo ro2-refused; echo kept > /rw/new && echo rw-ok; sleep 300"
    )
    mounts = [
        {"name": "data", "mountPath": "/ro", "readOnly": True},
        {"name": "data-ro", "mountPath": "/ro2"},
        {"name": "data", "mountPath": "/rw", "subPath": "sub"},
    ]
    volumes = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "data-ro", "persistentVolumeClaim": {"claimName": "data", "readOnly": True}},
    ]
    sim.create_pod("claims", [shell("c", script, mounts)], volumes=volumes)
    text = await log_has(sim, "claims", "from the disk", "ro-refused", "ro2-refused", "rw-ok")
    assert "Read-only file system" in text
    assert not (tmp_path / "pv-data" / "new").exists()
    assert (tmp_path / "pv-data" / "sub" / "new").read_text() == "kept\n"  # subPath: a directory of the claim


@needs_namespaces
async def test_configmap_subpath_file_and_projected_updates(sim: Sim) -> None:
    cm, _ = sim.verbs.create(
        CONFIGMAPS,
        "default",
        {"metadata": {"name": "hub-config"}, "data": {"jupyterhub_config.py": "c.version = 1\n"}},
    )
    script = (
        'while true; do echo "sub=$(cat /etc/jupyterhub/jupyterhub_config.py)"; '
        'echo "dir=$(cat /config/jupyterhub_config.py)"; sleep 0.2; done'
    )
    mounts = [
        {
            "name": "cfg",
            "mountPath": "/etc/jupyterhub/jupyterhub_config.py",
            "subPath": "jupyterhub_config.py",
        },
        {"name": "cfg", "mountPath": "/config"},
    ]
    volumes = [{"name": "cfg", "configMap": {"name": "hub-config"}}]
    sim.create_pod("cfg", [shell("c", script, mounts)], volumes=volumes)
    await log_has(sim, "cfg", "sub=c.version = 1", "dir=c.version = 1")
    sim.verbs.update(
        CONFIGMAPS, "default", "hub-config", {**cm, "data": {"jupyterhub_config.py": "c.version = 2\n"}}
    )
    text = await log_has(sim, "cfg", "dir=c.version = 2")
    deadline = time.monotonic() + 20
    while text.count("dir=c.version = 2") < 2 and time.monotonic() < deadline:  # a whole loop after it
        await asyncio.sleep(0.2)
        text = await pod_log(sim, "cfg")
    after = text.split("dir=c.version = 2", 1)[1]
    assert "sub=c.version = 1" in after and "sub=c.version = 2" not in text  # subPath: never updated
    pod = sim.pod("cfg")
    assert pod is not None
    volume = sim.kubelet.volumes.pod_dir(pod) / "volumes" / "cfg"
    assert (volume / "..data").is_symlink() and (volume / "jupyterhub_config.py").is_symlink()
    assert len([p for p in volume.iterdir() if p.name.startswith("..20")]) == 1  # the old payload is gone


@needs_namespaces
async def test_emptydir_memory_downward_api_token_and_the_host_untouched(sim: Sim, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("host\n")
    script = (
        "stat -f -c 'fs=%T' /cache; dd if=/dev/zero of=/cache/big bs=1024 count=2048 2>&1 | head -1; "
        "echo size=$(stat -c %s /cache/big); "
        "cat /etc/podinfo/labels; echo; cat /var/run/secrets/tokens/token | head -c 30; echo; "
        f"echo changed > {outside} && cat {outside}; pwd; echo home=$HOME; touch /fresh && echo layer-ok; "
        "sleep 300"
    )
    mounts = [
        {"name": "cache", "mountPath": "/cache"},
        {"name": "podinfo", "mountPath": "/etc/podinfo"},
        {"name": "token", "mountPath": "/var/run/secrets/tokens"},
    ]
    volumes = [
        {"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        {
            "name": "podinfo",
            "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
        },
        {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
    ]
    body = {
        "metadata": {"name": "misc", "labels": {"app": "misc"}},
        "spec": {
            "nodeName": "sim-node-a",
            "containers": [shell("c", script, mounts, workingDir="/srv/app")],
            "volumes": volumes,
        },
    }
    sim.verbs.create(PODS, "default", body)
    text = await log_has(sim, "misc", "fs=tmpfs", 'app="misc"', "eyJ", "layer-ok")  # a JWT: the bound token
    assert "No space left on device" in text and "size=1048576" in text  # sizeLimit: 1 MiB of the 2 written
    assert "changed" in text and outside.read_text() == "host\n"  # a copy in its own layer, never the host's
    assert "/srv/app\nhome=/root\n" in text.replace("\r", "")  # workingDir made, busybox's HOME
    assert not await asyncio.to_thread(lambda: Path("/srv/app").exists() or Path("/fresh").exists())
    pod = sim.pod("misc")
    assert pod is not None
    sim.verbs.delete(PODS, "default", "misc", {"gracePeriodSeconds": 0})
    await eventually(lambda: sim.pod("misc") is None, 20, "pod gone")
    cache = sim.kubelet.volumes.pod_dir(pod) / "volumes" / "cache"
    await eventually(lambda: not cache.exists(), 20, "the tmpfs unmounted and removed")


@needs_namespaces
async def test_jupyterhub_image_with_a_mounted_config_is_ready_on_8081(sim: Sim) -> None:
    config = (
        'c.JupyterHub.hub_bind_url = "http://:8081"\n'
        'c.JupyterHub.authenticator_class = "dummy"\n'
        'c.JupyterHub.db_url = "sqlite:///jupyterhub.sqlite"\n'
        'print("config read from the ConfigMap", flush=True)\n'
    )
    sim.verbs.create(
        CONFIGMAPS, "default", {"metadata": {"name": "hub"}, "data": {"jupyterhub_config.py": config}}
    )
    container = {
        "name": "hub",
        "image": "quay.io/jupyterhub/jupyterhub:5.3",
        "args": ["jupyterhub", "--config", "/etc/jupyterhub/jupyterhub_config.py"],
        "ports": [{"containerPort": 8081, "name": "hub"}],
        "readinessProbe": {"httpGet": {"path": "/hub/health", "port": 8081}, "periodSeconds": 1},
        "volumeMounts": [
            {
                "name": "config",
                "mountPath": "/etc/jupyterhub/jupyterhub_config.py",
                "subPath": "jupyterhub_config.py",
            }
        ],
    }
    sim.create_pod("hub", [container], volumes=[{"name": "config", "configMap": {"name": "hub"}}])
    await eventually(lambda: sim.condition("hub", "Ready") == "True", 60, "hub Ready")
    ip = sim.pod("hub")["status"]["podIP"]  # type: ignore[index]
    status, text = await http_get(f"http://{ip}:8081/hub/api")
    assert status == 200 and '"version"' in text
    log = await pod_log(sim, "hub")
    assert "config read from the ConfigMap" in log  # the mounted file is the one the hub ran
    assert f"Hub API listening on http://{ip}:8081/hub/" in log


@needs_namespaces
async def test_kubespawner_in_the_hub_pod_starts_a_server_that_reaches_the_hub(secure: Sim) -> None:
    """The z2jh layout: the hub runs in a pod as its own ServiceAccount (the token the admission plugin
    mounts, RBAC from a Role bound to it, ``load_incluster_config`` over TLS); KubeSpawner starts a
    single-user pod, whose jupyterhub-singleuser reaches the hub at the hub pod's IP (it exits when it
    cannot)."""
    sim = secure
    token = "tester-token-0123456789"
    config = (
        'c.JupyterHub.hub_bind_url = "http://:8081"\n'
        'c.JupyterHub.authenticator_class = "dummy"\n'
        'c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"\n'
        'c.KubeSpawner.namespace = "default"\n'
        'c.KubeSpawner.image = "quay.io/jupyter/base-notebook:2024-12-02"\n'
        'c.KubeSpawner.extra_pod_config = {"nodeName": "sim-node-a"}\n'
        "c.KubeSpawner.start_timeout = c.KubeSpawner.http_timeout = 150\n"
        f'c.JupyterHub.services = [{{"name": "tester", "api_token": "{token}"}}]\n'
        'c.JupyterHub.load_roles = [{"name": "tester", "scopes": ["admin:users", "admin:servers"], '
        '"services": ["tester"]}]\n'
    )
    sim.verbs.create(
        CONFIGMAPS, "default", {"metadata": {"name": "hub"}, "data": {"jupyterhub_config.py": config}}
    )
    grant(sim, "hub", Z2JH_HUB_RULES)
    container = {
        "name": "hub",
        "image": "quay.io/jupyterhub/jupyterhub:5.3",
        "args": ["jupyterhub", "--config", "/usr/local/etc/jupyterhub/jupyterhub_config.py"],
        "readinessProbe": {"httpGet": {"path": "/hub/health", "port": 8081}, "periodSeconds": 1},
        "volumeMounts": [
            {
                "name": "config",
                "mountPath": "/usr/local/etc/jupyterhub/jupyterhub_config.py",
                "subPath": "jupyterhub_config.py",
            }
        ],
    }
    volumes = [{"name": "config", "configMap": {"name": "hub"}}]
    hub = sim.create_pod("hub", [container], volumes=volumes, serviceAccountName="hub")
    assert any(v["name"].startswith("kube-api-access-") for v in hub["spec"]["volumes"])
    await eventually(lambda: sim.condition("hub", "Ready") == "True", 60, "hub Ready")
    hub_ip = sim.pod("hub")["status"]["podIP"]  # type: ignore[index]
    api = f"http://{hub_ip}:8081/hub/api"
    headers = {"Authorization": f"token {token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.post(f"{api}/users/alice") as resp:
            assert resp.status in (201, 409), await resp.text()
        async with session.post(f"{api}/users/alice/server") as resp:
            assert resp.status in (201, 202), await resp.text()
        deadline = time.monotonic() + 150
        user: Obj = {}
        while time.monotonic() < deadline:
            async with session.get(f"{api}/users/alice") as resp:
                user = await resp.json()
            if (user.get("servers") or {}).get("", {}).get("ready"):
                break
            await asyncio.sleep(0.5)
        assert (user.get("servers") or {}).get("", {}).get("ready"), user
    pod = sim.pod("jupyter-alice")
    assert pod is not None and pod["status"]["phase"] == "Running"
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["JUPYTERHUB_API_URL"] == f"http://{hub_ip}:8081/hub/api"  # the hub pod's own address
    assert not pod["spec"].get("automountServiceAccountToken", True)  # KubeSpawner's pods get no token
    log = await identity_log(sim, "jupyter-alice", "Starting jupyterhub")
    assert "Failed to connect to my Hub" not in log
    hub_user = "system:serviceaccount:default:hub"  # the hub's own identity created the pod
    assert any(
        r.user == hub_user and r.verb == "create" and r.resource == "pods" and r.status == 201
        for r in sim.cluster.api.request_log
    )
