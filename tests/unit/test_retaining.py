"""A server removal cut short by a hub shutdown (issue 19): reported, every retained disk audited, safe to repeat.

JupyterHub runs ``delete_forever`` in a task it does not await and cancels it when it shuts down
(``JupyterHub.shutdown_cancel_tasks``); here the same cancellation hits ``retain_server_disks`` while it
deletes the VM objects, after the home disk's retention was written. The cluster is a fake of the
gateway functions ``retaining`` calls.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuworkspace_spawner import retaining
from gpuworkspace_spawner.k8s import NotFound, custom, gateway
from gpuworkspace_spawner.manifests.names import DISK_HOME, DISK_ROOT, LABEL_DISK, WorkspaceIdentity

IDENTITY = WorkspaceIdentity(user="ann", server="v1", namespace="ws")
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


class Cluster:
    """The server's home claim and root DataVolume; deleting the VM blocks until ``vm_gone`` is set."""

    def __init__(self) -> None:
        self.objects = {
            ("PersistentVolumeClaim", "home-ann--v1"): self._disk("home-ann--v1", DISK_HOME),
            ("DataVolume", "ws-ann--v1"): self._disk("ws-ann--v1", DISK_ROOT),
        }
        self.patched: list[str] = []
        self.deleted: list[str] = []
        self.deleting, self.vm_gone = asyncio.Event(), asyncio.Event()

    @staticmethod
    def _disk(name: str, disk: str) -> dict[str, Any]:
        labels = {**IDENTITY.selector_labels, LABEL_DISK: disk}
        return {"metadata": {"name": name, "labels": labels, "annotations": dict(IDENTITY.name_annotations)}}

    def _items(self, kind: str) -> list[dict[str, Any]]:
        return [obj for (k, _), obj in self.objects.items() if k == kind]

    def _patch(self, kind: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        obj = self.objects.get((kind, name))
        if obj is None:
            raise NotFound(404, f"{kind} {name} not found", "NotFound")
        for key in ("labels", "annotations"):
            obj["metadata"][key].update(patch["metadata"].get(key) or {})
        self.patched.append(f"{kind} {name}")
        return obj

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        async def list_pvcs(api: Any, ns: str, selector: str, **_: Any) -> dict[str, Any]:
            return {"items": self._items("PersistentVolumeClaim")}

        async def list_namespaced(api: Any, kind: Any, ns: str, **_: Any) -> list[dict[str, Any]]:
            return self._items("DataVolume")

        async def patch_pvc(api: Any, ns: str, name: str, patch: dict[str, Any], **_: Any) -> dict[str, Any]:
            return self._patch("PersistentVolumeClaim", name, patch)

        async def patch(api: Any, kind: Any, ns: str, name: str, body: dict[str, Any], **_: Any) -> Any:
            return self._patch("DataVolume", name, body)

        async def delete_vm(api: Any, kind: Any, ns: str, name: str, **_: Any) -> None:
            self.deleting.set()
            await self.vm_gone.wait()
            self.deleted.append(f"vm {name}")

        async def delete_core(ns: str, kind: str, name: str, **_: Any) -> None:
            self.deleted.append(f"{kind} {name}")

        monkeypatch.setattr(gateway, "list_pvcs", list_pvcs)
        monkeypatch.setattr(gateway, "patch_pvc", patch_pvc)
        monkeypatch.setattr(custom, "custom_api", lambda: None)
        monkeypatch.setattr(custom, "list_namespaced", list_namespaced)
        monkeypatch.setattr(custom, "patch", patch)
        monkeypatch.setattr(custom, "delete_unconditionally", delete_vm)
        monkeypatch.setattr(custom, "delete_core", delete_core)


class Spawner:
    """What ``retaining`` uses of GPUWorkspaceSpawner."""

    namespace, api, k8s_api_request_timeout, _log_name = "ws", None, 5, "ann:v1"
    log = logging.getLogger("test-retaining")

    def __init__(self) -> None:
        self.audited: list[tuple[str, str, str]] = []

    def _identity(self) -> WorkspaceIdentity:
        return IDENTITY

    async def _audit(self, action: str, kind: str, name: str, message: str, obj: Any = None) -> None:
        self.audited.append((action, f"{kind} {name}", message))


async def _removal_cut_short(cluster: Cluster, spawner: Spawner) -> None:
    """The hub's task runs the removal; the hub shuts down while the VM objects are being deleted."""
    task = asyncio.ensure_future(
        retaining.retain_server_disks(spawner, NOW, "server-deleted", hub_days=7, home_shared=False, vm=True)
    )
    deleting = asyncio.ensure_future(cluster.deleting.wait())
    await asyncio.wait([task, deleting], timeout=30, return_when=asyncio.FIRST_COMPLETED)
    assert deleting.done(), f"the removal did not reach the VM objects: {task}"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_removal_cut_short_by_a_hub_shutdown_is_reported_with_what_it_retained(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cluster, spawner = Cluster(), Spawner()
    cluster.install(monkeypatch)

    with caplog.at_level(logging.WARNING, logger="test-retaining"):
        asyncio.run(_removal_cut_short(cluster, spawner))

    assert cluster.deleted == []  # the VM objects were not deleted: the cancellation came first
    # each disk retained before the cancellation has its audit record
    assert [(a, obj) for a, obj, _ in spawner.audited] == [
        ("disk-retained", "PersistentVolumeClaim home-ann--v1"),
        ("disk-retained", "DataVolume ws-ann--v1"),
    ]
    [report] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert report.startswith("The removal of ann:v1 was cut short (the hub is shutting down)")
    assert "Disks retained so far: PersistentVolumeClaim home-ann--v1, DataVolume ws-ann--v1." in report
    assert "Delete the server again" in report


def test_repeating_a_removal_cut_short_finishes_it_without_extending_retention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster, first = Cluster(), Spawner()
    cluster.install(monkeypatch)
    asyncio.run(_removal_cut_short(cluster, first))
    stamped = {k: dict(o["metadata"]["annotations"]) for k, o in cluster.objects.items()}

    again = Spawner()
    cluster.vm_gone.set()
    later = NOW.replace(hour=13)
    retained = asyncio.run(
        retaining.retain_server_disks(again, later, "server-deleted", hub_days=7, home_shared=False, vm=True)
    )

    assert retained == []  # both were retained by the first try: skipped, not stamped again
    assert {k: o["metadata"]["annotations"] for k, o in cluster.objects.items()} == stamped
    assert cluster.deleted == ["vm ws-ann--v1", "service ws-ann--v1", "secret ws-ann--v1-cloudinit"]
