"""The judge's part of a receipt (19-C, ``controller.pilot.judging``): scores only from a
completed slot whose one judge request the controller's own ledger admitted and
settled; otherwise the code of why not; a claim of scores with no admitted judge
request is an unguarded dispatch (a sticky stop)."""

from __future__ import annotations

import pytest

from efold.controller.pilot.evidence import Evidence
from efold.controller.pilot.judging import JudgeFacts, judge_slot
from efold.corpus import load_suite
from efold.corpus.model import Availability, Probe
from efold.errors import Code
from efold.guard.ledger import SlotLedger
from efold.ipc.messages import JudgeReading, MeterReading, Terminal, TerminalStatus
from efold.protocol.records import JudgeRecord, PlannedSlot, SlotStatus

EVIDENCE = Evidence(Availability.PRESENT, None, "c" * 64)
SCORES = {"accuracy": 5, "completeness": 4}


@pytest.fixture(scope="module")
def probe() -> Probe:
    return next(p for p in load_suite("original")[0].probes.probes
                if p.category.value == "tool_identifier")


def verdict(probe: Probe, judge: SlotLedger | None, claim: JudgeReading | None,
            status: TerminalStatus = TerminalStatus.ANSWERED):  # type: ignore[no-untyped-def]
    planned = PlannedSlot(slot="s1", role="native", arm="native", suite="original",
                          trace_id="t", probe_id=probe.id, category=probe.category.value,
                          repeat=1, eligible=True, checkpoint="k")
    terminal = Terminal(status=status, code=None if status is TerminalStatus.ANSWERED
                        else Code.LOOKUP_EMPTY_FINAL_OUTPUT, answer=probe.expected[0],
                        meter=MeterReading(calls=0, bytes=0), witness="d" * 64, judge=claim)
    reader = SlotLedger("s1", requests=1, admitted=1, settled_units=10)
    facts = None if judge is None else JudgeFacts(judge, tuple(SCORES), 3)
    return judge_slot(planned, probe, reader, terminal=terminal, failure=None,
                      evidence=EVIDENCE, elapsed_ms=1, judge=facts)


def test_an_admitted_settled_judge_request_gives_scores_and_its_own_spend(probe: Probe) -> None:
    ledger = SlotLedger("s1#judge", requests=1, admitted=1, settled_units=33)
    v = verdict(probe, ledger, JudgeReading(scores=SCORES, passed=True))
    assert v.stops == () and v.receipt.status is SlotStatus.COMPLETED
    assert v.receipt.judge is not None
    assert (v.receipt.judge.scores, v.receipt.judge.passed) == (SCORES, True)
    assert v.receipt.judge.spend.settled_units == 33
    assert v.receipt.spend.settled_units == 10  # the reader's line stays the reader's


@pytest.mark.parametrize(("scores", "passed"), [({"accuracy": 3, "completeness": 3}, True),
                                                ({"accuracy": 3, "completeness": 2}, False)])
def test_pass_is_decided_by_the_controller_from_the_scores(probe: Probe, scores: dict[str, int],
                                                           passed: bool) -> None:
    ledger = SlotLedger("s1#judge", requests=1, admitted=1, settled_units=1)
    # The child's pass/fail claim is ignored: the registered threshold (3) decides.
    v = verdict(probe, ledger, JudgeReading(scores=scores, passed=not passed))
    assert v.receipt.judge is not None and v.receipt.judge.passed is passed


def test_scores_without_an_admitted_judge_request_are_an_unguarded_dispatch(
        probe: Probe) -> None:
    v = verdict(probe, SlotLedger("s1#judge"), JudgeReading(scores=SCORES, passed=True))
    assert v.stops == (Code.LOOKUP_UNGUARDED_DISPATCH,)
    assert v.receipt.judge == JudgeRecord(code=Code.LOOKUP_UNGUARDED_DISPATCH.value)


@pytest.mark.parametrize(("ledger", "claim", "code"), [
    (SlotLedger("s1#judge", requests=1, admitted=1, settled_units=5),
     JudgeReading(code=Code.JUDGE_REPLY_INVALID), Code.JUDGE_REPLY_INVALID),
    (SlotLedger("s1#judge", requests=1, capacity_refused=True,
                terminal_code=Code.NOT_ADMITTED_CAP),
     JudgeReading(code=Code.NOT_ADMITTED_CAP), Code.NOT_ADMITTED_CAP),
    (SlotLedger("s1#judge", requests=1, admitted=1, lost=True, retained_units=99,
                terminal_code=Code.LOOKUP_STREAM_LOST),
     JudgeReading(scores=SCORES, passed=True), Code.LOOKUP_STREAM_LOST),  # the ledger wins
    (SlotLedger("s1#judge", requests=1, admitted=1, settled_units=5),
     JudgeReading(scores={"accuracy": 6, "completeness": 5}, passed=True),
     Code.JUDGE_REPLY_INVALID),
    (SlotLedger("s1#judge", requests=1, admitted=1, settled_units=5),  # not the rubric
     JudgeReading(scores={"accuracy": 5}, passed=True), Code.JUDGE_REPLY_INVALID),
    (SlotLedger("s1#judge", requests=1, admitted=1, settled_units=5),
     JudgeReading(scores={**SCORES, "tone": 5}, passed=True), Code.JUDGE_REPLY_INVALID),
])
def test_anything_else_is_the_code_of_why_not(probe: Probe, ledger: SlotLedger,
                                              claim: JudgeReading, code: Code) -> None:
    v = verdict(probe, ledger, claim)
    assert v.receipt.judge is not None
    assert (v.receipt.judge.scores, v.receipt.judge.passed) == ({}, None)
    assert v.receipt.judge.code == code.value


def test_no_judge_or_no_answer_leaves_no_judge_record(probe: Probe) -> None:
    assert verdict(probe, None, None).receipt.judge is None
    assert verdict(probe, SlotLedger("s1#judge"), None,
                   TerminalStatus.FAILED).receipt.judge is None
