"""Scheduled snapshots users can use, and retention by profile, end to end (issue 16 items 2 and 3).

alice's profile (``e2e-snapshots`` in catalog-extra.yaml) asks for a snapshot every 30 s, the newest 3
kept, and 2 days of retention. The disk service's worker takes the snapshots; alice loses a file,
stops, restores her own scheduled snapshot through the API and gets the file back; bob can neither list
nor restore her snapshots (403, nothing written). Then she restores again through the snapshot page in
chromium. Deleting her server retains the disk 2 days (the profile's, not the hub's 30); bob's
``e2e-no-keep`` disk is reclaimed as soon as his server is deleted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from . import test_disk_admin
from .harness import HubStack, http, logged_in_page, wait_for
from .test_disk_admin import PREFIX, call, user_token
from .test_workspace_lifecycle import WRITE_VERBS, get_json, kubectl, read_file, start, write_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
USER, OTHER, SERVER = "alice", "bob", "snap"
CLAIM = f"home-{USER}--{SERVER}"
PROFILE = "e2e-snapshots"
disks = test_disk_admin.disks  # the disk service's fixture (proxied, or started next to the hub)


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("scheduled snapshots are this project's disk service's")


@pytest.fixture
def cleanup(stack: HubStack) -> Iterator[None]:
    yield
    for user in (USER, OTHER):
        stack.hub.api("DELETE", f"/users/{user}/servers/{SERVER}", {"remove": True})


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def snapshots(base: str, token: str) -> list[dict[str, Any]]:
    status, body = call(base, token, "GET", f"api/v1/disks/{CLAIM}/snapshots")
    assert status == 200, body
    return list(body["items"])


def scheduled_after(base: str, token: str, after: float) -> dict[str, Any] | None:
    """The newest ready scheduled snapshot taken after ``after`` (epoch seconds), if any."""
    fresh = [
        s
        for s in snapshots(base, token)
        if s["kind"] == "scheduled" and s["readyToUse"] and epoch(s["creationTime"]) > after
    ]
    return fresh[-1] if fresh else None


def workspace_pods(stack: HubStack, user: str) -> list[dict[str, Any]]:
    """The pods of ``user``'s server SERVER: not their other servers' nor their jobs' (test_jobs.py leaves
    alice a running server and finished job pods in the same stack; those carry her user label too)."""
    selector = f"gpuworkspace.dev/user={user},gpuworkspace.dev/server={SERVER},gpuworkspace.dev/kind!=job"
    return list(get_json(stack, "pods", "-l", selector)["items"])


def pod_gone(stack: HubStack, user: str) -> bool:
    return not workspace_pods(stack, user)


def wait_pod_gone(stack: HubStack, user: str) -> None:
    """Wait for the user's pod to go after a stop; on a timeout say which pod is left and what the hub did."""
    try:
        wait_for(lambda: pod_gone(stack, user), 60, f"{user}'s pod gone")
    except TimeoutError as exc:
        pods = workspace_pods(stack, user)
        left = [
            {
                "name": p["metadata"]["name"],
                "uid": p["metadata"]["uid"],
                "created": p["metadata"]["creationTimestamp"],
                "deleting": p["metadata"].get("deletionTimestamp"),
                "phase": (p.get("status") or {}).get("phase"),
                "containers": (p.get("status") or {}).get("containerStatuses"),
            }
            for p in pods
        ]
        names = {p["name"] for p in left}
        hub_log = stack.hub.proc.log_path.read_text(errors="replace").splitlines()
        mentions = [line for line in hub_log if any(n in line for n in names)][-40:]
        events = [
            (e.get("lastTimestamp"), e["reason"], e["message"])
            for e in get_json(stack, "events")["items"]
            if e["involvedObject"]["name"] in names
        ]
        raise AssertionError(
            f"{exc}: pods left {left}; their events {events}; hub log about them:\n" + "\n".join(mentions)
        ) from exc


def claim_events(stack: HubStack, claim: str) -> list[dict[str, Any]]:
    return [e for e in get_json(stack, "events")["items"] if e["involvedObject"]["name"] == claim]


