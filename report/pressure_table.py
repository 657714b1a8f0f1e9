"""Input pressure side by side: the estimate and the provider's count.

The native arm's samples are valid on a hard suite only under input pressure (its
probe's whole checkpoint at 150,000 tokens or more). Its fold records a chars/4
estimate, the plan-time pre-check; on a local or real route the provider's own count of
each slot's first request decides (``controller.pilot.judging``), and the receipt keeps
both (``pressure_estimate_tokens``, ``pressure_measured_tokens``). This table shows them
per role, over the slots that have a provider's count; a run without one (the faux
route) has no table.
"""

from __future__ import annotations

from efold.folds.arms import NATIVE_PRESSURE_TOKENS
from efold.report.numbers import count
from efold.report.schema import Results
from efold.report.stats import nearest_rank
from efold.report.table_kit import Table, align_columns

__all__ = ["pressure_table"]


def pressure_table(results: Results) -> Table | None:
    """One row per role with a provider-counted slot (None: no such slot)."""
    rows = []
    for role in results.roles:
        pairs = [(s.pressure_estimate_tokens, s.pressure_measured_tokens)
                 for s in results.slots
                 if s.role == role and s.pressure_estimate_tokens is not None
                 and s.pressure_measured_tokens is not None]
        if not pairs:
            continue
        estimates = [e for e, _ in pairs if e is not None]
        counted = [m for _, m in pairs if m is not None]
        below = sum(1 for m in counted if m < NATIVE_PRESSURE_TOKENS)
        median_e, median_m = nearest_rank(estimates, 50), nearest_rank(counted, 50)
        ratio = "-" if not median_e or median_m is None else f"{median_m / median_e:.2f}"
        rows.append([role, count(len(pairs)), count(median_e or 0), count(median_m or 0),
                     ratio, count(below)])
    if not rows:
        return None
    return Table(
        title="Input pressure: estimate and provider count",
        headers=["role", "slots", "estimate (median tok)", "provider (median tok)",
                 "provider / estimate", f"below {count(NATIVE_PRESSURE_TOKENS)}"],
        align=align_columns(1, 5),
        rows=rows,
        caption="The first request's input as the provider counted it decides pressure "
                "(below the floor: pressure_unverified); the chars/4 estimate is the "
                "plan-time pre-check. Slots the provider counted only.",
    )
