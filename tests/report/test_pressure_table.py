"""The input pressure table: the estimate beside the provider's count, per role, only
where a provider counted (a local or real route)."""

from __future__ import annotations

import msgspec

from efold.protocol.records import Plan, Receipt
from efold.report import build_results, render_html, render_markdown


def _with_pressure(receipts: list[Receipt], role: str,
                   counts: list[int | None]) -> list[Receipt]:
    """``role``'s receipts given an estimate of 222,000 and the provider counts in turn."""
    out, given = [], iter(counts)
    for r in receipts:
        if r.role == role:
            r = msgspec.structs.replace(r, pressure_estimate_tokens=222_000,
                                        pressure_measured_tokens=next(given, None))
        out.append(r)
    return out


def test_the_table_shows_both_figures_and_counts_the_slots_below_the_floor(
        synthetic_run: tuple[Plan, list[Receipt]]) -> None:
    plan, receipts = synthetic_run
    role = plan.roles[0]
    mine = [r for r in receipts if r.role == role]
    counts = [182_000, 140_000, 160_000] + [None] * (len(mine) - 3)
    results = build_results(plan, _with_pressure(receipts, role, counts), faux=False)
    text = render_markdown(results)
    section = text.split("## Input pressure: estimate and provider count", 1)[1]
    row = next(line for line in section.splitlines() if line.startswith(f"| {role} "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells == [role, "3", "222,000", "160,000", "0.72", "1"]
    assert "Input pressure: estimate and provider count" in render_html(results)


def test_a_run_no_provider_counted_has_no_table(
        synthetic_run: tuple[Plan, list[Receipt]]) -> None:
    plan, receipts = synthetic_run
    faux = _with_pressure(receipts, plan.roles[0], [])  # estimates only, as on faux
    assert "Input pressure" not in render_markdown(build_results(plan, faux, faux=True))
