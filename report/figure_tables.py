"""The tables of the figures beside the counts: accuracy next to compression and cost per
correct answer, tool use on lookup arms, and latency (``report.tables`` puts them in
reading order)."""

from __future__ import annotations

from efold.errors import Code
from efold.folds.probe_modes import NATIVE_ARMS
from efold.report.numbers import (
    FAUX_MONEY,
    MINUS,
    amount_text,
    count,
    milliseconds_text,
    money_unit,
)
from efold.report.schema import (
    Compression,
    CostPerCorrect,
    Latency,
    Results,
    ToolUse,
)
from efold.report.table_kit import (
    NONE,
    Table,
    align_columns,
    count_cells,
    count_noun,
    format_proportion,
    format_rate,
)
from efold.report.terms import (
    COMPRESSION_TERMS,
    COST_PER_CORRECT,
    LATENCY_TERMS,
    TOOL_TERMS,
)

__all__ = ["compression_table", "latency_table", "tool_table"]


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
                         f"{count_noun(ratio.pairs, 'pair')})")
    return cells


def _cost_cell(cost: CostPerCorrect | None, faux: bool) -> str:
    if cost is None:
        return NONE
    if cost.settled is None:
        return f"{NONE}\n(summariser spend not split by role)"
    if cost.per_correct is None:
        return f"{NONE}\n(no correct answer)"
    return f"{amount_text(cost.per_correct, faux)}\n({count(cost.per_correct.units)} units)"


def compression_table(results: Results) -> Table | None:
    """Accuracy beside checkpoint size, compression and cost per correct answer: only
    when some receipt recorded the size of the checkpoint it read."""
    if all(role.compression is None for role in results.results):
        return None
    arms = {role.role: role.arm for role in results.results}
    reference = next((r for r in results.roles if arms.get(r) in NATIVE_ARMS), None)
    unit = money_unit(results.reader_faux)
    rows = []
    for role in results.results:
        sizes = role.compression
        rows.append([
            role.role, format_proportion(role.overall.exact),
            NONE if sizes is None else count(sizes.checkpoints),
            NONE if sizes is None else count(sizes.tokens_median),
            NONE if sizes is None else count(sizes.bytes_median),
            *_compression_cells(role.role, sizes, reference),
            _cost_cell(role.cost_per_correct, results.reader_faux),
        ])
    against_transcript = any(
        role.compression is not None and role.compression.versus_reference is not None
        and role.compression.versus_reference.against == "transcript"
        for role in results.results)
    versus = ("Compression is against the full transcript at the boundary (what the native "
              "arm shows), counted by the controller from the trace, per trace and repeat."
              if against_transcript else
              f"Compression is against {reference}, the reference role (the first role "
              "whose arm is native or native-lookup: the full transcript), paired by trace and "
              "repeat."
              if reference is not None else
              "No role's arm is native, so there is no reference for compression.")
    faux = f" ({FAUX_MONEY})" if results.reader_faux else ""
    return Table(
        title="Accuracy and compression",
        headers=["role", "exact", "checkpoints", "tokens median", "bytes median",
                 "compression (tokens)", "compression (bytes)", f"cost per correct {unit}"],
        align=align_columns(1, 7),
        rows=rows,
        caption="Each checkpoint's reader-visible size counted once (estimated tokens and "
                f"UTF-8 bytes). {versus} Cost per correct = settled {unit} of the role's "
                f"probe and summariser requests / its correct answers{faux}.",
        legend=(*COMPRESSION_TERMS, (f"cost per correct {unit}", COST_PER_CORRECT)),
        summary=f"{count_noun(len(rows), 'role')}, " + count_noun(
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
        *count_cells(tools.meter_exhausted_by, causes),
    ]


def tool_table(results: Results) -> Table | None:
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
        align=align_columns(1, 11 + len(causes)),
        rows=rows,
        caption="Roles whose arm offers the history lookup tools, or that made a lookup "
                "call. Lookup figures are over scored slots (completed, eligible, not "
                "excluded); the meter's are over admitted slots. Bytes are UTF-8 bytes of "
                "lookup responses.",
        legend=TOOL_TERMS,
        summary=f"{count_noun(len(rows), 'role')}, "
                f"{count_noun(sum(t.lookup_calls for _, t in roles), 'lookup call')}",
    )


def _latency_cells(latency: Latency | None) -> list[str]:
    if latency is None:
        return [NONE, NONE, NONE]
    return [count(latency.slots), milliseconds_text(latency.median_ms),
            milliseconds_text(latency.p95_ms)]


def latency_table(results: Results) -> Table | None:
    """Wall time per slot; hidden for documents written before latency existed."""
    if results.latency is None and all(r.latency is None for r in results.results):
        return None
    rows = [[role.role, *_latency_cells(role.latency)] for role in results.results]
    rows.append(["all roles", *_latency_cells(results.latency)])
    return Table(
        title="Latency",
        headers=["role", "slots", "median", "p95"],
        align=align_columns(1, 3),
        rows=rows,
        caption="Wall time per admitted slot (nearest-rank percentiles: always an observed "
                "time).",
        summary_rows=frozenset({len(rows) - 1}),
        legend=LATENCY_TERMS,
        summary=("median " + milliseconds_text(results.latency.median_ms)
                 + ", p95 " + milliseconds_text(results.latency.p95_ms)
                 if results.latency is not None else ""),
    )
