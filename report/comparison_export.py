"""A comparison set made of a run's receipts: two of its roles, paired slot by slot.

``comparison_from_receipts`` pairs the slots of a ``reference`` and a ``candidate``
role that ask the same thing (the same trace, probe and repeat): a question, or a
boundary case's continuation. A slot counts only when it was completed and scored (not
excluded); a pair with a slot that did not is left out and counted (``Unpaired``), never
filled in. Each slot becomes one ``ComparisonRun``:

| field | a question slot | a boundary slot |
| --- | --- | --- |
| ``task`` | ``<trace_id>/<probe_id>`` | the case's id |
| ``accepted`` | scored correct | every oracle passed |
| ``checks`` | 1 of 1, or 0 of 1 | oracles passed of oracles judged (not-applicable ones left out) |
| ``missed_constraints`` | 1 when an ``active_constraint`` probe was not answered correctly | failed ``forbidden-path-unchanged``, ``file-unchanged`` and ``tool-action-absent`` oracles |
| ``unsupported_claims`` | 1 when the answer was ``fabricated`` | null: efold never scores an agent's prose |
| ``tokens``, ``cost_usd`` | the slot's settled usage and money; null when a request's usage went missing | the same |
| ``latency_ms`` | the slot's elapsed time, launch to receipt | the same |

The cost is the slot's own spend (reader or agent requests): a fold's summariser spend
belongs to its checkpoint, shared by every slot of it, and is not split into tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from efold.corpus.model import Category, Outcome
from efold.errors import Code
from efold.guard.money import units_to_usd
from efold.protocol.records import Receipt, SlotStatus
from efold.report.comparison_set import SCHEMA, ComparisonRun, ComparisonSet, Provenance
from efold.report.errors import ReportError

# The oracles that judge a constraint the agent was given (an authority it must keep).
CONSTRAINT_ORACLES: Final = frozenset({"forbidden-path-unchanged", "file-unchanged",
                                       "tool-action-absent"})


@dataclass(frozen=True)
class Unpaired:
    """Slots of the two roles left out: ``unscored`` pairs had a slot that was not
    completed and scored; ``alone`` slots had no counterpart in the other role."""

    unscored: int
    alone: int


def scored(r: Receipt) -> bool:
    """Whether a slot counts in a comparison: completed, scored and not excluded."""
    return r.status is SlotStatus.COMPLETED and r.correct is not None and r.excluded is None


def comparison_run(r: Receipt) -> ComparisonRun:
    """One slot as a comparison run (the table of the module docstring)."""
    spend = r.spend
    usage = spend.usage
    known = spend.usage_known
    tokens = usage.input + usage.output if known else None
    cost = units_to_usd(spend.settled_units) if known else None
    record = r.boundary
    if record is not None:
        judged = [o for o in record.oracles if o.verdict != "not_applicable"]
        return ComparisonRun(
            task=record.case, repeat=r.repeat, arm=r.role, accepted=r.correct is True,
            checks_passed=sum(o.verdict == "pass" for o in judged), checks_total=len(judged),
            missed_constraints=sum(o.verdict == "fail" and o.type in CONSTRAINT_ORACLES
                                   for o in record.oracles),
            unsupported_claims=None, tokens=tokens, cost_usd=cost, latency_ms=r.elapsed_ms)
    correct = r.correct is True
    return ComparisonRun(
        task=f"{r.trace_id}/{r.probe_id}", repeat=r.repeat, arm=r.role, accepted=correct,
        checks_passed=int(correct), checks_total=1,
        missed_constraints=int(r.category == Category.ACTIVE_CONSTRAINT.value and not correct),
        unsupported_claims=int(r.outcome is Outcome.FABRICATED), tokens=tokens,
        cost_usd=cost, latency_ms=r.elapsed_ms)


def comparison_from_receipts(receipts: Sequence[Receipt], reference: str, candidate: str, *,
                             provenance: Provenance, representative: bool
                             ) -> tuple[ComparisonSet, Unpaired]:
    """The set of ``reference`` against ``candidate`` (module docstring). Either role
    absent from the receipts refuses (``comparison_invalid``)."""
    roles = {r.role for r in receipts}
    for role in (reference, candidate):
        if role not in roles:
            raise ReportError(Code.COMPARISON_INVALID,
                              f"the run has no role {role!r} (its roles: "
                              f"{', '.join(sorted(roles))})")
    if reference == candidate:
        raise ReportError(Code.COMPARISON_INVALID, "compare two different roles")
    by_key: dict[tuple[str, str, int], dict[str, Receipt]] = {}
    for r in receipts:
        if r.role in (reference, candidate):
            by_key.setdefault((r.trace_id, r.probe_id, r.repeat), {})[r.role] = r
    runs: list[ComparisonRun] = []
    unscored = alone = 0
    for key in sorted(by_key):
        pair = by_key[key]
        if len(pair) < 2:
            alone += 1
        elif scored(pair[reference]) and scored(pair[candidate]):
            runs += [comparison_run(pair[reference]), comparison_run(pair[candidate])]
        else:
            unscored += 1
    data = ComparisonSet(schema=SCHEMA, arms=[reference, candidate],
                         representative_task_set=representative, runs=runs,
                         provenance=provenance)
    return data, Unpaired(unscored=unscored, alone=alone)
