"""The culler's HTTP surface against a fake hub and a state built by hand (no cycle, no cluster).

Who sees what (admin and unfiltered read:servers: everyone; a user: their own; a filtered token: that
user), the JSON shapes of decisions, notices and status, the error shapes, the status page, the OAuth
redirect of the home page's banner, and the hub configuration that registers the service.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from jupyterhub.services.auth import HubOAuth
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPResponse
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from gpuworkspace_spawner.services.culler.app import CullerApp
from gpuworkspace_spawner.services.culler.model import (
    Action,
    Decision,
    Effective,
    GpuEvidence,
    Policy,
    ProfileSession,
    Reason,
    Source,
    Workspace,
)
from gpuworkspace_spawner.services.culler.policy import decide_all
from gpuworkspace_spawner.services.culler.state import CullerState, CycleReport
from gpuworkspace_spawner.services.culler.web import make_app, until

NOW = datetime(2026, 1, 15, 13, 0, tzinfo=UTC)
PREFIX = "/services/gpuworkspace-culler/"
SERVICE = "gpuworkspace-culler"
ACCESS = f"access:services!service={SERVICE}"
REPO = Path(__file__).resolve().parents[3]


def at(minutes: float) -> datetime:
    return NOW + timedelta(minutes=minutes)


# alice's profile: its card's three lead times; the GPU mode's idle timeout, shorter than the card's
ALICE_RULES = Effective(
    idle_timeout=1800,
    idle_timeout_source=Source.CONFIG_GPU_MODE,
    max_duration=8 * 3600,
    max_duration_source=Source.DEFAULT,
    warn_before=(1800, 300, 60),
    warn_before_source=Source.CATALOG,
)


def warn(user: str, server: str, stage: int, stop_in: float, reason: Reason = Reason.IDLE) -> Decision:
    return Decision(
        user,
        server,
        Action.WARN,
        f"idle since 12:00 UTC (latest: kernel k-{user}); stops at {at(stop_in):%H:%M} UTC",
        reason=reason,
        stage=stage,
        stop_at=at(stop_in),
        last_activity=at(-60),
        activity_source=f"kernel k-{user}",
    )


ALICE = replace(warn("alice", "", 1, 5), policy=ALICE_RULES)  # second of three stages, stop in 5 min
ALICE_TRAIN = Decision(
    "alice",
    "train",
    Action.KEEP,
    "active: busy kernel k9",
    last_activity=NOW,
    activity_source="busy kernel k9",
)
BOB = warn("bob", "gpu", 0, 25)  # first stage, stop in 25 min
CAROL = Decision("carol", "", Action.EXEMPT, "never culled: user carol is exempt")
DAVE = Decision(
    "dave",
    "long",
    Action.KEEP,
    "running 7.5 h, within the 8 h maximum; stops at 13:30 UTC",
    reason=Reason.MAX_DURATION,
    stop_at=at(30),
    last_activity=NOW,
    activity_source="busy kernel k1",
)
ERIN_STOPPED = Decision(
    "erin", "", Action.STOP, "idle since 10:00 UTC (latest: hub); stopping now", Reason.IDLE
)

TOKENS: dict[str, dict[str, Any]] = {
    # a user's own API token (the hub's "self" role expands to read:servers!user=<name>)
    "alice": {"kind": "user", "name": "alice", "scopes": [ACCESS, "read:servers!user=alice"]},
    # a user logged in to this service by OAuth: access:services only
    "alice-api": {"kind": "user", "name": "alice", "scopes": ["read:servers!user=alice"]},
    "bob": {"kind": "user", "name": "bob", "scopes": [ACCESS]},
    "admin": {"kind": "user", "name": "admin", "scopes": ["admin:servers", ACCESS]},
    "reader": {"kind": "service", "name": "monitor", "scopes": ["read:servers"]},
    "delegate": {"kind": "service", "name": "helper", "scopes": ["read:servers!user=bob"]},
    "nobody": {"kind": "user", "name": "zed", "scopes": []},
}


class FakeHubAuth:
    """HubAuth's get_user: the model of the token in the Authorization header."""

    hub_prefix = "/hub/"

    async def _user(self, handler: Any) -> dict[str, Any] | None:
        header = handler.request.headers.get("Authorization", "")
        return TOKENS.get(header.removeprefix("token ").strip())

    def get_user(self, handler: Any, *, sync: bool = True) -> Any:
        return self._user(handler)


