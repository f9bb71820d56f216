"""The pod a process belongs to, from the text of ``/proc/<pid>/cgroup`` (pure).

The kubelet puts every container in a cgroup under its pod's, named after the pod UID:

- cgroup v1 or v2, cgroupfs driver: ``/kubepods/burstable/pod<uid>/<container id>``
  (Guaranteed pods sit directly under ``/kubepods/pod<uid>``);
- systemd driver: ``/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice/
  cri-containerd-<id>.scope``, where the UID's ``-`` are written ``_``;
- seen from another cgroup namespace (the agent's own container), v2 paths are relative:
  ``0::/../../kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope``.

Static pods have a 32-hex-digit UID (an md5 of the manifest) instead of a UUID.
"""

from __future__ import annotations

import re

_HEX = "[0-9a-fA-F]"
_UUID = f"{_HEX}{{8}}[-_]{_HEX}{{4}}[-_]{_HEX}{{4}}[-_]{_HEX}{{4}}[-_]{_HEX}{{12}}"
_POD = re.compile(rf"(?:^|[/-])pod({_UUID}|{_HEX}{{32}})(?:\.slice)?(?=/|$)")


def pod_uid_from_path(path: str) -> str:
    """The pod UID in one cgroup path, ``""`` when the path is not a pod's."""
    if "kubepods" not in path:
        return ""
    found = _POD.findall(path)
    return found[-1].replace("_", "-").lower() if found else ""


def pod_uid_from_cgroup(text: str) -> str:
    """The pod UID named by ``/proc/<pid>/cgroup`` (``hierarchy:controllers:path`` lines), ``""`` when
    the process is in no pod (a host process, or a file that could not be read)."""
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) == len(("id", "controllers", "path")):
            uid = pod_uid_from_path(parts[2])
            if uid:
                return uid
    return ""
