"""Pieces of ``report.html``: the stylesheet, the status banner, a table with its legend.

Layout rule: at 1,400 px nothing makes the *page* scroll sideways. Ids and headers wrap
after their separators (``-``, ``_``, ``.``, ``:``, ``+``, ``#``: a ``<wbr>`` after each,
so a column is as narrow as an id's longest segment and no word is cut), numbers never
break, and a table that is still wider than the page scrolls inside its own box
(``div.scroll``), the only element allowed to hold content past the right edge. Folded
tables are ``<details>`` behind a summary line with counts. A cell's second line (a
delta's interval) sits under its first, smaller, and wraps at its spaces, so a column of
intervals stays as narrow as its deltas. Colour is never the only signal: every verdict
is also a word and a mark, and every defined term is listed in a visible legend beside
its table.
"""

from __future__ import annotations

import re
from html import escape

from efold.report.banner import Banner
from efold.report.svg import FAILURES_COLOUR
from efold.report.tables import Table
from efold.report.terms import Term

__all__ = ["CSS", "banner_html", "breakable", "code_text", "legend_html", "section_html",
           "table_html"]

# Verdict -> (mark, border colour, background). Each verdict its own colour.
_VERDICT_STYLE = {
    "complete": ("\u2713", "#2e7d32", "#eef7ee"),
    "stopped": ("\u25a0", "#b26a00", "#fff4e0"),
    "partial": ("\u25d1", "#00695c", "#e6f4f1"),
    "running": ("\u25b6", "#1f5fa8", "#eaf2fb"),
    "interrupted": ("\u2016", "#6a4c93", "#f3eefa"),
    "crashed": ("\u2717", "#b71c1c", "#fdecea"),
    "damaged": ("\u2702", "#8d3b00", "#fbe9dc"),
    "unreconciled": ("\u26a0", "#7f0000", "#fbdcdc"),
    "unknown": ("\u2022", "#616161", "#f2f2f2"),
}


def _verdict_css() -> str:
    return "".join(
        f".status-{verdict} {{ border-color: {border}; background: {background}; }}"
        f".status-{verdict} .word {{ background: {border}; }}\n"
        for verdict, (_, border, background) in _VERDICT_STYLE.items()
    )