def prepared_state(*, dry_run: bool = False) -> CullerState:
    state = CullerState(
        policy=Policy(
            idle_timeout=3600,
            idle_timeout_by_gpu_mode={"exclusive": 1800},
            max_duration=8 * 3600,
            exempt_users=frozenset({"carol"}),
            exempt_groups=frozenset({"ops"}),
            warn_before_by_profile={"demo": (120.0,)},
            catalog={"gpu-shared": ProfileSession(1800, 8 * 3600, (600, 120), "time-sliced")},
        ),
        dry_run=dry_run,
    )
    state.decisions = {d.key: d for d in (ALICE, ALICE_TRAIN, BOB, CAROL, DAVE)}
    # alice was warned twice (30 and 5 min ahead), bob once
    state.book.record(warn("alice", "", 0, 30), now=at(-25))
    state.book.record(ALICE, now=NOW)
    state.book.record(BOB, now=NOW)
    state.idle_gpu_seconds = {("alice", ""): 5400.0, ("bob", "gpu"): 600.0}
    state.last_cycle = CycleReport(
        started_at=at(-1),
        finished_at=at(-1) + timedelta(seconds=2.5),
        servers=6,
        probed=4,
        requests=9,
        warned=2,
        stopped=1,
        dry_run=dry_run,
        errors=("bob/gpu: probe failed: 503 Service Unavailable", "dave/long: terminals: timeout"),
    )
    state.stopped = [(at(-60), ERIN_STOPPED)]
    return state


async def serve(state: CullerState, hub_auth: Any) -> AsyncIterator[str]:
    sock, port = bind_unused_port()
    server = HTTPServer(make_app(state, hub_auth=hub_auth, prefix=PREFIX, clock=lambda: NOW))
    server.add_sockets([sock])
    try:
        yield f"http://127.0.0.1:{port}{PREFIX}"
    finally:
        server.stop()


@pytest.fixture
async def base() -> AsyncIterator[str]:
    async for url in serve(prepared_state(), FakeHubAuth()):
        yield url


async def get(url: str, token: str | None = None, **kwargs: Any) -> HTTPResponse:
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        return await AsyncHTTPClient().fetch(url, headers=headers, **kwargs)
    except HTTPClientError as exc:
        assert exc.response is not None
        return exc.response


async def get_json(url: str, token: str | None, status: int = 200) -> Any:
    response = await get(url, token)
    assert response.code == status, response.body
    assert response.headers["Content-Type"].startswith("application/json")
    return json.loads(response.body)


def keys(items: list[dict[str, Any]]) -> list[str]:
    return [f"{d['user']}/{d['server']}" for d in items]


# ---------------------------------------------------------------------------------------- decisions
async def test_admin_sees_every_decision_soonest_stop_first(base: str) -> None:
    body = await get_json(base + "api/v1/decisions", "admin")
    assert keys(body) == ["alice/", "bob/gpu", "dave/long", "alice/train", "carol/"]


async def test_a_decision_carries_its_reason_deadline_evidence_and_warnings(base: str) -> None:
    (alice,) = [d for d in await get_json(base + "api/v1/decisions", "alice") if d["server"] == ""]
    assert alice == {
        "user": "alice",
        "server": "",
        "action": "warn",
        "reason": "idle",
        "message": "idle since 12:00 UTC (latest: kernel k-alice); stops at 13:05 UTC",
        "stage": 1,
        "stop_at": "2026-01-15T13:05:00Z",
        "last_activity": "2026-01-15T12:00:00Z",
        "activity_source": "kernel k-alice",
        "warnings": [
            {
                "stage": 0,
                "reason": "idle",
                "given_at": "2026-01-15T12:35:00Z",
                "stop_at": "2026-01-15T13:30:00Z",
            },
            {
                "stage": 1,
                "reason": "idle",
                "given_at": "2026-01-15T13:00:00Z",
                "stop_at": "2026-01-15T13:05:00Z",
            },
        ],
        "idle_allocated_gpu_seconds": 5400.0,
        "policy": {
            "idle_timeout": {"seconds": 1800, "source": "culler config: gpu mode"},
            "max_duration": {"seconds": 8 * 3600, "source": "default"},
            "warn_before": {"seconds": [1800, 300, 60], "source": "catalog"},
        },
    }


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        pytest.param("alice", ["alice/", "alice/train"], id="own-api-token"),
        pytest.param("bob", ["bob/gpu"], id="own-oauth-login"),
        pytest.param(
            "reader", ["alice/", "bob/gpu", "dave/long", "alice/train", "carol/"], id="read-servers"
        ),
        pytest.param("delegate", ["bob/gpu"], id="read-servers-for-bob"),
    ],
)
async def test_callers_see_the_decisions_of_the_users_they_may_read(
    base: str, token: str, expected: list[str]
) -> None:
    assert keys(await get_json(base + "api/v1/decisions", token)) == expected


