"""What a real route's failures leave behind, end to end (issue 35): ``smoke`` run as an
operator runs it, against a provider on loopback that fails in one scripted way.

- A provider that takes the request and then says nothing (its process hung, the
  connection still open), or sends the head and half an event stream and then stalls:
  the child's own deadline ends the request (``lookup_request_deadline``, the hold kept
  as lost) no later than the deadline + ``ABORT_BOUND_S``, never the controller's
  ``ipc_timeout`` on a child it gave up on.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import test_real_route
from test_real_route import Operator

from efold.guard.transport import ABORT_BOUND_S
from efold.registry.journal import JournalReader

DEADLINE_S = 2.0  # the campaign's probe_seconds: each request's deadline
# Longest a stalled peer waits for the client to go (bounded, far past the deadline).
STALL_S = 30.0
HALF_STREAM = b'data: {"id":"c1","object":"chat.completion.chunk","model":"tiny",' \
              b'"choices":[{"index":0,"delta":{"role":"assistant","content":"half"}}]}\n\n'


@dataclass
class Peer:
    """A scripted peer: ``mode`` says how it answers. Records when each request was
    read and when its client closed the connection (``monotonic`` seconds)."""

    mode: str = "silent"
    base_url: str = ""
    read_at: list[float] = field(default_factory=list)
    closed_at: list[float] = field(default_factory=list)


def _handler(peer: Peer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            peer.read_at.append(time.monotonic())
            if peer.mode == "half_stream":
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()  # close-delimited: the body never says it ended
                self.wfile.write(HALF_STREAM)
                self.wfile.flush()
            self._await_close()

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
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


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
