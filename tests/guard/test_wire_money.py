"""Money parsing on the provider wire (issue 35): readings a provider can make cheaper
than what it billed are stopped, never settled.

Over real HTTP (the loopback provider of ``server.py``) where the guard reads them, at
parser level for the wire formats whose loopback lives elsewhere (Messages, the two
compaction endpoints): a repeated key in any object of a reply, a ``total_tokens`` that
is not the sum of its parts, an input count too low for the bytes sent (at the exact
boundary), a reply that names no model, and an absent service tier on a catalog entry
without service tiers.
"""

from __future__ import annotations

import json
from typing import Any

import efold_guard_kit as kit
import efold_guard_loopback as loopback
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from efold.errors import Code
from efold.guard import Guard, HttpTransport, OutcomeKind, WireApi, parse_catalog
from efold.guard.contract import Contract
from efold.guard.settlement import settle_wire
from efold.guard.testing import TestOnlyPermitSource
from efold.guard.usage import MAX_BYTES_PER_INPUT_TOKEN
from efold.guard.wire import StreamEnd, WireOutcome
from efold.guard.wire.compact_anthropic import CompactMessagesBodyParser
from efold.guard.wire.compact_openai import CompactBodyParser
from efold.guard.wire.messages_stream import MessagesBodyParser, MessagesStreamParser
from efold.guard.wire.sse import DuplicateKey, decode_object

S, STOP = OutcomeKind.SETTLED, OutcomeKind.INTEGRITY_STOP
R, C = WireApi.OPENAI_RESPONSES, WireApi.OPENAI_CHAT
COST_DEFAULT_TIER = 12_550  # the scripted usage at gpt-5's rates (test_guard_http)


def _request(server: Any, case: str, api: WireApi = R, stream: bool = True,
             payload: dict[str, Any] | None = None) -> tuple[Any, TestOnlyPermitSource, Guard]:
    guard, source = kit.http_guard(server.url(case), api, stream=stream)
    if payload is None:
        payload = (kit.responses_payload(model=kit.REAL_MODEL, effort="high") if api is R
                   else kit.chat_payload(stream=stream))
    return guard.request(payload), source, guard


def _stopped_with_hold(result: Any, source: TestOnlyPermitSource, guard: Guard,
                       code: Code) -> None:
    assert (result.outcome, result.code) == (STOP, code)
    (record,) = source.records
    assert record.charged_units >= record.hold_units  # the whole hold retained
    assert guard.stopped == code and source.stops == [code]  # sticky


# -- 1. a repeated key anywhere in a reply ---------------------------------------------

@pytest.mark.parametrize(("case", "api", "stream"), [
    ("dup_usage", R, True),
    ("dup_usage_escaped", R, True),
    ("dup_nested", R, True),
    ("dup_id", R, True),
    ("chat_body_dup_usage", C, False),
    ("chat_stream_dup_usage", C, True),
])
def test_a_repeated_key_stops_the_run_with_the_hold(server: Any, case: str, api: WireApi,
                                                     stream: bool) -> None:
    result, source, guard = _request(server, case, api, stream)
    _stopped_with_hold(result, source, guard, Code.LOOKUP_RESPONSE_DUPLICATE_KEY)
    assert result.usage is None and result.cost_units is None  # nothing of it was read


def test_colons_inside_strings_are_no_repeat(server: Any) -> None:
    result, _, _ = _request(server, "colons_in_strings")
    assert result.outcome is S and result.cost_units == COST_DEFAULT_TIER


@pytest.mark.parametrize("text", [
    '{"a":1,"a":1}',  # even an identical repeat
    '{"a":{"b":[{"c":1},{"d":2,"d":3}]}}',  # deep, inside a list
    '{"usage":1,"usag\\u0065":2}',  # escaped
    '{"\\u0061":1,"a":2}',
    '{"x":"\\\\","x":2}',  # an escaped backslash ends the string before the colon
])
def test_the_decoder_finds_every_repeat(text: str) -> None:
    for data in (text, text.encode()):
        with pytest.raises(DuplicateKey):
            decode_object(data)


@pytest.mark.parametrize("text", [
    '{"a":"b:c","d":{"e":"::"}}',
    '{"a":"\\":","b":[{"a":1},{"a":2}]}',  # the same key in two objects is no repeat
    '{"k":"é:ü","l":"\\u003a"}',
])
def test_the_decoder_passes_distinct_keys(text: str) -> None:
    assert decode_object(text) == json.loads(text)


def _messages_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 120, "output_tokens": 50, "service_tier": "standard"},
    }
    body.update(changes)
    return body


def _finish(parser: Any, data: bytes) -> WireOutcome:
    parser.feed(data)
    outcome: WireOutcome = parser.finish()
    return outcome


CHEAPER = '"usage":{"input_tokens":1,"output_tokens":1}}'


