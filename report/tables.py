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

from collections.abc import Sequence
from typing import Literal

import msgspec

from efold.corpus.model import Availability, Category, Outcome
from efold.errors import Code
from efold.protocol.records import Exclusion
from efold.report.join import RESERVED_CATEGORY
from efold.report.numbers import FAUX_MONEY, MINUS, count, milliseconds_text, signed, usd
from efold.report.results import NATIVE_ARM
from efold.report.schema import (
    Compression,
    CostPerCorrect,
    Execution,
    Interval,
    Latency,
    PairCounts,
    Proportion,
    RepeatSplit,
    RepeatSpread,
    Results,
    RoleResult,
    Spend,
    Tally,
    ToolUse,
)
from efold.report.terms import (
    ACCURACY_TERMS,
    AVAILABILITY_TERMS,
    COMPRESSION_TERMS,
    COST_PER_CORRECT,
    EXCLUSION_TERMS,
    EXECUTION_TERMS,
    LATENCY_TERMS,
    OUTCOME_TERMS,
    PAIR_TERMS,
    PAIRED_INTERVAL,
    REPEAT_TERMS,
    SLOT_TERMS,
    TOOL_TERMS,
    VERSUS_TERMS,
    Term,
)

__all__ = [
    "NONE", "Table", "category_label", "contrast_label", "format_delta", "format_delta_ci",
    "format_interval", "format_paired_interval", "format_proportion", "format_rate",
    "format_spread", "report_tables", "slot_table",
]

NONE = "\u2014"  # em dash: no observation, not zero
ALL_CATEGORIES = RESERVED_CATEGORY

Align = Literal["left", "right"]
# A table with more rows than this is folded on the page (collapsed behind its summary).
_LONG = 40


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


def _counts(values: dict[str, int], keys: Sequence[str]) -> list[str]:
    return [count(values.get(key, 0)) for key in keys]


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
        align=_align(2, len(_EXECUTION_HEADERS)),
        rows=rows,
        caption="Planned and eligible cover the whole inventory (eligible: planned eligible "
                "and not skipped as infeasible); status counts cover visited slots only; "
                "missing = eligible slots without a receipt; receipt copies missing = "
                "journaled receipts whose file is gone.",
        summary_rows=frozenset({len(rows) - 1}),
        legend=EXECUTION_TERMS,
        summary=_summary([(results.execution.planned, "planned"),
                          (results.execution.visited, "visited"),
                          (results.execution.completed, "completed"),
                          (results.execution.missing, "missing")]),
    )


def _summary(parts: Sequence[tuple[int, str]]) -> str:
    """``1,234 planned, 1,200 visited``: a table's summary line."""
    return ", ".join(f"{count(n)} {what}" for n, what in parts)


