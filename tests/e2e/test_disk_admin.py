"""The disk admin API (gpuworkspace-disks) end to end: real hub tokens, real devcluster, real servers.

The service runs as the hub registers it when the hub config's service is reachable through the proxy;
otherwise (the e2e harness replaces ``c.JupyterHub.services`` with its own admin service) this module
starts the same command next to the hub and talks to it directly, with the same hub tokens.
"""

from __future__ import annotations

import http.cookiejar as http_cookies
import json
import os
import re
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from .harness import REPO, HubStack, Proc, free_port, http, wait_for
from .test_workspace_lifecycle import NS, get_json, kubectl, read_file, start, write_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
PREFIX = "/services/gpuworkspace-disks/"
USER, OTHER, SERVER = "disky", "nosy", "dk"
CLAIM = f"home-{USER}--{SERVER}"


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("the disk admin service manages this project's workspace disks")


@pytest.fixture(scope="module")
def disks(stack: HubStack) -> Iterator[tuple[str, float]]:
    """The service's base URL (…/services/gpuworkspace-disks/) and its alert threshold."""
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("the disk admin service manages this project's workspace disks")
    proxied = stack.url + PREFIX
    status, _ = http("GET", proxied + "api/v1/workspaces", headers=_auth(stack.admin_token))
    if status == 200:
        yield proxied, 0.9
        return
    port = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(stack.kubeconfig),
        "JUPYTERHUB_API_URL": f"{stack.url}/hub/api",
        "JUPYTERHUB_SERVICE_NAME": "gpuworkspace-disks",
        "JUPYTERHUB_SERVICE_PREFIX": PREFIX,
        "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}",
        "GPUWS_DISK_ALERT_THRESHOLD": "1e-9",  # any written byte raises the alert
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("JUPYTERHUB_API_TOKEN", "JUPYTERHUB_CLIENT_ID"):
        env.pop(name, None)
    argv = [sys.executable, "-m", "gpuworkspace_spawner.services.disks.app", "--namespace", NS]
    # https (the default): the kubelets' certificates verify against the kubeconfig's CA
    argv += ["--catalog", str(stack.workdir / "catalog"), "--timeout", "60"]
    proc = Proc("gpuworkspace-disks", argv, stack.log_dir / "disks.log", env, cwd=REPO).start()
    base = f"http://127.0.0.1:{port}{PREFIX}"
    try:
        wait_for(lambda: http("GET", base + "api/v1/workspaces")[0] == 403, 30, "the disk service", proc)
        yield base, 1e-9
    finally:
        print(proc.tail(40))
        proc.stop()


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"token {token}"}


