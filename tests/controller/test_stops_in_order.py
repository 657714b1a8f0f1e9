"""The stop policy reads slots in schedule order, whatever order they finish in
(``concurrency = N``): the same ends give the same stop at the same schedule position
as a concurrency-1 run."""

from __future__ import annotations

import itertools

import pytest

from efold.controller.campaigns.stops import InScheduleOrder, SlotEnd, StopPolicy
from efold.errors import Code

C, L, INV, A = SlotEnd.COMPLETED, SlotEnd.LOST, SlotEnd.INVALID, SlotEnd.OWN_ABORT


def _serial(ends: list[SlotEnd | None]) -> list[tuple[int, Code]]:
    policy = StopPolicy()
    return [(n, code) for n, end in enumerate(ends) if end is not None
            and (code := policy.slot_admitted_end(end)) is not None]


@pytest.mark.parametrize("ends", [
    [L, None, L, C],       # consecutive among admitted slots: an unadmitted one between
    [L, C, L, C],          # a completed slot between: never two in a row
    [L, A, L],             # an own abort neither counts nor resets
    [C] * 9 + [INV, INV],      # 2 invalid in 11 admitted: past 10%
    [C] * 10 + [INV],        # 1 in 11: not past it
])
def test_every_finishing_order_gives_the_serial_stop(ends: list[SlotEnd | None]) -> None:
    expected = _serial(ends)
    for order in itertools.permutations(range(len(ends))) if len(ends) <= 4 else [
            tuple(reversed(range(len(ends)))), tuple(range(len(ends)))]:
        reader = InScheduleOrder(StopPolicy())
        got = [stop for n in order for stop in reader.finish(n, ends[n])]
        assert got == expected, order


def test_a_loss_that_finished_early_waits_for_the_slots_before_it() -> None:
    policy = StopPolicy()
    reader = InScheduleOrder(policy)
    assert reader.finish(2, L) == []   # slots 0 and 1 still in flight
    assert reader.finish(1, L) == []   # still waiting for 0
    assert policy.admitted == 0
    assert reader.finish(0, C) == [(2, Code.LOOKUP_REPEATED_LOSS)]  # 1 and 2 are the pair
    assert policy.admitted == 3


def test_a_slot_finishes_once() -> None:
    reader = InScheduleOrder(StopPolicy())
    reader.finish(0, C)
    with pytest.raises(ValueError):
        reader.finish(0, C)
    reader.finish(2, C)
    with pytest.raises(ValueError):
        reader.finish(2, L)
