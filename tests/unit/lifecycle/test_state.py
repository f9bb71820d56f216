"""Decision table for the workspace state machine (seed 000 §10), both runtimes."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuworkspace_spawner.lifecycle.state import (
    ALLOWED_TRANSITIONS,
    STATES,
    WorkspaceState,
    derive_state,
    is_allowed,
    to_json,
)
from gpuworkspace_spawner.manifests.names import ANN_RETAIN_UNTIL, LABEL_DISK_STATE

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DELETED = "2026-03-01T11:59:00Z"


def disk(
    phase: str = "Bound", *, retained: str | None = None, deleting: bool = False, name: str = "disk-alice"
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {}, "annotations": {}}
    if retained is not None:
        meta["labels"][LABEL_DISK_STATE] = "retained"
        if retained:
            meta["annotations"][ANN_RETAIN_UNTIL] = retained
    if deleting:
        meta["deletionTimestamp"] = DELETED
    return {"metadata": meta, "status": {"phase": phase}}


def dv(phase: str = "Succeeded", progress: str = "100.0%", message: str | None = None) -> dict[str, Any]:
    conditions = [{"type": "Running", "status": "False", "message": message}] if message else []
    return {
        "metadata": {"name": "disk-alice"},
        "status": {"phase": phase, "progress": progress, "conditions": conditions},
    }


def pod(
    *,
    ready: bool = False,
    phase: str = "Running",
    deleting: bool = False,
    crash: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "jupyter-alice"}
    if deleting:
        meta["deletionTimestamp"] = DELETED
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if crash:
        status["containerStatuses"] = [
            {"name": "notebook", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
        ]
    return {"metadata": meta, "spec": {"nodeName": "gpu-1"}, "status": status}


def vm(strategy: str | None = "Always", *, running: bool | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if strategy:
        spec["runStrategy"] = strategy
    if running is not None:
        spec["running"] = running
    return {"metadata": {"name": "notebook-alice"}, "spec": spec}


def vmi(phase: str = "Running", *, ready: bool = False, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "notebook-alice"}
    if deleting:
        meta["deletionTimestamp"] = DELETED
    return {
        "metadata": meta,
        "status": {
            "phase": phase,
            "nodeName": "gpu-1",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def state(runtime: str, **objects: Any) -> WorkspaceState:
    args: dict[str, Any] = {"disk": None, "data_volume": None, "pod": None, "vm": None, "vmi": None}
    args.update(objects)
    return derive_state(runtime=runtime, now=NOW, **args)


CONTAINER = [
    pytest.param({}, "Requested", "no disk yet", id="requested"),
    pytest.param({"disk": disk("Pending")}, "ProvisioningDisk", "is Pending", id="provisioning"),
    pytest.param({"disk": disk("Pending"), "pod": pod()}, "ProvisioningDisk", "Pending", id="wffc-with-pod"),
    pytest.param({"disk": disk()}, "Stopped", "no workspace pod", id="stopped"),
    pytest.param({"disk": disk(), "pod": pod(phase="Pending")}, "Starting", "Pending", id="starting"),
    pytest.param({"disk": disk(), "pod": pod()}, "Starting", "not ready", id="running-not-ready"),
    pytest.param({"disk": disk(), "pod": pod(ready=True)}, "Running", "is ready", id="running"),
    pytest.param({"disk": disk(), "pod": pod(deleting=True)}, "Stopping", "terminating", id="stopping"),
    pytest.param({"disk": disk(), "pod": pod(phase="Succeeded")}, "Stopped", "exited", id="pod-exited"),
    pytest.param(
        {"disk": disk(retained="2026-04-01T00:00:00Z")}, "Retained", "until 2026-04-01", id="retained"
    ),
    pytest.param(
        {"disk": disk(retained="2026-04-01T00:00:00Z"), "pod": pod(ready=True)},
        "Retained",
        "retained",
        id="retained-outranks-compute",
    ),
    pytest.param({"disk": disk(deleting=True)}, "DeletingDisk", "being deleted", id="deleting-disk"),
    pytest.param(
        {"disk": disk(retained="x", deleting=True)}, "DeletingDisk", "being deleted", id="deleting-retained"
    ),
    pytest.param({"disk": disk("Lost")}, "Degraded", "is Lost", id="claim-lost"),
    pytest.param({"disk": disk(), "pod": pod(phase="Failed")}, "Degraded", "failed", id="pod-failed"),
    pytest.param({"disk": disk(), "pod": pod(crash=True)}, "Degraded", "CrashLoopBackOff", id="crash-loop"),
    pytest.param(
        {"disk": disk(), "pod": pod(ready=True), "extra_compute": 1},
        "Degraded",
        "1 more active pod/VMI",
        id="one-active-violated",
    ),
    pytest.param({"pod": pod()}, "Degraded", "disk does not", id="pod-without-disk"),
    pytest.param(
        {"disk": disk(), "vm": vm(), "vmi": vmi(ready=True), "data_volume": dv("Failed")},
        "Stopped",
        "no workspace pod",
        id="vm-objects-ignored",
    ),
]

VM = [
    pytest.param({}, "Requested", "no disk yet", id="requested"),
    pytest.param(
        {"data_volume": dv("CloneInProgress", "45.00%")},
        "ProvisioningDisk",
        "CloneInProgress",
        id="cloning-before-pvc",
    ),
    pytest.param(
        {"disk": disk("Pending"), "data_volume": dv("CloneInProgress", "45.00%")},
        "ProvisioningDisk",
        "CloneInProgress",
        id="cloning",
    ),
    pytest.param(
        {"disk": disk("Pending"), "data_volume": dv("WaitForFirstConsumer", "N/A"), "vm": vm("Halted")},
        "Stopped",
        "provisioned at the first start",
        id="wffc-never-started",
    ),
    pytest.param(
        {"disk": disk("Pending"), "data_volume": dv("WaitForFirstConsumer", "N/A"), "vm": vm()},
        "ProvisioningDisk",
        "WaitForFirstConsumer",
        id="wffc-starting",
    ),
    pytest.param({"disk": disk(), "data_volume": dv()}, "Stopped", "no VirtualMachine", id="vm-absent"),
    pytest.param({"disk": disk()}, "Stopped", "no VirtualMachine", id="dv-garbage-collected"),
    pytest.param({"disk": disk(), "data_volume": dv(), "vm": vm("Halted")}, "Stopped", "Halted", id="halted"),
    pytest.param(
        {"disk": disk(), "data_volume": dv(), "vm": vm(None, running=False)},
        "Stopped",
        "Halted",
        id="running-false",
    ),
    pytest.param({"disk": disk(), "data_volume": dv(), "vm": vm()}, "Starting", "no VMI yet", id="no-vmi"),
    pytest.param(
        {"disk": disk(), "data_volume": dv(), "vm": vm(), "vmi": vmi("Scheduling")},
        "Starting",
        "Scheduling",
        id="scheduling",
    ),
    pytest.param(
        {"disk": disk(), "data_volume": dv(), "vm": vm(), "vmi": vmi()},
        "Starting",
        "not ready",
        id="booting",
    ),
    pytest.param(
        {"disk": disk(), "data_volume": dv(), "vm": vm(), "vmi": vmi(ready=True)},
        "Running",
        "is ready",
        id="running",
    ),
    pytest.param(
        {"disk": disk(), "vm": vm(None, running=True), "vmi": vmi(ready=True)},
        "Running",
        "is ready",
        id="running-true",
    ),
    pytest.param(
        {"disk": disk(), "data_volume": dv(), "vm": vm("Halted"), "vmi": vmi(ready=True)},
        "Stopping",
        "Halted",
        id="stopping",
    ),
    pytest.param(
        {"disk": disk(), "vm": vm(), "vmi": vmi(ready=True, deleting=True)},
        "Stopping",
        "shutting down",
        id="vmi-deleting",
    ),
    pytest.param(
        {"disk": disk(), "vmi": vmi(ready=True)}, "Stopping", "outlives its VM", id="vmi-without-vm"
    ),
    pytest.param(
        {"disk": disk(), "vm": vm("Manual"), "vmi": vmi(ready=True)}, "Running", "is ready", id="manual"
    ),
    pytest.param(
        {"disk": disk(retained="2026-04-01T00:00:00Z"), "data_volume": dv(), "vm": vm("Halted")},
        "Retained",
        "until 2026-04-01",
        id="retained",
    ),
    pytest.param(
        {"disk": disk(deleting=True), "data_volume": dv()}, "DeletingDisk", "being deleted", id="deleting"
    ),
    pytest.param(
        {"disk": disk("Pending"), "data_volume": dv("Failed", "N/A", "clone source not found")},
        "Degraded",
        "failed: clone source not found",
        id="dv-failed",
    ),
    pytest.param({"disk": disk("Lost"), "data_volume": dv()}, "Degraded", "Lost", id="claim-lost"),
    pytest.param(
        {"disk": disk(), "data_volume": dv(), "vm": vm(), "vmi": vmi("Failed")},
        "Degraded",
        "VMI notebook-alice failed",
        id="vmi-failed",
    ),
    pytest.param(
        {"disk": disk(), "vm": vm(), "vmi": vmi(ready=True), "extra_compute": 2},
        "Degraded",
        "2 more active",
        id="one-active-violated",
    ),
    pytest.param({"vm": vm("Halted")}, "Degraded", "disk does not", id="vm-without-disk"),
    pytest.param(
        {"disk": disk(), "data_volume": dv(), "pod": pod(phase="Failed")},
        "Stopped",
        "no VirtualMachine",
        id="container-pod-ignored",
    ),
]


@pytest.mark.parametrize(("objects", "expected", "reason"), CONTAINER)
def test_container_states(objects: dict[str, Any], expected: str, reason: str) -> None:
    got = state("container", **objects)
    assert (got.state, reason in got.reason) == (expected, True), got.reason


@pytest.mark.parametrize(("objects", "expected", "reason"), VM)
def test_vm_states(objects: dict[str, Any], expected: str, reason: str) -> None:
    got = state("vm", **objects)
    assert (got.state, reason in got.reason) == (expected, True), got.reason


@pytest.mark.parametrize(
    ("runtime", "cases"),
    [pytest.param("container", CONTAINER, id="container"), pytest.param("vm", VM, id="vm")],
)
def test_every_state_is_covered(runtime: str, cases: list[Any]) -> None:
    assert {case.values[1] for case in cases} == set(STATES)


@pytest.mark.parametrize(
    ("retain", "reclaimable", "until"),
    [
        pytest.param("2026-04-01T00:00:00Z", False, "2026-04-01T00:00:00Z", id="in-retention"),
        pytest.param("2026-02-01T00:00:00Z", True, "2026-02-01T00:00:00Z", id="expired"),
        pytest.param("", False, None, id="no-annotation"),
        pytest.param("next tuesday", False, "next tuesday", id="unparseable"),
    ],
)
def test_retained_detail(retain: str, reclaimable: bool, until: str | None) -> None:
    got = state("container", disk=disk(retained=retain))
    assert got.state == "Retained"
    assert got.detail == {"retainUntil": until, "reclaimable": reclaimable}


def test_provisioning_detail_has_progress() -> None:
    got = state("vm", disk=disk("Pending"), data_volume=dv("CloneInProgress", "45.00%"))
    assert got.detail == {"phase": "CloneInProgress", "progress": "45.00%"}


def test_degraded_detail_names_the_cause() -> None:
    assert state("vm", disk=disk(), data_volume=dv("Failed")).detail == {"cause": "DataVolumeFailed"}
    assert state("container", disk=disk(), extra_compute=1).detail == {"cause": "OneActive", "extra": 1}


def test_to_json_is_stable_and_json_able() -> None:
    got = state("vm", disk=disk(), vm=vm(), vmi=vmi(ready=True))
    data = to_json(got)
    assert list(data) == ["state", "reason", "detail"]
    assert data["state"] == "Running"
    assert data["detail"] == {"runStrategy": "Always", "phase": "Running", "node": "gpu-1"}
    assert json.loads(json.dumps(data)) == data


SEED_CHAIN = [
    "Requested",
    "ProvisioningDisk",
    "Stopped",
    "Starting",
    "Running",
    "Stopping",
    "Stopped",
    "Retained",
    "DeletingDisk",
]


@pytest.mark.parametrize(
    ("a", "b", "allowed"),
    [
        *(pytest.param(a, b, True, id=f"seed-{a}-{b}") for a, b in itertools.pairwise(SEED_CHAIN)),
        pytest.param("Retained", "Stopped", True, id="adopt-retained"),
        pytest.param("Running", "Stopped", True, id="pod-vanished"),
        pytest.param("Running", "Running", True, id="stay"),
        pytest.param("Running", "Degraded", True, id="to-degraded"),
        pytest.param("Degraded", "Running", True, id="from-degraded"),
        pytest.param("DeletingDisk", "Degraded", True, id="deleting-to-degraded"),
        pytest.param("Requested", "Running", False, id="requested-to-running"),
        pytest.param("Running", "DeletingDisk", False, id="running-to-deleting"),
        pytest.param("DeletingDisk", "Running", False, id="deleting-to-running"),
        pytest.param("Stopped", "DeletingDisk", False, id="delete-skips-retention"),
        pytest.param("Running", "Retained", False, id="running-to-retained"),
    ],
)
def test_is_allowed(a: Any, b: Any, allowed: bool) -> None:
    assert is_allowed(a, b) is allowed


def test_degraded_reachable_from_and_to_every_state() -> None:
    for s in STATES:
        assert is_allowed(s, "Degraded") and is_allowed("Degraded", s)
    assert all(a != b for a, b in ALLOWED_TRANSITIONS)
