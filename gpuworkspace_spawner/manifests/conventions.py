"""The workspace conventions (issue 16, seed 001 §11/§26): ``/workspace``, ``/checkpoints``, their
environment variables, and the guide every workspace carries: ``README-WORKSPACE.md`` in the home and
a terminal banner, listing what is kept, shared and wiped, the checkpoint target and the quota.

Pure. :func:`build_guide` writes the texts from the profile; :func:`convention_env` the variables
(the spawner's ``get_env``: a container's environment, a VM's ``singleuser.env``);
:func:`apply_conventions` patches the container pod :func:`.pod.build_workspace_pod` built;
:func:`cloud_init_files` are a VM's ``write_files`` entries.

How the README is written (containers): the texts travel in pod annotations and a ``downwardAPI``
volume projects them as files; ``~/README-WORKSPACE.md`` is a read-only ``subPath`` mount of that
volume. So it is rebuilt from the profile at every start (it always describes the profile the
workspace runs now), nothing is ever written onto the home disk (a user's own file of that name is
hidden while the workspace runs, never changed), and an edit fails loudly (read-only file) instead
of being lost at the next start. The container runtime mounts the home first and the file over it
(CRI sorts mounts by path depth). VMs: cloud-init writes the guide to ``/etc/gpuworkspace/`` and
``/etc/motd``; the home is the root disk, so ``/workspace`` is a directory of it.
"""

from __future__ import annotations

import copy
import posixpath
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuworkspace_spawner.catalog.model import Checkpoints, Ide, WorkspaceProfile
from gpuworkspace_spawner.manifests.names import WorkspaceContext, dns_label
from gpuworkspace_spawner.manifests.pod import HOME_VOLUME, NOTEBOOK_CONTAINER, TEAM_VOLUME_PREFIX

WORKSPACE_PATH = "/workspace"
CHECKPOINTS_PATH = "/checkpoints"
WORKSPACE_SUBDIR = "workspace"  # /workspace is this directory of the home disk
GUIDE_DIR = "/etc/gpuworkspace"
README_NAME = "README-WORKSPACE.md"
MOTD_NAME = "motd"
BANNER_NAME = "banner.sh"
PROFILE_D_BANNER = "/etc/profile.d/gpuworkspace-banner.sh"  # login shells (Jupyter terminals) run it
GUIDE_VOLUME = "gpuws-guide"
ANN_README = "gpuworkspace.dev/readme"
ANN_MOTD = "gpuworkspace.dev/motd"
ANN_BANNER = "gpuworkspace.dev/banner"
BANNER_SCRIPT = (
    f"# gpuworkspace: the terminal banner\n[ -r {GUIDE_DIR}/{MOTD_NAME} ] && cat {GUIDE_DIR}/{MOTD_NAME}\n"
)


_WHO_WRITES = {
    "container": "The platform writes this file at every start, from the profile the workspace runs now: "
    "it is read-only, so an edit fails instead of being lost.",
    "vm": "cloud-init writes this file (and /etc/motd) from the profile the VM was created with; the "
    "platform may replace it, so an edit here is not kept.",
}


@dataclass(frozen=True)
class Guide:
    """The texts of one workspace's guide."""

    readme: str
    motd: str


def _home_path(profile: WorkspaceProfile) -> str:
    return "/root" if profile.runtime == "vm" else profile.storage.home.mount_path


def _quota(profile: WorkspaceProfile) -> str:
    if profile.runtime == "vm" and profile.vm is not None:
        return profile.vm.root_disk_size
    return profile.storage.home.size


def _team_claim(profile: WorkspaceProfile, checkpoints: Checkpoints) -> str:
    team = next(t for t in profile.storage.team_directories if t.name == checkpoints.team_directory)
    return posixpath.join(team.claim_name, team.sub_path or "", checkpoints.sub_path or "").rstrip("/")


def checkpoint_target(profile: WorkspaceProfile) -> str | None:
    """Where checkpoints go, in words (None: the profile gives no durable target)."""
    checkpoints = profile.storage.checkpoints
    if checkpoints is None:
        return None
    if checkpoints.team_directory is not None:
        return f"{CHECKPOINTS_PATH}: the team directory {checkpoints.team_directory!r} ({_team_claim(profile, checkpoints)})"
    endpoint = f" at {checkpoints.object_store_endpoint}" if checkpoints.object_store_endpoint else ""
    return f"the object store prefix {checkpoints.object_store_url}{endpoint} ($GPUWS_CHECKPOINTS_URL)"


