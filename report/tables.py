"""The report's tables, once, as plain data: Markdown and HTML render the same rows.

Every cell is built from ``Results`` fields (ids, codes, enum values, numbers) and the
fixed headers below. Formatting choices: rates as percentages with one decimal,
intervals in percent, deltas in signed percentage points, counts and tokens with
thousands separators, money as the exact decimal USD string (separators on its integer
part; labelled when the reader is faux), a missing value as an em dash (never 0).

A table carries its own legend (``report.terms``: the words its headers and cells use)
and a one-line summary with counts; the HTML page shows a ``folded`` table collapsed
behind that line. A cell may hold two lines (a delta, then its interval): Markdown joins
them with a space, the page breaks the line. Adding a table is one function returning a
``Table`` (or None when it does not apply) and one entry in ``report_tables``.
"""

from __future__ import annotations

from efold.corpus.model import Availability, Category, Outcome
from efold.protocol.records import Exclusion
from efold.report.design_table import design_table
from efold.report.figure_tables import compression_table, latency_table, tool_table
from efold.report.ledger_table import ledger_table
from efold.report.numbers import FAUX_MONEY, amount_text, count, money_unit
from efold.report.pressure_table import pressure_table
from efold.report.schema import (
    Execution,
    PairCounts,
    RepeatSplit,
    Results,
    RoleResult,
    Spend,
    Tally,
)
from efold.report.table_kit import (
    ALL_CATEGORIES,
    LONG_TABLE,
    NONE,
    Table,
    align_columns,
    category_label,
    contrast_label,
    count_cells,
    count_noun,
    format_delta,
    format_delta_ci,
    format_interval,
    format_paired_interval,
    format_proportion,
    format_rate,
    format_spread,
    overall_rows,
    summary_line,
)
from efold.report.terms import (
    ACCURACY_TERMS,
    AVAILABILITY_TERMS,
    EXCLUSION_TERMS,
    EXECUTION_TERMS,
    OUTCOME_TERMS,
    PAIR_TERMS,
    PAIRED_INTERVAL,
    REPEAT_TERMS,
    SLOT_TERMS,
    VERSUS_TERMS,
)

__all__ = [
    "NONE", "Table", "category_label", "contrast_label", "format_delta", "format_delta_ci",
    "format_interval", "format_paired_interval", "format_proportion", "format_rate",
    "format_spread", "report_tables", "slot_table",
]


_EXECUTION_FIELDS = ["planned", "eligible", "visited", "skipped", "unadmitted", "admitted",
                     "completed", "incomplete", "invalid", "missing", "receipt_copies_missing"]
_EXECUTION_HEADERS = [*_EXECUTION_FIELDS[:-1], "receipt copies missing"]


def _execution_cells(execution: Execution) -> list[str]:
    return [count(getattr(execution, name)) for name in _EXECUTION_FIELDS]


def _execution_table(results: Results) -> Table:
    rows = [[r.role, r.arm, *_execution_cells(r.overall.execution)] for r in results.results]
    rows.append(["all roles", "", *_execution_cells(results.execution)])
    return Table(
        title="Execution",
        headers=["role", "arm", *_EXECUTION_HEADERS],
        align=align_columns(2, len(_EXECUTION_HEADERS)),
        rows=rows,
        caption="Planned and eligible cover the whole inventory (eligible: planned eligible "
                "and not skipped as infeasible); status counts cover visited slots only; "
                "missing = eligible slots never visited; receipt copies missing = "
                "journaled receipts whose file is gone (a damaged run).",
        summary_rows=frozenset({len(rows) - 1}),
        legend=EXECUTION_TERMS,
        summary=summary_line([(results.execution.planned, "planned"),
                          (results.execution.visited, "visited"),
                          (results.execution.completed, "completed"),
                          (results.execution.missing, "missing")]),
    )


def _tallies(role: RoleResult) -> list[Tally]:
    return [role.overall, *role.categories]


_AVAILABILITY = [a.value for a in Availability]


