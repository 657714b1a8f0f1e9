"""The Anthropic Messages adapters over real HTTP (loopback), through the real guard.

The loopback server (``tests/kit/loopback_messages.py``) reproduces the documented
shapes of ``POST /v1/messages``: a reader's streamed or JSON reply, and the on-demand
compaction reply whose cost is reported only in ``usage.iterations``. Each case checks
the outcome and code, the hold (replaced by the catalog cost of the reported usage, or
retained), and what reached the server: the ``x-api-key`` credential and never an
``authorization`` header, the API version always, the compaction beta flag only where a
compaction block or request is sent. These tests are the adapters' only run: they have
not run against the live service.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import efold_guard_kit as kit
import pytest
from loopback_messages import (
    CACHE_READ_TOKENS,
    CACHE_WRITE_TOKENS,
    COMPACT_INPUT_TOKENS,
    COMPACT_OUTPUT_TOKENS,
    CREDENTIAL,
    ECHO,
    INPUT_TOKENS,
    MODEL,
    OUTPUT_TOKENS,
    SAW_COMPACTION,
    SIGNATURE_PREFIX,
    SUMMARY_PREFIX,
    UNITS_PER_TOKEN,
    catalog_entry,
    contract,
    conversation,
    reader_payload,
    serve_messages,
)

from efold.errors import Code
from efold.guard import Guard, HttpTransport, OutcomeKind, bundled_catalog
from efold.guard.compact import CompactGuard
from efold.guard.pricing import price_units
from efold.guard.testing import TestOnlyPermitSource
from efold.guard.wire.compact_anthropic import (
    ANTHROPIC_COMPACT_BETA,
    compact_messages_payload,
    reader_messages,
)
from efold.guard.wire.compact_openai import compact_payload
from efold.guard.wire.messages_payload import ANTHROPIC_VERSION

S, L, STOP = OutcomeKind.SETTLED, OutcomeKind.LOST, OutcomeKind.INTEGRITY_STOP
U = UNITS_PER_TOKEN
# A reader reply (standard tier, x1): uncached input, cache writes and reads, output.
READER_COST = (INPUT_TOKENS * U["input"] + CACHE_WRITE_TOKENS * U["cache_write"]
               + CACHE_READ_TOKENS * U["cache_read"] + OUTPUT_TOKENS * U["output"])
# The compaction reply: its top-level counts are zero; the one iteration is billed.
COMPACT_COST = COMPACT_INPUT_TOKENS * U["input"] + COMPACT_OUTPUT_TOKENS * U["output"]


def guard(base_url: str, *, compact: bool = False, source: TestOnlyPermitSource | None = None,
          **changes: Any) -> tuple[Guard, TestOnlyPermitSource]:
    entry = catalog_entry()
    source = source if source is not None else TestOnlyPermitSource(entry=entry)
    cls = CompactGuard if compact else Guard
    made = cls(contract(base_url, **changes), entry, source,
               HttpTransport(base_url, credential=CREDENTIAL), deadline_s=10.0)
    return made, source


def assert_sent_as_messages(request: dict[str, Any], *, beta: bool, accept: str) -> None:
    headers = request["headers"]
    assert request["path"] == "/v1/messages"
    assert headers["x-api-key"] == CREDENTIAL
    assert "authorization" not in headers
    assert headers["anthropic-version"] == ANTHROPIC_VERSION
    assert headers.get("anthropic-beta") == (ANTHROPIC_COMPACT_BETA if beta else None)
    assert headers["accept"] == accept
    assert headers["content-type"] == "application/json"


def test_the_costs_are_the_catalog_prices_of_the_documented_counts() -> None:
    entry = catalog_entry()
    reader = {"input": INPUT_TOKENS + CACHE_WRITE_TOKENS + CACHE_READ_TOKENS,
              "output": OUTPUT_TOKENS, "cache_write": CACHE_WRITE_TOKENS,
              "cache_read": CACHE_READ_TOKENS}
    assert price_units(entry, reader, "default") == READER_COST
    compaction = {"input": COMPACT_INPUT_TOKENS, "output": COMPACT_OUTPUT_TOKENS}
    assert price_units(entry, compaction, "default") == COMPACT_COST


@pytest.mark.parametrize("stream", [True, False])
def test_a_reader_request_settles_at_the_cost_of_its_usage(stream: bool) -> None:
    with serve_messages() as server:
        made, source = guard(server.base_url, stream=stream)
        payload = reader_payload(stream=stream)
        result = made.request(payload)
    assert (result.outcome, result.code) == (S, None)
    [request] = server.requests
    assert_sent_as_messages(request, beta=False,
                            accept="text/event-stream" if stream else "application/json")
    assert request["body"] == payload
    [record] = source.records
    assert record.settled_units == result.cost_units == READER_COST
    assert record.usage == {"input": 1500, "output": 90, "cache_read": 500, "cache_write": 300}
    assert (result.tier, record.tier) == ("default", "default")
    [item] = result.output_items
    assert item["content"][0]["text"].startswith(ECHO)
    assert CREDENTIAL not in repr(made.__dict__) and CREDENTIAL not in repr(source.records)


@pytest.mark.parametrize("stream", [True, False])
def test_a_tool_call_then_its_result(stream: bool) -> None:
    with serve_messages("tool_calls") as server:
        made, _ = guard(server.base_url, stream=stream)
        first = made.request(reader_payload(stream=stream))
        assert first.ok
        message, call = first.output_items
        assert (call["type"], call["call_id"], call["name"]) == ("function_call", "toolu_01",
                                                                 "history_get")
        assert json.loads(call["arguments"]) == {"id": "rec-7"}
        follow_up = [
            {"role": "user", "content": kit.QUESTION},
            {"role": "assistant", "content": [
                {"type": "text", "text": message["content"][0]["text"]},
                {"type": "tool_use", "id": call["call_id"], "name": call["name"],
                 "input": json.loads(call["arguments"])}]},
            {"role": "user", "content": [{"type": "tool_result",
                                          "tool_use_id": call["call_id"],
                                          "content": "rec-7: ships Tuesday"}]},
        ]
        second = made.request(reader_payload(stream=stream, messages=follow_up))
    assert second.ok and second.output_items[0]["content"][0]["text"].startswith(ECHO)
    assert made.prior_output_tokens == 2 * OUTPUT_TOKENS
    assert len(server.requests) == 2


@pytest.mark.parametrize(("mode", "stream", "kind", "code"), [
    ("missing_usage", True, L, Code.LOOKUP_MISSING_USAGE),
    ("null_usage", True, L, Code.LOOKUP_MISSING_USAGE),
    ("bad_usage", True, STOP, Code.LOOKUP_INVALID_USAGE),
    ("decreasing_usage", True, STOP, Code.LOOKUP_INVALID_USAGE),
    ("error_event", True, L, Code.LOOKUP_RESPONSE_FAILED),
    ("cut_stream", True, L, Code.LOOKUP_STREAM_LOST),
    ("not_json", True, L, Code.LOOKUP_STREAM_LOST),
    ("http_500", True, L, Code.LOOKUP_HTTP_STATUS),
    ("duplicate_usage", True, STOP, Code.LOOKUP_RESPONSE_DUPLICATE_KEY),
    ("no_model", True, STOP, Code.LOOKUP_MODEL_UNREPORTED),
    ("duplicate_usage", False, STOP, Code.LOOKUP_RESPONSE_DUPLICATE_KEY),
    ("no_model", False, STOP, Code.LOOKUP_MODEL_UNREPORTED),
    ("missing_usage", False, L, Code.LOOKUP_MISSING_USAGE),
    ("null_usage", False, L, Code.LOOKUP_MISSING_USAGE),
    ("bad_usage", False, STOP, Code.LOOKUP_INVALID_USAGE),
    ("error_body", False, L, Code.LOOKUP_RESPONSE_FAILED),
    ("not_json", False, L, Code.LOOKUP_STREAM_LOST),
])
def test_a_reader_reply_off_the_documented_shape_never_settles(
        mode: str, stream: bool, kind: OutcomeKind, code: Code) -> None:
    with serve_messages(mode) as server:
        made, source = guard(server.base_url, stream=stream)
        result = made.request(reader_payload(stream=stream))
    assert (result.outcome, result.code) == (kind, code)
    assert len(server.requests) == 1 and result.output_items == []
    [record] = source.records
    assert record.settled_units is None
    assert record.charged_units >= record.hold_units  # the hold (or a larger partial) kept
    if kind is STOP:
        assert made.stopped is code and source.stops == [code]
    else:
        assert made.terminal is code and made.stopped is None


def test_a_reply_from_another_model_stops() -> None:
    with serve_messages() as server:
        server.model = "claude-opus-4-6"
        made, _ = guard(server.base_url)
        result = made.request(reader_payload())
    assert (result.outcome, result.code) == (STOP, Code.LOOKUP_MODEL_SWITCH_FORBIDDEN)


@pytest.mark.parametrize(("tier", "kind", "code", "cost"), [
    ("batch", S, None, READER_COST // 2),
    ("priority", S, None, 2 * READER_COST),
    (None, S, None, 2 * READER_COST),  # absent: priced at the maximum
    ("enterprise", STOP, Code.LOOKUP_UNKNOWN_TIER, 2 * READER_COST),
])
def test_the_reported_tier_prices_the_request(tier: str | None, kind: OutcomeKind,
                                              code: Code | None, cost: int) -> None:
    with serve_messages() as server:
        server.tier = tier
        made, _ = guard(server.base_url, stream=False)
        result = made.request(reader_payload(stream=False))
    assert (result.outcome, result.code, result.cost_units) == (kind, code, cost)


def test_the_allowlist_refuses_before_any_hold_or_send() -> None:
    with serve_messages() as server:
        made, source = guard(server.base_url)
        result = made.request(reader_payload(context_management={"edits": []}))
    assert (result.outcome, result.code) == (OutcomeKind.REFUSED_PRE_SEND,
                                             Code.LOOKUP_PAYLOAD_FORBIDDEN)
    assert server.requests == [] and source.records == []


# -- on-demand compaction -------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_a_compaction_settles_at_the_priced_iteration_sums(stream: bool) -> None:
    head = conversation()
    with serve_messages() as server:
        made, source = guard(server.base_url, compact=True, stream=stream)
        payload = compact_messages_payload(MODEL, head, 4096, instructions="Keep ids.")
        result = made.request(payload)
        assert (result.outcome, result.code) == (S, None)
        [request] = server.requests
        # Not streamed whatever the route: the request asks for JSON.
        assert_sent_as_messages(request, beta=True, accept="application/json")
        assert request["body"] == payload
        [record] = source.records
        assert record.settled_units == result.cost_units == COMPACT_COST
        assert record.usage == {"input": COMPACT_INPUT_TOKENS, "output": COMPACT_OUTPUT_TOKENS}
        [block] = result.output_items
        assert block["content"].startswith(SUMMARY_PREFIX) and "Owner turn 2." in block["content"]
        assert block["signature"] == SIGNATURE_PREFIX + hashlib.sha256(
            json.dumps(head, sort_keys=True).encode()).hexdigest()

        # A reader on the same route reads the block first, with the beta flag.
        reader, _ = guard(server.base_url, stream=stream)
        messages = [*reader_messages(result.output_items),
                    {"role": "user", "content": kit.QUESTION}]
        answer = reader.request(reader_payload(stream=stream, messages=messages))
        assert answer.ok
        assert answer.output_items[0]["content"][0]["text"] == (
            f"{SAW_COMPACTION} {block['signature']}")
        sent = server.requests[1]
        assert_sent_as_messages(sent, beta=True,
                                accept="text/event-stream" if stream else "application/json")
        assert sent["body"]["messages"][0] == {"role": "assistant", "content": [block]}


@pytest.mark.parametrize(("mode", "kind", "code"), [
    ("missing_usage", L, Code.LOOKUP_MISSING_USAGE),
    ("null_usage", L, Code.LOOKUP_MISSING_USAGE),
    ("no_iterations", L, Code.LOOKUP_MISSING_USAGE),  # top-level zeros are not free
    ("bad_usage", STOP, Code.LOOKUP_INVALID_USAGE),
    ("top_above_iterations", STOP, Code.LOOKUP_INVALID_USAGE),
    ("two_blocks", L, Code.LOOKUP_STREAM_LOST),
    ("empty_content", L, Code.LOOKUP_STREAM_LOST),
    ("not_json", L, Code.LOOKUP_STREAM_LOST),
    ("error_body", L, Code.LOOKUP_RESPONSE_FAILED),
    ("http_500", L, Code.LOOKUP_HTTP_STATUS),
])
def test_a_compaction_reply_off_the_documented_shape_never_settles(
        mode: str, kind: OutcomeKind, code: Code) -> None:
    with serve_messages(mode) as server:
        made, source = guard(server.base_url, compact=True)
        result = made.request(compact_messages_payload(MODEL, conversation(), 4096))
    assert (result.outcome, result.code) == (kind, code)
    assert len(server.requests) == 1 and result.output_items == []
    [record] = source.records
    assert record.settled_units is None  # missing usage is not zero usage: hold kept
    assert record.charged_units == record.hold_units


def test_a_compaction_payload_refuses_on_the_plain_reader_guard() -> None:
    with serve_messages() as server:
        made, source = guard(server.base_url, stream=False)
        result = made.request(compact_messages_payload(MODEL, conversation(), 4096))
    assert (result.outcome, result.code) == (OutcomeKind.REFUSED_PRE_SEND,
                                             Code.LOOKUP_PAYLOAD_FORBIDDEN)
    assert server.requests == [] and source.records == []


def test_the_compaction_guard_refuses_a_reader_payload() -> None:
    with serve_messages() as server:
        made, source = guard(server.base_url, compact=True, stream=False)
        result = made.request(reader_payload(stream=False))
    assert result.outcome is OutcomeKind.REFUSED_PRE_SEND
    assert server.requests == [] and source.records == []


def test_the_openai_compaction_request_asks_for_json_with_a_bearer_credential() -> None:
    with serve_messages() as server:  # records every request's headers, any path
        openai = kit.http_contract(server.base_url, effort=None)
        entry = bundled_catalog().entry("openai", kit.REAL_MODEL)
        made = CompactGuard(openai, entry, TestOnlyPermitSource(entry=entry),
                            HttpTransport(server.base_url, credential=kit.CREDENTIAL),
                            deadline_s=10.0)
        made.request(compact_payload(kit.REAL_MODEL, [
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "hi"}]}]))
    [request] = server.requests
    assert request["path"] == "/v1/responses/compact"
    headers = request["headers"]
    assert headers["accept"] == "application/json"
    assert headers["authorization"] == f"Bearer {kit.CREDENTIAL}"
    assert "x-api-key" not in headers and "anthropic-version" not in headers
