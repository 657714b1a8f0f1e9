"""The guard's own deadline against a peer that goes quiet (issue 35): one that reads
the request and says nothing, one that sends the head and half an event stream and
stalls. The connection stays open in both, so only the guard's wall-clock deadline over
the whole exchange (``HttpTransport``'s watchdog) can end it: an own abort after send
(``lookup_request_deadline``: the hold kept, the slot terminal) at the deadline.

The end-to-end case (a real probe child under the controller, which must not give up
first) is ``tests/pilot/test_http_failures.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler
from typing import Any

import efold_guard_kit as kit
import pytest
from loopback_http import serve

from efold.errors import Code
from efold.guard import OutcomeKind
from efold.guard.transport import ABORT_BOUND_S

DEADLINE_S = 1.0
PROMPT_S = 0.5  # slack for a loaded machine: far below a further read window
HALF_STREAM = (b'event: response.created\ndata: {"type":"response.created","response":'
               b'{"id":"resp_1","status":"in_progress"}}\n\n')


class _QuietPeer:
    def __init__(self, mode: str) -> None:
        release = self.release = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["content-length"]))
                if mode == "half_stream":
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    self.wfile.write(HALF_STREAM)
                    self.wfile.flush()
                release.wait(30)  # bounded; released when the test ends
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ExitStack()
        self.url = self._server.enter_context(serve(Handler))

    def close(self) -> None:
        self.release.set()
        self._server.close()


@pytest.fixture(params=["silent", "half_stream"])
def peer(request: pytest.FixtureRequest) -> Iterator[_QuietPeer]:
    state = _QuietPeer(request.param)
    try:
        yield state
    finally:
        state.close()


def test_a_quiet_peer_is_aborted_at_the_guards_deadline(peer: _QuietPeer) -> None:
    guard, source = kit.http_guard(peer.url, deadline_s=DEADLINE_S)
    started = time.monotonic()
    result = guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high"))
    elapsed = time.monotonic() - started
    assert (result.outcome, result.code) == (OutcomeKind.OWN_ABORT_AFTER_SEND,
                                             Code.LOOKUP_REQUEST_DEADLINE)
    assert result.sent and result.http_failure is None
    assert DEADLINE_S - 0.05 <= elapsed < DEADLINE_S + PROMPT_S <= DEADLINE_S + ABORT_BOUND_S
    assert guard.terminal is Code.LOOKUP_REQUEST_DEADLINE  # the slot can send no more
    (record,) = source.records
    assert (record.state, record.code) == ("lost", "lookup_request_deadline")
    assert record.settled_units is None and record.charged_units == record.hold_units > 0
