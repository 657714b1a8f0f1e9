"""``report.html``: one self-contained page (inline CSS, inline SVG charts).

No script, no link, no image, no font file, no URL of any kind: the page renders the same
offline, from a file, in a browser with networking disabled, and opening it can never
reach anyone. Every dynamic string is HTML-escaped even though ``join_receipts`` already
restricts ids to a safe alphabet.
"""

from __future__ import annotations

import re
from html import escape

from efold.report.results import FAUX_NOTE, reader_label
from efold.report.schema import Results
from efold.report.status import status_banner
from efold.report.svg import (
    EXACT_COLOUR,
    FAILURES_COLOUR,
    AccuracyBar,
    DeltaBar,
    accuracy_chart,
    delta_chart,
)
from efold.report.tables import Table, category_label, contrast_label, report_tables

__all__ = ["render_html"]

_CSS = f"""
:root {{ color-scheme: light; }}
body {{ font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1b1b1b;
  background: #fff; margin: 0 auto; padding: 24px 32px 48px; max-width: 1400px; }}
h1 {{ font-size: 22px; margin: 0 0 12px; }}
h2 {{ font-size: 17px; margin: 32px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }}
h3 {{ font-size: 14px; margin: 0 0 4px; }}
.faux {{ border-left: 4px solid {FAILURES_COLOUR}; background: #fff6ea; padding: 8px 12px;
  margin: 0 0 16px; font-weight: 600; }}
.status {{ border-left: 6px solid #2e7d32; background: #f1f8f1; padding: 8px 12px;
  margin: 0 0 16px; }}
.status p.verdict {{ font-size: 16px; font-weight: 700; margin: 0 0 4px; }}
.status ul {{ margin: 0; padding-left: 20px; }}
.status-stopped, .status-interrupted, .status-running {{ border-left-color: {FAILURES_COLOUR};
  background: #fff6ea; }}
.status-crashed, .status-unreconciled, .status-unknown {{ border-left-color: #b71c1c;
  background: #fdecea; }}
dl.identity {{ display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px;
  margin: 0 0 8px; }}
dl.identity dt {{ color: #555; }} dl.identity dd {{ margin: 0; }}
code {{ font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; }}
.panels {{ display: flex; flex-wrap: wrap; gap: 12px 28px; }}
.panel {{ flex: 0 0 auto; }}
.legend span {{ display: inline-block; margin-right: 16px; }}
.swatch {{ display: inline-block; width: 12px; height: 10px; margin-right: 4px;
  vertical-align: baseline; }}
svg.chart text {{ font: 11px system-ui, sans-serif; fill: #1b1b1b; }}
svg.chart text.muted {{ fill: #666; }}
.scroll {{ overflow-x: auto; }}
table {{ border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 13px; }}
th, td {{ border: 1px solid #ddd; padding: 3px 8px; }}
td {{ white-space: nowrap; }}
th {{ background: #f3f3f3; text-align: left; vertical-align: bottom; }}
td.r {{ text-align: right; white-space: nowrap; }}
tr.all td {{ font-weight: 600; background: #fafafa; }}
p.caption {{ color: #555; margin: 0 0 6px; max-width: 1000px; }}
ul.notes li {{ margin: 2px 0; }}
"""


def _table(table: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in table.headers)
    body = []
    for index, row in enumerate(table.rows):
        css = ' class="all"' if index in table.summary_rows else ""
        cells = "".join(
            f'<td class="r">{escape(c)}</td>' if align == "right" else f"<td>{escape(c)}</td>"
            for c, align in zip(row, table.align, strict=True)
        )
        body.append(f"<tr{css}>{cells}</tr>")
    if not table.rows:
        body.append(f'<tr><td colspan="{len(table.headers)}">none</td></tr>')
    caption = f'<p class="caption">{escape(table.caption)}</p>' if table.caption else ""
    return (f"<h2>{escape(table.title)}</h2>{caption}<div class=\"scroll\"><table>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")


def _accuracy_panels(results: Results) -> str:
    panels = []
    for category in [None, *results.categories]:
        bars = []
        for role in results.results:
            tally = role.overall if category is None else next(
                (t for t in role.categories if t.category == category), None)
            if tally is not None:
                bars.append(AccuracyBar(label=role.role, exact=tally.exact,
                                        with_failures=tally.exact_with_failures))
        if not bars:
            continue
        name = category_label(category)
        chart = accuracy_chart(bars, f"accuracy by role, category {name}")
        panels.append(f'<div class="panel"><h3>{escape(name)}</h3>{chart}</div>')
    legend = (
        '<p class="legend">'
        f'<span><i class="swatch" style="background:{EXACT_COLOUR}"></i>exact</span>'
        f'<span><i class="swatch" style="background:{FAILURES_COLOUR}"></i>'
        "exactWithFailures</span><span>whiskers: Wilson 95% interval</span></p>"
    )
    return f"<h2>Accuracy by category</h2>{legend}<div class=\"panels\">{''.join(panels)}</div>"


def _delta_panel(results: Results) -> str:
    if not results.contrasts:
        return ""
    bars = [DeltaBar(label=contrast_label(c.role_a, c.role_b),
                     delta_pp=c.overall.completed.delta_pp, pairs=c.overall.completed.pairs)
            for c in results.contrasts]
    chart = delta_chart(bars, "paired delta in percentage points, completed pairs")
    return ("<h2>Paired deltas</h2><p class=\"caption\">Accuracy of role b minus role a over "
            "completed pairs (same trace, probe and repeat), in percentage points.</p>"
            f'<div class="panel">{chart}</div>')


_TICKED = re.compile(r"`([^`<>&]*)`")


def _text(line: str) -> str:
    """Escape a banner line, then show its backticked commands and codes as code."""
    return _TICKED.sub(r"<code>\1</code>", escape(line))


def _status(results: Results) -> str:
    """How the run ended, first on the page (``report.status.status_banner``)."""
    headline, details = status_banner(results.status)
    verdict = results.status.verdict if results.status is not None else "unknown"
    items = "".join(f"<li>{_text(d)}</li>" for d in details)
    return (f'<div class="status status-{escape(verdict)}">'
            f'<p class="verdict">{_text(headline)}</p>'
            + (f"<ul>{items}</ul>" if items else "") + "</div>")


def _identity(results: Results) -> str:
    rows = [
        ("schema", f"<code>{escape(results.schema)}</code>"),
        ("registration sha256", f"<code>{escape(results.registration_sha256)}</code>"),
        ("schedule sha256", f"<code>{escape(results.schedule_sha256)}</code>"),
        ("reader", reader_label(results)),
        ("roles", escape(", ".join(results.roles))),
        ("repeats", str(results.repeats)),
        ("cap", f"{escape(results.cap.usd)} USD ({results.cap.units} units)"),
        ("Rmax", f"{escape(results.rmax.usd)} USD ({results.rmax.units} units)"),
    ]
    items = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in rows)
    return f'<dl class="identity">{items}</dl>'


def render_html(results: Results) -> str:
    title = f"efold results: {results.campaign}"
    faux = (f'<p class="faux">{escape(FAUX_NOTE)}</p>' if FAUX_NOTE in results.notes else "")
    notes = "".join(f"<li>{escape(note)}</li>" for note in results.notes if note != FAUX_NOTE)
    tables = "".join(_table(table) for table in report_tables(results))
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1>{_status(results)}{faux}{_identity(results)}"
        f'<h2>Notes</h2><ul class="notes">{notes}</ul>'
        f"{_accuracy_panels(results)}{_delta_panel(results)}{tables}"
        "</body></html>\n"
    )
