"""An inline SVG scatter of accuracy (with its Wilson 95% interval) against a cost
(checkpoint size, money per correct answer): one labelled point per role.

The same rules as ``report.svg``: plain elements with presentation attributes, no script,
no external reference, a ``<title>`` on every point with its exact figures. Every point
carries its role's name beside it, so colour is never the only signal; a label that
would overlap an earlier one moves down (a thin leader line then ties it to its point).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

import msgspec

from efold.report.schema import Proportion
from efold.report.table_kit import format_interval, format_proportion

__all__ = ["ScatterPoint", "nice_ceiling", "scatter_chart"]

_LEFT, _RIGHT, _TOP, _BOTTOM = 44, 96, 10, 44
_PLOT_W, _PLOT_H = 300, 210
_LABEL_H = 13  # a label's line height: closer labels are pushed apart
_CHAR = 6.6  # approximate glyph width at 11px
_STEPS = (1.0, 1.2, 1.6, 2.0, 2.4, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
_PALETTE = ("#1f5fa8", "#b8432f", "#2e7d32", "#6a4c93", "#b26a00", "#00838f", "#ad1457",
            "#455a64")


class ScatterPoint(msgspec.Struct, frozen=True):
    label: str
    x: float  # the cost, >= 0, in the axis's unit
    x_text: str  # the same figure for people (the point's <title>)
    accuracy: Proportion  # rate and wilson95 non-null (points without one are left out)
    colour: int  # the role's place in the plan: one role, one colour, in every chart


def nice_ceiling(value: float) -> float:
    """The smallest 1, 1.2, 1.6, 2, 2.4, 3, 4, 5, 6 or 8 times a power of ten at or above
    ``value`` (> 0): each divides into four ticks that read well."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(step * power for step in _STEPS if step * power >= value * (1 - 1e-12))


def _tick_text(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:,.0f}k" if value % 1000 == 0 else f"{value / 1000:,.1f}k"
    return f"{value:g}"


def _text(x: float, y: float, content: str, anchor: str = "start", css: str = "") -> str:
    extra = f' class="{css}"' if css else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>'
            f"{escape(content)}</text>")


def _label_boxes(anchors: Sequence[tuple[float, float, str]]) -> list[float]:
    """Baselines for labels starting at (x, baseline) in the order given, each moved down
    until its box overlaps no earlier label's."""
    placed: list[tuple[float, float, float]] = []  # x0, x1, baseline
    out = []
    for x, y, label in anchors:
        x1 = x + _CHAR * len(label)
        while any(x < b1 and a0 < x1 and abs(y - base) < _LABEL_H for a0, b1, base in placed):
            y += 3
        placed.append((x, x1, y))
        out.append(y)
    return out


def scatter_chart(points: Sequence[ScatterPoint], x_title: str, caption: str) -> str:
    """Accuracy (0-100%, y) against ``x`` (0 to a round ceiling), one point per role with
    a vertical Wilson whisker."""
    scale = nice_ceiling(max((p.x for p in points), default=1.0))
    width, height = _LEFT + _PLOT_W + _RIGHT, _TOP + _PLOT_H + _BOTTOM
    bottom = _TOP + _PLOT_H
    parts = [f'<svg class="chart scatter" viewBox="0 0 {width} {height}" width="{width}" '
             f'height="{height}" role="img" aria-label="{escape(caption)}">']
    for i in range(5):  # accuracy grid: 0, 25, ..., 100%
        y = bottom - _PLOT_H * i / 4
        parts.append(f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{_LEFT + _PLOT_W}" y2="{y:.1f}" '
                     'stroke="#e3e3e3" stroke-width="1"/>')
        parts.append(_text(_LEFT - 6, y + 4, f"{25 * i}%", anchor="end", css="muted"))
    for i in range(5):  # cost ticks
        x = _LEFT + _PLOT_W * i / 4
        parts.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}" '
                     'stroke="#888" stroke-width="1"/>')
        parts.append(_text(x, bottom + 16, _tick_text(scale * i / 4), anchor="middle",
                           css="muted"))
    parts.append(f'<path d="M{_LEFT} {_TOP}V{bottom}H{_LEFT + _PLOT_W}" stroke="#555" '
                 'stroke-width="1" fill="none"/>')
    parts.append(_text(_LEFT + _PLOT_W / 2, bottom + 34, x_title, anchor="middle"))
    shown = [p for p in points if p.accuracy.rate is not None and p.accuracy.wilson95]
    order = sorted(range(len(shown)), key=lambda i: -(shown[i].accuracy.rate or 0.0))
    centres = {i: (_LEFT + _PLOT_W * shown[i].x / scale,
                   bottom - _PLOT_H * (shown[i].accuracy.rate or 0.0)) for i in order}
    wanted = [(centres[i][0] + 9, centres[i][1] + 4, shown[i].label) for i in order]
    baselines = dict(zip(order, _label_boxes(wanted), strict=True))
    for i in order:
        point, (cx, cy) = shown[i], centres[i]
        colour = _PALETTE[point.colour % len(_PALETTE)]
        interval = point.accuracy.wilson95
        assert interval is not None  # filtered above
        lo, hi = bottom - _PLOT_H * interval.lower, bottom - _PLOT_H * interval.upper
        title = (f"<title>{escape(point.label)}: {escape(format_proportion(point.accuracy))} "
                 f"(95% CI {escape(format_interval(interval))}), {escape(point.x_text)}"
                 "</title>")
        label_y = baselines[i]
        leader = ("" if label_y - cy < 8 else
                  f'<line x1="{cx + 3:.1f}" y1="{cy + 3:.1f}" x2="{cx + 8:.1f}" '
                  f'y2="{label_y - 4:.1f}" stroke="{colour}" stroke-width="0.8"/>')
        parts.append(
            f"<g>{title}"
            f'<path d="M{cx:.1f} {hi:.1f}V{lo:.1f}M{cx - 4:.1f} {hi:.1f}H{cx + 4:.1f}'
            f'M{cx - 4:.1f} {lo:.1f}H{cx + 4:.1f}" stroke="{colour}" stroke-width="1.3" '
            f'fill="none"/><circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{colour}" '
            f'fill-opacity="0.55" stroke="{colour}" stroke-width="1.5"/>'
            f"{leader}{_text(cx + 9, label_y, point.label)}</g>")
    parts.append("</svg>")
    return "".join(parts)
