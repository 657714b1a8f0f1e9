"""Judging a visited slot: its receipt, and the stops it implies, from facts alone.

Pure: no I/O, no clock, no change to the run. ``controller.slots`` takes the stops a
verdict names (``RunContext.take_stops``) and then writes its receipt.

How a probe slot's status is decided (from the controller's own ledger, never from the
child's claim alone):
- no hold ever granted: ``unadmitted`` (an answer without any admitted request is an
  unguarded dispatch: a sticky integrity stop);
- holds granted, then lost / aborted / refused later: ``incomplete``;
- holds granted and an answer: ``completed`` (scored); a failed answer: ``invalid``.
A terminal claiming a guard policy violation (an integrity stop, or a refusal with a
code that may not continue) is a sticky stop of the run, whether or not a hold existed.

The lookup figures (calls, delivered bytes, the meter's abort cause) are the child's
meter reading, copied as evidence; an abort cause other than the meter's own two codes
is not a meter abort and is not recorded (an allowlist, like every code a child names).
"""

from __future__ import annotations

from dataclasses import dataclass

from efold.controller.evidence import Evidence
from efold.controller.stops import SlotEnd
from efold.corpus import score
from efold.corpus.model import Outcome, Probe
from efold.digests import sha256_hex
from efold.errors import Code
from efold.guard.ledger import SlotLedger
from efold.guard.permits import CONTINUABLE_CODES, child_code
from efold.ipc.messages import Terminal, TerminalStatus
from efold.protocol.records import PlannedSlot, Receipt, SlotSpend, SlotStatus, TokenCounts

# The only codes a receipt records as a meter abort (``folds.meter``).
METER_ABORTS = frozenset({Code.METER_CALLS_EXHAUSTED, Code.METER_BYTES_EXHAUSTED})


@dataclass(frozen=True)
class Verdict:
    receipt: Receipt
    # The sticky stops of the run this slot implies, in the order they are to be taken
    # (the stop policy keeps the first cause).
    stops: tuple[Code, ...] = ()


def judge_slot(planned: PlannedSlot, probe: Probe, ledger: SlotLedger, *,
               terminal: Terminal | None, failure: Code | None, evidence: Evidence,
               elapsed_ms: int) -> Verdict:
    """The receipt of a launched probe slot and the stops it implies. ``ledger`` is the
    slot's own (the controller's), ``terminal`` the child's last word if it sent one,
    ``failure`` why the exchange failed if the controller knows."""
    usage = TokenCounts(**{k: ledger.usage.get(k, 0) for k in TokenCounts.__struct_fields__})
    spend = SlotSpend(requests=ledger.requests, admitted=ledger.admitted,
                      settled_units=ledger.settled_units, retained_units=ledger.retained_units,
                      usage=usage, usage_known=ledger.usage_known)
    stops: list[Code] = []
    claimed: Code | None = None
    if terminal is not None:
        integrity = terminal.status is TerminalStatus.INTEGRITY_STOP
        # Never None on an integrity stop (child_code names one: child_code_forbidden).
        claimed = child_code(terminal.code, integrity=integrity)
        if claimed is not None and (integrity or (
                terminal.status is TerminalStatus.REFUSED and claimed not in CONTINUABLE_CODES)):
            stops.append(claimed)  # a guard policy violation
    status: SlotStatus
    code: Code | None = None
    outcome: Outcome | None = None
    correct: bool | None = None
    answer_sha: str | None = None
    answered = terminal is not None and terminal.status is TerminalStatus.ANSWERED
    if ledger.admitted == 0:
        status = SlotStatus.UNADMITTED
        if answered:
            # An answer that no admitted request produced did not come through the guard.
            stops.append(Code.LOOKUP_UNGUARDED_DISPATCH)
            code = Code.LOOKUP_UNGUARDED_DISPATCH
        else:
            code = claimed or failure or Code.LOOKUP_WORKER_LOST
    elif terminal is not None and answered and ledger.terminal_code is None:
        status = SlotStatus.COMPLETED
        result = score(probe, terminal.answer)
        outcome, correct = result.outcome, result.correct
        answer_sha = sha256_hex(terminal.answer.encode())
    elif terminal is not None and terminal.status is TerminalStatus.FAILED \
            and ledger.terminal_code is None:
        status = SlotStatus.INVALID
        code = claimed or Code.LOOKUP_EMPTY_FINAL_OUTPUT
    else:
        status = SlotStatus.INCOMPLETE
        code = ledger.terminal_code or claimed or failure or Code.LOOKUP_WORKER_LOST
    meter = terminal.meter if terminal is not None else None
    abort = meter.abort_cause if meter is not None else None
    receipt = Receipt(
        slot=planned.slot, role=planned.role, arm=planned.arm, trace_id=planned.trace_id,
        probe_id=planned.probe_id, category=planned.category, repeat=planned.repeat,
        status=status, code=code.value if code is not None else None,
        outcome=outcome, correct=correct, availability=evidence.availability,
        excluded=evidence.excluded if status is SlotStatus.COMPLETED else None,
        spend=spend, lookup_calls=meter.calls if meter else 0,
        answer_sha256=answer_sha, checkpoint_sha256=evidence.checkpoint_sha256,
        elapsed_ms=elapsed_ms, lookup_bytes=meter.bytes if meter else 0,
        meter_abort=abort.value if abort is not None and abort in METER_ABORTS else None,
    )
    return Verdict(receipt, tuple(stops))


def refused_receipt(planned: PlannedSlot, code: Code) -> Receipt:
    """A slot visited but never launched: inventory-infeasible (``skipped``), or refused
    before any hold because its checkpoint could not be prepared or admission is closed
    (a sticky stop, the cap, the run deadline): ``unadmitted`` with that code."""
    return Receipt(
        slot=planned.slot, role=planned.role, arm=planned.arm, trace_id=planned.trace_id,
        probe_id=planned.probe_id, category=planned.category, repeat=planned.repeat,
        status=SlotStatus.SKIPPED if code is Code.INVENTORY_INFEASIBLE else SlotStatus.UNADMITTED,
        code=code.value,
    )


def slot_end(ledger: SlotLedger, receipt: Receipt) -> SlotEnd | None:
    """How the stop policy sees a slot (None: never admitted): from the controller's
    ledger and the receipt's status, never from codes the child chose."""
    if ledger.admitted == 0:
        return None
    if receipt.status is SlotStatus.COMPLETED:
        return SlotEnd.COMPLETED
    if receipt.status is SlotStatus.INVALID:
        return SlotEnd.INVALID
    if ledger.lost:
        return SlotEnd.LOST
    if ledger.own_abort:
        return SlotEnd.OWN_ABORT
    return SlotEnd.CAPACITY