def call(base: str, token: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    status, raw = http(method, base + path, body, headers=_auth(token), timeout=120)
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def user_token(stack: HubStack, user: str) -> str:
    """An API token of ``user`` (scopes: the user's own), created the way a person does: log in through
    the OIDC provider, then ask the hub for a token with the session cookie (the test's admin service
    has no ``tokens`` scope)."""
    jar = http_cookies.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(f"{stack.url}/hub/oauth_login", timeout=30) as page:
        authorize = page.geturl()  # the provider's authorization form
    form = urllib.parse.urlencode({"sub": user}).encode()
    with opener.open(urllib.request.Request(authorize, data=form, method="POST"), timeout=60) as page:
        assert page.status == 200, page.geturl()
    xsrf = next(c.value for c in jar if c.name == "_xsrf")
    request = urllib.request.Request(
        f"{stack.url}/hub/api/users/{user}/tokens",
        data=json.dumps({"note": "disk e2e", "expires_in": 3600}).encode(),
        method="POST",
        headers={"X-XSRFToken": xsrf, "Content-Type": "application/json"},
    )
    with opener.open(request, timeout=30) as answer:
        return str(json.loads(answer.read())["token"])


def test_disk_admin_api(stack: HubStack, disks: tuple[str, float]) -> None:
    disks, threshold = disks
    t0 = time.monotonic()
    admin, mine, nosy = stack.admin_token, user_token(stack, USER), user_token(stack, OTHER)
    start(stack, USER, SERVER, {"profile": "cpu-small"})
    write_file(stack, USER, SERVER, "keep.txt", "precious " * 100)
    timings = {"started": time.monotonic() - t0}

    # listing: an admin sees everything, a user their own, nobody else's; usage appears once the
    # kubelet's volume stats include the newly mounted volume
    def listed_with_usage() -> dict[str, Any] | None:
        status, listed = call(disks, admin, "GET", "api/v1/workspaces")
        assert status == 200, listed
        found = next(i for i in listed["items"] if i["disk"]["claim"] == CLAIM)
        return found if "usedBytes" in found["disk"] else None

    item = wait_for(listed_with_usage, 30, "the disk's usage in the listing")
    assert (item["user"], item["server"], item["profile"]) == (USER, SERVER, "cpu-small")
    assert item["catalogVersion"] == "2026.12.1"
    assert item["disk"]["kind"] == "home" and item["disk"]["state"] == "active"
    assert item["state"]["state"] == "Running", item
    assert item["disk"]["usedBytes"] > 0, item
    status, own = call(disks, mine, "GET", f"api/v1/workspaces/{USER}/{SERVER}")
    assert status == 200 and own["disk"]["claim"] == CLAIM, own
    status, listed = call(disks, nosy, "GET", "api/v1/workspaces")
    assert status == 200 and all(i["user"] == OTHER for i in listed["items"])
    status, body = call(disks, nosy, "GET", f"api/v1/workspaces/{USER}/{SERVER}")
    assert status == 403 and body["status"] == 403, body
    assert call(disks, nosy, "GET", f"api/v1/disks/{CLAIM}/snapshots")[0] == 403
    assert call(disks, "not-a-token", "GET", "api/v1/workspaces")[0] == 403

    # capacity metrics from the kubelet's volume stats (threshold lowered to 1e-9 for the alert)
    status, raw = http("GET", disks + "metrics", headers=_auth(admin))
    text = raw.decode()
    assert status == 200, text
    used = re.search(rf'gpuworkspace_disk_used_bytes\{{[^}}]*claim="{CLAIM}"[^}}]*\}} (\S+)', text)
    assert used and float(used.group(1)) > 0, text
    alert = re.search(rf'gpuworkspace_disk_capacity_alert\{{[^}}]*claim="{CLAIM}"[^}}]*\}} (\S+)', text)
    assert alert is not None and float(alert.group(1)) == (1.0 if threshold < 1e-6 else 0.0), text
    assert http("GET", disks + "metrics", headers=_auth(mine))[0] == 403  # no read:metrics

    # reclaim is the admin's; the owner grows and snapshots their own disk within the same limits
    # (test_vm_disks.py), restores it (test_snapshots.py); bad bodies are 400, limits hold
    status, answer = call(disks, mine, "POST", f"api/v1/disks/{CLAIM}/reclaim", {})
    assert status == 403, answer
    status, answer = call(disks, mine, "POST", f"api/v1/disks/{CLAIM}/resize", {"size": "100Gi"})
    assert status == 400 and "40Gi" in answer["message"], answer
    # the owner may restore their own disk (test_snapshots.py): here only an unknown snapshot
    status, answer = call(disks, mine, "POST", f"api/v1/disks/{CLAIM}/restore", {"snapshot": "x"})
    assert status == 404 and "no snapshot x" in answer["message"], answer
    assert call(disks, admin, "POST", f"api/v1/disks/{CLAIM}/resize", {"size": "12Gi", "x": 1})[0] == 400
    assert call(disks, admin, "POST", f"api/v1/disks/{CLAIM}/resize", {"size": "8Gi"})[0] == 400
    status, body = call(disks, admin, "POST", f"api/v1/disks/{CLAIM}/resize", {"size": "100Gi"})
    assert status == 400 and "40Gi" in body["message"], body
    t1 = time.monotonic()
    status, body = call(disks, admin, "POST", f"api/v1/disks/{CLAIM}/resize", {"size": "12Gi"})
    timings["resize"] = time.monotonic() - t1
    assert status == 200 and body["result"] == "resized", body
    assert get_json(stack, "pvc", CLAIM)["status"]["capacity"]["storage"] == "12Gi"
    status, body = call(disks, admin, "POST", f"api/v1/disks/{CLAIM}/reclaim", {})
    assert status == 409 and "retained" in body["message"], body

    # snapshot, lose the file, restore (refused while running), get it back
    t1 = time.monotonic()
    status, snap = call(disks, admin, "POST", f"api/v1/disks/{CLAIM}/snapshots", {"name": f"{CLAIM}-before"})
    timings["snapshot"] = time.monotonic() - t1
    assert status == 201 and snap["readyToUse"], snap
    url = f"{stack.url}/user/{USER}/{SERVER}/api/contents/keep.txt"
    assert http("DELETE", url, headers=_auth(admin))[0] == 204
    status, body = call(disks, admin, "POST", f"api/v1/disks/{CLAIM}/restore", {"snapshot": snap["name"]})
    assert status == 409 and "stop the workspace first" in body["message"], body
    stack.hub.stop_server(USER, SERVER)
    wait_for(
        lambda: not get_json(stack, "pods", "-l", f"gpuworkspace.dev/user={USER}")["items"], 60, "pod gone"
    )
    t1 = time.monotonic()
    status, body = call(disks, admin, "POST", f"api/v1/disks/{CLAIM}/restore", {"snapshot": snap["name"]})
    timings["restore"] = time.monotonic() - t1
    assert status == 200, body
    safety = body["safetySnapshot"]
    status, snaps = call(disks, mine, "GET", f"api/v1/disks/{CLAIM}/snapshots")
    assert status == 200
    kinds = {s["name"]: s["kind"] for s in snaps["items"]}
    assert kinds == {snap["name"]: "manual", safety: "pre-restore"}, snaps
    pvc = get_json(stack, "pvc", CLAIM)
    assert pvc["spec"]["dataSource"]["name"] == snap["name"]
    assert pvc["metadata"]["labels"]["gpuworkspace.dev/user"] == USER
    assert pvc["spec"]["resources"]["requests"]["storage"] == "12Gi"
    start(stack, USER, SERVER, {"profile": "cpu-small"})
    assert read_file(stack, USER, SERVER, "keep.txt") == "precious " * 100
    timings["total"] = time.monotonic() - t0

    reasons = {
        e["reason"] for e in get_json(stack, "events")["items"] if e["involvedObject"]["name"] == CLAIM
    }
    assert {
        "WorkspaceDiskResized",
        "WorkspaceDiskSnapshotted",
        "WorkspaceDiskRestoring",
        "WorkspaceDiskRestored",
        "WorkspaceDiskOperationRefused",
    } <= reasons, reasons
    print("disk admin timings (s):", {k: round(v, 2) for k, v in timings.items()})
    stack.hub.stop_server(USER, SERVER)
    kubectl(stack, "delete", "volumesnapshot", snap["name"], safety, "--wait=false", check=False)