def test_alice_restores_her_scheduled_snapshot_and_bob_cannot_touch_it(
    stack: HubStack, disks: tuple[str, float], browser: Any, cleanup: None
) -> None:
    base, _ = disks
    alice, bob = user_token(stack, USER), user_token(stack, OTHER)
    t0 = time.monotonic()
    start(stack, USER, SERVER, {"profile": PROFILE})
    annotations = get_json(stack, "pvc", CLAIM)["metadata"]["annotations"]
    assert annotations["gpuworkspace.dev/snapshot-every"] == "30", annotations
    assert annotations["gpuworkspace.dev/snapshot-keep"] == "3", annotations
    assert annotations["gpuworkspace.dev/retention-days"] == "2", annotations
    assert annotations["gpuworkspace.dev/retention-source"] == "profile", annotations

    write_file(stack, USER, SERVER, "notes.txt", "alice's notes")
    written = time.time()
    snap = wait_for(
        lambda: scheduled_after(base, alice, written), 120, "a scheduled snapshot after the write"
    )
    assert snap["by"] == "service:gpuworkspace-disks", snap
    url = f"{stack.url}/user/{USER}/{SERVER}/api/contents/notes.txt"
    assert http("DELETE", url, headers={"Authorization": f"token {stack.admin_token}"})[0] == 204

    # bob: no listing, no restore (403), and nothing written to alice's disk or her snapshots
    before = get_json(stack, "pvc", CLAIM)["metadata"]
    stack.requests_log(clear=True)
    assert call(base, bob, "GET", f"api/v1/disks/{CLAIM}/snapshots")[0] == 403
    status, body = call(base, bob, "POST", f"api/v1/disks/{CLAIM}/restore", {"snapshot": snap["name"]})
    assert status == 403 and "bob" in body["message"], body
    time.sleep(1)
    writes = [
        r
        for r in stack.requests_log()
        if r["verb"] in WRITE_VERBS
        and (
            (r["resource"] == "persistentvolumeclaims" and r.get("name") in (CLAIM, None, ""))
            or "pre-restore" in (r.get("name") or "")
        )
    ]
    assert writes == [], writes
    after = get_json(stack, "pvc", CLAIM)["metadata"]
    assert (after["uid"], after["resourceVersion"]) == (before["uid"], before["resourceVersion"])
    assert not [s for s in snapshots(base, alice) if s["kind"] == "pre-restore" or s["by"] == OTHER]

    # alice: refused while running, restored once stopped (a safety snapshot first), file back
    status, body = call(base, alice, "POST", f"api/v1/disks/{CLAIM}/restore", {"snapshot": snap["name"]})
    assert status == 409 and "stop the workspace first" in body["message"], body
    stack.hub.stop_server(USER, SERVER)
    wait_pod_gone(stack, USER)
    status, body = call(base, alice, "POST", f"api/v1/disks/{CLAIM}/restore", {"snapshot": snap["name"]})
    assert status == 200, body
    assert body["restoredFrom"] == snap["name"] and "pre-restore" in body["safetySnapshot"], body
    restored = get_json(stack, "pvc", CLAIM)["metadata"]["annotations"]
    assert restored["gpuworkspace.dev/restored-by"] == USER, restored
    start(stack, USER, SERVER, {"profile": PROFILE})
    assert read_file(stack, USER, SERVER, "notes.txt") == "alice's notes"
    print(f"scheduled snapshot -> restore -> file back: {time.monotonic() - t0:.1f}s")

    # the page: alice (OAuth login in chromium) sees her snapshots and restores one with its form
    write_file(stack, USER, SERVER, "notes.txt", "overwritten")
    stack.hub.stop_server(USER, SERVER)
    wait_pod_gone(stack, USER)
    message = restore_on_page(stack, browser, snap["name"])
    assert "Disk restored from snapshot" in message, message
    restored = get_json(stack, "pvc", CLAIM)["metadata"]["annotations"]
    assert restored["gpuworkspace.dev/restored-from"] == snap["name"], restored
    start(stack, USER, SERVER, {"profile": PROFILE})
    assert read_file(stack, USER, SERVER, "notes.txt") == "alice's notes"

    # beyond keep-count, the worker deletes the oldest scheduled snapshots (audited); never the others
    def pruned() -> bool:
        return any(e["reason"] == "WorkspaceDiskSnapshotPruned" for e in claim_events(stack, CLAIM))

    try:
        wait_for(pruned, 150, "a scheduled snapshot pruned beyond keep 3")
    except TimeoutError as exc:
        listed = [(s["name"], s["kind"], s["readyToUse"], s["message"]) for s in snapshots(base, alice)]
        raise AssertionError(f"{exc}; snapshots: {listed}") from None
    kinds = [s["kind"] for s in snapshots(base, alice)]
    assert kinds.count("pre-restore") == 2, kinds  # one per restore, never pruned
    assert kinds.count("scheduled") <= 4, kinds  # 3 kept (+1 being taken)
    reasons = {e["reason"] for e in claim_events(stack, CLAIM)}
    assert {"WorkspaceDiskSnapshotted", "WorkspaceDiskRestored"} <= reasons, reasons

    # retention by profile: deleting the server keeps the disk 2 days, not the hub's 30
    stack.hub.stop_server(USER, SERVER)
    deleted = time.time()
    assert stack.hub.api("DELETE", f"/users/{USER}/servers/{SERVER}", {"remove": True})[0] in (202, 204)
    until = wait_for(lambda: retained_until(stack, CLAIM), 30, "alice's disk retained")
    assert 2 * 86400 - 60 < until - deleted < 2 * 86400 + 60, until - deleted


