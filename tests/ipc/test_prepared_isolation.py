"""``Prepared`` carries the prep child's ``Isolation``: it round-trips through the
lockstep cores, may be absent (a body that ran no foreign code), and a malformed one is
``ipc_bad_message``, never coerced."""

from __future__ import annotations

import pytest
from efold_test_kit import D, core_pair, hello

from efold.ipc import (
    PREP_PROTOCOL,
    BudgetGrant,
    DeadlineGrant,
    IpcBadMessage,
    LockstepCore,
    Prepared,
    Welcome,
)
from efold.isolation import REASON_CHARS, Isolation

WELCOME = Welcome(deadlines=DeadlineGrant(run_ms=1, exchange_ms=1),
                  budgets=BudgetGrant(max_requests=10, meter_calls=8, meter_bytes=1))


def deliver(core: LockstepCore, frame: bytes) -> object:
    i = 0
    while True:
        n = core.want()
        msg = core.feed(frame[i:i + n])
        i += n
        if msg is not None:
            return msg


def _send(prepared: Prepared) -> object:
    child, controller = core_pair(PREP_PROTOCOL)
    deliver(controller, child.outgoing(hello(PREP_PROTOCOL)))
    deliver(child, controller.outgoing(WELCOME))
    return deliver(controller, child.outgoing(prepared))


def _prepared(isolation: Isolation | None) -> Prepared:
    return Prepared(snapshot_digest=D, files=1, bytes=2, rejected={}, isolation=isolation)


@pytest.mark.parametrize("isolation", [
    None,
    Isolation(network="loopback-only", writes="landlock-abi-7"),
    Isolation(network="host", writes="unrestricted",
              network_reason="the prep child sends to its summariser route",
              writes_reason="r" * REASON_CHARS),
])
def test_prepared_carries_the_isolation(isolation: Isolation | None) -> None:
    assert _send(_prepared(isolation)) == _prepared(isolation)


@pytest.mark.parametrize("isolation", [
    Isolation(network="elsewhere", writes="unrestricted"),  # type: ignore[arg-type]
    Isolation(network="host", writes="landlock"),
    Isolation(network="host", writes="landlock-abi-0"),
    Isolation(network="host", writes="unrestricted", writes_reason="r" * (REASON_CHARS + 1)),
])
def test_a_malformed_isolation_is_a_bad_message(isolation: Isolation) -> None:
    with pytest.raises(IpcBadMessage):
        _send(_prepared(isolation))
