"""Issue 16 item 1 end to end: a user sees their own disks' use on the hub home page (Chromium), the
near-full warning once they fill a disk past the (lowered) threshold, the same figures from the disk
API, and nobody else's disks.

The stack runs the disk service as the hub config registers it, with GPUWS_DISK_WARN_THRESHOLD=0.005
(conftest.py): on the 1Gi home of the ``e2e-disk-view`` profile, 8 MB crosses it. Used bytes, free
bytes and inodes come from the devcluster kubelets' volume stats (the volume directory's real files).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from .harness import REPO, HubStack, logged_in_page, wait_for
from .test_disk_admin import call, user_token
from .test_workspace_lifecycle import contents, get_json, start, write_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
PREFIX = "/services/gpuworkspace-disks/"
USER, OTHER, SERVER = "alice", "bob", "dv"
CLAIM = f"home-{USER}--{SERVER}"
THRESHOLD = 0.005
ARTIFACTS = Path(os.environ.get("GPUWS_ARTIFACTS", REPO / ".artifacts"))
ROW = f'#gpuws-disk-table tr.gpuws-disk[data-claim="{CLAIM}"]'
WARNING = f'#gpuws-disk-warnings .gpuws-disk-near-full[data-claim="{CLAIM}"]'


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("the disk view shows this project's workspace disks")


def _page_row(page: Any) -> dict[str, str]:
    row = page.locator(ROW)
    cells = {
        name: row.locator(f"td.gpuws-disk-{name}").inner_text()
        for name in ("workspace", "runtime", "size", "used", "free", "inodes", "state", "snapshot")
    }
    return cells | {"usedBytes": row.get_attribute("data-used-bytes") or ""}


def _home_row(page: Any, stack: HubStack, *, measured: bool) -> dict[str, str]:
    """Reload the home page until the disk's row is there (with figures, when ``measured``)."""

    def loaded() -> dict[str, str] | None:
        page.goto(f"{stack.url}/hub/home")
        page.wait_for_load_state("networkidle")  # the table's fetch: the disk service logs the browser in
        page.locator("#gpuws-disk-status").wait_for()
        if page.locator(ROW).count() != 1:
            return None
        row = _page_row(page)
        return row if bool(row["usedBytes"]) is measured else None

    return wait_for(loaded, 60, f"{CLAIM} on {USER}'s home page", interval_s=1)  # type: ignore[no-any-return]


def _api_row(base: str, token: str) -> dict[str, Any]:
    status, answer = call(base, token, "GET", f"api/v1/users/{USER}/disks")
    assert status == 200, answer
    assert answer["user"] == USER and answer["threshold"] == THRESHOLD, answer
    [row] = [r for r in answer["items"] if r["claim"] == CLAIM]
    return row


def _same_figures(page: Any, stack: HubStack, base: str, token: str) -> tuple[dict[str, str], dict[str, Any]]:
    """The page's row and the API's for the same scrape of the kubelets (both read the service's last
    one, refreshed at most every 5 s: retried when a refresh fell between them)."""
    for _ in range(5):
        shown = _home_row(page, stack, measured=True)
        row = _api_row(base, token)
        if shown["usedBytes"] == str(row["usedBytes"]):
            return shown, row
        time.sleep(1)
    raise AssertionError(f"the page showed {shown} while the API answered {row}")


