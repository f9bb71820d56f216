"""The job profiles a user may submit to (``GET api/v1/profiles``; pure): only those their groups allow,
with where each one's results go."""

from __future__ import annotations

from gpuworkspace_spawner.catalog.jobprofiles import JobOutputs, JobProfile
from gpuworkspace_spawner.catalog.model import Access, Catalog, Resources, SharedMount
from gpuworkspace_spawner.jobs.offer import usable_profiles

IMAGE = "img@sha256:" + "a" * 64
TEAM = SharedMount("team-shared", "team-claim", "/home/jovyan/team", read_only=False)
CATALOG = Catalog(
    version="1",
    profiles=(),
    job_profiles=(
        JobProfile(
            "one-gpu",
            "One GPU",
            IMAGE,
            "training",
            43200,
            JobOutputs(team_directory=TEAM, sub_path="jobs"),
            resources=Resources(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"}),
            priority_class="batch-normal",
        ),
        JobProfile(
            "four-gpus",
            "Four GPUs",
            IMAGE,
            "training",
            3600,
            JobOutputs(object_store_url="s3://jobs/outputs"),
            access=Access(groups=frozenset({"gpu-users"})),
        ),
    ),
)


def test_a_user_sees_only_the_profiles_their_groups_allow() -> None:
    (mine,) = usable_profiles(CATALOG, user="alice", groups=frozenset({"researchers"}))
    assert mine == {
        "name": "one-gpu",
        "displayName": "One GPU",
        "description": "",
        "gpus": 1,
        "queue": "training",
        "priorityClass": "batch-normal",
        "maxRuntimeSeconds": 43200,
        "output": "/home/jovyan/team/jobs/",
    }
    both = usable_profiles(CATALOG, user="bob", groups=frozenset({"gpu-users"}))
    assert [p["name"] for p in both] == ["one-gpu", "four-gpus"]
    assert both[1]["output"] == "s3://jobs/outputs/" and both[1]["gpus"] == 0
