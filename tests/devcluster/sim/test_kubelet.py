"""The simulated kubelet against a real DevCluster: processes, pod IPs, events, status, volumes, deletion.

Each test creates its Node, a SimContext and a Kubelet with short back-offs and heartbeats; pods are bound
by setting ``spec.nodeName`` at creation. Checks are eventual (polling with a deadline), never fixed sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gpuworkspace_devcluster.addresses import instance_from_env, node_octet
from gpuworkspace_devcluster.cluster import DevCluster
from gpuworkspace_devcluster.errors import ApiError
from gpuworkspace_devcluster.sim import images, podenv
from gpuworkspace_devcluster.sim.base import rt_of
from gpuworkspace_devcluster.sim.context import SimContext
from gpuworkspace_devcluster.sim.kubelet import Kubelet, KubeletConfig, KubeletRuntime
from gpuworkspace_devcluster.sim.podstatus import go_duration
from gpuworkspace_devcluster.sim.podvolumes import PodVolumes, attachment_name
from gpuworkspace_devcluster.sim.procs import MARKER
from gpuworkspace_devcluster.store import Store

Obj = dict[str, Any]
PODS, NODES, EVENTS = rt_of("", "pods"), rt_of("", "nodes"), rt_of("", "events")
PVS, PVCS, VAS = (
    rt_of("", "persistentvolumes"),
    rt_of("", "persistentvolumeclaims"),
    rt_of("storage.k8s.io", "volumeattachments"),
)
SECRETS, CONFIGMAPS, LEASES = (
    rt_of("", "secrets"),
    rt_of("", "configmaps"),
    rt_of("coordination.k8s.io", "leases"),
)
# node 7 of this process's devcluster instance: pod IPs 127.<OCTET>.x.y (17 in instance 0)
NODE, OCTET = "sim-node-a", node_octet(instance_from_env(), 7)
RBD = "rbd.csi.ceph.com"


def fast_config() -> KubeletConfig:
    return KubeletConfig(
        pull_delay_s=0.05,
        backoff_base_s=0.3,
        backoff_max_s=1.0,
        lease_interval_s=0.1,
        node_status_interval_s=0.2,
        volume_retry_s=0.1,
        probe_period_cap_s=0.2,
    )


def marked_pids(state_dir: Path) -> list[int]:
    """Every process of a container the devcluster with ``state_dir`` ran (what must be gone after its
    kubelet stops): a container marker, and volumes under ``state_dir`` (``GPUWORKSPACE_ROOT``, which
    every container gets). Other test processes' devclusters run containers at the same time."""
    root = f"GPUWORKSPACE_ROOT={state_dir}".encode()
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    environ = f.read()
            except OSError:
                continue
            if f"{MARKER}=".encode() in environ and root in environ:
                pids.append(int(entry.name))
    return pids


async def eventually(check: Callable[[], Any], limit_s: float = 15.0, what: str = "") -> Any:
    deadline, last = time.monotonic() + limit_s, None
    while time.monotonic() < deadline:
        try:
            value = check()
        except (AssertionError, KeyError, IndexError, TypeError, OSError) as exc:
            value, last = None, exc
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or check}: {last!r}")


@dataclass
class Sim:
    cluster: DevCluster
    ctx: SimContext
    kubelet: Kubelet

    @property
    def verbs(self) -> Any:
        return self.cluster.verbs

    def pod(self, name: str, ns: str = "default") -> Obj | None:
        return self.verbs.store.get(PODS, ns, name)

    def create_pod(self, name: str, containers: list[Obj], **spec: Any) -> Obj:
        body = {"metadata": {"name": name}, "spec": {"nodeName": NODE, "containers": containers, **spec}}
        return self.verbs.create(PODS, "default", body)[0]

    def events(self, name: str) -> list[tuple[str, str]]:
        """(reason, message) of the pod's events, in creation order."""
        evs = [e for e in self.verbs.store.items(EVENTS, "default") if e["involvedObject"]["name"] == name]
        evs.sort(
            key=lambda e: (
                e["firstTimestamp"],
                int(e["metadata"]["resourceVersion"]) if e["count"] == 1 else 0,
            )
        )
        return [(e["reason"], e["message"]) for e in evs]

    def status(self, name: str, container: int = 0) -> Obj:
        pod = self.pod(name)
        assert pod is not None
        return pod["status"]["containerStatuses"][container]

    def condition(self, name: str, kind: str) -> str:
        pod = self.pod(name) or {}
        return next(
            (c["status"] for c in pod.get("status", {}).get("conditions", []) if c["type"] == kind), ""
        )


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[Sim]:
    async with DevCluster(tmp_path / "state", bookmark_interval_s=0.5) as cluster:
        cluster.verbs.create(
            NODES, "", {"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}}
        )
        ctx = SimContext(cluster.verbs, cluster.state_dir or tmp_path, cluster.pod_runtime)
        kubelet = Kubelet(ctx, NODE, OCTET, fast_config(), register=cluster.controllers.kubelet_nodes.add)
        await kubelet.start()
        sim = Sim(cluster, ctx, kubelet)
        try:
            yield sim
        finally:
            await sim.kubelet.stop()
            await eventually(lambda: not marked_pids(tmp_path), 5, "every container process gone")


async def http_get(url: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp,
    ):
        return resp.status, await resp.text()


async def answered(url: str, limit_s: float = 15.0) -> tuple[int, str]:
    """The first answer from ``url``: a pod is Ready once its container runs (no readinessProbe), and its
    server may not listen yet, so a caller waits for the port like JupyterHub does for a new server."""
    deadline, last = time.monotonic() + limit_s, None
    while time.monotonic() < deadline:
        try:
            return await http_get(url)
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            last = exc
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} did not answer within {limit_s} s: {last!r}")


