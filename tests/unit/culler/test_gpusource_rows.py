"""The culler's reading of the attribution service's rows: a job's pod is never evidence about a workspace."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.services.culler.gpusource import parse_workspace

ROW: dict[str, Any] = {
    "user": "alice",
    "server": "",
    "namespace": "gpu-workspaces",
    "profile": "h100-1",
    "gpu_mode": "exclusive",
    "gpu": {"allocated": 1.0, "util_percent": 97.0},
    "cpu": {"used": 3.5},
    "accounting": {"idle_allocated_gpu_seconds": 0.0},
}


@pytest.mark.parametrize(
    ("extra", "read"),
    [
        pytest.param({}, True, id="a-row-without-kind-is-a-workspace"),
        pytest.param({"kind": "workspace"}, True, id="workspace"),
        pytest.param({"kind": "job", "job": "alice-train-x7k2q"}, False, id="a-jobs-pod"),
        pytest.param({"kind": "something-newer"}, False, id="an-unknown-kind"),
    ],
)
def test_only_workspace_rows_become_evidence(extra: dict[str, Any], read: bool) -> None:
    """alice's job at 97 % on her default server's name must not keep her idle workspace from a stop."""
    got = parse_workspace({**ROW, **extra})
    if not read:
        assert got is None
        return
    assert got is not None
    key, mode, reading = got
    assert (key, mode, reading.gpu.util_percent) == (("alice", ""), "exclusive", 97.0)
