"""The guard's one path to a model, against a real llama.cpp server on loopback.

Each test sends real HTTP through ``HttpTransport`` and reads back what the permit
ledger settled. What the server said is read independently, from the raw bytes it sent
(recorded at the transport seam), never from the guard's own parse.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from efold.errors import Code
from efold.guard import CatalogEntry, Contract, Guard, HttpTransport, WireApi, parse_catalog
from efold.guard.permits import OutcomeKind
from efold.guard.pricing import price_units
from efold.guard.testing import TestOnlyPermitSource
from efold.guard.transport import SendTicket, WireRequest, WireResponse

from .conftest import CATALOG, GEMMA, MODEL, PROVIDER, usage_counts

pytestmark = pytest.mark.model_server

QUESTION = "What is the capital of France? Answer in one word."


class RecordingTransport:
    """``HttpTransport`` with every response byte kept, for an independent reading."""

    def __init__(self, inner: HttpTransport) -> None:
        self.route = inner.route
        self._inner = inner
        self.received = bytearray()

    def open(self, ticket: SendTicket, request: WireRequest) -> WireResponse:
        response = self._inner.open(ticket, request)
        received = self.received

        class Recorded:
            status = response.status

            def chunks(self) -> Iterator[bytes]:
                for chunk in response.chunks():
                    received.extend(chunk)
                    yield chunk

            def close(self) -> None:
                response.close()

        return Recorded()


def _guard(url: str, entry: CatalogEntry, *, stream: bool, credential: str | None = None,
           ) -> tuple[Guard, TestOnlyPermitSource, RecordingTransport]:
    contract = Contract(provider=PROVIDER, model=entry.model, api=WireApi.OPENAI_CHAT,
                        base_url=url, effort=None, stream=stream)
    source = TestOnlyPermitSource(entry=entry)
    transport = RecordingTransport(HttpTransport(url, credential=credential))
    return Guard(contract, entry, source, transport, run_id="real", deadline_s=120), \
        source, transport


def _events(received: bytearray) -> list[bytes]:
    """The ``data:`` payloads of a server-sent event stream, in order."""
    return [line.removeprefix(b"data: ") for line in bytes(received).splitlines()
            if line.startswith(b"data: ")]


def _payload(question: str, *, stream: bool, max_tokens: int = 24, model: str = MODEL,
             ) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": model, "stream": stream, "max_completion_tokens": max_tokens,
        "messages": [{"role": "user", "content": question}],
    }
    if stream:
        payload["stream_options"] = {"include_usage": True}
    return payload


def test_an_answer_settles_at_exactly_the_usage_the_server_reported(
        model_server_url: str, entry: CatalogEntry) -> None:
    guard, source, transport = _guard(model_server_url, entry, stream=False)
    result = guard.request(_payload(QUESTION, stream=False))

    assert result.outcome is OutcomeKind.SETTLED and result.sent
    body = json.loads(bytes(transport.received))
    reported = body["usage"]
    assert body["model"] == MODEL
    assert reported["prompt_tokens"] > 0 and reported["completion_tokens"] > 0
    [record] = source.records
    assert record.state == "settled"
    assert record.settled_units == price_units(entry, usage_counts(reported), None)
    answer = result.output_items[0]["content"][0]["text"]
    assert answer == body["choices"][0]["message"]["content"] and answer.strip()


def test_a_stream_settles_at_exactly_the_usage_of_its_last_chunk(
        model_server_url: str, entry: CatalogEntry) -> None:
    """llama-server honours ``stream_options.include_usage``: after the chunk with the
    finish reason comes one with no choices and the usage, then ``[DONE]``; the answer
    settles at exactly that usage, and only that chunk carries one."""
    guard, source, transport = _guard(model_server_url, entry, stream=True)
    result = guard.request(_payload(QUESTION, stream=True))

    events = _events(transport.received)
    assert events[-1] == b"[DONE]" and len(events) > 3
    chunks = [json.loads(e) for e in events[:-1]]
    assert [c for c in chunks if "usage" in c] == [chunks[-1]] and chunks[-1]["choices"] == []
    reported = chunks[-1]["usage"]
    assert reported["prompt_tokens"] > 0 and reported["completion_tokens"] > 0
    assert all(c["model"] == MODEL for c in chunks)
    assert result.outcome is OutcomeKind.SETTLED and result.sent
    [record] = source.records
    assert record.state == "settled"
    assert record.settled_units == price_units(entry, usage_counts(reported), None)
    answer = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1]
                     if c["choices"])
    assert result.output_items[0]["content"][0]["text"] == answer and answer.strip()


def test_a_wrong_credential_is_a_sticky_stop_and_the_right_one_settles(
        entry: CatalogEntry, start_server: Any) -> None:
    server = start_server(api_key="the-right-key")
    guard, source, _ = _guard(server.url, entry, stream=False, credential="a-wrong-key")
    refused = guard.request(_payload(QUESTION, stream=False))
    assert refused.outcome is OutcomeKind.INTEGRITY_STOP
    assert refused.http_status == 401 and refused.code is Code.LOOKUP_HTTP_STATUS
    assert source.stops == [Code.LOOKUP_HTTP_STATUS]
    assert guard.request(_payload(QUESTION, stream=False)).code is Code.LOOKUP_STOPPED
    assert [r.state for r in source.records] == ["integrity_stop"]

    good, good_source, _ = _guard(server.url, entry, stream=False, credential="the-right-key")
    assert good.request(_payload(QUESTION, stream=False)).outcome is OutcomeKind.SETTLED
    assert [r.state for r in good_source.records] == ["settled"]


def test_a_server_killed_mid_answer_is_a_loss_with_the_hold_kept(
        entry: CatalogEntry, start_server: Any) -> None:
    server = start_server()
    guard, source, transport = _guard(server.url, entry, stream=True)

    def kill_once_streaming() -> None:
        for _ in range(400):
            if len(transport.received) > 200:
                break
            threading.Event().wait(0.025)
        server.process.kill()

    killer = threading.Thread(target=kill_once_streaming)
    killer.start()
    result = guard.request(_payload("Count from 1 to 500, one number a line.", stream=True,
                                    max_tokens=4000))
    killer.join()

    assert transport.received, "the server sent nothing before it was killed"
    assert result.outcome is OutcomeKind.LOST and result.sent
    [record] = source.records
    assert record.state == "lost" and record.hold_units == result.hold_units


def _native_checkpoint() -> Any:
    """A short conversation with one tool round, folded by the native arm."""
    from efold.corpus.model import Event, FunctionCall, ToolCall
    from efold.folds.arms import NativeFold
    from efold.folds.fold import TracePrefix

    call = ToolCall(id="call_0001", function=FunctionCall(name="email_read",
                                                          arguments='{"folder": "inbox"}'))
    events = [
        Event(id="e1", session=1, day=1, role="user", content="Read the vendor email."),
        Event(id="e2", session=1, day=1, role="assistant", content="", tool_calls=[call]),
        Event(id="e3", session=1, day=1, role="tool", content="Account reference: ACC-7F3K",
              tool_call_id="call_0001", name="email_read", source="email"),
        Event(id="e4", session=1, day=1, role="assistant",
              content="The account reference is ACC-7F3K."),
    ]
    return NativeFold().build(TracePrefix(trace_id="t1", events=events))


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_checkpoint_in_chat_messages_reaches_the_model_through_the_guard(
        model_server_url: str, entry: CatalogEntry, stream: bool) -> None:
    """The native arm's checkpoint (a replayed ``email_read`` call and its result)
    converted to Chat Completions messages is accepted by the guard and by the server."""
    from efold.folds.request import checkpoint_to_chat_request

    guard, source, transport = _guard(model_server_url, entry, stream=stream)
    payload = checkpoint_to_chat_request(
        _native_checkpoint(), "What is the account reference?", model=MODEL,
        instructions="Answer from the conversation.", stream=stream)
    payload["max_completion_tokens"] = 24
    result = guard.request(payload)

    assert result.sent and transport.received
    assert result.outcome is OutcomeKind.SETTLED
    assert [r.state for r in source.records] == ["settled"]
    if stream:  # the usage is the last chunk's (the one before [DONE])
        usage = json.loads(_events(transport.received)[-2])["usage"]
    else:
        usage = json.loads(bytes(transport.received))["usage"]
    assert usage["prompt_tokens"] > 40
    assert source.records[0].settled_units == price_units(entry, usage_counts(usage), None)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_gemma_answers_on_its_own_server_and_settles_at_its_usage(
        gemma_server_url: str, stream: bool) -> None:
    """The second server (Gemma 3 270M, alias ``gemma3``, its turn format from the
    script's template) answers through the guard at its own catalog rates: the usage it
    reported, priced, is what settled, and it names itself by its alias."""
    entry = parse_catalog(CATALOG).entry(PROVIDER, GEMMA)
    guard, source, transport = _guard(gemma_server_url, entry, stream=stream)
    result = guard.request(_payload(QUESTION, stream=stream, model=GEMMA))

    assert result.outcome is OutcomeKind.SETTLED and result.sent
    if stream:
        body = json.loads(_events(transport.received)[-2])
    else:
        body = json.loads(bytes(transport.received))
    assert body["model"] == GEMMA
    assert body["usage"]["prompt_tokens"] > 0 and body["usage"]["completion_tokens"] > 0
    [record] = source.records
    assert record.settled_units == price_units(entry, usage_counts(body["usage"]), None)
    # The prompt was put in Gemma's turns (the GGUF has no template of its own: without
    # the script's, llama-server falls back to ChatML), as llama-server renders it.
    request = urllib.request.Request(
        gemma_server_url.removesuffix("/v1") + "/apply-template",
        json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": QUESTION}]}).encode(),
        {"Content-Type": "application/json"})
    rendered = json.load(urllib.request.urlopen(request, timeout=30))["prompt"]
    assert rendered == (f"<start_of_turn>user\nBe brief.\n\n{QUESTION}<end_of_turn>\n"
                        "<start_of_turn>model\n")
