"""Permit rules that survived ``scripts/mutate.py`` (docs/reliability.md, "Tests that
can fail"): each test below fails on a mutant the permit suites let through, at the
exact boundary of its rule."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from efold.errors import Code, EfoldError
from efold.guard.ledger import PermitLedger, SettleKind
from efold.guard.permits import (
    CHILD_REPORTABLE_CODES,
    CONTINUABLE_CODES,
    USAGE_COUNT_LIMIT,
    Permit,
    Refusal,
    Settlement,
    UsageRecord,
    assert_real_source,
    child_code,
)
from efold.guard.testing import TEST_ONLY_BRAND, MemoryHoldStore, TestOnlyPermitSource
from efold.guard.usage import usage_count

RMAX = 1_000
DIGEST = "a" * 64


def _price(usage: Mapping[str, int], tier: str | None) -> int:
    return usage.get("input", 0) + usage.get("output", 0)


def _ledger(cap: int = 10 * RMAX, max_requests: int = 10) -> PermitLedger:
    return PermitLedger(MemoryHoldStore(), epoch=1, cap_units=cap, rmax_units=RMAX,
                        max_requests=max_requests, price=_price)


# -- which codes a child may claim ----------------------------------------------------------

def test_a_continuable_code_is_forbidden_only_as_an_integrity_claim() -> None:
    for code in sorted(CONTINUABLE_CODES):
        assert child_code(code, integrity=False) is code
        assert child_code(code, integrity=True) is Code.CHILD_CODE_FORBIDDEN


def test_an_integrity_code_passes_as_an_integrity_claim() -> None:
    integrity = sorted(CHILD_REPORTABLE_CODES - CONTINUABLE_CODES)
    assert Code.LOOKUP_BODY_MISMATCH in integrity
    for code in integrity:
        assert child_code(code, integrity=True) is code
        assert child_code(code, integrity=False) is code


def test_a_code_off_the_allowlist_or_a_missing_integrity_code_is_forbidden() -> None:
    assert Code.UNRECONCILED_CONTAINMENT not in CHILD_REPORTABLE_CODES
    for integrity in (False, True):
        assert child_code(Code.UNRECONCILED_CONTAINMENT,
                          integrity=integrity) is Code.CHILD_CODE_FORBIDDEN
    assert child_code(None, integrity=True) is Code.CHILD_CODE_FORBIDDEN
    assert child_code(None, integrity=False) is None


# -- usage: absent is never zero ------------------------------------------------------------

def test_usage_counts_keep_a_reported_zero_and_leave_out_what_is_absent() -> None:
    assert UsageRecord(input=10, output=5).counts() == {"input": 10, "output": 5}
    assert UsageRecord(input=10, output=0, cache_read=0).counts() == {
        "input": 10, "output": 0, "cache_read": 0}


def test_a_usage_count_is_below_two_to_the_53() -> None:
    assert USAGE_COUNT_LIMIT == 2**53
    assert usage_count(2**53 - 1) == 2**53 - 1
    assert usage_count(2**53) is None
    assert usage_count(0) == 0 and usage_count(-1) is None


# -- the real-source check ------------------------------------------------------------------

class _Source:
    """A permit source by shape (the protocol's four methods), not test-only."""

    def admit(self, request: object) -> Permit | Refusal:
        return Refusal(code=Code.NOT_ADMITTED_CAP)

    def consume(self, permit: Permit, body_digest: str) -> None:
        return None

    def settle(self, permit: Permit, outcome: Settlement, usage: UsageRecord | None,
               tier: str | None) -> None:
        return None

    def stop(self, code: Code) -> None:
        return None


class _FlaggedSource(_Source):
    test_only = True


class _BrandedSource(_Source):
    brand = TEST_ONLY_BRAND


def _refusal(source: object) -> Code | None:
    try:
        assert_real_source(source)
    except EfoldError as exc:
        return exc.code
    return None


def test_only_a_real_source_passes() -> None:
    assert _refusal(_Source()) is None
    assert _refusal(object()) is Code.LOOKUP_PERMIT_INVALID
    assert _refusal(_FlaggedSource()) is Code.LOOKUP_TEST_ONLY_SOURCE  # flag alone
    assert _refusal(_BrandedSource()) is Code.LOOKUP_TEST_ONLY_SOURCE  # brand alone
    assert _refusal(TestOnlyPermitSource(10 * RMAX)) is Code.LOOKUP_TEST_ONLY_SOURCE


# -- the ledger: sticky stops and request counts ----------------------------------------------

def test_the_first_stop_stays_and_only_unreconciled_containment_outranks_it() -> None:
    ledger = _ledger()
    ledger.stop(Code.LOOKUP_BODY_MISMATCH)
    ledger.stop(Code.LOOKUP_STOP_FAILED)
    assert ledger.sticky_code is Code.LOOKUP_BODY_MISMATCH
    ledger.stop(Code.UNRECONCILED_CONTAINMENT)
    assert ledger.sticky_code is Code.UNRECONCILED_CONTAINMENT
    ledger.stop(Code.LOOKUP_BODY_MISMATCH)
    assert ledger.sticky_code is Code.UNRECONCILED_CONTAINMENT


def test_every_admit_call_counts_as_one_request_admitted_or_not() -> None:
    ledger = _ledger(cap=RMAX, max_requests=5)
    assert ledger.ledger("s1").requests == 0
    first = ledger.admit(slot="s1", request_id="r1", round=1, payload_digest=DIGEST,
                         rmax_units=RMAX)
    assert isinstance(first, Permit)
    assert ledger.ledger("s1").requests == 1
    second = ledger.admit(slot="s1", request_id="r2", round=2, payload_digest=DIGEST,
                          rmax_units=RMAX)
    assert second == Refusal(code=Code.NOT_ADMITTED_CAP)  # T + Rmax = 2 Rmax > C
    assert (ledger.ledger("s1").requests, ledger.ledger("s1").admitted) == (2, 1)


def test_terms_are_refused_after_a_slots_first_request() -> None:
    ledger = _ledger()
    terms = ledger.terms("s1")
    ledger.set_terms("s1", terms)  # before any request: allowed
    ledger.admit(slot="s1", request_id="r1", round=1, payload_digest=DIGEST, rmax_units=RMAX)
    with pytest.raises(EfoldError) as raised:
        ledger.set_terms("s1", terms)
    assert raised.value.code is Code.LOOKUP_ROUTE_MISMATCH


# -- closing a permit: what the sender claims is checked ------------------------------------

def _admitted(ledger: PermitLedger, *, consume: bool = True) -> str:
    permit = ledger.admit(slot="s1", request_id="r1", round=1, payload_digest=DIGEST,
                          rmax_units=RMAX)
    assert isinstance(permit, Permit)
    if consume:
        ledger.consume(slot="s1", permit_id=permit.permit_id, body_digest=DIGEST)
    return permit.permit_id


def _store(ledger: PermitLedger) -> MemoryHoldStore:
    store = ledger._store
    assert isinstance(store, MemoryHoldStore)
    return store


def test_a_known_tier_is_recorded_and_an_unknown_one_redacted() -> None:
    for tier, recorded in (("flex", "flex"), ("no-such-tier", None), (None, None)):
        ledger = _ledger()
        permit_id = _admitted(ledger)
        assert ledger.settle(slot="s1", permit_id=permit_id, kind=SettleKind.SETTLED,
                             code=None, usage={"input": 7, "output": 3}, tier=tier) is None
        record = _store(ledger).record(permit_id)
        assert (record.state, record.settled_units, record.tier) == ("settled", 10, recorded)


def test_an_integrity_claim_stops_the_run_with_its_code() -> None:
    ledger = _ledger()
    permit_id = _admitted(ledger)
    code = ledger.settle(slot="s1", permit_id=permit_id, kind=SettleKind.INTEGRITY_STOP,
                         code=Code.LOOKUP_USAGE_OUTPUT_ABOVE_MAX, usage=None, tier=None)
    assert code is Code.LOOKUP_USAGE_OUTPUT_ABOVE_MAX
    assert ledger.sticky_code is Code.LOOKUP_USAGE_OUTPUT_ABOVE_MAX
    assert _store(ledger).record(permit_id).state == "integrity_stop"
    assert ledger.total_units == RMAX  # the hold is retained


def test_a_loss_claiming_a_forbidden_code_is_an_integrity_stop() -> None:
    ledger = _ledger()
    permit_id = _admitted(ledger)
    code = ledger.settle(slot="s1", permit_id=permit_id, kind=SettleKind.LOST,
                         code=Code.UNRECONCILED_CONTAINMENT, usage=None, tier=None)
    assert code is Code.CHILD_CODE_FORBIDDEN
    assert ledger.sticky_code is Code.CHILD_CODE_FORBIDDEN


def test_a_plain_loss_is_no_stop() -> None:
    ledger = _ledger()
    permit_id = _admitted(ledger)
    assert ledger.settle(slot="s1", permit_id=permit_id, kind=SettleKind.LOST,
                         code=Code.LOOKUP_STREAM_LOST, usage={"output": 3}, tier=None) is None
    assert ledger.sticky_code is None
    record = _store(ledger).record(permit_id)
    assert (record.state, record.code, record.partial_units) == ("lost", "lookup_stream_lost", 3)
    assert ledger.ledger("s1").terminal_code is Code.LOOKUP_STREAM_LOST


def test_a_settlement_needs_at_least_one_input_token_a_loss_does_not() -> None:
    for inp, stopped in ((0, True), (1, False)):
        ledger = _ledger()
        permit_id = _admitted(ledger)
        code = ledger.settle(slot="s1", permit_id=permit_id, kind=SettleKind.SETTLED,
                             code=None, usage={"input": inp, "output": 5}, tier=None)
        assert code is (Code.LOOKUP_INVALID_USAGE if stopped else None)
    ledger = _ledger()
    permit_id = _admitted(ledger)
    assert ledger.settle(slot="s1", permit_id=permit_id, kind=SettleKind.LOST,
                         code=Code.LOOKUP_STREAM_LOST, usage={"input": 0, "output": 5},
                         tier=None) is None


def test_settled_without_usage_is_invalid_usage_never_zero() -> None:
    ledger = _ledger()
    permit_id = _admitted(ledger)
    assert ledger.settle(slot="s1", permit_id=permit_id, kind=SettleKind.SETTLED, code=None,
                         usage=None, tier=None) is Code.LOOKUP_INVALID_USAGE
    assert ledger.total_units == RMAX  # the hold is retained, nothing priced at zero
    assert ledger.ledger("s1").usage_known is False


def test_a_cost_claim_must_equal_the_ledgers_own_price() -> None:
    for claim, code in ((10, None), (11, Code.LOOKUP_COST_MISMATCH),
                        (9, Code.LOOKUP_COST_MISMATCH)):
        ledger = _ledger()
        permit_id = _admitted(ledger)
        assert ledger.settle(slot="s1", permit_id=permit_id, kind=SettleKind.SETTLED,
                             code=None, usage={"input": 7, "output": 3}, tier=None,
                             cost_claim=claim) is code


def test_the_first_integrity_code_wins_over_a_cost_above_the_hold() -> None:
    ledger = _ledger()
    permit_id = _admitted(ledger)
    code = ledger.settle(slot="s1", permit_id=permit_id, kind=SettleKind.INTEGRITY_STOP,
                         code=Code.LOOKUP_BODY_MISMATCH, usage={"input": RMAX, "output": 1},
                         tier=None)
    assert code is Code.LOOKUP_BODY_MISMATCH
    record = _store(ledger).record(permit_id)
    assert (record.partial_units, record.code) == (RMAX + 1, "lookup_body_mismatch")
    assert ledger.total_units == RMAX + 1  # the known partial, above the hold, is charged


def test_a_slots_usage_sums_checked_usage_and_knows_when_it_is_missing() -> None:
    ledger = _ledger()
    for request in ("r1", "r2"):
        permit = ledger.admit(slot="s1", request_id=request, round=1, payload_digest=DIGEST,
                              rmax_units=RMAX)
        assert isinstance(permit, Permit)
        ledger.consume(slot="s1", permit_id=permit.permit_id, body_digest=DIGEST)
        ledger.settle(slot="s1", permit_id=permit.permit_id, kind=SettleKind.SETTLED,
                      code=None, usage={"input": 7, "output": 3}, tier=None)
    slot = ledger.ledger("s1")
    assert (slot.usage, slot.usage_known, slot.settled_units) == (
        {"input": 14, "output": 6}, True, 20)
    assert slot.terminal_code is None and not slot.lost and not slot.own_abort


def test_a_slots_first_terminal_code_stays_and_an_own_abort_is_not_a_loss() -> None:
    ledger = _ledger()
    first, second = (ledger.admit(slot="s1", request_id=r, round=1, payload_digest=DIGEST,
                                  rmax_units=RMAX) for r in ("r1", "r2"))
    assert isinstance(first, Permit) and isinstance(second, Permit)
    for permit in (first, second):
        ledger.consume(slot="s1", permit_id=permit.permit_id, body_digest=DIGEST)
    ledger.settle(slot="s1", permit_id=first.permit_id, kind=SettleKind.OWN_ABORT_AFTER_SEND,
                  code=None, usage=None, tier=None)
    slot = ledger.ledger("s1")
    assert slot.terminal_code is Code.LOOKUP_SLOT_TERMINAL  # no code claimed: the default
    assert (slot.own_abort, slot.lost, slot.usage_known) == (True, False, False)
    ledger.settle(slot="s1", permit_id=second.permit_id, kind=SettleKind.LOST,
                  code=Code.LOOKUP_STREAM_LOST, usage=None, tier=None)
    assert slot.terminal_code is Code.LOOKUP_SLOT_TERMINAL  # the first stays
    assert (slot.own_abort, slot.lost, slot.retained_units) == (True, True, 2 * RMAX)


def test_a_claimed_loss_code_is_the_slots_terminal_code() -> None:
    ledger = _ledger()
    permit_id = _admitted(ledger)
    ledger.settle(slot="s1", permit_id=permit_id, kind=SettleKind.LOST,
                  code=Code.LOOKUP_SEND_FAILED, usage=None, tier=None)
    assert ledger.ledger("s1").terminal_code is Code.LOOKUP_SEND_FAILED


def _strict_price(usage: Mapping[str, int], tier: str | None) -> int:
    if tier not in (None, "default", "flex", "priority"):
        raise EfoldError(Code.LOOKUP_UNKNOWN_TIER, "unknown tier")
    return _price(usage, tier)


def test_a_claimed_integrity_code_wins_over_what_the_ledger_finds_after_it() -> None:
    # The sender's own integrity code is the run's stop code; a usage problem or an
    # unpriceable tier the ledger finds too does not replace it.
    for usage, tier in (({"input": -1, "output": 1}, None), ({"input": 7, "output": 3}, "x")):
        ledger = PermitLedger(MemoryHoldStore(), epoch=1, cap_units=10 * RMAX,
                              rmax_units=RMAX, max_requests=10, price=_strict_price)
        permit_id = _admitted(ledger)
        assert ledger.settle(slot="s1", permit_id=permit_id, kind=SettleKind.INTEGRITY_STOP,
                             code=Code.LOOKUP_BODY_MISMATCH, usage=usage,
                             tier=tier) is Code.LOOKUP_BODY_MISMATCH
    # Without a claim, what the ledger finds is the code.
    for usage, tier, found in (({"input": -1, "output": 1}, None, Code.LOOKUP_INVALID_USAGE),
                               ({"input": 7, "output": 3}, "x", Code.LOOKUP_UNKNOWN_TIER)):
        ledger = PermitLedger(MemoryHoldStore(), epoch=1, cap_units=10 * RMAX,
                              rmax_units=RMAX, max_requests=10, price=_strict_price)
        permit_id = _admitted(ledger)
        assert ledger.settle(slot="s1", permit_id=permit_id, kind=SettleKind.SETTLED,
                             code=None, usage=usage, tier=tier) is found


def test_abandoning_a_slot_closes_only_its_open_permits() -> None:
    ledger = _ledger()
    settled, still_open = (ledger.admit(slot="s1", request_id=r, round=1,
                                        payload_digest=DIGEST, rmax_units=RMAX)
                           for r in ("r1", "r2"))
    other = ledger.admit(slot="s2", request_id="r1", round=1, payload_digest=DIGEST,
                         rmax_units=RMAX)
    assert isinstance(settled, Permit) and isinstance(still_open, Permit)
    assert isinstance(other, Permit)
    ledger.consume(slot="s1", permit_id=settled.permit_id, body_digest=DIGEST)
    ledger.settle(slot="s1", permit_id=settled.permit_id, kind=SettleKind.SETTLED, code=None,
                  usage={"input": 7, "output": 3}, tier=None)
    assert ledger.abandon_slot("s1", Code.LOOKUP_STREAM_LOST) == 1
    store = _store(ledger)
    assert (store.record(settled.permit_id).state, store.record(settled.permit_id).code) == (
        "settled", None)
    assert (store.record(still_open.permit_id).state,
            store.record(still_open.permit_id).code) == ("lost", "lookup_stream_lost")
    assert store.record(other.permit_id).state == "active"
    assert ledger.total_units == 10 + RMAX + RMAX  # settled, retained, s2's hold
    assert ledger.abandon_slot("s1", Code.LOOKUP_STREAM_LOST) == 0
