"""``make demo`` creates the Helm values' Kueue queues in the devcluster (hub_config/demo.py
``apply_kueue_queues``), so the demo's job profiles have their queue and priorities: a second start keeps
what is there, and Kueue finds the ClusterQueue usable (its flavors exist)."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from types import ModuleType

import pytest

from gpuworkspace_devcluster.resources import find
from gpuworkspace_devcluster.testing import BackgroundCluster

REPO = Path(__file__).resolve().parents[2]
CQS = find("kueue.x-k8s.io", "v1beta2", "clusterqueues")
LQS = find("kueue.x-k8s.io", "v1beta2", "localqueues")


def _demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpuws_demo", REPO / "hub_config" / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_demo_creates_the_job_profiles_queues_once(tmp_path: Path) -> None:
    demo = _demo()
    with BackgroundCluster(tmp_path / "state", simulate=True) as bg:
        made = demo.apply_kueue_queues(Path(bg.kubeconfig))
        assert sorted(made) == [
            "ClusterQueue/training",
            "LocalQueue/training",
            "ResourceFlavor/default-cpu",
            "ResourceFlavor/h100",
            "WorkloadPriorityClass/batch-high",
            "WorkloadPriorityClass/batch-low",
            "WorkloadPriorityClass/batch-normal",
        ]
        assert demo.apply_kueue_queues(Path(bg.kubeconfig)) == []  # a restarted demo keeps them
        store = bg.cluster.store
        assert store.get(LQS, "gpu-workspaces", "training")["spec"]["clusterQueue"] == "training"
        deadline = time.monotonic() + 20
        active: dict[str, str] = {}
        while time.monotonic() < deadline and active.get("status") != "True":
            conditions = (store.get(CQS, "", "training").get("status") or {}).get("conditions") or []
            active = next((c for c in conditions if c["type"] == "Active"), {})
            time.sleep(0.2)
        assert active.get("status") == "True", active  # Kueue can admit to it: its flavors exist


def test_the_demo_creates_the_team_directory_the_job_profiles_write_to(tmp_path: Path) -> None:
    """cpu-team's ~/team and the shipped job profiles' outputs are one claim: the demo makes it once, and
    an object the demo cannot create is named rather than sent."""
    demo = _demo()
    with BackgroundCluster(tmp_path / "state", simulate=True) as bg:
        assert demo.apply_team_directory(Path(bg.kubeconfig)) == ["PersistentVolumeClaim/gpuworkspace-team"]
        assert demo.apply_team_directory(Path(bg.kubeconfig)) == []
        claim = bg.cluster.store.get(
            find("", "v1", "persistentvolumeclaims"), "gpu-workspaces", "gpuworkspace-team"
        )
        assert claim["spec"]["accessModes"] == ["ReadWriteMany"], claim
        odd = tmp_path / "odd.yaml"
        odd.write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: gpu-workspaces}\n")
        with pytest.raises(demo.Failed, match="cannot create a v1/Secret"):
            demo.create_objects(Path(bg.kubeconfig), odd)
