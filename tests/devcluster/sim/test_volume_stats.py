"""The simulated kubelet's volume stats: the kubelet's six ``kubelet_volume_stats_*`` families, with
bytes and inodes counted from the volume directory itself."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gpuworkspace_devcluster.sim.resourcemetrics import (
    EXT4_INODE_RATIO,
    VolumeStat,
    _volume_stats,
    render_volume_stats,
)

GI = 1024**3


def _samples(text: str) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels["persistentvolumeclaim"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_every_kubelet_family_is_rendered_with_bytes_and_inodes() -> None:
    text = render_volume_stats([VolumeStat("ws", "home-alice", used=3 * 1024**2, capacity=GI, inodes_used=7)])
    got = _samples(text)
    assert got == {
        ("kubelet_volume_stats_available_bytes", "home-alice"): GI - 3 * 1024**2,
        ("kubelet_volume_stats_capacity_bytes", "home-alice"): GI,
        ("kubelet_volume_stats_inodes", "home-alice"): GI // EXT4_INODE_RATIO,
        ("kubelet_volume_stats_inodes_free", "home-alice"): GI // EXT4_INODE_RATIO - 7,
        ("kubelet_volume_stats_inodes_used", "home-alice"): 7,
        ("kubelet_volume_stats_used_bytes", "home-alice"): 3 * 1024**2,
    }
    assert "# HELP kubelet_volume_stats_inodes_used [ALPHA] Number of used inodes in the volume" in text


def test_an_overfull_volume_never_reports_negative_free_space_or_inodes() -> None:
    got = _samples(render_volume_stats([VolumeStat("ws", "c", used=2048, capacity=1024, inodes_used=5)]))
    assert got[("kubelet_volume_stats_available_bytes", "c")] == 0
    assert got[("kubelet_volume_stats_inodes", "c")] == 5  # a tiny volume: at least what is in use
    assert got[("kubelet_volume_stats_inodes_free", "c")] == 0


def test_stats_are_counted_from_the_volume_directory(tmp_path: Path) -> None:
    volume = tmp_path / "vol"
    (volume / "src" / "pkg").mkdir(parents=True)
    (volume / "src" / "pkg" / "a.py").write_bytes(b"x" * 1000)
    (volume / "notes.txt").write_bytes(b"y" * 24)
    (volume / "link").symlink_to("notes.txt")
    [stat] = _volume_stats([("ws", "home-bob", volume, GI)])
    # root + src + pkg + a.py + notes.txt + link; the link's own size (9 bytes of target name) counts
    assert (stat.used, stat.inodes_used) == (1000 + 24 + len("notes.txt"), 6)
    assert stat.capacity == GI