# --------------------------------------------------------------------- pure parts
def test_image_table() -> None:
    assert images.normalize("python:3.11") == ("docker.io/library/python", "3.11")
    assert images.normalize("busybox") == ("docker.io/library/busybox", "latest")
    assert images.normalize("quay.io/jupyter/base-notebook:2024-12-02")[0] == "quay.io/jupyter/base-notebook"
    nb = images.lookup("quay.io/jupyter/base-notebook:2024-12-02")
    assert nb is not None and nb.kind == "notebook" and nb.home == "/home/jovyan"
    assert images.lookup("jupyterhub/singleuser:5.2").kind == "notebook"  # type: ignore[union-attr]
    assert images.lookup("gpuworkspace.dev/lite-singleuser:1").kind == "lite"  # type: ignore[union-attr]
    assert images.lookup("registry.example.com/nope:1") is None
    argv = images.container_argv(nb, [], ["jupyterhub-singleuser", "--ip=0.0.0.0"])
    cmd = images.host_command(nb, argv, {}, python="/py", bin_dir="/venv/bin", exists=lambda p: True)
    assert cmd.server and cmd.exe == ["/venv/bin/jupyterhub-singleuser"] and cmd.args == ["--ip=0.0.0.0"]
    # papermill: the image contract's job image has it (this interpreter's); docker-stacks' has not
    workspace = images.lookup("gpuworkspace.dev/workspace-notebook@sha256:" + "0" * 64)
    assert workspace is not None
    paper = ["papermill", "a.ipynb", "/outputs/a.ipynb"]
    ran = images.host_command(workspace, paper, {}, python="/py", bin_dir="/venv/bin", exists=lambda p: True)
    assert ran.argv == ["/venv/bin/papermill", "a.ipynb", "/outputs/a.ipynb"] and not ran.server
    assert images.host_command(
        nb, paper, {}, python="/py", bin_dir="/venv/bin", exists=lambda p: True
    ).exe == ["papermill"]  # looked up on the image's PATH: not there
    args = images.server_args(cmd.args, "127.17.0.2", lambda p: "/host" + p, "/host/home", as_root=True)
    assert args == ["--ServerApp.root_dir=/host/home", "--allow-root", "--ip=127.17.0.2"]
    assert (
        images.rebind_service_url("http://0.0.0.0:8888/user/a/", "127.17.0.2")
        == "http://127.17.0.2:8888/user/a/"
    )
    assert podenv.expand("$(A)-$$(A)-$(B)", {"A": "x"}) == "x-$(A)-$(B)"
    assert [go_duration(s) for s in (0.177, 1.2, 10, 80, 300)] == ["177ms", "1.2s", "10s", "1m20s", "5m0s"]


