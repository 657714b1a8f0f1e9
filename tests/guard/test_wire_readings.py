"""What the parsers read from a hostile provider's bytes: usage bounds, conflicting or
duplicate terminal usage, the reported model, and when a terminal has been seen.

Every case is fed as raw bytes, so what msgspec decodes (an int of any size, a float
for ``1e29``) is what the readers see.
"""

from __future__ import annotations

import json
from typing import Any

import efold_guard_kit as kit
import efold_guard_loopback as loopback
import msgspec
import pytest

from efold.guard import FauxReply, UsageRecord
from efold.guard.permits import USAGE_COUNT_LIMIT
from efold.guard.transport import WireRequest, mint_ticket
from efold.guard.wire import (
    ChatBodyParser,
    ChatStreamParser,
    FauxTransport,
    ResponsesStreamParser,
    StreamEnd,
    WireOutcome,
    render_responses_sse,
)

# -- usage counts: an int (never a bool) in [0, USAGE_COUNT_LIMIT) -------------------

U64_MAX = "18446744073709551615"  # a provider's "-1" sentinel read as unsigned
BIG_INT = "100000000000000000000000000000"  # 1e29 written out as an integer

# JSON texts that must make a usage count invalid. The two huge integers decode to
# Python ints (msgspec keeps arbitrary precision): only the bound refuses them.
INVALID_COUNTS = [U64_MAX, BIG_INT, "1e29", str(2**58), str(USAGE_COUNT_LIMIT), "-1",
                  '"5"', "true", "1.0", "[]"]
VALID_COUNTS = ["0", str(USAGE_COUNT_LIMIT - 1)]

# Where each count sits in a Responses and in a Chat usage object.
RESPONSES_PATHS = {
    "input": ("input_tokens",),
    "output": ("output_tokens",),
    "cache_read": ("input_tokens_details", "cached_tokens"),
    "cache_write": ("input_tokens_details", "cache_write_tokens"),
    "reasoning": ("output_tokens_details", "reasoning_tokens"),
}
CHAT_PATHS = {
    "input": ("prompt_tokens",),
    "output": ("completion_tokens",),
    "cache_read": ("prompt_tokens_details", "cached_tokens"),
    "cache_write": ("prompt_tokens_details", "cache_write_tokens"),
    "reasoning": ("completion_tokens_details", "reasoning_tokens"),
}
MARK = 987_654_321  # a placeholder count, replaced textually by the JSON under test


def _usage_text(paths: dict[str, tuple[str, ...]], field: str, count: str) -> str:
    """A usage object's JSON with every count 7 except ``field``, written as ``count``."""
    usage: dict[str, Any] = {}
    for name, path in paths.items():
        target = usage
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = MARK if name == field else 7
    return json.dumps(usage).replace(str(MARK), count)


def _responses_bytes(usage: str) -> bytes:
    response = '{"id": "r", "status": "completed", "output": [], "usage": ' + usage + "}"
    return b'data: {"type": "response.completed", "response": ' + response.encode() + b"}\n\n"


def _chat_stream_bytes(usage: str) -> bytes:
    return (b'data: {"choices": [], "usage": ' + usage.encode() + b"}\n\n"
            b"data: [DONE]\n\n")


def _chat_body_bytes(usage: str) -> bytes:
    return (b'{"choices": [{"index": 0, "finish_reason": "stop", "message": '
            b'{"role": "assistant", "content": "x"}}], "usage": ' + usage.encode() + b"}")


def _outcome(parser: Any, data: bytes) -> WireOutcome:
    parser.feed(data)
    return parser.finish()  # type: ignore[no-any-return]


def test_huge_integers_decode_as_ints() -> None:
    # The bound, not the decoder, is what refuses these: msgspec keeps them exact.
    assert msgspec.json.decode(U64_MAX.encode()) == 2**64 - 1
    assert msgspec.json.decode(BIG_INT.encode()) == 10**29
    assert isinstance(msgspec.json.decode(b"1e29"), float)


@pytest.mark.parametrize("count", INVALID_COUNTS)
@pytest.mark.parametrize("field", list(RESPONSES_PATHS))
def test_out_of_bounds_count_is_invalid_usage(field: str, count: str) -> None:
    for parser, data in (
        (ResponsesStreamParser(), _responses_bytes(_usage_text(RESPONSES_PATHS, field, count))),
        (ChatStreamParser(), _chat_stream_bytes(_usage_text(CHAT_PATHS, field, count))),
        (ChatBodyParser(), _chat_body_bytes(_usage_text(CHAT_PATHS, field, count))),
    ):
        outcome = _outcome(parser, data)
        assert outcome.terminal is StreamEnd.COMPLETED, type(parser)
        assert outcome.usage_invalid and outcome.usage is None, type(parser)


