"""The judge's table in ``summary.md`` and ``report.html`` (19-C): after the accuracy
table, titled "judge (not the headline)", so that a reader sees the deterministic exact
first and the judge beside it, with their agreement.

One row per role with a judge record: the judge's pass rate and the deterministic exact
over the same slots, Cohen's kappa, the disagreements (their first ``SHOWN_IDS`` slot
ids; ``results.json`` has them all) and the mean score per rubric dimension. The
caption is the judge's own spend line.
"""

from __future__ import annotations

from typing import Final

from efold.report.numbers import count, money_text
from efold.report.schema import Results
from efold.report.table_kit import NONE, Align, Table, format_rate

__all__ = ["JUDGE_TITLE", "SHOWN_IDS", "judge_tables"]

JUDGE_TITLE: Final = "judge (not the headline)"
SHOWN_IDS: Final = 20
_LEGEND: Final = (
    ("judge pass", "the judge's mean rubric score reached the campaign's pass_threshold "
     "(over the slots both scored)"),
    ("exact", "the deterministic score over the same slots; the headline stays the "
     "accuracy table's exact"),
    ("kappa", "Cohen's kappa of judge pass/fail against deterministic correct; blank "
     "when undefined (no slot, or one class throughout)"),
    ("disagree", "slots where judge and deterministic score differ (first 20 shown; "
     "results.json lists all)"),
)


def judge_tables(results: Results) -> list[Table]:
    """The judge table, or nothing when no role has a judge record."""
    roles = [r for r in results.results if r.judge is not None]
    if not roles:
        return []
    dims: list[str] = []
    for role in roles:
        assert role.judge is not None
        dims += [d for d in role.judge.mean_scores if d not in dims]
    rows: list[list[str]] = []
    for role in roles:
        j = role.judge
        assert j is not None
        shown = " ".join(j.disagreeing[:SHOWN_IDS])
        if len(j.disagreeing) > SHOWN_IDS:
            shown += f" (+{count(len(j.disagreeing) - SHOWN_IDS)})"
        rows.append([
            role.role, count(j.judged), count(j.both), format_rate(j.judge_pass.rate),
            format_rate(j.exact.rate), NONE if j.kappa is None else f"{j.kappa:.3f}",
            count(len(j.disagreeing)), shown or NONE,
            *[NONE if d not in j.mean_scores else f"{j.mean_scores[d]:.2f}" for d in dims],
        ])
    spend = results.judge_spend
    caption = "" if spend is None else (
        f"judge spend (its own line): {count(spend.requests)} requests, "
        f"{money_text(spend.total, results.reader_faux)}")
    headers = ["role", "judged", "both", "judge pass", "exact", "kappa", "disagree",
               "disagreeing slots", *[f"mean {d}" for d in dims]]
    right: Align = "right"
    align: list[Align] = ["left", *[right] * 6, "left", *[right] * len(dims)]
    return [Table(title=JUDGE_TITLE, headers=headers, align=align, rows=rows,
                  caption=caption, legend=_LEGEND)]
