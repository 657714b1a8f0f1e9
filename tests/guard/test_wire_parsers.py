"""Incremental parsing over bytes: any chunking gives the same result."""

from __future__ import annotations

import json
from typing import Any

import efold_guard_loopback as loopback
from hypothesis import given, settings
from hypothesis import strategies as st

from efold.guard import FauxReply, UsageRecord
from efold.guard.wire import (
    ChatBodyParser,
    ChatStreamParser,
    ResponsesStreamParser,
    SseDecoder,
    SseEvent,
    StreamEnd,
    WireOutcome,
    render_responses_sse,
)

TRICKY = "é 🚚 \u2028 \u2029 \u0085 \x0b \x0c 中文 \\n \" end"


def _decode_all(data: bytes, cuts: list[int]) -> list[SseEvent]:
    decoder = SseDecoder()
    events: list[SseEvent] = []
    last = 0
    for cut in sorted(cuts):  # repeated cuts feed empty chunks too
        events += decoder.feed(data[last:cut])
        last = cut
    events += decoder.feed(data[last:])
    return events


def _stream(eol: str) -> tuple[bytes, list[SseEvent]]:
    payloads = [{"type": "a", "text": TRICKY}, {"type": "b", "n": 1}]
    text = f": keep-alive{eol}"
    expected = []
    for p in payloads:
        data = json.dumps(p, ensure_ascii=False)
        text += f"event: {p['type']}{eol}data: {data}{eol}id: 7{eol}{eol}"
        expected.append(SseEvent(p["type"], data))
    return text.encode(), expected


def test_every_two_way_split_for_every_line_ending() -> None:
    for eol in ("\n", "\r\n", "\r"):
        data, expected = _stream(eol)
        for cut in range(len(data) + 1):
            assert _decode_all(data, [cut]) == expected, (eol, cut)


def test_line_separators_inside_json_are_not_line_ends() -> None:
    data, expected = _stream("\n")
    (first, _) = _decode_all(data, [])
    assert json.loads(first.data)["text"] == TRICKY
    assert first == expected[0]


def test_crlf_split_between_chunks_counts_once() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: 1\r") == []
    assert decoder.feed(b"\n\r") == [SseEvent(None, "1")]
    assert decoder.feed(b"\ndata: 2\r\n\r\n") == [SseEvent(None, "2")]


def test_empty_chunk_between_cr_and_lf() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: 1\r") == []
    assert decoder.feed(b"") == []
    assert decoder.feed(b"\ndata: 2\n\n") == [SseEvent(None, "1\n2")]


def test_bom_multiline_data_and_unterminated_event() -> None:
    decoder = SseDecoder()
    events = decoder.feed(b"\xef\xbb\xbfdata: a\ndata:b\n\ndata: lost")
    assert events == [SseEvent(None, "a\nb")]
    assert decoder.feed(b"") == []  # no blank line ever came: never dispatched


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.text(min_size=0, max_size=30), min_size=1, max_size=6),
    eols=st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=1, max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=40),
)
def test_any_chunking_decodes_the_same_events(texts: list[str], eols: list[str],
                                               cuts: list[int]) -> None:
    out, expected = "", []
    for i, text in enumerate(texts):
        eol = eols[i % len(eols)]
        data = json.dumps({"t": text}, ensure_ascii=False)
        out += f"data: {data}{eol}{eol}"
        expected.append(SseEvent(None, data))
    raw = out.encode()
    assert _decode_all(raw, [c % (len(raw) + 1) for c in cuts]) == expected


def _feed(parser: Any, data: bytes, cuts: list[int]) -> WireOutcome:
    last = 0
    for cut in sorted(c % (len(data) + 1) for c in cuts):
        parser.feed(data[last:cut])
        last = cut
    parser.feed(data[last:])
    return parser.finish()  # type: ignore[no-any-return]


