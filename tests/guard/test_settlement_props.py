"""Settlement properties: whenever settlement passes its checks, cost <= hold; and with
the hold at Rmax, usage that passes the usage checks can never exceed it."""

from __future__ import annotations

import decimal

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from efold.errors import Code
from efold.guard import (
    INPUT_ENVELOPE,
    MAX_OUTPUT,
    OutcomeKind,
    UsageRecord,
    WireApi,
    parse_catalog,
    price_units,
    rmax_units,
)
from efold.guard.contract import Contract
from efold.guard.settlement import settle_wire
from efold.guard.usage import usage_problem
from efold.guard.wire import StreamEnd, WireOutcome

CONTRACT = Contract(provider="p", model="m", api=WireApi.OPENAI_RESPONSES,
                    base_url="http://127.0.0.1:1/v1", effort=None)

rates = st.decimals(min_value=0, max_value=100, places=4, allow_nan=False,
                    allow_infinity=False)
tiers = st.sampled_from(["default", "flex", "priority", None])


def _entry(r: tuple[decimal.Decimal, ...],  # type: ignore[no-untyped-def]
           service_tiers: bool | None = None):
    text = (f'version = 1\n[[model]]\nprovider = "p"\nmodel = "m"\ninput = "{r[0]}"\n'
            f'output = "{r[1]}"\ncache_read = "{r[2]}"\ncache_write = "{r[3]}"\n')
    if service_tiers is not None:
        text += f"service_tiers = {str(service_tiers).lower()}\n"
    return parse_catalog(text.encode()).entry("p", "m")


@st.composite
def usages(draw: st.DrawFn) -> UsageRecord:
    inp = draw(st.integers(min_value=0, max_value=INPUT_ENVELOPE + 10))
    out = draw(st.integers(min_value=0, max_value=MAX_OUTPUT + 10))
    return UsageRecord(
        input=inp,
        output=out,
        cache_read=draw(st.none() | st.integers(min_value=0, max_value=inp + 5)),
        cache_write=draw(st.none() | st.integers(min_value=0, max_value=inp + 5)),
        reasoning=draw(st.none() | st.integers(min_value=0, max_value=out + 5)),
    )


@settings(max_examples=300, deadline=None)
@given(r=st.tuples(rates, rates, rates, rates), usage=usages(), tier=tiers,
       budget=st.integers(min_value=1, max_value=INPUT_ENVELOPE),
       hold=st.integers(min_value=0, max_value=200_000_000),
       payload=st.integers(min_value=0, max_value=INPUT_ENVELOPE),
       service_tiers=st.sampled_from([None, True, False]))
def test_settled_cost_never_exceeds_the_hold(r: tuple[decimal.Decimal, ...], usage: UsageRecord,
                                             tier: str | None, budget: int, hold: int,
                                             payload: int, service_tiers: bool | None) -> None:
    entry = _entry(r, service_tiers)
    outcome = WireOutcome(terminal=StreamEnd.COMPLETED, usage=usage, tier=tier, model="m")
    decision = settle_wire(outcome, hold_units=hold, input_budget=budget, payload_bytes=payload,
                           contract=CONTRACT, entry=entry)
    if decision.kind is OutcomeKind.SETTLED:
        assert decision.cost_units is not None and decision.cost_units <= hold
        assert decision.cost_units == price_units(entry, usage.counts(), tier)
    else:
        assert decision.kind is OutcomeKind.INTEGRITY_STOP and decision.code is not None


@settings(max_examples=300, deadline=None)
@given(r=st.tuples(rates, rates, rates, rates), usage=usages(), tier=tiers,
       service_tiers=st.sampled_from([None, True, False]))
def test_usage_passing_its_checks_fits_within_rmax(r: tuple[decimal.Decimal, ...],
                                                   usage: UsageRecord, tier: str | None,
                                                   service_tiers: bool | None) -> None:
    entry = _entry(r, service_tiers)
    assume(usage_problem(usage.counts(), input_limit=INPUT_ENVELOPE, max_output=MAX_OUTPUT,
                         payload_bytes=1, settling=True) is None)
    hold = rmax_units(entry)
    decision = settle_wire(WireOutcome(terminal=StreamEnd.COMPLETED, usage=usage, tier=tier,
                                       model="m"),
                           hold_units=hold, input_budget=INPUT_ENVELOPE, payload_bytes=1,
                           contract=CONTRACT, entry=entry)
    # The registered assumptions imply the reservation suffices: never cost > hold.
    assert decision.kind is OutcomeKind.SETTLED
    assert decision.code is not Code.LOOKUP_COST_EXCEEDS_HOLD
    assert decision.cost_units is not None and decision.cost_units <= hold


def test_the_bound_is_tight_at_the_envelope() -> None:
    entry = _entry((decimal.Decimal(2), decimal.Decimal(10), decimal.Decimal("0.1"),
                    decimal.Decimal("2.5")))
    worst = UsageRecord(input=INPUT_ENVELOPE, output=MAX_OUTPUT, cache_write=INPUT_ENVELOPE)
    assert price_units(entry, worst.counts(), None) == rmax_units(entry) == 78_400_000
