"""Judging a probe slot (``controller.pilot.judging``): facts in, a receipt and the stops it
implies out. Pure: no journal, no run, no clock; the ledger it reads is left as it was."""

from __future__ import annotations

import copy

import pytest

from efold.controller.campaigns.stops import SlotEnd
from efold.controller.pilot.evidence import Evidence
from efold.controller.pilot.judging import Verdict, judge_slot, refused_receipt, slot_end
from efold.corpus import load_suite
from efold.corpus.model import Availability, Outcome, Probe
from efold.digests import sha256_hex
from efold.errors import Code
from efold.guard.ledger import SlotLedger
from efold.ipc.messages import MeterReading, Terminal, TerminalStatus
from efold.protocol.records import Exclusion, PlannedSlot, SlotStatus

EVIDENCE = Evidence(Availability.PRESENT, Exclusion.STORE_DEGRADED, "c" * 64)


@pytest.fixture(scope="module")
def probe() -> Probe:
    """A tool-identifier probe of the bundled suite: its expected value scores correct."""
    return next(p for p in load_suite("original")[0].probes.probes
                if p.category.value == "tool_identifier")


def _planned(probe: Probe) -> PlannedSlot:
    return PlannedSlot(slot="r1.native.t.p", role="native", arm="native", suite="original",
                       trace_id="t", probe_id=probe.id, category=probe.category.value,
                       repeat=1, eligible=True, checkpoint="r1.native.t")


def _terminal(status: TerminalStatus, code: Code | None = None, answer: str = "") -> Terminal:
    return Terminal(status=status, code=code, answer=answer,
                    meter=MeterReading(calls=2, bytes=100), witness="d" * 64)


def _admitted(**facts: object) -> SlotLedger:
    ledger = SlotLedger("r1.native.t.p", requests=1, admitted=1)
    for name, value in facts.items():
        setattr(ledger, name, value)
    return ledger


def _judge(probe: Probe, ledger: SlotLedger, terminal: Terminal | None,
           failure: Code | None = None) -> Verdict:
    return judge_slot(_planned(probe), probe, ledger, terminal=terminal, failure=failure,
                      evidence=EVIDENCE, elapsed_ms=7)


def test_a_completed_answer_is_scored_and_stops_nothing(probe: Probe) -> None:
    answer = f"It is {probe.expected[0]}."
    ledger = _admitted(settled_units=120, usage={"input": 900, "output": 12})
    verdict = _judge(probe, ledger, _terminal(TerminalStatus.ANSWERED, answer=answer))
    r = verdict.receipt
    assert verdict.stops == ()
    assert r.status is SlotStatus.COMPLETED and r.code is None
    assert r.outcome is Outcome.CORRECT and r.correct is True
    assert r.answer_sha256 == sha256_hex(answer.encode())
    assert r.excluded is Exclusion.STORE_DEGRADED  # the evidence, on a completed slot
    assert r.availability is Availability.PRESENT and r.checkpoint_sha256 == "c" * 64
    assert r.spend.settled_units == 120 and r.spend.usage.input == 900
    assert r.lookup_calls == 2 and r.elapsed_ms == 7
    assert slot_end(ledger, r) is SlotEnd.COMPLETED


def test_a_request_lost_after_send_is_incomplete_with_the_ledgers_code(probe: Probe) -> None:
    ledger = _admitted(retained_units=500, lost=True, terminal_code=Code.LOOKUP_STREAM_LOST)
    verdict = _judge(probe, ledger, _terminal(TerminalStatus.LOST, Code.LOOKUP_STREAM_LOST))
    r = verdict.receipt
    assert verdict.stops == ()
    assert r.status is SlotStatus.INCOMPLETE and r.code == "lookup_stream_lost"
    assert r.excluded is None and r.outcome is None and r.answer_sha256 is None
    assert r.spend.retained_units == 500
    assert slot_end(ledger, r) is SlotEnd.LOST


def test_an_integrity_stop_claimed_by_the_child_is_a_stop_of_the_run(probe: Probe) -> None:
    ledger = _admitted(terminal_code=Code.LOOKUP_INVALID_USAGE)
    verdict = _judge(probe, ledger,
                     _terminal(TerminalStatus.INTEGRITY_STOP, Code.LOOKUP_INVALID_USAGE))
    assert verdict.stops == (Code.LOOKUP_INVALID_USAGE,)
    assert verdict.receipt.status is SlotStatus.INCOMPLETE
    assert verdict.receipt.code == "lookup_invalid_usage"


def test_an_integrity_stop_without_an_allowed_code_stops_as_forbidden(probe: Probe) -> None:
    for code in (None, Code.LOOKUP_STOPPED, Code.RUN_DEADLINE):
        verdict = _judge(probe, _admitted(), _terminal(TerminalStatus.INTEGRITY_STOP, code))
        assert verdict.stops == (Code.CHILD_CODE_FORBIDDEN,)
        assert verdict.receipt.code == "child_code_forbidden"


