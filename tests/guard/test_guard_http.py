"""Every scripted provider case over real HTTP (loopback), through the real adapters.

Each case asserts: the outcome kind and fixed code; the effect on the hold (replaced
by the catalog cost, or retained); exactly one request reached the server, carrying
exactly the admitted body; and what the guard does next (continue / slot terminal /
sticky stop, each without a new hold).
"""

from __future__ import annotations

import hashlib
import json
import socket
from typing import Any

import efold_guard_kit as kit
import efold_guard_loopback as loopback
import pytest

from efold.errors import Code
from efold.guard import OutcomeKind, WireApi

S, L, STOP, A = (OutcomeKind.SETTLED, OutcomeKind.LOST, OutcomeKind.INTEGRITY_STOP,
                 OutcomeKind.OWN_ABORT_AFTER_SEND)
R = WireApi.OPENAI_RESPONSES
C = WireApi.OPENAI_CHAT

# gpt-5 rates in units/token: input 25, cache read 2.5, output 200. The scripted usage
# (input 120 incl. 20 cached, output 50) costs 100*25 + 20*2.5 + 50*200 = 12,550 units.
COST_DEFAULT_TIER = 12_550

CASES: list[tuple[str, WireApi, bool, OutcomeKind, Code | None]] = [
    ("normal", R, True, S, None),
    ("normal_crlf", R, True, S, None),
    ("normal_cr", R, True, S, None),
    ("incomplete", R, True, S, None),
    ("failed", R, True, L, Code.LOOKUP_RESPONSE_FAILED),
    ("error_event", R, True, L, Code.LOOKUP_RESPONSE_FAILED),
    ("cut", R, True, L, Code.LOOKUP_STREAM_LOST),
    ("cut_clean", R, True, L, Code.LOOKUP_STREAM_LOST),
    ("missing_usage", R, True, L, Code.LOOKUP_MISSING_USAGE),
    ("zero_input", R, True, STOP, Code.LOOKUP_INVALID_USAGE),
    ("input_above_u", R, True, STOP, Code.LOOKUP_USAGE_INPUT_ABOVE_ADMITTED),
    ("output_above_o", R, True, STOP, Code.LOOKUP_USAGE_OUTPUT_ABOVE_MAX),
    ("reasoning_above_output", R, True, STOP, Code.LOOKUP_USAGE_REASONING_ABOVE_OUTPUT),
    ("cache_above_input", R, True, STOP, Code.LOOKUP_USAGE_CACHE_ABOVE_INPUT),
    ("unknown_tier", R, True, STOP, Code.LOOKUP_UNKNOWN_TIER),
    ("absent_tier", R, True, S, None),
    ("http_401", R, True, STOP, Code.LOOKUP_HTTP_STATUS),
    ("http_429", R, True, STOP, Code.LOOKUP_HTTP_STATUS),
    ("http_500", R, True, L, Code.LOOKUP_HTTP_STATUS),
    ("redirect", R, True, STOP, Code.LOOKUP_REDIRECT_FORBIDDEN),
    ("chat_stream", C, True, S, None),
    ("chat_stream_tools", C, True, S, None),
    ("chat_stream_no_usage", C, True, L, Code.LOOKUP_MISSING_USAGE),
    ("chat_usage_conflict", C, True, STOP, Code.LOOKUP_INVALID_USAGE),
    ("u64_usage", R, True, STOP, Code.LOOKUP_INVALID_USAGE),
    ("chat_body", C, False, S, None),
    ("chat_body_no_usage", C, False, L, Code.LOOKUP_MISSING_USAGE),
]


def _payload(api: WireApi, stream: bool) -> dict[str, Any]:
    if api is R:
        return kit.responses_payload(model=kit.REAL_MODEL, effort="high")
    return kit.chat_payload(stream=stream)


@pytest.mark.parametrize(("case", "api", "stream", "kind", "code"), CASES,
                         ids=[c[0] for c in CASES])
def test_scripted_case(server: Any, case: str, api: WireApi, stream: bool,
                       kind: OutcomeKind, code: Code | None) -> None:
    guard, source = kit.http_guard(server.url(case), api, stream=stream)
    payload = _payload(api, stream)

    result = guard.request(payload)

    assert (result.outcome, result.code) == (kind, code)
    assert result.sent
    # Exactly one request reached the provider, with exactly the admitted body.
    (sent,) = server.requests
    (record,) = source.records
    assert hashlib.sha256(sent.body).hexdigest() == record.payload_digest == record.body_digest
    assert sent.headers["authorization"] == f"Bearer {kit.CREDENTIAL}"
    assert sent.path.endswith("/responses" if api is R else "/chat/completions")
    assert record.settlement is not None and record.settlement.kind is kind
    hold = record.hold_units
    assert hold == guard.rmax_units
    if kind is S:
        # The hold is replaced by the catalog cost.
        assert result.cost_units == record.charged_units < hold
        assert result.output_items, "a settled reply carries its output items"
        assert guard.stopped is None and guard.terminal is None
        assert guard.prior_output_tokens == result.usage.output  # type: ignore[union-attr]
    else:
        # Lost and integrity outcomes retain the hold (or a larger known partial).
        assert record.charged_units >= hold
        assert result.output_items == []
    if kind is L:
        assert guard.terminal == code and guard.stopped is None and source.stops == []
    if kind is STOP:
        assert guard.stopped == code and source.stops[0] == code

    # What happens next never creates a hold or a send.
    again = guard.request(payload)
    if kind is S:
        assert again.outcome is S and len(source.records) == 2
    else:
        expected = Code.LOOKUP_SLOT_TERMINAL if kind is L else Code.LOOKUP_STOPPED
        assert (again.outcome, again.code) == (OutcomeKind.REFUSED_PRE_SEND, expected)
        assert len(source.records) == 1 and source.calls.count("admit") == 1
        assert len(server.requests) == 1


