"""What the status bar and the culler's notifications show, from the services' answers (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpuworkspace_spawner.labextension.figures import (
    Answer,
    activity_body,
    attribution_view,
    culler_view,
    disk_view,
    refusal,
    status_body,
    workspace_from_env,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
ENV = {
    "JUPYTERHUB_USER": "alice",
    "JUPYTERHUB_SERVER_NAME": "train",
    "JUPYTERHUB_API_URL": "http://hub:8081/hub/api/",
    "GPUWS_ATTRIBUTION_URL": "http://proxy/services/gpuworkspace-attribution/api/v1/",
    "GPUWS_CULLER_URL": "http://proxy/services/gpuworkspace-culler/api/v1",
}
DETAIL = {  # docs/reference/attribution-api.md, GET /workspaces/{user}/{server}, trimmed
    "at": 1767225600.0,
    "cpu": {"limit": 8.0, "request": 4.0, "used": 1.5},
    "gpu": {
        "allocated": 0.5,
        "basis": "shared",
        "caveat": "device value, shared by 2 workspaces (no per-process data)",
        "idle": False,
        "mem_used_mib": None,
        "util_percent": 100.0,
    },
    "gpu_mode": "time-sliced",
    "memory": {"limit": 68719476736, "request": 34359738368, "used": 12884901888},
    "node": "gpu-node-a",
    "profile": "h100-shared",
}
NOTICE = {  # the culler's api/v1/notices, one entry
    "server": "train",
    "reason": "idle",
    "stage": 0,  # the culler's index: the first of two warnings
    "stages": 2,
    "stop_at": "2026-12-02T12:25:00Z",
    "message": "idle since 11:30 (latest: kernel k1); stops at 12:25",
    "evidence": "idle since 11:30 (latest: kernel k1)",
    "last_activity": "2026-12-02T11:30:00Z",
    "activity_source": "kernel k1",
    "dry_run": False,
}


def test_workspace_paths_quote_names_and_name_the_default_server() -> None:
    ws = workspace_from_env(ENV)
    assert ws.attribution_url == "http://proxy/services/gpuworkspace-attribution/api/v1"
    assert ws.hub_api_url == "http://hub:8081/hub/api"
    assert ws.attribution_path() == "workspaces/alice/train"
    assert ws.activity_path() == "users/alice/activity"
    default = workspace_from_env({**ENV, "JUPYTERHUB_SERVER_NAME": "", "JUPYTERHUB_USER": "a/b"})
    assert default.attribution_path() == "workspaces/a%2Fb/~"
    assert default.label == "a/b (default server)"


def test_gpu_cpu_and_memory_with_the_basis() -> None:
    view = attribution_view(Answer(body=DETAIL))
    assert view["available"] is True
    assert view["gpu"] == {
        "mode": "time-sliced",
        "allocated": 0.5,
        "util_percent": 100.0,
        "mem_used_mib": None,
        "basis": "shared",
        "caveat": "device value, shared by 2 workspaces (no per-process data)",
        "idle": False,
    }
    assert view["cpu"] == {"used": 1.5, "request": 4.0, "limit": 8.0}
    assert view["memory"]["used"] == 12884901888


def test_a_cpu_workspace_has_no_gpu_basis() -> None:
    view = attribution_view(Answer(body={"gpu": {"basis": "none"}, "gpu_mode": "none"}))
    assert (view["gpu"]["mode"], view["gpu"]["basis"], view["gpu"]["util_percent"]) == ("none", "none", None)


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        pytest.param({"util_percent": "100"}, None, id="a string is not a figure"),
        pytest.param({"util_percent": True}, None, id="a boolean is not a figure"),
        pytest.param({"util_percent": float("nan")}, None, id="nan is not a figure"),
        pytest.param({"util_percent": 42}, 42.0, id="an integer is"),
    ],
)
def test_hostile_figures_are_left_out(gpu: dict[str, Any], expected: float | None) -> None:
    assert attribution_view(Answer(body={"gpu": gpu}))["gpu"]["util_percent"] == expected


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        pytest.param(
            Answer(reason="the GPU attribution service is unreachable: refused"), "unreachable", id="down"
        ),
        pytest.param(Answer(body=["not", "an", "object"]), "other than a JSON object", id="not an object"),
    ],
)
def test_attribution_unavailable_says_why(answer: Answer, reason: str) -> None:
    view = attribution_view(answer)
    assert view["available"] is False and reason in view["reason"]


def test_only_this_servers_warnings_with_the_countdown_and_what_is_kept() -> None:
    other = {**NOTICE, "server": "other"}
    view = culler_view(Answer(body=[NOTICE, other, "junk"]), "train", now=NOW)
    assert view["available"] is True
    (warning,) = view["warnings"]
    assert warning["seconds_left"] == 25 * 60
    assert (warning["stage"], warning["stages"], warning["reason"]) == (1, 2, "idle")
    assert warning["evidence"] == "idle since 11:30 (latest: kernel k1)"
    assert "home disk" in warning["kept"] and "GPU" in warning["lost"]


def test_a_stop_already_due_counts_down_to_zero_not_below() -> None:
    (warning,) = culler_view(Answer(body=[NOTICE]), "train", now=datetime(2026, 12, 2, 13, tzinfo=UTC))[
        "warnings"
    ]
    assert warning["seconds_left"] == 0


def test_culler_down_or_answering_nonsense_is_unavailable() -> None:
    assert (
        culler_view(Answer(reason="the idle culler is unreachable"), "train", now=NOW)["available"] is False
    )
    assert culler_view(Answer(body={"oops": 1}), "train", now=NOW)["reason"].endswith("JSON list")


def test_disk_use() -> None:
    assert disk_view(1000, 250) == {
        "available": True,
        "used_bytes": 750,
        "total_bytes": 1000,
        "used_fraction": 0.75,
    }
    assert disk_view(0, 0)["available"] is False
    assert "cannot be read" in disk_view(None, None, "the home directory cannot be read")["reason"]


def test_status_body_carries_each_part() -> None:
    ws = workspace_from_env(ENV)
    body = status_body(ws, Answer(body=DETAIL), Answer(reason="down"), disk_view(10, 5), now=NOW)
    assert (body["user"], body["server"], body["at"]) == ("alice", "train", "2026-12-02T12:00:00Z")
    assert body["resources"]["available"] and not body["culler"]["available"] and body["disk"]["available"]


def test_activity_is_reported_for_this_server_as_singleuser_does() -> None:
    body = activity_body(workspace_from_env(ENV), now=NOW)
    assert body == {
        "last_activity": "2026-12-02T12:00:00Z",
        "servers": {"train": {"last_activity": "2026-12-02T12:00:00Z"}},
    }


def test_refusal_quotes_the_services_message() -> None:
    assert refusal(
        403,
        {"status": 403, "message": "alice may not see the workspaces of bob"},
        "the GPU attribution service",
    ) == ("the GPU attribution service answered 403: alice may not see the workspaces of bob")
    assert refusal(502, "<html>", "the idle culler") == "the idle culler answered 502"