# ------------------------------------------------------------------------ pods
async def test_python_http_server_pods_get_own_ips_serve_log_and_delete(sim: Sim) -> None:
    container = {
        "name": "web",
        "image": "python:3.11",
        "command": ["python", "-m", "http.server", "8000", "--bind", "$(POD_IP)"],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"containerPort": 8000}],
        "workingDir": "/srv",
        "volumeMounts": [{"name": "www", "mountPath": "/srv"}],
    }
    for name in ("web", "web2"):  # one after the other: the second finds the image on the node
        sim.create_pod(name, [container], volumes=[{"name": "www", "emptyDir": {}}])
        await eventually(lambda n=name: sim.condition(n, "Ready") == "True", what=f"{name} Ready")
    await eventually(
        lambda: all(sim.condition(n, "Ready") == "True" for n in ("web", "web2")), what="both Ready"
    )
    pod, pod2 = sim.pod("web"), sim.pod("web2")
    assert pod is not None and pod2 is not None
    assert sim.cluster.state_dir is not None
    assert len(marked_pids(sim.cluster.state_dir)) >= 2  # what the fixture's end waits to see gone
    ip = pod["status"]["podIP"]
    assert re.fullmatch(rf"127\.{OCTET}\.\d+\.\d+", ip) and ip != pod2["status"]["podIP"]
    assert pod["status"]["podIPs"] == [{"ip": ip}] and pod["status"]["hostIP"] == f"127.{OCTET}.0.1"
    assert pod["status"]["phase"] == "Running"
    cs = sim.status("web")
    assert cs["containerID"].startswith("containerd://") and cs["started"] and cs["restartCount"] == 0
    assert cs["image"] == "docker.io/library/python:3.11" and "@sha256:" in cs["imageID"]
    assert "running" in cs["state"]
    # the working dir is the emptyDir's host directory
    (sim.kubelet.volumes.pod_dir(pod) / "volumes" / "www" / "hello.txt").write_text("hi from the volume")
    assert await answered(f"http://{ip}:8000/hello.txt") == (200, "hi from the volume")
    events = sim.events("web")
    assert events[:2] == [("Pulling", 'Pulling image "python:3.11"'), events[1]]
    assert re.fullmatch(
        r'Successfully pulled image "python:3\.11" in \d+ms \(\d+ms including waiting\)\. Image size: \d+ bytes\.',
        events[1][1],
    )
    assert ("Created", "Created container: web") in events and ("Started", "Started container web") in events
    # the second pod found the image present
    assert ("Pulled", 'Container image "python:3.11" already present on machine') in sim.events("web2")
    # kubectl logs, through the API server's pods/log
    status, text = await http_get(f"{sim.cluster.url}/api/v1/namespaces/default/pods/web/log")
    assert status == 200 and "GET /hello.txt" in text
    raw = sim.cluster.pod_runtime.log_file("default", "web", "web").read_text()
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z ", raw)
    ctx = sim.cluster.pod_runtime.exec_context(pod, "web")
    assert ctx is not None
    kctx = sim.kubelet.exec_context(pod, "web")
    assert kctx is not None and kctx.env["POD_IP"] == ip
    if sim.kubelet.host.namespaces:  # exec joins the container's mount namespace, in its working dir
        assert kctx.prefix[-2:] == ("--wdns=/srv", "--") and kctx.root == Path(
            f"/proc/{kctx.prefix[1][9:]}/root"
        )
    else:
        assert kctx.cwd.name == "www"
    assert KubeletRuntime(sim.ctx).exec_context(pod, "web") == kctx
    # delete: Killing, SIGTERM (http.server dies of it), the object goes, the port closes
    sim.verbs.delete(PODS, "default", "web", {})
    await eventually(lambda: sim.pod("web") is None, what="pod gone")
    assert ("Killing", "Stopping container web") in sim.events("web")
    with pytest.raises(aiohttp.ClientError):
        await http_get(f"http://{ip}:8000/")
    assert sim.condition("web2", "Ready") == "True"


async def test_sigterm_handled_within_grace_period(sim: Sim, tmp_path: Path) -> None:
    out = tmp_path / "out"
    script = 'trap "echo got SIGTERM > term; exit 0" TERM; echo started; while true; do sleep 0.05; done'
    sim.create_pod(
        "trap",
        [
            {
                "name": "sh",
                "image": "busybox:1.36",
                "command": ["sh", "-c", script],
                "workingDir": "/out",
                "volumeMounts": [{"name": "out", "mountPath": "/out"}],
            }
        ],
        volumes=[{"name": "out", "hostPath": {"path": str(out), "type": "DirectoryOrCreate"}}],
        terminationGracePeriodSeconds=30,
    )
    await eventually(lambda: sim.condition("trap", "Ready") == "True", what="Ready")
    await eventually(
        lambda: "started" in sim.cluster.pod_runtime.log_file("default", "trap", "sh").read_text()
    )
    begun = time.monotonic()
    sim.verbs.delete(PODS, "default", "trap", {})
    await eventually(lambda: sim.pod("trap") is None, what="pod gone")
    assert time.monotonic() - begun < 10  # exited on SIGTERM, well inside the 30 s grace period
    assert (out / "term").read_text().strip() == "got SIGTERM"
    assert ("Killing", "Stopping container sh") in sim.events("trap")


