"""One soak worker's lifecycle operations against the hub REST API, the disk API and kubectl.

A worker owns one user and a few named servers (a container, a shared-GPU container, a VM) and keeps
what it expects of each: whether it runs and which marker text its disk holds. Every operation reads
the hub's truth first (a hub restart or a node failure may have changed it) and records its outcome.
Every wait has a deadline; one that passes is recorded (``tally.errors``) with what was waited for.
"""

from __future__ import annotations

import json
import random
import re
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.e2e.harness import HubStack, http
from tests.e2e.test_workspace_lifecycle import kubectl

DISKS = "/services/gpuworkspace-disks/api/v1"
MARKER = "soak-marker.txt"
SERVERS = {"c": "cpu-small", "g": "gpu-shared", "v": "vm-workstation"}
READY_TIMEOUT_S = 200.0
SLOW_S, GIVE_UP_S = 150.0, 600.0  # a stop or delete still running after these
DISK_API_GIVE_UP_S = 300.0  # a disk API call unanswered (hub, proxy or service away) for this long
PROGRESS_READ_S = 30.0  # reading a failed spawn's progress stream
CONTENTS_WAIT_S = 120.0  # a marker read or write that reaches no server (hub or route away) for this long


@dataclass
class Server:
    name: str
    profile: str
    running: bool = False
    exists: bool = False  # has a disk (created once; retained after a delete)
    removed: bool = False  # deleted from the hub (its disk retained, to be re-adopted)
    marker: str | None = None

    @property
    def vm(self) -> bool:
        return self.profile.startswith("vm-")


@dataclass
class Tally:
    ops: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    failed_spawns: list[str] = field(default_factory=list)  # "user/server: reason"
    unexplained_failures: list[str] = field(default_factory=list)
    lost_data: list[str] = field(default_factory=list)
    hub_restarts: list[tuple[float, float]] = field(default_factory=list)  # (began, answered again)
    interrupted: list[str] = field(default_factory=list)  # operations a hub restart cut short
    errors: list[str] = field(default_factory=list)  # the soak's own surprises, with context


class HubUnreachable(Exception):
    pass