def test_alice_sees_her_disk_and_the_near_full_warning_and_bob_does_not(
    stack: HubStack, browser: Any
) -> None:
    base = stack.url + PREFIX
    mine, nosy = user_token(stack, USER), user_token(stack, OTHER)
    start(stack, USER, SERVER, {"profile": "e2e-disk-view"})
    write_file(stack, USER, SERVER, "notes.md", "# my notes\n")
    # a snapshot of her disk (an admin takes it here): the page names it as the last snapshot
    status, snap = call(base, stack.admin_token, "POST", f"api/v1/disks/{CLAIM}/snapshots", {})
    assert status in (201, 202), snap

    with logged_in_page(browser, stack, USER, viewport={"width": 1280, "height": 1000}) as page:
        shown, row = _same_figures(page, stack, base, mine)
        # what the page shows: the workspace, its runtime and size, use, free space, inodes and state
        assert (shown["workspace"], shown["runtime"], shown["size"]) == (SERVER, "container (home)", "1Gi")
        assert shown["state"].startswith("active"), shown
        assert row["usedBytes"] > 0 and row["freeBytes"] == row["capacityBytes"] - row["usedBytes"], row
        assert row["inodesUsed"] >= 2 and row["inodes"] == row["capacityBytes"] // 16384, row
        assert shown["inodes"] == f"{row['inodesUsed']} of {row['inodes']}"
        assert row["runtime"] == "container" and row["state"] == "active" and row["until"] is None
        assert row["nearFull"] is False and page.locator(WARNING).count() == 0, (row, shown)
        snapshot = wait_for(
            lambda: _api_row(base, mine)["lastSnapshot"], 60, "the snapshot as the last one", interval_s=1
        )
        assert snapshot["name"] == snap["name"], snapshot
        before = row["usedBytes"]

        # alice fills her disk past the warning threshold through her own server
        write_file(stack, USER, SERVER, "big.txt", "x" * 8_000_000)
        wait_for(lambda: _api_row(base, mine)["nearFull"], 60, "the near-full verdict", interval_s=1)
        shown, row = _same_figures(page, stack, base, mine)
        assert row["usedBytes"] >= before + 8_000_000 and row["nearFull"], row
        warning = page.locator(WARNING)
        assert warning.count() == 1, shown
        text = warning.inner_text()
        assert "nearly full" in text and "of its space is used" in text and "warning at 0.5%" in text, text
        assert shown["snapshot"].startswith(snapshot["name"]), shown
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "disk-view.png"
        page.locator("#gpuws-workspaces").scroll_into_view_if_needed()
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000

    # bob sees none of alice's figures: not through the new view, nor the workspace API
    status, body = call(base, nosy, "GET", f"api/v1/users/{USER}/disks")
    assert status == 403 and f"{OTHER} may not see the disks of {USER}" in body["message"], body
    assert call(base, nosy, "GET", f"api/v1/workspaces/{USER}/{SERVER}")[0] == 403
    status, own = call(base, nosy, "GET", f"api/v1/users/{OTHER}/disks")
    assert status == 200 and all(r["claim"] != CLAIM for r in own["items"]), own
    with logged_in_page(browser, stack, OTHER) as page:
        page.goto(f"{stack.url}/hub/home")
        page.wait_for_load_state("networkidle")
        page.locator("#gpuws-disk-status").wait_for()
        assert page.locator(ROW).count() == 0 and page.locator(WARNING).count() == 0
        assert page.locator("#gpuws-disks").get_attribute("data-url").endswith(f"/users/{OTHER}/disks")
    stack.hub.stop_server(USER, SERVER)


def test_the_workspace_carries_its_conventions(stack: HubStack) -> None:
    """Item 6: /workspace on the home disk, the checkpoint target and the quota in the environment,
    the guide as a read-only README in the home and a login-shell banner, from the profile."""
    server = "conv"
    start(stack, USER, server, {"profile": "e2e-disk-view"})
    try:
        pod = get_json(stack, "pod", f"jupyter-{USER}--{server}")
        [notebook] = [c for c in pod["spec"]["containers"] if c["name"] == "notebook"]
        env = {e["name"]: e.get("value") for e in notebook.get("env") or []}
        assert env["GPUWS_WORKSPACE"] == "/workspace" and env["GPUWS_HOME_QUOTA"] == "1Gi", env
        assert env["GPUWS_CHECKPOINTS_URL"] == "s3://e2e-checkpoints/team-ml/", env
        assert env["GPUWS_README"] == "/home/jovyan/README-WORKSPACE.md", env
        mounts = {m["mountPath"]: m for m in notebook["volumeMounts"]}
        assert mounts["/workspace"] == {"name": "home", "mountPath": "/workspace", "subPath": "workspace"}
        assert mounts["/home/jovyan/README-WORKSPACE.md"]["readOnly"] is True
        readme = pod["metadata"]["annotations"]["gpuworkspace.dev/readme"]
        assert "your home disk, 1Gi" in readme and "s3://e2e-checkpoints/team-ml/" in readme, readme
        # the kubelet made the /workspace directory on the home disk: the user sees it in the home
        status, listing = contents(stack, USER, server, "workspace")
        assert status == 200 and listing["type"] == "directory", listing
    finally:
        stack.hub.stop_server(USER, server)
