"""The job profiles a user may submit to, as the jobs API lists them (pure).

``GET api/v1/profiles`` answers this list; JupyterLab's "Create Notebook Job" dialog offers it as its
environments (gpuworkspace_spawner/scheduler/). A profile outside the user's groups is not listed, as
a submission to it is refused like an unknown one.
"""

from __future__ import annotations

import posixpath
from typing import Any

from ..catalog.jobprofiles import JobProfile
from ..catalog.model import Catalog


def _output(profile: JobProfile) -> str:
    """Where a job's results go, before the ``<user>/<job>/`` the service appends."""
    outputs = profile.outputs
    if outputs.object_store_url is not None:
        return outputs.object_store_url.rstrip("/") + "/"
    team = outputs.team_directory
    return posixpath.join(team.mount_path, outputs.sub_path) + "/" if team is not None else ""


def profile_view(profile: JobProfile) -> dict[str, Any]:
    """One job profile as users see it: what it gives, where it queues, where results go."""
    return {
        "name": profile.slug,
        "displayName": profile.display_name,
        "description": profile.description,
        "gpus": profile.gpus,
        "queue": profile.queue,
        "priorityClass": profile.priority_class,
        "maxRuntimeSeconds": profile.max_runtime_s,
        "output": _output(profile),
    }


def usable_profiles(catalog: Catalog, *, user: str, groups: frozenset[str]) -> list[dict[str, Any]]:
    """The job profiles ``user`` (in ``groups``) may submit to, in catalog order."""
    return [profile_view(p) for p in catalog.job_profiles if p.access.allows(user, groups)]
