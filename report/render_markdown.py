"""``summary.md``: the run's identity, the fixed notes and every report table."""

from __future__ import annotations

from efold.report.results import FAUX_NOTE, reader_label
from efold.report.schema import Results
from efold.report.status import status_banner
from efold.report.tables import Table, report_tables

__all__ = ["render_markdown"]


def _cell(text: str) -> str:
    # Cells come from ids, codes and numbers, none of which may hold a pipe or newline;
    # escape anyway so a table can never be broken.
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _table(table: Table) -> list[str]:
    rule = ["---:" if align == "right" else "---" for align in table.align]
    lines = [f"## {table.title}", ""]
    if table.caption:
        lines += [table.caption, ""]
    lines.append("| " + " | ".join(_cell(h) for h in table.headers) + " |")
    lines.append("| " + " | ".join(rule) + " |")
    if not table.rows:
        lines.append("| " + " | ".join(["\u2014"] * len(table.headers)) + " |")
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table.rows]
    return [*lines, ""]


def _banner(results: Results) -> list[str]:
    """How the run ended, before anything else: the verdict in bold, then its details.
    Fixed sentences, codes, ids and counts (``report.status.status_banner``)."""
    headline, details = status_banner(results.status)
    return [f"**{_cell(headline)}**", "", *[f"- {_cell(d)}" for d in details],
            *([""] if details else [])]


def _summariser(results: Results) -> list[str]:
    """The summariser model's spend (the compaction arms' prep children), when any."""
    spend = results.summariser_spend
    if spend is None:
        return []
    usage = "" if spend.usage_known else "; usage missing for some (a lower bound)"
    return [f"- summariser: {spend.requests} requests over {spend.slots} checkpoints, "
            f"settled {spend.settled.usd} USD, retained {spend.retained.usd} USD{usage}"]


def render_markdown(results: Results) -> str:
    lines = [
        f"# efold results: {results.campaign}",
        "",
        # The statements a reader must not miss, first and set apart: how the run ended,
        # then what the reader is.
        *_banner(results),
        *([f"> {FAUX_NOTE}", ""] if FAUX_NOTE in results.notes else []),
        f"- schema: `{results.schema}`",
        f"- registration sha256: `{results.registration_sha256}`",
        f"- schedule sha256: `{results.schedule_sha256}`",
        f"- reader: {reader_label(results)}",
        f"- roles: {', '.join(results.roles)}",
        f"- repeats: {results.repeats}",
        f"- cap: {results.cap.usd} USD ({results.cap.units} units); "
        f"Rmax: {results.rmax.usd} USD ({results.rmax.units} units)",
        *_summariser(results),
        "",
        "## Notes",
        "",
        *[f"- {note}" for note in results.notes if note != FAUX_NOTE],
        "",
    ]
    for table in report_tables(results):
        lines += _table(table)
    return "\n".join(lines)