@pytest.mark.parametrize("count", VALID_COUNTS)
@pytest.mark.parametrize("field", list(RESPONSES_PATHS))
def test_in_bounds_count_is_read_exactly(field: str, count: str) -> None:
    expected = UsageRecord(**{name: int(count) if name == field else 7
                              for name in RESPONSES_PATHS})
    for parser, data in (
        (ResponsesStreamParser(), _responses_bytes(_usage_text(RESPONSES_PATHS, field, count))),
        (ChatStreamParser(), _chat_stream_bytes(_usage_text(CHAT_PATHS, field, count))),
        (ChatBodyParser(), _chat_body_bytes(_usage_text(CHAT_PATHS, field, count))),
    ):
        outcome = _outcome(parser, data)
        assert not outcome.usage_invalid and outcome.usage == expected, type(parser)


# -- two terminal usage readings: never pick the cheaper one --------------------------

def _chat_usage_chunks(*usages: Any) -> bytes:
    body = "".join(f"data: {json.dumps({'choices': [], 'usage': u})}\n\n" for u in usages)
    return (body + "data: [DONE]\n\n").encode()


CHAT_USAGE = {"prompt_tokens": 120, "completion_tokens": 50}


def test_chat_stream_conflicting_usage_is_invalid() -> None:
    cheaper = {**CHAT_USAGE, "completion_tokens": 5}
    for first, second in ((CHAT_USAGE, cheaper), (cheaper, CHAT_USAGE)):
        outcome = _outcome(ChatStreamParser(), _chat_usage_chunks(first, second))
        assert outcome.usage_invalid and outcome.usage is None
    # The shared loopback script (also run over HTTP) reads the same way.
    scripted = _outcome(ChatStreamParser(), loopback.chat_sse(loopback.chat_usage_conflict()))
    assert scripted.usage_invalid and scripted.usage is None


def test_chat_stream_conflict_in_type_only_is_invalid() -> None:
    # 50 == 50.0 in Python; as a usage reading one is a count and the other is not.
    outcome = _outcome(ChatStreamParser(), _chat_usage_chunks(
        CHAT_USAGE, {**CHAT_USAGE, "completion_tokens": 50.0}))
    assert outcome.usage_invalid and outcome.usage is None


def test_chat_stream_identical_usage_repeat_and_nulls_are_accepted() -> None:
    outcome = _outcome(ChatStreamParser(), _chat_usage_chunks(None, CHAT_USAGE, None,
                                                              CHAT_USAGE, None))
    assert not outcome.usage_invalid
    assert outcome.usage == UsageRecord(input=120, output=50)


