"""``report.html``: one self-contained page (inline CSS, inline SVG charts).

No script, no link, no image, no font file, no URL of any kind: the page renders the same
offline, from a file, in a browser with networking disabled, and opening it can never
reach anyone. Every dynamic string is HTML-escaped even though ``join_receipts`` already
restricts ids to a safe alphabet.

The page is the status banner (first in the body), then the first screen
(``report.first_screen``: accuracy against size and cost, one reading per role, the
role x category heatmap), then a list of sections, each one
small function of ``Results`` (``_SECTIONS``): adding a section is one function and one
entry there. Layout and the pieces every section uses live in ``report.html_parts``.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from efold.report.banner import banner
from efold.report.boundary_table import boundary_tables
from efold.report.failures import failures_css, failures_html
from efold.report.first_screen import first_screen_html
from efold.report.html_parts import CSS, banner_html, section_html, table_html
from efold.report.judge_table import judge_tables
from efold.report.numbers import count, money_text
from efold.report.results import FAUX_NOTE, reader_label
from efold.report.schema import Results
from efold.report.svg import DeltaBar, delta_chart
from efold.report.tables import contrast_label, report_tables, slot_table

__all__ = ["render_html"]


def _delta_panel(results: Results) -> str:
    if not results.contrasts:
        return ""
    bars = [DeltaBar(label=contrast_label(c.role_a, c.role_b),
                     delta_pp=c.overall.completed.delta_pp, pairs=c.overall.completed.pairs,
                     interval=c.overall.completed.delta_pp95)
            for c in results.contrasts]
    chart = delta_chart(bars, "paired delta in percentage points, completed pairs")
    return section_html(
        "Paired deltas",
        "<p class=\"caption\">Accuracy of role b minus role a over completed pairs (same "
        "trace, probe and repeat), in percentage points.</p>"
        f'<div class="panel">{chart}</div>')


def _faux(results: Results) -> str:
    return f'<p class="faux">{escape(FAUX_NOTE)}</p>' if FAUX_NOTE in results.notes else ""


def _identity(results: Results) -> str:
    faux = results.reader_faux
    rows = [
        ("schema", f"<code>{escape(results.schema)}</code>"),
        ("registration sha256", f"<code>{escape(results.registration_sha256)}</code>"),
        ("schedule sha256", f"<code>{escape(results.schedule_sha256)}</code>"),
        ("reader", escape(reader_label(results))),
        ("roles", escape(", ".join(results.roles))),
        ("repeats", count(results.repeats)),
        ("cap", escape(money_text(results.cap, faux))),
        ("Rmax", escape(money_text(results.rmax, faux))),
    ]
    spend = results.summariser_spend
    if spend is not None:
        usage = "" if spend.usage_known else "; usage missing for some (a lower bound)"
        rows.append(("summariser", escape(
            f"{count(spend.requests)} requests over {count(spend.slots)} checkpoints, "
            f"settled {money_text(spend.settled, faux)}, retained "
            f"{money_text(spend.retained, faux)}{usage}")))
    items = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in rows)
    return section_html("Run", f'<dl class="identity">{items}</dl>')


def _notes(results: Results) -> str:
    notes = "".join(f"<li>{escape(note)}</li>" for note in results.notes if note != FAUX_NOTE)
    return section_html("Notes", f'<ul class="notes">{notes}</ul>')


def _tables(results: Results) -> str:
    return "".join(section_html(t.title, table_html(t), summary=t.summary, folded=t.folded)
                   for t in [*report_tables(results), slot_table(results)])


def _boundary(results: Results) -> str:
    """Issue 15: the boundary cases, after the judge."""
    return "".join(section_html(t.title, table_html(t)) for t in boundary_tables(results))


def _judge(results: Results) -> str:
    """19-C: the judge beside the deterministic score, after the accuracy tables."""
    return "".join(section_html(t.title, table_html(t)) for t in judge_tables(results))


# The page after the banner, in reading order: one function per section. The first
# screen answers the question a reader brings (which fold keeps what, at what cost);
# everything after it is the evidence, in the order it was always read.
_SECTIONS: list[Callable[[Results], str]] = [
    _faux, first_screen_html, failures_html, _identity, _notes, _delta_panel, _tables, _judge,
    _boundary,
]


def render_html(results: Results) -> str:
    title = f"efold results: {results.campaign}"
    sections = "".join(section(results) for section in _SECTIONS)
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}{failures_css(results)}</style></head>"
        "<body>"
        f"{banner_html(banner(results))}<h1>{escape(title)}</h1>{sections}"
        "</body></html>\n"
    )