class Worker:
    def __init__(self, stack: HubStack, user: str, seed: int, tally: Tally) -> None:
        self.stack, self.user, self.tally = stack, user, tally
        self.rng = random.Random(seed)
        self.servers = {f"{k}1": Server(f"{k}1", profile) for k, profile in SERVERS.items()}
        self.began = 0.0
        self.doing = ""  # the operation in flight ("delete v1"), for a run that passes its deadline
        self.give_up_s = GIVE_UP_S

    # ------------------------------------------------------------------------------- plumbing
    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """A hub API call that waits out a hub restart (connection refused, 502/503 from the proxy)."""
        deadline = time.monotonic() + 120
        while True:
            try:
                status, raw = http(
                    method,
                    self.stack.hub.api_url + path,
                    body,
                    headers={"Authorization": f"token {self.stack.admin_token}"},
                    timeout=60,
                )
            except (urllib.error.URLError, OSError) as exc:
                status, raw = 0, str(exc).encode()
            if not _hub_away(status, raw) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if _hub_away(status, raw):
            raise HubUnreachable(f"{method} {path}: {status} {raw[:200]!r}")
        return status, _decoded(raw)

    def hub_servers(self) -> dict[str, Any]:
        status, model = self.api("GET", f"/users/{self.user}")
        if status == 404:
            return {}
        if status != 200:
            raise HubUnreachable(f"GET /users/{self.user}: {status} {model}")
        return dict(model.get("servers") or {})

    def hub_servers_all(self) -> dict[str, Any]:
        """Every named server the hub has for the user, stopped ones too."""
        status, model = self.api("GET", f"/users/{self.user}?include_stopped_servers=1")
        return dict((model or {}).get("servers") or {}) if status == 200 else {}

    def sync(self, server: Server) -> dict[str, Any] | None:
        """Refresh ``server.running`` from the hub; the hub's model of it (None when not running)."""
        model = self.hub_servers().get(server.name)
        server.running = bool(model and model.get("ready"))
        return model

    def contents(self, server: Server, body: Any = None) -> tuple[int, Any]:
        url = f"{self.stack.url}/user/{self.user}/{server.name}/api/contents/{MARKER}"
        headers = {"Authorization": f"token {self.stack.admin_token}"}
        # the proxy may be restarting with the hub, or the route not yet back (the restarted hub checks
        # every running server first: tens of seconds on a loaded machine)
        deadline = time.monotonic() + CONTENTS_WAIT_S
        while True:
            try:
                status, raw = http("PUT" if body else "GET", url, body, headers=headers, timeout=30)
            except (urllib.error.URLError, OSError):
                status, raw = 0, b""
            if not (_hub_away(status, raw) or status == 424):  # 424: the hub's "server not running" page
                return status, _decoded(raw)
            if time.monotonic() > deadline:
                return status, None
            time.sleep(1)

    # ------------------------------------------------------------------------------- choosing
    def step(self) -> str:
        server = self.rng.choice(sorted(self.servers.values(), key=lambda s: s.name))
        self.sync(server)
        roll = self.rng.random()
        if not server.running:
            if server.exists and not server.removed and roll < 0.12:
                op = self.delete
            elif server.vm and server.exists and not server.removed and roll < 0.25:
                op = self.rebuild_vm
            else:
                op = self.start
        elif roll < 0.45:
            op = self.stop
        elif roll < 0.62 and not server.vm:  # the disk API does not take root disks yet
            op = self.snapshot
        elif roll < 0.8 and not server.vm:
            op = self.resize
        else:
            op = self.delete
        name = op.__name__ if not (op == self.start and server.removed) else "re_adopt"
        self.tally.ops[name] += 1
        self.began, self.doing = time.monotonic(), f"{name} {server.name}"
        try:
            op(server)
        finally:
            self.doing = ""
        return name

    # ------------------------------------------------------------------------------- operations
    def start(self, server: Server) -> None:
        path = f"/users/{self.user}/servers/{server.name}"
        status, body = self.api("POST", path, {"profile": server.profile})
        if status in (400, 409) and "already" in str(body).lower():
            self.tally.outcomes["start:already-running"] += 1
        elif status not in (201, 202):
            self._failed(server, f"{status} {_message(body)}")
            return
        if not self._wait_started(server):
            return
        server.exists, server.removed = True, False
        self._check_marker(server)

    def _wait_started(self, server: Server) -> bool:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            model = self.sync(server)
            if server.running:
                return True
            if model is None:  # the spawn ended without a server: it failed
                self._failed(server, self._progress_failure(server))
                return False
            time.sleep(0.3)
        self._failed(server, "")
        self.tally.errors.append(f"{self.user}/{server.name}: still not ready after {READY_TIMEOUT_S}s")
        return False

    def _progress_failure(self, server: Server) -> str:
        """What the spawn page shows for a failed start: the progress stream's ``failed`` event."""
        url = f"{self.stack.hub.api_url}/users/{self.user}/servers/{server.name}/progress"
        request = urllib.request.Request(url, headers={"Authorization": f"token {self.stack.admin_token}"})
        deadline = time.monotonic() + PROGRESS_READ_S  # an event stream: it may stay open (keepalives)
        try:
            with urllib.request.urlopen(request, timeout=PROGRESS_READ_S) as resp:
                status = resp.status
                for raw in resp:
                    line = raw.decode(errors="replace")
                    event = _decoded(line[5:].encode()) if line.startswith("data:") else None
                    if isinstance(event, dict) and event.get("failed"):
                        return str(event.get("message") or "")
                    if time.monotonic() > deadline:
                        return f"(no failed event in the progress stream within {PROGRESS_READ_S:.0f} s)"
        except urllib.error.HTTPError as exc:
            status = exc.code
        except (urllib.error.URLError, OSError) as exc:
            return f"(progress unreadable: {exc})"
        return f"(no failed event; progress answered {status})"

    def _restart_overlapped(self, finished: bool = False) -> bool:
        """Whether a hub restart happened while this operation ran (or it began just after one);
        ``finished``: and that restart is over (the new hub answers; a restart under way ends at +1 h)."""
        now = time.monotonic()
        return any(
            began <= now and self.began <= end + 1 and (end <= now or not finished)
            for began, end in self.tally.hub_restarts
        )

    def _failed(self, server: Server, reason: str) -> None:
        server.running = False
        entry = f"{self.user}/{server.name} ({server.profile}): {reason}"
        if self._restart_overlapped():
            self.tally.outcomes["start:interrupted-by-hub-restart"] += 1
            self.tally.interrupted.append(entry)
            return
        self.tally.outcomes["start:failed"] += 1
        self.tally.failed_spawns.append(entry)
        detail = reason.removeprefix("Spawn failed:").strip()
        if not detail or detail.startswith("(no failed event"):
            self.tally.unexplained_failures.append(entry)

    def _check_marker(self, server: Server) -> None:
        if server.marker is None:
            text = f"{self.user}/{server.name} {self.rng.random()}"
            status, _ = self.contents(server, {"type": "file", "format": "text", "content": text})
            if status in (200, 201):
                server.marker = text
            else:
                self.tally.errors.append(f"{self.user}/{server.name}: writing the marker answered {status}")
            return
        status, model = self.contents(server)
        if status != 200 or (model or {}).get("content") != server.marker:
            got = (model or {}).get("content") if status == 200 else f"HTTP {status}"
            self.tally.lost_data.append(f"{self.user}/{server.name}: marker {server.marker!r}, read {got!r}")
        else:
            self.tally.outcomes["marker:intact"] += 1

    def stop(self, server: Server) -> None:
        status, body = self.api("DELETE", f"/users/{self.user}/servers/{server.name}")
        if status not in (202, 204):
            self.tally.errors.append(f"stop {self.user}/{server.name}: {status} {_message(body)}")
            return
        self._wait_gone(server, "stop")

    def delete(self, server: Server) -> None:
        path = f"/users/{self.user}/servers/{server.name}"
        status, body = self.api("DELETE", path, {"remove": True})
        if status == 404 and server.name not in self.hub_servers_all():
            server.removed, server.running = True, False  # removed already (a delete the hub finished)
            self.tally.outcomes["delete:already-gone"] += 1
            return
        if status not in (202, 204):
            self.tally.errors.append(f"delete {self.user}/{server.name}: {status} {_message(body)}")
            return
        if self._wait_gone(server, "delete", removed=True):
            server.removed = True

    def _wait_gone(self, server: Server, what: str, removed: bool = False) -> bool:
        """Until the hub no longer runs (``removed``: no longer has) the server. Over SLOW_S is counted
        as slow (a stop waits for the VMI or pod to go); over GIVE_UP_S it is a finding."""
        began, resent = time.monotonic(), False
        while time.monotonic() < began + self.give_up_s:
            status, model = self.api("GET", f"/users/{self.user}?include_stopped_servers=1")
            servers = (model or {}).get("servers") or {} if status == 200 else {}
            entry = servers.get(server.name)
            stopped = entry is not None and not entry.get("ready") and not entry.get("pending")
            if removed and stopped and not resent and self._restart_overlapped(finished=True):
                # JupyterHub removes a server after its stop, in a task it does not await, and a hub
                # shutting down cancels it: the new hub still has the server, stopped, and will not
                # remove it. A client repeats the request, as a user would (safe to repeat). Only once
                # the restart is over: until then the first removal may still be running.
                resent = True
                self.tally.outcomes["delete:repeated-after-hub-restart"] += 1
                again, body = self.api(
                    "DELETE", f"/users/{self.user}/servers/{server.name}", {"remove": True}
                )
                self.tally.interrupted.append(
                    f"delete {self.user}/{server.name}: the removal was forgotten by a hub restart "
                    f"(stopped, not removed); repeated: {again} {_message(body)}"
                )
                continue
            if (
                (entry is None)
                if removed
                else not (entry or {}).get("ready") and not (entry or {}).get("pending")
            ):
                server.running = False
                slow = time.monotonic() - began > SLOW_S
                self.tally.outcomes[f"{what}:done" + (f" after over {SLOW_S:.0f} s" if slow else "")] += 1
                return True
            time.sleep(0.3)
        self.tally.errors.append(f"{what} {self.user}/{server.name}: not done after {self.give_up_s:.0f} s")
        return False

    def rebuild_vm(self, server: Server) -> None:
        """An admin deletes the stopped VM object; the next start builds it again on the same root disk."""
        selector = f"gpuworkspace.dev/user={self.user}"
        vms = (
            _decoded(kubectl(self.stack, "get", "vm", "-l", selector, "-o", "json").stdout.encode()) or {}
        ).get("items", [])
        mine = [
            v
            for v in vms
            if (v["metadata"].get("annotations") or {}).get("gpuworkspace.dev/servername") == server.name
        ]
        for vm in mine:
            kubectl(
                self.stack,
                "delete",
                "vm",
                vm["metadata"]["name"],
                "--wait=true",
                "--timeout=120s",
                check=False,
            )
        self.tally.outcomes["rebuild:vm-deleted" if mine else "rebuild:no-vm"] += 1

    def claim(self, server: Server) -> str | None:
        if server.vm:
            return None
        return f"home-{self.user}--{server.name}"

    def resize(self, server: Server) -> None:
        claim = self.claim(server)
        got = kubectl(self.stack, "get", "pvc", claim or "", "-o", "json", check=False)
        if not claim or got.returncode != 0:
            self.tally.errors.append(f"resize {self.user}/{server.name}: no claim {claim}")
            return
        size = json.loads(got.stdout)["spec"]["resources"]["requests"]["storage"]
        gib = int(size.removesuffix("Gi")) + 1 if size.endswith("Gi") else 2
        status, body = self._disks("POST", f"/disks/{claim}/resize", {"size": f"{gib}Gi"})
        self.tally.outcomes[f"resize:{status}"] += 1
        if status >= 500 and self._restart_overlapped():
            self.tally.interrupted.append(f"resize {claim}: {status} during a hub restart")
        elif status not in (200, 400):  # 400: over the profile's limit, refused with the limit named
            self.tally.errors.append(f"resize {claim}: {status} {_message(body)}")

    def snapshot(self, server: Server) -> None:
        claim = self.claim(server)
        assert claim is not None, "container disks only: the disk API does not take root disks yet"
        name = f"{claim}-soak-{self.rng.randrange(10**6)}"
        status, body = self._disks("POST", f"/disks/{claim}/snapshots", {"name": name})
        self.tally.outcomes[f"snapshot:{status}"] += 1
        if status >= 500 and self._restart_overlapped():  # the hub stops its services when it stops
            self.tally.interrupted.append(f"snapshot {claim}: {status} during a hub restart")
        elif status != 201:
            self.tally.errors.append(f"snapshot {claim}: {status} {_message(body)}")

    def _disks(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        """A disk API call, repeated while the hub, the proxy or the service restarts. A create repeated
        after no answer may find its first try landed: that 409 "already exists" is its success."""
        url = self.stack.url + DISKS + path
        headers = {"Authorization": f"token {self.stack.admin_token}"}
        deadline, attempt = time.monotonic() + DISK_API_GIVE_UP_S, 0
        while True:
            try:
                status, raw = http(method, url, body, headers=headers, timeout=120)
            except (urllib.error.URLError, OSError) as exc:
                status, raw = 0, str(exc).encode()
            if attempt and status == 409 and b"already exists" in raw:
                self.tally.outcomes["disk-api:landed-before-a-retry"] += 1
                return 201, _decoded(raw)
            if not _hub_away(status, raw):
                break
            if time.monotonic() > deadline:  # the caller records the status it got as a finding
                return status, f"no answer within {DISK_API_GIVE_UP_S:.0f} s: {raw[:200]!r}"
            attempt += 1
            time.sleep(1)  # the hub (and so the proxy and its routes) or the service restarting
        return status, _decoded(raw)


def _hub_away(status: int, raw: bytes) -> bool:
    """No answer, or an answer while the hub restarts: the proxy's (no route yet: an HTML 404 page),
    a bare 404 "Not Found" before a service's route is back, or a server still "pending" (a start or
    stop in flight, or the hub's start-up check of every server it had: a stop then fails with 500, a
    start with 400), which the operation waits out. A 403 *page* is the hub's too: with the proxy's
    service route not back yet, a POST meant for a service reaches the hub's default route, whose XSRF
    check refuses it with HTML (the services answer JSON, always). So is a 403 for a missing ``_xsrf``
    argument on a server's path: until the restarted hub's start-up check of a running server ends, the
    proxy has no route for it, and the hub's default route refuses a PUT meant for the server (a single-user
    server accepts the token without one)."""
    if status in (0, 502, 503) or (status in (403, 404) and raw.lstrip().startswith(b"<")):
        return True
    message = _message(_decoded(raw))
    if status == 403 and "'_xsrf' argument missing" in message:
        return True
    pending = re.search(r" is pending (check|stop|spawn)", message) is not None
    return (status == 404 and message == "Not Found") or (status in (400, 500) and pending)


def _decoded(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")


def _message(body: Any) -> str:
    return str(body.get("message", body) if isinstance(body, dict) else body)[:300]
