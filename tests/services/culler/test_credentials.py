"""What the culler sends to single-user servers: their own probe token, nothing else, to nobody else.

The fake servers (:mod:`.fakes`) answer only their own probe token and keep every ``Authorization``
header sent to them; the culler's own token opens the fake hub only. Whatever a server answers is
hostile input: session paths that would aim a checkpoint elsewhere are refused, oversized answers are
cut off.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from gpuworkspace_spawner.probecredentials import STATE_KEY, probe_token_from_state
from gpuworkspace_spawner.services.culler.model import Action, Policy
from gpuworkspace_spawner.services.culler.probes import MAX_SERVER_ANSWER_BYTES, safe_notebook_path

from .fakes import TOKEN, FakeClock, FakeCluster, make_culler

T0 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
POLICY = Policy(idle_timeout=3600, warn_before=(1800, 300))
IDLE_SINCE = T0 - timedelta(minutes=40)


@pytest.fixture
async def fake() -> AsyncIterator[FakeCluster]:
    cluster = await FakeCluster().start()
    yield cluster
    await cluster.stop()


def idle(fake: FakeCluster, user: str, name: str = "", **kw: object) -> None:
    fields: dict[str, object] = {
        "started": T0 - timedelta(hours=3),
        "hub_activity": IDLE_SINCE,
        "activity": IDLE_SINCE,
        "kernels": [{"id": "k1", "execution_state": "idle", "last_activity": IDLE_SINCE}],
        "sessions": ["work/a.ipynb"],
    }
    fake.add(user, name, **{**fields, **kw})


async def run(fake: FakeCluster, minutes: list[float], **options: object) -> list[dict]:  # type: ignore[type-arg]
    clock = FakeClock(T0)
    culler = make_culler(fake, clock, POLICY, **options)
    out = []
    try:
        for offset in minutes:
            clock.now = T0 + timedelta(minutes=offset)
            await culler.run()
            out.append(dict(culler.state.decisions))
    finally:
        culler.hub.http.close()
    return out


async def test_servers_get_only_their_own_probe_token_through_warnings_save_and_stop(
    fake: FakeCluster,
) -> None:
    for user in ("alice", "bob", "carol"):
        idle(fake, user, "gpu")
    *_, last = await run(fake, [0, 26, 32], save_first=True)
    assert all(d.action is Action.STOP for d in last.values())
    assert sorted(fake.checkpoints) == ["work/a.ipynb"] * 3  # save-first reached every server
    sent = set(fake.server_credentials)
    assert f"token {TOKEN}" not in sent  # the culler's own token never reached user code
    assert sent == {f"token probe-{u}-gpu" for u in ("alice", "bob", "carol")}
    assert fake.requests("hub-stop") == 3


async def test_a_server_without_a_probe_token_is_never_asked(fake: FakeCluster) -> None:
    idle(fake, "alice", has_probe_token=False, hub_activity=T0 - timedelta(minutes=5))
    (decisions,) = await run(fake, [0])
    assert fake.requests("status", "kernels", "terminals", "sessions") == 0
    assert fake.server_credentials == []
    decision = decisions[("alice", "")]
    assert decision.action is Action.KEEP and decision.activity_source == "hub"


async def test_save_first_without_a_probe_token_stops_without_sending_anything(fake: FakeCluster) -> None:
    idle(fake, "alice", has_probe_token=False)
    *_, last = await run(fake, [0, 26, 32], save_first=True)
    assert last[("alice", "")].action is Action.STOP
    assert fake.server_credentials == [] and fake.checkpoints == []


HOSTILE_PATHS = [
    "../../../hub/api/users/bob/server",
    "work/../../../../services/gpuworkspace-disks/api/v1/disks",
    "/etc/passwd",
    "a//b.ipynb",
    "./a.ipynb",
    "a\\..\\b.ipynb",
    "a\x00b.ipynb",
    "a\nb.ipynb",
    "x" * 5000,
]


@pytest.mark.parametrize("path", HOSTILE_PATHS, ids=range(len(HOSTILE_PATHS)))
def test_hostile_session_paths_are_refused(path: str) -> None:
    assert safe_notebook_path(path) is None


@pytest.mark.parametrize("path", ["a.ipynb", "work/deep/b c.ipynb", "ünï/ç.ipynb", "..a/b..ipynb"])
def test_plain_session_paths_pass(path: str) -> None:
    assert safe_notebook_path(path) == path


async def test_a_hostile_server_cannot_aim_save_first_elsewhere(fake: FakeCluster) -> None:
    sessions = [{"path": p, "type": "notebook"} for p in HOSTILE_PATHS] + [
        {"path": {"not": "a path"}, "type": "notebook"},
        "not a session",
        {"path": "ok.ipynb", "type": "notebook"},
    ]
    idle(fake, "alice", sessions=[], raw_sessions=sessions)
    *_, last = await run(fake, [0, 26, 32], save_first=True)
    assert last[("alice", "")].action is Action.STOP
    assert fake.checkpoints == ["ok.ipynb"]  # the one plain path; nothing else was POSTed


async def test_an_oversized_answer_is_cut_off_and_never_counts_as_idle(fake: FakeCluster) -> None:
    idle(fake, "alice", padding=MAX_SERVER_ANSWER_BYTES + 1)
    first, *_, last = await run(fake, [0, 26, 32])
    decision = first[("alice", "")]
    assert "answer longer than" in decision.message or "did not answer" in decision.message
    assert last[("alice", "")].action is not Action.STOP  # fail closed: no idle stop on no evidence


@pytest.mark.parametrize(
    ("state", "token"),
    [
        ({STATE_KEY: "abc123"}, "abc123"),
        ({}, None),
        (None, None),
        ("a string", None),
        ({STATE_KEY: 42}, None),
        ({STATE_KEY: ""}, None),
        ({STATE_KEY: "two words"}, None),
        ({STATE_KEY: "x" * 257}, None),
        ({STATE_KEY: "line\nbreak"}, None),
    ],
    ids=["token", "empty", "none", "string", "number", "blank", "space", "long", "newline"],
)
def test_probe_token_from_state(state: object, token: str | None) -> None:
    assert probe_token_from_state(state) == token
