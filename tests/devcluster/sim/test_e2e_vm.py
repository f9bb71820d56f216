"""End to end, with kubectl only: the KubeVirt root-disk lifecycle of seed 002 §9 (000 §8-9) and node failure
(000 §11: "Compute node unreachable -> RBD re-mount on other nodes allowed only after fencing").

A simulated cluster (``BackgroundCluster(..., simulate=True)``) runs on a thread; the tests drive it with the
kubectl binary, talk plain HTTP to the guest's Jupyter server at the VMI's IP (the guest's ``/`` is the root
disk, see ``sim/guest.py``), and inject the node failure through the control API (``/_devcluster/sim/node``).
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from gpuworkspace_devcluster.testing import BackgroundCluster

from ..conftest import Kubectl

pytestmark = pytest.mark.kubectl

T = TypeVar("T")
NS, VM, DISK, SECRET = (
    "gpu-workspaces",
    "notebook-user01",
    "notebook-user01-root",
    "notebook-user01-cloudinit",
)
TOKEN = "e2e-guest-token"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"

# Seed 000 §8.2, verbatim: 200Gi >= the golden PVC's 20Gi, so CDI accepts the clone as it is.
DATA_VOLUME = f"""
apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata:
  name: {DISK}
  namespace: {NS}
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
"""

# The documented cloud-init subset (sim/guest.py): the golden image's "systemd unit" reads
# /etc/gpuworkspace/singleuser.env; no hub, so the service is a plain jupyter-server with a fixed token.
USERDATA = "#cloud-config\n" + yaml.safe_dump(
    {
        "write_files": [
            {
                "path": "/etc/gpuworkspace/singleuser.env",
                "permissions": "0600",
                "content": f"SINGLEUSER_COMMAND=jupyter-server\nJUPYTER_TOKEN={TOKEN}\nHOME=/home/user01\n",
            }
        ],
    }
)
SECRET_MANIFEST = yaml.safe_dump(
    {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NS},
        "type": "Opaque",
        "stringData": {"userdata": USERDATA},
    }
)


def vm_manifest() -> str:
    """Seed 000 §8.3, plus the cloud-init volume and a GPU-taint toleration (no GPU request), so the VM
    fits cpu-node-a and both GPU nodes and can restart elsewhere after a node failure."""
    vm = yaml.safe_load(
        f"""
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: {VM}
  namespace: {NS}
  labels:
    platform.aik8s.run/owner: user01
spec:
  runStrategy: Halted
  template:
    metadata:
      labels:
        kubevirt.io/domain: {VM}
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
              masquerade: {{}}
      networks:
        - name: default
          pod: {{}}
      volumes:
        - name: root
          dataVolume:
            name: {DISK}
"""
    )
    spec = vm["spec"]["template"]["spec"]
    spec["domain"]["devices"]["disks"].append({"name": "cloudinit", "disk": {"bus": "virtio"}})
    spec["volumes"].append({"name": "cloudinit", "cloudInitNoCloud": {"secretRef": {"name": SECRET}}})
    spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return yaml.safe_dump(vm)


# ------------------------------------------------------------------------------------ helpers
def wait_until(fn: Callable[[], T | None], timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll ``fn`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline, last = time.monotonic() + timeout, None
    while True:
        try:
            last = fn()
        except (AssertionError, OSError, urllib.error.URLError) as exc:
            last = exc  # type: ignore[assignment]
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def get_json(kubectl: Kubectl, *what: str) -> dict[str, Any]:
    return json.loads(kubectl("get", "-n", NS, *what, "-o", "json").stdout)


def guest_url(ip: str, path: str) -> str:
    return f"http://{ip}:8888/api/contents/{path.lstrip('/')}"


def guest_request(ip: str, path: str, method: str = "GET", body: dict[str, Any] | None = None) -> Any:
    req = urllib.request.Request(
        guest_url(ip, path),
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status in (200, 201), resp.status
        return json.loads(resp.read())


def write_file(ip: str, path: str, text: str) -> None:
    guest_request(ip, path, "PUT", {"type": "file", "format": "text", "content": text})


def read_file(ip: str, path: str) -> str:
    return str(guest_request(ip, path)["content"])


def serves_disk(ip: str) -> bool:
    """Whether this VM's guest server answers at ``ip`` (it knows the token and has the disk's /etc/hostname;
    another cluster's pod may reuse a loopback IP)."""
    try:
        return read_file(ip, "/etc/hostname") == f"{VM}\n"
    except (OSError, urllib.error.URLError, ValueError, KeyError):
        return False