async def test_a_token_that_grants_nothing_here_is_refused(base: str) -> None:
    """A token without this service's access scope nor read:servers (a culler probe token) gets 403."""
    for path in ("api/v1/decisions", "api/v1/notices", "api/v1/status"):
        error = await get_json(base + path, "nobody", 403)
        assert "zed's token grants no access to this service" in error["message"], error
        assert ACCESS in error["message"]


async def test_decisions_filter_by_action(base: str) -> None:
    assert keys(await get_json(base + "api/v1/decisions?action=warn,stop", "admin")) == ["alice/", "bob/gpu"]
    assert keys(await get_json(base + "api/v1/decisions?action=exempt", "admin")) == ["carol/"]
    error = await get_json(base + "api/v1/decisions?action=warn,nuke", "admin", 400)
    assert (
        error["status"] == 400
        and "nuke" in error["message"]
        and "keep, warn, stop, exempt" in error["message"]
    )


@pytest.mark.parametrize("path", ["api/v1/decisions", "api/v1/notices", "api/v1/status"])
@pytest.mark.parametrize("token", [None, "forged"])
async def test_the_api_refuses_a_missing_or_invalid_token_with_a_json_error(
    base: str, path: str, token: str | None
) -> None:
    error = await get_json(base + path, token, 403)
    assert error == {
        "status": 403,
        "message": "missing or invalid credentials: log in to the hub, or send 'Authorization: token <hub token>'",
    }


# ------------------------------------------------------------------------------------------ notices
async def test_notices_are_the_callers_own_active_warnings(base: str) -> None:
    (notice,) = await get_json(base + "api/v1/notices", "alice")
    assert notice == {
        "server": "",
        "reason": "idle",
        "stage": 1,
        "stages": 3,  # her server's own lead times, not the default's two
        "stop_at": "2026-01-15T13:05:00Z",
        "message": ALICE.message,
        "evidence": "idle since 12:00 UTC (latest: kernel k-alice)",
        "last_activity": "2026-01-15T12:00:00Z",
        "activity_source": "kernel k-alice",
        "dry_run": False,
        "handoff": False,
    }
    assert [n["server"] for n in await get_json(base + "api/v1/notices", "bob")] == ["gpu"]
    assert await get_json(base + "api/v1/notices", "admin") == []  # admins' notices are their own too


async def test_notices_are_for_users_only(base: str) -> None:
    error = await get_json(base + "api/v1/notices", "reader", 400)
    assert error["message"] == "notices are a user's own: service:monitor is not a user"
    error = await get_json(base + "api/v1/notices", "nobody", 403)
    assert "grants no access" in error["message"] and ACCESS in error["message"]


async def test_a_notice_says_whether_it_offers_the_job_handoff() -> None:
    """Structured, for JupyterLab's "Run as a job" action: not parsed out of the message."""
    state = prepared_state()
    state.decisions[BOB.key] = replace(BOB, handoff=True)
    async for url in serve(state, FakeHubAuth()):
        assert [n["handoff"] for n in await get_json(url + "api/v1/notices", "bob")] == [True]
        assert [n["handoff"] for n in await get_json(url + "api/v1/notices", "alice")] == [False]


async def test_a_withdrawn_warning_is_no_notice() -> None:
    state = prepared_state()
    state.decisions[("bob", "gpu")] = Decision(
        "bob",
        "gpu",
        Action.KEEP,
        "warnings withdrawn (new activity); active: terminal 1",
        cancels_warnings=True,
    )
    async for url in serve(state, FakeHubAuth()):
        assert await get_json(url + "api/v1/notices", "bob") == []


