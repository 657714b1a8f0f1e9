"""The history store (SQLite FTS5) behind the lookup tool: search, get, pages, cursors."""

from __future__ import annotations

import json
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from efold.errors import Code
from efold.folds.checkpoint import HistoryRecord, RetainedStore
from efold.folds.errors import FoldError
from efold.folds.lookup import LookupTool, lookup_tool_schemas
from efold.folds.meter import Meter
from efold.folds.retention import retain
from efold.folds.store import PAGE_BYTES, HistoryStore, split_pages
from efold.folds.transcript import session_transcript


def _record(seq: int, text: str, kind: str = "email") -> HistoryRecord:
    return HistoryRecord(id=f"e{seq:04d}", seq=seq, role="tool", kind=kind, session=1, day=1, text=text)


@pytest.fixture
def store(make_filler) -> HistoryStore:
    long_text = make_filler(20_000, "p1") + "\nBooking ref: BK-Q2M8-884\n" + make_filler(6_000, "p2")
    records = [
        _record(1, "Account reference: ACC-7F3K-219\nthe vendor portal"),
        _record(2, long_text, "document"),
        *[_record(10 + i, f"Crate manifest {i}: pallet ledger lines") for i in range(25)],
    ]
    built = HistoryStore.build(RetainedStore(records=records, omitted_credential=2))
    yield built
    built.close()


def _call(tool: LookupTool, name: str, **arguments: object) -> dict:
    return json.loads(tool.call(name, json.dumps(arguments)))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30_000))
def test_pages_are_bounded_and_reassemble(text):
    pages = split_pages(text)
    assert "".join(pages) == text
    assert all(len(p.encode("utf-8")) <= PAGE_BYTES for p in pages)
    assert all(p for p in pages) or text == ""


def test_pages_never_split_a_multibyte_character():
    text = "a" * (PAGE_BYTES - 1) + "€" + "b"  # the euro sign straddles the page edge
    pages = split_pages(text)
    assert pages[0] == "a" * (PAGE_BYTES - 1) and pages[1] == "€b"


def test_search_finds_an_identifier_as_a_phrase(store):
    tool = LookupTool(store)
    found = _call(tool, "history_search", query="ACC-7F3K-219")
    assert [hit["id"] for hit in found["results"]] == ["e0001"]
    assert found["next_cursor"] is None
    hit = found["results"][0]
    assert hit["pages"] == 1 and hit["bytes"] == len(store.record("e0001").text.encode())


def test_search_paginates_with_a_cursor_bound_to_the_query(store):
    tool = LookupTool(store, Meter(call_budget=100, byte_budget=10**9))
    seen: list[str] = []
    page = _call(tool, "history_search", query="pallet", limit=10)
    while True:
        seen += [hit["id"] for hit in page["results"]]
        if page["next_cursor"] is None:
            break
        page = _call(tool, "history_search", query="pallet", limit=10, cursor=page["next_cursor"])
    assert len(seen) == len(set(seen)) == 25
    # the same cursor with another query is refused
    first = _call(tool, "history_search", query="pallet", limit=10)
    other = _call(tool, "history_search", query="crate", limit=10, cursor=first["next_cursor"])
    assert other["error"]["code"] == Code.HISTORY_CURSOR_INVALID


def test_get_traverses_every_page_with_cursors(store):
    tool = LookupTool(store)
    record = store.record("e0002")
    pages: list[str] = []
    response = _call(tool, "history_get", id="e0002")
    while True:
        pages.append(response["text"])
        assert response["page"] == len(pages) and response["pages"] == 4
        if response["next_cursor"] is None:
            break
        response = _call(tool, "history_get", id="e0002", cursor=response["next_cursor"])
    assert "".join(pages) == record.text
    assert "BK-Q2M8-884" in pages[2]  # past the first 16 KiB: only a traversal reaches it


