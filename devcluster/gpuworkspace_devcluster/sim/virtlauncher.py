"""KubeVirt's launcher side, pure: the virt-launcher pod a VMI gets, and the VMI status its pod implies.

``render_launcher_pod`` is virt-controller's TemplateService (KubeVirt 1.4.1); ``decide_vmi_status`` is what
virt-controller's VMI loop and virt-handler report together. No I/O here (see ``sim/kubevirt.py``).

Contract with the kubelet (``sim/kubelet.py`` image table): an image starting with ``LAUNCHER_IMAGE_PREFIX``
(``quay.io/kubevirt/virt-launcher:``) runs ``GUEST_COMMAND`` -- ``<this python> -m
gpuworkspace_devcluster.sim.guest`` -- instead of the pod's ``virt-launcher-monitor`` command (the
kubelet may append the pod's command/args; the guest ignores what it doesn't know). The process gets the
container's literal env (``GUEST_VMI``, ``GUEST_ROOT_DISK``, ``GUEST_CLOUD_INIT``, ``GUEST_USERDATA``) plus
``GPUWORKSPACE_MOUNTS`` (JSON: container mountPath -> host directory, for every volumeMount) and ``POD_IP``
(or ``--ip IP``). SIGTERM is a graceful guest shutdown (exit 0). See ``sim/guest.py``.

Differences from KubeVirt, on purpose: no ``kubevirt.io/schedulable`` node selector and no
``devices.kubevirt.io/{kvm,tun,vhost-net}`` requests (no virt-handler on the simulated nodes); a VMI without
``readinessProbe`` gets a tcpSocket probe on 8888 so pod readiness (-> VMI Ready, AgentConnected) means "the
guest's single-user server answers" (the guest agent's stand-in; no LibvirtStartupDelay is added); PVCs are
directories mounted whole (the disk is the guest's ``/``); the cloud-init secret is mounted whole, not by
subPath; Scheduled means "launcher pod bound", Running "compute container running".
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from ..quantity import parse_quantity
from ..store import Obj, owner_ref
from ..verbs import clone

LAUNCHER_IMAGE = "quay.io/kubevirt/virt-launcher:v1.4.1"
LAUNCHER_IMAGE_PREFIX = "quay.io/kubevirt/virt-launcher:"
GUEST_COMMAND = ("python", "-m", "gpuworkspace_devcluster.sim.guest")
GUEST_PORT = 8888
DISK_DIR, SECRET_DIR = "/var/run/kubevirt-private/vmi-disks", "/var/run/kubevirt-private/secret"
FINAL, ORDER = ("Succeeded", "Failed"), ("Pending", "Scheduling", "Scheduled", "Running")
DV_USABLE = ("Succeeded", "WaitForFirstConsumer", "PendingPopulation")
DEFAULT_GRACE = 180
_MI = 1024 * 1024
_SECURITY = {"runAsUser": 107, "runAsGroup": 107, "runAsNonRoot": True}
_CONTAINER_SECURITY = {
    **_SECURITY,
    "privileged": False,
    "allowPrivilegeEscalation": False,
    "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
}
_PROBE = {"tcpSocket": {"port": GUEST_PORT}, "periodSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 3}
_MONITOR = (
    "/usr/bin/virt-launcher-monitor --qemu-timeout 240s --name {name} --uid {uid} --namespace {ns} "
    "--kubevirt-share-dir /var/run/kubevirt --ephemeral-disk-dir /var/run/kubevirt-ephemeral-disks "
    "--container-disk-dir /var/run/kubevirt/container-disks --grace-period-seconds {grace} "
    "--hook-sidecars 0 --ovmf-path /usr/share/OVMF --run-as-nonroot"
)
_POD_SPEC_KEYS = (
    "nodeSelector",
    "affinity",
    "tolerations",
    "schedulerName",
    "priorityClassName",
    "subdomain",
)
GUEST_OS = {
    "id": "ubuntu",
    "name": "Ubuntu",
    "prettyName": "Ubuntu 24.04 LTS",
    "version": "24.04 LTS (Noble Numbat)",
    "versionId": "24.04",
    "kernelRelease": "6.8.0-45-generic",
    "kernelVersion": "#45-Ubuntu SMP PREEMPT_DYNAMIC Fri Aug 30 12:02:04 UTC 2024",
    "machine": "x86_64",
}
_OS_RELEASE = {
    "ID": "id",
    "NAME": "name",
    "PRETTY_NAME": "prettyName",
    "VERSION": "version",
    "VERSION_ID": "versionId",
}


# --------------------------------------------------------------------------- helpers
def meta(obj: Obj | None) -> dict[str, Any]:
    return (obj or {}).get("metadata") or {}


def status_of(obj: Obj | None) -> dict[str, Any]:
    return (obj or {}).get("status") or {}


def phase_of(vmi: Obj | None) -> str:
    return status_of(vmi).get("phase") or "Pending"


def cond(obj: Obj | None, ctype: str) -> dict[str, Any] | None:
    return next((c for c in status_of(obj).get("conditions") or [] if c.get("type") == ctype), None)


def mkcond(ctype: str, status: str, reason: str = "", message: str = "") -> Obj:
    return {
        "type": ctype,
        "status": status,
        **({"reason": reason} if reason else {}),
        **({"message": message} if message else {}),
    }


def claim_volumes(spec: Obj) -> list[tuple[str, str]]:
    """(volume name, claim name) for every dataVolume / persistentVolumeClaim volume of a VMI spec."""
    out = []
    for vol in spec.get("volumes") or []:
        if "dataVolume" in vol:
            out.append((vol["name"], vol["dataVolume"]["name"]))
        elif "persistentVolumeClaim" in vol:
            out.append((vol["name"], vol["persistentVolumeClaim"]["claimName"]))
    return out


def root_disk(spec: Obj) -> tuple[str, str] | None:
    """The boot disk's (volume, claim): the first disk backed by a claim (disk order, then volume order)."""
    claims = dict(claim_volumes(spec))
    disks = [d["name"] for d in (spec.get("domain") or {}).get("devices", {}).get("disks") or []]
    return next(((name, claims[name]) for name in [*disks, *claims] if name in claims), None)


