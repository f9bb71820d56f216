"""The builder and decision API the spawner is written against: changing it must be deliberate."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from gpuworkspace_spawner.lifecycle import invariants, retention, spawning
from gpuworkspace_spawner.manifests import names, networkpolicy, pod, pvc

SIGNATURES: list[tuple[Callable[..., Any], str]] = [
    (names.label_value, "(text: 'str') -> 'str'"),
    (pod.build_workspace_pod, "(pod: 'Mapping[str, Any]', ws: 'WorkspaceContext') -> 'dict[str, Any]'"),
    (pvc.build_home_pvc, "(ws: 'WorkspaceContext') -> 'dict[str, Any]'"),
    (
        networkpolicy.build_network_policies,
        "(network: 'NetworkSettings', scope: 'PolicyScope | None' = None) -> 'list[dict[str, Any]]'",
    ),
    (
        networkpolicy.render_network_policies,
        "(network: 'NetworkSettings', scope: 'PolicyScope | None' = None) -> 'str'",
    ),
    (
        pvc.build_retain_patch,
        "(*, retain_until: 'datetime', now: 'datetime', why: 'str') -> 'dict[str, Any]'",
    ),
    (pvc.build_adopt_patch, "(ws: 'WorkspaceContext') -> 'dict[str, Any]'"),
    (pvc.format_time, "(dt: 'datetime') -> 'str'"),
    (pvc.parse_time, "(text: 'object') -> 'datetime | None'"),
    (
        retention.decide_home_disk,
        "(pvc: 'Mapping[str, Any] | None', identity: 'WorkspaceIdentity') -> 'DiskVerdict'",
    ),
    (
        retention.decide_reclaim,
        "(pvc: 'Mapping[str, Any]', *, now: 'datetime', in_use: 'bool') -> 'ReclaimVerdict'",
    ),
    (retention.retain_until, "(now: 'datetime', retention: 'timedelta') -> 'datetime'"),
    (
        spawning.build_progress,
        "(pvc: 'Mapping[str, Any] | None', pod: 'Mapping[str, Any] | None', "
        "events: 'Sequence[Mapping[str, Any]]') -> 'ProgressStep'",
    ),
    (
        spawning.decide_spawn_failure,
        "(pvc: 'Mapping[str, Any] | None', pod: 'Mapping[str, Any] | None', "
        "events: 'Sequence[Mapping[str, Any]]', *, elapsed_s: 'float', unschedulable_after_s: 'float', "
        "attach_failure_after_s: 'float', timeout_after_s: 'float | None' = None) -> 'SpawnFailure | None'",
    ),
    (spawning.classify_api_error, "(status: 'int', message: 'str') -> 'SpawnFailure | None'"),
    (
        invariants.decide_extra_pods,
        "(pods: 'Sequence[Mapping[str, Any]]', identity: 'WorkspaceIdentity', keep_name: 'str') -> 'list[str]'",
    ),
]


@pytest.mark.parametrize(
    ("function", "signature"), [pytest.param(f, s, id=f.__name__) for f, s in SIGNATURES]
)
def test_signature(function: Callable[..., Any], signature: str) -> None:
    assert str(inspect.signature(function)) == signature


def test_label_keys() -> None:
    assert names.LABEL_USER == "gpuworkspace.dev/user"
    assert names.LABEL_SERVER == "gpuworkspace.dev/server"
    assert names.LABEL_DISK_STATE == "gpuworkspace.dev/disk-state"
    assert (names.DISK_ACTIVE, names.DISK_RETAINED) == ("active", "retained")
    assert names.ANN_RETAIN_UNTIL == "gpuworkspace.dev/retain-until"
    assert names.ANN_USERNAME == "gpuworkspace.dev/username"
