"""SVG charts: structure, escaping, determinism; the utilisation colour scale."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from gpuworkspace_spawner.services.attribution.charts import UNKNOWN_COLOR, bar_chart, line_chart, util_color

SVG = "{http://www.w3.org/2000/svg}"
T0 = 1_750_000_000.0


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def test_line_chart_structure() -> None:
    points = [(T0 + 60 * i, v) for i, v in enumerate([10, 50, 30, 90])]
    svg = line_chart(points, title="GPU <util> & co", y_label="percent", y_max=100)
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    assert root.find(f"{SVG}title").text == "GPU <util> & co"  # type: ignore[union-attr]
    line = root.find(f".//{SVG}polyline")
    area = root.find(f".//{SVG}polygon")
    assert line is not None and area is not None
    assert len(line.get("points", "").split()) == 4
    assert len(area.get("points", "").split()) == 6
    texts = _texts(root)
    assert "percent" in texts and "100" in texts and "0" in texts
    assert "15:06" in texts  # the first point's time (UTC)
    assert svg == line_chart(points, title="GPU <util> & co", y_label="percent", y_max=100)  # deterministic
    assert "&lt;util&gt; &amp; co" in svg


def test_empty_line_chart() -> None:
    root = ET.fromstring(line_chart([], title="nothing"))
    assert root.find(f".//{SVG}polyline") is None
    assert "no data" in _texts(root)


def test_bar_chart() -> None:
    items = [("alice <script>", 3.0), ("bob", 1.5), ("nan", float("nan"))]
    root = ET.fromstring(bar_chart(items, title="Top by GPU", unit="GPUs", colors=["#ff0000"]))
    bars = root.findall(f".//{SVG}g[@class='bar']")
    assert len(bars) == 3
    rects = [b.find(f"{SVG}rect") for b in bars]
    widths = [float(r.get("width", "")) for r in rects if r is not None]
    assert widths[0] > widths[1] > 0 and widths[2] == 0
    assert rects[0].get("fill") == "#ff0000"  # type: ignore[union-attr]
    assert "alice <script>" in _texts(root) and "3 GPUs" in _texts(root)
    assert "no data" in _texts(ET.fromstring(bar_chart([], title="t")))


@pytest.mark.parametrize(
    ("percent", "color"),
    [
        (None, UNKNOWN_COLOR),
        (float("nan"), UNKNOWN_COLOR),
        (-5, "#4285f4"),
        (0, "#4285f4"),
        (100, "#ea4335"),
        (250, "#ea4335"),
        (70, "#fbbc05"),
    ],
)
def test_util_color(percent: float | None, color: str) -> None:
    assert util_color(percent) == color


def test_util_color_interpolates_between_stops() -> None:
    # halfway between idle blue (66,133,244) and light-use green (52,168,83)
    assert util_color(15) == "#3b96a4"