def vcpus(domain: Obj) -> int:
    cpu = domain.get("cpu") or {}
    return max(1, int(cpu.get("cores") or 1) * int(cpu.get("sockets") or 1) * int(cpu.get("threads") or 1))


def fmt_bytes(n: int) -> str:
    for suffix, power in (("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1)):
        if n % (1024**power) == 0:
            return f"{n // 1024**power}{suffix}"
    return str(n)


def merge_conditions(old: list[Obj], new: list[Obj], now: str) -> list[Obj]:
    """Keep an unchanged condition as it was (timestamps included); stamp the changed ones."""
    by_type = {c.get("type"): c for c in old}
    out: list[Obj] = []
    for c in new:
        prev = by_type.get(c["type"])
        same = prev is not None and all(prev.get(k) == c.get(k) for k in ("status", "reason", "message"))
        out.append(
            prev if prev is not None and same else {"lastProbeTime": None, "lastTransitionTime": now, **c}
        )
    return out


# ------------------------------------------------------------------- launcher pod
def memory_overhead(spec: Obj, guest_bytes: int) -> int:
    """GetMemoryOverhead: page tables, launcher processes, vCPUs, IO thread, video RAM, VFIO, guaranteed QoS."""
    domain = spec.get("domain") or {}
    devices, res = domain.get("devices") or {}, domain.get("resources") or {}
    overhead = (-(-guest_bytes // 1000) * 1000) // 512 + (25 + 100 + 25 + 40 + 30) * _MI
    overhead += 8 * _MI * vcpus(domain) + 8 * _MI
    overhead += 32 * _MI if devices.get("autoattachGraphicsDevice", True) else 0
    overhead += 1024 * _MI if devices.get("gpus") or devices.get("hostDevices") else 0
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    guaranteed = bool(limits.get("cpu") and limits.get("memory")) and all(
        requests.get(k, limits[k]) == limits[k] for k in ("cpu", "memory")
    )
    dedicated = (domain.get("cpu") or {}).get("dedicatedCpuPlacement")
    return overhead + (100 * _MI if dedicated or guaranteed else 0)


def launcher_resources(spec: Obj) -> Obj:
    """The compute container's requests/limits: the VMI's, plus memory overhead, default CPU, GPUs."""
    domain = spec.get("domain") or {}
    res = domain.get("resources") or {}
    requests, limits = dict(res.get("requests") or {}), dict(res.get("limits") or {})
    dedicated = bool((domain.get("cpu") or {}).get("dedicatedCpuPlacement"))
    if "cpu" not in requests and not dedicated:  # vCPUs / cpuAllocationRatio (10)
        milli = vcpus(domain) * 100
        requests["cpu"] = str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
    guest = requests.get("memory") or (domain.get("memory") or {}).get("guest") or limits.get("memory")
    if guest:
        overhead = memory_overhead(spec, int(parse_quantity(guest)))
        requests["memory"] = fmt_bytes(int(parse_quantity(guest)) + overhead)
        if "memory" in limits:
            limits["memory"] = fmt_bytes(int(parse_quantity(limits["memory"])) + overhead)
    if dedicated:
        limits["cpu"] = requests["cpu"] = str(vcpus(domain))
        limits["memory"] = requests.get("memory", limits.get("memory"))
    requests.setdefault("ephemeral-storage", "50M")
    devices = domain.get("devices") or {}
    for dev in [*(devices.get("gpus") or []), *(devices.get("hostDevices") or [])]:
        for bucket in (requests, limits):
            bucket[dev["deviceName"]] = str(int(bucket.get(dev["deviceName"], 0)) + 1)
    return {"requests": requests, **({"limits": limits} if limits else {})}


def _cloud_init(spec: Obj) -> tuple[list[Obj], list[Obj], list[Obj]]:
    """(pod volumes, mounts, env) for the cloud-init volume: a secret mounted whole, inline data as env."""
    for vol in spec.get("volumes") or []:
        source = vol.get("cloudInitNoCloud") or vol.get("cloudInitConfigDrive")
        if source is None:
            continue
        ref = source.get("secretRef") or source.get("userDataSecretRef")
        if ref:
            path, pod_vol = f"{SECRET_DIR}/{vol['name']}", f"{vol['name']}-udata"
            mount = {"name": pod_vol, "mountPath": path, "readOnly": True}
            volume = {"name": pod_vol, "secret": {"secretName": ref["name"]}}
            return [volume], [mount], [{"name": "GUEST_CLOUD_INIT", "value": path}]
        text = source.get("userData") or base64.b64decode(source.get("userDataBase64") or "").decode()
        return [], [], [{"name": "GUEST_USERDATA", "value": text}]
    return [], [], []


def render_launcher_pod(vmi: Obj) -> Obj:
    """RenderLaunchManifest: the ``virt-launcher-<vmi>-xxxxx`` pod (generateName) owned by the VMI."""
    vmeta, spec = meta(vmi), vmi.get("spec") or {}
    name, grace = vmeta["name"], int(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE))
    volumes, mounts, env = _cloud_init(spec)
    for vol, claim in claim_volumes(spec):
        volumes.append({"name": vol, "persistentVolumeClaim": {"claimName": claim}})
        mounts.append({"name": vol, "mountPath": f"{DISK_DIR}/{vol}"})
    boot = root_disk(spec)
    if boot:
        env.insert(0, {"name": "GUEST_ROOT_DISK", "value": f"{DISK_DIR}/{boot[0]}"})
    probe = clone(spec.get("readinessProbe") or _PROBE)
    probe.pop("guestAgentPing", None)
    command = _MONITOR.format(name=name, uid=vmeta["uid"], ns=vmeta["namespace"], grace=grace + 15).split()
    skip = ("kubectl.kubernetes.io", "kubevirt.io/storage-observed", "kubevirt.io/latest-observed")
    annotations = {k: v for k, v in (vmeta.get("annotations") or {}).items() if not k.startswith(skip)}
    compute = {
        "name": "compute",
        "image": LAUNCHER_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "env": [{"name": "GUEST_VMI", "value": name}, *env],
        "resources": launcher_resources(spec),
        "volumeMounts": mounts,
        "readinessProbe": probe,
        "securityContext": clone(_CONTAINER_SECURITY),
    }
    pod_spec: Obj = {
        "hostname": spec.get("hostname") or name,
        "securityContext": {**_SECURITY, "fsGroup": 107},
        "terminationGracePeriodSeconds": grace + 30,
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "containers": [compute],
        "volumes": volumes,
        **{key: clone(spec[key]) for key in _POD_SPEC_KEYS if spec.get(key)},
    }
    labels = {
        "kubevirt.io": "virt-launcher",
        "kubevirt.io/created-by": vmeta["uid"],
        "vm.kubevirt.io/name": name,
    }
    annotations.update({"kubevirt.io/domain": name, "kubectl.kubernetes.io/default-container": "compute"})
    pod_meta = {
        "generateName": f"virt-launcher-{name}-",
        "labels": {**(vmeta.get("labels") or {}), **labels},
        "annotations": annotations,
        "ownerReferences": [owner_ref(vmi)],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec}


# --------------------------------------------------------------------- VMI status
def volume_problem(
    vmi: Obj, dvs: dict[str, Obj | None], pvcs: dict[str, Obj | None]
) -> tuple[str, str] | None:
    """Why the launcher pod can't be created yet: (reason, message), or None."""
    for _, claim in claim_volumes(vmi.get("spec") or {}):
        dv = dvs.get(claim)
        if dv is None and pvcs.get(claim) is None:
            return "FailedPvcNotFound", f"failed to render launch manifest: didn't find PVC {claim}"
        if dv is not None and status_of(dv).get("phase") not in DV_USABLE:
            return "DataVolumeNotReady", f"DataVolume {claim} is not ready"
    return None


def _compute(pod: Obj | None) -> Obj:
    return next((s for s in status_of(pod).get("containerStatuses") or [] if s.get("name") == "compute"), {})


def decide_vmi_phase(vmi: Obj, pod: Obj | None) -> str:
    """Pending -> Scheduling (pod created) -> Scheduled (bound) -> Running (compute running) -> final."""
    phase, deleting = phase_of(vmi), bool(meta(vmi).get("deletionTimestamp"))
    if phase in FINAL:
        return phase
    if pod is None:  # gone: shut down on request, or lost
        if phase == "Pending" and not deleting:
            return "Pending"
        return "Succeeded" if deleting and phase in ("Scheduled", "Running") else "Failed"
    pod_phase = status_of(pod).get("phase")
    if pod_phase in FINAL:
        return "Succeeded" if pod_phase == "Succeeded" and phase == "Running" else "Failed"
    derived = "Scheduling"
    if (pod.get("spec") or {}).get("nodeName"):
        derived = "Running" if (_compute(pod).get("state") or {}).get("running") is not None else "Scheduled"
    return max(phase if phase in ORDER else "Pending", derived, key=ORDER.index)


def _ready(phase: str, pod: Obj | None) -> Obj:
    """syncReadyConditionFromPod."""
    if pod is None:
        return mkcond("Ready", "False", "PodNotExists", "virt-launcher pod has not yet been scheduled")
    if meta(pod).get("deletionTimestamp") or status_of(pod).get("phase") in FINAL:
        return mkcond("Ready", "False", "PodTerminating", "virt-launcher pod is terminating")
    if phase != "Running":
        return mkcond("Ready", "False", "GuestNotRunning", "Guest VM is not reported as running")
    ready = cond(pod, "Ready")
    if ready is None:
        return mkcond(
            "Ready", "False", "PodConditionMissing", "virt-launcher pod is missing the Ready condition"
        )
    return {k: v for k, v in ready.items() if k != "observedGeneration"}


def _migratable(vmi: Obj, pvcs: dict[str, Obj | None]) -> Obj:
    for _, claim in claim_volumes(vmi.get("spec") or {}):
        if "ReadWriteMany" not in ((pvcs.get(claim) or {}).get("spec") or {}).get("accessModes", []):
            message = (
                f"cannot migrate VMI: PVC {claim} is not shared, live migration requires that all PVCs must be "
                "shared (using ReadWriteMany access mode)"
            )
            return mkcond("LiveMigratable", "False", "DisksNotLiveMigratable", message)
    if ((vmi.get("spec") or {}).get("domain") or {}).get("devices", {}).get("gpus"):
        return mkcond("LiveMigratable", "False", "HostDeviceNotLiveMigratable", "VMI uses a PCI host devices")
    return mkcond("LiveMigratable", "True")


def _scheduling_conditions(pod: Obj | None, problem: tuple[str, str] | None) -> list[Obj]:
    """PodScheduled (copied from the pod, or a missing PVC) and Synchronized (sync errors, image pulls)."""
    out = []
    sched = cond(pod, "PodScheduled")
    if sched is not None and sched.get("status") == "False":
        out.append({k: v for k, v in sched.items() if k != "lastProbeTime"})
    waiting = (_compute(pod).get("state") or {}).get("waiting") or {}
    if problem is not None and problem[0] == "FailedPvcNotFound":
        out.append(mkcond("PodScheduled", "False", "Unschedulable", problem[1]))
        out.append(mkcond("Synchronized", "False", *problem))
    elif waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff"):
        out.append(mkcond("Synchronized", "False", waiting["reason"], waiting.get("message", "")))
    return out


def _running_status(vmi: Obj, pod: Obj, agent: bool, os_info: Obj | None) -> Obj:
    """What virt-handler reports for a running domain: interfaces, and guest agent data once connected."""
    ip, spec = status_of(pod).get("podIP"), vmi.get("spec") or {}
    digest = hashlib.sha256(meta(vmi)["uid"].encode()).hexdigest()
    iface = ((spec.get("domain") or {}).get("devices", {}).get("interfaces") or [{"name": "default"}])[0][
        "name"
    ]
    out: Obj = {}
    if ip:
        out["interfaces"] = [
            {
                "name": iface,
                "ipAddress": ip,
                "ipAddresses": [ip],
                "mac": f"52:54:00:{digest[0:2]}:{digest[2:4]}:{digest[4:6]}",
                "linkState": "up",
                "interfaceName": "enp1s0",
                "podInterfaceName": "eth0",
                "queueCount": 1,
                "infoSource": "domain, guest-agent" if agent else "domain",
            }
        ]
    if agent:
        out["guestOSInfo"] = os_info or GUEST_OS
    return out


def decide_vmi_status(
    vmi: Obj,
    pods: list[Obj],
    problem: tuple[str, str] | None,
    pvcs: dict[str, Obj | None],
    os_info: Obj | None,
    now: str,
) -> Obj:
    """The VMI's status from its launcher pods (the newest is current): phase, conditions, node, network."""
    old, pod = status_of(vmi), (pods[-1] if pods else None)
    phase = decide_vmi_phase(vmi, pod)
    kept = (
        "nodeName",
        "interfaces",
        "guestOSInfo",
        "qosClass",
        "launcherContainerImageVersion",
        "currentCPUTopology",
    )
    status: Obj = {k: v for k, v in old.items() if k in (*kept, "phaseTransitionTimestamps")}
    status["phase"] = phase
    if phase != old.get("phase"):
        stamp = {"phase": phase, "phaseTransitionTimestamp": now}
        status["phaseTransitionTimestamps"] = [*old.get("phaseTransitionTimestamps", []), stamp]
    status["activePods"] = {meta(p)["uid"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}
    conds = [_ready(phase, pod), *_scheduling_conditions(pod, problem)]
    if pod is not None and phase in ("Scheduled", "Running"):
        cpu = (vmi.get("spec") or {}).get("domain", {}).get("cpu") or {}
        status["nodeName"] = pod["spec"]["nodeName"]
        status["qosClass"] = status_of(pod).get("qosClass", "Burstable")
        status["launcherContainerImageVersion"] = LAUNCHER_IMAGE
        status["currentCPUTopology"] = {k: cpu.get(k, 1) for k in ("cores", "sockets", "threads")}
    if pod is not None and phase == "Running":
        agent = conds[0].get("status") == "True"
        status.update(_running_status(vmi, pod, agent, os_info))
        conds += [mkcond("AgentConnected", "True")] if agent else []
        conds.append(_migratable(vmi, pvcs))
    if phase in FINAL:
        for key in ("interfaces", "guestOSInfo", "launcherContainerImageVersion"):
            status.pop(key, None)
    status["conditions"] = merge_conditions(old.get("conditions") or [], conds, now)
    return status


def parse_os_release(text: str) -> Obj:
    """``guestOSInfo`` from an os-release file (unknown fields keep the Ubuntu 24.04 defaults)."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"')
    return {**GUEST_OS, **{field: values[key] for key, field in _OS_RELEASE.items() if values.get(key)}}
