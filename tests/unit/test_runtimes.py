"""Choosing a runtime (issue 19): by kind, with a clear error for an unknown one, and which runtimes of
other kinds a start stops first (one active compute per workspace)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from gpuworkspace_spawner.manifests.names import WorkspaceIdentity
from gpuworkspace_spawner.runtimes import Ports, RuntimeContext, choose_evicted, choose_runtime

CONTEXT = RuntimeContext(
    identity=WorkspaceIdentity(user="ann", server="v1", namespace="ws"),
    workspace=None,
    pod_name="jupyter-ann--v1",
    home_claim="home-ann--v1",
    request_timeout=10,
    retry_timeout=30,
    unschedulable_timeout=60,
    attach_failure_timeout=120,
    retention_days=30,
)
PORTS = cast(Ports, object())  # choosing calls no port


@pytest.mark.parametrize("kind", ["container", "vm"])
def test_a_runtime_is_chosen_by_kind(kind: str) -> None:
    assert choose_runtime(kind, CONTEXT, PORTS).kind == kind


def test_an_unknown_runtime_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown workspace runtime 'job' \(known: container, vm\)"):
        choose_runtime("job", CONTEXT, PORTS)


@pytest.mark.parametrize(
    ("kind", "last", "evicted"),
    [
        pytest.param("container", "vm", ["vm"], id="container after a vm: the vm is halted"),
        pytest.param("container", "container", [], id="container again: no vm watch at all"),
        pytest.param("container", None, [], id="first container start"),
        pytest.param("vm", None, ["container"], id="first vm start: container pods are removed"),
        pytest.param("vm", "vm", ["container"], id="vm again: container pods are still removed"),
    ],
)
def test_a_start_stops_the_compute_of_other_kinds(kind: str, last: Any, evicted: list[str]) -> None:
    assert [r.kind for r in choose_evicted(kind, last, CONTEXT, PORTS)] == evicted