@pytest.mark.parametrize(
    ("name", "arguments", "code"),
    [
        ("history_search", {"query": "pallet", "limit": 11}, Code.HISTORY_ARGUMENTS_INVALID),
        ("history_search", {"query": "pallet", "limit": 0}, Code.HISTORY_ARGUMENTS_INVALID),
        ("history_search", {"query": "-- ..."}, Code.HISTORY_QUERY_INVALID),
        ("history_search", {"query": "pallet", "extra": 1}, Code.HISTORY_ARGUMENTS_INVALID),
        ("history_get", {"id": "e9999"}, Code.HISTORY_RECORD_UNKNOWN),
        ("history_get", {"id": "e0002", "cursor": "g.forged.0000"}, Code.HISTORY_CURSOR_INVALID),
        ("history_delete", {"id": "e0002"}, Code.HISTORY_TOOL_UNKNOWN),
    ],
)
def test_reader_mistakes_become_fixed_error_objects(store, name, arguments, code):
    tool = LookupTool(store)
    response = _call(tool, name, **arguments)
    assert response == {"error": {"code": code.value, "message": response["error"]["message"]}}
    witness = tool.witness()
    assert witness.calls == 1 and witness.entries[0].code == code.value  # charged like any response


def test_malformed_json_arguments_are_an_error_object(store):
    tool = LookupTool(store)
    assert json.loads(tool.call("history_get", "{not json"))["error"]["code"] == Code.HISTORY_ARGUMENTS_INVALID


def test_a_cursor_is_bound_to_its_record_and_its_store(store, make_filler):
    tool = LookupTool(store)
    first = _call(tool, "history_get", id="e0002")
    wrong_record = _call(tool, "history_get", id="e0001", cursor=first["next_cursor"])
    assert wrong_record["error"]["code"] == Code.HISTORY_CURSOR_INVALID
    other_records = [_record(2, make_filler(20_000, "zz"), "document")]
    other = HistoryStore.build(RetainedStore(records=other_records, omitted_credential=0))
    try:
        foreign = _call(LookupTool(other), "history_get", id="e0002", cursor=first["next_cursor"])
        assert foreign["error"]["code"] == Code.HISTORY_CURSOR_INVALID
    finally:
        other.close()


def test_store_image_round_trips_read_only(store):
    restored = HistoryStore.from_bytes(store.to_bytes())
    try:
        assert restored.retained() == store.retained()
        assert restored.retained().omitted_credential == 2
        with pytest.raises(sqlite3.OperationalError):  # query_only: it cannot be written
            restored._db.execute("DELETE FROM records")
    finally:
        restored.close()


def test_a_non_store_image_is_refused():
    with pytest.raises(FoldError) as refused:
        HistoryStore.from_bytes(b"not a database" * 100)
    assert refused.value.code is Code.HISTORY_STORE_INVALID


def test_schemas_are_function_tools_in_responses_shape():
    schemas = lookup_tool_schemas()
    assert [s["name"] for s in schemas] == ["history_search", "history_get"]
    assert all(s["type"] == "function" and s["parameters"]["type"] == "object" for s in schemas)
    assert schemas[0]["parameters"]["properties"]["limit"]["maximum"] == 10
    schemas[0]["name"] = "mutated"
    assert lookup_tool_schemas()[0]["name"] == "history_search"  # copies, not shared state


def test_retained_store_searches_owner_and_tool_records(synthetic):
    t = synthetic()
    t.owner("Rule: never mention the funding review to any counterparty.")
    t.tool("Lease number: LSE-FR4N-813")
    store = HistoryStore.build(retain(session_transcript(t.events)))
    try:
        tool = LookupTool(store)
        kinds = {hit["kind"] for hit in _call(tool, "history_search", query="funding review")["results"]}
        assert kinds == {"owner"}
        with pytest.raises(FoldError):
            store.search("   ", limit=5, offset=0)
    finally:
        store.close()
