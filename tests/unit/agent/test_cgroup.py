"""Pod UIDs from ``/proc/<pid>/cgroup`` as real nodes write it."""

from __future__ import annotations

import pytest

from gpuworkspace_spawner.agent.cgroup import pod_uid_from_cgroup

UID = "fbc202d3-da21-11e8-ab5e-42010a80014b"
CID = "0a1b22ec1361a97c3511db37a4bae932d41b22264e5b97611748f8b662312574"


@pytest.mark.parametrize(
    ("text", "uid"),
    [
        pytest.param(f"6:memory:/kubepods/burstable/pod{UID}/{CID}\n", UID, id="v1-cgroupfs-burstable"),
        pytest.param(
            "12:pids:/kubepods/besteffort/pod74c13223-5a00-11e9-b385-42010a80018d/"
            "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376\n"
            "11:devices:/kubepods/besteffort/pod74c13223-5a00-11e9-b385-42010a80018d/"
            "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376\n",
            "74c13223-5a00-11e9-b385-42010a80018d",
            id="v1-cgroupfs-besteffort-many-controllers",
        ),
        pytest.param(f"4:cpu,cpuacct:/kubepods/pod{UID}/{CID}\n", UID, id="v1-cgroupfs-guaranteed"),
        pytest.param(
            f"1:name=systemd:/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope\n",
            UID,
            id="v1-systemd-guaranteed-crio",
        ),
        pytest.param(
            "0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
            UID,
            id="v2-systemd-burstable-containerd",
        ),
        pytest.param(
            f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice/"
            f"docker-{CID}.scope\n",
            UID,
            id="v2-systemd-besteffort-docker",
        ),
        pytest.param(f"0::/kubepods/burstable/pod{UID}/{CID}\n", UID, id="v2-cgroupfs"),
        pytest.param(
            f"0::/../../kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
            UID,
            id="v2-seen-from-another-cgroup-namespace",
        ),
        pytest.param(
            f"0::/system.slice/docker-{CID}.scope/kubelet.slice/kubelet-kubepods.slice/"
            f"kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID.replace('-', '_')}.slice/"
            f"cri-containerd-{CID}.scope\n",
            UID,
            id="v2-kind-node-in-docker",
        ),
        pytest.param(
            f"0::/kubepods/burstable/pod8a3f0e0c5b6a4e0f9d2c1b0a99887766/{CID}\n",
            "8a3f0e0c5b6a4e0f9d2c1b0a99887766",
            id="static-pod-md5-uid",
        ),
        pytest.param(f"0::/kubepods/burstable/pod{UID.upper()}/{CID}\n", UID, id="upper-case-hex"),
        pytest.param("0::/init.scope\n", "", id="host-systemd"),
        pytest.param("0::/user.slice/user-1000.slice/session-3.scope\n", "", id="host-user-session"),
        pytest.param(f"0::/system.slice/docker-{CID}.scope\n", "", id="plain-docker-container"),
        pytest.param("0::/\n", "", id="own-cgroup-namespace-root"),
        pytest.param("0::/kubepods.slice/kubepods-burstable.slice\n", "", id="qos-slice-only"),
        pytest.param(f"0::/notkube/pod{UID}/{CID}\n", "", id="pod-like-outside-kubepods"),
        pytest.param("", "", id="empty-file"),
        pytest.param("garbage without colons\n", "", id="garbage"),
    ],
)
def test_pod_uid_from_cgroup(text: str, uid: str) -> None:
    assert pod_uid_from_cgroup(text) == uid
