"""Conformance: unmodified kubectl against DIR/kubeconfig (get/describe/apply/patch/delete/wait/get -w)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from gpuworkspace_devcluster.faults import FaultRule
from gpuworkspace_devcluster.testing import BackgroundCluster
from gpuworkspace_devcluster.validation import find_shared_schemas

from .conftest import Kubectl

pytestmark = pytest.mark.kubectl
NS = "gpu-workspaces"

# The manifests of seed 000 §7-8, verbatim apart from indentation.
SEED_MANIFESTS = {
    "pvc": """
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: user01-home
  namespace: gpu-workspaces
  labels:
    platform.aik8s.run/owner: user01
spec:
  accessModes:
  - ReadWriteOnce
  storageClassName: ceph-rbd
  resources:
    requests:
      storage: 200Gi
""",
    "dv": """
apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata:
  name: notebook-user01-root
  namespace: gpu-workspaces
  labels:
    platform.aik8s.run/owner: user01
spec:
  sourceRef:
    kind: DataSource
    name: ubuntu-24-04-gpu
    namespace: vm-images
  storage:
    accessModes:
    - ReadWriteOnce
    storageClassName: ceph-rbd
    resources:
      requests:
        storage: 200Gi
""",
    "vm": """
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: notebook-user01
  namespace: gpu-workspaces
  labels:
    platform.aik8s.run/owner: user01
spec:
  runStrategy: Halted
  template:
    metadata:
      labels:
        kubevirt.io/domain: notebook-user01
        platform.aik8s.run/owner: user01
    spec:
      terminationGracePeriodSeconds: 120
      domain:
        cpu:
          cores: 16
        resources:
          requests:
            memory: 64Gi
        devices:
          disks:
          - name: root
            disk:
              bus: virtio
          interfaces:
          - name: default
            masquerade: {}
      networks:
      - name: default
        pod: {}
      volumes:
      - name: root
        dataVolume:
          name: notebook-user01-root
""",
    "svc": """
apiVersion: v1
kind: Service
metadata:
  name: notebook-user01
  namespace: gpu-workspaces
spec:
  selector:
    kubevirt.io/domain: notebook-user01
  ports:
  - name: code-server
    port: 8080
    targetPort: 8080
  - name: jupyter
    port: 8888
    targetPort: 8888
