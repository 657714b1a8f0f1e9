"""The report's tables, once, as plain data: Markdown and HTML render the same rows.

Every cell is built from ``Results`` fields (ids, codes, enum values, numbers) and the
fixed headers below. Formatting choices: rates as percentages with one decimal,
intervals in percent, deltas in signed percentage points, money as the exact decimal USD
string, a missing value as an em dash (never 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from efold.corpus.model import Availability, Outcome
from efold.protocol.records import Exclusion
from efold.report.join import RESERVED_CATEGORY
from efold.report.schema import (
    Execution,
    Interval,
    PairCounts,
    Proportion,
    Results,
    RoleResult,
    Spend,
    Tally,
)

__all__ = [
    "NONE", "Table", "category_label", "contrast_label", "format_delta", "format_interval",
    "format_proportion", "format_rate", "report_tables",
]

NONE = "\u2014"  # em dash: no observation, not zero
ALL_CATEGORIES = RESERVED_CATEGORY

Align = Literal["left", "right"]


class Table(msgspec.Struct, frozen=True):
    title: str
    headers: list[str]
    align: list[Align]
    rows: list[list[str]]
    caption: str = ""
    summary_rows: frozenset[int] = frozenset()  # indices of rows that total other rows


def _align(left: int, right: int) -> list[Align]:
    """``left`` label columns, then ``right`` numeric columns."""
    columns: list[Align] = ["left"] * left
    return columns + ["right"] * right


def format_rate(rate: float | None) -> str:
    return NONE if rate is None else f"{100.0 * rate:.1f}%"


def format_interval(interval: Interval | None) -> str:
    if interval is None:
        return NONE
    return f"{100.0 * interval.lower:.1f}\u2013{100.0 * interval.upper:.1f}%"


def format_proportion(value: Proportion) -> str:
    """``k/n = r%`` (or an em dash when nothing was observed)."""
    if value.rate is None:
        return f"0/0 = {NONE}"
    return f"{value.successes}/{value.trials} = {format_rate(value.rate)}"


def format_delta(delta_pp: float | None) -> str:
    return NONE if delta_pp is None else f"{delta_pp:+.1f} pp"


def category_label(category: str | None) -> str:
    return ALL_CATEGORIES if category is None else category


def contrast_label(role_a: str, role_b: str) -> str:
    return f"{role_b} \u2212 {role_a}"


def _counts(values: dict[str, int], keys: Sequence[str]) -> list[str]:
    return [str(values.get(key, 0)) for key in keys]


_EXECUTION_FIELDS = ["planned", "eligible", "visited", "skipped", "unadmitted", "admitted",
                     "completed", "incomplete", "invalid", "missing", "receipt_copies_missing"]
_EXECUTION_HEADERS = [*_EXECUTION_FIELDS[:-1], "receipt copies missing"]


def _execution_cells(execution: Execution) -> list[str]:
    return [str(getattr(execution, name)) for name in _EXECUTION_FIELDS]


def _execution_table(results: Results) -> Table:
    rows = [[r.role, r.arm, *_execution_cells(r.overall.execution)] for r in results.results]
    rows.append(["all roles", "", *_execution_cells(results.execution)])
    return Table(
        title="Execution",
        headers=["role", "arm", *_EXECUTION_HEADERS],
        align=_align(2, len(_EXECUTION_HEADERS)),
        rows=rows,
        caption="Planned and eligible cover the whole inventory (eligible: planned eligible "
                "and not skipped as infeasible); status counts cover visited slots only; "
                "missing = eligible slots without a receipt; receipt copies missing = "
                "journaled receipts whose file is gone.",
        summary_rows=frozenset({len(rows) - 1}),
    )


def _overall_rows(rows: Sequence[Sequence[str]]) -> frozenset[int]:
    """Rows whose category column (the second) is the all-categories total."""
    return frozenset(i for i, row in enumerate(rows) if row[1] == ALL_CATEGORIES)


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
                str(tally.failed_feasible),
                *_counts(tally.availability, _AVAILABILITY), str(tally.availability_unknown),
            ])
    return Table(
        title="Accuracy and availability",
        headers=["role", "category", "exact", "exact 95% CI", "exactWithFailures",
                 "with failures 95% CI", "failed feasible", *_AVAILABILITY, "unknown"],
        align=_align(2, 5 + len(_AVAILABILITY) + 1),
        rows=rows,
        caption="exact = correct / completed eligible non-excluded slots; exactWithFailures "
                "also counts failed feasible slots as wrong. Intervals are Wilson 95%. "
                "Availability counts eligible non-excluded visited slots by where the "
                "expected value was (model-free).",
        summary_rows=_overall_rows(rows),
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
            rows.append([role.role, category_label(tally.category), str(flip.comparable),
                         str(flip.flipped), format_rate(flip.rate)])
    return Table(
        title="Flip rate across repeats",
        headers=["role", "category", "comparable probes", "flipped", "flip rate"],
        align=_align(2, 3),
        rows=rows,
        caption="Share of (trace, probe) with at least two scored repeats whose result "
                "(pass or fail) changed between repeats.",
        summary_rows=_overall_rows(rows),
    )


def _pair_cells(counts: PairCounts) -> list[str]:
    return [str(counts.pairs), str(counts.both_correct), str(counts.b), str(counts.c),
            str(counts.both_wrong), format_delta(counts.delta_pp)]


def _contrast_table(results: Results) -> Table:
    rows: list[list[str]] = []
    for contrast in results.contrasts:
        for tally in [contrast.overall, *contrast.categories]:
            rows.append([
                contrast_label(contrast.role_a, contrast.role_b),
                category_label(tally.category), str(tally.planned_pairs),
                str(tally.eligible_pairs), *_pair_cells(tally.completed),
                *_pair_cells(tally.with_failures),
            ])
    pair_headers = ["pairs", "both correct", "b", "c", "both wrong", "delta"]
    return Table(
        title="Paired contrasts",
        headers=["contrast (b \u2212 a)", "category", "planned pairs", "eligible pairs",
                 *[f"completed: {h}" for h in pair_headers],
                 *[f"with failures: {h}" for h in pair_headers]],
        align=_align(2, 2 + 2 * len(pair_headers)),
        rows=rows,
        caption="Pairs share trace, probe and repeat. b = only role a correct, c = only "
                "role b correct; delta = accuracy of b minus a over the same pairs.",
        summary_rows=_overall_rows(rows),
    )


_OUTCOMES = [o.value for o in Outcome]


def _outcome_table(results: Results) -> Table:
    rows = [[role.role, category_label(tally.category), *_counts(tally.outcomes, _OUTCOMES)]
            for role in results.results for tally in _tallies(role)]
    return Table(
        title="Outcome classes",
        headers=["role", "category", *_OUTCOMES],
        align=_align(2, len(_OUTCOMES)),
        rows=rows,
        caption="Scored slots (completed, eligible, not excluded) by outcome class.",
        summary_rows=_overall_rows(rows),
    )


_EXCLUSIONS = [e.value for e in Exclusion]


def _excluded_table(results: Results) -> Table:
    rows = [[role.role, *_counts(role.overall.excluded, _EXCLUSIONS)] for role in results.results]
    return Table(
        title="Excluded",
        headers=["role", *_EXCLUSIONS],
        align=_align(1, len(_EXCLUSIONS)),
        rows=rows,
        caption="Excluded slots are never scored as passes or failures.",
    )


def _codes_table(results: Results) -> Table:
    rows = [[role.role, code, str(count)]
            for role in results.results for code, count in sorted(role.codes.items())]
    return Table(
        title="Fixed codes",
        headers=["role", "code", "slots"],
        align=_align(2, 1),
        rows=rows,
        caption="Visited slots that ended with a fixed code (refusal, stop or loss).",
    )


def _token_cell(value: int, spend: Spend) -> str:
    # Unknown usage is never zero usage: a partial sum is printed as a lower bound.
    return str(value) if spend.usage_known else f"\u2265{value}"


def _unknown_usage(slots: int) -> str:
    return f"unknown in {slots} slot" + ("" if slots == 1 else "s")


def _spend_cells(spend: Spend) -> list[str]:
    tokens = spend.tokens
    return [
        str(spend.slots), str(spend.requests), str(spend.admitted_requests),
        *(_token_cell(v, spend) for v in (tokens.input, tokens.cache_read, tokens.cache_write,
                                          tokens.output, tokens.reasoning)),
        "known" if spend.usage_known else _unknown_usage(spend.usage_unknown_slots),
        spend.settled.usd, spend.retained.usd, spend.total.usd, str(spend.total.units),
    ]


def _spend_table(results: Results) -> Table:
    rows = [[role.role, *_spend_cells(role.spend)] for role in results.results]
    rows.append(["all roles", *_spend_cells(results.spend)])
    return Table(
        title="Spend",
        headers=["role", "slots", "requests", "admitted", "input tokens", "cache read",
                 "cache write", "output tokens", "reasoning", "usage", "settled USD",
                 "retained holds USD", "total USD", "total units"],
        align=_align(1, 13),
        rows=rows,
        caption=f"1 unit = 0.00000005 USD. Cap {results.cap.usd} USD, Rmax {results.rmax.usd} "
                "USD. Retained holds are kept for lost or aborted requests: an upper bound, "
                "not a measured cost.",
        summary_rows=frozenset({len(rows) - 1}),
    )


def report_tables(results: Results) -> list[Table]:
    """All tables, in reading order."""
    tables = [_execution_table(results), _accuracy_table(results)]
    flip = _flip_table(results)
    if flip is not None:
        tables.append(flip)
    tables += [_contrast_table(results), _outcome_table(results), _excluded_table(results),
               _codes_table(results), _spend_table(results)]
    return tables
