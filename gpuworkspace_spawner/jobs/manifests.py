"""Pure builders for a job handed off from a workspace (issue 17): the VolumeSnapshot of the home disk,
the claim restored from it (the job's copy of the user's code and data), and the batch/v1 Job.

The Job is written for Kueue: ``kueue.x-k8s.io/queue-name`` (the profile's LocalQueue), optionally
``kueue.x-k8s.io/priority-class``, and ``suspend: true`` so nothing runs before Kueue admits it (Kueue
unsuspends it and injects its flavor's node labels and tolerations). Its pods get no ServiceAccount
token, the restricted security context, and the workspace's network profile label (the namespace's
NetworkPolicies give them that profile's egress and nothing else: no ingress at all). A notebook runs
with papermill (``papermill in.ipynb out.ipynb -r name text -p name 3``); a script with
``python script.py --name=value``; both in the file's directory of the home disk's copy.

The user's code comes from a claim restored from a snapshot of the home disk, never the live disk: the
workspace may be running (the disk is ReadWriteOnce) and the job sees the files as at submission.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..catalog.jobprofiles import JobProfile
from ..catalog.model import Security
from ..manifests.names import (
    ANN_CATALOG_VERSION,
    ANN_IMAGE,
    ANN_IMAGE_DIGEST,
    ANN_PROFILE,
    KIND_JOB,
    LABEL_JOB,
    LABEL_KIND,
    LABEL_NETWORK_PROFILE,
    LABEL_PROFILE,
    WorkspaceIdentity,
    image_digest,
    label_value,
)

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
ANN_NOTEBOOK = "gpuworkspace.dev/notebook"
ANN_SCRIPT = "gpuworkspace.dev/script"
ANN_SUBMITTED_BY = "gpuworkspace.dev/submitted-by"
ANN_SNAPSHOT = "gpuworkspace.dev/code-snapshot"
ANN_CODE_CLAIM = "gpuworkspace.dev/code-claim"
ANN_OUTPUT = "gpuworkspace.dev/output"  # where the results go: a path in the workspace, or a URL
SNAPSHOT_API_VERSION = "snapshot.storage.k8s.io/v1"
CONTAINER = "job"
OUTPUTS_PATH = "/outputs"
Scalar = str | int | float | bool


@dataclass(frozen=True)
class Submission:
    """What a user asked to run: exactly one of ``notebook`` and ``script`` (paths relative to home)."""

    name: str  # the Job's name (jobs/submission.py job_name)
    notebook: str | None = None
    script: str | None = None
    parameters: Mapping[str, Scalar] = field(default_factory=dict)


@dataclass(frozen=True)
class JobContext:
    """Everything the builders need: the submission, its profile, whose workspace, and the names of the
    snapshot and the code claim made for it."""

    submission: Submission
    profile: JobProfile
    identity: WorkspaceIdentity
    home_claim: str  # the workspace's home disk the snapshot is taken of
    home_mount_path: str  # where the workspace mounts it: the job mounts its copy at the same path
    catalog_version: str
    submitted_by: str  # the hub user or service that asked (audit)
    security: Security = field(default_factory=Security)  # the workspace profile's uid, gid, fsGroup
    network_profile: str | None = None  # the workspace profile's network profile
    storage_class: str | None = None  # the home disk's class: the restored claim's too
    ttl_after_finished_s: int = 7 * 24 * 3600  # then Kubernetes deletes the Job, its snapshot and claim

    @property
    def snapshot_name(self) -> str:
        return f"{self.submission.name}-code"

    @property
    def code_claim(self) -> str:
        return f"{self.submission.name}-code"


def _labels(ctx: JobContext) -> dict[str, str]:
    labels = {
        **ctx.identity.selector_labels,
        LABEL_KIND: KIND_JOB,
        LABEL_JOB: ctx.submission.name,
        LABEL_PROFILE: label_value(ctx.profile.slug),
    }
    if ctx.network_profile:
        labels[LABEL_NETWORK_PROFILE] = label_value(ctx.network_profile)
    return labels


def _annotations(ctx: JobContext) -> dict[str, str]:
    sub = ctx.submission
    annotations = {
        **ctx.identity.name_annotations,
        ANN_PROFILE: ctx.profile.slug,
        ANN_CATALOG_VERSION: ctx.catalog_version,
        ANN_IMAGE: ctx.profile.image,
        ANN_SUBMITTED_BY: ctx.submitted_by,
        ANN_SNAPSHOT: ctx.snapshot_name,
        ANN_CODE_CLAIM: ctx.code_claim,
        ANN_OUTPUT: output_location(ctx),
    }
    digest = image_digest(ctx.profile.image)
    if digest:
        annotations[ANN_IMAGE_DIGEST] = digest
    if sub.notebook is not None:
        annotations[ANN_NOTEBOOK] = sub.notebook
    if sub.script is not None:
        annotations[ANN_SCRIPT] = sub.script
    return annotations


def _meta(ctx: JobContext, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": ctx.identity.namespace,
        "labels": _labels(ctx),
        "annotations": _annotations(ctx),
    }


def build_code_snapshot(ctx: JobContext, *, snapshot_class: str | None = None) -> dict[str, Any]:
    """The VolumeSnapshot of the home disk the job's code comes from (no class: the cluster's default)."""
    spec: dict[str, Any] = {"source": {"persistentVolumeClaimName": ctx.home_claim}}
    if snapshot_class:
        spec["volumeSnapshotClassName"] = snapshot_class
    return {
        "apiVersion": SNAPSHOT_API_VERSION,
        "kind": "VolumeSnapshot",
        "metadata": _meta(ctx, ctx.snapshot_name),
        "spec": spec,
    }


def build_code_claim(ctx: JobContext, *, size: str) -> dict[str, Any]:
    """The claim restored from the snapshot (with Ceph RBD, a cheap clone); ``size``: its restoreSize.

    It carries no ``gpuworkspace.dev/disk`` label: it is no workspace disk (the disk service and the
    reclaimer leave it alone), and it goes with the Job (cancel, or the Job's TTL)."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
        "resources": {"requests": {"storage": size}},
        "dataSource": {
            "apiGroup": "snapshot.storage.k8s.io",
            "kind": "VolumeSnapshot",
            "name": ctx.snapshot_name,
        },
    }
    if ctx.storage_class:
        spec["storageClassName"] = ctx.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(ctx, ctx.code_claim),
        "spec": spec,
    }


