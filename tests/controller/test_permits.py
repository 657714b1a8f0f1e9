"""The durable permit source: cap admission, journaling before acknowledgement, sticky
stops, terminal slots, and the stop policies."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from efold.controller.permits import (
    DurablePermitSource,
    Grant,
    PermitIntegrityError,
    Refusal,
    SettleKind,
)
from efold.controller.stops import SlotEnd, StopPolicy
from efold.errors import Code
from efold.registry.journal import JournalReader, JournalWriter
from efold.registry.lease import Lease, acquire_lease

RMAX = 78_400_000
DIGEST = "a" * 64


def price(usage: Mapping[str, int], tier: str | None) -> int:
    if tier not in (None, "default", "flex", "priority"):
        from efold.errors import EfoldError

        raise EfoldError(Code.LOOKUP_UNKNOWN_TIER)
    mult = {"default": 2, "flex": 1, "priority": 4, None: 4}[tier]
    return (usage.get("input", 0) * 40 + usage.get("output", 0) * 200) * mult // 2


@pytest.fixture
def lease(tmp_path: Path) -> Iterator[Lease]:
    with acquire_lease(tmp_path) as held:
        yield held


def source(run: Path, lease: Lease, cap: int, max_requests: int = 10) -> DurablePermitSource:
    journal = JournalWriter(run, lease)
    return DurablePermitSource(
        journal, epoch=1, cap_units=cap, rmax_units=RMAX, max_requests=max_requests, price=price
    )


def admit(src: DurablePermitSource, slot: str = "s1", n: int = 0) -> Grant | Refusal:
    return src.admit(slot=slot, request_id=f"q{n}", round=n, payload_digest=DIGEST, rmax_units=RMAX)


def test_hold_is_journaled_before_the_permit_is_returned(tmp_path: Path, lease: Lease) -> None:
    src = source(tmp_path, lease, cap=10 * RMAX)
    grant = admit(src)
    assert isinstance(grant, Grant)
    with JournalReader(tmp_path) as reader:  # a second connection sees it committed
        row = reader.hold(grant.permit_id)
    assert row is not None and row["state"] == "active" and row["hold_units"] == RMAX
    assert src.total_units == RMAX


def test_cap_admits_only_while_total_plus_rmax_fits(tmp_path: Path, lease: Lease) -> None:
    src = source(tmp_path, lease, cap=RMAX + 1000)
    first = admit(src, "s1")
    assert isinstance(first, Grant)
    src.consume(slot="s1", permit_id=first.permit_id, body_digest=DIGEST)
    src.settle(slot="s1", permit_id=first.permit_id, kind=SettleKind.SETTLED, code=None,
               usage={"input": 10, "output": 2}, tier="default")
    assert src.total_units == 10 * 40 + 2 * 200  # 800 <= 1000
    assert isinstance(admit(src, "s2"), Grant)  # 800 + RMAX <= RMAX + 1000
    refusal = admit(src, "s3")  # 800 + 2 RMAX > cap
    assert refusal == Refusal(Code.NOT_ADMITTED_CAP) and src.cap_refused


def test_cap_below_rmax_admits_nothing(tmp_path: Path, lease: Lease) -> None:
    src = source(tmp_path, lease, cap=RMAX - 1)
    assert admit(src) == Refusal(Code.NOT_ADMITTED_CAP)
    with JournalReader(tmp_path) as reader:
        assert reader.rows("holds") == []


def test_body_mismatch_and_reuse_are_integrity_errors(tmp_path: Path, lease: Lease) -> None:
    src = source(tmp_path, lease, cap=10 * RMAX)
    grant = admit(src)
    assert isinstance(grant, Grant)
    with pytest.raises(PermitIntegrityError) as err:
        src.consume(slot="s1", permit_id=grant.permit_id, body_digest="b" * 64)
    assert err.value.code is Code.LOOKUP_BODY_MISMATCH
    src.consume(slot="s1", permit_id=grant.permit_id, body_digest=DIGEST)
    with pytest.raises(PermitIntegrityError):
        src.consume(slot="s1", permit_id=grant.permit_id, body_digest=DIGEST)
    with pytest.raises(PermitIntegrityError):  # another slot cannot use this permit
        src.settle(slot="s2", permit_id=grant.permit_id, kind=SettleKind.LOST, code=None,
                   usage=None, tier=None)


def test_loss_keeps_the_hold_and_makes_the_slot_terminal(tmp_path: Path, lease: Lease) -> None:
    src = source(tmp_path, lease, cap=10 * RMAX)
    grant = admit(src)
    assert isinstance(grant, Grant)
    src.consume(slot="s1", permit_id=grant.permit_id, body_digest=DIGEST)
    assert src.settle(slot="s1", permit_id=grant.permit_id, kind=SettleKind.LOST,
                      code=Code.LOOKUP_MISSING_USAGE, usage=None, tier=None) is None
    assert src.total_units == RMAX  # retained
    assert admit(src, "s1", 1) == Refusal(Code.LOOKUP_SLOT_TERMINAL)
    assert isinstance(admit(src, "s2"), Grant)  # the run goes on
    led = src.ledger("s1")
    assert led.lost and not led.usage_known and led.retained_units == RMAX
    with JournalReader(tmp_path) as reader:
        assert reader.hold(grant.permit_id)["state"] == "lost"  # type: ignore[index]


def test_settlement_above_the_hold_is_a_sticky_integrity_stop(tmp_path: Path, lease: Lease) -> None:
    src = source(tmp_path, lease, cap=100 * RMAX)
    grant = admit(src)
    assert isinstance(grant, Grant)
    src.consume(slot="s1", permit_id=grant.permit_id, body_digest=DIGEST)
    huge = {"input": 2_000_000, "output": 128_000}  # priced above Rmax
    code = src.settle(slot="s1", permit_id=grant.permit_id, kind=SettleKind.SETTLED, code=None,
                      usage=huge, tier="default")
    assert code is Code.LOOKUP_COST_EXCEEDS_HOLD
    assert src.total_units == price(huge, "default")  # the known partial, above the hold
    assert admit(src, "s2") == Refusal(Code.LOOKUP_STOPPED)


def test_unknown_tier_is_an_integrity_stop(tmp_path: Path, lease: Lease) -> None:
    src = source(tmp_path, lease, cap=10 * RMAX)
    grant = admit(src)
    assert isinstance(grant, Grant)
    src.consume(slot="s1", permit_id=grant.permit_id, body_digest=DIGEST)
    code = src.settle(slot="s1", permit_id=grant.permit_id, kind=SettleKind.SETTLED, code=None,
                      usage={"input": 5, "output": 1}, tier="turbo")
    assert code is Code.LOOKUP_UNKNOWN_TIER and src.sticky_code is Code.LOOKUP_UNKNOWN_TIER


def test_request_limit_refuses_before_any_hold(tmp_path: Path, lease: Lease) -> None:
    src = source(tmp_path, lease, cap=100 * RMAX, max_requests=2)
    for n in range(2):
        grant = admit(src, "s1", n)
        assert isinstance(grant, Grant)
        src.consume(slot="s1", permit_id=grant.permit_id, body_digest=DIGEST)
        src.settle(slot="s1", permit_id=grant.permit_id, kind=SettleKind.SETTLED, code=None,
                   usage={"input": 1, "output": 1}, tier="default")
    assert admit(src, "s1", 2) == Refusal(Code.LOOKUP_REQUEST_LIMIT)
    with JournalReader(tmp_path) as reader:
        assert len(reader.rows("holds")) == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(list(SettleKind)), st.integers(1, 5000),
                          st.integers(0, 5000)), min_size=1, max_size=12))
def test_total_equals_the_journal_sum(tmp_path_factory: pytest.TempPathFactory,
                                      steps: list[tuple[SettleKind, int, int]]) -> None:
    run = tmp_path_factory.mktemp("run")
    with acquire_lease(run) as held:
        src = source(run, held, cap=1000 * RMAX)
        for i, (kind, inp, out) in enumerate(steps):
            grant = admit(src, f"s{i}")
            if isinstance(grant, Refusal):  # an integrity stop closed admission
                assert grant.code is Code.LOOKUP_STOPPED and src.sticky_code is not None
                break
            src.consume(slot=f"s{i}", permit_id=grant.permit_id, body_digest=DIGEST)
            src.settle(slot=f"s{i}", permit_id=grant.permit_id, kind=kind, code=None,
                       usage={"input": inp, "output": out}, tier="default")
        with JournalReader(run) as reader:
            rows = reader.rows("holds")
        journal_total = sum(
            r["settled_units"] if r["state"] == "settled"
            else max(r["hold_units"], r["partial_units"] or 0)
            for r in rows
        )
        assert journal_total == src.total_units


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


def test_a_child_cannot_choose_or_cancel_a_controller_stop(tmp_path: Path, lease: Lease) -> None:
    src = source(tmp_path, lease, cap=10 * RMAX)
    grant = admit(src, "s1")
    assert isinstance(grant, Grant)
    src.consume(slot="s1", permit_id=grant.permit_id, body_digest=DIGEST)
    # An integrity stop claimed with the absorbing controller-only code is not believed...
    code = src.settle(slot="s1", permit_id=grant.permit_id, kind=SettleKind.INTEGRITY_STOP,
                      code=Code.UNRECONCILED_CONTAINMENT, usage=None, tier=None)
    assert code is Code.CHILD_CODE_FORBIDDEN and src.sticky_code is Code.CHILD_CODE_FORBIDDEN


def test_an_integrity_stop_without_a_code_still_stops(tmp_path: Path, lease: Lease) -> None:
    src = source(tmp_path, lease, cap=10 * RMAX)
    grant = admit(src, "s1")
    assert isinstance(grant, Grant)
    src.consume(slot="s1", permit_id=grant.permit_id, body_digest=DIGEST)
    assert src.settle(slot="s1", permit_id=grant.permit_id, kind=SettleKind.INTEGRITY_STOP,
                      code=None, usage=None, tier=None) is Code.CHILD_CODE_FORBIDDEN
    assert admit(src, "s2") == Refusal(Code.LOOKUP_STOPPED)


def test_settling_as_sent_without_consuming_is_an_unguarded_dispatch(tmp_path: Path,
                                                                    lease: Lease) -> None:
    src = source(tmp_path, lease, cap=10 * RMAX)
    grant = admit(src, "s1")
    assert isinstance(grant, Grant)
    with pytest.raises(PermitIntegrityError) as err:
        src.settle(slot="s1", permit_id=grant.permit_id, kind=SettleKind.SETTLED, code=None,
                   usage={"input": 5, "output": 1}, tier="default")
    assert err.value.code is Code.LOOKUP_UNGUARDED_DISPATCH
    # Lost before the send is legal: the hold is kept.
    src.settle(slot="s1", permit_id=grant.permit_id, kind=SettleKind.LOST,
               code=Code.LOOKUP_SEND_FAILED, usage=None, tier=None)
    assert src.total_units == RMAX


def test_a_cost_claim_that_differs_from_the_catalog_stops(tmp_path: Path, lease: Lease) -> None:
    src = source(tmp_path, lease, cap=10 * RMAX)
    grant = admit(src, "s1")
    assert isinstance(grant, Grant)
    src.consume(slot="s1", permit_id=grant.permit_id, body_digest=DIGEST)
    usage = {"input": 10, "output": 2}
    assert src.settle(slot="s1", permit_id=grant.permit_id, kind=SettleKind.SETTLED, code=None,
                      usage=usage, tier="default",
                      cost_claim=price(usage, "default") - 1) is Code.LOOKUP_COST_MISMATCH