async def test_jupyterhub_singleuser_on_a_pvc_waits_for_attach_and_answers_api(sim: Sim) -> None:
    # jupyterhub-singleuser checks its Hub's API at start and exits when it cannot reach it: a stand-in Hub
    async def hub_api(request: web.Request) -> web.Response:
        return web.json_response({"version": "6.1.1"}, headers={"X-JupyterHub-Version": "6.1.1"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", hub_api)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    hub_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        await _run_singleuser(sim, hub_port)
    finally:
        await runner.cleanup()


async def _run_singleuser(sim: Sim, hub_port: int) -> None:
    handle = "0001-0009-rbd-test-volume"
    sim.verbs.create(
        PVS,
        "",
        {
            "metadata": {"name": "pv-home"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "csi": {"driver": RBD, "volumeHandle": handle},
            },
        },
    )
    pvc, _ = sim.verbs.create(
        PVCS,
        "default",
        {
            "metadata": {"name": "claim-alice"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": "",
                "volumeName": "pv-home",
            },
        },
    )
    sim.verbs.update(
        PVCS, "default", "claim-alice", {**pvc, "status": {"phase": "Bound"}}, subresource="status"
    )
    env = {
        "JUPYTERHUB_API_TOKEN": "secret-token",
        "JUPYTERHUB_API_URL": f"http://127.0.0.1:{hub_port}/hub/api",
        "JUPYTERHUB_SERVICE_URL": "http://0.0.0.0:8888/user/alice/",  # what KubeSpawner sends
        "JUPYTERHUB_SERVICE_PREFIX": "/user/alice/",
        "JUPYTERHUB_USER": "alice",
        "JUPYTERHUB_CLIENT_ID": "jupyterhub-user-alice",
        "JUPYTERHUB_BASE_URL": "/",
        "JUPYTERHUB_OAUTH_CALLBACK_URL": "/user/alice/oauth_callback",
    }
    sim.create_pod(
        "jupyter-alice",
        [
            {
                "name": "notebook",
                "image": "quay.io/jupyter/base-notebook:2024-12-02",
                "args": ["jupyterhub-singleuser"],
                "env": [{"name": k, "value": v} for k, v in env.items()],
                "ports": [{"containerPort": 8888, "name": "notebook-port"}],
                "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}],
            }
        ],
        volumes=[{"name": "home", "persistentVolumeClaim": {"claimName": "claim-alice"}}],
    )
    await eventually(lambda: sim.status("jupyter-alice")["state"]["waiting"]["reason"] == "ContainerCreating")
    await asyncio.sleep(0.3)  # several volume retries: still not started without the attachment
    pod = sim.pod("jupyter-alice")
    assert pod is not None and "podIP" not in pod["status"]
    assert sim.status("jupyter-alice")["state"] == {"waiting": {"reason": "ContainerCreating"}}
    va, _ = sim.verbs.create(
        VAS,
        "",
        {
            "metadata": {"name": attachment_name(handle, RBD, NODE)},
            "spec": {"attacher": RBD, "nodeName": NODE, "source": {"persistentVolumeName": "pv-home"}},
        },
    )
    sim.verbs.update(
        VAS, "", va["metadata"]["name"], {**va, "status": {"attached": True}}, subresource="status"
    )
    await eventually(lambda: sim.condition("jupyter-alice", "Ready") == "True", 45, "jupyter Ready")
    ip = sim.pod("jupyter-alice")["status"]["podIP"]  # type: ignore[index]
    status, text = await answered(f"http://{ip}:8888/user/alice/api", 45)
    assert status == 200 and '"version"' in text
    volume = sim.ctx.path("volumes", handle)
    log = sim.cluster.pod_runtime.log_file("default", "jupyter-alice", "notebook").read_text()
    root = "/home/jovyan" if sim.kubelet.host.namespaces else volume  # the container's path, or the host's
    assert f"Serving notebooks from local directory: {root}" in log
    assert (volume / ".local" / "share" / "jupyter").is_dir()  # HOME is the PVC's directory
    sim.verbs.delete(PODS, "default", "jupyter-alice", {})
    await eventually(lambda: sim.pod("jupyter-alice") is None, 20, "pod gone")
    assert (volume / ".local" / "share" / "jupyter").is_dir()  # the volume's data outlives the pod


async def test_lite_singleuser_image_answers_like_a_single_user_server(sim: Sim) -> None:
    env = [
        {"name": "JUPYTERHUB_SERVICE_URL", "value": "http://0.0.0.0:8888/user/bob/"},
        {"name": "JUPYTERHUB_SERVICE_PREFIX", "value": "/user/bob/"},
    ]
    for name in ("lite-a", "lite-b"):  # both on port 8888, each on its own pod IP
        container = {
            "name": "notebook",
            "image": "gpuworkspace.dev/lite-singleuser:1",
            "args": ["jupyterhub-singleuser"],
            "env": env,
            "ports": [{"containerPort": 8888}],
            "readinessProbe": {"httpGet": {"path": "/user/bob/api", "port": 8888}, "periodSeconds": 1},
        }
        sim.create_pod(name, [container])
    await eventually(
        lambda: all(sim.condition(n, "Ready") == "True" for n in ("lite-a", "lite-b")), what="Ready"
    )
    for name in ("lite-a", "lite-b"):
        ip = sim.pod(name)["status"]["podIP"]  # type: ignore[index]
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://{ip}:8888/user/bob/api") as resp:
                assert resp.status == 200 and resp.headers["X-JupyterHub-Version"]
                assert "version" in await resp.json()
            async with session.get(f"http://{ip}:8888/user/bob/api/status") as resp:
                assert (await resp.json())["kernels"] == 0


async def test_lite_pods_share_one_process_yet_run_log_die_and_stop_one_by_one(sim: Sim) -> None:
    names = ("lite-a", "lite-b", "lite-c")
    for name in names:
        container = {
            "name": "notebook",
            "image": "gpuworkspace.dev/lite-singleuser:1",
            "args": ["jupyterhub-singleuser", "--base-url=/user/bob/"],
            "ports": [{"containerPort": 8888}],
        }
        sim.create_pod(name, [container], terminationGracePeriodSeconds=5)
    await eventually(lambda: all(sim.condition(n, "Ready") == "True" for n in names), what="Ready")
    pids = {n: sim.kubelet.container_pids("default", n) for n in names}
    pool = sim.kubelet.lite_pool
    assert pool is not None and pool.pid
    assert all(p == {"notebook": pool.pid} for p in pids.values())  # one host process serves all three
    ids = {sim.status(n)["containerID"] for n in names}
    assert len(ids) == 3 and all(i.startswith("containerd://") for i in ids)
    ips = {n: sim.pod(n)["status"]["podIP"] for n in names}  # type: ignore[index]
    for name in names:
        status, text = await answered(f"http://{ips[name]}:8888/user/bob/api")
        assert status == 200 and '"version"' in text
        log = sim.cluster.pod_runtime.log_file("default", name, "notebook").read_text()
        assert f"serving at http://{ips[name]}:8888/user/bob/" in log

    assert sim.kubelet.kill_pod("default", "lite-a", 9) == 1  # only lite-a's listener dies
    await eventually(
        lambda: sim.status("lite-a")["restartCount"] == 1 and sim.condition("lite-a", "Ready") == "True",
        what="lite-a restarted",
    )
    assert sim.status("lite-a")["lastState"]["terminated"]["exitCode"] == 137
    assert (await http_get(f"http://{ips['lite-b']}:8888/user/bob/api"))[0] == 200

    sim.verbs.delete(PODS, "default", "lite-b", {})  # SIGTERM: the stop line, exit 0, listener closed
    await eventually(lambda: sim.pod("lite-b") is None, what="lite-b gone")
    with pytest.raises(aiohttp.ClientConnectionError):
        await http_get(f"http://{ips['lite-b']}:8888/user/bob/api")
    assert (await http_get(f"http://{ips['lite-c']}:8888/user/bob/api"))[0] == 200
    assert sim.kubelet.container_pids("default", "lite-c") == {"notebook": pool.pid}

    old_pid = pool.pid
    os.kill(old_pid, 9)  # the shared process dies: its containers exit as killed and restart in a new one
    await eventually(
        lambda: sim.status("lite-c")["restartCount"] == 1 and sim.condition("lite-c", "Ready") == "True",
        what="lite-c restarted in a new pool process",
    )
    assert sim.kubelet.container_pids("default", "lite-c") == {"notebook": pool.pid} and pool.pid != old_pid
    assert (await answered(f"http://{ips['lite-c']}:8888/user/bob/api"))[0] == 200


async def test_unknown_image_err_image_pull_then_back_off(sim: Sim) -> None:
    image = "registry.example.com/nope/missing:1"
    seen: list[str] = []

    def watch(key: Any, event: Any) -> None:
        for cs in event.obj.get("status", {}).get("containerStatuses") or []:
            reason = cs.get("state", {}).get("waiting", {}).get("reason")
            if key == PODS.key and reason and (not seen or seen[-1] != reason):
                seen.append(reason)

    sim.verbs.store.on_change.append(watch)
    sim.create_pod("bad", [{"name": "c", "image": image}])
    await eventually(
        lambda: "ImagePullBackOff" in seen and seen.index("ErrImagePull") < seen.index("ImagePullBackOff")
    )
    ref = f"{image}"
    events = sim.events("bad")
    failed = [m for r, m in events if r == "Failed"]
    assert (
        f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": '
        f'failed to resolve reference "{ref}": {ref}: not found' in failed
    )
    assert "Error: ErrImagePull" in failed and "Error: ImagePullBackOff" in failed
    assert ("BackOff", f'Back-off pulling image "{image}"') in events
    status, text = await http_get(f"{sim.cluster.url}/api/v1/namespaces/default/pods/bad/log")
    assert status == 400 and ("trying and failing to pull image" in text or "image can't be pulled" in text)
    await eventually(lambda: seen.count("ErrImagePull") >= 2, what="pulled again after the back-off")
    sim.verbs.store.on_change.remove(watch)


async def test_crash_loop_back_off_and_restart_policies(sim: Sim) -> None:
    sim.create_pod(
        "crash", [{"name": "crash", "image": "busybox", "command": ["sh", "-c", "echo boom; exit 3"]}]
    )
    sim.create_pod(
        "done",
        [{"name": "ok", "image": "alpine:3", "command": ["sh", "-c", "exit 0"]}],
        restartPolicy="Never",
    )
    sim.create_pod(
        "fail",
        [{"name": "no", "image": "alpine:3", "command": ["sh", "-c", "exit 2"]}],
        restartPolicy="Never",
    )
    sim.create_pod(
        "onf",
        [{"name": "ok", "image": "debian:12", "command": ["sh", "-c", "exit 0"]}],
        restartPolicy="OnFailure",
    )

    def looping() -> bool:
        cs = sim.status("crash")
        return cs["restartCount"] >= 2 and cs["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff"

    await eventually(looping, 20, "CrashLoopBackOff with restarts")
    pod = sim.pod("crash")
    assert pod is not None and pod["status"]["phase"] == "Running"
    cs = sim.status("crash")
    uid = pod["metadata"]["uid"]
    assert re.fullmatch(
        rf"back-off \d+ms restarting failed container=crash pod=crash_default\({uid}\)|"
        rf"back-off [\d.]+s restarting failed container=crash pod=crash_default\({uid}\)",
        cs["state"]["waiting"]["message"],
    )
    assert (
        cs["lastState"]["terminated"]["exitCode"] == 3 and cs["lastState"]["terminated"]["reason"] == "Error"
    )
    assert (
        "BackOff",
        f"Back-off restarting failed container crash in pod crash_default({uid})",
    ) in sim.events("crash")
    previous = sim.cluster.pod_runtime.log_file("default", "crash", "crash", previous=True).read_text()
    assert previous.rstrip().endswith("boom")
    await eventually(lambda: sim.pod("done")["status"]["phase"] == "Succeeded")  # type: ignore[index]
    await eventually(lambda: sim.pod("fail")["status"]["phase"] == "Failed")  # type: ignore[index]
    await eventually(lambda: sim.pod("onf")["status"]["phase"] == "Succeeded")  # type: ignore[index]
    assert sim.status("done")["state"]["terminated"]["reason"] == "Completed"
    assert sim.status("fail")["state"]["terminated"]["exitCode"] == 2
    ready = next(c for c in sim.pod("done")["status"]["conditions"] if c["type"] == "Ready")  # type: ignore[index]
    assert ready["status"] == "False" and ready["reason"] == "PodCompleted"


async def test_env_sources_and_projected_volumes(sim: Sim) -> None:
    sim.verbs.create(
        SECRETS, "default", {"metadata": {"name": "s"}, "stringData": {"token": "t0p", "k": "v"}}
    )
    sim.verbs.create(CONFIGMAPS, "default", {"metadata": {"name": "cm"}, "data": {"color": "blue", "x": "1"}})
    container = {
        "name": "c",
        "image": "python:3.12",
        "command": ["sh", "-c", 'echo "env:$TOKEN:$COLOR:$NAME:$NODE:$CPU:$CM_x:$GREETING"; exec sleep 30'],
        "env": [
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
            {"name": "COLOR", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "color"}}},
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {
                "name": "MISSING",
                "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "nope", "optional": True}},
            },
            {"name": "GREETING", "value": "hi-$(NAME)"},
        ],
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "resources": {"limits": {"cpu": "1500m", "memory": "1Gi"}},
    }
    volumes = [
        {"name": "sec", "secret": {"secretName": "s", "items": [{"key": "token", "path": "nested/tok"}]}},
        {
            "name": "info",
            "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
        },
        {
            "name": "proj",
            "projected": {
                "sources": [{"configMap": {"name": "cm"}}, {"serviceAccountToken": {"path": "token"}}]
            },
        },
    ]
    pod = sim.create_pod("envy", [container], volumes=volumes)
    pod["metadata"]  # created
    log = sim.cluster.pod_runtime.log_file("default", "envy", "c")
    await eventually(lambda: "env:" in log.read_text(), what="env line logged")
    assert f"env:t0p:blue:envy:{NODE}:2:1:hi-envy" in log.read_text()
    vols = sim.kubelet.volumes.pod_dir(pod) / "volumes"
    assert (vols / "sec" / "nested" / "tok").read_text() == "t0p"
    assert (vols / "proj" / "color").read_text() == "blue" and (vols / "proj" / "token").read_text()
    assert (vols / "info" / "labels").exists()
    # a pod whose secret is missing: FailedMount, stays ContainerCreating
    sim.create_pod(
        "nosecret",
        [{"name": "c", "image": "busybox", "command": ["sleep", "30"]}],
        volumes=[{"name": "sec", "secret": {"secretName": "absent"}}],
    )
    await eventually(
        lambda: (
            ("FailedMount", 'MountVolume.SetUp failed for volume "sec" : secret "absent" not found')
            in sim.events("nosecret")
        )
    )
    assert sim.status("nosecret")["state"] == {"waiting": {"reason": "ContainerCreating"}}


async def test_kubelet_restart_restarts_lost_containers_on_the_same_ip(sim: Sim) -> None:
    sim.create_pod(
        "long", [{"name": "c", "image": "busybox", "command": ["sh", "-c", "echo up; exec sleep 300"]}]
    )
    await eventually(lambda: sim.condition("long", "Ready") == "True")
    ip = sim.pod("long")["status"]["podIP"]  # type: ignore[index]
    pid = sim.kubelet.container_pids("default", "long")["c"]
    await sim.kubelet.stop()
    await eventually(lambda: not _alive(pid) or _zombie(pid), 5, "process ended")
    sim.kubelet = Kubelet(sim.ctx, NODE, OCTET, fast_config())
    await sim.kubelet.start()
    await eventually(
        lambda: sim.status("long")["restartCount"] == 1 and "running" in sim.status("long")["state"]
    )
    cs = sim.status("long")
    assert (
        cs["lastState"]["terminated"]["exitCode"] == 255
        and cs["lastState"]["terminated"]["reason"] == "Unknown"
    )
    assert sim.pod("long")["status"]["podIP"] == ip  # type: ignore[index]
    assert sim.kubelet.container_pids("default", "long")["c"] != pid


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


async def test_heartbeats_stop_and_resume(sim: Sim) -> None:
    def renew() -> str:
        lease = sim.verbs.store.get(LEASES, "kube-node-lease", NODE)
        return lease["spec"]["renewTime"] if lease else ""

    first = await eventually(renew, what="a Lease")
    await eventually(lambda: renew() != first, what="a renewal")
    node = sim.verbs.store.get(NODES, "", NODE)
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")  # type: ignore[index]
    assert ready["status"] == "True" and ready["reason"] == "KubeletReady"
    sim.create_pod("orphan", [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}])
    await eventually(lambda: sim.condition("orphan", "Ready") == "True")
    pid = sim.kubelet.container_pids("default", "orphan")["c"]
    sim.kubelet.stop_heartbeats()
    frozen = renew()
    sim.verbs.delete(PODS, "default", "orphan", {})
    await asyncio.sleep(0.5)  # five lease intervals: nothing renewed, nothing done about the deletion
    assert renew() == frozen and sim.pod("orphan") is not None and _alive(pid)
    sim.kubelet.resume()
    assert renew() != frozen
    await eventually(lambda: sim.pod("orphan") is None, what="the deletion caught up with")