# The guest writes these through its Jupyter server (seed §9: modify /etc and /opt, a file in Home).
GUEST_FILES = {
    "/etc/gpuworkspace/e2e.conf": "lifecycle = verified\n",
    "/opt/e2e/marker.txt": "written into /opt\n",
    "/usr/local/bin/e2e-tool": "#!/bin/sh\necho e2e\n",
    "/home/user01/verify.txt": "hello from home\n",
}


def write_guest_files(ip: str, files: dict[str, str]) -> None:
    guest_request(ip, "/opt/e2e", "PUT", {"type": "directory"})
    for path, text in files.items():
        write_file(ip, path, text)
        assert read_file(ip, path) == text


def start_and_wait_ready(kubectl: Kubectl, old_uid: str | None = None, timeout: float = 60) -> dict[str, Any]:
    """Wait for the VM's VMI (a new one when ``old_uid`` is given) to be Ready; returns it."""

    def ready_vmi() -> dict[str, Any] | None:
        vmi = get_json(kubectl, "vmi", VM)
        conds = {c["type"]: c["status"] for c in vmi.get("status", {}).get("conditions") or []}
        fresh = vmi["metadata"]["uid"] != old_uid
        return vmi if fresh and conds.get("Ready") == "True" else None

    vmi = wait_until(ready_vmi, timeout, "the VMI to be Ready")
    kubectl("wait", "-n", NS, "--for=condition=Ready", f"vmi/{VM}", "--timeout=10s")
    assert vmi["status"]["phase"] == "Running"
    assert vmi["status"]["interfaces"][0]["ipAddress"]
    return vmi


def vmi_condition(kubectl: Kubectl, ctype: str) -> str | None:
    conds = get_json(kubectl, "vmi", VM).get("status", {}).get("conditions") or []
    return next((c["status"] for c in conds if c["type"] == ctype), None)


def vmi_ip(vmi: dict[str, Any]) -> str:
    return str(vmi["status"]["interfaces"][0]["ipAddress"])


