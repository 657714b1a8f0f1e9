"""Inline SVG charts for ``report.html``: diverging bars for paired deltas (the
accuracy scatters are ``report.scatter``).

Plain SVG elements with presentation attributes: no script, no external reference, no
``xmlns`` URL (inline SVG in HTML needs none), no font but the page's. Every bar carries
a ``<title>`` with its exact numbers, so hovering shows what the table says.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import msgspec

from efold.report.numbers import count
from efold.report.schema import Interval
from efold.report.tables import (
    format_delta,
    format_paired_interval,
)

__all__ = ["DeltaBar", "delta_chart"]

_RIGHT = 130  # room for the counts / delta label right of the axis
_PLOT = 260  # width of the 0..100% axis
_CHAR = 6.6  # approximate label glyph width at 11px
_ROW = 30
_TOP = 8
_AXIS = 22
EXACT_COLOUR = "#1f5fa8"
FAILURES_COLOUR = "#e08a1e"
NEGATIVE_COLOUR = "#b8432f"


class DeltaBar(msgspec.Struct, frozen=True):
    label: str
    delta_pp: float | None
    pairs: int
    interval: Interval | None = None  # the delta's paired 95% interval, in pp


_LABEL_CHARS = 32  # a longer label is shortened with an ellipsis (its <title> is whole)


def _label_width(labels: Sequence[str]) -> float:
    longest = max((len(_short(label)) for label in labels), default=4)
    return min(12.0 + _CHAR * _LABEL_CHARS, 12.0 + _CHAR * longest)


def _short(label: str) -> str:
    """A label that fits its column: the chart never grows past its fixed width."""
    if len(label) <= _LABEL_CHARS:
        return label
    return label[: _LABEL_CHARS - 1] + "\u2026"


def _label(x: float, y: float, label: str) -> str:
    return f"<g><title>{escape(label)}</title>{_text(x, y, _short(label), anchor='end')}</g>"


def _open(width: float, height: float, caption: str) -> str:
    return (f'<svg class="chart" viewBox="0 0 {width:.0f} {height}" width="{width:.0f}" '
            f'height="{height}" role="img" aria-label="{escape(caption)}">')


def _text(x: float, y: float, content: str, anchor: str = "start", css: str = "") -> str:
    extra = f' class="{css}"' if css else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>'
            f"{escape(content)}</text>")


def _axis(x0: float, top: float, bottom: float, ticks: Sequence[tuple[float, str]]) -> list[str]:
    parts = []
    for fraction, label in ticks:
        x = x0 + _PLOT * fraction
        parts.append(f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" '
                     f'stroke="#ccc" stroke-width="1"/>')
        parts.append(_text(x, bottom + 14, label, anchor="middle", css="muted"))
    return parts


def delta_chart(bars: Sequence[DeltaBar], caption: str) -> str:
    """One row per contrast: the paired delta in percentage points on a -100..+100
    axis, positive to the right."""
    x0 = _label_width([bar.label for bar in bars])
    height = _TOP + _ROW * len(bars) + _AXIS
    bottom = _TOP + _ROW * len(bars)
    centre = x0 + _PLOT / 2
    parts = [_open(x0 + _PLOT + _RIGHT, height, caption)]
    parts += _axis(x0, _TOP, bottom, [(i / 4, f"{50 * i - 100:+d}") for i in range(5)])
    for row, bar in enumerate(bars):
        y = _TOP + _ROW * row
        parts.append(_label(x0 - 6, y + 17, bar.label))
        title = (f"<title>{escape(bar.label)}: {escape(format_delta(bar.delta_pp))} over "
                 f"{count(bar.pairs)} pairs, 95% CI "
                 f"{escape(format_paired_interval(bar.interval))}</title>")
        if bar.delta_pp is None:
            parts.append(f"<g>{title}{_text(centre + 4, y + 17, 'no pair', css='muted')}</g>")
            continue
        width = _PLOT / 2 * abs(bar.delta_pp) / 100.0
        left = centre if bar.delta_pp >= 0 else centre - width
        colour = EXACT_COLOUR if bar.delta_pp >= 0 else NEGATIVE_COLOUR
        parts.append(f'<g>{title}<rect x="{left:.1f}" y="{y + 6:.1f}" width="{width:.1f}" '
                     f'height="14" fill="{colour}"/></g>')
        parts.append(_text(x0 + _PLOT + 8, y + 17,
                           f"{format_delta(bar.delta_pp)} (n={count(bar.pairs)})", css="muted"))
    parts.append(f'<line x1="{centre:.1f}" y1="{_TOP}" x2="{centre:.1f}" y2="{bottom}" '
                 f'stroke="#555" stroke-width="1"/>')
    parts.append("</svg>")
    return "".join(parts)
