"""``summary.md``: the status banner (with what ran when), the run's identity, the fixed
notes and every report table with its legend.

The banner comes first after the title (``report.banner``); each table is followed by
the terms it uses (``report.terms``). Every count carries thousands separators and every
amount of money is labelled faux when the reader is (``report.numbers``). The per-slot
table is left to ``report.html`` and ``results.json``: a summary stays short.
"""

from __future__ import annotations

from collections.abc import Callable

from efold.report.banner import banner
from efold.report.boundary_table import boundary_tables
from efold.report.judge_table import judge_tables
from efold.report.numbers import count, money_text
from efold.report.readings import readings
from efold.report.results import FAUX_NOTE, reader_label
from efold.report.schema import Results
from efold.report.tables import Table, report_tables
from efold.report.terms import Term

__all__ = ["render_markdown"]


def _cell(text: str) -> str:
    # Cells come from ids, codes and numbers, none of which may hold a pipe or newline;
    # escape anyway so a table can never be broken.
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _legend(terms: tuple[Term, ...]) -> list[str]:
    if not terms:
        return []
    return ["Terms:", "", *[f"- `{_cell(word)}`: {_cell(meaning)}" for word, meaning in terms],
            ""]


def _table(table: Table) -> list[str]:
    rule = ["---:" if align == "right" else "---" for align in table.align]
    lines = [f"## {table.title}", ""]
    if table.summary:
        lines += [f"_{_cell(table.summary)}_", ""]
    if table.caption:
        lines += [table.caption, ""]
    lines.append("| " + " | ".join(_cell(h) for h in table.headers) + " |")
    lines.append("| " + " | ".join(rule) + " |")
    if not table.rows:
        lines.append("| " + " | ".join(["\u2014"] * len(table.headers)) + " |")
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table.rows]
    return [*lines, "", *_legend(table.legend)]


def _banner(results: Results) -> list[str]:
    """How the run ended, before anything else: the verdict in bold (with the stop
    code's meaning), the run's identity in one line, what ran when in another, then the
    status details."""
    shown = banner(results)
    lines = [f"**{_cell(shown.headline)}**", "",
             *([_cell(shown.stop_line), ""] if shown.stop_line else [])]
    for facts in (shown.facts, shown.run):
        if facts:
            lines += [_cell(" \u00b7 ".join(f"{name}: {value}" for name, value in facts)), ""]
    return [*lines, *[f"- {_cell(d)}" for d in shown.details],
            *([""] if shown.details else [])]


def _summariser(results: Results) -> list[str]:
    """The summariser model's spend (the compaction arms' prep children), when any."""
    spend = results.summariser_spend
    if spend is None:
        return []
    faux = results.reader_faux
    usage = "" if spend.usage_known else "; usage missing for some (a lower bound)"
    return [f"- summariser: {count(spend.requests)} requests over {count(spend.slots)} "
            f"checkpoints, settled {money_text(spend.settled, faux)}, retained "
            f"{money_text(spend.retained, faux)}{usage}"]


def _faux(results: Results) -> list[str]:
    return [f"> {FAUX_NOTE}", ""] if FAUX_NOTE in results.notes else []


def _readings(results: Results) -> list[str]:
    """The answer first: which fold keeps what, at what size and cost (one line a role)."""
    return ["## Which fold keeps what, at what cost", "",
            *[f"- {_cell(line)}" for line in readings(results)], ""]


def _identity(results: Results) -> list[str]:
    faux = results.reader_faux
    return [
        f"- schema: `{results.schema}`",
        f"- registration sha256: `{results.registration_sha256}`",
        f"- schedule sha256: `{results.schedule_sha256}`",
        f"- reader: {reader_label(results)}",
        f"- roles: {', '.join(results.roles)}",
        f"- repeats: {count(results.repeats)}",
        f"- cap: {money_text(results.cap, faux)}",
        f"- Rmax: {money_text(results.rmax, faux)}",
        *_summariser(results),
        "",
    ]


def _notes(results: Results) -> list[str]:
    return ["## Notes", "", *[f"- {note}" for note in results.notes if note != FAUX_NOTE], ""]


def _tables(results: Results) -> list[str]:
    return [line for table in report_tables(results) for line in _table(table)]


def _boundary(results: Results) -> list[str]:
    """Issue 15: the boundary cases, after the judge."""
    return [line for table in boundary_tables(results) for line in _table(table)]


def _judge(results: Results) -> list[str]:
    """19-C: the judge beside the deterministic score, after the accuracy tables."""
    return [line for table in judge_tables(results) for line in _table(table)]


# After the title, in reading order: one function per section. The statements a reader
# must not miss come first and set apart: how the run ended, then what the reader is.
_SECTIONS: list[Callable[[Results], list[str]]] = [
    _banner, _faux, _readings, _identity, _notes, _tables, _judge, _boundary,
]


def render_markdown(results: Results) -> str:
    lines = [f"# efold results: {results.campaign}", ""]
    for section in _SECTIONS:
        lines += section(results)
    return "\n".join(lines)
