"""pods/log and pods/exec (``podio.PodIO``) on a tiny aiohttp app, with aiohttp clients and real kubectl."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml
from aiohttp import web

from gpuworkspace_devcluster.errors import ApiError
from gpuworkspace_devcluster.podio import LocalDirRuntime, PodIO, format_rfc3339nano

Pod = dict[str, Any]
T0 = 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z
needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


def make_pod(
    name: str = "p",
    containers: tuple[str, ...] = ("c",),
    state: dict[str, Any] | None = None,
    node: str = "node-1",
    env: list[dict[str, str]] | None = None,
) -> Pod:
    state = {"running": {"startedAt": "2023-11-14T22:13:20Z"}} if state is None else state
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": c, "image": "busybox", "env": env or []} for c in containers],
        },
        "status": {
            "phase": "Running" if "running" in state else "Pending",
            "containerStatuses": [
                {
                    "name": c,
                    "ready": True,
                    "restartCount": 0,
                    "image": "busybox",
                    "imageID": "",
                    "state": state,
                }
                for c in containers
            ],
        },
    }


@dataclass
class Served:
    url: str
    runtime: LocalDirRuntime
    pods: dict[str, Pod]
    kubeconfig: Path
    finished: list[str]  # handlers that returned, for "the server side ended" checks

    def log(self, pod: str, text: str, container: str = "c", **kw: Any) -> None:
        self.runtime.write_log("default", pod, container, text, **kw)

    def path(self, pod: str, sub: str) -> str:
        return f"{self.url}/api/v1/namespaces/default/pods/{pod}/{sub}"


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


POD_RESOURCES = [
    {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": ["get", "list"]},
    {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
    {
        "name": "pods/exec",
        "singularName": "",
        "namespaced": True,
        "kind": "PodExecOptions",
        "verbs": ["create", "get"],
    },
]
DISCOVERY: dict[str, Any] = {  # legacy (unaggregated) discovery is enough for kubectl
    "/version": {"major": "1", "minor": "32", "gitVersion": "v1.32.0", "platform": "linux/amd64"},
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": POD_RESOURCES},
}


@asynccontextmanager
async def serve(tmp_path: Path, *pods: Pod) -> AsyncIterator[Served]:
    """The pod GET, log and exec endpoints plus the legacy discovery kubectl needs, on 127.0.0.1."""
    runtime = LocalDirRuntime(tmp_path / "state")
    by_name = {p["metadata"]["name"]: p for p in pods}
    finished: list[str] = []
    io = PodIO(runtime, get_pod=lambda ns, name: by_name.get(name), poll_interval_s=0.02, recheck_pod_s=0.05)

    async def handle(request: web.Request) -> web.StreamResponse:
        parts = request.path.strip("/").split("/")
        try:
            if request.path in DISCOVERY:
                return _json(DISCOVERY[request.path])
            if len(parts) not in (6, 7) or parts[:5:2] != ["api", "namespaces", "pods"]:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            pod = by_name.get(parts[5])
            if pod is None:
                raise ApiError(404, "NotFound", f'pods "{parts[5]}" not found')
            if len(parts) == 6:
                return _json(pod)
            try:
                return await {"log": io.log, "exec": io.exec}[parts[6]](request, pod)
            finally:
                finished.append(parts[6])
        except ApiError as exc:
            return _json(exc.to_status(), exc.code)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "dev",
                "clusters": [{"name": "dev", "cluster": {"server": url}}],
                "users": [{"name": "dev", "user": {"token": "x"}}],
                "contexts": [
                    {"name": "dev", "context": {"cluster": "dev", "user": "dev", "namespace": "default"}}
                ],
            }
        )
    )
    try:
        yield Served(url, runtime, by_name, kubeconfig, finished)
    finally:
        await runner.cleanup()


async def get_text(url: str, **params: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as s, s.get(url, params=params) as r:
        return r.status, r.headers.get("Content-Type", ""), await r.text()


async def status_message(url: str, **params: str) -> tuple[int, str]:
    code, _, body = await get_text(url, **params)
    return code, orjson.loads(body)["message"]


# ------------------------------------------------------------------------- logs
async def test_log_strips_or_keeps_timestamps(tmp_path: Path) -> None:
    async with serve(tmp_path, make_pod()) as srv:
        srv.log("p", "one\ntwo", when_ns=T0)
        srv.log("p", "three", when_ns=T0 + 120_000_000)
        code, ctype, text = await get_text(srv.path("p", "log"))
        assert (code, ctype, text) == (200, "text/plain", "one\ntwo\nthree\n")
        _, _, text = await get_text(srv.path("p", "log"), timestamps="true")
        assert text == ("2023-11-14T22:13:20Z one\n2023-11-14T22:13:20Z two\n2023-11-14T22:13:20.12Z three\n")
        assert format_rfc3339nano(T0 + 5) == "2023-11-14T22:13:20.000000005Z"


async def test_log_tail_since_and_limit(tmp_path: Path) -> None:
    async with serve(tmp_path, make_pod()) as srv:
        for i in range(5):
            srv.log("p", f"line{i}", when_ns=T0 + i * 1_000_000_000)
        assert (await get_text(srv.path("p", "log"), tailLines="2"))[2] == "line3\nline4\n"
        assert (await get_text(srv.path("p", "log"), tailLines="0"))[2] == ""
        assert (await get_text(srv.path("p", "log"), limitBytes="8"))[2] == "line0\nli"
        assert (await get_text(srv.path("p", "log"), sinceTime="2023-11-14T22:13:23Z"))[2] == "line3\nline4\n"
        assert (await get_text(srv.path("p", "log"), sinceSeconds="60"))[2] == ""  # all are years old
        srv.log("p", "fresh")
        assert (await get_text(srv.path("p", "log"), sinceSeconds="60"))[2] == "fresh\n"


async def test_log_reads_cri_lines(tmp_path: Path) -> None:
    async with serve(tmp_path, make_pod()) as srv:
        path = srv.runtime.log_file("default", "p", "c")
        path.parent.mkdir(parents=True)
        path.write_bytes(
            b"2023-11-14T22:13:20.5+00:00 stdout P par\n2023-11-14T22:13:21Z stderr F tial\nraw\n"
        )
        assert (await get_text(srv.path("p", "log")))[2] == "partial\nraw\n"


async def test_log_errors_are_the_api_servers(tmp_path: Path) -> None:
    pods = [
        make_pod("multi", ("a", "b")),
        make_pod("w", state={"waiting": {"reason": "ContainerCreating"}}),
        make_pod("pull", state={"waiting": {"reason": "ErrImagePull"}}),
        make_pod("fresh"),
    ]
    pods[3]["status"] = {"phase": "Pending"}
    async with serve(tmp_path, *pods) as srv:
        assert await status_message(srv.path("multi", "log")) == (
            400,
            "a container name must be specified for pod multi, choose one of: [a b]",
        )
        assert await status_message(srv.path("multi", "log"), container="x") == (
            400,
            "container x is not valid for pod multi",
        )
        assert await status_message(srv.path("w", "log")) == (
            400,
            'container "c" in pod "w" is waiting to start: ContainerCreating',
        )
        assert await status_message(srv.path("pull", "log")) == (
            400,
            'container "c" in pod "pull" is waiting to start: image can\'t be pulled',
        )
        assert await status_message(srv.path("fresh", "log")) == (
            400,
            'container "c" in pod "fresh" is not available',
        )
        assert await status_message(srv.path("multi", "log"), container="a", previous="true") == (
            400,
            'previous terminated container "a" in pod "multi" not found',
        )
        code, message = await status_message(srv.path("multi", "log"), container="a", tailLines="-1")
        assert (code, message) == (
            422,
            'PodLogOptions "multi" is invalid: tailLines: Invalid value: -1: must be '
            "greater than or equal to 0",
        )
        srv.log("multi", "before restart", container="a", previous=True)
        assert (await get_text(srv.path("multi", "log"), container="a", previous="true"))[
            2
        ] == "before restart\n"
        assert (await get_text(srv.path("multi", "log"), container="b"))[
            2
        ] == ""  # running, nothing written yet


async def test_log_follow_streams_until_the_container_stops(tmp_path: Path) -> None:
    async with serve(tmp_path, make_pod()) as srv, aiohttp.ClientSession() as s:
        srv.log("p", "first")
        async with s.get(srv.path("p", "log"), params={"follow": "true"}) as r:
            assert r.headers["Content-Type"] == "text/plain"
            assert await asyncio.wait_for(r.content.readline(), 5) == b"first\n"
            srv.log("p", "second")
            assert await asyncio.wait_for(r.content.readline(), 5) == b"second\n"
            srv.pods["p"]["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 0}}
            srv.log("p", "last words")
            assert await asyncio.wait_for(r.content.read(), 5) == b"last words\n"


async def test_log_follow_ends_when_the_client_leaves(tmp_path: Path) -> None:
    async with serve(tmp_path, make_pod()) as srv, aiohttp.ClientSession() as s:
        srv.log("p", "first")
        async with s.get(srv.path("p", "log"), params={"follow": "true"}) as r:
            assert await asyncio.wait_for(r.content.readline(), 5) == b"first\n"
        for _ in range(100):
            if srv.finished:
                break
            await asyncio.sleep(0.02)
        assert srv.finished == ["log"]


# ------------------------------------------------------------------------- exec
async def ws_exec(
    srv: Served,
    command: list[str],
    protocol: str = "v5.channel.k8s.io",
    *,
    stdin: bytes | None = None,
    tty: bool = False,
    pod: str = "p",
) -> tuple[dict[int, bytes], Any]:
    """Run a command over the channel protocol; (bytes per channel, the status JSON), checking a 1000 close."""
    params = [("command", c) for c in command] + [
        ("stdout", "true"),
        ("stderr", "false" if tty else "true"),
        ("stdin", "true" if stdin is not None else "false"),
        ("tty", "true" if tty else "false"),
    ]
    out: dict[int, bytes] = {}
    async with (
        aiohttp.ClientSession() as s,
        s.ws_connect(srv.path(pod, "exec"), params=params, protocols=[protocol]) as ws,
    ):
        assert ws.protocol == protocol
        if stdin is not None:
            await ws.send_bytes(b"\x00" + stdin)
            if protocol.startswith("v5"):
                await ws.send_bytes(b"\xff\x00")
        async for msg in ws:
            assert msg.type is aiohttp.WSMsgType.BINARY
            out[msg.data[0]] = out.get(msg.data[0], b"") + msg.data[1:]
        assert ws.close_code == 1000
    return out, orjson.loads(out[3])


async def test_exec_v5_stdin_is_half_closed(tmp_path: Path) -> None:
    async with serve(tmp_path, make_pod()) as srv:
        out, status = await ws_exec(srv, ["cat"], stdin=b"hello\n")
        assert out[1] == b"hello\n"
        assert status == {"metadata": {}, "status": "Success"}


async def test_exec_v4_exit_code_and_stderr(tmp_path: Path) -> None:
    async with serve(tmp_path, make_pod()) as srv:
        out, status = await ws_exec(srv, ["sh", "-c", "echo out; echo err >&2; exit 3"], "v4.channel.k8s.io")
        assert (out[1], out[2]) == (b"out\n", b"err\n")
        assert status == {
            "metadata": {},
            "status": "Failure",
            "reason": "NonZeroExitCode",
            "message": "command terminated with non-zero exit code: error executing command [sh -c echo out; "
            "echo err >&2; exit 3], exit code 3",
            "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
        }
        out, status = await ws_exec(srv, ["head", "-n1"], "v4.channel.k8s.io", stdin=b"just this\nnot this\n")
        assert (out[1], status["status"]) == (b"just this\n", "Success")


async def test_exec_runs_in_the_container_root_with_its_env(tmp_path: Path) -> None:
    async with serve(tmp_path, make_pod(env=[{"name": "FOO", "value": "bar"}])) as srv:
        out, _ = await ws_exec(srv, ["sh", "-c", 'pwd; echo "$FOO $HOSTNAME"'])
        root = tmp_path / "state" / "pods" / "default" / "p" / "c" / "root"
        assert out[1] == f"{root}\nbar p\n".encode()


async def test_exec_unknown_command_and_tty(tmp_path: Path) -> None:
    async with serve(tmp_path, make_pod()) as srv:
        _, status = await ws_exec(srv, ["nope"])
        assert (status["status"], status["reason"], status["code"]) == ("Failure", "InternalError", 500)
        assert 'exec: "nope": executable file not found in $PATH' in status["message"]
        out, status = await ws_exec(srv, ["sh", "-c", "test -t 0 && echo tty"], tty=True)
        assert (out[1], status["status"]) == (b"tty\r\n", "Success")


async def test_exec_refusals_come_before_the_upgrade(tmp_path: Path) -> None:
    async with serve(
        tmp_path, make_pod(), make_pod("w", state={"waiting": {"reason": "ContainerCreating"}})
    ) as srv:
        async with aiohttp.ClientSession() as s:
            for pod, protocol in (("w", "v5.channel.k8s.io"), ("p", "v9.channel.k8s.io")):
                with pytest.raises(aiohttp.WSServerHandshakeError) as info:
                    await s.ws_connect(
                        srv.path(pod, "exec"),
                        params={"command": "true", "stdout": "true"},
                        protocols=[protocol],
                    )
                assert info.value.status == 400
        assert await status_message(srv.path("w", "exec"), command="true", stdout="true") == (
            400,
            'unable to upgrade connection: container not found ("c")',
        )
        assert await status_message(srv.path("p", "exec"), command="true") == (
            400,
            "you must specify at least 1 of stdin, stdout, stderr",
        )


async def test_exec_client_hangup_kills_the_command(tmp_path: Path) -> None:
    async with serve(tmp_path, make_pod()) as srv, aiohttp.ClientSession() as s:
        params = [
            ("command", "sh"),
            ("command", "-c"),
            ("command", "echo $$; exec sleep 30"),
            ("stdout", "true"),
        ]
        async with s.ws_connect(srv.path("p", "exec"), params=params, protocols=["v5.channel.k8s.io"]) as ws:
            data = b""
            while not data.strip():
                msg = await asyncio.wait_for(ws.receive(), 5)
                data += msg.data[1:]
        pid = int(data)
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            await asyncio.sleep(0.02)
        else:
            pytest.fail("the exec'd process outlived its client")


# ---------------------------------------------------------------------- kubectl
def kubectl_env(kubeconfig: Path) -> dict[str, str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBECACHEDIR": str(kubeconfig.parent / "cache")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return env


async def kubectl(
    srv: Served | Path, *args: str, stdin: bytes | None = None, deadline_s: float = 30
) -> tuple[int, str, str]:
    env = kubectl_env(srv if isinstance(srv, Path) else srv.kubeconfig)
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), deadline_s)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@needs_kubectl
async def test_kubectl_exec(tmp_path: Path) -> None:
    async with serve(
        tmp_path, make_pod(), make_pod("w", state={"waiting": {"reason": "ContainerCreating"}})
    ) as srv:
        assert await kubectl(srv, "exec", "p", "--", "sh", "-c", "echo hi; echo oops >&2; exit 3") == (
            3,
            "hi\n",
            "oops\ncommand terminated with exit code 3\n",
        )
        assert await kubectl(srv, "exec", "-i", "p", "--", "cat", stdin=b"piped\n") == (0, "piped\n", "")
        code, _, err = await kubectl(srv, "exec", "p", "--", "nope")
        assert code == 1
        assert 'exec: "nope": executable file not found in $PATH' in err
        code, _, err = await kubectl(srv, "exec", "w", "--", "true")
        assert code == 1
        assert 'container not found ("c")' in err


@needs_kubectl
async def test_kubectl_logs(tmp_path: Path) -> None:
    async with serve(
        tmp_path, make_pod(), make_pod("w", state={"waiting": {"reason": "ContainerCreating"}})
    ) as srv:
        srv.log("p", "one\ntwo\nthree", when_ns=T0)
        assert await kubectl(srv, "logs", "p") == (0, "one\ntwo\nthree\n", "")
        assert await kubectl(srv, "logs", "p", "--tail=1", "--timestamps") == (
            0,
            "2023-11-14T22:13:20Z three\n",
            "",
        )
        assert await kubectl(srv, "logs", "w") == (
            1,
            "",
            'Error from server (BadRequest): container "c" in pod "w" is waiting to start: ContainerCreating\n',
        )


@needs_kubectl
async def test_kubectl_logs_follow(tmp_path: Path) -> None:
    async with serve(tmp_path, make_pod()) as srv:
        srv.log("p", "first")
        env = kubectl_env(srv.kubeconfig)
        proc = await asyncio.create_subprocess_exec(
            "kubectl",
            "logs",
            "-f",
            "p",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            assert proc.stdout is not None
            assert await asyncio.wait_for(proc.stdout.readline(), 20) == b"first\n"
            srv.log("p", "second")
            assert await asyncio.wait_for(proc.stdout.readline(), 5) == b"second\n"
            srv.pods["p"]["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 0}}
            assert await asyncio.wait_for(proc.wait(), 5) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


@needs_kubectl
async def test_kubectl_through_the_devcluster(tmp_path: Path) -> None:
    from gpuworkspace_devcluster.cluster import DevCluster
    from gpuworkspace_devcluster.resources import find

    pods = find("", "v1", "pods")
    assert pods is not None
    async with DevCluster(tmp_path / "state") as c:
        runtime = LocalDirRuntime(tmp_path / "state")
        c.api.pod_io = PodIO(runtime, get_pod=lambda ns, name: c.store.get(pods, ns, name))
        pod = make_pod()
        c.verbs.create(pods, "default", {"metadata": {"name": "p"}, "spec": pod["spec"]})
        current = c.verbs.get(pods, "default", "p")
        c.verbs.update(pods, "default", "p", {**current, "status": pod["status"]}, subresource="status")
        assert await kubectl(c.kubeconfig, "exec", "p", "--", "sh", "-c", "echo hi; exit 3") == (
            3,
            "hi\n",
            "command terminated with exit code 3\n",
        )
        runtime.write_log("default", "p", "c", "hello\nworld")
        assert await kubectl(c.kubeconfig, "logs", "p", "--tail=1") == (0, "world\n", "")