def create_disk_and_vm(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", input=DATA_VOLUME)
    kubectl("wait", "-n", NS, "--for=jsonpath={.status.phase}=Succeeded", f"dv/{DISK}", "--timeout=60s")
    dv = get_json(kubectl, "dv", DISK)
    assert dv["status"]["progress"] == "100.0%"
    pvc = get_json(kubectl, "pvc", DISK)
    assert pvc["status"]["phase"] == "Bound"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    kubectl("apply", "-f", "-", input=SECRET_MANIFEST)
    kubectl("apply", "-f", "-", input=vm_manifest())
    kubectl("wait", "-n", NS, "--for=jsonpath={.status.printableStatus}=Stopped", f"vm/{VM}", "--timeout=30s")


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[tuple[BackgroundCluster, Kubectl]]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed on this machine")
    with BackgroundCluster(tmp_path / "state", simulate=True, bookmark_interval_s=0.5) as bg:
        yield bg, Kubectl(bg.kubeconfig)


def control(bg: BackgroundCluster, node: str, action: str) -> dict[str, Any]:
    """POST /_devcluster/sim/node with the admin token (the control API the demo script uses)."""
    assert bg.cluster is not None
    req = urllib.request.Request(
        f"{bg.cluster.url}/_devcluster/sim/node",
        data=json.dumps({"node": node, "action": action}).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {bg.cluster.admin_token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        return dict(json.loads(resp.read()))


# -------------------------------------------------------------------------------------- tests
def test_vm_root_disk_lifecycle_with_kubectl(sim: tuple[BackgroundCluster, Kubectl]) -> None:
    """Seed 002 §9: clone the root disk, start, change /etc, /opt and Home, stop, start, files still there."""
    _bg, kubectl = sim
    create_disk_and_vm(kubectl)
    listed = kubectl("get", "dv,pvc", "-n", NS).stdout
    assert DISK in listed and "Succeeded" in listed and "Bound" in listed

    # virtctl start == runStrategy Always
    kubectl("patch", "vm", VM, "-n", NS, "--type", "merge", "-p", '{"spec":{"runStrategy":"Always"}}')
    vmi = start_and_wait_ready(kubectl)
    kubectl("wait", "-n", NS, "--for=jsonpath={.status.printableStatus}=Running", f"vm/{VM}", "--timeout=20s")
    assert "Running" in kubectl("get", "vm,vmi", "-n", NS).stdout
    ip = vmi_ip(vmi)
    assert "Ubuntu 24.04" in read_file(ip, "/etc/os-release")  # booted from the golden image's clone
    assert read_file(ip, "/etc/hostname") == f"{VM}\n"
    write_guest_files(ip, GUEST_FILES)

    # virtctl stop == runStrategy Halted: the VMI goes; the VM, its DataVolume and PVC stay
    kubectl("patch", "vm", VM, "-n", NS, "--type", "merge", "-p", '{"spec":{"runStrategy":"Halted"}}')
    kubectl("wait", "-n", NS, "--for=delete", f"vmi/{VM}", "--timeout=60s")
    gone = kubectl("get", "vmi", VM, "-n", NS, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    kubectl("wait", "-n", NS, "--for=jsonpath={.status.printableStatus}=Stopped", f"vm/{VM}", "--timeout=20s")
    remaining = get_json(kubectl, "vm,dv,pvc")["items"]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in remaining) == [
        ("DataVolume", DISK),
        ("PersistentVolumeClaim", DISK),
        ("VirtualMachine", VM),
    ]
    launchers = get_json(kubectl, "pods", "-l", "kubevirt.io=virt-launcher")["items"]
    assert launchers == []
    assert not serves_disk(ip)
    vm = get_json(kubectl, "vm", VM)
    assert vm["status"]["printableStatus"] == "Stopped" and vm["status"]["ready"] is False

    # virtctl start, this time through the subresource API (PUT .../virtualmachines/<vm>/start)
    kubectl(
        "replace",
        "--raw",
        f"/apis/subresources.kubevirt.io/v1/namespaces/{NS}/virtualmachines/{VM}/start",
        "-f",
        "-",
        input="{}",
    )
    vmi2 = start_and_wait_ready(kubectl, old_uid=vmi["metadata"]["uid"])
    assert get_json(kubectl, "vm", VM)["spec"]["runStrategy"] == "Always"
    ip2 = vmi_ip(vmi2)
    for path, text in GUEST_FILES.items():
        assert read_file(ip2, path) == text, path


def test_node_failure_vmi_stays_until_fenced_then_restarts_elsewhere(
    sim: tuple[BackgroundCluster, Kubectl],
) -> None:
    """000 §11: an unreachable node keeps its VMI; after fencing + out-of-service the VM restarts elsewhere."""
    bg, kubectl = sim
    create_disk_and_vm(kubectl)
    kubectl("patch", "vm", VM, "-n", NS, "--type", "merge", "-p", '{"spec":{"runStrategy":"Always"}}')
    vmi = start_and_wait_ready(kubectl)
    uid, node, ip = vmi["metadata"]["uid"], vmi["status"]["nodeName"], vmi_ip(vmi)
    files = {"/home/user01/before-failure.txt": "written on the first node\n", **GUEST_FILES}
    write_guest_files(ip, files)
    pvc = get_json(kubectl, "pvc", DISK)
    node_obj = json.loads(kubectl("get", "node", node, "-o", "json").stdout)
    node_ip = next(a["address"] for a in node_obj["status"]["addresses"] if a["type"] == "InternalIP")

    # The node stops answering: NotReady (Unknown), unreachable taints. The VMI must stay where it is.
    control(bg, node, "not-ready")
    kubectl("wait", "--for=condition=Ready=Unknown", f"node/{node}", "--timeout=20s")
    wait_until(lambda: vmi_condition(kubectl, "Ready") == "False", 20, "the VMI to report Ready=False")
    # A few reconcile cycles: nudge the VM and VMI (each write re-queues the controller) and check that
    # nothing moves -- same VMI, same node, one launcher pod, no second VMI anywhere.
    for i in range(5):
        kubectl("annotate", "vm", VM, "-n", NS, f"e2e/nudge={i}", "--overwrite")
        kubectl("annotate", "vmi", VM, "-n", NS, f"e2e/nudge={i}", "--overwrite")
        time.sleep(0.4)
        now = get_json(kubectl, "vmi", VM)
        assert now["metadata"]["uid"] == uid
        assert now["status"]["nodeName"] == node
        assert now["status"]["phase"] == "Running"
        assert not now["metadata"].get("deletionTimestamp")
        launchers = get_json(kubectl, "pods", "-l", "kubevirt.io=virt-launcher")["items"]
        assert [p["spec"]["nodeName"] for p in launchers] == [node]
        assert len(get_json(kubectl, "vmi")["items"]) == 1
    assert get_json(kubectl, "vm", VM)["status"]["printableStatus"] == "Running"
    assert serves_disk(ip)  # the unreachable node's guest still runs (and could still write the disk)

    # Fence first (the Ceph blocklist cuts the node's RBD client off), then declare it out of service.
    fence = {
        "apiVersion": "csiaddons.openshift.io/v1alpha1",
        "kind": "NetworkFence",
        "metadata": {"name": f"fence-{node}"},
        "spec": {
            "driver": "rbd.csi.ceph.com",
            "fenceState": "Fenced",
            "cidrs": [f"{node_ip}/32"],
            "secret": {"name": "rook-csi-rbd-provisioner", "namespace": "rook-ceph"},
            "parameters": {"clusterID": "devcluster-ceph"},
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(fence))
    kubectl(
        "wait", "--for=jsonpath={.status.result}=Succeeded", f"networkfence/fence-{node}", "--timeout=30s"
    )
    # Fenced: the old guest's I/O fails and it dies -- but nothing moves until the node is out of service.
    wait_until(lambda: not serves_disk(ip), 10, "the fenced node's guest to stop")
    still = get_json(kubectl, "vmi", VM)
    assert (still["metadata"]["uid"], still["status"]["nodeName"]) == (uid, node)
    kubectl("taint", "node", node, OUT_OF_SERVICE)

    # The VM restarts elsewhere, on the same disk.
    vmi2 = start_and_wait_ready(kubectl, old_uid=uid, timeout=60)
    assert vmi2["status"]["nodeName"] != node
    ip2 = vmi_ip(vmi2)
    assert ip2 != ip
    pvc2 = get_json(kubectl, "pvc", DISK)
    assert pvc2["metadata"]["uid"] == pvc["metadata"]["uid"]
    assert pvc2["spec"]["volumeName"] == pvc["spec"]["volumeName"]
    vmi_volumes = {v["name"]: v for v in vmi2["spec"]["volumes"]}
    assert vmi_volumes["root"]["dataVolume"]["name"] == DISK
    for path, text in files.items():
        assert read_file(ip2, path) == text, path
    launchers = get_json(kubectl, "pods", "-l", "kubevirt.io=virt-launcher")["items"]
    assert [p["spec"]["nodeName"] for p in launchers] == [vmi2["status"]["nodeName"]]
    attachments = json.loads(kubectl("get", "volumeattachments", "-o", "json").stdout)["items"]
    attached = [
        a["spec"]["nodeName"]
        for a in attachments
        if a["spec"]["source"].get("persistentVolumeName") == pvc["spec"]["volumeName"]
    ]
    assert attached == [vmi2["status"]["nodeName"]]
    assert not serves_disk(ip)
