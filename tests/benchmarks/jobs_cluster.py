"""The devcluster side of the jobs benchmark (``bench_jobs.py``): Kueue objects, store writes, CPU time.

- :func:`kueue_objects`: a ResourceFlavor for the simulated GPU nodes (the e2e's: ``gpuworkspace.dev/pool:
  gpu``, the GPU taint tolerated) and, per queue, a ClusterQueue with a GPU quota and its LocalQueue.
- :func:`store_rv` reads the cluster-wide resourceVersion (the devcluster has one counter, like etcd's
  revision: every write of every object raises it by one); :func:`replay` reads a resource's watch
  history from a resourceVersion on (``?watch=1&resourceVersion=RV``): what was written since, by whom
  it does not say, so writes made inside the devcluster process (Kueue, the Job controller), which the
  request log never sees, are counted too.
- :func:`cpu_seconds`: a process's user + system CPU time from ``/proc/PID/stat``.
- :func:`as_created`: an object as a client would create it again under a new name (server-set fields
  dropped), for the ``kubectl create`` peer.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.e2e.harness import Devcluster

NS = "gpu-workspaces"
KUEUE = "kueue.x-k8s.io"
KUEUE_API = f"/apis/{KUEUE}/v1beta2"
FLAVOR = "bench-gpu"
IMAGE = (  # the e2e job profiles' image
    "quay.io/jupyter/base-notebook@sha256:07ada0bb13ec7286cdaaeab442f196959e1330993fa72ec0503e0bc429dbf29f"
)
QUEUE_LABEL = f"{KUEUE}/queue-name"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
WRITES = ("create", "update", "patch", "delete", "deletecollection")  # request log verbs that write
# The Job API's generated selector labels (jobspec.py, Kubernetes' generateSelector): a client creating
# a Job leaves them out, the API server adds them for the new Job's uid.
GENERATED_LABELS = (
    "batch.kubernetes.io/controller-uid",
    "controller-uid",
    "batch.kubernetes.io/job-name",
    "job-name",
)
SERVER_FIELDS = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "ownerReferences",
    "deletionTimestamp",
    "selfLink",
)
# Where the writes of a job's life land (paths of the watch history to replay).
RESOURCES = {
    "jobs": "/apis/batch/v1/jobs",
    "workloads": f"{KUEUE_API}/workloads",
    "pods": "/api/v1/pods",
    "persistentvolumeclaims": "/api/v1/persistentvolumeclaims",
    "persistentvolumes": "/api/v1/persistentvolumes",
    "volumesnapshots": "/apis/snapshot.storage.k8s.io/v1/volumesnapshots",
    "volumeattachments": "/apis/storage.k8s.io/v1/volumeattachments",
    "events": "/api/v1/events",
    "clusterqueues": f"{KUEUE_API}/clusterqueues",
    "localqueues": f"{KUEUE_API}/localqueues",
}


def cluster_queue(name: str, gpus: int) -> dict[str, Any]:
    """A ClusterQueue of ``gpus`` whole GPUs (CPU and memory ample) in the benchmark's flavor."""
    quota = [
        {"name": "cpu", "nominalQuota": 4000},
        {"name": "memory", "nominalQuota": "4000Gi"},
        {"name": "nvidia.com/gpu", "nominalQuota": gpus},
    ]
    group = {
        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
        "flavors": [{"name": FLAVOR, "resources": quota}],
    }
    return {
        "apiVersion": f"{KUEUE}/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, "resourceGroups": [group]},
    }


