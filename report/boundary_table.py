"""The boundary cases' tables in ``summary.md`` and ``report.html`` (issue 15).

After the question tables, when the run had boundary cases (``Results.boundary``):

* **per role**: cases passed (every oracle passed) of cases judged with the Wilson 95%
  interval, the cases with only not-applicable verdicts, actions, duplicate-action rate,
  the Recall Trigger Rate on required-recall cases, tokens per task;
* **versus the reference role**: the paired contrast over the cases both judged;
* **per case**: each role's verdict (folded when long);
* **compression incidents**: one row each (``results.json`` has their evidence).
"""

from __future__ import annotations

from typing import Final

from efold.report.numbers import count
from efold.report.schema import BoundaryResults, Results, RunRow
from efold.report.table_kit import (
    NONE,
    Align,
    Table,
    format_delta_ci,
    format_proportion,
    format_rate,
)

__all__ = ["boundary_tables", "short_of_regime"]

LONG_MATRIX: Final = 12
_VERDICT: Final = {True: "pass", False: "FAIL", None: "n/a"}
_LEGEND: Final = (
    ("passed", "cases where every oracle of the case passed, of the cases judged (95% "
     "Wilson interval); the oracles judge the final workspace, the actions and the "
     "fold's declared state, never the agent's prose"),
    ("n/a", "cases with a not-applicable verdict and no failure: not judged"),
    ("dup. rate", "actions that repeated earlier work on an unchanged environment, of all "
     "actions"),
    ("recall", "Recall Trigger Rate: required-recall cases where the agent recalled, of "
     "those cases"),
    ("tokens/task", "the median, over the role's cases, of every token the agent spent "
     "after the fold (chars/4 estimates of each request and reply)"),
)
_MATRIX_LEGEND: Final = (
    ("(k of n folds)", "the role's checkpoint records k folds where the case was written "
     "for n successive folds (its fold.repeat): the role's fold did not stand the case's "
     "fold regime"),
)


def short_of_regime(run: RunRow) -> bool:
    """Whether the role folded, but fewer times than the case's ``fold.repeat`` (a role
    that never folds, ``native``, is the reference, not short)."""
    return run.folds is not None and 0 < run.folds < run.repeat


def _cell(run: RunRow) -> str:
    verdict = _VERDICT[run.passed]
    return f"{verdict} ({run.folds} of {run.repeat} folds)" if short_of_regime(run) else verdict


def _roles(b: BoundaryResults) -> Table:
    rows = []
    for s in b.arms:
        rows.append([
            s.arm, format_proportion(s.passed), count(s.not_applicable), count(s.actions),
            format_rate(s.duplicate_rate),
            NONE if s.recall_trigger is None else format_proportion(s.recall_trigger),
            NONE if s.tokens_per_task_median is None else count(s.tokens_per_task_median),
        ])
    right: Align = "right"
    return Table(title="boundary cases per role",
                 headers=["role", "passed", "n/a", "actions", "dup. rate", "recall",
                          "tokens/task"],
                 align=["left", *[right] * 6], rows=rows, legend=_LEGEND,
                 summary=f"{count(len(b.cases))} cases")


def _contrasts(b: BoundaryResults) -> Table:
    rows = [[c.arm, count(c.counts.pairs), count(c.counts.b), count(c.counts.c),
             format_delta_ci(c.counts)] for c in b.contrasts]
    right: Align = "right"
    return Table(title=f"boundary cases versus {b.reference_arm}",
                 headers=["role", "pairs", f"only {b.reference_arm} passed",
                          "only role passed", "delta pp (95% CI)"],
                 align=["left", *[right] * 4], rows=rows,
                 caption="paired over the cases both roles were judged on; descriptive only")


def _matrix(b: BoundaryResults) -> Table:
    roles = [s.arm for s in b.arms]
    verdicts = {(r.case, r.arm): r for r in b.runs}
    rows = []
    for label in b.cases:
        case = label.rsplit("@", 1)[0]
        cells = []
        for role in roles:
            run = verdicts.get((case, role))
            cells.append(NONE if run is None else _cell(run))
        rows.append([label, *cells])
    right: Align = "right"
    short = any(short_of_regime(r) for r in b.runs)
    return Table(title="boundary cases, case by case", headers=["case", *roles],
                 align=["left", *[right] * len(roles)], rows=rows,
                 legend=_MATRIX_LEGEND if short else (),
                 folded=len(rows) > LONG_MATRIX, summary=f"{count(len(rows))} cases")


def _incidents(b: BoundaryResults) -> Table:
    rows = [[i.case_id, i.failing_arm, i.category,
             ", ".join(i.evidence.verifier_failures) or NONE] for i in b.incidents]
    return Table(title="compression incidents",
                 headers=["case", "failing role", "category", "failed oracles"],
                 align=["left", "left", "left", "left"], rows=rows,
                 caption=f"a role failed a case {b.reference_arm} passed; evidence in "
                         "results.json. Incidents never change any fold's policy.",
                 folded=len(rows) > LONG_MATRIX, summary=f"{count(len(rows))} incidents")


def boundary_tables(results: Results) -> list[Table]:
    """The boundary tables, or nothing when the run had no boundary case."""
    b = results.boundary
    if b is None:
        return []
    tables = [_roles(b)]
    if b.contrasts:
        tables.append(_contrasts(b))
    tables.append(_matrix(b))
    if b.incidents:
        tables.append(_incidents(b))
    return tables