CSS = f"""
:root {{ color-scheme: light; }}
*, *::before, *::after {{ box-sizing: border-box; }}
body {{ font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1b1b1b;
  background: #fff; margin: 0 auto; padding: 24px 32px 48px; max-width: 1400px;
  overflow-wrap: anywhere; }}
h1 {{ font-size: 22px; margin: 0 0 12px; }}
h2 {{ font-size: 17px; margin: 0; display: inline; }}
h3 {{ font-size: 14px; margin: 0 0 4px; }}
section, details.table {{ margin: 28px 0 0; }}
section > h2, details.table > summary {{ display: block; border-bottom: 1px solid #ddd;
  padding-bottom: 4px; margin-bottom: 8px; }}
details.table > summary {{ cursor: pointer; }}
details.table > summary::before {{ content: "\\25b8\\00a0"; color: #555; }}
details.table[open] > summary::before {{ content: "\\25be\\00a0"; }}
.count {{ color: #555; font-size: 13px; margin-left: 8px; }}
.faux {{ border-left: 4px solid {FAILURES_COLOUR}; background: #fff6ea; padding: 8px 12px;
  margin: 0 0 16px; font-weight: 600; }}
.status {{ border: 2px solid; border-left-width: 10px; padding: 10px 14px;
  margin: 0 0 16px; }}
.status .word {{ display: inline-block; color: #fff; font-weight: 700; letter-spacing: .04em;
  padding: 1px 8px; margin: 0 0 6px; border-radius: 3px; }}
.status p {{ margin: 0 0 4px; }}
.status p.verdict {{ font-size: 16px; font-weight: 700; }}
.status ul {{ margin: 4px 0 0; padding-left: 20px; }}
{_verdict_css()}
dl.facts {{ display: flex; flex-wrap: wrap; gap: 2px 20px; margin: 6px 0 0; }}
dl.facts div {{ display: flex; gap: 6px; }}
dl.facts dt {{ color: #555; }} dl.facts dd {{ margin: 0; font-weight: 600; }}
dl.facts.run dd {{ font-weight: 400; }}
dl.identity {{ display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px;
  margin: 0 0 8px; }}
dl.identity dt {{ color: #555; }} dl.identity dd {{ margin: 0; }}
dl.terms {{ display: grid; grid-template-columns: max-content 1fr; gap: 1px 12px;
  margin: 8px 0 0; font-size: 13px; max-width: 1000px; }}
dl.terms dd {{ margin: 0; color: #333; }}
p.terms {{ font-size: 13px; font-weight: 600; margin: 8px 0 0; }}
code {{ font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; }}
abbr[title] {{ text-decoration: underline dotted; cursor: help; }}
.panels {{ display: flex; flex-wrap: wrap; gap: 12px 28px; }}
.panel {{ flex: 0 1 auto; min-width: 0; max-width: 100%; }}
.panel svg {{ max-width: 100%; height: auto; }}
.legend span {{ display: inline-block; margin-right: 16px; }}
.swatch {{ display: inline-block; width: 12px; height: 10px; margin-right: 4px;
  vertical-align: baseline; }}
svg.chart text {{ font: 11px system-ui, sans-serif; fill: #1b1b1b; }}
svg.chart text.muted {{ fill: #666; }}
.scroll {{ overflow-x: auto; max-width: 100%; }}
table {{ border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 13px; }}
th, td {{ border: 1px solid #ddd; padding: 3px 6px; }}
td, th {{ overflow-wrap: break-word; }}
th {{ background: #f3f3f3; text-align: left; vertical-align: bottom; font-weight: 600; }}
th.group {{ text-align: center; background: #e9eef5; }}
td.r {{ text-align: right; white-space: nowrap; overflow-wrap: normal; }}
td .sub {{ white-space: normal; color: #555; font-size: 12px; }}
tr.all td {{ font-weight: 600; background: #fafafa; }}
p.caption {{ color: #555; margin: 0 0 6px; max-width: 1000px; }}
ul.notes li {{ margin: 2px 0; }}
ul.readings {{ margin: 8px 0 12px; padding-left: 20px; font-size: 15px; }}
ul.readings li {{ margin: 2px 0; }}
.filters {{ display: flex; flex-wrap: wrap; gap: 6px 16px; margin: 6px 0 8px; }}
.filters fieldset {{ border: 1px solid #ddd; padding: 2px 8px 4px; margin: 0; }}
.filters legend {{ font-size: 12px; color: #555; padding: 0 4px; }}
.filters label {{ margin: 0 10px 0 2px; font-size: 13px; }}
.filters .choice {{ white-space: nowrap; }}
table.failures details > summary {{ cursor: pointer; }}
table.failures dl.identity {{ margin: 6px 0; font-size: 12px; }}
code.wrap {{ word-break: break-all; }}
table.heatmap td.heat {{ text-align: right; white-space: nowrap; min-width: 48px; }}
table.heatmap thead th {{ font-size: 12px; max-width: 96px; overflow-wrap: normal; }}
table.heatmap td.none {{ color: #999; text-align: center; }}
"""

_TICKED = re.compile(r"`([^`<>&]*)`")


def code_text(line: str) -> str:
    """Escape a fixed sentence, then show its backticked commands and codes as code."""
    return _TICKED.sub(r"<code>\1</code>", escape(line))


def banner_html(banner: Banner) -> str:
    """The banner: verdict word and mark (coloured), headline, the stop code's meaning,
    the run's identity, what ran when, then the status details (open unless the run is
    complete)."""
    mark = _VERDICT_STYLE.get(banner.verdict, _VERDICT_STYLE["unknown"])[0]
    facts = _facts(banner.facts)
    run = _facts(banner.run, " run") if banner.run else ""
    stop = f'<p class="stop">{code_text(banner.stop_line)}</p>' if banner.stop_line else ""
    details = ""
    if banner.details:
        items = "".join(f"<li>{code_text(d)}</li>" for d in banner.details)
        opened = "" if banner.verdict == "complete" else " open"
        details = (f"<details{opened}><summary>Status details ({len(banner.details)} "
                   f"lines)</summary><ul>{items}</ul></details>")
    return (f'<div class="status status-{escape(banner.verdict)}" id="status">'
            f'<p class="word"><span aria-hidden="true">{mark}</span> {escape(banner.word)}</p>'
            f'<p class="verdict">{code_text(banner.headline)}</p>{stop}'
            f"{facts}{run}{details}</div>")


