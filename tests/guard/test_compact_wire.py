"""The Responses compaction adapter over real HTTP (loopback), through the real guard.

The loopback server (``tests/kit/loopback_compact.py``) reproduces the documented
shapes of ``POST /v1/responses/compact``. Each case checks the outcome and code, the
hold (replaced by the catalog cost of the reported usage, or retained), and what
reached the server. These tests are the adapter's only run: it has not yet run
against the live service.
"""

from __future__ import annotations

from typing import Any

import efold_guard_kit as kit
import msgspec
import pytest
from loopback_compact import (
    CACHED_TOKENS,
    ENCRYPTED_PREFIX,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    REASONING_TOKENS,
    serve_compact,
)

from efold.errors import Code
from efold.guard import FAUX_BASE_URL, HttpTransport, OutcomeKind, WireApi, bundled_catalog
from efold.guard.compact import CompactGuard
from efold.guard.errors import GuardError
from efold.guard.testing import TestOnlyPermitSource
from efold.guard.transport import WireRequest, mint_ticket
from efold.guard.wire.compact_openai import (
    CompactBodyParser,
    check_compact_payload,
    compact_payload,
    compaction_item,
    reader_input_items,
)
from efold.guard.wire.faux import FauxTransport, faux_compaction
from efold.guard.wire.outcome import StreamEnd

# gpt-5 in units/token: input 25, cache read 2.5, output 200 (reasoning is output). The
# documented reply names no service tier: an absent tier is priced at twice (priority).
COST = 2 * ((INPUT_TOKENS - CACHED_TOKENS) * 25 + OUTPUT_TOKENS * 200)


def items(n: int = 4) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append({"type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": f"Owner turn {i}: " + "x" * 300}]})
        out.append({"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": f"Reply {i}: " + "y" * 300}]})
    return out


def compact_guard(base_url: str, source: TestOnlyPermitSource | None = None,
                  **changes: Any) -> tuple[CompactGuard, TestOnlyPermitSource]:
    entry = bundled_catalog().entry("openai", kit.REAL_MODEL)
    source = source if source is not None else TestOnlyPermitSource(entry=entry)
    contract = kit.http_contract(base_url, effort=None, **changes)
    guard = CompactGuard(contract, entry, source,
                         HttpTransport(base_url, credential=kit.CREDENTIAL), deadline_s=10.0)
    return guard, source


def test_documented_reply_settles_at_the_cost_of_its_usage() -> None:
    with serve_compact() as server:
        guard, source = compact_guard(server.base_url)
        sent = items()
        result = guard.request(compact_payload(kit.REAL_MODEL, sent))
    assert result.outcome is OutcomeKind.SETTLED and result.code is None
    [request] = server.requests
    assert request["path"] == "/v1/responses/compact"
    assert request["body"] == {"model": kit.REAL_MODEL, "input": sent}  # no stream, no store
    assert request["authorization"] == f"Bearer {kit.CREDENTIAL}"
    [record] = source.records
    assert record.settled_units == COST
    assert record.usage is not None and record.usage["output"] == OUTPUT_TOKENS
    assert record.usage["reasoning"] == REASONING_TOKENS
    kinds = [item["type"] for item in result.output_items]
    assert kinds == ["message"] * 4 + ["compaction"]
    assert result.output_items[-1]["encrypted_content"].startswith(ENCRYPTED_PREFIX)


@pytest.mark.parametrize(("mode", "kind", "code"), [
    ("missing_usage", OutcomeKind.LOST, Code.LOOKUP_MISSING_USAGE),
    ("null_usage", OutcomeKind.LOST, Code.LOOKUP_MISSING_USAGE),
    ("bad_usage", OutcomeKind.INTEGRITY_STOP, Code.LOOKUP_INVALID_USAGE),
    ("wrong_object", OutcomeKind.LOST, Code.LOOKUP_STREAM_LOST),
    ("unknown_item", OutcomeKind.LOST, Code.LOOKUP_STREAM_LOST),
    ("empty_encrypted", OutcomeKind.LOST, Code.LOOKUP_STREAM_LOST),
    ("not_json", OutcomeKind.LOST, Code.LOOKUP_STREAM_LOST),
    ("error_body", OutcomeKind.LOST, Code.LOOKUP_RESPONSE_FAILED),
    ("http_500", OutcomeKind.LOST, Code.LOOKUP_HTTP_STATUS),
])
def test_a_reply_off_the_documented_shape_never_settles(mode: str, kind: OutcomeKind,
                                                        code: Code) -> None:
    with serve_compact(mode) as server:
        guard, source = compact_guard(server.base_url)
        result = guard.request(compact_payload(kit.REAL_MODEL, items()))
    assert (result.outcome, result.code) == (kind, code)
    assert len(server.requests) == 1
    assert result.output_items == []  # nothing unsettled is usable
    [record] = source.records
    assert record.settled_units is None  # missing usage is not zero usage: hold kept
    assert record.charged_units == record.hold_units


