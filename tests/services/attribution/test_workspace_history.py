"""A workspace's last hour (``api/v1/workspaces/<user>/<server>/history``): the access of its detail.

The panel in alice's JupyterLab asks for it with her server's token; bob's token gets 403 for her series.
"""

from __future__ import annotations

import pytest

from .test_app import NOW, base, get_json

__all__ = ["base"]  # the service with two collection cycles (test_app's fixture)


async def test_own_last_hour_with_the_basis(base: str) -> None:
    body = await get_json(base + "api/v1/workspaces/alice/~/history", "alice")
    assert (body["user"], body["server"], body["basis"]) == ("alice", "", "measured")
    util = body["series"]["gpu_util_percent"]
    assert [t for t, _ in util] == [NOW - 15, NOW]  # one point per cycle
    assert util[-1][1] == 80  # her card's utilisation, not her job's (97)
    assert body["window_s"] == 3600
    short = await get_json(base + "api/v1/workspaces/alice/~/history?window=10s", "alice")
    assert short["series"]["gpu_util_percent"] == [[NOW, 80]]


@pytest.mark.parametrize(
    ("path", "token", "status"),
    [
        pytest.param("alice/~/history", "bob", 403, id="bob-for-alice"),
        pytest.param("alice/train/history", "admin", 200, id="admin"),
        pytest.param("alice/nope/history", "alice", 404, id="no-such-server"),
        pytest.param("alice/~/history", None, 403, id="no-token"),
        pytest.param("alice/~/history?window=soon", "alice", 400, id="bad-window"),
    ],
)
async def test_access_is_the_workspace_details(base: str, path: str, token: str | None, status: int) -> None:
    body = await get_json(base + "api/v1/workspaces/" + path, token, status)
    if status == 200:
        assert (body["server"], body["series"]["gpu_util_percent"][-1][1]) == ("train", 1)
        return
    assert body["status"] == status and body["message"] and "series" not in body
    if token == "bob":
        assert body["message"] == "bob may not see the workspaces of alice"