def _responses_events(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def _terminal_event(kind: str = "response.completed", output: int = 50,
                    **response: Any) -> dict[str, Any]:
    body = {"id": "r", "status": "completed", "output": [],
            "usage": {"input_tokens": 120, "output_tokens": output}, **response}
    return {"type": kind, "response": body}


@pytest.mark.parametrize("second", [
    _terminal_event(),  # an identical repeat is still a second terminal
    _terminal_event(output=5),
    _terminal_event("response.incomplete"),
    _terminal_event("response.failed"),
    {"type": "error", "code": "server_error"},
])
def test_responses_second_terminal_in_fed_data_is_invalid(second: dict[str, Any]) -> None:
    data = _responses_events(_terminal_event(), second)
    for cut in range(len(data) + 1):  # in one chunk or split anywhere
        parser = ResponsesStreamParser()
        parser.feed(data[:cut])
        parser.feed(data[cut:])
        outcome = parser.finish()
        assert outcome.terminal is StreamEnd.COMPLETED, cut
        assert outcome.usage_invalid and outcome.usage is None, cut


def test_responses_single_terminal_with_other_events_after_is_valid() -> None:
    data = _responses_events(_terminal_event(), {"type": "response.output_text.delta"})
    outcome = _outcome(ResponsesStreamParser(), data)
    assert not outcome.usage_invalid and outcome.usage == UsageRecord(input=120, output=50)


# -- the reported model: read, never judged ---------------------------------------------

def _created(**response: Any) -> dict[str, Any]:
    return {"type": "response.created", "response": {"id": "r", **response}}


@pytest.mark.parametrize(("events", "model", "conflict"), [
    ([_created(model="gpt-5"), _terminal_event(model="gpt-5")], "gpt-5", False),
    ([_created(), _terminal_event()], None, False),
    ([_created(model="gpt-5"), _terminal_event()], "gpt-5", False),
    ([_created(), _terminal_event(model="gpt-5-mini")], "gpt-5-mini", False),
    ([_created(model="gpt-5"), _terminal_event(model="gpt-5-mini")], "gpt-5", True),
    ([_created(model="gpt-5"),
      {"type": "response.in_progress", "response": {"model": "gpt-4o"}},
      _terminal_event(model="gpt-5")], "gpt-5", True),
    ([_created(model=5), _terminal_event()], None, True),
    ([_created(model=None), _terminal_event()], None, True),  # present, not a string
    # A duplicate terminal's differing model is a conflict too.
    ([_terminal_event(model="gpt-5"), _terminal_event(model="gpt-4o")], "gpt-5", True),
])
def test_responses_model(events: list[dict[str, Any]], model: str | None,
                         conflict: bool) -> None:
    outcome = _outcome(ResponsesStreamParser(), _responses_events(*events))
    assert (outcome.model, outcome.model_conflict) == (model, conflict)


def _chat_chunk(**fields: Any) -> str:
    return "data: " + json.dumps({"choices": [], **fields}) + "\n\n"


@pytest.mark.parametrize(("chunks", "model", "conflict"), [
    ([_chat_chunk(model="gpt-5"), _chat_chunk(model="gpt-5")], "gpt-5", False),
    ([_chat_chunk(), _chat_chunk()], None, False),
    ([_chat_chunk(), _chat_chunk(model="gpt-5")], "gpt-5", False),
    ([_chat_chunk(model="gpt-5"), _chat_chunk(model="gpt-4o")], "gpt-5", True),
    ([_chat_chunk(model="gpt-5"), _chat_chunk(model=["gpt-5"])], "gpt-5", True),
])
def test_chat_stream_model(chunks: list[str], model: str | None, conflict: bool) -> None:
    data = ("".join(chunks) + "data: [DONE]\n\n").encode()
    outcome = _outcome(ChatStreamParser(), data)
    assert (outcome.model, outcome.model_conflict) == (model, conflict)


def test_chat_stream_model_of_the_scripted_stream() -> None:
    data = loopback.chat_sse(loopback.chat_chunks(usage=True))
    assert _outcome(ChatStreamParser(), data).model == "gpt-5"


def test_chat_body_model() -> None:
    doc = json.loads(loopback.chat_body(usage=True))
    assert _outcome(ChatBodyParser(), json.dumps(doc).encode()).model == "gpt-5"
    doc["model"] = 7
    outcome = _outcome(ChatBodyParser(), json.dumps(doc).encode())
    assert (outcome.model, outcome.model_conflict) == (None, True)
    del doc["model"]
    outcome = _outcome(ChatBodyParser(), json.dumps(doc).encode())
    assert (outcome.model, outcome.model_conflict) == (None, False)


def test_faux_transport_reports_the_payload_model() -> None:
    payload = kit.responses_payload()
    body = msgspec.json.encode(payload)
    response = FauxTransport(kit.answer).open(mint_ticket("permit-model"),
                                              WireRequest("/responses", body, True, 10.0))
    parser = ResponsesStreamParser()
    for chunk in response.chunks():
        parser.feed(chunk)
    outcome = parser.finish()
    assert outcome.terminal is StreamEnd.COMPLETED
    assert (outcome.model, outcome.model_conflict) == (kit.FAUX_MODEL, False)
    # The renderer leaves the model out unless told: the parser then reads none.
    bare = render_responses_sse(FauxReply(kit.ANSWER_ITEMS), None)
    assert _outcome(ResponsesStreamParser(), bare).model is None


# -- done: a terminal has been parsed -------------------------------------------------

def test_responses_done_at_the_first_terminal() -> None:
    data = _responses_events(_created(), _terminal_event())
    end = data.index(b"\n\n", data.index(b"response.completed")) + 2
    parser = ResponsesStreamParser()
    parser.feed(data[:end - 1])  # the terminal's blank line has not arrived yet
    assert not parser.done
    parser.feed(data[end - 1:end])
    assert parser.done
    assert parser.finish().terminal is StreamEnd.COMPLETED


@pytest.mark.parametrize("kind", ["response.incomplete", "response.failed", "error"])
def test_responses_done_at_every_terminal_kind(kind: str) -> None:
    parser = ResponsesStreamParser()
    parser.feed(_responses_events(_terminal_event(kind)))
    assert parser.done


def test_responses_not_done_without_terminal() -> None:
    parser = ResponsesStreamParser()
    parser.feed(loopback.sse(loopback.responses_events(terminal=None)))
    assert not parser.done
    assert parser.finish().terminal is StreamEnd.NONE


def test_chat_stream_done_at_done_marker() -> None:
    data = loopback.chat_sse(loopback.chat_chunks(usage=True))
    parser = ChatStreamParser()
    parser.feed(data[:data.rindex(b"data: [DONE]")])
    assert not parser.done
    parser.feed(data[data.rindex(b"data: [DONE]"):])
    assert parser.done


def test_chat_body_parser_is_never_done() -> None:
    parser = ChatBodyParser()
    assert not parser.done
    parser.feed(loopback.chat_body(usage=True))
    assert not parser.done  # it needs the whole body: only the end of the stream ends it
    assert parser.finish().terminal is StreamEnd.COMPLETED
