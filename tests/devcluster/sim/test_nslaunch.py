"""The container launcher (sim/nslaunch.py) and the kubelet's atomic writer, without a cluster.

The launcher is run as the kubelet runs it (``python -I -S nslaunch.py CMD…`` with its spec in the
environment); what the command prints is what a container's process would see.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuworkspace_devcluster.sim import atomicwriter, mountns
from gpuworkspace_devcluster.sim.podvolumes import MountTable

NAMESPACES, WHY = mountns.available(sys.executable)
needs_namespaces = pytest.mark.skipif(not NAMESPACES, reason=f"no mount namespaces here: {WHY}")


def launch(
    table: MountTable, script: str, cwd: str = "/", mkdirs: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", mountns.SPEC_ENV: json.dumps(mountns.spec(table, cwd, list(mkdirs)))}
    argv = mountns.launcher_argv(sys.executable, ["sh", "-c", script])
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)


@needs_namespaces
def test_volumes_at_their_paths_read_only_where_asked_host_never_written(tmp_path: Path) -> None:
    root, data, cfg = tmp_path / "root", tmp_path / "data", tmp_path / "cfg"
    for d in (root, data, cfg):
        d.mkdir()
    (cfg / "app.conf").write_text("answer=42\n")
    host_file = tmp_path / "host.txt"
    host_file.write_text("host\n")
    table = MountTable(
        root,
        {"/data": data, "/etc/app/app.conf": cfg / "app.conf", "/config": cfg},
        frozenset({"/etc/app/app.conf", "/config"}),
    )
    script = (
        "cat /etc/app/app.conf; echo hi > /data/out; pwd; "
        "echo no > /config/x 2>/dev/null || echo config-ro; "
        f"echo changed > {host_file}; cat {host_file}; echo $GPUWORKSPACE_NS_SPEC"
    )
    done = launch(table, script, cwd="/work/dir", mkdirs=("/home/someone",))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:5] == ["answer=42", "/work/dir", "config-ro", "changed", ""]  # the spec is not passed on
    assert (data / "out").read_text() == "hi\n"  # a volume is the host's directory
    assert host_file.read_text() == "host\n"  # the rest of the host: copy-on-write into the container's layer
    assert not Path("/work/dir").exists() and not Path("/home/someone").exists()
    assert not os.path.ismount(root)  # the writable layer's tmpfs lived in the namespace only


@needs_namespaces
def test_a_missing_command_or_volume_fails_like_the_runtime(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    env = {"PATH": "/usr/bin:/bin", mountns.SPEC_ENV: json.dumps(mountns.spec(MountTable(root), "/", []))}
    argv = mountns.launcher_argv(sys.executable, ["no-such-command"])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 127
    assert 'exec: "no-such-command": executable file not found in $PATH' in done.stderr
    gone = launch(MountTable(root, {"/data": tmp_path / "missing"}), "true")
    assert gone.returncode == 128 and "volume source" in gone.stderr and "/data" in gone.stderr


def test_container_path_lookup_uses_the_volumes_then_the_host(tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "run.sh").write_text("#!/bin/sh\n")
    (scripts / "run.sh").chmod(0o755)
    table = MountTable(tmp_path / "root", {"/opt/scripts": scripts})
    env = {"PATH": "/opt/scripts:/usr/bin:/bin"}
    assert mountns.find_executable(table, "run.sh", env, mountns.is_executable)
    assert mountns.find_executable(table, "/opt/scripts/run.sh", env, mountns.is_executable)
    assert mountns.find_executable(table, "sh", env, mountns.is_executable)
    assert not mountns.find_executable(table, "nope", env, mountns.is_executable)
    assert mountns.command_of(mountns.launcher_argv("/py", ["sh", "-c", "x"])) == ["sh", "-c", "x"]


def test_atomic_writer_swaps_data_and_keeps_old_inodes_for_subpath_binds(tmp_path: Path) -> None:
    target = tmp_path / "vol"
    assert atomicwriter.write(target, {"a": (b"1", 0o644), "dir/b": (b"2", 0o400)})
    first = os.readlink(target / "..data")
    assert os.readlink(target / "a") == "..data/a" and (target / "dir" / "b").read_bytes() == b"2"
    assert (target / "dir" / "b").stat().st_mode & 0o777 == 0o400
    with open(target / "a", "rb") as held:  # what a subPath bind holds: the file, not the link
        assert not atomicwriter.write(target, {"a": (b"1", 0o644), "dir/b": (b"2", 0o400)})  # unchanged
        assert os.readlink(target / "..data") == first
        assert atomicwriter.write(target, {"a": (b"new", 0o644)})
        assert (target / "a").read_bytes() == b"new" and not (target / "dir").exists()
        assert os.readlink(target / "..data") != first and not (target / first).exists()
        assert held.read() == b"1"  # the old content stays with whoever holds it
    with pytest.raises(ValueError, match="must be relative"):
        atomicwriter.write(target, {"../escape": (b"", 0o644)})
