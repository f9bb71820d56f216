"""The transfer's read of the target user from the hub (services/disks/transfer.py), against a fake hub API."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator

import pytest
from tornado import httpserver, web

from gpuworkspace_spawner.services.disks.transfer import hub_user_owner
from gpuworkspace_spawner.services.serving import ServiceError

ADMIN, USER_ONLY = "admin-token", "user-token"


class UserHandler(web.RequestHandler):
    def get(self, name: str) -> None:
        token = self.request.headers.get("Authorization", "")
        if token != f"token {ADMIN}":
            self.set_status(403)
        elif name == "bob":
            self.write(json.dumps({"kind": "user", "name": "bob", "created": "2026-02-15T10:00:00.500000Z"}))
        elif name == "ghost":
            self.write(json.dumps({"kind": "user", "name": "ghost", "created": None}))
        elif name == "a b@c":
            self.write(json.dumps({"kind": "user", "name": "a b@c", "created": "2026-01-01T00:00:00Z"}))
        elif name == "broken":
            self.write("<html>")
        else:
            self.set_status(404)


@pytest.fixture
async def hub() -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    server = httpserver.HTTPServer(web.Application([(r"/hub/api/users/([^/]+)", UserHandler)]))
    server.add_sockets([sock])
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/hub/api"
    server.stop()
    await server.close_all_connections()


async def test_the_owner_key_is_the_hub_users_creation_time(hub: str) -> None:
    assert await hub_user_owner(hub, ADMIN, "bob", timeout_s=5) == "2026-02-15T10:00:00.500000Z"
    assert await hub_user_owner(hub, ADMIN, "a b@c", timeout_s=5) == "2026-01-01T00:00:00.000000Z"


@pytest.mark.parametrize(
    ("token", "user", "status", "in_message"),
    [
        pytest.param(ADMIN, "nobody", 404, "no hub user 'nobody'", id="unknown-user"),
        pytest.param(USER_ONLY, "bob", 403, "needs read:users", id="token-may-not-read"),
        pytest.param(ADMIN, "ghost", 409, "no creation time", id="no-created"),
        pytest.param(ADMIN, "broken", 502, "not a JSON user model", id="not-json"),
    ],
)
async def test_hub_answers_become_clear_errors(
    hub: str, token: str, user: str, status: int, in_message: str
) -> None:
    with pytest.raises(ServiceError) as caught:
        await hub_user_owner(hub, token, user, timeout_s=5)
    assert caught.value.status == status and in_message in str(caught.value), caught.value


async def test_an_unreachable_hub_is_a_502() -> None:
    with pytest.raises(ServiceError) as caught:
        await hub_user_owner("http://127.0.0.1:1/hub/api", ADMIN, "bob", timeout_s=5)
    assert caught.value.status == 502 and "cannot reach the hub API" in str(caught.value)