def convention_env(profile: WorkspaceProfile) -> dict[str, str]:
    """The conventions' environment variables for a workspace of ``profile``."""
    env = {
        "GPUWS_WORKSPACE": WORKSPACE_PATH,
        "GPUWS_HOME_QUOTA": _quota(profile),
        "GPUWS_README": posixpath.join(_home_path(profile), README_NAME)
        if profile.runtime == "container"
        else posixpath.join(GUIDE_DIR, README_NAME),
    }
    checkpoints = profile.storage.checkpoints
    if checkpoints is not None and checkpoints.team_directory is not None:
        env["GPUWS_CHECKPOINTS"] = CHECKPOINTS_PATH
    elif checkpoints is not None and checkpoints.object_store_url is not None:
        env["GPUWS_CHECKPOINTS_URL"] = checkpoints.object_store_url
        if checkpoints.object_store_endpoint:
            env["GPUWS_CHECKPOINTS_ENDPOINT"] = checkpoints.object_store_endpoint
    return env


EDITORS_ENV = (
    "GPUWS_EDITORS"  # every workspace's environment: what its image declares (JupyterLab's launcher)
)


def editors_env(editors: tuple[Ide, ...]) -> dict[str, str]:
    """The workspace's ``$GPUWS_EDITORS``: the editors its profile's image declares (catalog/editors.py),
    in ``IDES`` order, e.g. ``code-server,jupyterlab``. JupyterLab's launcher shows "Open VS Code" only
    where it names code-server (gpuworkspace_spawner/labextension/editors.py)."""
    return {EDITORS_ENV: ",".join(editors)}


def workspace_env(profile: WorkspaceProfile, *, catalog_version: str, ide: str) -> dict[str, str]:
    """Every variable the spawner adds to a workspace's environment: the profile and catalog version it
    was started from, its editor, the editors its image declares (the launcher's "Open VS Code") and
    the conventions' (:func:`convention_env`)."""
    return {
        "GPUWORKSPACE_PROFILE": profile.slug,
        "GPUWORKSPACE_CATALOG_VERSION": catalog_version,
        "GPUWORKSPACE_IDE": ide,
        **editors_env(profile.editors),
        **convention_env(profile),
    }


def _rows(profile: WorkspaceProfile, retention: str) -> list[tuple[str, str, str]]:
    """(path, what it is, what happens to it) for the guide's table."""
    storage, home = profile.storage, _home_path(profile)
    if profile.runtime == "vm":
        rows = [("/ (all of it)", f"the VM's root disk, {_quota(profile)}", f"kept: {retention}")]
    else:
        rows = [(home, f"your home disk, {_quota(profile)}", f"kept: {retention}")]
    on_disk = "the root disk" if profile.runtime == "vm" else f"the home disk ({home}/{WORKSPACE_SUBDIR})"
    rows.append((WORKSPACE_PATH, f"your Git working tree, on {on_disk}", "kept with the disk"))
    target = checkpoint_target(profile)
    if target is not None:
        rows.append(("checkpoints", target, "durable and shared with your team: the authoritative copy"))
    for mount in (storage.datasets, storage.models):
        if mount is not None and profile.runtime == "container":
            rows.append((mount.mount_path, f"shared data ({mount.claim_name})", "shared, read-only"))
    for team in storage.team_directories if profile.runtime == "container" else ():
        access = "read-only" if team.read_only else "read-write"
        rows.append((team.mount_path, f"team directory {team.name!r}", f"shared with your team, {access}"))
    if profile.runtime == "container":
        rows += [
            (storage.scratch.mount_path, "fast node-local scratch", "wiped when the workspace stops"),
            ("/dev/shm", "shared memory", "wiped when the workspace stops"),
            (
                "anything else (/tmp, /opt, apt and pip outside the home)",
                "the image",
                "wiped when the workspace stops",
            ),
        ]
    return rows


def _retention(retention_days: float | None) -> str:
    if retention_days is None:
        return "across stops; after the server is deleted, until the retention period ends"
    if retention_days == 0:
        return "across stops; deleted soon after the server is deleted (the profile keeps no disk)"
    days = f"{retention_days:g} day" + ("" if retention_days == 1 else "s")
    return f"across stops; after the server is deleted, {days}, then the disk is deleted"


def build_guide(ws: WorkspaceContext, *, retention_days: float | None = None) -> Guide:
    """README-WORKSPACE.md and the banner for one start of ``ws``."""
    profile = ws.profile
    rows = _rows(profile, _retention(retention_days))
    table = "\n".join(f"| `{path}` | {what} | {fate} |" for path, what, fate in rows)
    target = checkpoint_target(profile)
    env = "\n".join(f"- `{key}={value}`" for key, value in sorted(convention_env(profile).items()))
    readme = (
        "# Your workspace: what is kept, shared and wiped\n\n"
        f"Profile **{profile.display_name}** (`{profile.slug}`), catalog {ws.catalog_version}. "
        f"{_WHO_WRITES[profile.runtime]} Keep your own notes in another file.\n\n"
        "| Where | What | What happens to it |\n| --- | --- | --- |\n"
        f"{table}\n\n"
        f"**Quota**: your disk holds {_quota(profile)}; the hub home page shows how full it is and warns "
        "when it is nearly full.\n\n"
        f"**Checkpoints**: {target or 'this profile names no durable target: ask your admin; the home disk is not one'}. "
        "Write model checkpoints there, not only to the home disk: the home disk is one copy, deleted "
        "when retention ends.\n\n"
        f"**Code**: keep Git working trees under `{WORKSPACE_PATH}` and push them.\n\n"
        f"**Environment**:\n\n{env}\n"
    )
    short = [f"  {path:<14} {fate}" for path, _what, fate in rows[:3]]
    motd = (
        f"gpuworkspace: {profile.display_name} - your disk holds {_quota(profile)}\n"
        + "\n".join(short)
        + f"\n  What is kept, shared and wiped: {convention_env(profile)['GPUWS_README']}\n"
    )
    return Guide(readme=readme, motd=motd)