def _facts(facts: list[tuple[str, str]], css: str = "") -> str:
    items = "".join(f"<div><dt>{escape(name)}</dt><dd>{escape(value)}</dd></div>"
                    for name, value in facts)
    return f'<dl class="facts{css}">{items}</dl>'


def legend_html(terms: tuple[Term, ...]) -> str:
    if not terms:
        return ""
    items = "".join(f"<dt><code>{escape(word)}</code></dt><dd>{escape(meaning)}</dd>"
                    for word, meaning in terms)
    return f'<p class="terms">Terms</p><dl class="terms">{items}</dl>'


_SEPARATED = re.compile(r"(?<=[-_.:+#])")


def breakable(text: str) -> str:
    """Escaped text with a line-break opportunity after every id separator."""
    return "<wbr>".join(escape(part) for part in _SEPARATED.split(text))


def _header(text: str, terms: dict[str, str]) -> str:
    meaning = terms.get(text)
    if meaning is None:
        return f"<th>{breakable(text)}</th>"
    return f'<th><abbr title="{escape(meaning)}">{breakable(text)}</abbr></th>'


def _head(table: Table) -> str:
    """The header row(s): with column groups, a row of group labels above the headers,
    each header without its group's ``label: `` prefix."""
    terms = dict(table.legend)
    if not table.groups:
        return f"<tr>{''.join(_header(h, terms) for h in table.headers)}</tr>"
    labels: list[str] = []
    for label, span in table.groups:
        labels += [label] * span
    top = "".join(f'<th colspan="{span}" class="group">{escape(label)}</th>'
                  for label, span in table.groups)
    cells = "".join(_header(h.removeprefix(f"{g}: ") if g else h, terms)
                    for h, g in zip(table.headers, labels, strict=True))
    return f"<tr>{top}</tr><tr>{cells}</tr>"


def _cell(text: str, align: str) -> str:
    """A cell; a second line (a delta's interval) goes below the first, smaller, and may
    wrap at its spaces so that a column of intervals stays narrow."""
    first, _, rest = text.partition("\n")
    if align == "right":
        below = f'<br><span class="sub">{escape(rest)}</span>' if rest else ""
        return f'<td class="r">{escape(first)}{below}</td>'
    below = f'<br><span class="sub">{breakable(rest)}</span>' if rest else ""
    return f"<td>{breakable(first)}{below}</td>"


def table_html(table: Table) -> str:
    """The table in its own scroll box, its caption above and its legend below."""
    body = []
    for index, row in enumerate(table.rows):
        css = ' class="all"' if index in table.summary_rows else ""
        cells = "".join(_cell(c, align) for c, align in zip(row, table.align, strict=True))
        body.append(f"<tr{css}>{cells}</tr>")
    if not table.rows:
        body.append(f'<tr><td colspan="{len(table.headers)}">none</td></tr>')
    caption = f'<p class="caption">{escape(table.caption)}</p>' if table.caption else ""
    return (f'{caption}<div class="scroll"><table><thead>{_head(table)}</thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>{legend_html(table.legend)}")


def section_html(title: str, content: str, *, summary: str = "", folded: bool | None = None,
                 ) -> str:
    """A titled section. ``folded`` None: a plain section; True or False: collapsible,
    closed or open, behind its title and summary line."""
    count = f'<span class="count">{escape(summary)}</span>' if summary else ""
    if folded is None:
        return f"<section><h2>{escape(title)}{count}</h2>{content}</section>"
    opened = "" if folded else " open"
    return (f'<details class="table"{opened}><summary><h2>{escape(title)}</h2>{count}'
            f"</summary>{content}</details>")