def _accuracy_table(results: Results) -> Table:
    rows: list[list[str]] = []
    for role in results.results:
        for tally in _tallies(role):
            rows.append([
                role.role, category_label(tally.category),
                format_proportion(tally.exact), format_interval(tally.exact.wilson95),
                format_proportion(tally.exact_with_failures),
                format_interval(tally.exact_with_failures.wilson95),
                count(tally.failed_feasible),
                *count_cells(tally.availability, _AVAILABILITY), count(tally.availability_unknown),
            ])
    return Table(
        title="Accuracy and availability",
        headers=["role", "category", "exact", "exact 95% CI", "exactWithFailures",
                 "with failures 95% CI", "failed feasible", *_AVAILABILITY, "unknown"],
        align=align_columns(2, 5 + len(_AVAILABILITY) + 1),
        rows=rows,
        caption="exact = correct / completed eligible non-excluded slots; exactWithFailures "
                "also counts failed feasible slots as wrong. Intervals are Wilson 95%. "
                "Availability counts eligible non-excluded visited slots by where the "
                "expected value was (model-free).",
        summary_rows=overall_rows(rows),
        legend=ACCURACY_TERMS + AVAILABILITY_TERMS,
        summary=summary_line([(len(results.results), "roles"),
                          (len(results.categories), "categories")]),
    )


def _flip_table(results: Results) -> Table | None:
    if results.repeats < 2:
        return None
    rows: list[list[str]] = []
    for role in results.results:
        for tally in _tallies(role):
            flip = tally.flip
            if flip is None:
                continue
            rows.append([role.role, category_label(tally.category), count(flip.comparable),
                         count(flip.flipped), format_rate(flip.rate)])
    return Table(
        title="Flip rate across repeats",
        headers=["role", "category", "comparable probes", "flipped", "flip rate"],
        align=align_columns(2, 3),
        rows=rows,
        caption="Share of (trace, probe) with at least two scored repeats whose result "
                "(pass or fail) changed between repeats.",
        summary_rows=overall_rows(rows),
        summary=count_noun(len(rows)),
    )


def _pair_cells(counts: PairCounts) -> list[str]:
    return [count(counts.pairs), count(counts.both_correct), count(counts.b), count(counts.c),
            count(counts.both_wrong), format_delta_ci(counts)]


def _contrast_table(results: Results, *, by_category: bool) -> Table | None:
    """The paired contrasts over all categories (always shown, open), or per category
    (folded when long)."""
    if by_category and not any(c.categories for c in results.contrasts):
        return None
    rows: list[list[str]] = []
    for contrast in results.contrasts:
        tallies = contrast.categories if by_category else [contrast.overall]
        for tally in tallies:
            rows.append([
                contrast_label(contrast.role_a, contrast.role_b),
                category_label(tally.category), count(tally.planned_pairs),
                count(tally.eligible_pairs), *_pair_cells(tally.completed),
                *_pair_cells(tally.with_failures),
            ])
    pair_headers = ["pairs", "both correct", "b", "c", "both wrong", "delta"]
    return Table(
        title="Paired contrasts by category" if by_category else "Paired contrasts",
        headers=["contrast (b \u2212 a)", "category", "planned pairs", "eligible pairs",
                 *[f"completed: {h}" for h in pair_headers],
                 *[f"with failures: {h}" for h in pair_headers]],
        align=align_columns(2, 2 + 2 * len(pair_headers)),
        rows=rows,
        caption="Pairs share trace, probe and repeat. b = only role a correct, c = only "
                "role b correct; delta = accuracy of b minus a over the same pairs, its "
                f"95% CI below it. {PAIRED_INTERVAL}",
        summary_rows=frozenset(),
        legend=PAIR_TERMS,
        summary=summary_line([(len(results.contrasts), "contrasts"), (len(rows), "rows")]),
        groups=(("", 4), ("completed", len(pair_headers)),
                ("with failures", len(pair_headers))),
        folded=by_category and len(rows) > LONG_TABLE,
    )


def _split_cell(split: RepeatSplit | None) -> str:
    if split is None or split.rate is None:
        return NONE
    return f"{format_rate(split.rate)} ({count(split.correct)}/{count(split.completed)})"


def _repeat_table(results: Results) -> Table | None:
    """Exact accuracy per repeat, and its spread: only with two or more repeats."""
    if results.repeats < 2:
        return None
    repeats = sorted({s.repeat for r in results.results for s in r.overall.by_repeat})
    rows = []
    for role in results.results:
        splits = {s.repeat: s for s in role.overall.by_repeat}
        rows.append([role.role, format_spread(role.overall.repeat_spread),
                     *(_split_cell(splits.get(n)) for n in repeats)])
    return Table(
        title="Accuracy per repeat",
        headers=["role", "mean \u00b1 sd", *(f"repeat {n}" for n in repeats)],
        align=align_columns(1, 1 + len(repeats)),
        rows=rows,
        caption="Exact accuracy of each repeat alone (correct / completed), and how much it "
                "moves between repeats: the mean of the repeats' rates \u00b1 their sample "
                "standard deviation, in percentage points.",
        legend=REPEAT_TERMS,
        summary=f"{count_noun(len(rows), 'role')}, {count_noun(len(repeats), 'repeat')}",
    )


