"""Identity that cannot collide (issue 14 item 6), through real JupyterHub on the devcluster.

- A user named like another user's hashed label value (``alice-example.com-<hash>``) shares her labels;
  starting their workspace must not delete hers (the one-pod-per-workspace clean-up decides ownership on
  the exact-name annotations).
- A user deleted and created again under the same name is a new owner: a new disk, the former owner's
  stays retained, and only an administrator's transfer hands it over.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.manifests.names import label_value

from .harness import HubStack, http, wait_for
from .test_disk_admin import call, disks  # noqa: F401  # disks: the disk service fixture
from .test_workspace_lifecycle import contents, get_json, read_file, start, write_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
PROFILE = {"profile": "cpu-small"}
ALICE = "alice@example.com"
TWIN = label_value(ALICE)  # alice-example.com-<8 hex>: a valid user name, and alice's label value
BOB, WS = "bob-identity", "ws"  # named servers: the contents URLs need a server segment
CLAIM = f"home-{BOB}--{WS}"
ANN_USER, ANN_OWNER = "gpuworkspace.dev/username", "gpuworkspace.dev/owner-created"


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("exact ownership and owner-bound disks are this project's spawner's")


def _pods_of(stack: HubStack, user: str) -> list[dict[str, Any]]:
    pods = get_json(stack, "pods", "-l", f"gpuworkspace.dev/user={label_value(user)}")["items"]
    return [p for p in pods if (p["metadata"].get("annotations") or {}).get(ANN_USER) == user]


def _claim(stack: HubStack, name: str) -> dict[str, Any] | None:
    claims = get_json(stack, "pvc")["items"]
    return next((c for c in claims if c["metadata"]["name"] == name), None)


def test_a_colliding_label_does_not_delete_another_users_pod(stack: HubStack) -> None:
    assert TWIN != ALICE and TWIN.startswith("alice-example.com-")
    start(stack, ALICE, WS, PROFILE)
    try:
        (alice_pod,) = _pods_of(stack, ALICE)
        start(stack, TWIN, WS, PROFILE)
        try:
            (twin_pod,) = _pods_of(stack, TWIN)
            assert alice_pod["metadata"]["labels"]["gpuworkspace.dev/user"] == TWIN  # the labels collide
            assert twin_pod["metadata"]["labels"]["gpuworkspace.dev/user"] == TWIN
            # ... and alice's pod is still the same running pod, her server still answers
            (still,) = _pods_of(stack, ALICE)
            assert still["metadata"]["uid"] == alice_pod["metadata"]["uid"]
            assert "deletionTimestamp" not in still["metadata"]
            assert stack.hub.server(ALICE, WS)["ready"]  # type: ignore[index]
            assert contents(stack, ALICE, WS, "")[0] == 200
            removed = [
                e
                for e in get_json(stack, "events")["items"]
                if e["reason"] == "WorkspaceDuplicateRemoved"
                and e["involvedObject"]["name"] == alice_pod["metadata"]["name"]
            ]
            assert removed == []
        finally:
            stack.hub.stop_server(TWIN, WS)
    finally:
        stack.hub.stop_server(ALICE, WS)


def test_a_recreated_user_gets_a_new_disk_and_a_transfer_hands_the_old_one_over(
    stack: HubStack,
    disks: tuple[str, float],  # noqa: F811
) -> None:
    base, _ = disks
    start(stack, BOB, WS, PROFILE)
    write_file(stack, BOB, WS, "mine.txt", "the first bob's work")
    stack.hub.stop_server(BOB, WS)
    first = _claim(stack, CLAIM)
    assert first is not None and first["metadata"]["annotations"].get(ANN_OWNER), first
    assert stack.hub.api("DELETE", f"/users/{BOB}")[0] == 204

    def retained() -> bool:
        claim = _claim(stack, CLAIM)
        return bool(claim) and claim["metadata"]["labels"]["gpuworkspace.dev/disk-state"] == "retained"  # type: ignore[index]

    wait_for(retained, 30, "the deleted user's disk retained")

    # bob created again: a new owner, a new disk; the first bob's disk stays retained and untouched
    assert stack.hub.api("POST", f"/users/{BOB}")[0] == 201
    start(stack, BOB, WS, PROFILE)
    url = f"{stack.url}/user/{BOB}/{WS}/api/contents/mine.txt"  # a plain-text 404: not contents()
    status, raw = http("GET", url, headers={"Authorization": f"token {stack.admin_token}"})
    assert status == 404 and b"does not exist" in raw, raw
    claims = [c for c in get_json(stack, "pvc")["items"] if c["metadata"]["name"].startswith(CLAIM)]
    second = next(c for c in claims if c["metadata"]["name"] != CLAIM)
    assert second["metadata"]["name"].startswith(f"{CLAIM}.owner-"), claims
    assert second["metadata"]["annotations"][ANN_OWNER] != first["metadata"]["annotations"][ANN_OWNER]
    old = _claim(stack, CLAIM)
    assert old is not None and old["metadata"]["labels"]["gpuworkspace.dev/disk-state"] == "retained"
    assert old["metadata"]["annotations"][ANN_OWNER] == first["metadata"]["annotations"][ANN_OWNER]
    write_file(stack, BOB, WS, "second.txt", "the second bob's work")

    # the transfer: refused without an admin token and while the target server runs; then done
    body = {"user": BOB, "server": WS}
    assert call(base, "not-a-token", "POST", f"api/v1/disks/{CLAIM}/transfer", body)[0] == 403
    status, answer = call(base, stack.admin_token, "POST", f"api/v1/disks/{CLAIM}/transfer", body)
    assert status == 409 and "stop that server" in answer["message"], answer
    stack.hub.stop_server(BOB, WS)
    status, answer = call(base, stack.admin_token, "POST", f"api/v1/disks/{CLAIM}/transfer", body)
    assert status == 200, answer
    assert answer["setAside"] == [second["metadata"]["name"]], answer
    moved = _claim(stack, CLAIM)
    assert moved is not None
    assert moved["metadata"]["annotations"][ANN_OWNER] == second["metadata"]["annotations"][ANN_OWNER]
    assert moved["metadata"]["labels"]["gpuworkspace.dev/disk-state"] == "active"
    aside = _claim(stack, second["metadata"]["name"])
    assert aside is not None and aside["metadata"]["labels"]["gpuworkspace.dev/disk-state"] == "retained"
    status, answer = call(base, stack.admin_token, "POST", f"api/v1/disks/{CLAIM}/transfer", body)
    assert status == 409 and "already belongs" in answer["message"], answer

    start(stack, BOB, WS, PROFILE)
    assert read_file(stack, BOB, WS, "mine.txt") == "the first bob's work"
    reasons = {
        e["reason"] for e in get_json(stack, "events")["items"] if e["involvedObject"]["name"] == CLAIM
    }
    assert "WorkspaceDiskTransferred" in reasons, reasons
    stack.hub.stop_server(BOB, WS)