def output_location(ctx: JobContext) -> str:
    """Where the results go: ``s3://…/<user>/<job>/`` or, for a team directory, the path the workspace
    sees it at (``<mountPath>/<subPath>/<user>/<job>``)."""
    outputs, tail = ctx.profile.outputs, f"{label_value(ctx.identity.user)}/{ctx.submission.name}"
    if outputs.object_store_url is not None:
        return outputs.object_store_url.rstrip("/") + f"/{tail}/"
    team = outputs.team_directory
    assert team is not None  # the catalog gives exactly one target
    return posixpath.join(team.mount_path, outputs.sub_path, tail) + "/"


def _output_dir(ctx: JobContext) -> str:
    """The output directory as the job's container sees it."""
    if ctx.profile.outputs.object_store_url is not None:
        return output_location(ctx)
    return OUTPUTS_PATH + "/"


def _in_home(ctx: JobContext, path: str) -> str:
    return posixpath.normpath(posixpath.join(ctx.home_mount_path, path))


def _papermill_parameters(parameters: Mapping[str, Scalar]) -> list[str]:
    """``-r name text`` keeps a string a string (``-p`` would read "3" as 3); ``-p`` for numbers and
    booleans (papermill reads ``True``/``False`` and numbers back as such)."""
    args: list[str] = []
    for name, value in sorted(parameters.items()):
        if isinstance(value, str):
            args += ["-r", name, value]
        else:
            args += ["-p", name, str(value)]
    return args


def working_dir(ctx: JobContext) -> str:
    """The directory of the notebook or script, in the job's copy of the home disk."""
    sub = ctx.submission
    return posixpath.dirname(_in_home(ctx, sub.notebook if sub.notebook is not None else sub.script or ""))


