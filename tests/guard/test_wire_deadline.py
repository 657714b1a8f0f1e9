"""The HTTP transport ends every exchange within ``deadline + ABORT_BOUND_S``, over real
HTTP to the loopback provider, whatever the peer does to keep a read alive.

httpx's timeouts are per read: data just inside the deadline, or one byte at a time,
restarts them. These cases are exactly such peers (see ``tests/guard/server.py``).
They run in real time, about one deadline (1 s) each.
"""

from __future__ import annotations

import time
from typing import Any

import efold_guard_kit as kit
import efold_guard_loopback as loopback
import pytest

from efold.errors import Code
from efold.guard import OutcomeKind
from efold.guard.errors import OwnAbort
from efold.guard.transport import ABORT_BOUND_S, WireRequest, mint_ticket
from efold.guard.wire import HttpTransport

DEADLINE_S = 1.0
# The watchdog fires at the deadline itself; a per-read timeout would fire a whole read
# window (here up to a further deadline) later. Half a second is slack for a loaded
# machine, far below that window.
PROMPT_S = 0.5

assert loopback.LATE_S < DEADLINE_S  # the late data arrives inside the deadline


def _guard_request(server: Any, case: str) -> tuple[Any, float]:
    guard, _ = kit.http_guard(server.url(case), deadline_s=DEADLINE_S)
    started = time.monotonic()
    try:
        result = guard.request(kit.responses_payload(model=kit.REAL_MODEL, effort="high"))
    finally:
        elapsed = time.monotonic() - started
        server.release_stalled()
    return result, elapsed


def _open_and_read(server: Any, case: str) -> float:
    """Open and read through the transport alone; the elapsed time until it raised."""
    transport = HttpTransport(server.url(case))
    request = WireRequest("/responses", b"{}", stream=True, deadline_s=DEADLINE_S)
    started = time.monotonic()
    try:
        with pytest.raises(OwnAbort) as raised:
            response = transport.open(mint_ticket(f"permit-{case}"), request)
            try:
                for _ in response.chunks():
                    pass
            finally:
                response.close()
        assert raised.value.code is Code.LOOKUP_REQUEST_DEADLINE
        return time.monotonic() - started
    finally:
        server.release_stalled()
        transport.close()


def _assert_ends_at_the_deadline(elapsed: float) -> None:
    assert elapsed <= DEADLINE_S + ABORT_BOUND_S
    assert DEADLINE_S - 0.05 <= elapsed < DEADLINE_S + PROMPT_S


@pytest.mark.parametrize("case", ["late_data", "extension_trickle"])
def test_guard_aborts_a_read_kept_alive_past_the_deadline(server: Any, case: str) -> None:
    result, elapsed = _guard_request(server, case)
    assert (result.outcome, result.code) == (OutcomeKind.OWN_ABORT_AFTER_SEND,
                                             Code.LOOKUP_REQUEST_DEADLINE)
    _assert_ends_at_the_deadline(elapsed)
    assert len(server.requests) == 1


def test_trickled_head_ends_at_the_deadline(server: Any) -> None:
    _assert_ends_at_the_deadline(_open_and_read(server, "head_trickle"))


def test_close_delimited_body_cut_at_the_deadline_is_an_own_abort(server: Any) -> None:
    # Shutting the socket down reads as the end of a close-delimited body: the
    # transport must still say it was its own abort, not a clean (or lost) end.
    _assert_ends_at_the_deadline(_open_and_read(server, "late_close"))
