"""``JobProfile`` documents: what a batch Job submitted from a workspace may run on (issue 17).

Pure. A job profile lives in the same catalog files as the WorkspaceProfiles and is validated the same
way (JSON Schema, then cross-field checks, every problem naming file, profile and field)::

    apiVersion: gpuworkspace.dev/v1alpha1
    kind: JobProfile
    metadata: {name: train-1gpu}
    spec:
      displayName: "Training, 1 GPU"
      image: quay.io/jupyter/pytorch-notebook@sha256:<64 hex>
      resources:
        requests: {cpu: "4", memory: 32Gi, nvidia.com/gpu: "1"}
        limits: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "1"}
      queue: training                # the Kueue LocalQueue in the workspace namespace
      priorityClass: batch-normal    # a Kueue WorkloadPriorityClass (optional)
      maxRuntime: 12h                # the Job's activeDeadlineSeconds
      access: {groups: [ml-team]}
      outputs:                       # exactly one durable target
        teamDirectory: team-shared   # a writable teamDirectories entry of a WorkspaceProfile
        subPath: jobs

The team directory is one the workspaces mount too, so a job's executed notebook appears in the
workspace under ``<the team directory's mountPath>/<subPath>/<user>/<job>``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .building import quantity_text
from .checks import CatalogSettings, check_image, check_quantities, check_requests_within_limits
from .model import API_VERSION, Access, Resources, SharedMount, WorkspaceProfile
from .schema import (
    CHECKPOINTS,
    DNS_LABEL,
    DURATION,
    IMAGE_REFERENCE,
    METADATA,
    NAMES,
    RESOURCE_MAP,
    SUB_PATH,
    _obj,
    _string,
)
from .units import GPU_RESOURCE, parse_duration

JOB_PROFILE_KIND = "JobProfile"
MAX_RUNTIME_S = 30 * 24 * 3600  # a Job's deadline: at most 30 days
MIN_RUNTIME_S = 60
Finding = tuple[str, str]


@dataclass(frozen=True)
class JobOutputs:
    """The durable target of a job's results: a team directory (resolved to its claim) or a prefix."""

    team_directory: SharedMount | None = None  # the WorkspaceProfile's entry it names
    sub_path: str = ""  # inside the team directory
    object_store_url: str | None = None
    object_store_endpoint: str | None = None


@dataclass(frozen=True)
class JobProfile:
    slug: str
    display_name: str
    image: str  # pinned by digest unless the catalog allows tags
    queue: str  # Kueue LocalQueue name
    max_runtime_s: int
    outputs: JobOutputs
    description: str = ""
    resources: Resources = field(default_factory=Resources)
    priority_class: str | None = None  # Kueue WorkloadPriorityClass
    backoff_limit: int = 0
    access: Access = field(default_factory=Access)
    source: str = ""

    @property
    def gpus(self) -> int:
        """Whole GPUs (``nvidia.com/gpu``) each job gets; 0 for none."""
        value = self.resources.limits.get(GPU_RESOURCE) or self.resources.requests.get(GPU_RESOURCE)
        return int(value) if value else 0


OUTPUTS: dict[str, Any] = _obj(
    {
        "teamDirectory": DNS_LABEL,
        "subPath": SUB_PATH,
        "objectStore": CHECKPOINTS["properties"]["objectStore"],  # the same prefix and endpoint rules
    }
)
JOB_PROFILE_SPEC: dict[str, Any] = _obj(
    {
        "displayName": _string(100),
        "description": _string(2000, min_length=0),
        "image": IMAGE_REFERENCE,
        "resources": _obj({"requests": RESOURCE_MAP, "limits": RESOURCE_MAP}),
        "queue": {**DNS_LABEL, "errorMessage": "{value} is not a LocalQueue name (a DNS-1123 label)"},
        "priorityClass": {
            **DNS_LABEL,
            "errorMessage": "{value} is not a WorkloadPriorityClass name (a DNS-1123 label)",
        },
        "maxRuntime": DURATION,
        "backoffLimit": {"type": "integer", "minimum": 0, "maximum": 10},
        "access": _obj({"groups": NAMES, "users": NAMES}),
        "outputs": OUTPUTS,
    },
    required=("displayName", "image", "queue", "maxRuntime", "outputs"),
)
JOB_PROFILE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": f"https://gpuworkspace.dev/schemas/v1alpha1/{JOB_PROFILE_KIND}.json",
    "title": JOB_PROFILE_KIND,
    **_obj(
        {
            "apiVersion": {"const": API_VERSION, "errorMessage": f"{{value}}: must be {API_VERSION}"},
            "kind": {"const": JOB_PROFILE_KIND},
            "metadata": METADATA,
            "spec": JOB_PROFILE_SPEC,
        },
        required=("apiVersion", "kind", "metadata", "spec"),
    ),
}