async def test_kill_pod_restarts_and_delete_waits_for_kubelet(sim: Sim) -> None:
    sim.create_pod("victim", [{"name": "c", "image": "ubuntu:24.04", "command": ["sleep", "300"]}])
    await eventually(lambda: sim.condition("victim", "Ready") == "True")
    assert sim.kubelet.kill_pod("default", "victim", 9) == 1
    await eventually(
        lambda: sim.status("victim")["restartCount"] == 1 and "running" in sim.status("victim")["state"]
    )
    assert sim.status("victim")["lastState"]["terminated"]["exitCode"] == 137
    with pytest.raises(ApiError):
        sim.verbs.get(PODS, "default", "nonexistent")


async def test_init_containers_then_liveness_failure_restarts(sim: Sim) -> None:
    mount = [{"name": "work", "mountPath": "/work"}]
    sim.create_pod(
        "staged",
        [
            {
                "name": "main",
                "image": "busybox",
                "command": ["sh", "-c", "cat marker; exec sleep 300"],
                "workingDir": "/work",
                "volumeMounts": mount,
                "livenessProbe": {"exec": {"command": ["sh", "-c", "test ! -e stop"]}, "failureThreshold": 1},
            }
        ],
        initContainers=[
            {
                "name": "prepare",
                "image": "busybox",
                "command": ["sh", "-c", "echo prepared > marker"],
                "workingDir": "/work",
                "volumeMounts": mount,
            }
        ],
        volumes=[{"name": "work", "emptyDir": {}}],
        terminationGracePeriodSeconds=1,
    )
    await eventually(lambda: sim.condition("staged", "Ready") == "True", what="Ready after init")
    pod = sim.pod("staged")
    assert pod is not None and sim.condition("staged", "Initialized") == "True"
    init = pod["status"]["initContainerStatuses"][0]
    assert (
        init["state"]["terminated"]["reason"] == "Completed" and init["state"]["terminated"]["exitCode"] == 0
    )
    log = sim.cluster.pod_runtime.log_file("default", "staged", "main")
    await eventually(lambda: "prepared" in log.read_text(), what="main saw the init container's file")
    (sim.kubelet.volumes.pod_dir(pod) / "volumes" / "work" / "stop").write_text("")
    await eventually(lambda: sim.status("staged")["restartCount"] >= 1, what="restarted by liveness")
    events = sim.events("staged")
    assert ("Killing", "Container main failed liveness probe, will be restarted") in events
    assert ("Unhealthy", "Liveness probe failed: ") in events