""",
}
MISSPELT = {
    "pvc": ("storageClassName", "storageClasName", "spec.storageClasName"),
    "dv": ("storageClassName", "storageClasName", "spec.storage.storageClasName"),
    "vm": ("runStrategy", "runStategy", "spec.runStategy"),
    "svc": ("targetPort: 8080", "tagetPort: 8080", "spec.ports[0].tagetPort"),
}
NEEDS_SHARED = {"dv", "vm"}


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return str(path)


@pytest.fixture
def ns(kubectl: Kubectl) -> str:
    kubectl("create", "namespace", NS)  # a typed create: a protobuf body (test_kubectl_generators.py)
    return NS


@pytest.mark.parametrize("kind", list(SEED_MANIFESTS))
def test_apply_validate_strict_accepts_seed_manifests_and_names_misspelt_fields(
    kubectl: Kubectl, ns: str, tmp_path: Path, kind: str
) -> None:
    if kind in NEEDS_SHARED and find_shared_schemas() is None:
        pytest.skip("../shared/schemas is absent: KubeVirt/CDI kinds are accepted unvalidated")
    good = _write(tmp_path, kind, SEED_MANIFESTS[kind])
    out = kubectl("apply", "--validate=strict", "-f", good)
    assert "created" in out.stdout
    right, wrong, path = MISSPELT[kind]
    bad_text = SEED_MANIFESTS[kind].replace(right, wrong, 1).replace("user01", "user02")
    bad = kubectl("apply", "--validate=strict", "-f", _write(tmp_path, f"{kind}-bad", bad_text), check=False)
    assert bad.returncode != 0
    assert f'unknown field "{path}"' in bad.stderr


def test_get_tables_and_describe(kubectl: Kubectl, ns: str, tmp_path: Path) -> None:
    kubectl("apply", "-f", _write(tmp_path, "pvc", SEED_MANIFESTS["pvc"]))
    kubectl("apply", "-f", _write(tmp_path, "svc", SEED_MANIFESTS["svc"]))
    pvc = kubectl("get", "pvc", "-n", ns).stdout.splitlines()
    assert pvc[0].split()[:6] == ["NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS", "MODES"]
    assert pvc[1].split()[:3] == ["user01-home", "Pending", "ceph-rbd"]
    svc = kubectl("get", "svc", "-n", ns, "-o", "wide").stdout
    assert "8080/TCP,8888/TCP" in svc and "kubevirt.io/domain=notebook-user01" in svc
    described = kubectl("describe", "pvc", "user01-home", "-n", ns).stdout
    assert "StorageClass:  ceph-rbd" in described and "platform.aik8s.run/owner=user01" in described
    nodes = kubectl("get", "nodes").stdout + kubectl("get", "nodes").stderr
    assert "No resources found" in nodes


def test_patch_label_annotate_delete(kubectl: Kubectl, ns: str, tmp_path: Path) -> None:
    kubectl("apply", "-f", _write(tmp_path, "pvc", SEED_MANIFESTS["pvc"]))
    kubectl("label", "pvc", "user01-home", "-n", ns, "tier=gold")
    kubectl("annotate", "pvc", "user01-home", "-n", ns, "note=keep")
    kubectl(
        "patch",
        "pvc",
        "user01-home",
        "-n",
        ns,
        "--type=json",
        "-p",
        '[{"op":"add","path":"/metadata/labels/team","value":"vision"}]',
    )
    obj = json.loads(kubectl("get", "pvc", "user01-home", "-n", ns, "-o", "json").stdout)
    assert obj["metadata"]["labels"].items() >= {"tier": "gold", "team": "vision"}.items()
    assert obj["metadata"]["annotations"]["note"] == "keep"
    out = kubectl("delete", "pvc", "user01-home", "-n", ns)
    assert 'persistentvolumeclaim "user01-home" deleted' in out.stdout
    missing = kubectl("get", "pvc", "user01-home", "-n", ns, check=False)
    assert missing.returncode == 1
    assert 'persistentvolumeclaims "user01-home" not found' in missing.stderr


def test_wait_for_condition(kubectl: Kubectl, bg: BackgroundCluster, ns: str, tmp_path: Path) -> None:
    kubectl("apply", "-f", _write(tmp_path, "pvc", SEED_MANIFESTS["pvc"]))
    waiter = subprocess.Popen(
        ["kubectl", "wait", "--for=condition=Resizing", "pvc/user01-home", "-n", ns, "--timeout=30s"],
        env=kubectl.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)
    kubectl(
        "patch",
        "pvc",
        "user01-home",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"conditions":[{"type":"Resizing","status":"True"}]}}',
    )
    out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 0, err
    assert "condition met" in out


def test_get_watch_prints_table_rows(kubectl: Kubectl, ns: str, tmp_path: Path) -> None:
    kubectl("apply", "-f", _write(tmp_path, "pvc", SEED_MANIFESTS["pvc"]))
    watcher = subprocess.Popen(
        ["kubectl", "get", "pvc", "-n", ns, "-w"],
        env=kubectl.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.5)
        kubectl(
            "patch",
            "pvc",
            "user01-home",
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            '{"status":{"phase":"Bound"}}',
        )
        time.sleep(1.5)
    finally:
        watcher.terminate()
    out, _ = watcher.communicate(timeout=10)
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["NAME", "STATUS"]
    assert lines[1].split()[:2] == ["user01-home", "Pending"]
    assert lines[-1].split()[:2] == ["user01-home", "Bound"]  # the watch event, printed as a table row


def test_vm_start_stop_subresources_with_real_client_semantics(
    kubectl: Kubectl, bg: BackgroundCluster, ns: str, tmp_path: Path
) -> None:
    kubectl("apply", "-f", _write(tmp_path, "vm", SEED_MANIFESTS["vm"]))
    token = bg.cluster.admin_token  # type: ignore[union-attr]
    base = (
        f"{bg.cluster.url}/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachines/notebook-user01"  # type: ignore[union-attr]
    )

    def put(action: str) -> int:
        res = subprocess.run(
            [
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-X",
                "PUT",
                "-H",
                f"Authorization: Bearer {token}",
                f"{base}/{action}",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return int(res.stdout)

    assert put("start") == 202
    strategy = kubectl("get", "vm", "notebook-user01", "-n", ns, "-o", "jsonpath={.spec.runStrategy}").stdout
    assert strategy == "Always"
    assert put("start") == 409  # already Always, as virt-api answers
    assert put("stop") == 202
    strategy = kubectl("get", "vm", "notebook-user01", "-n", ns, "-o", "jsonpath={.spec.runStrategy}").stdout
    assert strategy == "Halted"


def test_delete_namespace_and_explain(kubectl: Kubectl, ns: str) -> None:
    if find_shared_schemas() is not None:
        explained = kubectl("explain", "virtualmachine.spec.runStrategy").stdout
        assert "FIELD: runStrategy <string>" in explained
    assert "containers <[]Container>" in kubectl("explain", "pods.spec.containers").stdout
    out = kubectl("delete", "namespace", ns, "--timeout=30s")
    assert f'namespace "{ns}" deleted' in out.stdout
    assert ns not in kubectl("get", "namespaces").stdout


def test_faults_aimed_at_another_client_spare_kubectl(kubectl: Kubectl, bg: BackgroundCluster) -> None:
    """A chaos run faults the product's client (kubernetes_asyncio) while its observer (kubectl) reads."""
    assert bg.cluster is not None
    bg.call(lambda: bg.cluster.faults.add(FaultRule(error_rate=1.0, user_agent="OpenAPI-Generator/*")))
    assert kubectl("get", "nodes", check=False).returncode == 0
    bg.call(
        lambda: bg.cluster.faults.add(FaultRule(error_rate=1.0, status_codes=(500,), user_agent="kubectl/*"))
    )
    failed = kubectl("get", "nodes", check=False)
    assert failed.returncode == 1 and "injected fault" in failed.stderr
