"""What the hub's poll sees of a VM workspace, including a start the hub lost in a restart."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_spawner.runtimes.vm import vm_poll_status


def vm(strategy: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "ws-ada--v1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    return {"metadata": meta, "spec": {"runStrategy": strategy}}


def vmi(phase: str | None, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "ws-ada--v1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    return {"metadata": meta, "status": {"phase": phase} if phase else {}}


@pytest.mark.parametrize(
    ("the_vm", "the_vmi", "running"),
    [
        pytest.param(vm("Always"), None, True, id="meant-to-run-no-vmi-yet (a start the hub lost)"),
        pytest.param(vm("Always"), vmi("Failed"), True, id="kubevirt-restarts-a-failed-vmi"),
        pytest.param(vm("Always"), vmi("Running"), True, id="running"),
        pytest.param(vm("Halted"), None, False, id="halted"),
        pytest.param(vm("Halted"), vmi("Running"), True, id="halting-vmi-still-up"),
        pytest.param(vm("Halted"), vmi("Succeeded"), False, id="halted-vmi-done"),
        pytest.param(vm("Always", deleting=True), None, False, id="vm-being-deleted"),
        pytest.param(None, None, False, id="nothing"),
        pytest.param(None, vmi(None), True, id="vmi-without-phase-is-pending"),
        pytest.param(None, vmi("Running", deleting=True), False, id="vmi-being-deleted"),
    ],
)
def test_poll(the_vm: dict[str, Any] | None, the_vmi: dict[str, Any] | None, running: bool) -> None:
    assert (vm_poll_status(the_vm, the_vmi) is None) is running
