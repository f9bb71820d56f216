"""The idle culler end to end: real single-user servers, kernels, terminals and scripted GPU load.

The culler (``gpuworkspace-culler``, managed by the hub) runs in the e2e stack with
``culler_config.py``: only the ``e2e-cull*`` profiles of ``catalog-extra.yaml`` are culled, after 30 s
idle (45 s from the start for ``e2e-cull-max``), with two warnings 16 s and 8 s before, in cycles of
2 s; ``e2e-cull-card``, which the culler's config does not name, by its catalog session (its spawn
card): 36 s idle, warned 20 s and 6 s before; ``e2e-cull-shared``, a time-sliced GPU share whose card
sets no idle timeout, at the time-sliced GPU mode's 36 s. Eleven workspaces, one user each, run at
the same time, so the module costs one timeout, not eleven:

========================  ==================  ========================================================
user                      profile             what happens                            → expected
========================  ==================  ========================================================
``cull-busy``             ``e2e-cull``        a kernel busy in ``time.sleep``, no     → never warned
                                              browser connected
``bob``                   ``e2e-cull-gpu``    an idle kernel, the GPU at 0 %          → warned twice,
                                                                                        stopped, disk kept
``cull-gpu``              ``e2e-cull-gpu``    an idle kernel, the GPU at 80 %         → never warned
``cull-term``             ``e2e-cull``        a terminal printing every 2 s, no       → never warned
                                              browser connected
``cull-max``              ``e2e-cull-max``    a busy kernel                           → warned, stopped
``cull-exempt``           ``e2e-cull-exempt`` an idle kernel                          → never warned
``cull-back``             ``e2e-cull``        an idle kernel; code run after the      → warnings
                                              first warning                             withdrawn, no stop
``cull-quiet``            ``e2e-cull``        a process busy in a terminal that       → never warned
                                              prints nothing (its CPU use shows)
``cull-snoop``            ``e2e-cull``        a hostile server: its user's            → warned, stopped;
                                              ``~/.jupyter/jupyter_server_config.py``   every credential
                                              records every request's headers; an       it captured is
                                              open notebook (save-first checkpoints)    refused elsewhere
``cull-card``             ``e2e-cull-card``   an idle kernel; the spawn page's card   → warned at the
                                              says "warned 20 s and 6 s before"         card's lead times,
                                                                                        then stopped
``cull-shared``           ``e2e-cull-shared`` an idle kernel on a GPU share at 0 %;   → warned at the
                                              the card says "warned 20 s and 6 s        card's lead times,
                                              before", the GPU mode says 36 s idle      stopped at the
                                                                                        mode's timeout
========================  ==================  ========================================================

bob (an OIDC user) also sees his warning on the hub's home page in chromium. Evidence comes from the
culler's own API (``api/v1/decisions``, ``api/v1/notices``), its audit records in the hub's log, the
hub's API and kubectl. Kernels and terminals are driven over their websockets through the proxy,
with each user's own token, and the websockets are closed: no browser is left on them.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from .harness import HubStack, http, logged_in_page, wait_for
from .test_attribution import ARTIFACTS, NS, WORKLOAD, kubectl, pod_of, script, until, user_token
from .test_self_healing import _volume_dir

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

CULLER_API = "/services/gpuworkspace-culler/api/v1"
SERVER = "cull"  # every scenario's named server
CYCLE_S = 2.0  # GPUWS_CULLER_INTERVAL in conftest.py
MARGIN_S = 3 * CYCLE_S  # for a cycle, the request that reads it, and a slow machine
BUSY_CODE = "import time; time.sleep(600)"
CLOCK = re.compile(r"\d\d:\d\d:\d\d")  # in what date prints
CARD_PROFILE = "e2e-cull-card"  # catalog-extra.yaml: session 36 s idle, warnings [20s, 6s]
SHARED_PROFILE = "e2e-cull-shared"  # catalog-extra.yaml: time-sliced, 10 min at most, warnings [20s, 6s]
# a process that prints nothing and keeps about a third of a core busy: 50 ms of CPU time, then 100 ms
# asleep. CPU time, not wall time: on a loaded machine 50 ms of wall time can be 10 ms of CPU, and the
# culler then rightly sees less than its 0.1 cores
SILENT_BUSY = (
    "date; python3 -c \"exec('import time\\nwhile 1:\\n t=time.process_time()\\n"
    " while time.process_time()-t<0.05: pass\\n time.sleep(0.1)')\"\r"
)
# What a hostile user puts on their home disk: their server records every request it receives.
RECORDER = """
import json


def _record(handler):
    with open({path!r}, "a") as out:
        request = handler.request
        out.write(json.dumps({{"method": request.method, "uri": request.uri, "headers": dict(request.headers)}}))
        out.write("\\n")


