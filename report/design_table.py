"""The registered design's comparisons (``Results.design``), one row each: the base and
the treatment, what differs (the build's changed files, or the two guidance digests)
and the paired accuracy difference, treatment minus base, over the slots both completed
on the same (trace, probe, repeat). A run without a design has no table."""

from __future__ import annotations

from efold.report.numbers import count
from efold.report.schema import Results
from efold.report.table_kit import Table, align_columns, format_delta_ci

__all__ = ["design_table"]

_SHORT = 12


def design_table(results: Results) -> Table | None:
    if not results.design:
        return None
    rows = []
    for pair in results.design:
        what = (", ".join(pair.changed) if pair.differs == "build" else
                f"{pair.base_sha256[:_SHORT]} → {pair.treatment_sha256[:_SHORT]}")
        rows.append([f"{pair.base} → {pair.treatment}", pair.differs, what,
                     count(pair.contrast.pairs), format_delta_ci(pair.contrast)])
    return Table(
        title="Declared comparisons",
        headers=["base → treatment", "differs in", "what differs", "pairs",
                 "treatment − base (95% CI)"],
        align=align_columns(3, 2),
        rows=rows,
        caption="The registration's design: each pair was checked at register to differ "
                "only where declared. Paired over the slots both roles completed on the "
                "same trace, probe and repeat; descriptive, not a significance claim. "
                + ("The faux reader ignores instructions, so a guidance pair reads no "
                   "difference here." if results.reader_faux and any(
                       p.differs == "guidance" for p in results.design) else ""),
    )