def _mount(name: str, path: str, *, sub_path: str | None = None, read_only: bool = False) -> dict[str, Any]:
    mount: dict[str, Any] = {"name": name, "mountPath": path}
    if sub_path:
        mount["subPath"] = sub_path
    if read_only:
        mount["readOnly"] = True
    return mount


def _guide_volume() -> dict[str, Any]:
    items = [
        {"path": file, "fieldRef": {"fieldPath": f"metadata.annotations['{ann}']"}}
        for file, ann in ((README_NAME, ANN_README), (MOTD_NAME, ANN_MOTD), (BANNER_NAME, ANN_BANNER))
    ]
    return {"name": GUIDE_VOLUME, "downwardAPI": {"items": items, "defaultMode": 0o444}}


def convention_mounts(ws: WorkspaceContext) -> list[dict[str, Any]]:
    """The notebook container's mounts of the conventions, in order."""
    profile = ws.profile
    home = profile.storage.home.mount_path
    mounts = [
        _mount(HOME_VOLUME, WORKSPACE_PATH, sub_path=WORKSPACE_SUBDIR),
        _mount(GUIDE_VOLUME, GUIDE_DIR, read_only=True),
        _mount(GUIDE_VOLUME, posixpath.join(home, README_NAME), sub_path=README_NAME, read_only=True),
        _mount(GUIDE_VOLUME, PROFILE_D_BANNER, sub_path=BANNER_NAME, read_only=True),
    ]
    checkpoints = profile.storage.checkpoints
    if checkpoints is not None and checkpoints.team_directory is not None:
        team = next(t for t in profile.storage.team_directories if t.name == checkpoints.team_directory)
        sub = posixpath.join(team.sub_path or "", checkpoints.sub_path or "").strip("/") or None
        mounts.append(_mount(_team_volume(team.name), CHECKPOINTS_PATH, sub_path=sub))
    return mounts


def _team_volume(name: str) -> str:
    return dns_label(TEAM_VOLUME_PREFIX + name)  # the team directory's volume, as pod.py names it


def apply_conventions(
    pod: Mapping[str, Any], ws: WorkspaceContext, *, retention_days: float | None = None
) -> dict[str, Any]:
    """``pod`` (a container workspace's, as :func:`.pod.build_workspace_pod` returns it) with the
    conventions: annotations holding the guide, its volume, the notebook's mounts; a new dict."""
    out: dict[str, Any] = copy.deepcopy(dict(pod))
    guide = build_guide(ws, retention_days=retention_days)
    meta = out.setdefault("metadata", {})
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        ANN_README: guide.readme,
        ANN_MOTD: guide.motd,
        ANN_BANNER: BANNER_SCRIPT,
    }
    spec = out.setdefault("spec", {})
    spec["volumes"] = [v for v in spec.get("volumes") or [] if v.get("name") != GUIDE_VOLUME] + [
        _guide_volume()
    ]
    ours = convention_mounts(ws)
    paths = {m["mountPath"] for m in ours}
    spec["containers"] = [
        {
            **c,
            "volumeMounts": [m for m in c.get("volumeMounts") or [] if m.get("mountPath") not in paths]
            + ours,
        }
        if c.get("name") == NOTEBOOK_CONTAINER
        else c
        for c in spec.get("containers") or []
    ]
    return out


def cloud_init_files(ws: WorkspaceContext, *, retention_days: float | None = None) -> list[dict[str, Any]]:
    """A VM's cloud-init ``write_files`` entries of the guide (world-readable, no secrets) and the
    conventions' environment for login shells."""
    guide = build_guide(ws, retention_days=retention_days)
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(convention_env(ws.profile).items()))
    return [
        {"path": posixpath.join(GUIDE_DIR, README_NAME), "permissions": "0644", "content": guide.readme},
        {"path": "/etc/motd", "permissions": "0644", "content": guide.motd},
        {
            "path": "/etc/profile.d/gpuworkspace.sh",
            "permissions": "0644",
            "content": f"# gpuworkspace: the workspace conventions' environment\n{exports}",
        },
        # write_files creates the parent directories: /workspace exists on the root disk from the first boot
        {"path": posixpath.join(WORKSPACE_PATH, ".gpuworkspace"), "permissions": "0644", "content": ""},
    ]