c.ServerApp.tornado_settings = {{"log_function": _record}}
"""


@pytest.fixture(scope="module", autouse=True)
def _our_spawner(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("the idle culler comes with this project's spawner configuration")


# ------------------------------------------------------------------------------------ helpers
@dataclass
class Workspace:
    """One scenario: a user of its own, the named server ``cull``, and what was seen of it."""

    user: str
    profile: str
    gpu_util: float | None = None  # the scripted GPU load; None: no GPU
    token: str = ""
    kernel: str = ""
    claim: str = ""
    started: datetime | None = None  # the hub's "started"
    ready_at: float = 0.0  # time.time() when the hub saw it ready
    set_up_at: float = 0.0  # ... and when the scenario's kernel or terminal was set up
    seen: dict[str, Any] = field(default_factory=dict)
    error: Exception | None = None

    def api(self, stack: HubStack, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """The single-user server's REST API through the proxy, with the user's own token."""
        url = f"{stack.url}/user/{self.user}/{SERVER}/api/{path}"
        status, raw = http(method, url, body, headers={"Authorization": f"token {self.token}"})
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def ws_url(self, stack: HubStack, path: str) -> str:
        return f"{stack.url.replace('http', 'ws', 1)}/user/{self.user}/{SERVER}/{path}"


def culler(stack: HubStack, path: str, token: str | None = None) -> tuple[int, Any]:
    """GET a culler API path (below api/v1) through the proxy; the admin token sees every server."""
    headers = {"Authorization": f"token {token or stack.admin_token}"}
    status, raw = http("GET", f"{stack.url}{CULLER_API}/{path}", headers=headers)
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def epoch(text: str) -> float:
    return parse_time(text).timestamp()


class Watch(threading.Thread):
    """Reads the culler's decisions every second and keeps each one seen, per user (server ``cull``)."""

    def __init__(self, stack: HubStack) -> None:
        super().__init__(name="culler-decisions", daemon=True)
        self.stack = stack
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._seen: dict[str, list[dict[str, Any]]] = {}

    def run(self) -> None:
        while not self.done.wait(1.0):
            try:
                status, body = culler(self.stack, "decisions")
            except OSError:
                continue
            if status != 200:
                continue
            with self._lock:
                for decision in body:
                    if decision["server"] == SERVER:
                        self._seen.setdefault(decision["user"], []).append(decision)

    def all(self, user: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._seen.get(user, ()))

    def latest(self, user: str) -> dict[str, Any] | None:
        seen = self.all(user)
        return seen[-1] if seen else None

    def warned(self, user: str) -> dict[str, Any] | None:
        """The latest decision, if it lists warnings given."""
        latest = self.latest(user)
        return latest if latest and latest["warnings"] else None


# ----------------------------------------------------------------- kernels and terminals (websockets)
# jupyter_server answers a kernel's websocket upgrade only once the kernel has replied to kernel_info, and
# gives up itself after MultiKernelManager.kernel_info_timeout (60 s by default). A CI run with a dozen
# servers starting on two cores took over 30 s for one kernel; the client waits longer than the server, so
# a kernel that never starts is reported by the server (and our finding says how long it had), not a
# client timeout that hides which side was slow.
UPGRADE_TIMEOUT_S = 90


async def _connect(url: str, token: str) -> WebSocketClientConnection:
    request = HTTPRequest(
        url,
        headers={"Authorization": f"token {token}"},
        connect_timeout=30,
        request_timeout=UPGRADE_TIMEOUT_S,
    )
    return await websocket_connect(request)


async def _close(conn: WebSocketClientConnection, *, ended: bool = False) -> None:
    """Close and drain; ``ended``: the peer has closed already (tornado's next read would never end)."""
    conn.close()
    while not ended:
        ended = await asyncio.wait_for(conn.read_message(), 10) is None


def execute_request(code: str) -> dict[str, Any]:
    """A Jupyter messaging protocol v5 ``execute_request`` on the shell channel (websocket JSON form)."""
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "msg_type": "execute_request",
            "username": "e2e",
            "session": uuid.uuid4().hex,
            "date": datetime.now(UTC).isoformat(),
            "version": "5.3",
        },
        "parent_header": {},
        "metadata": {},
        "content": {
            "code": code,
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        },
        "channel": "shell",
        "buffers": [],
    }


async def _execute(url: str, token: str, code: str, state: str) -> None:
    conn = await _connect(url, token)
    ended = False
    try:
        message = execute_request(code)
        await conn.write_message(json.dumps(message))

        async def reached() -> None:
            nonlocal ended
            while True:
                raw = await conn.read_message()
                if raw is None:
                    ended = True
                    raise AssertionError(
                        f"the kernel's websocket closed before {state!r} "
                        f"(close code {conn.close_code}, reason {conn.close_reason!r})"
                    )
                if isinstance(raw, bytes):
                    continue
                reply = json.loads(raw)
                ours = reply.get("parent_header", {}).get("msg_id") == message["header"]["msg_id"]
                status = reply.get("msg_type") == "status" and reply["content"]["execution_state"]
                if ours and status == state:
                    return

        await asyncio.wait_for(reached(), 60)
    finally:
        await _close(conn, ended=ended)


def execute(stack: HubStack, ws: Workspace, code: str, *, until_state: str) -> None:
    """Run ``code`` in the workspace's kernel until it is ``busy`` or back to ``idle``, then disconnect."""
    url = ws.ws_url(stack, f"api/kernels/{ws.kernel}/channels")
    began = time.monotonic()
    try:
        asyncio.run(_execute(url, ws.token, code, until_state))
    except (AssertionError, HTTPClientError, TimeoutError) as e:  # say what the server and its pod were doing
        what = f"{type(e).__name__}: {e} after {time.monotonic() - began:.1f} s"
        try:
            then = server_and_pod(stack, ws)
        except Exception as why:  # the original failure matters more
            then = f"(not known: {why})"
        raise AssertionError(f"{what}; then: {then}") from e


def server_and_pod(stack: HubStack, ws: Workspace) -> str:
    server = stack.hub.server(ws.user, SERVER)
    pods = json.loads(
        kubectl(stack, "-n", NS, "get", "pods", pod_name(ws), "-o", "json", "--ignore-not-found") or "{}"
    )
    status = pods.get("status") or {}
    containers = [
        (c["name"], c.get("restartCount"), c.get("state")) for c in status.get("containerStatuses") or []
    ]
    kernels = http(
        "GET",
        ws.ws_url(stack, "api/kernels").replace("ws", "http", 1),
        headers={"Authorization": f"token {ws.token}"},
    )
    return (
        f"hub server {server and {k: server.get(k) for k in ('ready', 'pending', 'url')}}; "
        f"pod uid {(pods.get('metadata') or {}).get('uid')} phase {status.get('phase')} containers {containers}; "
        f"kernels {kernels[0]} {kernels[1][:300]!r}"
    )


