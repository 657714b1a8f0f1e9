"""The permit rules, one contract suite run against every source: the controller's
durable source (the ledger over a real journal, lease held) and the test-only source's
memory store. Both are the one ``PermitLedger``: these tests pin what it decides, at
the exact boundaries (cap equality, envelope, hold), with hostile claims and usage."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from efold.controller.campaigns.stops import SlotEnd, StopPolicy
from efold.controller.rundirs.permits import DurablePermitSource
from efold.errors import Code, EfoldError
from efold.guard.ledger import PermitIntegrityError, PermitLedger, SettleKind
from efold.guard.permits import CHILD_REPORTABLE_CODES, Permit, Refusal, child_code
from efold.guard.pricing import Pricer
from efold.guard.testing import MemoryHoldStore
from efold.registry.journal import JournalReader, JournalWriter
from efold.registry.lease import acquire_lease

RMAX = 78_400_000
DIGEST = "a" * 64


def price(usage: Mapping[str, int], tier: str | None) -> int:
    if tier not in (None, "default", "flex", "priority"):
        raise EfoldError(Code.LOOKUP_UNKNOWN_TIER)
    mult = {"default": 2, "flex": 1, "priority": 4, None: 4}[tier]
    return (usage.get("input", 0) * 40 + usage.get("output", 0) * 200) * mult // 2


@dataclass
class Bench:
    """One source under test and a way to read back what its store holds."""

    make: Callable[..., PermitLedger]
    rows: Callable[[], list[dict[str, Any]]]


def _memory_rows(store: MemoryHoldStore) -> list[dict[str, Any]]:
    return [{"permit_id": r.permit_id, "state": r.state, "hold_units": r.hold_units,
             "settled_units": r.settled_units, "partial_units": r.partial_units,
             "code": r.code} for r in store.records]


@pytest.fixture(params=["journal", "memory"])
def bench(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bench]:
    if request.param == "journal":
        with acquire_lease(tmp_path) as lease:
            journal = JournalWriter(tmp_path, lease)

            def make_durable(cap: int, max_requests: int = 10, pricer: Pricer = price
                             ) -> PermitLedger:
                return DurablePermitSource(journal, epoch=1, cap_units=cap, rmax_units=RMAX,
                                           max_requests=max_requests, price=pricer)

            def journal_rows() -> list[dict[str, Any]]:
                with JournalReader(tmp_path) as reader:  # a second connection
                    return reader.rows("holds")

            yield Bench(make_durable, journal_rows)
    else:
        store = MemoryHoldStore()

        def make_memory(cap: int, max_requests: int = 10, pricer: Pricer = price
                        ) -> PermitLedger:
            return PermitLedger(store, epoch=1, cap_units=cap, rmax_units=RMAX,
                                max_requests=max_requests, price=pricer)

        yield Bench(make_memory, lambda: _memory_rows(store))


def admit(src: PermitLedger, slot: str = "s1", n: int = 0) -> Permit | Refusal:
    return src.admit(slot=slot, request_id=f"q{n}", round=n, payload_digest=DIGEST,
                     rmax_units=RMAX)


def sent(src: PermitLedger, slot: str = "s1", n: int = 0) -> Permit:
    """Admit and consume one request (it went out)."""
    grant = admit(src, slot, n)
    assert isinstance(grant, Permit)
    src.consume(slot=slot, permit_id=grant.permit_id, body_digest=DIGEST)
    return grant


def settle(src: PermitLedger, grant: Permit, kind: SettleKind, usage: Mapping[str, object] | None,
           *, slot: str = "s1", code: Code | None = None, tier: str | None = "default",
           cost_claim: int | None = None) -> Code | None:
    return src.settle(slot=slot, permit_id=grant.permit_id, kind=kind, code=code, usage=usage,
                      tier=tier, cost_claim=cost_claim)


def journal_total(rows: list[dict[str, Any]]) -> int:
    return sum(r["settled_units"] if r["state"] == "settled"
               else r["hold_units"] if r["state"] in ("active", "consumed")
               else max(r["hold_units"], r["partial_units"] or 0) for r in rows)


def test_hold_is_stored_before_the_permit_is_returned(bench: Bench) -> None:
    src = bench.make(cap=10 * RMAX)
    grant = admit(src)
    assert isinstance(grant, Permit)
    (row,) = bench.rows()
    assert row["permit_id"] == grant.permit_id and row["state"] == "active"
    assert row["hold_units"] == RMAX and src.total_units == RMAX


@pytest.mark.parametrize("slack", [0, -1])
def test_cap_equality_admits_and_one_unit_less_refuses(bench: Bench, slack: int) -> None:
    # T + Rmax == C admits; with C one unit smaller the same request refuses.
    src = bench.make(cap=2 * RMAX + slack)
    assert isinstance(admit(src, "s1"), Permit)
    second = admit(src, "s2")
    if slack == 0:
        assert isinstance(second, Permit) and src.total_units == src.cap_units
    else:
        assert second == Refusal(code=Code.NOT_ADMITTED_CAP) and src.cap_refused
        assert len(bench.rows()) == 1


def test_cap_admits_only_while_total_plus_rmax_fits(bench: Bench) -> None:
    src = bench.make(cap=RMAX + 1000)
    settle(src, sent(src), SettleKind.SETTLED, {"input": 10, "output": 2})
    assert src.total_units == 10 * 40 + 2 * 200  # 800 <= 1000
    assert isinstance(admit(src, "s2"), Permit)  # 800 + RMAX <= RMAX + 1000
    assert admit(src, "s3") == Refusal(code=Code.NOT_ADMITTED_CAP)


def test_a_negative_cost_claim_cannot_make_room(bench: Bench) -> None:
    # The old test-only source trusted the caller's cost: -Rmax let a cap of one Rmax
    # admit two more. The ledger prices the usage itself and stops on the claim.
    src = bench.make(cap=RMAX)
    code = settle(src, sent(src), SettleKind.SETTLED, {"input": 10, "output": 2},
                  cost_claim=-RMAX)
    assert code is Code.LOOKUP_COST_MISMATCH and src.total_units == RMAX
    assert admit(src, "s2") == Refusal(code=Code.LOOKUP_STOPPED)


@pytest.mark.parametrize("kind", [SettleKind.SETTLED, SettleKind.LOST,
                                  SettleKind.OWN_ABORT_AFTER_SEND])
@pytest.mark.parametrize("usage", [
    {"input": 2**58, "output": 1},  # above 2^63 once priced: crashed the journal write
    {"input": 10, "output": 2**64 - 1},  # a u64 "-1" sentinel
    {"input": 10**29, "output": 1},
    {"input": 10, "output": -1},
    {"input": 10, "output": 1.5},
    {"input": True, "output": 1},
    {"input": 10, "output": 1, "images": 3},
])
def test_absurd_usage_is_an_integrity_stop_decided_before_pricing(
        bench: Bench, kind: SettleKind, usage: dict[str, object]) -> None:
    priced: list[Mapping[str, int]] = []

    def spy(counts: Mapping[str, int], tier: str | None) -> int:
        priced.append(counts)
        return price(counts, tier)

    src = bench.make(cap=10 * RMAX, pricer=spy)
    grant = sent(src)
    code = settle(src, grant, kind, usage, code=Code.LOOKUP_STREAM_LOST
                  if kind is not SettleKind.SETTLED else None)
    assert code is Code.LOOKUP_INVALID_USAGE and priced == []
    assert src.total_units == RMAX and src.sticky_code is Code.LOOKUP_INVALID_USAGE
    (row,) = bench.rows()
    assert row["state"] == "integrity_stop" and row["partial_units"] is None
    assert journal_total(bench.rows()) == src.total_units
    assert admit(src, "s2") == Refusal(code=Code.LOOKUP_STOPPED)


@pytest.mark.parametrize("kind", [SettleKind.SETTLED, SettleKind.LOST])
@pytest.mark.parametrize(("usage", "expected"), [
    ({"input": 272_001, "output": 1}, Code.LOOKUP_USAGE_INPUT_ABOVE_ADMITTED),
    ({"input": 10, "output": 128_001}, Code.LOOKUP_USAGE_OUTPUT_ABOVE_MAX),
    ({"input": 10, "output": 392_001}, Code.LOOKUP_USAGE_OUTPUT_ABOVE_MAX),
    ({"input": 10, "output": 5, "reasoning": 6}, Code.LOOKUP_USAGE_REASONING_ABOVE_OUTPUT),
    ({"input": 10, "output": 5, "cache_read": 6, "cache_write": 5},
     Code.LOOKUP_USAGE_CACHE_ABOVE_INPUT),
])
def test_usage_beyond_the_envelope_stops_on_every_outcome(
        bench: Bench, kind: SettleKind, usage: dict[str, int], expected: Code) -> None:
    src = bench.make(cap=10 * RMAX)
    code = settle(src, sent(src), kind, usage,
                  code=None if kind is SettleKind.SETTLED else Code.LOOKUP_STREAM_LOST)
    assert code is expected and src.total_units == RMAX


@pytest.mark.parametrize(("inp", "out"), [(272_000, 1), (10, 128_000)])
def test_usage_at_the_envelope_settles(bench: Bench, inp: int, out: int) -> None:
    src = bench.make(cap=10 * RMAX, pricer=lambda c, t: 7)
    assert settle(src, sent(src), SettleKind.SETTLED, {"input": inp, "output": out}) is None
    assert src.total_units == 7


@pytest.mark.parametrize("kind", [SettleKind.SETTLED, SettleKind.LOST,
                                  SettleKind.OWN_ABORT_AFTER_SEND])
def test_cost_above_the_hold_stops_on_every_outcome(bench: Bench, kind: SettleKind) -> None:
    src = bench.make(cap=10 * RMAX, pricer=lambda c, t: RMAX + 1)
    code = settle(src, sent(src), kind, {"input": 10, "output": 2},
                  code=None if kind is SettleKind.SETTLED else Code.LOOKUP_RESPONSE_FAILED)
    assert code is Code.LOOKUP_COST_EXCEEDS_HOLD
    assert src.total_units == RMAX + 1  # the known partial, above the hold, is counted
    assert journal_total(bench.rows()) == src.total_units


def test_cost_equal_to_the_hold_settles(bench: Bench) -> None:
    src = bench.make(cap=10 * RMAX, pricer=lambda c, t: RMAX)
    assert settle(src, sent(src), SettleKind.SETTLED, {"input": 10, "output": 2}) is None


@pytest.mark.parametrize("fault", [RuntimeError("boom"), OverflowError("big"), ZeroDivisionError()])
def test_a_fault_while_closing_settles_as_an_integrity_stop(bench: Bench,
                                                           fault: Exception) -> None:
    def broken(counts: Mapping[str, int], tier: str | None) -> int:
        raise fault

    src = bench.make(cap=10 * RMAX, pricer=broken)
    code = settle(src, sent(src), SettleKind.SETTLED, {"input": 10, "output": 2})
    assert code is Code.LOOKUP_SETTLEMENT_FAULT and src.total_units == RMAX
    (row,) = bench.rows()
    assert row["state"] == "integrity_stop" and row["code"] == "lookup_settlement_fault"
    assert admit(src, "s2") == Refusal(code=Code.LOOKUP_STOPPED)


def test_an_unstorable_figure_settles_as_a_fault_not_a_crash(bench: Bench) -> None:
    # A pricer returning a figure SQLite cannot hold (above 2^63) must not crash the
    # controller with OverflowError: the permit closes as a settlement fault.
    src = bench.make(cap=10 * RMAX, pricer=lambda c, t: 2**70)
    code = settle(src, sent(src), SettleKind.LOST, {"input": 10, "output": 2},
                  code=Code.LOOKUP_STREAM_LOST)
    assert code in (Code.LOOKUP_COST_EXCEEDS_HOLD, Code.LOOKUP_SETTLEMENT_FAULT)
    assert journal_total(bench.rows()) == src.total_units


def test_body_mismatch_and_reuse_are_integrity_errors(bench: Bench) -> None:
    src = bench.make(cap=10 * RMAX)
    grant = admit(src)
    assert isinstance(grant, Permit)
    with pytest.raises(PermitIntegrityError) as err:
        src.consume(slot="s1", permit_id=grant.permit_id, body_digest="b" * 64)
    assert err.value.code is Code.LOOKUP_BODY_MISMATCH
    assert src.sticky_code is Code.LOOKUP_BODY_MISMATCH  # the ledger stopped itself
    src.consume(slot="s1", permit_id=grant.permit_id, body_digest=DIGEST)
    with pytest.raises(PermitIntegrityError):
        src.consume(slot="s1", permit_id=grant.permit_id, body_digest=DIGEST)
    with pytest.raises(PermitIntegrityError):  # another slot cannot use this permit
        settle(src, grant, SettleKind.LOST, None, slot="s2")


def test_a_smaller_reservation_is_refused(bench: Bench) -> None:
    src = bench.make(cap=10 * RMAX)
    with pytest.raises(PermitIntegrityError) as err:
        src.admit(slot="s1", request_id="q", round=1, payload_digest=DIGEST, rmax_units=1)
    assert err.value.code is Code.LOOKUP_ROUTE_MISMATCH and bench.rows() == []
    assert admit(src) == Refusal(code=Code.LOOKUP_STOPPED)


def test_settling_twice_is_refused(bench: Bench) -> None:
    src = bench.make(cap=10 * RMAX)
    grant = sent(src)
    settle(src, grant, SettleKind.SETTLED, {"input": 1, "output": 1})
    with pytest.raises(PermitIntegrityError):
        settle(src, grant, SettleKind.SETTLED, {"input": 1, "output": 1})


def test_loss_keeps_the_hold_and_makes_the_slot_terminal(bench: Bench) -> None:
    src = bench.make(cap=10 * RMAX)
    assert settle(src, sent(src), SettleKind.LOST, None, code=Code.LOOKUP_MISSING_USAGE,
                  tier=None) is None
    assert src.total_units == RMAX  # retained
    assert admit(src, "s1", 1) == Refusal(code=Code.LOOKUP_SLOT_TERMINAL)
    assert isinstance(admit(src, "s2"), Permit)  # the run goes on
    led = src.ledger("s1")
    assert led.lost and not led.usage_known and led.retained_units == RMAX
    assert bench.rows()[0]["state"] == "lost"


def test_unknown_tier_is_an_integrity_stop(bench: Bench) -> None:
    src = bench.make(cap=10 * RMAX)
    code = settle(src, sent(src), SettleKind.SETTLED, {"input": 5, "output": 1}, tier="turbo")
    assert code is Code.LOOKUP_UNKNOWN_TIER and src.sticky_code is Code.LOOKUP_UNKNOWN_TIER


def test_request_limit_refuses_before_any_hold(bench: Bench) -> None:
    src = bench.make(cap=100 * RMAX, max_requests=2)
    for n in range(2):
        settle(src, sent(src, "s1", n), SettleKind.SETTLED, {"input": 1, "output": 1})
    assert admit(src, "s1", 2) == Refusal(code=Code.LOOKUP_REQUEST_LIMIT)
    assert len(bench.rows()) == 2


def test_stop_refuses_admission_but_allows_settlement(bench: Bench) -> None:
    src = bench.make(cap=10 * RMAX)
    grant = sent(src)
    src.stop(Code.LOOKUP_REPEATED_LOSS)
    assert admit(src, "s2") == Refusal(code=Code.LOOKUP_STOPPED)
    settle(src, grant, SettleKind.LOST, None, code=Code.LOOKUP_STREAM_LOST)
    assert src.total_units == RMAX and src.open_permits() == []


def test_abandoning_a_slot_retains_every_open_hold(bench: Bench) -> None:
    src = bench.make(cap=10 * RMAX)
    sent(src, "s1")
    assert src.abandon_slot("s1", Code.LOOKUP_WORKER_LOST) == 1
    assert src.total_units == RMAX and bench.rows()[0]["state"] == "lost"
    assert admit(src, "s1", 1) == Refusal(code=Code.LOOKUP_SLOT_TERMINAL)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(list(SettleKind)), st.integers(1, 5000),
                          st.integers(0, 5000)), min_size=1, max_size=12))
def test_total_equals_the_journal_sum(tmp_path_factory: pytest.TempPathFactory,
                                      steps: list[tuple[SettleKind, int, int]]) -> None:
    run = tmp_path_factory.mktemp("run")
    with acquire_lease(run) as held:
        src = DurablePermitSource(JournalWriter(run, held), epoch=1, cap_units=1000 * RMAX,
                                  rmax_units=RMAX, max_requests=10, price=price)
        for i, (kind, inp, out) in enumerate(steps):
            grant = admit(src, f"s{i}")
            if isinstance(grant, Refusal):  # an integrity stop closed admission
                assert grant.code is Code.LOOKUP_STOPPED and src.sticky_code is not None
                break
            src.consume(slot=f"s{i}", permit_id=grant.permit_id, body_digest=DIGEST)
            settle(src, grant, kind, {"input": inp, "output": out}, slot=f"s{i}")
        with JournalReader(run) as reader:
            assert journal_total(reader.rows("holds")) == src.total_units


# -- what a child may claim -----------------------------------------------------------


def test_child_codes_are_an_allowlist_not_a_prefix() -> None:
    # These start with lookup_ / not_admitted_ but no child may claim them.
    for code in (Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE, Code.LOOKUP_ARRIVAL_PERSIST_FAILED,
                 Code.LOOKUP_PERMIT_INVALID, Code.LOOKUP_WORKER_LOST,
                 Code.LOOKUP_SETTLEMENT_FAULT, Code.LOOKUP_TEST_ONLY_SOURCE):
        assert child_code(code, integrity=False) is Code.CHILD_CODE_FORBIDDEN
    assert child_code(Code.LOOKUP_STREAM_LOST, integrity=False) is Code.LOOKUP_STREAM_LOST
    assert child_code(Code.NOT_ADMITTED_CAP, integrity=True) is Code.CHILD_CODE_FORBIDDEN
    assert all(c.value.startswith(("lookup_", "not_admitted_")) for c in CHILD_REPORTABLE_CODES)


def test_two_consecutive_losses_stop_and_own_aborts_do_not_reset() -> None:
    policy = StopPolicy()
    assert policy.slot_admitted_end(SlotEnd.COMPLETED) is None
    assert policy.slot_admitted_end(SlotEnd.LOST) is None
    assert policy.slot_admitted_end(SlotEnd.OWN_ABORT) is None  # neither counts nor resets
    assert policy.slot_admitted_end(SlotEnd.LOST) is Code.LOOKUP_REPEATED_LOSS


def test_alternating_losses_do_not_trip_the_streak() -> None:
    policy = StopPolicy()
    for _ in range(5):
        assert policy.slot_admitted_end(SlotEnd.LOST) is None
        assert policy.slot_admitted_end(SlotEnd.COMPLETED) is None


def test_invalid_rate_strictly_above_ten_percent_stops() -> None:
    policy = StopPolicy()
    for _ in range(9):
        policy.slot_admitted_end(SlotEnd.COMPLETED)
    assert policy.slot_admitted_end(SlotEnd.INVALID) is None  # 1/10 = 10%: not above
    assert policy.slot_admitted_end(SlotEnd.INVALID) is Code.INVALID_SLOT_RATE  # 2/11


def test_unreconciled_containment_outranks_an_earlier_stop() -> None:
    policy = StopPolicy()
    policy.stop(Code.LOOKUP_REPEATED_LOSS)
    policy.stop(Code.LOOKUP_BODY_MISMATCH)
    assert policy.stop_code is Code.LOOKUP_REPEATED_LOSS
    policy.stop(Code.UNRECONCILED_CONTAINMENT)
    assert policy.stop_code is Code.UNRECONCILED_CONTAINMENT


def test_a_child_cannot_choose_or_cancel_a_controller_stop(bench: Bench) -> None:
    src = bench.make(cap=10 * RMAX)
    grant = admit(src, "s1")
    assert isinstance(grant, Permit)
    src.consume(slot="s1", permit_id=grant.permit_id, body_digest=DIGEST)
    # An integrity stop claimed with the absorbing controller-only code is not believed...
    code = src.settle(slot="s1", permit_id=grant.permit_id, kind=SettleKind.INTEGRITY_STOP,
                      code=Code.UNRECONCILED_CONTAINMENT, usage=None, tier=None)
    assert code is Code.CHILD_CODE_FORBIDDEN and src.sticky_code is Code.CHILD_CODE_FORBIDDEN


def test_an_integrity_stop_without_a_code_still_stops(bench: Bench) -> None:
    src = bench.make(cap=10 * RMAX)
    grant = admit(src, "s1")
    assert isinstance(grant, Permit)
    src.consume(slot="s1", permit_id=grant.permit_id, body_digest=DIGEST)
    assert src.settle(slot="s1", permit_id=grant.permit_id, kind=SettleKind.INTEGRITY_STOP,
                      code=None, usage=None, tier=None) is Code.CHILD_CODE_FORBIDDEN
    assert admit(src, "s2") == Refusal(code=Code.LOOKUP_STOPPED)


def test_settling_as_sent_without_consuming_is_an_unguarded_dispatch(bench: Bench) -> None:
    src = bench.make(cap=10 * RMAX)
    grant = admit(src, "s1")
    assert isinstance(grant, Permit)
    with pytest.raises(PermitIntegrityError) as err:
        src.settle(slot="s1", permit_id=grant.permit_id, kind=SettleKind.SETTLED, code=None,
                   usage={"input": 5, "output": 1}, tier="default")
    assert err.value.code is Code.LOOKUP_UNGUARDED_DISPATCH
    # Lost before the send is legal: the hold is kept.
    src.settle(slot="s1", permit_id=grant.permit_id, kind=SettleKind.LOST,
               code=Code.LOOKUP_SEND_FAILED, usage=None, tier=None)
    assert src.total_units == RMAX


def test_a_cost_claim_that_differs_from_the_catalog_stops(bench: Bench) -> None:
    src = bench.make(cap=10 * RMAX)
    grant = admit(src, "s1")
    assert isinstance(grant, Permit)
    src.consume(slot="s1", permit_id=grant.permit_id, body_digest=DIGEST)
    usage = {"input": 10, "output": 2}
    assert src.settle(slot="s1", permit_id=grant.permit_id, kind=SettleKind.SETTLED, code=None,
                      usage=usage, tier="default",
                      cost_claim=price(usage, "default") - 1) is Code.LOOKUP_COST_MISMATCH


def test_the_ledger_keeps_the_first_closed_requests_input(bench: Bench) -> None:
    src = bench.make(cap=10 * RMAX, pricer=lambda c, t: 7)
    first, second = sent(src, n=0), sent(src, n=1)
    assert src.ledger("s1").first_closed is False and src.ledger("s1").first_input is None
    assert settle(src, first, SettleKind.SETTLED, {"input": 182_000, "output": 9}) is None
    assert settle(src, second, SettleKind.SETTLED, {"input": 190_000, "output": 9}) is None
    led = src.ledger("s1")
    assert led.first_closed and led.first_input == 182_000  # round 1's, not a sum
    # A first request closed without trustworthy usage leaves the count unknown.
    lost = sent(src, slot="s2")
    settle(src, lost, SettleKind.LOST, None, slot="s2", code=Code.LOOKUP_WORKER_LOST)
    assert src.ledger("s2").first_closed and src.ledger("s2").first_input is None
