"""Aggregation: receipts + plan -> results, refusing anything it cannot vouch for.

Read-only over the run: it reads ``plan.json``, ``receipts/*.json`` and the journal's
receipt digests, and changes none of them. It refuses (fixed codes):
- ``receipt_duplicate``: two receipts claim one slot;
- ``receipt_unplanned``: a receipt for a slot the plan does not have;
- ``receipt_unvisited``: a receipt the journal never recorded (the slot was not visited);
- ``receipt_changed``: a receipt whose bytes no longer hash to the journaled digest.
A journaled receipt whose file is gone is counted as missing, never invented.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import msgspec

from efold.controller.records import Plan, Receipt
from efold.digests import sha256_hex
from efold.errors import Code, EfoldError
from efold.registry.journal import JournalReader

PLAN_NAME = "plan.json"
RECEIPTS_DIR = "receipts"


class AggregateError(EfoldError):
    """The run's receipts cannot be aggregated as they are."""


@dataclass(frozen=True)
class RunView:
    plan: Plan
    receipts: list[Receipt]
    journaled_missing: list[str]  # journaled receipts whose file is absent


def receipt_name(slot: str) -> str:
    return f"{slot}.json"


def read_run(run_dir: str | os.PathLike[str]) -> RunView:
    run = Path(run_dir)
    try:
        plan = msgspec.json.decode((run / PLAN_NAME).read_bytes(), type=Plan)
    except (OSError, msgspec.DecodeError) as exc:
        raise AggregateError(Code.RECEIPT_UNPLANNED, "plan.json is missing or invalid") from exc
    with JournalReader(run) as journal:
        journaled = {r["slot"]: r["digest"] for r in journal.rows("receipts")}
    planned = {s.slot for s in plan.slots}
    seen: dict[str, Receipt] = {}
    rdir = run / RECEIPTS_DIR
    # Only published receipts: a crash inside an exclusive publish can leave a hidden
    # temporary file (".<name>.tmp-..."), which is never a receipt.
    names = sorted(n for n in os.listdir(rdir) if n.endswith(".json") and not n.startswith(".")) \
        if rdir.is_dir() else []
    for name in names:
        data = (rdir / name).read_bytes()
        try:
            receipt = msgspec.json.decode(data, type=Receipt)
        except msgspec.DecodeError as exc:
            raise AggregateError(Code.RECEIPT_CHANGED, f"{name}: not a receipt") from exc
        if receipt.slot in seen:
            raise AggregateError(Code.RECEIPT_DUPLICATE, receipt.slot)
        if receipt.slot not in planned:
            raise AggregateError(Code.RECEIPT_UNPLANNED, receipt.slot)
        if receipt.slot not in journaled:
            raise AggregateError(Code.RECEIPT_UNVISITED, receipt.slot)
        if sha256_hex(data) != journaled[receipt.slot]:
            raise AggregateError(Code.RECEIPT_CHANGED, receipt.slot)
        seen[receipt.slot] = receipt
    order = {s.slot: i for i, s in enumerate(plan.slots)}
    receipts = sorted(seen.values(), key=lambda r: order[r.slot])
    missing = sorted(set(journaled) - set(seen), key=lambda s: order.get(s, -1))
    return RunView(plan, receipts, missing)


def render_reports(view: RunView, *, faux: bool) -> dict[str, bytes]:
    """results.json, summary.md and report.html, as bytes (content-free)."""
    from efold.report import build_results, render_reports

    results = build_results(
        view.plan, view.receipts, faux=faux, receipt_copies_missing=view.journaled_missing
    )
    return render_reports(results)


def publish_reports(reports: dict[str, bytes], out_dir: str | os.PathLike[str]) -> None:
    from efold.registry import publish_exclusive
    from efold.report import REPORT_FILES

    for name in REPORT_FILES:
        publish_exclusive(Path(out_dir), name, reports[name])