def test_a_different_model_in_the_reply_stops() -> None:
    with serve_compact() as server:
        server.model = "gpt-4o"
        guard, _ = compact_guard(server.base_url)
        result = guard.request(compact_payload(kit.REAL_MODEL, items()))
    assert (result.outcome, result.code) == (OutcomeKind.INTEGRITY_STOP,
                                             Code.LOOKUP_MODEL_SWITCH_FORBIDDEN)


@pytest.mark.parametrize(("change", "code"), [
    ({"previous_response_id": "resp_0"}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"conversation": "conv_0"}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"stream": True}, Code.LOOKUP_OPTION_FORBIDDEN),
    ({"store": False}, Code.LOOKUP_OPTION_FORBIDDEN),
    ({"input": "just text"}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"input": [{"type": "input_image", "image_url": "http://x"}]},
     Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"model": "gpt-4o"}, Code.LOOKUP_MODEL_SWITCH_FORBIDDEN),
])
def test_the_allowlist_refuses_before_any_hold_or_send(change: dict[str, Any],
                                                       code: Code) -> None:
    with serve_compact() as server:
        guard, source = compact_guard(server.base_url)
        result = guard.request({**compact_payload(kit.REAL_MODEL, items()), **change})
    assert (result.outcome, result.code) == (OutcomeKind.REFUSED_PRE_SEND, code)
    assert server.requests == [] and source.records == []


@pytest.mark.parametrize("effort", [None, "high"])
def test_a_compaction_request_carries_no_effort_whatever_the_route(effort: str | None) -> None:
    contract = kit.http_contract("http://127.0.0.1:9/v1", effort=effort)
    shape = check_compact_payload(compact_payload(kit.REAL_MODEL, items(), "Keep ids."),
                                  contract, first_request=True)
    assert shape.input_items == 8 and shape.has_instructions
    with pytest.raises(GuardError) as raised:
        check_compact_payload({**compact_payload(kit.REAL_MODEL, items()),
                               "reasoning": {"effort": "high"}}, contract, first_request=True)
    assert raised.value.code is Code.LOOKUP_OPTION_FORBIDDEN


def test_a_chat_route_cannot_compact() -> None:
    entry = bundled_catalog().entry("openai", kit.REAL_MODEL)
    base = "http://127.0.0.1:9/v1"
    with pytest.raises(GuardError) as raised:
        CompactGuard(kit.http_contract(base, WireApi.OPENAI_CHAT, effort=None), entry,
                     TestOnlyPermitSource(entry=entry), HttpTransport(base))
    assert raised.value.code is Code.LOOKUP_ROUTE_MISMATCH


def test_compaction_item_is_read_strictly() -> None:
    good = {"type": "compaction", "id": "cmp_1", "encrypted_content": "e"}
    assert compaction_item(good) == good
    assert compaction_item({**good, "created_by": "user_1"}) is not None
    assert compaction_item({**good, "encrypted_content": ""}) is None
    assert compaction_item({**good, "encrypted_content": 7}) is None
    assert compaction_item({**good, "summary": []}) is None
    assert compaction_item({**good, "id": 1}) is None
    assert compaction_item({**good, "type": "reasoning"}) is None


def test_the_reader_gets_the_reply_items_without_output_only_keys() -> None:
    reply = [{"type": "message", "role": "user", "id": "msg_0", "status": "completed",
              "content": [{"type": "input_text", "text": "hi"}]},
             {"type": "compaction", "id": "cmp_1", "encrypted_content": "e",
              "created_by": "u"}]
    assert reader_input_items(reply) == [
        reply[0], {"type": "compaction", "encrypted_content": "e", "id": "cmp_1"}]


def test_the_body_parser_waits_for_the_whole_body() -> None:
    body = msgspec.json.encode({"object": "response.compaction", "output": [],
                                "usage": {"input_tokens": 1, "output_tokens": 0}})
    parser = CompactBodyParser()
    for i in range(len(body)):
        parser.feed(body[i:i + 1])
        assert not parser.done
    outcome = parser.finish()
    assert outcome.terminal is StreamEnd.COMPLETED and outcome.usage is not None


def test_the_faux_provider_plays_the_endpoint_deterministically() -> None:
    entry = bundled_catalog().entry("faux", kit.FAUX_MODEL)
    replies = []
    for sent in (items(), items(), items(3)):
        source = TestOnlyPermitSource(entry=entry)
        transport = FauxTransport(kit.answer, compactor=faux_compaction)
        guard = CompactGuard(kit.faux_contract(effort=None), entry, source, transport)
        result = guard.request(compact_payload(kit.FAUX_MODEL, sent))
        assert result.outcome is OutcomeKind.SETTLED and transport.sends == 1
        assert source.records[0].settled_units is not None
        replies.append(result.output_items)
    assert replies[0] == replies[1] != replies[2]
    assert [i["role"] for i in replies[0] if i["type"] == "message"] == ["user"] * 4


def test_the_faux_provider_without_a_compactor_refuses_the_endpoint() -> None:
    transport = FauxTransport(kit.answer)
    request = WireRequest(path="/responses/compact", body=b"{}", stream=True, deadline_s=1.0)
    with pytest.raises(GuardError) as raised:
        transport.open(mint_ticket("p"), request)
    assert raised.value.code is Code.LOOKUP_ROUTE_MISMATCH
    assert transport.route == FAUX_BASE_URL