async def test_the_home_page_banner_is_sent_to_the_hub_login_and_back() -> None:
    """With HubOAuth, a browser without a login is redirected to the hub's authorize URL (state cookie
    set, PKCE where JupyterHub does it) and the callback route exists; tokens still get JSON 403s."""
    hub_auth = HubOAuth(
        api_token="service-token",
        api_url="http://127.0.0.1:9/hub/api",
        oauth_client_id=f"service-{SERVICE}",
        oauth_redirect_uri=PREFIX + "oauth_callback",
        hub_prefix="/hub/",
    )
    async for url in serve(prepared_state(), hub_auth):
        for path in ("api/v1/notices", ""):
            response = await get(url + path, follow_redirects=False)
            assert response.code == 302
            assert response.headers["Location"].startswith("/hub/api/oauth2/authorize?")
            assert "state=" in response.headers["Location"]
            assert f"service-{SERVICE}-oauth-state" in response.headers["Set-Cookie"]
        assert (await get_json(url + "api/v1/decisions", None, 403))["status"] == 403
        assert (await get(url + "oauth_callback", follow_redirects=False)).code != 404


# ------------------------------------------------------------------------------------------- status
async def test_status_shows_the_last_cycle_and_the_effective_policy(base: str) -> None:
    body = await get_json(base + "api/v1/status", "admin")
    assert body["dry_run"] is False
    assert body["last_cycle"] == {
        "started_at": "2026-01-15T12:59:00Z",
        "finished_at": "2026-01-15T12:59:02.500000Z",
        "seconds": 2.5,
        "servers": 6,
        "probed": 4,
        "requests": 9,
        "warned": 2,
        "stopped": 1,
        "dry_run": False,
        "errors": ["bob/gpu: probe failed: 503 Service Unavailable", "dave/long: terminals: timeout"],
        "error_count": 2,
    }
    policy = body["policy"]
    assert policy["idle_timeout"] == 3600 and policy["idle_timeout_by_gpu_mode"] == {"exclusive": 1800}
    assert policy["warn_before"] == [1800.0, 300.0] and policy["max_duration"] == 8 * 3600
    assert policy["exempt_users"] == ["carol"] and policy["exempt_groups"] == ["ops"]
    assert set(policy) == {
        "idle_timeout",
        "idle_timeout_by_gpu_mode",
        "idle_timeout_by_profile",
        "max_duration",
        "max_duration_by_profile",
        "warn_before",
        "warn_before_by_profile",
        "catalog",
        "gpu_busy_percent",
        "cpu_busy_cores",
        "exempt_users",
        "exempt_groups",
        "exempt_profiles",
        "handoff",
    }
    assert policy["handoff"] == ""  # not configured here: warnings name no hand-off
    assert policy["warn_before_by_profile"] == {"demo": [120.0]}
    assert policy["catalog"] == {
        "gpu-shared": {
            "idle_timeout": 1800,
            "max_duration": 8 * 3600,
            "warn_before": [600, 120],
            "gpu_mode": "time-sliced",
        }
    }


def _servers(*workspaces: Workspace) -> CullerState:
    """Decisions the real policy made for these workspaces (started an hour ago, idle since)."""
    policy = Policy(
        idle_timeout=3600,
        warn_before=(1800, 300),
        idle_timeout_by_gpu_mode={"time-sliced": 900, "exclusive": 7200},
        idle_timeout_by_profile={"long": 14400},
        warn_before_by_profile={"long": (3600,)},
        max_duration_by_profile={"long": 86400},
        catalog={
            "gpu-shared": ProfileSession(1800, 8 * 3600, (600, 120), "time-sliced"),
            "gpu-exclusive": ProfileSession(5400, 12 * 3600, None, "exclusive"),
            "long": ProfileSession(1800, 8 * 3600, (600, 120), "exclusive"),
        },
    )
    state = CullerState(policy=policy)
    decisions = decide_all(workspaces, policy, {}, now=NOW)
    state.decisions = {d.key: d for d in decisions}
    return state


