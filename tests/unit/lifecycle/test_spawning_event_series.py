"""The scheduler's events as a real cluster stores them: events.k8s.io/v1, read through core/v1.

kube-scheduler records with the events.k8s.io/v1 recorder (k8s.io/client-go ``tools/events``): the
Event has ``eventTime`` and, once repeated, ``series.lastObservedTime``, but no ``lastTimestamp``. The
devcluster's scheduler writes the core/v1 form (``lastTimestamp``, ``count``), so the devcluster tests
never show the product this form; these do. The newest FailedScheduling message must be the one shown,
whichever form each event has and wherever it sits in the list.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.lifecycle.spawning import build_progress

POD = {"metadata": {"name": "jupyter-alice", "uid": "pod-uid"}, "spec": {}, "status": {"phase": "Pending"}}
ABOUT = {"kind": "Pod", "name": "jupyter-alice", "uid": "pod-uid"}


def core_event(message: str, last: str) -> dict[str, Any]:
    return {"involvedObject": ABOUT, "reason": "FailedScheduling", "message": message, "lastTimestamp": last}


def series_event(message: str, first: str, last: str | None) -> dict[str, Any]:
    event: dict[str, Any] = {
        "involvedObject": ABOUT,
        "reason": "FailedScheduling",
        "message": message,
        "eventTime": first,
        "lastTimestamp": None,
        "firstTimestamp": None,
    }
    if last is not None:
        event["series"] = {"count": 3, "lastObservedTime": last}
    return event


@pytest.mark.parametrize(
    ("events", "shown"),
    [
        pytest.param(
            [
                series_event("new", "2026-03-01T12:00:00.000000Z", "2026-03-01T12:09:00.000000Z"),
                core_event("old", "2026-03-01T12:05:00Z"),
            ],
            "new",
            id="a-repeated-series-outlives-an-older-core-event",
        ),
        pytest.param(
            [
                core_event("new", "2026-03-01T12:05:00Z"),
                series_event("old", "2026-03-01T12:00:00.000000Z", "2026-03-01T12:01:00.000000Z"),
            ],
            "new",
            id="a-core-event-outlives-an-older-series",
        ),
        pytest.param(
            [
                series_event("new", "2026-03-01T12:07:00.000000Z", None),
                core_event("old", "2026-03-01T12:05:00Z"),
            ],
            "new",
            id="a-single-event-time-counts",
        ),
    ],
)
def test_the_newest_scheduling_failure_is_shown_in_either_event_form(
    events: list[dict[str, Any]], shown: str
) -> None:
    step = build_progress(None, POD, events)
    assert (step.phase, step.message) == ("scheduling", f"Waiting for a node: {shown}")
