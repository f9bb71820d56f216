"""Issue 18, the spawn page end to end (Chromium): each GPU profile's card says what is free now, from
the attribution service's view, refreshed while the page is open; a profile that cannot start says so
before Start.

GPUs are held by pods of the devcluster's whole-GPU pool (``gpuworkspace.dev/pool=gpu``: two nodes,
six whole H100 each; card 6 of each is time-sliced, card 7 MIG) that carry our user label, as
workspaces and jobs do: busybox sleeping with ``nvidia.com/gpu: 1``, placed by the devcluster's
scheduler. bob (group gpu-users) opens the spawn page once; it is never reloaded.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import SERVICES_ENV
from .harness import REPO, HubStack, logged_in_page
from .test_attribution import attr, kubectl, until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]
NS = "gpu-workspaces"
USER = "bob"  # the mock OIDC provider puts him in gpu-users: he sees gpu-exclusive
QUERY = "availability?resource=nvidia.com/gpu&count=1&selector=gpuworkspace.dev/pool=gpu"
CARD = "label[for=profile-item-gpu-exclusive] .gpuws-availability"
ARTIFACTS = Path(os.environ.get("GPUWS_ARTIFACTS", REPO / ".artifacts"))
HOLDER = "avail-hold-"
CYCLE_S = float(SERVICES_ENV["GPUWS_ATTRIBUTION_INTERVAL"])  # the attribution service's cycle here


@pytest.fixture(autouse=True)
def _ours(stack: HubStack) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("the spawn page's availability comes with this project's spawner configuration")


def holder(index: int) -> dict[str, Any]:
    name = f"{HOLDER}{index}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"gpuworkspace.dev/user": "gpu-holder", "app": "avail-hold"},
            "annotations": {"gpuworkspace.dev/username": "gpu-holder", "gpuworkspace.dev/servername": name},
        },
        "spec": {
            "nodeSelector": {"gpuworkspace.dev/pool": "gpu"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "hold",
                    "image": "busybox",
                    "command": ["sleep", "3600"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def counts(stack: HubStack) -> dict[str, Any]:
    status, body = attr(stack, QUERY)
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def hold(stack: HubStack, indexes: range) -> None:
    for i in indexes:
        kubectl(stack, "apply", "-f", "-", stdin=json.dumps(holder(i)))


def until_free(stack: HubStack, free: int) -> dict[str, Any]:
    return until(  # type: ignore[no-any-return]
        lambda: (body := counts(stack))["free"] == free and body, f"{free} whole GPUs free", timeout_s=90
    )


def hold_until_free(stack: HubStack, free: int, held: list[int]) -> dict[str, Any]:
    """Hold GPUs with new pods until exactly ``free`` stay free over two collection cycles. An earlier
    test's workspace may still be leaving (its pod terminating holds its GPU until it is gone), so the
    number to hold is what the service counts now, not what it counted at first."""

    def settled() -> dict[str, Any] | None:
        body = counts(stack)
        if body["free"] > free:
            more = range(len(held), len(held) + body["free"] - free)
            hold(stack, more)
            held.extend(more)
            time.sleep(2 * CYCLE_S)  # until the service has counted them: else they would be held twice
            return None
        if body["free"] < free:
            return None  # something else holds one for now: wait for it to go
        time.sleep(2 * CYCLE_S)
        return body if counts(stack)["free"] == free else None

    return until(settled, f"{free} whole GPUs free, steadily", timeout_s=120)  # type: ignore[no-any-return]


def card_text(page: Any) -> str:
    line = page.locator(CARD)
    return str(line.inner_text()) if line.is_visible() else ""


@pytest.fixture
def holders(stack: HubStack) -> Iterator[None]:
    try:
        yield
    finally:
        kubectl(stack, "-n", NS, "delete", "pods", "-l", "app=avail-hold", "--wait=false")


def test_whole_gpu_card_counts_down_says_full_before_start_and_counts_up_again(
    stack: HubStack, browser: Any, holders: None
) -> None:
    before = until(lambda: counts(stack), "the attribution service's first cycle")
    total = before["total"]
    assert total >= 8 and before["text"] == f"{before['free']} of {total} H100 free", before
    # all but two of the pool's whole GPUs held (the "six of eight": here the pool has more)
    held: list[int] = []
    body = hold_until_free(stack, 2, held)
    assert "gpu-holder" not in json.dumps(body), body  # counts only: never who holds them

    with logged_in_page(browser, stack, USER, viewport={"width": 1280, "height": 1000}) as page:
        page.goto(f"{stack.url}/hub/spawn/{USER}/avail")
        until(lambda: card_text(page) == f"Free now: 2 of {total} H100 free", "the card's count", 60)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        # the docs' picture: the first screen, the demo catalog's five profiles (docs/how-to/gpu-availability.md)
        page.screenshot(path=str(ARTIFACTS / "spawn-availability.png"))
        # the demo catalog's five profiles (listed first) fit one screen: they no longer fill two
        cards = page.locator("#kubespawner-profiles-list label.profile")
        first, fifth = cards.nth(0).bounding_box(), cards.nth(4).bounding_box()
        assert first and fifth and fifth["y"] + fifth["height"] - first["y"] <= 900, (first, fifth)

        # the last two taken: the page (not reloaded) says so, and why, before Start
        hold_until_free(stack, 0, held)
        full = until(lambda: "0 of" in (t := card_text(page)) and t, "the card to say it is full", 60)
        assert full.startswith(f"Free now: 0 of {total} H100 free. All of them are taken right now"), full
        page.locator("#profile-item-gpu-exclusive").check()
        warning = page.locator("#gpuws-start-warning")
        assert warning.is_visible(), page.content()[:3000]
        assert "This profile cannot start now" in warning.inner_text()
        page.screenshot(path=str(ARTIFACTS / "spawn-availability-full.png"))

        # one released: the count changes within a refresh (10 s page, 3 s collection cycle here)
        kubectl(stack, "-n", NS, "delete", "pod", f"{HOLDER}0", "--wait=false")
        until(lambda: card_text(page) == f"Free now: 1 of {total} H100 free", "the released GPU", 30)
        assert not warning.is_visible()
