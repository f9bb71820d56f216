"""The golden VM image's small root filesystem, written into a volume's directory.

The CSI provisioner seeds a new volume with :func:`seed_golden` when its PVC carries
``topology.ROOTFS_ANNOTATION`` (the golden PVC from the topology file does).
"""

from __future__ import annotations

from pathlib import Path

_OS_RELEASE_2404 = """\
PRETTY_NAME="Ubuntu 24.04.2 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.2 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=noble
LOGO=ubuntu-logo
"""
_LSB_RELEASE_2404 = 'DISTRIB_ID=Ubuntu\nDISTRIB_RELEASE=24.04\nDISTRIB_CODENAME=noble\nDISTRIB_DESCRIPTION="Ubuntu 24.04.2 LTS"\n'
ROOTFS: dict[str, dict[str, str | None]] = {
    # path → file content (None: a directory)
    "ubuntu-24.04": {
        "etc/os-release": _OS_RELEASE_2404,
        "etc/lsb-release": _LSB_RELEASE_2404,
        "etc/hostname": "ubuntu\n",
        "opt": None,
        "usr/local/bin": None,
        "usr/local/lib": None,
        "usr/local/share": None,
        "home": None,
        "root": None,
        "tmp": None,
        "var/lib": None,
        "var/log": None,
        "var/tmp": None,
    }
}


def seed_golden(target: Path | str, rootfs: str = "ubuntu-24.04") -> Path:
    """Write the small root filesystem ``rootfs`` under ``target``; files already there are kept."""
    root = Path(target)
    for rel, content in ROOTFS[rootfs].items():
        path = root / rel
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
        elif not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
    return root