async def _type(url: str, token: str, line: str) -> list[str]:
    conn = await _connect(url, token)
    output: list[str] = []
    try:
        await conn.write_message(json.dumps(["stdin", line]))

        async def printed() -> None:
            while not CLOCK.search("".join(output)):  # the command's first output (date)
                raw = await conn.read_message()
                if raw is None:
                    raise AssertionError("the terminal's websocket closed")
                kind, *rest = json.loads(raw)
                if kind == "stdout":
                    output.append(str(rest[0]))

        await asyncio.wait_for(printed(), 30)
    finally:
        await _close(conn)
    return output


def start_kernel(stack: HubStack, ws: Workspace) -> str:
    status, kernel = ws.api(stack, "POST", "kernels", {})
    assert status == 201, kernel
    return str(kernel["id"])


def kernel_state(stack: HubStack, ws: Workspace) -> dict[str, Any]:
    """The kernel as ``api/kernels`` lists it; this request is not activity (``no_track_activity``)."""
    status, kernel = ws.api(stack, "GET", f"kernels/{ws.kernel}?no_track_activity=1")
    assert status == 200, kernel
    return kernel  # type: ignore[no-any-return]


# ----------------------------------------------------------------- what each scenario does
def busy_kernel(stack: HubStack, ws: Workspace) -> None:
    ws.kernel = start_kernel(stack, ws)
    execute(stack, ws, BUSY_CODE, until_state="busy")


def idle_kernel(stack: HubStack, ws: Workspace) -> None:
    """A kernel that ran something and went idle (one never connected to stays "starting")."""
    ws.kernel = start_kernel(stack, ws)
    execute(stack, ws, "pass", until_state="idle")
    assert kernel_state(stack, ws)["execution_state"] == "idle"


def terminal_loop(stack: HubStack, ws: Workspace) -> None:
    status, terminal = ws.api(stack, "POST", "terminals", {})
    assert status == 200, terminal  # jupyter_server_terminals answers 200
    url = ws.ws_url(stack, f"terminals/websocket/{terminal['name']}")
    ws.seen["terminal"] = terminal["name"]
    ws.seen["output"] = asyncio.run(_type(url, ws.token, "while true; do date; sleep 2; done\r"))


def silent_terminal_process(stack: HubStack, ws: Workspace) -> None:
    """A terminal that prints the date once, then runs a busy process that prints nothing."""
    status, terminal = ws.api(stack, "POST", "terminals", {})
    assert status == 200, terminal
    url = ws.ws_url(stack, f"terminals/websocket/{terminal['name']}")
    ws.seen["terminal"] = terminal["name"]
    ws.seen["output"] = asyncio.run(_type(url, ws.token, SILENT_BUSY))