def _versus_native_table(results: Results) -> Table | None:
    """Every other role minus the native role, per category: the paired delta over
    completed pairs and its interval. Only when a role's arm is native."""
    if not results.versus_native:
        return None
    native = results.versus_native[0].role_a
    categories = [c for c in results.categories
                  if any(t.category == c for v in results.versus_native for t in v.categories)]
    rows = []
    for contrast in results.versus_native:
        tallies = {t.category: t for t in contrast.categories}
        cells = [format_delta_ci(contrast.overall.completed)]
        cells += [format_delta_ci(tallies[c].completed) if c in tallies else NONE
                  for c in categories]
        rows.append([contrast.role_b, *cells])
    return Table(
        title=f"Delta versus {native}",
        headers=["role", ALL_CATEGORIES, *categories],
        align=align_columns(1, 1 + len(categories)),
        rows=rows,
        caption=f"Accuracy of each role minus that of {native}, the reference role (the "
                "first role whose arm is native or native-lookup), over the completed pairs "
                "both were scored on, in percentage points, per category; the 95% CI below "
                "each delta. "
                f"{PAIRED_INTERVAL}",
        legend=VERSUS_TERMS,
        summary=f"{count_noun(len(rows), 'role')}, "
                f"{count_noun(len(categories), 'category', 'categories')}",
        # More categories than the corpus has: it may be wider than the page, so it is
        # folded, and scrolls in its own box when opened.
        folded=len(rows) > LONG_TABLE or len(categories) > len(Category),
    )


_OUTCOMES = [o.value for o in Outcome]


def _outcome_table(results: Results) -> Table:
    rows = [[role.role, category_label(tally.category), *count_cells(tally.outcomes, _OUTCOMES)]
            for role in results.results for tally in _tallies(role)]
    return Table(
        title="Outcome classes",
        headers=["role", "category", *_OUTCOMES],
        align=align_columns(2, len(_OUTCOMES)),
        rows=rows,
        caption="Scored slots (completed, eligible, not excluded) by outcome class.",
        summary_rows=overall_rows(rows),
        legend=OUTCOME_TERMS,
        summary=summary_line([(sum(sum(r.overall.outcomes.values()) for r in results.results),
                           "scored slots")]),
        folded=len(rows) > LONG_TABLE,
    )


_EXCLUSIONS = [e.value for e in Exclusion]


def _excluded_table(results: Results) -> Table:
    rows = [[role.role, *count_cells(role.overall.excluded, _EXCLUSIONS)] for role in results.results]
    return Table(
        title="Excluded",
        headers=["role", *_EXCLUSIONS],
        align=align_columns(1, len(_EXCLUSIONS)),
        rows=rows,
        caption="Excluded slots are never scored as passes or failures.",
        legend=EXCLUSION_TERMS,
        summary=summary_line([(sum(sum(r.overall.excluded.values()) for r in results.results),
                           "excluded slots")]),
    )


def _codes_table(results: Results) -> Table:
    rows = [[role.role, code, count(slots)]
            for role in results.results for code, slots in sorted(role.codes.items())]
    return Table(
        title="Fixed codes",
        headers=["role", "code", "slots"],
        align=align_columns(2, 1),
        rows=rows,
        caption="Visited slots that ended with a fixed code (refusal, stop or loss).",
        summary=summary_line([(len({row[1] for row in rows}), "codes"),
                          (sum(sum(r.codes.values()) for r in results.results), "slots")]),
        folded=len(rows) > LONG_TABLE,
    )


def _http_table(results: Results) -> Table | None:
    """Slots a provider's non-2xx answer ended, by role, status and kind (None: none)."""
    rows = [[role.role, str(f.status), f.kind, count(f.slots)]
            for role in results.results for f in role.http_failures]
    if not rows:
        return None
    return Table(
        title="HTTP failures",
        headers=["role", "status", "kind", "slots"],
        align=align_columns(3, 1),
        rows=rows,
        caption="Visited slots ended by a provider's non-2xx answer (lookup_http_status, "
                "lookup_redirect_forbidden): its status and its kind, decided from the "
                "status and fixed phrases of the error (context_exceeded: the request did "
                "not fit the model's context). The server's words are never in a report.",
        summary=summary_line([(sum(f.slots for r in results.results for f in r.http_failures),
                               "slots")]),
    )