def build_command(ctx: JobContext) -> list[str]:
    """What the job's container runs, in :func:`working_dir` (the notebook's kernel starts there too,
    so the notebook's relative paths mean what they meant in the workspace)."""
    sub = ctx.submission
    if sub.notebook is not None:
        target = _output_dir(ctx) + posixpath.basename(sub.notebook)
        name = posixpath.basename(sub.notebook)
        return ["papermill", name, target, "--log-output", *_papermill_parameters(sub.parameters)]
    assert sub.script is not None
    flags = [f"--{name}={value}" for name, value in sorted(sub.parameters.items())]
    return ["python", posixpath.basename(sub.script), *flags]


def _env(ctx: JobContext) -> list[dict[str, str]]:
    env = [
        {"name": "GPUWS_JOB_NAME", "value": ctx.submission.name},
        {"name": "GPUWS_JOB_OUTPUT", "value": _output_dir(ctx)},
        {"name": "GPUWS_JOB_PROFILE", "value": ctx.profile.slug},
    ]
    if ctx.profile.outputs.object_store_endpoint:
        env.append({"name": "AWS_ENDPOINT_URL", "value": ctx.profile.outputs.object_store_endpoint})
    return env


def _volumes(ctx: JobContext) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [{"name": "code", "persistentVolumeClaim": {"claimName": ctx.code_claim}}]
    mounts: list[dict[str, Any]] = [{"name": "code", "mountPath": ctx.home_mount_path}]
    team = ctx.profile.outputs.team_directory
    if team is not None:
        volumes.append({"name": "outputs", "persistentVolumeClaim": {"claimName": team.claim_name}})
        sub_path = posixpath.join(
            team.sub_path or "",
            ctx.profile.outputs.sub_path,
            label_value(ctx.identity.user),
            ctx.submission.name,
        )
        mounts.append({"name": "outputs", "mountPath": OUTPUTS_PATH, "subPath": sub_path})
    return volumes, mounts


def _container(ctx: JobContext, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if ctx.profile.resources.requests:
        resources["requests"] = dict(ctx.profile.resources.requests)
    if ctx.profile.resources.limits:
        resources["limits"] = dict(ctx.profile.resources.limits)
    home = ctx.home_mount_path
    return {
        "name": CONTAINER,
        "image": ctx.profile.image,
        "command": build_command(ctx),
        "workingDir": working_dir(ctx),
        "env": [*_env(ctx), {"name": "HOME", "value": home}],
        "resources": resources,
        "volumeMounts": mounts,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": ctx.security.run_as_user,
            "runAsGroup": ctx.security.run_as_group,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }


def build_job(ctx: JobContext) -> dict[str, Any]:
    """The batch/v1 Job, suspended until Kueue admits it."""
    volumes, mounts = _volumes(ctx)
    labels = {**_labels(ctx), QUEUE_LABEL: ctx.profile.queue}
    if ctx.profile.priority_class:
        labels[PRIORITY_LABEL] = ctx.profile.priority_class
    pod_labels = {k: v for k, v in _labels(ctx).items() if k != LABEL_PROFILE}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {**_meta(ctx, ctx.submission.name), "labels": labels},
        "spec": {
            "suspend": True,
            "backoffLimit": ctx.profile.backoff_limit,
            "activeDeadlineSeconds": ctx.profile.max_runtime_s,
            "ttlSecondsAfterFinished": ctx.ttl_after_finished_s,
            "template": {
                "metadata": {"labels": pod_labels, "annotations": dict(ctx.identity.name_annotations)},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "hostNetwork": False,
                    "hostPID": False,
                    "hostIPC": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "fsGroup": ctx.security.fs_group,
                        "fsGroupChangePolicy": "OnRootMismatch",
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [_container(ctx, mounts)],
                    "volumes": volumes,
                },
            },
        },
    }


def owned_by(job: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch giving an object to the created Job, so Kubernetes' garbage collector deletes it
    with the Job (cancel, or ``ttlSecondsAfterFinished``)."""
    meta = job["metadata"]
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"]}
    return {"metadata": {"ownerReferences": [{**ref, "blockOwnerDeletion": False}]}}
