"""The Anthropic Messages wire format, offline: the payload allowlists (reader and
on-demand compaction), the headers, and the parsers, fed whole and byte by byte.

The usage reader is the money rule of this API: efold's input includes both cache
counts, ``iterations`` (when present) are what is billed, a top-level count above its
sum is inconsistent, and every hostile figure is invalid, never zero.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest
from loopback_messages import (
    COMPACT_INPUT_TOKENS,
    COMPACT_OUTPUT_TOKENS,
    HISTORY_GET,
    MODEL,
    MessagesServer,
    compaction_reply,
    contract,
    conversation,
    reader_json,
    reader_payload,
    reader_sse,
    summary_block,
)

from efold.errors import Code
from efold.guard import WireApi
from efold.guard.errors import GuardError
from efold.guard.permits import UsageRecord
from efold.guard.transport import WireRequest
from efold.guard.wire import MESSAGES, wire_format
from efold.guard.wire.compact_anthropic import (
    ANTHROPIC_COMPACT_BETA,
    COMPACT_MESSAGES,
    MAX_INSTRUCTIONS_CHARS,
    CompactMessagesBodyParser,
    check_compact_messages_payload,
    compact_messages_payload,
    compaction_block,
    reader_messages,
)
from efold.guard.wire.compact_openai import COMPACT
from efold.guard.wire.messages_payload import (
    ANTHROPIC_VERSION,
    check_messages_payload,
    messages_headers,
)
from efold.guard.wire.messages_stream import (
    MessagesBodyParser,
    MessagesStreamParser,
    read_messages_tier,
    read_messages_usage,
)
from efold.guard.wire.outcome import UNREADABLE_TIER, StreamEnd, WireOutcome, WireParser

BASE = "http://127.0.0.1:9/v1"
STREAMING = contract(BASE)
BLOCK = {"type": "compaction", "content": "Summary of the head.", "signature": "sig-1"}


def check(payload: dict[str, Any], **changes: Any) -> Any:
    return check_messages_payload(payload, contract(BASE, **changes), first_request=True)


def refused(payload: Any, code: Code, **changes: Any) -> None:
    with pytest.raises(GuardError) as raised:
        check(payload, **changes)
    assert raised.value.code is code, raised.value.detail


def replayed() -> list[dict[str, Any]]:
    """A conversation that replays a tool call and its result."""
    return [
        {"role": "user", "content": [{"type": "text", "text": "Find rec-7."}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "toolu_1", "name": "email_read", "input": {"id": "7"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "rec-7: Tuesday"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
             "content": [{"type": "text", "text": "not found"}]}]},
        {"role": "user", "content": "And then?"},
    ]


# -- the reader allowlist -------------------------------------------------------------


def test_a_reader_payload_passes_and_counts_its_shape() -> None:
    shape = check(reader_payload())
    assert (shape.input_items, shape.reasoning_items, shape.tools) == (1, 0, 1)
    assert shape.schema_properties == 1 and shape.has_instructions
    shape = check(reader_payload(stream=False, system=[{"type": "text", "text": "Hi."}],
                                 messages=replayed()), stream=False)
    assert shape.input_items == 4 and shape.has_instructions
    bare = {"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "q"}]}
    assert not check(bare, stream=False).has_instructions


def test_the_effort_rides_in_output_config_exactly_when_the_contract_sets_one() -> None:
    with_effort = reader_payload(output_config={"effort": "high"})
    check(with_effort, effort="high")
    refused(reader_payload(), Code.LOOKUP_ROUTE_MISMATCH, effort="high")
    refused(with_effort, Code.LOOKUP_ROUTE_MISMATCH)
    refused(reader_payload(output_config={"effort": "low"}), Code.LOOKUP_ROUTE_MISMATCH,
            effort="high")
    refused(reader_payload(output_config={}), Code.LOOKUP_ROUTE_MISMATCH)
    refused(reader_payload(output_config={"effort": "high", "format": {"type": "json"}}),
            Code.LOOKUP_OPTION_FORBIDDEN, effort="high")


def test_a_compaction_block_replays_only_as_the_sole_content_of_message_one() -> None:
    first = {"role": "assistant", "content": [dict(BLOCK)]}
    shape = check(reader_payload(messages=[first, {"role": "user", "content": "Q?"}]))
    assert shape.input_items == 2
    unsigned = {"role": "assistant", "content": [{"type": "compaction", "content": "S"}]}
    check(reader_payload(messages=[unsigned, {"role": "user", "content": "Q?"}]))
    for messages in (
        [{"role": "user", "content": "Q?"}, first],  # not first
        [{"role": "user", "content": [dict(BLOCK)]}],  # not the assistant's
        [{"role": "assistant", "content": [dict(BLOCK), {"type": "text", "text": "x"}]}],
        [{"role": "assistant", "content": [{**BLOCK, "cache_control": {}}]}],
        [{"role": "assistant", "content": [{**BLOCK, "content": 7}]}],
        [{"role": "assistant", "content": [{**BLOCK, "signature": None}]}],
    ):
        refused(reader_payload(messages=messages), Code.LOOKUP_PAYLOAD_FORBIDDEN)


def _message(content: Any, role: str = "user") -> dict[str, Any]:
    return {"messages": [{"role": role, "content": content}]}


@pytest.mark.parametrize(("change", "code"), [
    ({"context_management": {"edits": []}}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"container": "c_1"}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"mcp_servers": []}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"compaction": {"type": "summarize"}}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"temperature": 0.2}, Code.LOOKUP_OPTION_FORBIDDEN),
    ({"metadata": {"user_id": "u"}}, Code.LOOKUP_OPTION_FORBIDDEN),
    ({"stop_sequences": ["END"]}, Code.LOOKUP_OPTION_FORBIDDEN),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, Code.LOOKUP_OPTION_FORBIDDEN),
    ({"service_tier": "auto"}, Code.LOOKUP_OPTION_FORBIDDEN),
    ({"prompt_cache_key": "k"}, Code.LOOKUP_PROMPT_CACHE_KEY_FORBIDDEN),
    ({"model": "claude-opus-4-6"}, Code.LOOKUP_MODEL_SWITCH_FORBIDDEN),
    ({"model": None}, Code.LOOKUP_ROUTE_MISMATCH),
    ({"stream": False}, Code.LOOKUP_ROUTE_MISMATCH),
    ({"stream": "yes"}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"max_tokens": None}, Code.LOOKUP_ROUTE_MISMATCH),
    ({"max_tokens": 0}, Code.LOOKUP_ROUTE_MISMATCH),
    ({"max_tokens": 128_001}, Code.LOOKUP_ROUTE_MISMATCH),
    ({"max_tokens": True}, Code.LOOKUP_ROUTE_MISMATCH),
    ({"max_tokens": 10.0}, Code.LOOKUP_ROUTE_MISMATCH),
    ({"system": [{"type": "image", "source": {}}]}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"system": [{"type": "text", "text": "x", "cache_control": {}}]},
     Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"system": 7}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"tools": [{**HISTORY_GET, "name": "shell"}]}, Code.LOOKUP_TOOLS_FORBIDDEN),
    ({"tools": [HISTORY_GET, HISTORY_GET]}, Code.LOOKUP_TOOLS_FORBIDDEN),
    ({"tools": [{**HISTORY_GET, "type": "custom"}]}, Code.LOOKUP_TOOLS_FORBIDDEN),
    ({"tools": [{"name": "history_get"}]}, Code.LOOKUP_TOOLS_FORBIDDEN),
    ({"tools": [{**HISTORY_GET, "description": 1}]}, Code.LOOKUP_TOOLS_FORBIDDEN),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
     Code.LOOKUP_TOOLS_FORBIDDEN),
    ({"tools": {"history_get": HISTORY_GET}}, Code.LOOKUP_TOOLS_FORBIDDEN),
    ({"tool_choice": {"type": "any"}}, Code.LOOKUP_TOOLS_FORBIDDEN),
    ({"tool_choice": {"type": "tool", "name": "history_get"}}, Code.LOOKUP_TOOLS_FORBIDDEN),
    ({"tool_choice": {"type": "auto", "disable_parallel_tool_use": "yes"}},
     Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"tool_choice": "auto"}, Code.LOOKUP_TOOLS_FORBIDDEN),
    ({"messages": []}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"messages": "hi"}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"messages": [{"role": "system", "content": "x"}]}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"messages": [{"role": "user", "content": "x", "name": "n"}]},
     Code.LOOKUP_PAYLOAD_FORBIDDEN),
    (_message(None), Code.LOOKUP_PAYLOAD_FORBIDDEN),
    (_message([{"type": "image", "source": {"type": "url", "url": "http://x"}}]),
     Code.LOOKUP_PAYLOAD_FORBIDDEN),
    (_message([{"type": "document", "source": {}}]), Code.LOOKUP_PAYLOAD_FORBIDDEN),
    (_message([{"type": "search_result", "source": "x"}]), Code.LOOKUP_PAYLOAD_FORBIDDEN),
    (_message([{"type": "thinking", "thinking": "t", "signature": "s"}], "assistant"),
     Code.LOOKUP_PAYLOAD_FORBIDDEN),
    (_message([{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]),
     Code.LOOKUP_PAYLOAD_FORBIDDEN),
    (_message([{"type": "text", "text": 1}]), Code.LOOKUP_PAYLOAD_FORBIDDEN),
    (_message(["plain"]), Code.LOOKUP_PAYLOAD_FORBIDDEN),
    (_message([{"type": "tool_use", "id": "t", "name": "history_get", "input": {}}]),
     Code.LOOKUP_PAYLOAD_FORBIDDEN),  # a user cannot call
    (_message([{"type": "tool_result", "tool_use_id": "t", "content": "x"}], "assistant"),
     Code.LOOKUP_PAYLOAD_FORBIDDEN),
    (_message([{"type": "tool_use", "id": "t", "name": "bad name!", "input": {}}], "assistant"),
     Code.LOOKUP_TOOLS_FORBIDDEN),
    (_message([{"type": "tool_use", "id": "t", "name": "history_get", "input": "{}"}],
              "assistant"), Code.LOOKUP_PAYLOAD_FORBIDDEN),
    (_message([{"type": "tool_use", "id": 1, "name": "history_get", "input": {}}],
              "assistant"), Code.LOOKUP_PAYLOAD_FORBIDDEN),
    (_message([{"type": "tool_result", "tool_use_id": "t",
                "content": [{"type": "image", "source": {}}]}]), Code.LOOKUP_PAYLOAD_FORBIDDEN),
    (_message([{"type": "tool_result", "tool_use_id": "t", "content": "x",
                "is_error": "no"}]), Code.LOOKUP_PAYLOAD_FORBIDDEN),
    (_message([{"type": "tool_result", "tool_use_id": "t"}]), Code.LOOKUP_PAYLOAD_FORBIDDEN),
    (_message([{"type": "tool_result", "content": "x"}]), Code.LOOKUP_PAYLOAD_FORBIDDEN),
])
def test_the_reader_allowlist_refuses(change: dict[str, Any], code: Code) -> None:
    refused(reader_payload(**change), code)


def test_a_payload_that_is_not_an_object_refuses() -> None:
    refused([reader_payload()], Code.LOOKUP_PAYLOAD_FORBIDDEN)  # type: ignore[arg-type]


def test_a_contract_with_a_prompt_cache_key_refuses_every_payload() -> None:
    refused(reader_payload(), Code.LOOKUP_PROMPT_CACHE_KEY_FORBIDDEN, prompt_cache_key="k")
    refused(reader_payload(prompt_cache_key="k"), Code.LOOKUP_PROMPT_CACHE_KEY_FORBIDDEN,
            prompt_cache_key="k")


def test_tool_choice_may_ask_for_one_call_at_a_time() -> None:
    check(reader_payload(tool_choice={"type": "auto", "disable_parallel_tool_use": True}))


def test_an_unregistered_tool_may_be_replayed_but_not_offered() -> None:
    unoffered = reader_payload(messages=replayed())
    del unoffered["tools"], unoffered["tool_choice"]
    check(unoffered, tools=())  # email_read was the original agent's tool
    refused(reader_payload(), Code.LOOKUP_TOOLS_FORBIDDEN, tools=())


# -- headers and formats --------------------------------------------------------------


def test_the_version_header_always_and_the_beta_only_with_a_compaction_block() -> None:
    version = ("anthropic-version", ANTHROPIC_VERSION)
    beta = ("anthropic-beta", ANTHROPIC_COMPACT_BETA)
    assert messages_headers(reader_payload()) == (version,)
    held = reader_payload(messages=[{"role": "assistant", "content": [BLOCK]},
                                    {"role": "user", "content": "Q?"}])
    assert messages_headers(held) == (version, beta)
    assert MESSAGES.headers(held) == (version, beta)
    assert messages_headers("not a payload") == (version,)
    assert COMPACT_MESSAGES.headers({}) == (version, beta)


def test_each_api_has_its_format_and_credential_scheme() -> None:
    assert wire_format(WireApi.ANTHROPIC_MESSAGES) is MESSAGES
    assert (MESSAGES.path, MESSAGES.auth) == ("/messages", "x-api-key")
    assert (COMPACT_MESSAGES.path, COMPACT_MESSAGES.auth) == ("/messages", "x-api-key")
    assert wire_format(WireApi.OPENAI_RESPONSES).auth == "bearer"
    assert wire_format(WireApi.OPENAI_CHAT).auth == "bearer"
    assert wire_format(WireApi.OPENAI_CHAT).headers({"model": "m"}) == ()
    assert MESSAGES.streams(STREAMING) and not MESSAGES.streams(contract(BASE, stream=False))
    # The compaction requests have one answer shape: never streamed, whatever the route.
    assert not COMPACT_MESSAGES.streams(STREAMING)
    responses = contract(BASE, provider="openai", model="gpt-5", api=WireApi.OPENAI_RESPONSES)
    assert not COMPACT.streams(responses)
    assert isinstance(MESSAGES.parser(True), MessagesStreamParser)
    assert isinstance(MESSAGES.parser(False), MessagesBodyParser)
    assert isinstance(COMPACT_MESSAGES.parser(True), CompactMessagesBodyParser)


@pytest.mark.parametrize("headers", [
    (("authorization", "Bearer x"),), (("x-api-key", "k"),), (("accept", "text/html"),),
    (("content-type", "text/plain"),), (("user-agent", "u"),), (("Anthropic-Version", "1"),),
    (("anthropic-version", "1"), ("anthropic-version", "2")), (("a b", "1"),),
    (("anthropic-beta", "x\r\ninjected: 1"),),
])
def test_a_wire_request_cannot_carry_a_reserved_or_malformed_header(
        headers: tuple[tuple[str, str], ...]) -> None:
    with pytest.raises(ValueError):
        WireRequest("/messages", b"{}", True, 1.0, headers=headers)


def test_a_wire_request_knows_two_credential_schemes() -> None:
    assert WireRequest("/messages", b"{}", True, 1.0).auth == "bearer"
    WireRequest("/messages", b"{}", True, 1.0, auth="x-api-key")
    with pytest.raises(ValueError):
        WireRequest("/messages", b"{}", True, 1.0, auth="basic")


# -- the compaction allowlist ---------------------------------------------------------


def test_a_compaction_request_passes_whatever_the_route_streams() -> None:
    payload = compact_messages_payload(MODEL, conversation(), 4096, system="Sys.",
                                       instructions="Keep ids.")
    assert payload["compaction"] == {"type": "summarize", "instructions": "Keep ids."}
    assert "stream" not in payload and "tools" not in payload
    for stream in (True, False):
        shape = check_compact_messages_payload(payload, contract(BASE, stream=stream),
                                               first_request=True)
        assert shape.input_items == 6 and shape.has_instructions and shape.tools == 0
    bare = compact_messages_payload(MODEL, conversation(1), 10)
    assert bare == {"model": MODEL, "max_tokens": 10, "messages": conversation(1),
                    "compaction": {"type": "summarize"}}
    check_compact_messages_payload({**bare, "stream": False}, STREAMING, first_request=True)
    long_enough = {"type": "summarize", "instructions": "x" * MAX_INSTRUCTIONS_CHARS}
    check_compact_messages_payload({**bare, "compaction": long_enough}, STREAMING,
                                   first_request=True)
    # Re-compacting a head that starts with an earlier summary.
    again = [{"role": "assistant", "content": [dict(BLOCK)]}, *conversation(1)]
    check_compact_messages_payload(compact_messages_payload(MODEL, again, 10), STREAMING,
                                   first_request=True)


@pytest.mark.parametrize(("change", "code"), [
    ({"compaction": None}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"compaction": "summarize"}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"compaction": {"type": "drop"}}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"compaction": {"type": "summarize", "trigger": 1}}, Code.LOOKUP_OPTION_FORBIDDEN),
    ({"compaction": {"type": "summarize", "instructions": 1}}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"compaction": {"type": "summarize", "instructions": "x" * (MAX_INSTRUCTIONS_CHARS + 1)}},
     Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"stream": True}, Code.LOOKUP_OPTION_FORBIDDEN),
    ({"stream": "no"}, Code.LOOKUP_OPTION_FORBIDDEN),
    ({"tools": [HISTORY_GET]}, Code.LOOKUP_TOOLS_FORBIDDEN),
    ({"tool_choice": {"type": "auto"}}, Code.LOOKUP_TOOLS_FORBIDDEN),
    ({"context_management": {"edits": []}}, Code.LOOKUP_PAYLOAD_FORBIDDEN),
    ({"stop_sequences": ["END"]}, Code.LOOKUP_OPTION_FORBIDDEN),
    ({"max_tokens": None}, Code.LOOKUP_ROUTE_MISMATCH),
    ({"model": "claude-opus-4-6"}, Code.LOOKUP_MODEL_SWITCH_FORBIDDEN),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     Code.LOOKUP_PAYLOAD_FORBIDDEN),
])
def test_the_compaction_allowlist_refuses(change: dict[str, Any], code: Code) -> None:
    payload = {**compact_messages_payload(MODEL, conversation(), 4096), **change}
    with pytest.raises(GuardError) as raised:
        check_compact_messages_payload(payload, STREAMING, first_request=True)
    assert raised.value.code is code, raised.value.detail


def test_a_compaction_block_is_read_strictly() -> None:
    assert compaction_block(BLOCK) == BLOCK
    assert compaction_block({"type": "compaction", "content": "S"}) is not None
    assert compaction_block({**BLOCK, "content": ""}) is None
    assert compaction_block({**BLOCK, "content": None}) is None
    assert compaction_block({**BLOCK, "signature": 1}) is None
    assert compaction_block({**BLOCK, "id": "c_1"}) is None
    assert compaction_block({**BLOCK, "type": "text"}) is None
    assert compaction_block([BLOCK]) is None


def test_the_reader_gets_the_block_first_as_received() -> None:
    assert reader_messages([BLOCK]) == [{"role": "assistant", "content": [BLOCK]}]


# -- usage ----------------------------------------------------------------------------


def usage(**counts: Any) -> dict[str, Any]:
    return {"input_tokens": 700, "cache_creation_input_tokens": 300,
            "cache_read_input_tokens": 500, "output_tokens": 90, **counts}


def iteration(kind: str = "compaction", **counts: Any) -> dict[str, Any]:
    return {"type": kind, "input_tokens": 2400, "output_tokens": 320, **counts}


def test_input_includes_both_cache_counts() -> None:
    assert read_messages_usage(usage()) == (
        UsageRecord(input=1500, output=90, cache_read=500, cache_write=300), False)
    assert read_messages_usage({"input_tokens": 7, "output_tokens": 2}) == (
        UsageRecord(input=7, output=2), False)  # absent cache counts stay absent
    assert read_messages_usage(usage(cache_creation_input_tokens=None)) == (
        UsageRecord(input=1200, output=90, cache_read=500), False)
    assert read_messages_usage(usage(cache_read_input_tokens=0)) == (
        UsageRecord(input=1000, output=90, cache_read=0, cache_write=300), False)


def test_iterations_are_what_is_billed() -> None:
    compaction = {"input_tokens": 0, "output_tokens": 0, "iterations": [iteration()]}
    assert read_messages_usage(compaction) == (UsageRecord(input=2400, output=320), False)
    both = usage(iterations=[
        iteration(),
        iteration("message", input_tokens=700, output_tokens=90,
                  cache_creation_input_tokens=300, cache_read_input_tokens=500)])
    assert read_messages_usage(both) == (
        UsageRecord(input=2400 + 1500, output=410, cache_read=500, cache_write=300), False)
    cached = {"input_tokens": 0, "output_tokens": 0,
              "iterations": [iteration(cache_read_input_tokens=100)]}
    assert read_messages_usage(cached) == (UsageRecord(input=2500, output=320, cache_read=100),
                                           False)
    assert read_messages_usage({**usage(), "iterations": None})[0] == read_messages_usage(
        usage())[0]


@pytest.mark.parametrize("raw", [
    # the top level reports what the iterations do not account for
    usage(iterations=[iteration()]),
    {"input_tokens": 2401, "output_tokens": 0, "iterations": [iteration()]},
    {"input_tokens": 0, "output_tokens": 321, "iterations": [iteration()]},
    {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 1,
     "iterations": [iteration()]},
    {"input_tokens": 1, "output_tokens": 0, "iterations": []},
    # malformed iterations
    {"input_tokens": 0, "output_tokens": 0, "iterations": iteration()},
    {"input_tokens": 0, "output_tokens": 0, "iterations": "[]"},
    {"input_tokens": 0, "output_tokens": 0, "iterations": [None]},
    {"input_tokens": 0, "output_tokens": 0, "iterations": [{"input_tokens": 1,
                                                            "output_tokens": 1}]},
    {"input_tokens": 0, "output_tokens": 0, "iterations": [iteration("tool")]},
    {"input_tokens": 0, "output_tokens": 0, "iterations": [iteration(input_tokens=None)]},
    {"input_tokens": 0, "output_tokens": 0, "iterations": [iteration(output_tokens=-1)]},
    {"input_tokens": 0, "output_tokens": 0, "iterations": [iteration(output_tokens=1.0)]},
    {"input_tokens": 0, "output_tokens": 0,
     "iterations": [iteration(cache_read_input_tokens="5")]},
    {"input_tokens": 0, "output_tokens": 0,
     "iterations": [iteration(output_tokens=2**52), iteration(output_tokens=2**52)]},
    # hostile top-level counts
    "usage", [usage()], {"output_tokens": 1}, {"input_tokens": 1},
    usage(input_tokens=True), usage(output_tokens=False), usage(input_tokens=-1),
    usage(input_tokens=1e29), usage(output_tokens="90"), usage(input_tokens=2**64 - 1),
    usage(cache_read_input_tokens=1.5), usage(cache_creation_input_tokens=-3),
    usage(input_tokens=2**53 - 1),  # the sum with the cache counts passes the limit
])
def test_hostile_usage_is_invalid_never_zero(raw: Any) -> None:
    assert read_messages_usage(raw) == (None, True)


def test_no_usage_is_missing_usage() -> None:
    assert read_messages_usage(None) == (None, False)


@pytest.mark.parametrize(("reported", "tier"), [
    ({"service_tier": "standard"}, "default"),
    ({"service_tier": "priority"}, "priority"),
    ({"service_tier": "batch"}, "flex"),
    ({"service_tier": "enterprise"}, "enterprise"),  # passed on: settlement stops on it
    ({"service_tier": 7}, UNREADABLE_TIER),
    ({"service_tier": None}, None),
    ({}, None),
])
def test_tiers_read_as_efold_tiers(reported: dict[str, Any], tier: str | None) -> None:
    assert read_messages_tier({**usage(), **reported}) == tier
    assert read_messages_tier(None) is None


# -- the stream parser ----------------------------------------------------------------


def feed(parser: WireParser, data: bytes, size: int | None = None) -> WireOutcome:
    step = size or max(1, len(data))
    for start in range(0, len(data), step):
        parser.feed(data[start:start + step])
        if parser.done:
            break
    return parser.finish()


def everywhere(parser: type[MessagesStreamParser] | type[MessagesBodyParser],
               data: bytes) -> WireOutcome:
    """The outcome of ``data`` fed whole, in 1-byte chunks and in 7-byte chunks: the
    same every way, or the test fails."""
    outcomes = [feed(parser(), data, size) for size in (None, 1, 7)]
    assert outcomes[0] == outcomes[1] == outcomes[2]
    return outcomes[0]


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def start(model: Any = MODEL, **usage_fields: Any) -> dict[str, Any]:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
               "content": [], "stop_reason": None,
               "usage": {"input_tokens": 700, "output_tokens": 1, **usage_fields}}
    return {"type": "message_start", "message": message}


def text_block(index: int, text: str) -> list[dict[str, Any]]:
    return [{"type": "content_block_start", "index": index,
             "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": index,
             "delta": {"type": "text_delta", "text": text}},
            {"type": "content_block_stop", "index": index}]


def tool_block(index: int, *pieces: str) -> list[dict[str, Any]]:
    return [{"type": "content_block_start", "index": index,
             "content_block": {"type": "tool_use", "id": "toolu_1", "name": "history_get",
                               "input": {}}},
            *({"type": "content_block_delta", "index": index,
               "delta": {"type": "input_json_delta", "partial_json": p}} for p in pieces),
            {"type": "content_block_stop", "index": index}]


def delta(stop: Any = "end_turn", **usage_fields: Any) -> dict[str, Any]:
    return {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 90, **usage_fields}}


STOP = {"type": "message_stop"}


def test_the_loopback_stream_reads_as_documented() -> None:
    server = MessagesServer()
    outcome = everywhere(MessagesStreamParser, reader_sse(server, reader_payload()))
    assert outcome.terminal is StreamEnd.COMPLETED and not outcome.malformed
    assert outcome.usage == UsageRecord(input=1500, output=90, cache_read=500, cache_write=300)
    assert (outcome.tier, outcome.model, outcome.usage_invalid) == ("default", MODEL, False)
    [item] = outcome.output_items
    assert item["type"] == "message" and item["content"][0]["text"].startswith("LOOPBACK-ECHO")


def test_tool_use_deltas_assemble_into_a_function_call_item() -> None:
    server = MessagesServer(mode="tool_calls")
    outcome = everywhere(MessagesStreamParser, reader_sse(server, reader_payload()))
    message, call = outcome.output_items
    assert message["content"][0]["text"] == "Looking it up."
    assert call == {"type": "function_call", "call_id": "toolu_01", "name": "history_get",
                    "arguments": '{"id": "rec-7"}'}
    assert outcome.terminal is StreamEnd.COMPLETED  # stop_reason tool_use
    data = sse(start(), *tool_block(0), delta("tool_use"), STOP)
    assert everywhere(MessagesStreamParser, data).output_items[0]["arguments"] == "{}"
    data = sse(start(), *tool_block(0, '{"query": "par', 'cel", "limit": 2}'), delta(), STOP)
    args = everywhere(MessagesStreamParser, data).output_items[0]["arguments"]
    assert json.loads(args) == {"query": "parcel", "limit": 2}


@pytest.mark.parametrize("pieces", [("[1, 2]",), ('{"id": ',), ("null",), ('"s"',)])
def test_tool_input_that_is_not_a_json_object_is_malformed(pieces: tuple[str, ...]) -> None:
    outcome = everywhere(MessagesStreamParser, sse(start(), *tool_block(0, *pieces), delta(),
                                                   STOP))
    assert (outcome.terminal, outcome.malformed, outcome.output_items) == (StreamEnd.NONE,
                                                                          True, [])
    assert outcome.usage is not None  # still read: the known partial


@pytest.mark.parametrize(("reason", "terminal"), [
    ("end_turn", StreamEnd.COMPLETED), ("tool_use", StreamEnd.COMPLETED),
    ("stop_sequence", StreamEnd.COMPLETED), ("pause_turn", StreamEnd.COMPLETED),
    ("refusal", StreamEnd.COMPLETED), ("compaction", StreamEnd.COMPLETED),
    ("max_tokens", StreamEnd.INCOMPLETE), ("model_context_window_exceeded",
                                           StreamEnd.INCOMPLETE),
    (None, StreamEnd.INCOMPLETE), (7, StreamEnd.INCOMPLETE),
])
def test_stop_reasons(reason: Any, terminal: StreamEnd) -> None:
    data = sse(start(), *text_block(0, "hi"), delta(reason), STOP)
    assert everywhere(MessagesStreamParser, data).terminal is terminal
    body = json.dumps({"type": "message", "model": MODEL, "content": [], "stop_reason": reason,
                       "usage": usage()}).encode()
    assert everywhere(MessagesBodyParser, body).terminal is terminal


def test_an_error_event_fails_and_keeps_what_usage_it_read() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "no"}}
    outcome = everywhere(MessagesStreamParser, sse(start(), *text_block(0, "hi"), error))
    assert outcome.terminal is StreamEnd.FAILED
    assert outcome.usage == UsageRecord(input=700, output=1)


def test_a_stream_without_message_stop_is_lost() -> None:
    outcome = everywhere(MessagesStreamParser, sse(start(), *text_block(0, "hi"), delta()))
    assert outcome.terminal is StreamEnd.NONE and outcome.usage is not None
    # A message_stop whose blank line never came was not delivered.
    cut = sse(start(), delta(), STOP)[:-1]
    assert everywhere(MessagesStreamParser, cut).terminal is StreamEnd.NONE


@pytest.mark.parametrize("events", [
    [start(), delta(input_tokens=699), STOP],  # a count that decreases
    [start(), delta(output_tokens=0), STOP],
    [start(cache_read_input_tokens=50), delta(cache_read_input_tokens=40), STOP],
    [start(), start(), delta(), STOP],  # a second message_start
    [start(), delta(), STOP, STOP],  # a second message_stop, in data already fed
    [start(), delta(), STOP, {"type": "error", "error": {}}],
    [start(), delta(output_tokens="90"), STOP],
    [start(), {**delta(), "usage": [90]}, STOP],
    [start(input_tokens=None), delta(), STOP],  # usage without an input count
    [start(iterations=[iteration()]), delta(iterations=[iteration(output_tokens=1)]), STOP],
])
def test_conflicting_or_malformed_stream_usage_is_invalid(events: list[dict[str, Any]]
                                                           ) -> None:
    outcome = feed(MessagesStreamParser(), sse(*events))
    assert (outcome.usage, outcome.usage_invalid) == (None, True)


def test_cumulative_usage_keeps_the_last_and_largest_readings() -> None:
    data = sse(start(cache_creation_input_tokens=300), delta(input_tokens=700,
                                                             cache_read_input_tokens=None),
               STOP)
    outcome = everywhere(MessagesStreamParser, data)
    assert outcome.usage == UsageRecord(input=1000, output=90, cache_write=300)
    compacted = sse(start(input_tokens=10, output_tokens=0),
                    delta(input_tokens=10, output_tokens=20,
                          iterations=[iteration(), iteration("message", input_tokens=10,
                                                             output_tokens=20)]), STOP)
    assert everywhere(MessagesStreamParser, compacted).usage == UsageRecord(input=2410,
                                                                             output=340)


def test_missing_stream_usage_is_missing_not_zero() -> None:
    bare_start = {"type": "message_start", "message": {"id": "m", "model": MODEL}}
    bare_delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}
    outcome = everywhere(MessagesStreamParser, sse(bare_start, *text_block(0, "hi"),
                                                   bare_delta, STOP))
    assert (outcome.terminal, outcome.usage, outcome.usage_invalid) == (
        StreamEnd.COMPLETED, None, False)
    null = sse({**bare_start, "message": {"model": MODEL, "usage": None}},
               {**bare_delta, "usage": None}, STOP)
    assert everywhere(MessagesStreamParser, null).usage is None


def test_bytes_after_message_stop_are_not_read() -> None:
    data = sse(start(), *text_block(0, "hi"), delta(), STOP)
    parser = MessagesStreamParser()
    parser.feed(data)
    assert parser.done
    outcome = feed(MessagesStreamParser(), data + b"data: {not json\n\n" + sse(
        *text_block(1, "late")), 1)
    assert outcome.terminal is StreamEnd.COMPLETED and not outcome.malformed
    assert [i["content"][0]["text"] for i in outcome.output_items] == ["hi"]


@pytest.mark.parametrize("events", [
    [start(), {"type": "content_block_delta", "index": 3,
               "delta": {"type": "text_delta", "text": "x"}}, delta(), STOP],
    [start(), *text_block(0, "a"), *text_block(0, "b"), delta(), STOP],  # index reused
    [start(), {"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": 5}}, delta(), STOP],
    [start(), {"type": "content_block_start", "index": 0,
               "content_block": {"type": "tool_use", "id": 1, "name": "n", "input": {}}},
     delta(), STOP],
    [start(), *text_block(0, "a"), {"type": "content_block_delta", "index": 0,
                                    "delta": {"type": "input_json_delta",
                                              "partial_json": "{}"}}, delta(), STOP],
    [start(), {"type": "content_block_delta", "index": 0}, delta(), STOP],
    [{"type": "message_start", "message": "m"}, delta(), STOP],
])
def test_structural_faults_make_the_stream_malformed(events: list[dict[str, Any]]) -> None:
    outcome = feed(MessagesStreamParser(), sse(*events))
    assert (outcome.terminal, outcome.malformed) == (StreamEnd.NONE, True)


def test_undecodable_event_data_is_malformed() -> None:
    data = sse(start()) + b"event: content_block_delta\ndata: {oops\n\n" + sse(delta(), STOP)
    outcome = feed(MessagesStreamParser(), data)
    assert (outcome.terminal, outcome.malformed) == (StreamEnd.NONE, True)
    assert feed(MessagesStreamParser(), sse(start()) + b"data: \xff\n\n").malformed


def test_thinking_blocks_are_read_past() -> None:
    thinking = [{"type": "content_block_start", "index": 0,
                 "content_block": {"type": "thinking", "thinking": ""}},
                {"type": "content_block_delta", "index": 0,
                 "delta": {"type": "thinking_delta", "thinking": "hmm"}},
                {"type": "content_block_delta", "index": 0,
                 "delta": {"type": "signature_delta", "signature": "s"}},
                {"type": "content_block_stop", "index": 0}]
    outcome = everywhere(MessagesStreamParser, sse(start(), *thinking, *text_block(1, "hi"),
                                                   {"type": "ping"}, delta(), STOP))
    assert outcome.terminal is StreamEnd.COMPLETED
    assert [i["content"][0]["text"] for i in outcome.output_items] == ["hi"]


def test_model_and_tier_readings() -> None:
    outcome = everywhere(MessagesStreamParser, sse(start(model=7), delta(), STOP))
    assert outcome.model_conflict
    outcome = everywhere(MessagesStreamParser, sse(start("claude-opus-4-6"), delta(), STOP))
    assert (outcome.model, outcome.model_conflict) == ("claude-opus-4-6", False)
    tiers = sse(start(service_tier="standard"), delta(service_tier="priority"), STOP)
    assert everywhere(MessagesStreamParser, tiers).tier == UNREADABLE_TIER
    same = sse(start(service_tier="batch"), delta(service_tier="batch"), STOP)
    assert everywhere(MessagesStreamParser, same).tier == "flex"
    assert everywhere(MessagesStreamParser, sse(start(), delta(), STOP)).tier is None


# -- the body parser ------------------------------------------------------------------


def test_the_loopback_body_reads_as_documented() -> None:
    server = MessagesServer(mode="tool_calls")
    data = json.dumps(reader_json(server, reader_payload(stream=False))).encode()
    parser = MessagesBodyParser()
    for byte in range(len(data)):
        parser.feed(data[byte:byte + 1])
        assert not parser.done  # only the end of the body completes it
    outcome = parser.finish()
    assert outcome.terminal is StreamEnd.COMPLETED and outcome.tier == "default"
    assert outcome.usage == UsageRecord(input=1500, output=90, cache_read=500, cache_write=300)
    assert outcome.model == MODEL
    message, call = outcome.output_items
    assert message["content"][0]["text"] == "Looking it up."
    assert call == {"type": "function_call", "call_id": "toolu_01", "name": "history_get",
                    "arguments": '{"id":"rec-7"}'}


@pytest.mark.parametrize("body", [
    b"", b"not json", b"[]", b'{"type": "message"}',
    b'{"type": "message", "content": {}}', b'{"content": []}',
    b'{"type": "message", "content": ["text"]}',
    b'{"type": "message", "content": [{"type": "text", "text": 1}]}',
    b'{"type": "message", "content": [{"type": "tool_use", "id": "t", "name": "n",'
    b' "input": "{}"}]}',
    b'{"type": "message", "content": [{"text": "untyped"}]}',
])
def test_a_body_off_the_documented_shape_is_malformed(body: bytes) -> None:
    outcome = feed(MessagesBodyParser(), body)
    assert (outcome.terminal, outcome.malformed, outcome.output_items) == (StreamEnd.NONE,
                                                                          True, [])


def test_an_error_body_fails_and_missing_usage_is_missing() -> None:
    error = feed(MessagesBodyParser(), b'{"type": "error", "error": {"type": "api_error"}}')
    assert error.terminal is StreamEnd.FAILED
    server = MessagesServer(mode="missing_usage")
    outcome = feed(MessagesBodyParser(), json.dumps(reader_json(server, {})).encode())
    assert (outcome.terminal, outcome.usage, outcome.usage_invalid) == (
        StreamEnd.COMPLETED, None, False)
    server.mode = "bad_usage"
    outcome = feed(MessagesBodyParser(), json.dumps(reader_json(server, {})).encode())
    assert (outcome.usage, outcome.usage_invalid) == (None, True)


# -- the compaction reply parser ------------------------------------------------------


def compact_outcome(mode: str = "normal", size: int | None = None) -> WireOutcome:
    body = compact_messages_payload(MODEL, conversation(), 4096)
    reply = compaction_reply(MessagesServer(mode=mode), body)
    return feed(CompactMessagesBodyParser(), json.dumps(reply).encode(), size)


def test_a_documented_compaction_reply_is_billed_by_its_iterations() -> None:
    outcome = compact_outcome()
    assert outcome == compact_outcome(size=1)
    assert outcome.terminal is StreamEnd.COMPLETED and not outcome.usage_invalid
    assert outcome.usage == UsageRecord(input=COMPACT_INPUT_TOKENS, output=COMPACT_OUTPUT_TOKENS)
    assert (outcome.tier, outcome.model) == ("default", MODEL)
    [block] = outcome.output_items
    assert block == summary_block(conversation())


def test_a_compaction_reply_without_iterations_is_missing_usage_not_free() -> None:
    outcome = compact_outcome("no_iterations")
    assert outcome.terminal is StreamEnd.COMPLETED
    assert (outcome.usage, outcome.usage_invalid) == (None, False)
    reply = compaction_reply(MessagesServer(), {"messages": conversation()})
    reply["usage"] = {"input_tokens": 0, "output_tokens": 0, "iterations": None}
    outcome = feed(CompactMessagesBodyParser(), json.dumps(reply).encode())
    assert (outcome.usage, outcome.usage_invalid) == (None, False)


@pytest.mark.parametrize(("mode", "terminal", "invalid"), [
    ("missing_usage", StreamEnd.COMPLETED, False),
    ("null_usage", StreamEnd.COMPLETED, False),
    ("bad_usage", StreamEnd.COMPLETED, True),
    ("top_above_iterations", StreamEnd.COMPLETED, True),
    ("two_blocks", StreamEnd.NONE, False),
    ("empty_content", StreamEnd.NONE, False),
    ("error_body", StreamEnd.FAILED, False),
])
def test_compaction_reply_faults(mode: str, terminal: StreamEnd, invalid: bool) -> None:
    outcome = compact_outcome(mode)
    assert (outcome.terminal, outcome.usage, outcome.usage_invalid) == (terminal, None,
                                                                        invalid)
    assert outcome.malformed is (terminal is StreamEnd.NONE)


@pytest.mark.parametrize("change", [
    {"stop_reason": "end_turn"}, {"stop_reason": None}, {"type": "completion"},
    {"content": []}, {"content": [{"type": "text", "text": "a summary"}]},
    {"content": {"type": "compaction", "content": "S"}},
])
def test_a_compaction_reply_off_its_shape_is_malformed(change: dict[str, Any]) -> None:
    reply = {**compaction_reply(MessagesServer(), {"messages": conversation()}), **change}
    outcome = feed(CompactMessagesBodyParser(), msgspec.json.encode(reply))
    assert (outcome.terminal, outcome.malformed, outcome.output_items) == (StreamEnd.NONE,
                                                                          True, [])


def test_the_reply_block_is_kept_byte_for_byte() -> None:
    reply = compaction_reply(MessagesServer(), {"messages": conversation()})
    original = copy.deepcopy(reply["content"][0])
    outcome = feed(CompactMessagesBodyParser(), json.dumps(reply).encode(), 3)
    assert outcome.output_items == [original]
    assert list(outcome.output_items[0]) == list(original)  # key order too