def _rows(n: int, noun: str = "row", plural: str = "") -> str:
    """``1 row``, ``2 rows``: a count and its noun, plural when it is not one."""
    return f"{count(n)} " + (noun if n == 1 else plural or noun + "s")


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
                count(tally.failed_feasible),
                *_counts(tally.availability, _AVAILABILITY), count(tally.availability_unknown),
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
        legend=ACCURACY_TERMS + AVAILABILITY_TERMS,
        summary=_summary([(len(results.results), "roles"),
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
        align=_align(2, 3),
        rows=rows,
        caption="Share of (trace, probe) with at least two scored repeats whose result "
                "(pass or fail) changed between repeats.",
        summary_rows=_overall_rows(rows),
        summary=_rows(len(rows)),
    )


def _pair_cells(counts: PairCounts) -> list[str]:
    return [count(counts.pairs), count(counts.both_correct), count(counts.b), count(counts.c),
            count(counts.both_wrong), format_delta_ci(counts)]


def _contrast_table(results: Results) -> Table:
    rows: list[list[str]] = []
    for contrast in results.contrasts:
        for tally in [contrast.overall, *contrast.categories]:
            rows.append([
                contrast_label(contrast.role_a, contrast.role_b),
                category_label(tally.category), count(tally.planned_pairs),
                count(tally.eligible_pairs), *_pair_cells(tally.completed),
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
                "role b correct; delta = accuracy of b minus a over the same pairs, its "
                f"95% CI below it. {PAIRED_INTERVAL}",
        summary_rows=_overall_rows(rows),
        legend=PAIR_TERMS,
        summary=_summary([(len(results.contrasts), "contrasts"), (len(rows), "rows")]),
        groups=(("", 4), ("completed", len(pair_headers)),
                ("with failures", len(pair_headers))),
        folded=len(rows) > _LONG,
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
        align=_align(1, 1 + len(repeats)),
        rows=rows,
        caption="Exact accuracy of each repeat alone (correct / completed), and how much it "
                "moves between repeats: the mean of the repeats' rates \u00b1 their sample "
                "standard deviation, in percentage points.",
        legend=REPEAT_TERMS,
        summary=f"{_rows(len(rows), 'role')}, {_rows(len(repeats), 'repeat')}",
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
        align=_align(1, 1 + len(categories)),
        rows=rows,
        caption=f"Accuracy of each role minus that of {native}, the reference role (the "
                "first role whose arm is native), over the completed pairs both were scored "
                "on, in percentage points, per category; the 95% CI below each delta. "
                f"{PAIRED_INTERVAL}",
        legend=VERSUS_TERMS,
        summary=f"{_rows(len(rows), 'role')}, "
                f"{_rows(len(categories), 'category', 'categories')}",
        # More categories than the corpus has: it may be wider than the page, so it is
        # folded, and scrolls in its own box when opened.
        folded=len(rows) > _LONG or len(categories) > len(Category),
    )


def _share(value: float) -> str:
    """A proportion as a percentage with one decimal and a true minus sign."""
    text = f"{abs(100.0 * value):,.1f}%"
    return f"{MINUS}{text}" if value < 0 and text.strip("0.,%") else text


def _compression_cells(role: str, compression: Compression | None,
                       reference: str | None) -> list[str]:
    """Tokens, then bytes: the median compression over pairs, the aggregate below."""
    if compression is None:  # no checkpoint with a size (e.g. every slot skipped)
        return [NONE, NONE]
    ratio = compression.versus_reference
    if role == reference and (ratio is None or ratio.against == "role"):
        return ["reference", "reference"]
    if ratio is None:
        return [NONE, NONE]
    cells = []
    for median, aggregate in ((ratio.tokens_median, ratio.tokens_aggregate),
                              (ratio.bytes_median, ratio.bytes_aggregate)):
        if median is None or aggregate is None:
            cells.append(f"{NONE}\n(no pairs)")
        else:
            cells.append(f"{_share(median)}\n(aggregate {_share(aggregate)}, "
                         f"{_rows(ratio.pairs, 'pair')})")
    return cells


def _cost_cell(cost: CostPerCorrect | None) -> str:
    if cost is None:
        return NONE
    if cost.settled is None:
        return f"{NONE}\n(summariser spend not split by role)"
    if cost.per_correct is None:
        return f"{NONE}\n(no correct answer)"
    return f"{usd(cost.per_correct.usd)}\n({count(cost.per_correct.units)} units)"


def _compression_table(results: Results) -> Table | None:
    """Accuracy beside checkpoint size, compression and cost per correct answer: only
    when some receipt recorded the size of the checkpoint it read."""
    if all(role.compression is None for role in results.results):
        return None
    arms = {role.role: role.arm for role in results.results}
    reference = next((r for r in results.roles if arms.get(r) == NATIVE_ARM), None)
    unit = "faux USD" if results.reader_faux else "USD"
    rows = []
    for role in results.results:
        sizes = role.compression
        rows.append([
            role.role, format_proportion(role.overall.exact),
            NONE if sizes is None else count(sizes.checkpoints),
            NONE if sizes is None else count(sizes.tokens_median),
            NONE if sizes is None else count(sizes.bytes_median),
            *_compression_cells(role.role, sizes, reference),
            _cost_cell(role.cost_per_correct),
        ])
    against_transcript = any(
        role.compression is not None and role.compression.versus_reference is not None
        and role.compression.versus_reference.against == "transcript"
        for role in results.results)
    versus = ("Compression is against the full transcript at the boundary (what the native "
              "arm shows), counted by the controller from the trace, per trace and repeat."
              if against_transcript else
              f"Compression is against {reference}, the reference role (the first role "
              "whose arm is native: the full transcript), paired by trace and repeat."
              if reference is not None else
              "No role's arm is native, so there is no reference for compression.")
    faux = f" ({FAUX_MONEY})" if results.reader_faux else ""
    return Table(
        title="Accuracy and compression",
        headers=["role", "exact", "checkpoints", "tokens median", "bytes median",
                 "compression (tokens)", "compression (bytes)", f"cost per correct {unit}"],
        align=_align(1, 7),
        rows=rows,
        caption="Each checkpoint's reader-visible size counted once (estimated tokens and "
                f"UTF-8 bytes). {versus} Cost per correct = settled {unit} of the role's "
                f"probe and summariser requests / its correct answers{faux}.",
        legend=(*COMPRESSION_TERMS, (f"cost per correct {unit}", COST_PER_CORRECT)),
        summary=f"{_rows(len(rows), 'role')}, " + _rows(
            sum(r.compression.checkpoints for r in results.results if r.compression),
            "checkpoint"),
    )


_METER_CAUSES = [Code.METER_CALLS_EXHAUSTED.value, Code.METER_BYTES_EXHAUSTED.value]


def _optional_count(value: int | None) -> str:
    return NONE if value is None else count(value)


def _tool_cells(tools: ToolUse) -> list[str]:
    causes = [*_METER_CAUSES, *sorted(set(tools.meter_exhausted_by) - set(_METER_CAUSES))]
    return [
        count(tools.completed), count(tools.with_lookup), format_rate(tools.lookup_rate),
        format_proportion(tools.exact_with_lookup),
        format_proportion(tools.exact_without_lookup), count(tools.lookup_calls),
        count(tools.bytes_read), _optional_count(tools.bytes_median), count(tools.recoverable),
        count(tools.recoveries), count(tools.meter_exhausted),
        *_counts(tools.meter_exhausted_by, causes),
    ]


def _tool_table(results: Results) -> Table | None:
    """History lookups of the roles that offer them; hidden when no role does."""
    roles = [(role.role, role.tool_use) for role in results.results if role.tool_use]
    if not roles:
        return None
    causes = [*_METER_CAUSES, *sorted({c for _, t in roles for c in t.meter_exhausted_by}
                                      - set(_METER_CAUSES))]
    rows = [[name, *_tool_cells(tools)] for name, tools in roles]
    return Table(
        title="Tool use (history lookups)",
        headers=["role", "scored", "with lookup", "lookup rate", "exact with lookup",
                 "exact without lookup", "lookup calls", "bytes read", "median bytes",
                 "recoverable", "recoveries witnessed", "meter exhausted", *causes],
        align=_align(1, 11 + len(causes)),
        rows=rows,
        caption="Roles whose arm offers the history lookup tools, or that made a lookup "
                "call. Lookup figures are over scored slots (completed, eligible, not "
                "excluded); the meter's are over admitted slots. Bytes are UTF-8 bytes of "
                "lookup responses.",
        legend=TOOL_TERMS,
        summary=f"{_rows(len(rows), 'role')}, "
                f"{_rows(sum(t.lookup_calls for _, t in roles), 'lookup call')}",
    )


def _latency_cells(latency: Latency | None) -> list[str]:
    if latency is None:
        return [NONE, NONE, NONE]
    return [count(latency.slots), milliseconds_text(latency.median_ms),
            milliseconds_text(latency.p95_ms)]


def _latency_table(results: Results) -> Table | None:
    """Wall time per slot; hidden for documents written before latency existed."""
    if results.latency is None and all(r.latency is None for r in results.results):
        return None
    rows = [[role.role, *_latency_cells(role.latency)] for role in results.results]
    rows.append(["all roles", *_latency_cells(results.latency)])
    return Table(
        title="Latency",
        headers=["role", "slots", "median", "p95"],
        align=_align(1, 3),
        rows=rows,
        caption="Wall time per admitted slot (nearest-rank percentiles: always an observed "
                "time).",
        summary_rows=frozenset({len(rows) - 1}),
        legend=LATENCY_TERMS,
        summary=("median " + milliseconds_text(results.latency.median_ms)
                 + ", p95 " + milliseconds_text(results.latency.p95_ms)
                 if results.latency is not None else ""),
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
        legend=OUTCOME_TERMS,
        summary=_summary([(sum(sum(r.overall.outcomes.values()) for r in results.results),
                           "scored slots")]),
        folded=len(rows) > _LONG,
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
        legend=EXCLUSION_TERMS,
        summary=_summary([(sum(sum(r.overall.excluded.values()) for r in results.results),
                           "excluded slots")]),
    )


def _codes_table(results: Results) -> Table:
    rows = [[role.role, code, count(slots)]
            for role in results.results for code, slots in sorted(role.codes.items())]
    return Table(
        title="Fixed codes",
        headers=["role", "code", "slots"],
        align=_align(2, 1),
        rows=rows,
        caption="Visited slots that ended with a fixed code (refusal, stop or loss).",
        summary=_summary([(len({row[1] for row in rows}), "codes"),
                          (sum(sum(r.codes.values()) for r in results.results), "slots")]),
        folded=len(rows) > _LONG,
    )


def _token_cell(value: int, spend: Spend) -> str:
    # Unknown usage is never zero usage: a partial sum is printed as a lower bound.
    return count(value) if spend.usage_known else f"\u2265{count(value)}"


def _unknown_usage(slots: int) -> str:
    return f"unknown in {slots} slot" + ("" if slots == 1 else "s")


def _spend_cells(spend: Spend) -> list[str]:
    tokens = spend.tokens
    return [
        count(spend.slots), count(spend.requests), count(spend.admitted_requests),
        *(_token_cell(v, spend) for v in (tokens.input, tokens.cache_read, tokens.cache_write,
                                          tokens.output, tokens.reasoning)),
        "known" if spend.usage_known else _unknown_usage(spend.usage_unknown_slots),
        usd(spend.settled.usd), usd(spend.retained.usd), usd(spend.total.usd),
        count(spend.total.units),
    ]


def _spend_table(results: Results) -> Table:
    rows = [[role.role, *_spend_cells(role.spend)] for role in results.results]
    rows.append(["all roles", *_spend_cells(results.spend)])
    # A faux reader's money is faux: said in the title, every money header and the caption.
    unit = "faux USD" if results.reader_faux else "USD"
    faux = f" ({FAUX_MONEY})" if results.reader_faux else ""
    return Table(
        title=f"Spend{faux}",
        headers=["role", "slots", "requests", "admitted", "input tokens", "cache read",
                 "cache write", "output tokens", "reasoning", "usage", f"settled {unit}",
                 f"retained holds {unit}", f"total {unit}", "total units"],
        align=_align(1, 13),
        rows=rows,
        caption=f"1 unit = 0.00000005 USD. Cap {usd(results.cap.usd)} {unit}, Rmax "
                f"{usd(results.rmax.usd)} {unit}. Retained holds are kept for lost or "
                "aborted requests: an upper bound, not a measured cost."
                + (" The reader is faux: these are faux units, no money was spent."
                   if results.reader_faux else ""),
        summary_rows=frozenset({len(rows) - 1}),
        summary=f"total {usd(results.spend.total.usd)} {unit}, "
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
        align=[*_align(5, 1), *_align(7, 0)],
        rows=rows,
        caption="Every planned slot in schedule order, as results.json holds it (without "
                "answers).",
        summary=_summary([(len(rows), "slots"), *((statuses[s], s) for s in order)]),
        legend=SLOT_TERMS,
        folded=True,
    )


def report_tables(results: Results) -> list[Table]:
    """All tables, in reading order."""
    tables = [
        _execution_table(results), _accuracy_table(results), _compression_table(results),
        _repeat_table(results),
        _flip_table(results), _versus_native_table(results), _contrast_table(results),
        _tool_table(results), _latency_table(results), _outcome_table(results),
        _excluded_table(results), _codes_table(results), _spend_table(results),
    ]
    return [table for table in tables if table is not None]