def hostile_server(stack: HubStack, ws: Workspace) -> None:
    """Put the recorder on the home disk (from the kernel), restart the server with it, open a notebook.

    It records into a file on that disk (a container writes nowhere else), read from the disk's directory."""
    pod = pod_of(stack, ws.user, SERVER)
    home = next(m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "home")
    claim = next(
        v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if v["name"] == "home"
    )
    capture = ws.seen["capture"] = _volume_dir(stack, claim) / "requests.jsonl"
    ws.kernel = start_kernel(stack, ws)
    config = RECORDER.format(path=f"{home}/requests.jsonl")
    code = (
        "import os, pathlib; d = pathlib.Path.home() / '.jupyter'; d.mkdir(exist_ok=True); "
        f"(d / 'jupyter_server_config.py').write_text({config!r})"
    )
    execute(stack, ws, code, until_state="idle")
    stack.hub.stop_server(ws.user, SERVER)
    stack.hub.start_server(ws.user, SERVER, {"profile": ws.profile})
    stack.hub.wait_ready(ws.user, SERVER, timeout_s=240, interval_s=0.5)
    ws.started = parse_time((stack.hub.server(ws.user, SERVER) or {})["started"])
    notebook = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    status, body = ws.api(stack, "PUT", "contents/snoop.ipynb", {"type": "notebook", "content": notebook})
    assert status in (200, 201), body
    status, session = ws.api(
        stack, "POST", "sessions", {"path": "snoop.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
    )
    assert status == 201, session
    ws.kernel = str(session["kernel"]["id"])
    execute(stack, ws, "pass", until_state="idle")
    wait_for(capture.exists, 30, "the recorder's first request", None, 0.5)


def captured(ws: Workspace) -> list[dict[str, Any]]:
    path = ws.seen["capture"]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def credentials_of(requests: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Every credential the requests carried: Authorization header values and cookies."""
    found: dict[str, set[str]] = {"Authorization": set(), "Cookie": set()}
    for request in requests:
        headers = {k.lower(): v for k, v in request["headers"].items()}
        for name, values in found.items():
            if headers.get(name.lower()):
                values.add(headers[name.lower()])
    return found


def culler_requests(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The requests the culler sent: its probes carry no_track_activity, its checkpoints are POSTs."""
    return [
        r
        for r in requests
        if "no_track_activity=1" in r["uri"] or (r["method"] == "POST" and r["uri"].endswith("/checkpoints"))
    ]


# Refused: 403, or, from the hub's API, 404 where the token may not even see that user (JupyterHub
# answers so rather than confirm the user exists).
REFUSED = {403}
HUB_REFUSED = {403, 404}


def refused(answers: dict[str, int]) -> bool:
    return all(code in (HUB_REFUSED if what in HUB_TARGETS else REFUSED) for what, code in answers.items())


HUB_TARGETS = ("the stop API", "the user list")


def try_elsewhere(stack: HubStack, header: str, value: str) -> dict[str, int]:
    """The credential against another user's server, the stop API, the user list and the disk API."""
    other = f"/user/cull-busy/{SERVER}"
    targets = {
        "another user's server": ("GET", f"{other}/api/status"),
        "another user's kernels": ("GET", f"{other}/api/kernels"),
        "the stop API": ("DELETE", f"/hub/api/users/cull-busy/servers/{SERVER}"),
        "the user list": ("GET", "/hub/api/users"),
        "another user's disk": ("GET", f"/services/gpuworkspace-disks/api/v1/workspaces/cull-busy/{SERVER}"),
        "another user's GPU use": (
            "GET",
            "/services/gpuworkspace-attribution/api/v1/workspaces?user=cull-busy",
        ),
    }
    return {
        what: http(method, stack.url + path, None, headers={header: value})[0]
        for what, (method, path) in targets.items()
    }


def snooped_then_stopped(stack: HubStack, watch: Watch, ws: Workspace) -> None:
    """At the first warning, the culler's credential opens this server alone; then the stop."""
    first = until(lambda: watch.warned(ws.user), f"a warning to {ws.user}", 150)
    ws.seen["first_warning"] = first
    creds = credentials_of(culler_requests(captured(ws)))["Authorization"]
    ws.seen["culler_credentials_while_running"] = creds
    ws.seen["own_server_while_running"] = {
        c: http("GET", f"{stack.url}/user/{ws.user}/{SERVER}/api/status", None, headers={"Authorization": c})[
            0
        ]
        for c in creds
    }
    ws.seen["elsewhere_while_running"] = {c: try_elsewhere(stack, "Authorization", c) for c in creds}
    services = ("/services/gpuworkspace-disks/api/v1/workspaces", f"{CULLER_API}/notices")
    ws.seen["services_while_running"] = {
        (c, path): http("GET", stack.url + path, None, headers={"Authorization": c})[0]
        for c in creds
        for path in services
    }
    ws.seen["stopped_at"] = gone(stack, ws)


def gone(stack: HubStack, ws: Workspace, timeout_s: float = 120) -> float:
    """Wait for the culler to stop the server; when the hub stopped listing it."""
    wait_for(
        lambda: stack.hub.server(ws.user, SERVER) is None, timeout_s, f"{ws.user}/{SERVER} stopped", None, 0.5
    )
    return time.time()


def stopped_after_warnings(stack: HubStack, watch: Watch, ws: Workspace) -> None:
    """Wait for the first warning, note the kernel's state then, and wait for the stop."""
    first = until(lambda: watch.warned(ws.user), f"a warning to {ws.user}", 150)
    ws.seen["first_warning"] = first
    if ws.kernel:
        ws.seen["kernel_when_warned"] = kernel_state(stack, ws)
    ws.seen["stopped_at"] = gone(stack, ws)


def activity_after_warning(stack: HubStack, watch: Watch, ws: Workspace) -> None:
    """After the first warning: run code, see the warning withdrawn, outlive the stop it announced."""
    first = until(lambda: watch.warned(ws.user), f"a warning to {ws.user}", 150)
    ws.seen["first_warning"] = first
    ws.seen["notices_warned"] = culler(stack, "notices", token=ws.token)
    execute(stack, ws, "1 + 1", until_state="idle")
    ws.seen["acted_at"] = time.time()
    until(lambda: culler(stack, "notices", token=ws.token) == (200, []), f"{ws.user}'s notice withdrawn", 30)
    ws.seen["withdrawn_at"] = time.time()
    ws.seen["decision_after"] = next(
        d for d in culler(stack, "decisions")[1] if (d["user"], d["server"]) == (ws.user, SERVER)
    )
    announced = max(epoch(w["stop_at"]) for w in first["warnings"])
    time.sleep(max(0.0, announced + MARGIN_S - time.time()))
    ws.seen["server_after_announced_stop"] = stack.hub.server(ws.user, SERVER)
    ws.seen["announced_stop"] = announced


def spawn_cards(stack: HubStack, browser: Any, profiles: list[str]) -> dict[str, str]:
    """The profiles' cards' session lines as the spawn page shows them to a logged-in user (alice, in
    chromium: the hub serves its pages to a login cookie, not to an API token)."""
    with logged_in_page(browser, stack, "alice", viewport={"width": 1280, "height": 900}) as page:
        page.goto(f"{stack.url}/hub/spawn/alice/card-form")
        for profile in profiles:
            page.locator(f"#profile-item-{profile}").wait_for(state="attached")
        html = page.content()
    return {profile: card_session_line(html, profile) for profile in profiles}


def card_session_line(html: str, profile: str) -> str:
    """The "Session:" line of one profile's card on the spawn page (catalog/rendering.py's words)."""
    card = html.split(f'id="profile-item-{profile}"', 1)[1].split('id="profile-item-', 1)[0]
    match = re.search(r"<strong>Session:</strong>\s*([^<]*)</span>", card)
    assert match is not None, card[:2000]
    return match.group(1)


Setup = Callable[[HubStack, Workspace], None]
Follow = Callable[[HubStack, Watch, Workspace], None]


def plan() -> dict[str, tuple[Workspace, Setup, Follow | None]]:
    """Fresh scenario records: user -> (workspace, set-up, what to wait for afterwards)."""
    return {
        "cull-busy": (Workspace("cull-busy", "e2e-cull"), busy_kernel, None),
        "bob": (Workspace("bob", "e2e-cull-gpu", gpu_util=0), idle_kernel, stopped_after_warnings),
        "cull-gpu": (Workspace("cull-gpu", "e2e-cull-gpu", gpu_util=80), idle_kernel, None),
        "cull-term": (Workspace("cull-term", "e2e-cull"), terminal_loop, None),
        "cull-max": (Workspace("cull-max", "e2e-cull-max"), busy_kernel, stopped_after_warnings),
        "cull-exempt": (Workspace("cull-exempt", "e2e-cull-exempt"), idle_kernel, None),
        "cull-back": (Workspace("cull-back", "e2e-cull"), idle_kernel, activity_after_warning),
        "cull-quiet": (Workspace("cull-quiet", "e2e-cull"), silent_terminal_process, None),
        "cull-snoop": (Workspace("cull-snoop", "e2e-cull"), hostile_server, snooped_then_stopped),
        "cull-card": (Workspace("cull-card", CARD_PROFILE), idle_kernel, stopped_after_warnings),
        "cull-shared": (
            Workspace("cull-shared", SHARED_PROFILE, gpu_util=0),
            idle_kernel,
            stopped_after_warnings,
        ),
    }


def scenario(stack: HubStack, watch: Watch, ws: Workspace, setup: Setup, follow: Follow | None) -> None:
    """Start the server, set up its activity, then follow it; a failure is kept for its own test."""
    try:
        stack.hub.start_server(ws.user, SERVER, {"profile": ws.profile})
        stack.hub.wait_ready(ws.user, SERVER, timeout_s=240, interval_s=0.5)
        ws.ready_at = time.time()
        model = stack.hub.server(ws.user, SERVER) or {}
        ws.started = parse_time(model["started"])
        pod = pod_of(stack, ws.user, SERVER)
        if ws.gpu_util is not None:  # scripted by name before the pod existed
            assert pod["metadata"]["name"] == pod_name(ws), pod["metadata"]["name"]
        ws.claim = next(
            v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if v["name"] == "home"
        )
        setup(stack, ws)
        ws.set_up_at = time.time()
        if follow is not None:
            follow(stack, watch, ws)
    except Exception as e:  # reported by the scenario's own test
        ws.error = e


def pod_name(ws: Workspace) -> str:
    return f"jupyter-{ws.user}--{SERVER}"


def audit_records(stack: HubStack, since: datetime) -> list[dict[str, Any]]:
    """The culler's audit records (``workspace-cull-warned`` ...) in the hub's log, since ``since``."""
    records = []
    for line in stack.hub.proc.log_path.read_text(errors="replace").splitlines():
        _, sep, body = line.partition(" audit {")
        if not sep:
            continue
        try:
            record = json.loads("{" + body)
        except ValueError:
            continue
        if record.get("actor") == "gpuworkspace-culler" and parse_time(record["ts"]) >= since:
            records.append(record)
    return records


@dataclass
class Run:
    """Everything the module saw; each test asserts on its scenario's part."""

    workspaces: dict[str, Workspace]
    policy: dict[str, Any]
    watch: Watch
    audit: list[dict[str, Any]] = field(default_factory=list)
    running_at_end: dict[str, bool] = field(default_factory=dict)
    ended_at: float = 0.0
    notice: dict[str, Any] = field(default_factory=dict)
    notice_error: Exception | None = None

    def ws(self, user: str) -> Workspace:
        ws = self.workspaces[user]
        if ws.error is not None:
            raise ws.error
        return ws

    def records(self, user: str, action: str | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in self.audit
            if r["user"] == user and r["server"] == SERVER and (action is None or r["action"] == action)
        ]


def check_notice_in_browser(stack: HubStack, browser: Any, watch: Watch, user: str) -> dict[str, Any]:
    """Log ``user`` in before the warning (the culler's OAuth too), then read the banner once warned."""
    with logged_in_page(browser, stack, user, viewport={"width": 1280, "height": 900}) as page:
        page.goto(f"{stack.url}/hub/home")
        page.wait_for_load_state("networkidle")  # the banner's fetch: the culler logs the browser in
        warned = until(lambda: watch.warned(user), f"a warning to {user}", 150)
        page.goto(f"{stack.url}/hub/home")
        notice = page.locator(f'#gpuws-cull-notices .gpuws-cull-notice[data-server-name="{SERVER}"]')
        notice.wait_for(timeout=15_000)  # before the stop: the first warning's lead is 16 s
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "culler-notice.png"
        page.screenshot(path=str(shot), full_page=True)
        return {"text": notice.inner_text(), "decision": warned, "screenshot": shot}


def stop_all(stack: HubStack, users: list[str]) -> None:
    """Stop the servers still running, all at once; their disks stay."""
    running = [u for u in users if stack.hub.server(u, SERVER) is not None]
    for user in running:
        stack.hub.api("DELETE", f"/users/{user}/servers/{SERVER}")
    for user in running:
        wait_for(
            lambda u=user: stack.hub.server(u, SERVER) is None, 120, f"{user}/{SERVER} stopped", None, 0.5
        )


# ------------------------------------------------------------------------------------ the run
@pytest.fixture(scope="module")
def run(stack: HubStack, browser: Any) -> Iterator[Run]:
    """All seven scenarios at once, observed until each has passed the time it would be culled."""
    status, body = culler(stack, "status")
    assert status == 200, body
    policy = body["policy"]
    # culler_config.py is what the stack's culler runs with
    assert policy["warn_before"] == [16, 8] and policy["exempt_profiles"] == ["e2e-cull-exempt"], policy
    assert policy["idle_timeout"] == 0 and policy["max_duration_by_profile"]["e2e-cull-max"] == 45, policy
    # the catalog's session settings, which apply to the profiles the config does not name
    cpu_small = policy["catalog"]["cpu-small"]  # cpu.yaml: 60m, 12h, [30m, 5m]
    assert (cpu_small["idle_timeout"], cpu_small["max_duration"]) == (3600, 12 * 3600), policy
    assert cpu_small["warn_before"] == [1800, 300], policy
    assert policy["catalog"][CARD_PROFILE] == {
        "idle_timeout": 36,
        "max_duration": None,
        "warn_before": [20, 6],
        "gpu_mode": "none",
    }, policy
    assert CARD_PROFILE not in policy["idle_timeout_by_profile"] and not policy["warn_before_by_profile"]
    assert policy["idle_timeout_by_gpu_mode"] == {"time-sliced": 36}, policy
    assert policy["catalog"][SHARED_PROFILE] == {
        "idle_timeout": None,
        "max_duration": 600,
        "warn_before": [20, 6],
        "gpu_mode": "time-sliced",
    }, policy
    since = datetime.now(UTC)
    scenarios = plan()
    workspaces = {user: ws for user, (ws, _, _) in scenarios.items()}
    for ws in workspaces.values():
        if stack.hub.api("GET", f"/users/{ws.user}")[0] == 404:
            assert stack.hub.api("POST", f"/users/{ws.user}")[0] == 201
        ws.token = user_token(stack, ws.user)
        if ws.gpu_util is not None:  # the pod's GPU load from its first sample on
            script(stack, {"metadata": {"name": pod_name(ws)}}, gpu_util=ws.gpu_util)
    # what the spawn page's card for e2e-cull-card promises, read before anything is started
    cards = spawn_cards(stack, browser, [CARD_PROFILE, SHARED_PROFILE])
    workspaces["cull-card"].seen["card"] = cards[CARD_PROFILE]
    workspaces["cull-shared"].seen["card"] = cards[SHARED_PROFILE]
    watch = Watch(stack)
    result = Run(workspaces=workspaces, policy=policy, watch=watch)
    threads = [
        threading.Thread(target=scenario, args=(stack, watch, ws, setup, follow), name=user, daemon=True)
        for user, (ws, setup, follow) in scenarios.items()
    ]
    watch.start()
    try:
        for thread in threads:
            thread.start()
        try:
            result.notice = check_notice_in_browser(stack, browser, watch, "bob")
        except Exception as e:  # reported by its own test
            result.notice_error = e
        for thread in threads:
            thread.join(300)
        snoop = workspaces["cull-snoop"]
        if snoop.error is None and snoop.seen.get("capture") and snoop.seen["capture"].exists():  # all it saw
            snoop.seen["requests"] = captured(snoop)
        # the servers to be kept: watched past the time they would have been stopped when idle
        idle = max(
            *(t for p, t in policy["idle_timeout_by_profile"].items() if p.startswith("e2e-cull")),
            policy["catalog"][CARD_PROFILE]["idle_timeout"],
        )
        set_up = max((ws.set_up_at for ws in workspaces.values()), default=0.0)
        time.sleep(max(0.0, set_up + idle + MARGIN_S - time.time()))
        result.ended_at = time.time()
        result.running_at_end = {u: stack.hub.server(u, SERVER) is not None for u in workspaces}
        busy = workspaces["cull-busy"]
        if busy.kernel and result.running_at_end["cull-busy"]:
            busy.seen["kernel_at_end"] = kernel_state(stack, busy)
        time.sleep(CYCLE_S + 1)  # the audit records of the last cycle
        result.audit = audit_records(stack, since)
        yield result
    finally:
        watch.done.set()
        try:
            stop_all(stack, list(workspaces))
        finally:
            for ws in workspaces.values():
                if ws.gpu_util is not None:
                    stack.devcluster.control(
                        WORKLOAD, {"namespace": NS, "pod": pod_name(ws)}, method="DELETE"
                    )


def assert_never_warned(run: Run, user: str) -> None:
    assert run.records(user, "workspace-cull-warned") == [], run.records(user)
    assert [d for d in run.watch.all(user) if d["warnings"] or d["action"] in ("warn", "stop")] == []
    assert run.running_at_end[user], f"{user}/{SERVER} is no longer running"


def last_decision(run: Run, user: str) -> dict[str, Any]:
    decision = run.watch.latest(user)
    assert decision is not None, f"the culler never listed {user}/{SERVER}"
    return decision


# ------------------------------------------------------------------------------------ the tests
def test_a_busy_kernel_with_no_browser_is_not_culled(run: Run) -> None:
    ws = run.ws("cull-busy")
    assert_never_warned(run, ws.user)
    kernel = ws.seen["kernel_at_end"]
    assert (kernel["execution_state"], kernel["connections"]) == ("busy", 0), kernel
    decision = last_decision(run, ws.user)  # the kernel, busy now or when last asked, keeps it
    assert decision["activity_source"] in (f"busy kernel {ws.kernel}", f"kernel {ws.kernel}"), decision
    assert run.ended_at - ws.set_up_at > run.policy["idle_timeout_by_profile"]["e2e-cull"]


def test_an_idle_kernel_and_idle_gpu_are_warned_twice_then_stopped_keeping_the_disk(
    run: Run, stack: HubStack
) -> None:
    ws = run.ws("bob")
    warned = run.records(ws.user, "workspace-cull-warned")
    assert [(r["details"]["stage"], r["details"]["reason"]) for r in warned] == [(0, "idle"), (1, "idle")]
    stops = run.records(ws.user, "workspace-stopped")
    assert [r["details"]["reason"] for r in stops] == ["idle"], run.records(ws.user)
    assert stops[0]["details"]["outcome"] in ("stopped", "stopping")
    # every warning's full lead time was given before the stop
    leads = run.policy["warn_before"]
    for record, lead in zip(warned, leads, strict=True):
        assert epoch(stops[0]["ts"]) - epoch(record["ts"]) >= lead, (record, stops[0])
    assert ws.seen["first_warning"]["reason"] == "idle"
    assert not run.running_at_end[ws.user] and ws.seen["stopped_at"] >= epoch(warned[0]["ts"])
    # the disk is kept: the claim is still there and bound
    selector = f"gpuworkspace.dev/user={ws.user},gpuworkspace.dev/server={SERVER}"
    claims = json.loads(kubectl(stack, "-n", NS, "get", "pvc", "-l", selector, "-o", "json"))["items"]
    assert [c["metadata"]["name"] for c in claims] == [ws.claim]
    assert claims[0]["status"]["phase"] == "Bound" and not claims[0]["metadata"].get("deletionTimestamp")


def test_a_busy_gpu_keeps_a_workspace_whose_kernel_is_idle(run: Run, stack: HubStack) -> None:
    ws = run.ws("cull-gpu")
    assert_never_warned(run, ws.user)
    decision = last_decision(run, ws.user)
    assert decision["activity_source"] == "gpu" and "GPU 80 %" in decision["message"], decision
    assert kernel_state(stack, ws)["execution_state"] == "idle"


def test_terminal_output_keeps_a_workspace(run: Run) -> None:
    ws = run.ws("cull-term")
    assert ws.seen["output"], ws.seen
    assert_never_warned(run, ws.user)
    sources = {d["activity_source"] for d in run.watch.all(ws.user)}
    assert f"terminal {ws.seen['terminal']}" in sources, sources  # its output, not typing, kept it


def test_max_duration_warns_then_stops_a_busy_workspace(run: Run) -> None:
    ws = run.ws("cull-max")
    assert ws.seen["kernel_when_warned"]["execution_state"] == "busy", ws.seen["kernel_when_warned"]
    warned = run.records(ws.user, "workspace-cull-warned")
    assert [(r["details"]["stage"], r["details"]["reason"]) for r in warned] == [
        (0, "max-duration"),
        (1, "max-duration"),
    ]
    stops = run.records(ws.user, "workspace-stopped")
    assert [r["details"]["reason"] for r in stops] == ["max-duration"], run.records(ws.user)
    assert ws.started is not None
    longest = run.policy["max_duration_by_profile"]["e2e-cull-max"]
    assert epoch(stops[0]["ts"]) >= ws.started.timestamp() + longest
    assert epoch(stops[0]["ts"]) - epoch(warned[0]["ts"]) >= run.policy["warn_before"][0]
    assert not run.running_at_end[ws.user]


def test_an_exempt_profile_is_never_culled(run: Run) -> None:
    ws = run.ws("cull-exempt")
    assert_never_warned(run, ws.user)
    decision = last_decision(run, ws.user)
    assert decision["action"] == "exempt", decision
    assert "profile e2e-cull-exempt is exempt" in decision["message"], decision
    # idle for longer than the profile's idle timeout, which the exemption overrides
    idle_for = run.ended_at - epoch(decision["last_activity"])
    assert idle_for > run.policy["idle_timeout_by_profile"]["e2e-cull-exempt"], decision


def test_activity_after_a_warning_cancels_the_stop(run: Run) -> None:
    ws = run.ws("cull-back")
    status, notices = ws.seen["notices_warned"]
    assert status == 200 and [(n["server"], n["reason"], n["stage"]) for n in notices] == [
        (SERVER, "idle", 0)
    ]
    decision = ws.seen["decision_after"]
    assert decision["action"] == "keep" and decision["warnings"] == [], decision
    assert epoch(decision["last_activity"]) >= epoch(ws.seen["first_warning"]["warnings"][0]["given_at"])
    assert ws.seen["server_after_announced_stop"] is not None, "stopped despite the activity"
    warned = run.records(ws.user, "workspace-cull-warned")
    withdrawn = run.records(ws.user, "workspace-cull-warnings-withdrawn")
    assert warned[0]["details"]["stage"] == 0 and withdrawn, run.records(ws.user)
    # a new idle period from the activity on: the stages start again, a stop only at its end
    since = epoch(withdrawn[0]["ts"])
    assert [r["details"]["stage"] for r in warned if epoch(r["ts"]) > since][:1] in ([], [0]), warned
    idle = run.policy["idle_timeout_by_profile"]["e2e-cull"]
    stops = run.records(ws.user, "workspace-stopped")
    assert all(epoch(r["ts"]) >= ws.seen["acted_at"] + idle for r in stops), (stops, ws.seen["acted_at"])


def test_the_home_page_shows_the_warning(run: Run) -> None:
    if run.notice_error is not None:
        raise run.notice_error
    text = run.notice["text"]
    assert f"Your server '{SERVER}' will be stopped at" in text, text
    assert "cancels this" in text and "Your disk is kept." in text, text
    assert run.notice["screenshot"].stat().st_size > 10_000


def test_a_process_busy_in_a_silent_terminal_keeps_the_workspace(run: Run) -> None:
    ws = run.ws("cull-quiet")
    assert ws.seen["output"], ws.seen  # the date, printed before the silent process started
    assert_never_warned(run, ws.user)
    sources = {d["activity_source"] for d in run.watch.all(ws.user)}
    assert "cpu" in sources, sources  # the kubelet's CPU figures kept it; the terminal was silent
    assert run.ended_at - ws.set_up_at > run.policy["idle_timeout_by_profile"]["e2e-cull"]


def test_what_the_culler_sends_to_a_hostile_server_opens_nothing_else(run: Run, stack: HubStack) -> None:
    """Seed 000's security rule: nothing sent to user code carries a credential beyond that one server."""
    ws = run.ws("cull-snoop")
    # the hostile server went through a full culler cycle: warned twice, checkpointed, stopped. The
    # probes below, at the first warning, are requests to the server: on a loaded machine they can land
    # after it as new activity, which withdraws the warnings (as it must); the cycle then starts again.
    records = run.records(ws.user)
    withdrawn = [i for i, r in enumerate(records) if r["action"] == "workspace-cull-warnings-withdrawn"]
    last_cycle = records[withdrawn[-1] + 1 :] if withdrawn else records
    warned = [r for r in last_cycle if r["action"] == "workspace-cull-warned"]
    assert [(r["details"]["stage"], r["details"]["reason"]) for r in warned] == [(0, "idle"), (1, "idle")]
    assert len(withdrawn) <= 1, records
    stops = run.records(ws.user, "workspace-stopped")
    assert [r["details"]["reason"] for r in stops] == ["idle"], run.records(ws.user)
    assert stops[0]["details"]["checkpointed"] == ["snoop.ipynb"], stops[0]
    requests = ws.seen["requests"]
    from_culler = culler_requests(requests)
    paths = {r["uri"].split("?")[0].rsplit("/api/", 1)[-1] for r in from_culler}
    assert {"status", "kernels", "sessions", "contents/snoop.ipynb/checkpoints"} <= paths, paths
    culler_creds = credentials_of(from_culler)
    assert culler_creds["Authorization"] and not culler_creds["Cookie"], culler_creds
    assert f"token {ws.token}" not in culler_creds["Authorization"]  # not the user's token: the culler's
    # while it ran, the culler's credential opened this server (it is real) and nothing else
    assert set(ws.seen["own_server_while_running"].values()) == {200}, ws.seen["own_server_while_running"]
    for credential, answers in ws.seen["elsewhere_while_running"].items():
        assert set(answers.values()) == {403}, (credential[:12], answers)  # the probe token: 403 everywhere
    # everything it captured (the culler's and its own user's credentials), tried after the stop
    everything = credentials_of(requests)
    assert everything["Authorization"] >= culler_creds["Authorization"]
    for header, values in everything.items():
        for value in values:
            answers = try_elsewhere(stack, header, value)
            assert refused(answers), (header, value[:12], answers)
    # the culler's credential opened no service even for its own user (it was made for one server)
    assert set(ws.seen["services_while_running"].values()) == {403}, ws.seen["services_while_running"]
    # and it was revoked at the stop
    for credential in culler_creds["Authorization"]:
        status, _ = http("GET", f"{stack.url}/hub/api/user", None, headers={"Authorization": credential})
        assert status == 403, status
    assert stack.hub.server("cull-busy", SERVER) is not None  # no stop API call got through


def test_a_profile_is_warned_at_the_lead_times_its_card_shows_then_stopped(run: Run) -> None:
    """Issue 15: the spawn card's "you are warned 20 s and 6 s before" is what the culler does, not
    its own warn_before ([16, 8]); each warning announces the stop exactly its lead time ahead."""
    ws = run.ws("cull-card")
    assert ws.seen["card"] == "stops after 36 s idle; you are warned 20 s and 6 s before", ws.seen
    warned_at_the_card_s_lead_times_then_stopped(run, ws, idle={"seconds": 36, "source": "catalog"})


def test_a_gpu_shared_workspace_is_stopped_at_its_gpu_mode_s_timeout_warned_as_its_card_says(
    run: Run,
) -> None:
    """Issue 15: a time-sliced GPU share whose card sets no idle timeout is stopped at the culler's
    idle_timeout_by_gpu_mode["time-sliced"] (as docs/reference/culler.md's precedence table says),
    warned at its card's lead times."""
    ws = run.ws("cull-shared")
    assert ws.seen["card"] == "at most 10 min per session; you are warned 20 s and 6 s before", ws.seen
    mode = {"seconds": 36, "source": "culler config: gpu mode"}
    warned_at_the_card_s_lead_times_then_stopped(run, ws, idle=mode)


def warned_at_the_card_s_lead_times_then_stopped(run: Run, ws: Workspace, idle: dict[str, Any]) -> None:
    card = ws.seen["card"]
    card_leads = [int(n) for n in re.findall(r"(\d+) s", card.partition("warned")[2])]
    assert card_leads == [20, 6] != run.policy["warn_before"], (card_leads, run.policy["warn_before"])
    # the culler says which rules it applied to this server, and where they came from
    rules = ws.seen["first_warning"]["policy"]
    assert rules["warn_before"] == {"seconds": card_leads, "source": "catalog"}, rules
    assert rules["idle_timeout"] == idle, rules
    warned = run.records(ws.user, "workspace-cull-warned")
    assert [(r["details"]["stage"], r["details"]["reason"]) for r in warned] == [(0, "idle"), (1, "idle")]
    stops = run.records(ws.user, "workspace-stopped")
    assert [r["details"]["reason"] for r in stops] == ["idle"], run.records(ws.user)
    for record, lead in zip(warned, card_leads, strict=True):
        # each stage announced the stop exactly its lead time after it was given ...
        announced = epoch(record["details"]["stop_at"]) - epoch(record["ts"])
        assert announced == pytest.approx(lead, abs=0.01), (record, lead)
        # ... and the stop came no sooner, and within a few cycles of it
        before_stop = epoch(stops[0]["ts"]) - epoch(record["ts"])
        assert lead <= before_stop <= lead + 2 * MARGIN_S, (record, stops[0], lead)
    assert "(warning 1 of 2)" in warned[0]["message"] and "(warning 2 of 2)" in warned[1]["message"]
    assert not run.running_at_end[ws.user]