def retained_until(stack: HubStack, claim: str) -> float | None:
    meta = get_json(stack, "pvc", claim)["metadata"]
    if meta["labels"].get("gpuworkspace.dev/disk-state") != "retained":
        return None
    return epoch(meta["annotations"]["gpuworkspace.dev/retain-until"])


def restore_on_page(stack: HubStack, browser: Any, snapshot: str) -> str:
    """Log alice in, follow the home page's link to the disk service's snapshot page, press Restore on
    ``snapshot``; the page's answer."""
    with logged_in_page(
        browser, stack, USER, viewport={"width": 1280, "height": 900}, timeout_ms=60_000
    ) as page:
        page.goto(f"{stack.url}/hub/home")
        page.locator("#gpuws-snapshots-nav").click()  # the home page's link to the page
        page.wait_for_url(f"{stack.url}{PREFIX}snapshots*")
        row = page.locator(f'section[data-claim="{CLAIM}"] tr.snapshot[data-name="{snapshot}"]')
        row.wait_for()
        assert (
            page.locator(f'section[data-claim="{CLAIM}"] tr.snapshot[data-kind="pre-restore"]').count() == 1
        )
        row.get_by_role("button", name="Restore").click()
        # the form's POST answers once the safety snapshot is ready and the disk restored: on a loaded
        # machine over a minute (the service itself waits up to 300 s for each)
        page.locator("#result").wait_for(timeout=240_000)
        return str(page.locator("#result").inner_text())


def test_a_disk_not_kept_is_reclaimed_when_its_server_is_deleted(
    stack: HubStack, disks: tuple[str, float], cleanup: None
) -> None:
    base, _ = disks
    claim = f"home-{OTHER}--{SERVER}"
    start(stack, OTHER, SERVER, {"profile": "e2e-no-keep"})
    annotations = get_json(stack, "pvc", claim)["metadata"]["annotations"]
    assert annotations["gpuworkspace.dev/keep-on-delete"] == "false", annotations
    stack.hub.stop_server(OTHER, SERVER)

    # alice cannot list or restore bob's disk either: 403, and the claim is untouched
    alice, before = user_token(stack, USER), get_json(stack, "pvc", claim)["metadata"]
    assert call(base, alice, "GET", f"api/v1/disks/{claim}/snapshots")[0] == 403
    status, body = call(base, alice, "POST", f"api/v1/disks/{claim}/restore", {"snapshot": f"{claim}-x"})
    assert status == 403 and "alice" in body["message"], body
    after = get_json(stack, "pvc", claim)["metadata"]
    assert (after["uid"], after["resourceVersion"]) == (before["uid"], before["resourceVersion"])
    assert stack.hub.api("DELETE", f"/users/{OTHER}/servers/{SERVER}", {"remove": True})[0] in (202, 204)
    gone = lambda: kubectl(stack, "get", "pvc", claim, check=False).returncode != 0  # noqa: E731
    wait_for(gone, 60, "the reclaimer to delete the disk that is not kept")
