"""The lookup meter: 8 calls, 126,976 bytes, charged before delivery, withheld whole."""

from __future__ import annotations

import json

import pytest

from efold.errors import Code
from efold.folds.checkpoint import HistoryRecord, RetainedStore
from efold.folds.errors import FoldError
from efold.folds.lookup import LookupTool
from efold.folds.meter import LOOKUP_BYTE_BUDGET, LOOKUP_CALL_BUDGET, Meter, MeterState
from efold.folds.store import HistoryStore


def test_frozen_budgets():
    assert (LOOKUP_CALL_BUDGET, LOOKUP_BYTE_BUDGET) == (8, 126_976)
    meter = Meter()
    assert (meter.call_budget, meter.byte_budget) == (8, 126_976)


def test_exactly_on_the_byte_budget_is_delivered():
    meter = Meter()
    meter.reserve_call("history_get")
    meter.deliver("history_get", b"x" * LOOKUP_BYTE_BUDGET)
    assert meter.bytes == LOOKUP_BYTE_BUDGET and meter.state is MeterState.OPEN


def test_one_byte_over_is_withheld_whole_and_aborts():
    meter = Meter()
    meter.reserve_call("history_get")
    meter.deliver("history_get", b"x" * (LOOKUP_BYTE_BUDGET - 10))
    meter.reserve_call("history_get")
    with pytest.raises(FoldError) as over:
        meter.deliver("history_get", b"y" * 11)
    assert over.value.code is Code.METER_BYTES_EXHAUSTED
    assert meter.bytes == LOOKUP_BYTE_BUDGET - 10  # nothing of the withheld response charged
    assert meter.state is MeterState.ABORTED
    with pytest.raises(FoldError) as later:
        meter.reserve_call("history_search")
    assert later.value.code is Code.METER_BYTES_EXHAUSTED  # the same explicit cause
    witness = meter.witness()
    assert witness.abort_cause == "meter_bytes_exhausted" and witness.refused_after_abort == 1
    assert [e.delivered for e in witness.entries] == [True, False]


def test_the_ninth_call_is_refused_before_dispatch():
    meter = Meter()
    for _ in range(8):
        meter.reserve_call("history_search")
        meter.deliver("history_search", b"{}")
    with pytest.raises(FoldError) as ninth:
        meter.reserve_call("history_search")
    assert ninth.value.code is Code.METER_CALLS_EXHAUSTED
    assert meter.calls == 8 and meter.witness().abort_cause == "meter_calls_exhausted"


@pytest.fixture
def tool_factory():
    text = "Crate manifest line\n" * 400  # ~8 KB: one full page
    records = [
        HistoryRecord(id=f"e{i:04d}", seq=i, role="tool", kind="document", session=1, day=1, text=text)
        for i in range(1, 4)
    ]
    stores: list[HistoryStore] = []

    def make(meter: Meter) -> LookupTool:
        store = HistoryStore.build(RetainedStore(records=records, omitted_credential=0))
        stores.append(store)
        return LookupTool(store, meter)

    yield make
    for store in stores:
        store.close()


def _sizes(tool_factory) -> list[int]:
    probe = tool_factory(Meter(call_budget=10, byte_budget=10**9))
    return [len(probe.call("history_get", json.dumps({"id": f"e{i:04d}"})).encode()) for i in (1, 2)]


def test_lookup_tool_delivers_a_response_that_lands_exactly_on_budget(tool_factory):
    sizes = _sizes(tool_factory)
    tool = tool_factory(Meter(byte_budget=sum(sizes)))
    second = [tool.call("history_get", json.dumps({"id": f"e{i:04d}"})) for i in (1, 2)][1]
    assert "error" not in json.loads(second)
    assert tool.witness().bytes == sum(sizes) and tool.witness().state == MeterState.OPEN


def test_lookup_tool_withholds_a_response_one_byte_over(tool_factory):
    sizes = _sizes(tool_factory)
    tool = tool_factory(Meter(byte_budget=sum(sizes) - 1))
    tool.call("history_get", json.dumps({"id": "e0001"}))
    second = json.loads(tool.call("history_get", json.dumps({"id": "e0002"})))
    assert second["error"]["code"] == "meter_bytes_exhausted"
    assert "Crate" not in json.dumps(second)  # withheld whole, never clipped
    after = json.loads(tool.call("history_get", json.dumps({"id": "e0003"})))
    assert after["error"]["code"] == "meter_bytes_exhausted"
    witness = tool.witness()
    assert witness.calls == 2 and witness.bytes == sizes[0] and witness.refused_after_abort == 1


def test_lookup_tool_refuses_the_ninth_call(tool_factory):
    tool = tool_factory(Meter())
    answers = [json.loads(tool.call("history_search", json.dumps({"query": "manifest", "limit": 1}))) for _ in range(9)]
    assert all("results" in a for a in answers[:8])
    assert answers[8]["error"]["code"] == "meter_calls_exhausted"
    assert tool.witness().calls == 8


def test_meters_are_fresh_per_tool(tool_factory):
    first = tool_factory(Meter())
    for _ in range(8):
        first.call("history_search", json.dumps({"query": "manifest"}))
    second = tool_factory(Meter())
    assert "results" in json.loads(second.call("history_search", json.dumps({"query": "manifest"})))
