"""Judging a visited slot: its receipt, and the stops it implies, from facts alone.

Pure: no I/O, no clock, no change to the run. ``controller.pilot.slots`` takes the stops a
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

from efold.controller.campaigns.stops import SlotEnd
from efold.controller.pilot.evidence import Evidence
from efold.corpus import score
from efold.corpus.model import Outcome, Probe
from efold.digests import sha256_hex
from efold.errors import Code
from efold.guard.ledger import SlotLedger
from efold.guard.permits import CONTINUABLE_CODES, child_code
from efold.guard.wire.failure import HTTP_FAILURE_CODES, kinds_for
from efold.ipc.messages import Terminal, TerminalStatus
from efold.protocol.records import (
    BoundaryRecord,
    Exclusion,
    HttpRecord,
    JudgeRecord,
    PlannedSlot,
    Receipt,
    SlotSpend,
    SlotStatus,
    TokenCounts,
)
from efold.worker.judge import SCORE_MAX, SCORE_MIN, passes

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
               elapsed_ms: int, judge: JudgeFacts | None = None,
               boundary: BoundaryRecord | None = None) -> Verdict:
    """The receipt of a launched probe slot and the stops it implies. ``ledger`` is the
    slot's own (the controller's), ``terminal`` the child's last word if it sent one,
    ``failure`` why the exchange failed if the controller knows. ``boundary``: a
    boundary slot's judgement (``controller.pilot.boundary_slots``), given once its child has
    ended: an answered slot is scored by it, never by its answer (every oracle passed:
    ``correct``; one failed: ``violation``; only not-applicable verdicts: ``abstained``),
    and one it could not judge is ``invalid`` with its code."""
    spend = _spend(ledger)
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
    elif terminal is not None and answered and ledger.terminal_code is None \
            and boundary is not None and boundary.code is not None:
        status = SlotStatus.INVALID
        code = Code(boundary.code)
    elif terminal is not None and answered and ledger.terminal_code is None:
        status = SlotStatus.COMPLETED
        if boundary is not None:
            outcome = (Outcome.CORRECT if boundary.passed else Outcome.ABSTAINED
                       if boundary.passed is None else Outcome.VIOLATION)
            correct = boundary.passed is True
        else:
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
    excluded = evidence.excluded if status is SlotStatus.COMPLETED else None
    pressure = evidence.pressure
    measured = ledger.first_input if pressure is not None and pressure.provider else None
    if status is SlotStatus.COMPLETED and excluded is None and pressure is not None \
            and pressure.provider and pressure.required \
            and (measured is None or measured < pressure.threshold):
        # The provider's own count of the first request's input (round 1: the whole
        # checkpoint) is below the floor, or it gave none: the sample is not valid.
        excluded = Exclusion.PRESSURE_UNVERIFIED
    receipt = Receipt(
        slot=planned.slot, role=planned.role, arm=planned.arm, trace_id=planned.trace_id,
        probe_id=planned.probe_id, category=planned.category, repeat=planned.repeat,
        status=status, code=code.value if code is not None else None,
        outcome=outcome, correct=correct, availability=evidence.availability,
        excluded=excluded,
        spend=spend, lookup_calls=meter.calls if meter else 0,
        answer_sha256=answer_sha, checkpoint_sha256=evidence.checkpoint_sha256,
        elapsed_ms=elapsed_ms, lookup_bytes=meter.bytes if meter else 0,
        meter_abort=abort.value if abort is not None and abort in METER_ABORTS else None,
        # The size of what the slot read, whatever its status: a fact of the checkpoint.
        checkpoint_tokens=evidence.checkpoint_tokens, checkpoint_bytes=evidence.checkpoint_bytes,
        transcript_tokens=evidence.transcript_tokens, transcript_bytes=evidence.transcript_bytes,
        judge=_judge_record(judge, terminal, status, stops), boundary=boundary,
        http=_http_record(terminal, code),
        pressure_estimate_tokens=None if pressure is None else pressure.estimate,
        pressure_measured_tokens=measured, ledger=evidence.ledger,
    )
    return Verdict(receipt, tuple(stops))


def _http_record(terminal: Terminal | None, code: Code | None) -> HttpRecord | None:
    """The status and kind the child claims for the non-2xx answer that ended the slot,
    kept only when the slot's own code says one did and the kind is one the guard's
    closed set allows for that status; the excerpt is never kept here."""
    http = terminal.http if terminal is not None else None
    if http is None or code not in HTTP_FAILURE_CODES:
        return None
    if http.kind not in {kind.value for kind in kinds_for(http.status)}:
        return None
    return HttpRecord(status=http.status, kind=http.kind)


def _spend(ledger: SlotLedger) -> SlotSpend:
    usage = TokenCounts(**{k: ledger.usage.get(k, 0) for k in TokenCounts.__struct_fields__})
    return SlotSpend(requests=ledger.requests, admitted=ledger.admitted,
                     settled_units=ledger.settled_units, retained_units=ledger.retained_units,
                     usage=usage, usage_known=ledger.usage_known)


@dataclass(frozen=True)
class JudgeFacts:
    """What the controller knows of a slot's judge (19-C): the judge's own ledger
    (``<slot>#judge``) and the registered rubric and threshold."""

    ledger: SlotLedger
    rubric: tuple[str, ...]
    pass_threshold: int


def _judge_record(judge: JudgeFacts | None, terminal: Terminal | None, status: SlotStatus,
                  stops: list[Code]) -> JudgeRecord | None:
    """The judge's reading of the slot (19-C), from its own ledger and the child's
    claim: scores only for a completed slot whose one judge request was admitted and
    settled, exactly the registered rubric's dimensions, each 0-5; pass/fail is decided
    here from those scores and the registered threshold (``worker.judge.passes``), never
    taken from the claim. Else the code of why not. Scores claimed without an admitted
    judge request did not come through the guard: a sticky stop. None: no judge, or it
    was never asked (no answer)."""
    if judge is None:
        return None
    ledger = judge.ledger
    claim = terminal.judge if terminal is not None else None
    if ledger.requests == 0 and claim is None:
        return None
    spend = _spend(ledger)
    if claim is not None and claim.scores and ledger.admitted == 0:
        stops.append(Code.LOOKUP_UNGUARDED_DISPATCH)
        return JudgeRecord(code=Code.LOOKUP_UNGUARDED_DISPATCH.value, spend=spend)
    if (status is SlotStatus.COMPLETED and claim is not None and claim.code is None
            and ledger.admitted == 1 and ledger.terminal_code is None
            and sorted(claim.scores) == sorted(judge.rubric)
            and all(SCORE_MIN <= v <= SCORE_MAX for v in claim.scores.values())):
        scores = {dim: claim.scores[dim] for dim in judge.rubric}
        return JudgeRecord(scores=scores, passed=passes(scores, judge.pass_threshold),
                           spend=spend)
    code = ledger.terminal_code
    if code is None and claim is not None and claim.code is not None:
        code = (claim.code if claim.code is Code.JUDGE_REPLY_INVALID
                else child_code(claim.code, integrity=False))
    return JudgeRecord(code=(code or Code.JUDGE_REPLY_INVALID).value, spend=spend)


def refused_receipt(planned: PlannedSlot, code: Code) -> Receipt:
    """A slot visited but never launched: inventory-infeasible (``skipped``), or refused
    before any hold because its checkpoint could not be prepared or admission is closed
    (a sticky stop, the cap, the run deadline): ``unadmitted`` with that code."""
    return Receipt(
        slot=planned.slot, role=planned.role, arm=planned.arm, trace_id=planned.trace_id,
        probe_id=planned.probe_id, category=planned.category, repeat=planned.repeat,
        status=(SlotStatus.SKIPPED
                if code in (Code.INVENTORY_INFEASIBLE, Code.INVENTORY_OPAQUE_READER)
                else SlotStatus.UNADMITTED),
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