def test_normal_case_details(server: Any) -> None:
    guard, _ = kit.http_guard(server.url("normal_crlf"))
    result = guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high"))
    assert result.cost_units == COST_DEFAULT_TIER
    assert result.tier == "default"  # from response.completed, not created's "auto"
    assert result.usage is not None
    assert result.usage.counts() == {"input": 120, "output": 50, "cache_read": 20,
                                     "reasoning": 10}
    (item,) = result.output_items
    assert item["content"][0]["text"] == loopback.REPLY_TEXT  # UTF-8 + U+2028/9 intact
    assert result.status == "completed"


def test_incomplete_settles_with_incomplete_status(server: Any) -> None:
    guard, _ = kit.http_guard(server.url("incomplete"))
    result = guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high"))
    assert result.ok and result.status == "incomplete"


def test_absent_tier_is_priced_at_twice(server: Any) -> None:
    guard, source = kit.http_guard(server.url("absent_tier"))
    result = guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high"))
    assert result.ok and result.tier is None
    assert result.cost_units == 2 * COST_DEFAULT_TIER
    assert source.records[0].tier is None


def test_unknown_tier_is_redacted_and_partial_priced_at_twice(server: Any) -> None:
    guard, source = kit.http_guard(server.url("unknown_tier"))
    result = guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high"))
    assert result.code is Code.LOOKUP_UNKNOWN_TIER and result.tier is None
    assert source.records[0].tier is None
    assert result.cost_units == 2 * COST_DEFAULT_TIER  # known partial, conservatively


def test_failed_response_keeps_hold_and_reports_known_partial(server: Any) -> None:
    guard, source = kit.http_guard(server.url("failed"))
    result = guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high"))
    assert result.outcome is L and result.cost_units == COST_DEFAULT_TIER
    assert source.records[0].charged_units == source.records[0].hold_units


def test_http_status_is_recorded(server: Any) -> None:
    guard, source = kit.http_guard(server.url("http_429"))
    result = guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high"))
    assert result.http_status == 429
    assert source.records[0].settlement.http_status == 429  # type: ignore[union-attr]


def test_redirect_is_not_followed(server: Any) -> None:
    guard, _ = kit.http_guard(server.url("redirect"))
    guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high"))
    assert [r.path for r in server.requests] == ["/case/redirect/v1/responses"]


def test_chat_tool_call_deltas_become_a_function_call_item(server: Any) -> None:
    guard, _ = kit.http_guard(server.url("chat_stream_tools"), C)
    result = guard.request(kit.chat_payload())
    assert result.ok
    message, call = result.output_items
    assert message["content"][0]["text"] == loopback.REPLY_TEXT
    assert call == {"type": "function_call", "call_id": "call_1", "name": "history_get",
                    "arguments": '{"id": "rec-7"}'}


def test_stalled_stream_is_an_own_abort_after_send(server: Any) -> None:
    guard, source = kit.http_guard(server.url("stall"), deadline_s=0.4)
    try:
        result = guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high"))
    finally:
        server.release_stalled()
    assert (result.outcome, result.code) == (A, Code.LOOKUP_REQUEST_DEADLINE)
    assert source.records[0].charged_units == source.records[0].hold_units
    assert guard.terminal is Code.LOOKUP_REQUEST_DEADLINE and guard.stopped is None
    assert guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high")).code \
        is Code.LOOKUP_SLOT_TERMINAL


def test_connection_refused_is_lost_not_refused() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    guard, source = kit.http_guard(f"http://127.0.0.1:{port}/v1")
    result = guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high"))
    # Admitted, then failed before anything left: conservatively lost, hold retained.
    assert (result.outcome, result.code) == (L, Code.LOOKUP_SEND_FAILED)
    assert source.records[0].charged_units == source.records[0].hold_units


def test_env_proxy_settings_are_ignored(server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    guard, _ = kit.http_guard(server.url("normal"))
    assert guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high")).ok


def test_the_cache_key_travels_in_the_payload_and_both_headers(server: Any) -> None:
    from efold.guard.wire.formats import CACHE_KEY_HEADERS

    key = "efold-0a1b2c3d4e5f-000007"
    guard, _ = kit.http_guard(server.url("normal"), prompt_cache_key=key)
    result = guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high",
                                                 prompt_cache_key=key))
    assert result.outcome is S
    (sent,) = server.requests
    assert json.loads(sent.body)["prompt_cache_key"] == key
    assert [sent.headers[name] for name in CACHE_KEY_HEADERS] == [key, key]


def test_a_request_without_a_cache_key_sends_no_such_header(server: Any) -> None:
    from efold.guard.wire.formats import CACHE_KEY_HEADERS

    guard, _ = kit.http_guard(server.url("normal"))
    guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high"))
    (sent,) = server.requests
    assert not set(CACHE_KEY_HEADERS) & set(sent.headers)
