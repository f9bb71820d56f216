"""ONE_ACTIVE: at most one active pod per user workspace."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.lifecycle.invariants import decide_extra_pods
from gpuworkspace_spawner.manifests import names
from gpuworkspace_spawner.manifests.names import WorkspaceIdentity
from tests.unit.manifests.scenarios import ALICE

NAMED = WorkspaceIdentity(user="alice", server="gpu", namespace="gpu-workspaces")
EMAIL = WorkspaceIdentity(user="alice@example.com", server="", namespace="gpu-workspaces")
# a user literally named like the hashed label value of alice@example.com: the same labels
TWIN = WorkspaceIdentity(user=EMAIL.selector_labels[names.LABEL_USER], server="", namespace="gpu-workspaces")


def pod(name: str, owner: WorkspaceIdentity | None = ALICE, **meta: Any) -> dict[str, Any]:
    labels = {**(owner.selector_labels if owner else {}), "component": "singleuser-server"}
    annotations = owner.name_annotations if owner else {}
    return {
        "metadata": {
            "name": name,
            "namespace": "gpu-workspaces",
            "labels": labels,
            "annotations": annotations,
            **meta,
        }
    }


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
        pytest.param(
            [{"metadata": {"name": "x", "labels": ALICE.selector_labels, "annotations": {}}}],
            [],
            id="no-exact-names-skipped",
        ),
        pytest.param(
            [{"metadata": {"name": "no-names", "labels": ALICE.selector_labels}}],
            [],
            id="labels-without-exact-names-skipped",
        ),
        pytest.param([pod("x", namespace="elsewhere")], [], id="other-namespace-skipped"),
        pytest.param([{"metadata": {"labels": ALICE.selector_labels}}], [], id="nameless-skipped"),
    ],
)
def test_decide_extra_pods(pods: list[dict[str, Any]], expected: list[str]) -> None:
    assert decide_extra_pods(pods, ALICE, keep_name="jupyter-alice") == expected


def test_a_colliding_label_never_makes_another_users_pod_extra() -> None:
    """Issue 14: ``alice-example.com-<hash>`` starting must not delete ``alice@example.com``'s pod."""
    assert TWIN.selector_labels == EMAIL.selector_labels  # the labels do collide...
    pods = [pod("jupyter-alice-40example-2ecom", EMAIL), pod("jupyter-twin", TWIN)]
    assert decide_extra_pods(pods, TWIN, keep_name="jupyter-twin") == []  # ...ownership does not
    assert decide_extra_pods(pods, EMAIL, keep_name="jupyter-alice-40example-2ecom") == []
