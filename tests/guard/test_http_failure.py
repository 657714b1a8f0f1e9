"""A non-2xx answer says why (issue 35): its status, a fixed kind, and the server's own
words bounded and stripped of credentials and of anything the request held.

Over real HTTP to a scripted loopback peer (``_ErrorPeer``: one status and body per
test, and it can echo the request's text back, as some servers do), then the sanitiser
itself at its exact boundaries.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler
from typing import Any

import efold_guard_kit as kit
import pytest
from loopback_http import serve

from efold.errors import Code
from efold.guard import OutcomeKind
from efold.guard.wire.failure import (
    ECHO_RUN,
    EXCERPT_CHARS,
    HttpFailureKind,
    classify,
    excerpt,
    kinds_for,
)

LLAMA_CONTEXT = ("request (300123 tokens) exceeds the available context size "
                 "(4096 tokens), try increasing it")


class _ErrorPeer:
    """Answers every POST with ``status`` and ``body`` (``{question}`` in it is replaced
    by the question the request carried: an echo)."""

    def __init__(self) -> None:
        self.status = 500
        self.body = b"{}"
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                sent = json.loads(self.rfile.read(int(self.headers["content-length"])))
                question = sent["input"][0]["content"][0]["text"]
                data = peer.body.replace(b"{question}", question.encode())
                self.send_response(peer.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ExitStack()
        self.url = self._server.enter_context(serve(Handler))

    def close(self) -> None:
        self._server.close()


@pytest.fixture
def peer() -> Iterator[_ErrorPeer]:
    state = _ErrorPeer()
    try:
        yield state
    finally:
        state.close()


def _request(peer: _ErrorPeer, status: int, body: bytes, question: str = kit.QUESTION) -> Any:
    peer.status, peer.body = status, body
    guard, _ = kit.http_guard(peer.url)
    return guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high",
                                               question=question))


def test_a_context_refusal_keeps_its_status_its_kind_and_the_servers_words(
        peer: _ErrorPeer) -> None:
    body = json.dumps({"error": {"code": 400, "message": LLAMA_CONTEXT,
                                 "type": "exceed_context_size_error"}}).encode()
    result = _request(peer, 400, body)
    assert (result.outcome, result.code, result.http_status) == (
        OutcomeKind.LOST, Code.LOOKUP_HTTP_STATUS, 400)
    failure = result.http_failure
    assert (failure.status, failure.kind) == (400, HttpFailureKind.CONTEXT_EXCEEDED)
    assert failure.excerpt == LLAMA_CONTEXT


@pytest.mark.parametrize(("status", "body", "kind", "outcome"), [
    (429, b'{"error":{"message":"Rate limit reached for requests"}}',
     HttpFailureKind.RATE_LIMITED, OutcomeKind.INTEGRITY_STOP),
    (500, b"upstream crashed", HttpFailureKind.SERVER_ERROR, OutcomeKind.LOST),
    (503, b"", HttpFailureKind.SERVER_ERROR, OutcomeKind.LOST),
    (401, b'{"error":"invalid api key"}', HttpFailureKind.AUTH_REFUSED,
     OutcomeKind.INTEGRITY_STOP),
    (404, b'{"detail":"model not found"}', HttpFailureKind.NOT_FOUND, OutcomeKind.LOST),
    (413, b'{"error":{"message":"prompt is too long: 300123 tokens > 200000 maximum"}}',
     HttpFailureKind.CONTEXT_EXCEEDED, OutcomeKind.LOST),
    (422, b'{"message":"temperature must be at most 2"}', HttpFailureKind.BAD_REQUEST,
     OutcomeKind.LOST),
    # A context phrase under a status that cannot mean it is not believed.
    (500, LLAMA_CONTEXT.encode(), HttpFailureKind.SERVER_ERROR, OutcomeKind.LOST),
])
def test_every_status_has_its_kind_and_keeps_its_hold(
        peer: _ErrorPeer, status: int, body: bytes, kind: HttpFailureKind,
        outcome: OutcomeKind) -> None:
    result = _request(peer, status, body)
    assert (result.outcome, result.code) == (outcome, Code.LOOKUP_HTTP_STATUS)
    assert (result.http_failure.status, result.http_failure.kind) == (status, kind)
    assert result.http_failure.kind in kinds_for(status)


def test_an_echoed_prompt_and_a_credential_never_come_back_out(peer: _ErrorPeer) -> None:
    question = "PRIVATE-PROMPT: the vault code is 7261 and Ada owns it"
    body = json.dumps({"error": {"message": (
        "invalid input near '{question}' (key sk-live-4f9a8b7c6d5e, "
        "Authorization: Bearer abc.def.ghi, trace 0123456789abcdef0123456789abcdef)")}})
    result = _request(peer, 400, body.encode(), question=question)
    text = result.http_failure.excerpt
    assert result.http_failure.kind is HttpFailureKind.BAD_REQUEST
    assert text.startswith("invalid input near '[...]'")
    for secret in ("4f9a8b7c6d5e", "abc.def.ghi", "0123456789abcdef"):
        assert secret not in text
    assert "[redacted]" in text
    for start in range(len(question) - ECHO_RUN + 1):
        assert question[start:start + ECHO_RUN] not in text


# -- the sanitiser at its boundaries --------------------------------------------------


def test_the_excerpt_keeps_exactly_its_limit_and_cuts_one_past() -> None:
    words = ("word " * 100)[:EXCERPT_CHARS]  # printable, no long run, nothing sent
    assert excerpt(words.encode(), b"") == words.strip()
    exact = "w" * 10 + " " + "x" * 10
    exact = (exact + " ") * (EXCERPT_CHARS // len(exact + " ")) + "y" * (
        EXCERPT_CHARS % len(exact + " "))
    assert len(exact) == EXCERPT_CHARS
    assert excerpt(exact.encode(), b"") == exact
    longer = exact + "z"
    cut = excerpt(longer.encode(), b"")
    assert len(cut) == EXCERPT_CHARS and cut.endswith("...")


def test_a_run_shared_with_the_request_is_dropped_from_its_eighth_character() -> None:
    sent = json.dumps({"input": "ABCDEFGH"}).encode()
    assert excerpt(b"saw ABCDEFG here", sent) == "saw ABCDEFG here"  # 7: kept
    assert excerpt(b"saw ABCDEFGH here", sent) == "saw [...] here"  # 8: dropped
    # An escaped prompt is compared as the server would have read it.
    escaped = json.dumps({"input": 'say "quoted\ttext"'}).encode()
    assert excerpt(b'error at: say "quoted text"', escaped) == "error at: [...]"


def test_only_printable_ascii_survives() -> None:
    assert excerpt("bad \x1b[31mred\x1b[0m\n\tcaf\u00e9 \u2028end".encode(), b"") == \
        "bad [31mred [0m caf end"


def test_the_kind_follows_the_status_and_the_context_phrases() -> None:
    assert classify(400, b'{"error":{"message":"maximum context length is 8192"}}') is \
        HttpFailureKind.CONTEXT_EXCEEDED
    assert classify(400, b'{"error":{"message":"bad json"}}') is HttpFailureKind.BAD_REQUEST
    assert classify(307, b"") is HttpFailureKind.REDIRECT
    assert classify(599, b"") is HttpFailureKind.SERVER_ERROR
    assert classify(600, b"") is HttpFailureKind.UNEXPECTED
    assert classify(499, b"") is HttpFailureKind.BAD_REQUEST
    assert kinds_for(429) == {HttpFailureKind.RATE_LIMITED}
