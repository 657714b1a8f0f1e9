"""The parts every report table is made of: the ``Table`` record, how a cell formats
a rate, an interval, a delta or a count, and the summary line beside a table's title.

Formatting choices: rates as percentages with one decimal, intervals in percent, deltas
in signed percentage points, counts and tokens with thousands separators, a missing
value as an em dash (never 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from efold.report.join import RESERVED_CATEGORY
from efold.report.numbers import count, signed
from efold.report.schema import (
    Interval,
    PairCounts,
    Proportion,
    RepeatSpread,
)
from efold.report.terms import (
    Term,
)

__all__ = [
    "ALL_CATEGORIES", "LONG_TABLE", "NONE", "Align", "Table", "align_columns",
    "category_label", "contrast_label", "count_cells", "count_noun", "format_delta",
    "format_delta_ci", "format_interval", "format_paired_interval", "format_proportion",
    "format_rate", "format_spread", "overall_rows", "summary_line",
]

NONE = "\u2014"  # em dash: no observation, not zero
ALL_CATEGORIES = RESERVED_CATEGORY

Align = Literal["left", "right"]
# A table with more rows than this is folded on the page (collapsed behind its summary).
LONG_TABLE = 40


class Table(msgspec.Struct, frozen=True):
    title: str
    headers: list[str]
    align: list[Align]
    rows: list[list[str]]
    caption: str = ""
    summary_rows: frozenset[int] = frozenset()  # indices of rows that total other rows
    legend: tuple[Term, ...] = ()  # the words this table uses, defined
    summary: str = ""  # one line with counts, shown beside the title
    folded: bool = False  # long: the page shows it collapsed behind its summary
    # Column groups, left to right: (label, columns spanned); "" spans ungrouped columns.
    # The page shows them as a header row above and drops the "label: " prefix below.
    groups: tuple[tuple[str, int], ...] = ()


def align_columns(left: int, right: int) -> list[Align]:
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
    return f"{count(value.successes)}/{count(value.trials)} = {format_rate(value.rate)}"


def format_delta(delta_pp: float | None) -> str:
    return NONE if delta_pp is None else f"{signed(delta_pp)} pp"


def format_paired_interval(interval: Interval | None) -> str:
    """A paired delta's 95% interval in percentage points: ``\u22123.1 to +27.0``."""
    if interval is None:
        return NONE
    return f"{signed(interval.lower)} to {signed(interval.upper)}"


def format_delta_ci(counts: PairCounts) -> str:
    """The delta, then on a second line its paired 95% interval:
    ``+12.5 pp`` / ``(95% CI \u22123.1 to +27.0)``; without a pair, an em dash and the
    reason. Markdown joins the two lines with a space; the page breaks the line."""
    if counts.delta_pp is None:
        return f"{NONE}\n(no pairs)"
    return (f"{format_delta(counts.delta_pp)}\n"
            f"(95% CI {format_paired_interval(counts.delta_pp95)})")


def format_spread(spread: RepeatSpread | None) -> str:
    """``70.0% \u00b1 4.1 (sd over 3 repeats)``: the mean of the per-repeat rates and
    their sample standard deviation in percentage points; an em dash without a spread."""
    if spread is None:
        return NONE
    return (f"{100.0 * spread.mean:.1f}% \u00b1 {100.0 * spread.sd:.1f} "
            f"(sd over {count(spread.repeats)} repeats)")


def category_label(category: str | None) -> str:
    return ALL_CATEGORIES if category is None else category


def contrast_label(role_a: str, role_b: str) -> str:
    return f"{role_b} \u2212 {role_a}"


def count_cells(values: dict[str, int], keys: Sequence[str]) -> list[str]:
    return [count(values.get(key, 0)) for key in keys]


def summary_line(parts: Sequence[tuple[int, str]]) -> str:
    """``1,234 planned, 1,200 visited``: a table's summary line."""
    return ", ".join(f"{count(n)} {what}" for n, what in parts)


def count_noun(n: int, noun: str = "row", plural: str = "") -> str:
    """``1 row``, ``2 rows``: a count and its noun, plural when it is not one."""
    return f"{count(n)} " + (noun if n == 1 else plural or noun + "s")


def overall_rows(rows: Sequence[Sequence[str]]) -> frozenset[int]:
    """Rows whose category column (the second) is the all-categories total."""
    return frozenset(i for i, row in enumerate(rows) if row[1] == ALL_CATEGORIES)