ITEMS = [
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque=="},
    {"type": "message", "role": "assistant",
     "content": [{"type": "output_text", "text": TRICKY}]},
    {"type": "function_call", "call_id": "c1", "name": "history_search",
     "arguments": '{"query": "é\u2028"}'},
]


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=60))
def test_responses_stream_any_chunking(cuts: list[int]) -> None:
    usage = {"input_tokens": 50, "output_tokens": 9, "input_tokens_details":
             {"cached_tokens": 4, "cache_write_tokens": 2},
             "output_tokens_details": {"reasoning_tokens": 3}}
    data = render_responses_sse(FauxReply(ITEMS, usage=usage, tier="flex"), usage)
    outcome = _feed(ResponsesStreamParser(), data, cuts)
    assert outcome.terminal is StreamEnd.COMPLETED and not outcome.malformed
    assert outcome.output_items == ITEMS
    assert outcome.usage == UsageRecord(input=50, output=9, cache_read=4, cache_write=2,
                                        reasoning=3)
    assert outcome.tier == "flex"


def test_responses_stream_missing_usage_is_none_not_zero() -> None:
    data = render_responses_sse(FauxReply(ITEMS, usage=None, tier=None), None)
    outcome = _feed(ResponsesStreamParser(), data, [])
    assert outcome.terminal is StreamEnd.COMPLETED
    assert outcome.usage is None and not outcome.usage_invalid
    assert outcome.tier is None  # created's requested "auto" is not the billed tier


def test_responses_stream_cut_before_terminal_blank_line_is_lost() -> None:
    data = render_responses_sse(FauxReply(ITEMS), {"input_tokens": 1, "output_tokens": 1})
    outcome = _feed(ResponsesStreamParser(), data[:-1], [])  # drop the final "\n"
    assert outcome.terminal is StreamEnd.NONE and outcome.usage is None


def test_responses_stream_invalid_utf8_is_malformed() -> None:
    outcome = _feed(ResponsesStreamParser(), b'data: {"type": "x\xff"}\n\n', [])
    assert outcome.terminal is StreamEnd.NONE and outcome.malformed


def test_a_second_terminal_after_the_first_is_read_as_invalid_usage() -> None:
    data = render_responses_sse(FauxReply(ITEMS), {"input_tokens": 1, "output_tokens": 1})
    data += b'data: {"type": "error"}\n\n'
    outcome = _feed(ResponsesStreamParser(), data, [])
    assert outcome.terminal is StreamEnd.COMPLETED  # the first terminal decides the kind
    assert outcome.usage_invalid and outcome.usage is None


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=5_000), max_size=40))
def test_chat_stream_any_chunking(cuts: list[int]) -> None:
    data = loopback.chat_sse(loopback.chat_chunks(usage=True, tool_call=True))
    outcome = _feed(ChatStreamParser(), data, cuts)
    assert outcome.terminal is StreamEnd.COMPLETED
    assert outcome.usage == UsageRecord(input=120, output=50, cache_read=20, reasoning=10)
    assert outcome.output_items[0]["content"][0]["text"] == loopback.REPLY_TEXT
    assert outcome.output_items[1]["arguments"] == '{"id": "rec-7"}'
    assert outcome.tier == "default"


def test_chat_stream_without_usage_or_done() -> None:
    no_usage = _feed(ChatStreamParser(), loopback.chat_sse(loopback.chat_chunks(usage=False)), [])
    assert no_usage.terminal is StreamEnd.COMPLETED and no_usage.usage is None
    assert not no_usage.usage_invalid
    body = loopback.chat_sse(loopback.chat_chunks(usage=True))
    cut = _feed(ChatStreamParser(), body[: body.rindex(b"data: [DONE]")], [])
    assert cut.terminal is StreamEnd.NONE


def test_chat_stream_length_and_error() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "length"}],
             "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    data = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
    assert _feed(ChatStreamParser(), data, []).terminal is StreamEnd.INCOMPLETE
    err = b'data: {"error": {"message": "overloaded"}}\n\ndata: [DONE]\n\n'
    assert _feed(ChatStreamParser(), err, []).terminal is StreamEnd.FAILED


def test_chat_body_parser() -> None:
    outcome = _feed(ChatBodyParser(), loopback.chat_body(usage=True), [3, 50, 51])
    assert outcome.terminal is StreamEnd.COMPLETED
    assert outcome.usage == UsageRecord(input=120, output=50, cache_read=20)
    assert _feed(ChatBodyParser(), loopback.chat_body(usage=False), []).usage is None
    assert _feed(ChatBodyParser(), b"{not json", []).malformed
    invalid = json.loads(loopback.chat_body(usage=True))
    invalid["usage"]["completion_tokens"] = 1.5
    assert _feed(ChatBodyParser(), json.dumps(invalid).encode(), []).usage_invalid
