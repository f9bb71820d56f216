"""Server-rendered SVG charts for the dashboard (pure, deterministic, every text escaped).

:func:`line_chart` draws a series of ``(t, v)`` points as a line over a filled area with axis labels
and a title; :func:`bar_chart` draws horizontal bars (top consumers); :func:`util_color` is the
utilisation colour scale of the node grid (grey: unknown, blue: idle … red: saturated).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape

Point = tuple[float, float]

UNKNOWN_COLOR = "#9e9e9e"
# (percent, RGB) stops: idle blue, light use green, busy amber, saturated red.
_STOPS: tuple[tuple[float, tuple[int, int, int]], ...] = (
    (0.0, (66, 133, 244)),
    (30.0, (52, 168, 83)),
    (70.0, (251, 188, 5)),
    (100.0, (234, 67, 53)),
)
_FONT = 'font-family="sans-serif" font-size="11"'
_MARGIN = (48, 16, 28, 28)  # left, right, bottom, top
_Y_TICKS = 4


def util_color(percent: float | None) -> str:
    """``#rrggbb`` for a utilisation in percent (clamped to 0..100); :data:`UNKNOWN_COLOR` for None/NaN."""
    if percent is None or math.isnan(percent):
        return UNKNOWN_COLOR
    p = min(100.0, max(0.0, percent))
    for (p0, c0), (p1, c1) in itertools.pairwise(_STOPS):
        if p <= p1:
            f = (p - p0) / (p1 - p0)
            r, g, b = (round(lo + (hi - lo) * f) for lo, hi in zip(c0, c1, strict=True))
            return f"#{r:02x}{g:02x}{b:02x}"
    return "#{:02x}{:02x}{:02x}".format(*_STOPS[-1][1])


def _n(v: float) -> str:
    """A coordinate with at most one decimal, no trailing zeros: stable across platforms."""
    text = f"{v:.1f}"
    return text[:-2] if text.endswith(".0") else text


_SI = ((1e9, "G"), (1e6, "M"), (1e3, "k"))


def _label(v: float) -> str:
    for scale, suffix in _SI:
        if abs(v) >= scale:
            return f"{v / scale:.3g}{suffix}"
    return f"{v:.3g}"


def _time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M")


def _frame(width: int, height: int, title: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<text class="title" x="{width // 2}" y="16" text-anchor="middle" {_FONT} font-weight="bold">'
        f"{escape(title)}</text>",
    ]


def line_chart(
    points: Sequence[Point],
    *,
    title: str,
    y_label: str = "",
    width: int = 480,
    height: int = 180,
    y_max: float | None = None,
    color: str = "#4285f4",
) -> str:
    """A line over a filled area; x is time (UTC, HH:MM), y from 0 to ``y_max`` (default: the data's max).

    With no points the frame, axes and a "no data" note are drawn.
    """
    left, right, bottom, top = _MARGIN
    pw, ph = width - left - right, height - top - bottom
    pts = sorted((t, v) for t, v in points if math.isfinite(t) and math.isfinite(v))
    top_v = y_max if y_max is not None else max([v for _, v in pts] + [0.0])
    top_v = top_v if top_v > 0 else 1.0
    t0, t1 = (pts[0][0], pts[-1][0]) if pts else (0.0, 1.0)
    span = (t1 - t0) or 1.0

    def x(t: float) -> float:
        return left + (t - t0) / span * pw

    def y(v: float) -> float:
        return top + ph - min(max(v, 0.0), top_v) / top_v * ph

    out = _frame(width, height, title)
    out.append('<g class="axes" stroke="#888" stroke-width="1">')
    out.append(f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}"/></g>')
    out.append('<g class="y-ticks">')
    for i in range(_Y_TICKS + 1):
        v = top_v * i / _Y_TICKS
        out.append(
            f'<text x="{left - 4}" y="{_n(y(v) + 4)}" text-anchor="end" {_FONT}>{escape(_label(v))}</text>'
        )
    out.append("</g>")
    if y_label:
        out.append(
            f'<text class="y-label" x="12" y="{top + ph // 2}" text-anchor="middle" {_FONT} '
            f'transform="rotate(-90 12 {top + ph // 2})">{escape(y_label)}</text>'
        )
    if not pts:
        out.append(
            f'<text class="empty" x="{left + pw // 2}" y="{top + ph // 2}" text-anchor="middle" {_FONT}>no data</text>'
        )
    else:
        out.append('<g class="x-ticks">')
        for t, anchor in ((t0, "start"), (t1, "end")):
            out.append(
                f'<text x="{_n(x(t))}" y="{height - 8}" text-anchor="{anchor}" {_FONT}>{_time(t)}</text>'
            )
        out.append("</g>")
        line = " ".join(f"{_n(x(t))},{_n(y(v))}" for t, v in pts)
        area = f"{_n(x(t0))},{_n(top + ph)} {line} {_n(x(t1))},{_n(top + ph)}"
        out.append(f'<polygon class="area" points="{area}" fill="{color}" fill-opacity="0.2" stroke="none"/>')
        out.append(
            f'<polyline class="line" points="{line}" fill="none" stroke="{color}" stroke-width="1.5"/>'
        )
    out.append("</svg>")
    return "\n".join(out)


def bar_chart(
    items: Sequence[tuple[str, float]],
    *,
    title: str,
    unit: str = "",
    width: int = 480,
    bar_height: int = 18,
    colors: Sequence[str] | None = None,
) -> str:
    """Horizontal bars, one per ``(label, value)`` in the given order, each labelled with its value."""
    label_w, value_w, top = 160, 64, 28
    height = top + max(1, len(items)) * (bar_height + 4) + 8
    scale = max([v for _, v in items if math.isfinite(v)] + [0.0]) or 1.0
    out = _frame(width, height, title)
    if not items:
        out.append(
            f'<text class="empty" x="{width // 2}" y="{top + 12}" text-anchor="middle" {_FONT}>no data</text>'
        )
    for i, (label, value) in enumerate(items):
        yy = top + i * (bar_height + 4)
        v = value if math.isfinite(value) else 0.0
        w = max(0.0, v) / scale * (width - label_w - value_w)
        fill = colors[i] if colors and i < len(colors) else "#4285f4"
        text = f"{_label(v)}{' ' + unit if unit else ''}"
        out.append('<g class="bar">')
        out.append(
            f'<text x="{label_w - 6}" y="{yy + bar_height - 5}" text-anchor="end" {_FONT}>{escape(label)}</text>'
        )
        out.append(
            f'<rect x="{label_w}" y="{yy}" width="{_n(w)}" height="{bar_height}" fill="{escape(fill)}"/>'
        )
        out.append(f'<text x="{_n(label_w + w + 4)}" y="{yy + bar_height - 5}" {_FONT}>{escape(text)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)