def kueue_objects(queues: dict[str, int]) -> list[dict[str, Any]]:
    """The flavor, then a ClusterQueue and a same-named LocalQueue in :data:`NS` per ``{name: gpus}``."""
    flavor = {
        "apiVersion": f"{KUEUE}/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": FLAVOR},
        "spec": {
            "nodeLabels": {"gpuworkspace.dev/pool": "gpu"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
    objects = [flavor]
    for name, gpus in queues.items():
        local = {
            "apiVersion": f"{KUEUE}/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"clusterQueue": name},
        }
        objects += [cluster_queue(name, gpus), local]
    return objects


def get_json(dc: Devcluster, path: str) -> Any:
    status, body = dc.get(path)
    if status != 200:
        raise RuntimeError(f"GET {path} answered {status}: {body[:300]!r}")
    return json.loads(body)


def write(dc: Devcluster, method: str, path: str, body: Any) -> Any:
    """A create (POST), replace (PUT) or delete (DELETE) with the admin token; the answer."""
    status, raw = dc.control(path, body, method)
    if status not in (200, 201, 202):
        raise RuntimeError(f"{method} {path} answered {status}: {raw[:300]!r}")
    return json.loads(raw)


def raise_quota(dc: Devcluster, name: str, gpus: int, pid: int) -> tuple[float, float]:
    """Replace ClusterQueue ``name``'s quota with ``gpus`` GPUs (retried on a conflict with Kueue's own
    status writes); process ``pid``'s CPU time and the clock just before the write that took."""
    path = f"{KUEUE_API}/clusterqueues/{name}"
    for _ in range(5):
        cq = get_json(dc, path)
        cq["spec"] = cluster_queue(name, gpus)["spec"]
        cpu, started = cpu_seconds(pid), time.perf_counter()
        status, raw = dc.control(path, cq, "PUT")
        if status == 200:
            return cpu, started
        if status != 409:
            break
    raise RuntimeError(f"PUT {path} answered {status}: {raw[:300]!r}")


def store_rv(dc: Devcluster) -> int:
    """The cluster-wide resourceVersion now (a list's resourceVersion is the store's)."""
    return int(get_json(dc, "/api/v1/namespaces?limit=1")["metadata"]["resourceVersion"])


def replay(dc: Devcluster, path: str, since: int, until: int) -> list[dict[str, Any]]:
    """The watch events of ``path`` with ``since < resourceVersion <= until`` (the history replayed,
    the watch ended by the server after a second)."""
    query = urllib.parse.urlencode({"watch": "1", "resourceVersion": str(since), "timeoutSeconds": "1"})
    status, body = dc.get(f"{path}?{query}")
    if status == 404:  # a type this devcluster does not serve
        return []
    if status != 200:
        raise RuntimeError(f"watch {path} from {since} answered {status}: {body[:300]!r}")
    events = [json.loads(line) for line in body.splitlines() if line.strip()]
    errors = [e for e in events if e.get("type") == "ERROR"]
    if errors:
        raise RuntimeError(f"watch {path} from {since}: {errors[0]['object'].get('message')}")
    return [e for e in events if since < int(e["object"]["metadata"]["resourceVersion"]) <= until]


def writes_by_resource(dc: Devcluster, since: int, until: int) -> Counter[str]:
    """Store writes between two resourceVersions, per resource of :data:`RESOURCES` (read in parallel)."""
    with ThreadPoolExecutor(len(RESOURCES)) as pool:
        counts = pool.map(lambda path: len(replay(dc, path, since, until)), RESOURCES.values())
        return Counter({name: n for name, n in zip(RESOURCES, counts, strict=True) if n})


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (``/proc/PID/stat`` fields 14 and 15)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def as_created(obj: dict[str, Any], name: str) -> dict[str, Any]:
    """``obj`` as a client would create it under ``name``: no status, no server-set metadata."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in SERVER_FIELDS}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": {**meta, "name": name}}


def job_as_created(
    job: dict[str, Any], name: str, claims: dict[str, str], labels: dict[str, str]
) -> dict[str, Any]:
    """A Job as ``kubectl create`` would send it again: :func:`as_created`, without the generated selector
    and its labels, its claims renamed (``claims``: old → new) and ``labels`` set on it and its pods."""
    new = as_created(job, name)
    new["metadata"]["labels"] = {**new["metadata"].get("labels", {}), **labels}
    spec = {k: v for k, v in new["spec"].items() if k != "selector"}
    template = spec["template"]
    pod_labels = {
        k: v for k, v in template["metadata"].get("labels", {}).items() if k not in GENERATED_LABELS
    }
    volumes = [_renamed(volume, claims) for volume in template["spec"].get("volumes", [])]
    spec["template"] = {
        "metadata": {**template["metadata"], "labels": {**pod_labels, **labels}},
        "spec": {**template["spec"], "volumes": volumes},
    }
    return {**new, "spec": spec}


def _renamed(volume: dict[str, Any], claims: dict[str, str]) -> dict[str, Any]:
    claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
    if claim not in claims:
        return volume
    return {
        **volume,
        "persistentVolumeClaim": {**volume["persistentVolumeClaim"], "claimName": claims[claim]},
    }
