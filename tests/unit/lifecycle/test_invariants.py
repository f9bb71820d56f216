"""ONE_ACTIVE: at most one active pod per user workspace."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.lifecycle.invariants import decide_extra_pods
from gpuworkspace_spawner.manifests.names import WorkspaceIdentity
from tests.unit.manifests.scenarios import ALICE

NAMED = WorkspaceIdentity(user="alice", server="gpu", namespace="gpu-workspaces")


def pod(name: str, owner: WorkspaceIdentity | None = ALICE, **meta: Any) -> dict[str, Any]:
    labels = {**(owner.selector_labels if owner else {}), "component": "singleuser-server"}
    return {"metadata": {"name": name, "namespace": "gpu-workspaces", "labels": labels, **meta}}


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param([], [], id="none"),
        pytest.param([pod("jupyter-alice")], [], id="only-the-kept-one"),
        pytest.param([pod("jupyter-alice"), pod("jupyter-alice-old")], ["jupyter-alice-old"], id="one-extra"),
        pytest.param([pod("z"), pod("a")], ["a", "z"], id="sorted"),
        pytest.param([pod("old", deletionTimestamp="2026-03-01T00:00:00Z")], [], id="terminating-skipped"),
        pytest.param([pod("named", NAMED)], [], id="other-server-skipped"),
        pytest.param(
            [pod("bob", WorkspaceIdentity("bob", "", "gpu-workspaces"))], [], id="other-user-skipped"
        ),
        pytest.param([pod("unlabelled", None)], [], id="unlabelled-skipped"),
        pytest.param([pod("x", namespace="elsewhere")], [], id="other-namespace-skipped"),
        pytest.param([{"metadata": {"labels": ALICE.selector_labels}}], [], id="nameless-skipped"),
    ],
)
def test_decide_extra_pods(pods: list[dict[str, Any]], expected: list[str]) -> None:
    assert decide_extra_pods(pods, ALICE, keep_name="jupyter-alice") == expected
