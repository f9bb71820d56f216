"""Limits through the real hub: past a limit the user's own REST call gets a 4xx naming the limit, and
the devcluster's request log shows no write (no claim, no DataVolume, no Event, no pod delete).

The stack (conftest.py) allows 4 named servers and 2 disks per user, 6 disks in all. Each test uses
its own users; the total-limit test first tops the namespace up to exactly 6 disks.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.e2e.harness import HubStack, logged_in_page, wait_for
from tests.e2e.test_attribution import user_token
from tests.e2e.test_hostile_inputs import as_user, ensure_user, writes_during
from tests.e2e.test_spawn_availability import ARTIFACTS
from tests.e2e.test_workspace_lifecycle import get_json, start

from .conftest import MAX_DISKS_PER_USER, MAX_DISKS_TOTAL, NAMED_SERVER_LIMIT

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]
CPU = {"profile": "cpu-small"}


def disks(stack: HubStack, user: str | None = None) -> list[dict[str, Any]]:
    """Workspace disks in the namespace (home claims and VM root DataVolumes), optionally one user's."""
    # a root disk once: its DataVolume (CDI's claim for it carries the same labels, copied at creation)
    items = [*get_json(stack, "pvc", "-l", "gpuworkspace.dev/disk=home")["items"]]
    items += get_json(stack, "datavolumes.cdi.kubevirt.io", "-l", "gpuworkspace.dev/disk=root")["items"]
    if user is not None:
        items = [d for d in items if d["metadata"]["annotations"].get("gpuworkspace.dev/username") == user]
    return items


def message(answer: Any) -> str:
    return str(answer.get("message", "")) if isinstance(answer, dict) else str(answer)


def created(stack: HubStack, user: str, server: str) -> None:
    """Start, wait until ready, stop: the server keeps its disk."""
    start(stack, user, server, CPU)
    stack.hub.stop_server(user, server)


def test_named_servers_past_the_limit_get_jupyterhubs_400(stack: HubStack) -> None:
    user = "nina"
    ensure_user(stack, user)
    token = user_token(stack, user)
    names = [f"n{i}" for i in range(1, NAMED_SERVER_LIMIT + 1)]
    for name in names[:2]:
        created(stack, user, name)
    for name in names[2:]:  # a refused start still creates the named server (stopped, no disk)
        assert as_user(stack, token, "POST", f"/users/{user}/servers/{name}", {"profile": "nope"})[0] == 400
    status, model = stack.hub.api("GET", f"/users/{user}?include_stopped_servers=1")
    assert status == 200 and sorted(s for s in model["servers"] if s) == names, model  # "" is the default

    with writes_during(stack, user) as writes:
        got, answer = as_user(stack, token, "POST", f"/users/{user}/servers/extra", CPU)
    assert got == 400, answer
    assert f"User {user} already has the maximum of {NAMED_SERVER_LIMIT} named servers" in message(answer)
    assert writes == []
    # an existing name starts (the limit is on names, not on starts), and removing one frees a place
    start(stack, user, "n1", CPU)
    stack.hub.stop_server(user, "n1")
    assert as_user(stack, token, "DELETE", f"/users/{user}/servers/n4", {"remove": True})[0] in (202, 204)
    got, answer = as_user(stack, token, "POST", f"/users/{user}/servers/extra", {"profile": "nope"})
    assert got == 400 and "There is no profile 'nope'" in message(answer), answer