def _token_cell(value: int, spend: Spend) -> str:
    # Unknown usage is never zero usage: a partial sum is printed as a lower bound.
    return count(value) if spend.usage_known else f"\u2265{count(value)}"


def _unknown_usage(slots: int) -> str:
    return f"unknown in {slots} slot" + ("" if slots == 1 else "s")


def _spend_cells(spend: Spend, faux: bool) -> list[str]:
    tokens = spend.tokens
    return [
        count(spend.slots), count(spend.requests), count(spend.admitted_requests),
        *(_token_cell(v, spend) for v in (tokens.input, tokens.cache_read, tokens.cache_write,
                                          tokens.output, tokens.reasoning)),
        "known" if spend.usage_known else _unknown_usage(spend.usage_unknown_slots),
        amount_text(spend.settled, faux), amount_text(spend.retained, faux),
        amount_text(spend.total, faux), count(spend.total.units),
    ]


# What the integer "units" column counts, said in the run's own money.
_UNIT_LINE = {
    False: "1 unit = 0.00000005 USD.",
    True: "The reader is faux: amounts are faux units at the faux catalog's rates, and "
          "nobody paid them (20,000,000 units to one faux unit).",
}


def _spend_table(results: Results) -> Table:
    faux_reader = results.reader_faux
    rows = [[role.role, *_spend_cells(role.spend, faux_reader)] for role in results.results]
    rows.append(["all roles", *_spend_cells(results.spend, faux_reader)])
    # A faux reader's money is faux: said in the title, every money header and the caption.
    unit = money_unit(faux_reader)
    faux = f" ({FAUX_MONEY})" if results.reader_faux else ""
    return Table(
        title=f"Spend{faux}",
        headers=["role", "slots", "requests", "admitted", "input tokens", "cache read",
                 "cache write", "output tokens", "reasoning", "usage", f"settled {unit}",
                 f"retained holds {unit}", f"total {unit}", "total units"],
        align=align_columns(1, 13),
        rows=rows,
        caption=(f"{_UNIT_LINE[faux_reader]} Cap {amount_text(results.cap, faux_reader)} "
                 f"{unit}, Rmax {amount_text(results.rmax, faux_reader)} {unit}. Retained "
                 "holds are kept for lost or aborted requests: an upper bound, not a "
                 "measured cost."),
        summary_rows=frozenset({len(rows) - 1}),
        summary=f"total {amount_text(results.spend.total, faux_reader)} {unit}, "
                f"{count(results.spend.requests)} requests",
    )


_SLOT_STATUSES = ["completed", "incomplete", "invalid", "unadmitted", "skipped",
                  "receipt_missing", "missing", "unvisited"]


def _flag(value: bool | None) -> str:
    return NONE if value is None else ("yes" if value else "no")


def slot_table(results: Results) -> Table:
    """Every planned slot, in schedule order: long, so always folded. HTML only: the
    Markdown summary stays short and results.json holds every row."""
    rows = [[row.slot, row.role, row.trace_id, row.probe_id, row.category, count(row.repeat),
             _flag(row.eligible), row.status, row.code or NONE, row.outcome or NONE,
             _flag(row.correct), row.availability or NONE, row.excluded or NONE]
            for row in results.slots]
    statuses: dict[str, int] = {}
    for row in results.slots:
        statuses[row.status] = statuses.get(row.status, 0) + 1
    order = [s for s in _SLOT_STATUSES if s in statuses] + sorted(
        s for s in statuses if s not in _SLOT_STATUSES)
    return Table(
        title="Slots",
        headers=["slot", "role", "trace", "probe", "category", "repeat", "eligible", "status",
                 "code", "outcome", "correct", "availability", "excluded"],
        align=[*align_columns(5, 1), *align_columns(7, 0)],
        rows=rows,
        caption="Every planned slot in schedule order, as results.json holds it (without "
                "answers).",
        summary=summary_line([(len(rows), "slots"), *((statuses[s], s) for s in order)]),
        legend=SLOT_TERMS,
        folded=True,
    )


def report_tables(results: Results) -> list[Table]:
    """All tables, in reading order."""
    tables = [
        _execution_table(results), _accuracy_table(results), design_table(results),
        compression_table(results),
        _repeat_table(results),
        _flip_table(results), _versus_native_table(results),
        _contrast_table(results, by_category=False),
        _contrast_table(results, by_category=True),
        tool_table(results), latency_table(results), _outcome_table(results),
        _excluded_table(results), pressure_table(results), ledger_table(results),
        _codes_table(results),
        _http_table(results),
        _spend_table(results),
    ]
    return [table for table in tables if table is not None]
