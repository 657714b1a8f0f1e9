"""What wrote each ledger role's ledgers, and how much of their selections it read.

A ledger arm's checkpoint is the ledger three extractions committed (``folds.ledger``).
With a summariser model each extraction is one request, bounded by its allowance and
the route's window, so records of a large selection may not fit (``unoffered``), and a
reply that breaks the rules degrades its stage (nothing added, the reason recorded).
Both change what the score measures, so the reports show them per role, over the
role's distinct checkpoints (each slot's receipt carries its checkpoint's account:
``protocol.records.LedgerRecord``). A run with no ledger role has no table.
"""

from __future__ import annotations

from collections import Counter

from efold.folds.ledger import LEDGER_EXTRACTIONS
from efold.protocol.records import LedgerRecord
from efold.report.numbers import count
from efold.report.schema import Results
from efold.report.table_kit import Table

__all__ = ["ledger_table"]


def _sent(records: list[LedgerRecord]) -> str:
    if any(r.selected is None for r in records):
        return "not recorded"
    selected = sum(r.selected or 0 for r in records)
    unoffered = sum(r.unoffered for r in records)
    share = f" ({(selected - unoffered) / selected:.0%})" if selected else ""
    return f"{count(selected - unoffered)} of {count(selected)}{share}"


def ledger_table(results: Results) -> Table | None:
    """One row per role whose slots read a ledger (None: no such role)."""
    rows = []
    for role in results.roles:
        # One account per checkpoint (role x trace x repeat): two repeats whose ledgers
        # came out alike are still two checkpoints.
        by_checkpoint = {(s.trace_id, s.repeat): s.ledger for s in results.slots
                         if s.role == role and s.ledger is not None}
        records = list(by_checkpoint.values())
        if not records:
            continue
        extractors = sorted({r.extractor for r in records})
        reasons = Counter(d.split(": ", 1)[-1] for r in records for d in r.degraded)
        degraded = sum(reasons.values())
        rows.append([role, count(len(records)), ", ".join(extractors), _sent(records),
                     f"{count(degraded)} of {count(LEDGER_EXTRACTIONS * len(records))}"
                     + (f" ({', '.join(f'{k} {v}' for k, v in sorted(reasons.items()))})"
                        if reasons else "")])
    if not rows:
        return None
    return Table(
        title="Ledger extractions",
        headers=["role", "checkpoints", "extractor", "records sent", "stages degraded"],
        align=["left", "right", "left", "right", "right"],
        rows=rows,
        caption="Who wrote each ledger (model: the summariser model, one request per "
                "extraction; deterministic: efold's extractor), how many of the records "
                "its selections held were sent to it (the rest had no room in a "
                "request), and its stages whose reply broke the rules and added "
                "nothing. A checkpoint whose three stages all degraded is excluded "
                "(boundary_unverified).",
    )