def test_a_refusal_stops_the_run_only_when_its_code_may_not_continue(probe: Probe) -> None:
    unadmitted = SlotLedger("r1.native.t.p", requests=1)
    policy = _judge(probe, unadmitted,
                    _terminal(TerminalStatus.REFUSED, Code.LOOKUP_TOOLS_FORBIDDEN))
    assert policy.stops == (Code.LOOKUP_TOOLS_FORBIDDEN,)  # with no hold at all
    assert policy.receipt.status is SlotStatus.UNADMITTED
    assert policy.receipt.code == "lookup_tools_forbidden"
    cap = _judge(probe, unadmitted, _terminal(TerminalStatus.REFUSED, Code.NOT_ADMITTED_CAP))
    assert cap.stops == ()
    assert cap.receipt.status is SlotStatus.UNADMITTED and cap.receipt.code == "not_admitted_cap"
    assert slot_end(unadmitted, cap.receipt) is None  # invisible to the stop policy


def test_a_worker_lost_without_a_terminal(probe: Probe) -> None:
    before = _judge(probe, SlotLedger("r1.native.t.p"), None)
    assert before.stops == ()
    assert before.receipt.status is SlotStatus.UNADMITTED
    assert before.receipt.code == "lookup_worker_lost" and before.receipt.lookup_calls == 0
    timed_out = _judge(probe, _admitted(), None, failure=Code.WORKER_TIMEOUT)
    assert timed_out.stops == ()
    assert timed_out.receipt.status is SlotStatus.INCOMPLETE
    assert timed_out.receipt.code == "worker_timeout"


def test_an_answer_no_admitted_request_produced_is_an_unguarded_dispatch(probe: Probe) -> None:
    verdict = _judge(probe, SlotLedger("r1.native.t.p"),
                     _terminal(TerminalStatus.ANSWERED, answer=probe.expected[0]))
    assert verdict.stops == (Code.LOOKUP_UNGUARDED_DISPATCH,)
    assert verdict.receipt.status is SlotStatus.UNADMITTED
    assert verdict.receipt.code == "lookup_unguarded_dispatch"
    assert verdict.receipt.outcome is None  # never scored


def test_a_failed_answer_is_invalid(probe: Probe) -> None:
    ledger = _admitted()
    verdict = _judge(probe, ledger, _terminal(TerminalStatus.FAILED))
    assert verdict.stops == ()
    assert verdict.receipt.status is SlotStatus.INVALID
    assert verdict.receipt.code == "lookup_empty_final_output"
    assert slot_end(ledger, verdict.receipt) is SlotEnd.INVALID


def test_judging_is_pure(probe: Probe) -> None:
    ledger = _admitted(terminal_code=Code.LOOKUP_INVALID_USAGE, usage={"input": 3})
    terminal = _terminal(TerminalStatus.INTEGRITY_STOP, Code.LOOKUP_INVALID_USAGE)
    kept = copy.deepcopy(ledger)
    assert _judge(probe, ledger, terminal) == _judge(probe, ledger, terminal)
    assert ledger == kept


def test_a_slot_refused_before_launch_is_skipped_only_when_infeasible(probe: Probe) -> None:
    planned = _planned(probe)
    skipped = refused_receipt(planned, Code.INVENTORY_INFEASIBLE)
    assert skipped.status is SlotStatus.SKIPPED and skipped.code == "inventory_infeasible"
    stopped = refused_receipt(planned, Code.LOOKUP_STOPPED)
    assert stopped.status is SlotStatus.UNADMITTED and stopped.code == "lookup_stopped"


def _pressured(probe: Probe, *, provider: bool, required: bool = True,
               first_input: int | None = None, closed: bool = True) -> Verdict:
    """A completed native slot whose checkpoint's estimate met the 150,000 floor."""
    from efold.controller.pilot.evidence import PressureCheck

    evidence = Evidence(Availability.PRESENT, None, "c" * 64, pressure=PressureCheck(
        estimate=222_000, threshold=150_000, provider=provider, required=required))
    ledger = _admitted(settled_units=120, usage={"input": first_input or 0, "output": 12},
                       first_input=first_input, first_closed=closed)
    return judge_slot(_planned(probe), probe, ledger, evidence=evidence, elapsed_ms=7,
                      terminal=_terminal(TerminalStatus.ANSWERED,
                                         answer=f"It is {probe.expected[0]}."), failure=None)


@pytest.mark.parametrize(("first_input", "excluded"), [
    (182_000, None),  # the provider's count meets the floor
    (150_000, None),  # equality meets it
    (149_999, Exclusion.PRESSURE_UNVERIFIED),  # the estimate said 222,000: the count decides
    (None, Exclusion.PRESSURE_UNVERIFIED),  # no count reported: never assumed met
])
def test_on_a_counted_route_the_providers_first_input_decides_pressure(
        probe: Probe, first_input: int | None, excluded: Exclusion | None) -> None:
    r = _pressured(probe, provider=True, first_input=first_input).receipt
    assert r.status is SlotStatus.COMPLETED and r.excluded is excluded
    assert r.pressure_estimate_tokens == 222_000  # both, side by side
    assert r.pressure_measured_tokens == first_input


def test_on_the_faux_route_the_estimate_stays_and_no_count_is_kept(probe: Probe) -> None:
    r = _pressured(probe, provider=False, first_input=10).receipt
    assert r.excluded is None and r.pressure_measured_tokens is None
    assert r.pressure_estimate_tokens == 222_000


def test_where_the_suite_needs_no_pressure_a_low_count_is_only_recorded(probe: Probe) -> None:
    r = _pressured(probe, provider=True, required=False, first_input=9_000).receipt
    assert r.excluded is None and r.pressure_measured_tokens == 9_000