async def test_ready_without_a_readiness_probe_means_running_not_listening(sim: Sim) -> None:
    """As the kubelet's ``UpdatePodStatus``: no readinessProbe, Ready once running (nothing listens on
    the declared port); a tcpSocket readinessProbe on that port keeps the pod not Ready."""
    quiet = {"name": "c", "image": "busybox", "command": ["sleep", "300"], "ports": [{"containerPort": 8080}]}
    probed = {**quiet, "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}
    sim.create_pod("quiet", [quiet], terminationGracePeriodSeconds=1)
    sim.create_pod("probed", [probed], terminationGracePeriodSeconds=1)
    await eventually(lambda: sim.condition("quiet", "Ready") == "True", what="quiet Ready")
    assert sim.condition("quiet", "ContainersReady") == "True" and sim.status("quiet")["ready"]
    ip = await eventually(lambda: sim.pod("probed")["status"]["podIP"], what="probed's IP")  # type: ignore[index]
    refused = ("Unhealthy", f"Readiness probe failed: dial tcp {ip}:8080: connect: connection refused")
    await eventually(lambda: refused in sim.events("probed"), what="probed's readiness probe refused")
    cs = sim.status("probed")
    assert "running" in cs["state"] and cs["started"] and not cs["ready"]
    pod = sim.pod("probed")
    assert pod is not None
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ContainersNotReady")
    assert sim.condition("probed", "ContainersReady") == "False"


def test_mount_table_keys_are_the_container_paths(tmp_path: Path) -> None:
    """GPUWORKSPACE_MOUNTS keys are plain absolute paths ("/x", never POSIX normpath's "//x")."""
    vols = PodVolumes(Store(None), tmp_path, "gpu-node-a", lambda handle: tmp_path / handle)
    pod = {"metadata": {"namespace": "ns", "name": "p"}}
    mounts = [{"name": "disk", "mountPath": "/var/run/disk"}, {"name": "home", "mountPath": "home/jovyan/"}]
    dirs = {"disk": tmp_path / "d", "home": tmp_path / "h"}
    table = vols.mounts(pod, {"name": "c", "volumeMounts": mounts}, dirs, {})
    assert json.loads(table.as_env()) == {
        "/var/run/disk": str(tmp_path / "d"),
        "/home/jovyan": str(tmp_path / "h"),
    }
    assert table.to_host("/var/run/disk/x") == tmp_path / "d" / "x"
    assert table.to_host("//home/jovyan") == tmp_path / "h"
    assert table.to_host("etc/passwd") == tmp_path / "pods" / "ns" / "p" / "c" / "root" / "etc" / "passwd"


async def test_oom_kill_under_restart_policy_never_fails_the_pod_as_oomkilled(sim: Sim) -> None:
    """The runtime reports a kernel OOM kill as ``OOMKilled``/137 (containerd's CRI ``oomExitReason``);
    under ``restartPolicy: Never`` the pod ends ``Failed``, what the spawner's self-healing rebuilds."""
    sim.create_pod(
        "hungry",
        [{"name": "c", "image": "ubuntu:24.04", "command": ["sleep", "300"]}],
        restartPolicy="Never",
    )
    await eventually(lambda: sim.condition("hungry", "Ready") == "True")
    assert sim.kubelet.kill_pod("default", "hungry", 9, oom=True) == 1
    await eventually(lambda: sim.pod("hungry")["status"]["phase"] == "Failed")  # type: ignore[index]
    assert sim.status("hungry")["state"]["terminated"]["reason"] == "OOMKilled"
    assert sim.status("hungry")["state"]["terminated"]["exitCode"] == 137