@pytest.mark.parametrize(
    ("workspace", "expected"),
    [
        pytest.param(
            Workspace("u", "a", started=at(-60), profile="gpu-shared", gpu=GpuEvidence("time-sliced", 1)),
            {
                "idle_timeout": {"seconds": 900, "source": "culler config: gpu mode"},
                "max_duration": {"seconds": 8 * 3600, "source": "catalog"},
                "warn_before": {"seconds": [600, 120], "source": "catalog"},
            },
            id="card-leads-gpu-mode-shorter",
        ),
        pytest.param(
            Workspace("u", "b", started=at(-60), profile="gpu-exclusive", gpu=GpuEvidence("exclusive", 1)),
            {
                "idle_timeout": {"seconds": 5400, "source": "catalog"},
                "max_duration": {"seconds": 12 * 3600, "source": "catalog"},
                "warn_before": {"seconds": [1800, 300], "source": "default"},
            },
            id="card-shorter-than-gpu-mode",
        ),
        pytest.param(
            Workspace("u", "c", started=at(-60), profile="long"),
            {
                "idle_timeout": {"seconds": 14400, "source": "culler config: profile"},
                "max_duration": {"seconds": 86400, "source": "culler config: profile"},
                "warn_before": {"seconds": [3600], "source": "culler config: profile"},
            },
            id="culler-config-per-profile",
        ),
        pytest.param(
            Workspace("u", "d", started=at(-60), profile="not-in-catalog"),
            {
                "idle_timeout": {"seconds": 3600, "source": "default"},
                "max_duration": {"seconds": 0, "source": "default"},
                "warn_before": {"seconds": [1800, 300], "source": "default"},
            },
            id="defaults",
        ),
    ],
)
async def test_each_decision_shows_its_effective_policy_and_where_each_value_came_from(
    workspace: Workspace, expected: dict[str, Any]
) -> None:
    async for url in serve(_servers(workspace), FakeHubAuth()):
        (decision,) = await get_json(url + "api/v1/decisions", "admin")
        assert decision["policy"] == expected


async def test_status_hides_other_users_errors_and_exemptions(base: str) -> None:
    body = await get_json(base + "api/v1/status", "bob")
    assert body["last_cycle"]["errors"] == ["bob/gpu: probe failed: 503 Service Unavailable"]
    assert body["last_cycle"]["error_count"] == 2
    assert body["policy"]["exempt_users"] == []


# --------------------------------------------------------------------------------------------- page
async def test_the_page_shows_the_callers_upcoming_stop_with_its_reason(base: str) -> None:
    response = await get(base, "alice")
    assert response.code == 200 and response.headers["Content-Type"].startswith("text/html")
    html = response.body.decode()
    upcoming = html.split('id="upcoming"')[1].split("</section>")[0]
    assert 'data-user="alice" data-server-name=""' in upcoming
    assert "2026-01-15 13:05 UTC" in upcoming and "(in 5 min)" in upcoming
    # warnings given of her own lead times (three: her profile's card), not the default's two
    assert "idle since 12:00 UTC (latest: kernel k-alice)" in upcoming and "2 of 3" in upcoming
    assert "1.50 GPU·h" in upcoming
    assert 'data-user="bob"' not in html and "bob/gpu" not in html  # nor in the cycle's errors
    assert "static/css/style.min.css" in html and 'id="dry-run"' not in html
    assert 'id="last-cycle"' in html and "2026-01-15 12:59 UTC" in html


async def test_admins_see_every_section_for_everyone(base: str) -> None:
    html = (await get(base, "admin")).body.decode()
    upcoming = html.split('id="upcoming"')[1].split("</section>")[0]
    assert [u for u in ("alice", "bob", "dave") if f'data-user="{u}"' in upcoming] == ["alice", "bob", "dave"]
    assert html.count('class="warning-given"') == 3
    stopped = html.split('id="stopped"')[1].split("</section>")[0]
    assert "erin (default server)" in stopped and "2026-01-15 12:00 UTC" in stopped
    idle = html.split('id="idle-gpu"')[1].split("</section>")[0]
    assert idle.index("alice (default server)") < idle.index("bob/gpu") and "10 GPU·min" in idle
    assert "probe failed: 503" in html


async def test_the_page_says_dry_run() -> None:
    async for url in serve(prepared_state(dry_run=True), FakeHubAuth()):
        html = (await get(url, "bob")).body.decode()
        assert 'id="dry-run"' in html and "stops nothing" in html
        assert (await get_json(url + "api/v1/status", "bob"))["dry_run"] is True
        assert (await get_json(url + "api/v1/notices", "bob"))[0]["dry_run"] is True


@pytest.mark.parametrize(
    ("token", "message"),
    [
        pytest.param(None, "missing or invalid credentials", id="no-token"),
        pytest.param(
            "nobody", f"zed's token grants no access to this service: it needs {ACCESS}", id="no-access-scope"
        ),
    ],
)
async def test_the_page_needs_a_login_with_access(base: str, token: str | None, message: str) -> None:
    response = await get(base, token)
    assert response.code == 403 and response.headers["Content-Type"].startswith("text/plain")
    assert message in response.body.decode()


@pytest.mark.parametrize("token", ["reader", "alice-api"])
async def test_tokens_that_read_servers_may_open_the_page(base: str, token: str) -> None:
    response = await get(base, token)
    assert response.code == 200, response.body


