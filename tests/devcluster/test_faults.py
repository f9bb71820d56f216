"""Seeded fault injection: the same seed and requests give the same faults."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_devcluster.faults import (
    FaultDecision,
    FaultInjector,
    FaultRule,
    WatchFault,
    injected_error,
)

REQUESTS = [
    ("list", "pods", "gpu-workspaces"),
    ("create", "pods", "gpu-workspaces"),
    ("get", "nodes", None),
] * 40


def run(seed: int, *rules: FaultRule) -> list[tuple[int | None, float]]:
    injector = FaultInjector(seed)
    for rule in rules:
        injector.add(rule)
    out = []
    for verb, resource, namespace in REQUESTS:
        decision = injector.decide(verb, resource, namespace)
        out.append((decision.error.code if decision.error else None, decision.latency_s))
    return out


def test_same_seed_same_faults_different_seed_different_faults() -> None:
    rule = FaultRule(error_rate=0.3)
    first, again, other = run(7, rule), run(7, rule), run(8, rule)
    assert first == again
    assert first != other
    codes = [code for code, _ in first if code]
    assert 15 < len(codes) < 60 and set(codes) == {500, 429, 504}


def test_reseed_restarts_the_sequence() -> None:
    injector = FaultInjector(3)
    injector.add(FaultRule(error_rate=0.5))
    first = [injector.decide("get", "pods").error is None for _ in range(30)]
    injector.reseed()
    assert [injector.decide("get", "pods").error is None for _ in range(30)] == first


@pytest.mark.parametrize(
    ("code", "reason", "message", "retry_after"),
    [
        pytest.param(429, "TooManyRequests", "Too many requests, please try again later.", 1, id="429"),
        pytest.param(500, "InternalError", "Internal error occurred: injected fault", None, id="500"),
        pytest.param(
            503, "ServiceUnavailable", "the server is currently unable to handle the request", None, id="503"
        ),
        pytest.param(
            504,
            "Timeout",
            "Timeout: request did not complete within requested timeout - injected fault",
            None,
            id="504",
        ),
    ],
)
def test_injected_errors_look_like_the_api_server(
    code: int, reason: str, message: str, retry_after: int | None
) -> None:
    injector = FaultInjector(1)
    injector.add(FaultRule(error_rate=1.0, status_codes=(code,)))
    error = injector.decide("list", "pods", "ns").error
    assert error is not None
    status = error.to_status()
    assert (status["code"], status["reason"], status["message"], error.retry_after) == (
        code,
        reason,
        message,
        retry_after,
    )
    if code == 429:
        assert status["details"] == {"retryAfterSeconds": 1}


def test_user_agent_pattern_aims_a_rule_at_one_client() -> None:
    injector = FaultInjector(1)
    injector.add(FaultRule(error_rate=1.0, user_agent="OpenAPI-Generator/*"))
    hub = injector.decide("get", "pods", "ns", "OpenAPI-Generator/31.1.0/python")
    kubectl = injector.decide("get", "pods", "ns", "kubectl/v1.32.4 (linux/amd64) kubernetes/59526cd")
    assert hub.error is not None and kubectl.error is None
    with pytest.raises(ValueError, match="'user_agent' must be a non-empty string"):
        FaultRule(user_agent="")


@pytest.mark.parametrize(
    ("rule", "request_", "hit"),
    [
        pytest.param(FaultRule(), ("get", "pods", "ns"), True, id="all-wildcards"),
        pytest.param(FaultRule(verb="create"), ("get", "pods", "ns"), False, id="verb-mismatch"),
        pytest.param(FaultRule(verb="create"), ("create", "pods", "ns"), True, id="verb-match"),
        pytest.param(
            FaultRule(resource="virtualmachine*"), ("get", "virtualmachineinstances", "ns"), True, id="glob"
        ),
        pytest.param(
            FaultRule(resource="pods"), ("get", "pods/log", "ns"), False, id="subresource-is-distinct"
        ),
        pytest.param(FaultRule(resource="pods/*"), ("get", "pods/log", "ns"), True, id="subresource-glob"),
        pytest.param(
            FaultRule(namespace="gpu-*"), ("get", "pods", "gpu-workspaces"), True, id="namespace-glob"
        ),
        pytest.param(
            FaultRule(namespace="gpu-*"), ("get", "nodes", None), False, id="cluster-scoped-vs-namespace"
        ),
        pytest.param(
            FaultRule(namespace="*"), ("get", "nodes", None), True, id="star-matches-cluster-scoped"
        ),
    ],
)
def test_rule_matching(rule: FaultRule, request_: tuple[str, str, str | None], hit: bool) -> None:
    rule.error_rate, rule.status_codes = 1.0, (500,)
    injector = FaultInjector(0)
    injector.add(rule)
    assert (injector.decide(*request_).error is not None) is hit


def test_count_limits_applications_and_latency_adds_up() -> None:
    injector = FaultInjector(0)
    limited = injector.add(FaultRule(verb="create", error_rate=1.0, status_codes=(429,), count=2))
    injector.add(FaultRule(latency_s=0.25))
    injector.add(FaultRule(resource="pods", latency_s=0.5, count=1))
    decisions = [injector.decide("create", "pods", "ns") for _ in range(3)]
    assert [d.error.code if d.error else None for d in decisions] == [429, 429, None]
    assert [d.latency_s for d in decisions] == [0.75, 0.25, 0.25]
    assert injector.remaining(limited) == 0


def test_add_remove_clear() -> None:
    injector = FaultInjector(0)
    first = injector.add(FaultRule(error_rate=1.0))
    second = injector.add(FaultRule(latency_s=1.0))
    assert list(injector.rules()) == [first, second]
    injector.remove(first)
    assert injector.decide("get", "pods") == FaultDecision(None, 1.0)
    with pytest.raises(KeyError):
        injector.remove(first)
    injector.clear()
    assert injector.rules() == {} and injector.decide("get", "pods") == FaultDecision()


def test_watch_faults() -> None:
    injector = FaultInjector(5)
    injector.add(FaultRule(resource="pods", watch_drop_after_events=3, watch_stall_s=2.0))
    injector.add(FaultRule(resource="nodes", watch_drop_rate=0.2, count=50))
    assert injector.decide_watch("pods", "ns") == WatchFault(3, 2.0)
    assert injector.decide_watch("services", "ns") == WatchFault()
    drops = [injector.decide_watch("nodes").drop_after_events for _ in range(50)]
    assert all(d is not None and d >= 1 for d in drops)
    assert 2 < sum(d for d in drops if d) / len(drops) < 10  # mean of a geometric draw with p=0.2 is 5
    assert injector.decide_watch("nodes") == WatchFault()  # count exhausted
    replay = FaultInjector(5)
    replay.add(FaultRule(resource="pods", watch_drop_after_events=3, watch_stall_s=2.0))
    replay.add(FaultRule(resource="nodes", watch_drop_rate=0.2, count=50))
    replay.decide_watch("pods", "ns")
    assert [replay.decide_watch("nodes").drop_after_events for _ in range(50)] == drops


def test_json_round_trip() -> None:
    injector = FaultInjector(42)
    rid = injector.add(FaultRule(verb="list", resource="pods", error_rate=0.5, status_codes=(503,), count=3))
    injector.decide("list", "pods", "ns")
    data = injector.to_json()
    assert data["seed"] == 42
    assert data["rules"][0] | {"remaining": None} == {
        "id": rid,
        "remaining": None,
        "verb": "list",
        "resource": "pods",
        "namespace": "*",
        "user_agent": "*",
        "error_rate": 0.5,
        "status_codes": [503],
        "latency_s": 0.0,
        "watch_drop_after_events": None,
        "watch_drop_rate": 0.0,
        "watch_stall_s": 0.0,
        "count": 3,
    }
    restored = FaultInjector.from_json(data)
    assert restored.to_json() == data


def test_from_json_minimal() -> None:
    injector = FaultInjector.from_json(
        {"seed": 9, "rules": [{"verb": "watch", "watch_drop_after_events": 0}]}
    )
    assert injector.decide_watch("pods") == WatchFault(0, 0.0)
    assert FaultInjector.from_json({}).to_json() == {"seed": 0, "rules": []}


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        pytest.param([], "must be a JSON object", id="not-an-object"),
        pytest.param(
            {"seed": 1, "rulez": []}, "unknown fault configuration key\\(s\\) rulez", id="unknown-top-key"
        ),
        pytest.param({"seed": "x"}, "'seed' must be an integer", id="bad-seed"),
        pytest.param({"rules": {}}, "'rules' must be a list", id="rules-not-list"),
        pytest.param(
            {"rules": [{"verbs": "get"}]},
            "rules\\[0\\]: unknown fault rule key\\(s\\) verbs",
            id="unknown-rule-key",
        ),
        pytest.param(
            {"rules": [{"error_rate": 1.5}]},
            "'error_rate' must be a number in \\[0, 1\\]",
            id="rate-too-high",
        ),
        pytest.param(
            {"rules": [{"watch_drop_rate": -0.1}]}, "'watch_drop_rate' must be a number", id="rate-negative"
        ),
        pytest.param({"rules": [{"error_rate": "0.5"}]}, "'error_rate' must be a number", id="rate-string"),
        pytest.param(
            {"rules": [{"status_codes": [418]}]},
            "'status_codes' must be a non-empty list of 429, 500",
            id="bad-code",
        ),
        pytest.param(
            {"rules": [{"status_codes": []}]}, "'status_codes' must be a non-empty list", id="no-codes"
        ),
        pytest.param(
            {"rules": [{"latency_s": -1}]}, "'latency_s' must be a finite number >= 0", id="negative-latency"
        ),
        pytest.param({"rules": [{"count": 0}]}, "'count' must be null or an integer >= 1", id="zero-count"),
        pytest.param(
            {"rules": [{"watch_drop_after_events": 1.5}]},
            "'watch_drop_after_events' must be null",
            id="float-drop",
        ),
        pytest.param({"rules": [{"verb": ""}]}, "'verb' must be a non-empty string", id="empty-verb"),
        pytest.param(
            {"rules": ["list"]}, "rules\\[0\\]: a fault rule must be a JSON object", id="rule-not-object"
        ),
        pytest.param(
            {"rules": [{"id": 1}, {"id": 1}]},
            "rules\\[1\\]: fault rule id 1 already exists",
            id="duplicate-id",
        ),
    ],
)
def test_from_json_errors(data: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        FaultInjector.from_json(data)


def test_unsupported_code_helper() -> None:
    with pytest.raises(ValueError, match="unsupported fault status code 418"):
        injected_error(418)
