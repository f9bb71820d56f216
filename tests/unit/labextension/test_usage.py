"""What the usage panel plots, from the attribution service's last-hour answer (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.labextension.figures import Answer, disk_view, workspace_from_env
from gpuworkspace_spawner.labextension.usage import dashboard_url, history_body, history_path, history_view

ENV = {
    "JUPYTERHUB_USER": "alice",
    "JUPYTERHUB_SERVER_NAME": "",
    "GPUWS_ATTRIBUTION_URL": "http://proxy-public.hub.svc:8000/services/gpuworkspace-attribution/api/v1/",
}
HISTORY = {  # api/v1/workspaces/alice/~/history (docs/reference/attribution-api.md)
    "user": "alice",
    "server": "",
    "at": 1767225600.0,
    "window_s": 3600,
    "basis": "per-process",
    "gpu_mode": "time-sliced",
    "caveat": "",
    "limits": {"cpu_cores": 4.0, "memory_bytes": None},
    "series": {
        "gpu_util_percent": [[1767225540.0, 20.0], [1767225600.0, 55.0]],
        "gpu_mem_used_mib": [[1767225600.0, 4096.0]],
        "cpu_cores": [],
        "memory_bytes": [[1767225600.0, 2.0e9]],
    },
}


def test_the_last_hour_with_its_basis_and_the_dashboard_link() -> None:
    ws = workspace_from_env(ENV)
    assert history_path(ws) == "workspaces/alice/~/history"
    body = history_body(ws, Answer(body=HISTORY), disk_view(100, 40))
    usage = body["usage"]
    assert usage["available"] and usage["basis"] == "per-process"
    assert usage["series"]["gpu_util_percent"][-1] == [1767225600.0, 55.0]
    assert usage["limits"] == {"cpu_cores": 4.0, "memory_bytes": None}
    assert body["disk"]["used_fraction"] == 0.6
    # the browser's path to the dashboard, on the hub's proxy, not the in-cluster address
    assert body["dashboard_url"] == "/services/gpuworkspace-attribution/"


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        pytest.param([[1, 2], [3, "x"], [4], "5", [6, None], [7, True]], [[1.0, 2.0]], id="not-numbers"),
        pytest.param([[1, float("inf")], [2, 3]], [[2.0, 3.0]], id="not-finite"),
        pytest.param({"t": 1}, [], id="not-a-list"),
        pytest.param(
            [[t, 1] for t in range(5000)], [[float(t), 1.0] for t in range(4000, 5000)], id="capped"
        ),
    ],
)
def test_untrusted_points_are_left_out(raw: Any, kept: list[list[float]]) -> None:
    view = history_view(Answer(body={**HISTORY, "series": {"cpu_cores": raw}}))
    assert view["series"]["cpu_cores"] == kept
    assert view["series"]["gpu_util_percent"] == []  # a series missing from the answer: no points


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        pytest.param(
            Answer(reason="the GPU attribution service is unreachable: refused"), "unreachable", id="down"
        ),
        pytest.param(Answer(reason="the GPU attribution service answered 403: no"), "403", id="forbidden"),
        pytest.param(Answer(body=[1]), "other than a JSON object", id="not-an-object"),
    ],
)
def test_a_service_that_cannot_answer_is_unavailable(answer: Answer, reason: str) -> None:
    view = history_view(answer)
    assert view["available"] is False and reason in view["reason"]


@pytest.mark.parametrize(
    ("url", "link"),
    [
        pytest.param(
            "http://127.0.0.1:8000/services/gpuworkspace-attribution/api/v1",
            "/services/gpuworkspace-attribution/",
            id="demo",
        ),
        pytest.param("http://proxy/prefix/services/a/api/v1/", "/prefix/services/a/", id="hub-base-url"),
        pytest.param("", "", id="unset"),
        pytest.param("http://elsewhere/metrics", "", id="not-an-api-url"),
    ],
)
def test_dashboard_url(url: str, link: str) -> None:
    assert dashboard_url(url) == link
