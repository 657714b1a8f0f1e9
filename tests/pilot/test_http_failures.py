"""What a real route's failures leave behind, end to end (issue 35): ``smoke`` run as an
operator runs it, against a provider on loopback that fails in one scripted way.

- A provider that takes the request and then says nothing (its process hung, the
  connection still open), or sends the head and half an event stream and then stalls:
  the child's own deadline ends the request (``lookup_request_deadline``, the hold kept
  as lost) no later than the deadline + ``ABORT_BOUND_S``, never the controller's
  ``ipc_timeout`` on a child it gave up on.
- A provider that refuses with a status: the receipt, ``results.json`` and
  ``summary.md`` say its status and kind (``context_exceeded``), never its words; the
  owner-only ``answers.jsonl`` keeps them, sanitised.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import test_real_route
from loopback_http import serve
from test_real_route import Operator

from efold.guard.transport import ABORT_BOUND_S
from efold.registry.journal import JournalReader

DEADLINE_S = 2.0  # the campaign's probe_seconds: each request's deadline
# Longest a stalled peer waits for the client to go (bounded, far past the deadline).
STALL_S = 30.0
HALF_STREAM = b'data: {"id":"c1","object":"chat.completion.chunk","model":"tiny",' \
              b'"choices":[{"index":0,"delta":{"role":"assistant","content":"half"}}]}\n\n'

# llama.cpp's words for a request above its context window (its HTTP 400 body).
CONTEXT_WORDS = ("request (300123 tokens) exceeds the available context size (4096 tokens), "
                 "try increasing it")
CONTEXT_ERROR = json.dumps({"error": {"code": 400, "message": CONTEXT_WORDS,
                                      "type": "exceed_context_size_error"}}).encode()
COMPLETION = json.dumps({
    "id": "c1", "object": "chat.completion", "model": "tiny",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "an answer"}}],
    "usage": {"prompt_tokens": 12000, "completion_tokens": 45, "total_tokens": 12045}}).encode()


@dataclass
class Peer:
    """A scripted peer: ``mode`` says how it answers. Records when each request was
    read and when its client closed the connection (``monotonic`` seconds)."""

    mode: str = "silent"  # silent, half_stream, ok (a completion), or an error status
    base_url: str = ""
    read_at: list[float] = field(default_factory=list)
    closed_at: list[float] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)  # each request's body, as read


def _handler(peer: Peer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            peer.bodies.append(self.rfile.read(int(self.headers.get("content-length", "0"))))
            peer.read_at.append(time.monotonic())
            if peer.mode.isdigit():
                self._answer(int(peer.mode), CONTEXT_ERROR)
                return
            if peer.mode == "ok":
                self._answer(200, COMPLETION)
                return
            if peer.mode == "half_stream":
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()  # close-delimited: the body never says it ended
                self.wfile.write(HALF_STREAM)
                self.wfile.flush()
            self._await_close()

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def _await_close(self) -> None:
            """Say nothing more until the client goes (EOF or reset), at most STALL_S."""
            self.close_connection = True
            conn = self.connection
            conn.settimeout(STALL_S)
            try:
                while conn.recv(4096):
                    pass
            except (TimeoutError, OSError):
                pass
            peer.closed_at.append(time.monotonic())

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def peer() -> Iterator[Peer]:
    state = Peer()
    with serve(_handler(state)) as url:
        state.base_url = url
        yield state


def _operator(tmp: Path, peer: Peer, monkeypatch: pytest.MonkeyPatch, *,
              stream: bool) -> Operator:
    """An operator of a one-slot campaign on ``peer``, whose requests have this module's
    deadline (the real-route campaign's text, with a ``[deadlines]`` table added)."""
    text = test_real_route.campaign_text
    monkeypatch.setattr(test_real_route, "campaign_text", lambda *a, **k: text(*a, **k)
                        + f"[deadlines]\nprobe_seconds = {DEADLINE_S}\n")
    return Operator(tmp, peer, credential=None, roles='["native"]',  # type: ignore[arg-type]
                    stream=stream, summariser=False)


def _receipts(run: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((run / "receipts").iterdir())]


@pytest.mark.parametrize(("mode", "stream"), [("silent", False), ("half_stream", True)])
def test_a_stalled_provider_ends_at_the_childs_own_deadline(
        tmp_path: Path, peer: Peer, monkeypatch: pytest.MonkeyPatch, mode: str,
        stream: bool) -> None:
    peer.mode = mode
    op = _operator(tmp_path, peer, monkeypatch, stream=stream)
    smoke = op.real("smoke", "smoke", op.authorize("smoke", "--smoke"))
    assert smoke.returncode == 3, smoke.stdout + smoke.stderr
    assert "incomplete (lookup_request_deadline)" in smoke.stdout
    [receipt] = _receipts(op.runs / "smoke")
    assert (receipt["status"], receipt["code"]) == ("incomplete", "lookup_request_deadline")
    with JournalReader(op.runs / "smoke") as journal:
        holds = journal.rows("holds")
    assert [(h["state"], h["code"]) for h in holds] == [("lost", "lookup_request_deadline")]
    assert holds[0]["settled_units"] is None and holds[0]["hold_units"] > 0
    # The deadline counts from the child's open, a little before the request is read.
    [read_at], [closed_at] = peer.read_at, peer.closed_at
    assert DEADLINE_S - 0.5 <= closed_at - read_at <= DEADLINE_S + ABORT_BOUND_S


def _strings(doc: Any) -> Iterator[str]:
    """Every string of a decoded JSON document, keys included."""
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for key, value in doc.items():
            yield key
            yield from _strings(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _strings(value)


def _files_holding(root: Path, needle: bytes) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and needle in p.read_bytes())


def test_a_refusal_says_its_status_and_kind_and_only_the_private_file_its_words(
        tmp_path: Path, peer: Peer, monkeypatch: pytest.MonkeyPatch) -> None:
    peer.mode = "400"
    op = _operator(tmp_path, peer, monkeypatch, stream=False)
    smoke = op.real("smoke", "smoke", op.authorize("smoke", "--smoke"))
    assert smoke.returncode == 3 and "incomplete (lookup_http_status)" in smoke.stdout
    run = op.runs / "smoke"
    [receipt] = _receipts(run)
    assert (receipt["code"], receipt["http"]) == (
        "lookup_http_status", {"status": 400, "kind": "context_exceeded"})
    results = json.loads((run / "results.json").read_text())
    [role] = results["results"]
    assert role["http_failures"] == [{"status": 400, "kind": "context_exceeded", "slots": 1}]
    [row] = results["slots"]
    assert (row["http_status"], row["http_kind"]) == (400, "context_exceeded")
    summary = (run / "summary.md").read_text()
    assert "HTTP failures" in summary and "| native | 400 | context_exceeded | 1 |" in summary
    assert _files_holding(tmp_path, b"300123 tokens") == []  # nowhere, so far

    # A real pilot (after a passing smoke) keeps the server's words in its private file.
    peer.mode = "ok"
    assert op.real("smoke", "smoke2", op.authorize("smoke2", "--smoke")).returncode == 0
    peer.mode = "400"
    pilot = op.real("pilot", "pilot", op.authorize("pilot"), "--keep-answers")
    # One loss: no stop; but the one role answered nothing, so the run says so (exit 1).
    assert pilot.returncode == 1, pilot.stdout + pilot.stderr
    assert "  role native: none of its 1 slot answered (1 lookup_http_status)" \
        in pilot.stderr
    answers = op.runs / "pilot" / "answers.jsonl"
    [kept] = [json.loads(line) for line in answers.read_text().splitlines()]
    http = kept["http"]
    assert (http["status"], http["kind"]) == (400, "context_exceeded")
    # The server's words, less every run of 8 characters the request also held (this
    # conversation has "request " and " available " in it).
    assert http["excerpt"] == ("[...](300123 tokens) exceeds the[...]context size "
                               "(4096 tokens), try increasing it")
    # As the server could echo it: printable ASCII, whitespace runs as one space.
    sent_text = "\0".join(" ".join(re.sub(r"[^\x20-\x7e]", " ", text).split())
                          for text in _strings(json.loads(peer.bodies[-1])))
    assert all(run not in sent_text for part in http["excerpt"].split("[...]")
               for run in (part[i:i + 8] for i in range(len(part) - 7)))
    assert "request " in sent_text and " available " in sent_text
    assert answers.stat().st_mode & 0o777 == 0o600
    assert _files_holding(tmp_path, b"300123 tokens") == ["runs/pilot/answers.jsonl"]