@pytest.mark.parametrize(
    ("minutes", "words"),
    [
        pytest.param(-1, "due now", id="past"),
        pytest.param(0.2, "in 1 min", id="under-a-minute"),
        pytest.param(25, "in 25 min", id="minutes"),
        pytest.param(125, "in 2 h 5 min", id="hours"),
    ],
)
def test_until_says_how_long_in_words(minutes: float, words: str) -> None:
    assert until(at(minutes), NOW) == words
    assert until(None, NOW) == ""


# ------------------------------------------------------------------------------- hub registration
def load_hub_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> Any:
    from traitlets.config.loader import PyFileConfigLoader

    for name in ("GPUWS_STATE_DIR", "GPUWS_CULLER", "GPUWS_CULLER_CONFIG", "GPUWS_CULLER_ARGS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    monkeypatch.setenv("GPUWS_DATA_DIR", str(tmp_path / "hub"))
    monkeypatch.setenv("GPUWS_SPAWNER", "gpuworkspace")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    kube_config = sys.modules.get("kubernetes_asyncio.config.kube_config")
    if kube_config is not None:  # the config file points kubernetes_asyncio at $KUBECONFIG
        monkeypatch.setattr(
            kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kube_config.KUBE_CONFIG_DEFAULT_LOCATION
        )
    return PyFileConfigLoader("jupyterhub_config.py", path=str(REPO / "hub_config")).load_config()


def culler_of(config: Any) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    service = next((s for s in config.JupyterHub.services if s["name"] == SERVICE), None)
    role = next((r for r in config.JupyterHub.load_roles if r["name"] == SERVICE), None)
    return service, role


def test_the_hub_runs_the_culler_with_exactly_its_documented_scopes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = load_hub_config(
        monkeypatch,
        tmp_path,
        GPUWS_PUBLIC_PORT="18000",
        GPUWS_CULLER_CONFIG="/etc/culler.py",
        GPUWS_CULLER_INTERVAL="30",
        GPUWS_CULLER_ARGS="--dry-run --idle-timeout='7200'",
    )
    service, role = culler_of(config)
    assert service is not None and role is not None
    assert service["url"] == "http://127.0.0.1:10103" and service["oauth_no_confirm"] is True
    assert service["command"][1:] == [
        "-m",
        "gpuworkspace_spawner.services.culler.app",
        "--proxy-url",
        "http://127.0.0.1:18000",
        "--interval",
        "30",
        "--catalog",
        str(REPO / "hub_config" / "catalog"),
        "--attribution-url",
        "http://127.0.0.1:10102/services/gpuworkspace-attribution/",
        "--job-handoff",
        "To keep a long run going, submit it as a job (JupyterLab: the notebook's Create a notebook job "
        "button; or /services/gpuworkspace-jobs/api/v1/jobs): it queues for the cluster's GPUs and keeps "
        "running after this workspace stops.",
        "--config",
        "/etc/culler.py",
        "--dry-run",
        "--idle-timeout=7200",
    ]
    app = CullerApp()  # the service accepts what the hub passes
    app.parse_command_line(service["command"][3:])
    assert (app.proxy_url, app.interval, app.config_file) == ("http://127.0.0.1:18000", 30, "/etc/culler.py")
    assert app.catalog == str(REPO / "hub_config" / "catalog")
    assert app.attribution_url == "http://127.0.0.1:10102/services/gpuworkspace-attribution/"
    assert app.dry_run is True and app.idle_timeout == 7200
    assert app.job_handoff.startswith("To keep a long run going")  # the jobs service runs: warnings say so
    assert sorted(role["scopes"]) == sorted(
        [
            "list:users",
            "read:users:activity",
            "read:servers",
            "delete:servers",
            "admin:server_state",
            "read:users:groups",
        ]
    )
    assert role["services"] == [SERVICE]
    user_role = next(r for r in config.JupyterHub.load_roles if r["name"] == "user")
    assert ACCESS in user_role["scopes"]
    doc = (REPO / "hub_config" / "jupyterhub_config.py").read_text().split("def _register_culler_service")[1]
    for scope in role["scopes"]:
        assert f"``{scope}``" in doc.split('"""')[1], f"{scope} is not explained in the docstring"


def test_gpuws_culler_0_turns_it_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    service, role = culler_of(load_hub_config(monkeypatch, tmp_path, GPUWS_CULLER="0"))
    assert service is None and role is None