def test_messages_and_compaction_parsers_refuse_a_repeated_key() -> None:
    body = json.dumps(_messages_body())[:-1] + "," + CHEAPER
    assert _finish(MessagesBodyParser(), body.encode()).duplicate_key
    start = {"type": "message_start", "message": {**_messages_body(), "content": [],
                                                  "stop_reason": None}}
    stream = (f"event: message_start\ndata: {json.dumps(start)[:-2]},{CHEAPER}}}\n\n"
              'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    assert _finish(MessagesStreamParser(), stream.encode()).duplicate_key
    compaction = _messages_body(
        content=[{"type": "compaction", "content": "summary", "signature": "s"}],
        stop_reason="compaction",
        usage={"input_tokens": 0, "output_tokens": 0,
               "iterations": [{"type": "compaction", "input_tokens": 900,
                               "output_tokens": 90}]})
    text = json.dumps(compaction)[:-1] + "," + CHEAPER
    assert _finish(CompactMessagesBodyParser(), text.encode()).duplicate_key
    reply = {"id": "r", "object": "response.compaction", "created_at": 0,
             "output": [{"type": "compaction", "id": "c", "encrypted_content": "x"}],
             "usage": {"input_tokens": 900, "output_tokens": 90, "total_tokens": 990}}
    text = json.dumps(reply)[:-1] + "," + CHEAPER
    assert _finish(CompactBodyParser(), text.encode()).duplicate_key
    # ... and each of them reads the same reply without the repeat.
    assert _finish(CompactBodyParser(), json.dumps(reply).encode()).usage is not None


# -- 2. total_tokens must be the sum of the parts ---------------------------------------

@pytest.mark.parametrize(("case", "api", "stream"), [
    ("total_above_parts", R, True),
    ("total_below_parts", R, True),
    ("chat_total_above_parts", C, False),
    ("chat_total_below_parts", C, False),
])
def test_a_total_that_is_not_its_parts_stops(server: Any, case: str, api: WireApi,
                                             stream: bool) -> None:
    result, source, guard = _request(server, case, api, stream)
    _stopped_with_hold(result, source, guard, Code.LOOKUP_INVALID_USAGE)


def test_a_total_equal_to_its_parts_or_absent_settles(server: Any) -> None:
    # "normal" reports input 120 + output 50 = total 170; chat_total_absent no total.
    assert _request(server, "normal")[0].outcome is S
    result = _request(server, "chat_total_absent", C, False)[0]
    assert result.outcome is S and result.usage.counts() == {"input": 120, "output": 50}


# -- 3. the input floor: input tokens x 64 >= the admitted payload's bytes --------------

def _big_payload() -> dict[str, Any]:
    # 48,000 UTF-8 bytes of question (two bytes a character): bytes, not characters.
    return kit.responses_payload(model=kit.REAL_MODEL, effort="high", question="é" * 24_000)


def test_input_at_the_floor_settles_and_one_below_stops(server: Any) -> None:
    at, _, _ = _request(server, "input_at_floor", payload=_big_payload())
    assert at.outcome is S, at.code
    (sent,) = server.requests
    assert len(sent.body) > 48_000
    assert at.usage.input == -(-len(sent.body) // MAX_BYTES_PER_INPUT_TOKEN)
    server.requests.clear()
    below, source, guard = _request(server, "input_below_floor", payload=_big_payload())
    _stopped_with_hold(below, source, guard, Code.LOOKUP_USAGE_INPUT_BELOW_PAYLOAD)
    assert below.usage is None


def test_the_floor_is_exact_at_equality() -> None:
    entry = parse_catalog(CATALOG_TIERLESS).entry("openai", "gpt-5")
    contract = kit.http_contract("http://127.0.0.1:1/v1")
    from efold.guard.permits import UsageRecord

    def decide(inp: int, payload_bytes: int) -> Code | None:
        outcome = WireOutcome(terminal=StreamEnd.COMPLETED, model="gpt-5", tier="default",
                              usage=UsageRecord(input=inp, output=1))
        return settle_wire(outcome, hold_units=10**9, input_budget=272_000,
                           payload_bytes=payload_bytes, contract=contract, entry=entry).code

    assert decide(750, 48_000) is None  # 750 x 64 = 48,000: equality passes
    assert decide(750, 48_001) is Code.LOOKUP_USAGE_INPUT_BELOW_PAYLOAD
    assert decide(749, 48_000) is Code.LOOKUP_USAGE_INPUT_BELOW_PAYLOAD
    assert decide(1, 64) is None and decide(1, 65) is Code.LOOKUP_USAGE_INPUT_BELOW_PAYLOAD


# -- 4. a reply that names no model ------------------------------------------------------

@pytest.mark.parametrize(("case", "api", "stream"), [
    ("no_model", R, True),
    ("chat_body_no_model", C, False),
])
def test_a_settling_reply_without_a_model_stops(server: Any, case: str, api: WireApi,
                                                stream: bool) -> None:
    result, source, guard = _request(server, case, api, stream)
    _stopped_with_hold(result, source, guard, Code.LOOKUP_MODEL_UNREPORTED)


def test_a_failed_reply_without_a_model_is_lost_not_stopped(server: Any) -> None:
    # An error says nothing billed settles: the hold is kept as lost either way.
    result, _, _ = _request(server, "no_model_failed")
    assert (result.outcome, result.code) == (OutcomeKind.LOST, Code.LOOKUP_RESPONSE_FAILED)


def test_messages_requires_a_model_and_openai_compaction_does_not() -> None:
    body = _messages_body()
    del body["model"]
    outcome = _finish(MessagesBodyParser(), json.dumps(body).encode())
    assert outcome.model is None and outcome.model_required
    reply = {"id": "r", "object": "response.compaction", "created_at": 0,
             "output": [{"type": "compaction", "id": "c", "encrypted_content": "x"}],
             "usage": {"input_tokens": 900, "output_tokens": 90, "total_tokens": 990}}
    outcome = _finish(CompactBodyParser(), json.dumps(reply).encode())
    assert outcome.model is None and not outcome.model_required  # documented without one
    contract = kit.http_contract("http://127.0.0.1:1/v1")
    entry = parse_catalog(CATALOG_TIERLESS).entry("openai", "gpt-5")
    decision = settle_wire(outcome, hold_units=10**9, input_budget=272_000, payload_bytes=10,
                           contract=contract, entry=entry)
    assert decision.kind is S


# -- 5. an absent tier on a provider without service tiers -------------------------------

CATALOG_TIERLESS = b"""version = 1
[[model]]
provider = "openai"
model = "gpt-5"
service_tiers = false
input = "1.25"
output = "10"
cache_read = "0.125"
cache_write = "1.25"
"""


def _tierless_guard(base_url: str) -> tuple[Guard, TestOnlyPermitSource]:
    entry = parse_catalog(CATALOG_TIERLESS).entry("openai", "gpt-5")
    source = TestOnlyPermitSource(entry=entry)
    contract: Contract = kit.http_contract(base_url)
    transport = HttpTransport(base_url, credential=kit.CREDENTIAL)
    return Guard(contract, entry, source, transport), source


def test_an_absent_tier_is_the_base_rate_where_the_provider_has_no_tiers(server: Any) -> None:
    guard, source = _tierless_guard(server.url("absent_tier"))
    result = guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high"))
    assert result.ok and result.tier is None
    assert result.cost_units == COST_DEFAULT_TIER == source.records[0].charged_units
    # Rmax keeps the factor 2: a tierless server may still report priority.
    assert guard.rmax_units == kit.http_guard(server.url("absent_tier"))[0].rmax_units


def test_a_reported_tier_is_priced_as_reported_without_service_tiers(server: Any) -> None:
    guard, _ = _tierless_guard(server.url("normal"))
    result = guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high"))
    assert result.ok and result.cost_units == COST_DEFAULT_TIER


@pytest.mark.parametrize("value", ['"no"', "1", "0", '"false"'])
def test_service_tiers_must_be_a_boolean(value: str) -> None:
    from efold.guard import CatalogError

    text = CATALOG_TIERLESS.replace(b"service_tiers = false", f"service_tiers = {value}".encode())
    with pytest.raises(CatalogError) as refused:
        parse_catalog(text)
    assert refused.value.code is Code.CATALOG_INVALID


def test_service_tiers_absent_keeps_the_dearest_reading() -> None:
    absent = CATALOG_TIERLESS.replace(b"service_tiers = false\n", b"")
    assert parse_catalog(absent).entry("openai", "gpt-5").service_tiers is True
    assert parse_catalog(CATALOG_TIERLESS).entry("openai", "gpt-5").service_tiers is False


def test_loopback_cases_exist() -> None:
    for case in ("dup_usage", "input_at_floor", "no_model", "chat_total_absent"):
        assert case in loopback.CASES


# -- the decoder against an independent oracle -------------------------------------------

def _has_repeat(text: str) -> bool:
    """The oracle: the standard library's decoder, handed every object's pairs."""
    repeated = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal repeated
        keys = [k for k, _ in items]
        repeated = repeated or len(keys) != len(set(keys))
        return dict(items)

    json.loads(text, object_pairs_hook=pairs)
    return repeated


_KEYS = st.sampled_from(["a", "b", "usage", "u:v", 'q"', "\\", "é", "\u2028"])
_SCALARS = st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(
    ["", ":", "a:b", '":"', "\\:", "usage", "é:ü"])


@st.composite
def _json_texts(draw: st.DrawFn, depth: int = 0) -> str:
    """JSON text whose objects may repeat a key (written pair by pair), keys escaped or
    not at random."""
    if depth >= 3 or draw(st.booleans()):
        return json.dumps(draw(_SCALARS), ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):
        return "[" + ",".join(draw(st.lists(_json_texts(depth + 1), max_size=3))) + "]"
    members = draw(st.lists(st.tuples(_KEYS, _json_texts(depth + 1)), max_size=4))
    return "{" + ",".join(json.dumps(k, ensure_ascii=draw(st.booleans())) + " : " + v
                          for k, v in members) + "}"


@settings(max_examples=400, deadline=None)
@given(inner=_json_texts())
def test_the_decoder_agrees_with_an_independent_oracle(inner: str) -> None:
    text = '{"x":' + inner + "}"  # an object at the top, as every reply is
    for data in (text, text.encode()):
        if _has_repeat(text):
            with pytest.raises(DuplicateKey):
                decode_object(data)
        else:
            assert decode_object(data) == json.loads(text)