def test_past_the_disk_limit_a_start_is_refused_with_403_and_nothing_written(
    stack: HubStack, browser: Any
) -> None:
    user = "alice"  # one oidc-provider-mock can log in: the spawn form is checked in chromium
    ensure_user(stack, user)
    token = user_token(stack, user)
    created(stack, user, "a")
    created(stack, user, "b")
    assert stack.hub.api("DELETE", f"/users/{user}/servers/b", {"remove": True})[0] in (202, 204)
    retained = lambda: [  # noqa: E731
        d for d in disks(stack, user) if d["metadata"]["labels"]["gpuworkspace.dev/disk-state"] == "retained"
    ]
    wait_for(retained, 30, "b's disk to be retained")
    assert len(disks(stack, user)) == MAX_DISKS_PER_USER

    # at the limit, a server whose disk exists still starts: its own (a), and a deleted one's name (b)
    # re-adopts the retained disk
    start(stack, user, "b", CPU)
    stack.hub.stop_server(user, "b")
    assert len(disks(stack, user)) == MAX_DISKS_PER_USER and not retained()

    for server, options, kind in (("c", CPU, "home claim"), ("vm", {"profile": "vm-workstation"}, "VM")):
        with writes_during(stack, user) as writes:
            got, answer = as_user(stack, token, "POST", f"/users/{user}/servers/{server}", options)
        assert got == 403, (kind, got, answer)
        text = message(answer)
        assert text.startswith(
            f"You already have {MAX_DISKS_PER_USER} workspace disks, the most one user may keep "
            f"({MAX_DISKS_PER_USER}), so no disk was created"
        ), text
        assert "server 'a' (in use)" in text and "server 'b' (in use)" in text, text
        assert "administrator" in text
        assert writes == [], (kind, json.dumps(writes)[:2000])
    assert len(disks(stack, user)) == MAX_DISKS_PER_USER

    # the spawn form says so before the click: a new server's every card; an existing server's cards
    # of the runtime whose disk it has (a: a home claim) start, those that would need a new disk do not
    cards = spawn_form_cards(stack, browser, user, "c", shot="spawn-disk-limit.png")
    assert all("Cannot start now:" in card for card in cards.values()), cards
    assert (
        "this server has no disk yet and you already have 2 disks, the most one user may keep"
        in cards["cpu-small"]
    )
    cards = spawn_form_cards(stack, browser, user, "a")
    assert "Cannot start now:" not in cards["cpu-small"] and "Cannot start now:" in cards["vm-workstation"]


def spawn_form_cards(stack: HubStack, browser: Any, user: str, server: str, shot: str = "") -> dict[str, str]:
    """The hub's spawn page for ``user``'s ``server`` as that user sees it in chromium (the hub serves its
    pages to a login cookie, not to an API token): each profile's card (HTML)."""
    with logged_in_page(browser, stack, user, viewport={"width": 1280, "height": 1000}) as page:
        page.goto(f"{stack.url}/hub/spawn/{user}/{server}")
        page.locator("#profile-item-cpu-small").wait_for(state="attached")
        html = page.content()
        if shot:  # docs/how-to/limits.md: the selected card's refusal above Start, from this run
            page.locator("#profile-item-cpu-small").check()
            page.locator("#gpuws-refusal-warning").wait_for(state="visible")
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / shot))
    starts = [(m.start(), m.group(1)) for m in re.finditer(r'<label for="profile-item-([a-z0-9-]+)"', html)]
    assert starts, html[:3000]
    ends = [s for s, _ in starts[1:]] + [len(html)]
    return {slug: html[start:end] for (start, slug), end in zip(starts, ends, strict=True)}


def test_past_the_total_disk_limit_a_start_is_refused_with_403_and_nothing_written(stack: HubStack) -> None:
    fillers = 0
    while len(disks(stack)) < MAX_DISKS_TOTAL:  # one disk per filler user (their default server)
        created(stack, f"filler{fillers}", "")
        fillers += 1
    assert len(disks(stack)) == MAX_DISKS_TOTAL
    user = "tom"
    ensure_user(stack, user)
    token = user_token(stack, user)
    with writes_during(stack, user) as writes:
        got, answer = as_user(stack, token, "POST", f"/users/{user}/servers/t1", CPU)
    assert got == 403, answer
    assert message(answer).startswith(
        f"This hub already holds {MAX_DISKS_TOTAL} workspace disks, the most it allows ({MAX_DISKS_TOTAL})"
    ), answer
    assert "You have 0 disks." in message(answer)
    assert writes == [], json.dumps(writes)[:2000]
    assert len(disks(stack)) == MAX_DISKS_TOTAL
    assert not [e for e in get_json(stack, "events")["items"] if "tom" in e["involvedObject"]["name"]]
