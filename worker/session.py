"""What a body holds while it sends: the admit / consume / settle / halt exchanges.

``PermitSession`` is the child's end of the permit protocol (docs/architecture.md §3),
as plain blocking calls; the guard's IPC permit source (``permit_client``) wraps it.
Both protocols carry it: a probe body gets a ``ProbeSession`` after ``Ready``; a prep
body whose summariser sends gets a ``PermitSession`` after ``Welcome``
(``efold-prep-v2``). Every call is one lockstep exchange; a ``Stop`` from the controller
raises ``WorkerStopped`` and the body must unwind (the entry point then exits with
``worker_stopped``).
"""

from __future__ import annotations

from typing import TypeVar

from efold.errors import Code, EfoldError
from efold.ipc.child_channel import ChildChannel
from efold.ipc.errors import IpcLocalMisuse
from efold.ipc.messages import (
    Admit,
    Consume,
    Consumed,
    ControllerMessage,
    Granted,
    Halt,
    Halted,
    Refused,
    Settle,
    Settled,
    SettleOutcome,
    Stop,
    UsageReport,
    Welcome,
)
from efold.protocol.assignment import Assignment
from efold.worker.errors import WorkerStopped

_R = TypeVar("_R", bound=ControllerMessage)


def unexpected(reply: ControllerMessage) -> EfoldError:
    """The error for a reply the caller cannot use: ``WorkerStopped`` for ``Stop``;
    anything else is a bug here (the lockstep core already refused foreign kinds)."""
    if isinstance(reply, Stop):
        return WorkerStopped(reply.code)
    return IpcLocalMisuse(f"unexpected {type(reply).__name__}")


def expect(reply: ControllerMessage, kind: type[_R]) -> _R:
    """``reply`` as ``kind``; ``Stop`` raises ``WorkerStopped``."""
    if isinstance(reply, kind):
        return reply
    raise unexpected(reply)


class PermitSession:
    """One child's permit exchanges with the controller, on the slot its channel is
    bound to (a probe's slot, a prep's checkpoint key). Not thread-safe: one exchange at
    a time."""

    def __init__(self, channel: ChildChannel, assignment: Assignment, welcome: Welcome) -> None:
        self._channel = channel
        self.assignment = assignment
        self.welcome = welcome

    @property
    def slot_dir(self) -> str:
        return self.assignment.slot_dir

    def admit(
        self, *, request_id: str, round: int, payload_digest: str, rmax: int
    ) -> Granted | Refused:
        """Ask for a hold before a model request. ``Refused`` carries the fixed code."""
        reply = self._channel.request(
            Admit(request_id=request_id, round=round, payload_digest=payload_digest, rmax=rmax)
        )
        if isinstance(reply, Granted | Refused):
            return reply
        raise unexpected(reply)

    def consume(self, *, permit_id: str, body_digest: str) -> None:
        """Spend the permit on the exact body about to be sent (returns once the
        controller has journaled the consumption)."""
        reply = self._channel.request(Consume(permit_id=permit_id, body_digest=body_digest))
        expect(reply, Consumed)

    def settle(
        self,
        *,
        permit_id: str,
        outcome: SettleOutcome,
        code: Code | None,
        usage: UsageReport | None,
        tier: str | None,
        cost: int | None,
    ) -> None:
        """Close the permit with what happened; ``usage=None`` means none was reported."""
        reply = self._channel.request(
            Settle(
                permit_id=permit_id, outcome=outcome, code=code, usage=usage, tier=tier,
                cost=cost,
            )
        )
        expect(reply, Settled)

    def halt(self, code: Code) -> None:
        """Stop the whole run now (returns once the controller has journaled the stop)."""
        expect(self._channel.request(Halt(code=code)), Halted)


class ProbeSession(PermitSession):
    """Handed to a probe body after ``Ready``."""