def writable_team_directories(profiles: tuple[WorkspaceProfile, ...]) -> dict[str, SharedMount]:
    """Team directories that some workspace mounts writable, by name (the first profile's entry wins)."""
    found: dict[str, SharedMount] = {}
    for profile in profiles:
        for team in profile.storage.team_directories:
            if not team.read_only:
                found.setdefault(team.name, team)
    return found


def _check_outputs(spec: Mapping[str, Any], teams: Mapping[str, SharedMount]) -> Iterator[Finding]:
    outputs = spec.get("outputs") or {}
    team, store = "teamDirectory" in outputs, "objectStore" in outputs
    if team == store:
        yield (
            "spec.outputs",
            "give exactly one target: teamDirectory (a writable team directory the workspaces mount) or "
            "objectStore (an object-store prefix, e.g. {url: s3://bucket/jobs/})",
        )
        return
    sub_path = outputs.get("subPath", "")
    if store and sub_path:
        yield "spec.outputs.subPath", "subPath is a directory of a teamDirectory; put it in objectStore.url"
    if ".." in sub_path.split("/") or sub_path.startswith("/"):
        yield "spec.outputs.subPath", "must be relative and must not contain '..'"
    if team and outputs["teamDirectory"] not in teams:
        known = ", ".join(sorted(teams)) or "none"
        yield (
            "spec.outputs.teamDirectory",
            f"{outputs['teamDirectory']!r} is not a writable teamDirectories entry of any WorkspaceProfile, "
            f"so results would not appear in a workspace (writable team directories: {known})",
        )


def _check_runtime(spec: Mapping[str, Any]) -> Iterator[Finding]:
    seconds = parse_duration(spec["maxRuntime"])
    if not MIN_RUNTIME_S <= seconds <= MAX_RUNTIME_S:
        yield (
            "spec.maxRuntime",
            f"{spec['maxRuntime']!r}: a job's maximum runtime is between 1m and 30d",
        )


def _check_gpus(spec: Mapping[str, Any]) -> Iterator[Finding]:
    resources = spec.get("resources") or {}
    for section in ("requests", "limits"):
        for name in resources.get(section) or {}:
            if name.startswith("nvidia.com/") and name != GPU_RESOURCE:
                yield (
                    f"spec.resources.{section}.{name}",
                    f"jobs get whole GPUs ({GPU_RESOURCE}); a shared or MIG slice is for interactive "
                    "workspaces, and Kueue quotas count whole cards",
                )


def job_profile_findings(
    spec: Mapping[str, Any], settings: CatalogSettings, teams: Mapping[str, SharedMount]
) -> list[Finding]:
    """Cross-field problems of a schema-valid JobProfile spec."""
    findings = list(check_image(spec, settings))
    findings += check_quantities(spec, settings)
    findings += check_requests_within_limits(spec, settings)
    findings += _check_gpus(spec)
    findings += _check_runtime(spec)
    findings += _check_outputs(spec, teams)
    return findings


def build_job_profile(body: Mapping[str, Any], teams: Mapping[str, SharedMount], source: str) -> JobProfile:
    """A checked JobProfile document as the model."""
    spec = body["spec"]
    resources = spec.get("resources") or {}
    outputs = spec["outputs"]
    store = outputs.get("objectStore") or {}
    access = spec.get("access") or {}
    return JobProfile(
        slug=body["metadata"]["name"],
        display_name=spec["displayName"],
        description=spec.get("description", ""),
        image=spec["image"],
        queue=spec["queue"],
        priority_class=spec.get("priorityClass"),
        max_runtime_s=parse_duration(spec["maxRuntime"]),
        backoff_limit=spec.get("backoffLimit", 0),
        resources=Resources(
            requests={k: quantity_text(v) for k, v in (resources.get("requests") or {}).items()},
            limits={k: quantity_text(v) for k, v in (resources.get("limits") or {}).items()},
        ),
        access=Access(groups=frozenset(access.get("groups", [])), users=frozenset(access.get("users", []))),
        outputs=JobOutputs(
            team_directory=teams.get(outputs["teamDirectory"]) if "teamDirectory" in outputs else None,
            sub_path=posixpath.normpath(outputs["subPath"]) if outputs.get("subPath") else "",
            object_store_url=store.get("url"),
            object_store_endpoint=store.get("endpoint"),
        ),
        source=source,
    )
