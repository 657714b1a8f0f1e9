"""The controller's side of a child's permit exchanges, and of one probe child's
lockstep exchange (``efold-probe-v2``).

``serve_permits`` is the one place a child's money requests are answered, for probe
children and for prep children whose summariser sends (``efold-prep-v2``): the durable
permit source answers every ``Admit``/``Consume`` (journal committed first, then the
reply) and ``Settle`` (journaled first, committed with the next commit, which comes
before anything reads it: docs/architecture.md, "Orderings"), a ``Halt`` from the
child's guard closes admission before it is answered, and
the exchange ends at the child's last message (``Terminal`` or ``Prepared``, returned)
or at the first permit integrity violation (answered ``Stop``; its code is returned).
Every stop the exchange implies is taken here, as it happens: admission must close
before the child hears back, never only at the slot's end.

``serve_probe``: after ``Hello``/``Welcome`` and ``Ready``, the permits until the
child's ``Terminal`` (returned, for judging).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from efold.controller.processes.durable import durable
from efold.controller.processes.launcher import WorkerHandle
from efold.controller.rundirs.run_context import RunContext
from efold.errors import Code
from efold.guard.ledger import PermitIntegrityError, SettleKind
from efold.guard.permits import Permit, child_code
from efold.guard.transport import ABORT_BOUND_S
from efold.ipc.controller_channel import ControllerChannel
from efold.ipc.messages import (
    Admit,
    ChildMessage,
    Consume,
    Consumed,
    Granted,
    Halt,
    Halted,
    Refused,
    Settle,
    Settled,
    Stop,
    Terminal,
)

_Last = TypeVar("_Last", bound=ChildMessage)
# Awaited once, before a child's first ``Admit`` is answered (``serve_permits``).
AdmitGate = Callable[[], Awaitable[None]]

# After ``Consumed`` the child's request is in flight: its guard ends it within the
# request's deadline (the same seconds as ``timeout``, counted from the child's send,
# which starts after our reply) plus the transport's ``ABORT_BOUND_S``, then closes the
# connection and sends ``Settle``. Waiting only ``timeout`` would give up first on a
# silent provider (``ipc_timeout``, the child contained) instead of hearing its own
# abort (``lookup_request_deadline``, settled). This is that wait's allowance: the abort
# bound and a second to settle it.
IN_FLIGHT_ALLOWANCE_S = ABORT_BOUND_S + 1.0


@dataclass
class PermitLog:
    """What ``serve_permits`` answered, content-free, for the caller's verdict (the
    ledger keeps the rest: holds, losses, usage)."""

    refused: Code | None = None  # the code of the last ``Refused`` it sent


async def serve_permits(ctx: RunContext, channel: ControllerChannel, slot: str, *,
                        until: tuple[type[_Last], ...], timeout: float,
                        admitting: bool = True, log: PermitLog | None = None,
                        judge_key: str | None = None,
                        admit_after: AdmitGate | None = None) -> _Last | Code:
    """Answer the child's permit exchanges on ``slot`` until it sends one of ``until``
    (returned, unanswered) or a permit integrity violation (answered ``Stop``, its stop
    taken, its code returned). ``timeout``: the longest wait for any one message, and
    the deadline of each of the child's requests: the wait for the ``Settle`` of a
    request in flight is longer by ``IN_FLIGHT_ALLOWANCE_S``.

    ``admitting=False``: the child was given no route to send on, so an ``Admit`` is a
    paid request nobody assigned (``lookup_preparation_forbidden``: a violation, as
    above); a ``Halt`` is still served.

    ``judge_key``: the probe's judge (19-C) ledger key, ``<slot>#judge``: an ``Admit``
    whose request id is the judge guard's (``<slot>#judge-r<n>``) is held there, to the
    judge's terms, and that permit's ``Consume``/``Settle`` too.

    ``admit_after``: awaited before the child's first ``Admit`` is answered (the
    teardown of the slot before it in its place, ``places.Places``: every stop that
    teardown decides is taken before this child is admitted anything)."""
    source = ctx.source
    keys: dict[str, str] = {}  # permit id -> the ledger key it was granted on
    wait = timeout  # Invariant: longer only while a consumed request is in flight
    while True:
        msg = await channel.receive(timeout=wait)
        wait = timeout
        try:
            if isinstance(msg, until):
                return msg
            if isinstance(msg, Admit):
                if admit_after is not None:
                    await admit_after()
                    admit_after = None
                if not admitting:
                    raise PermitIntegrityError(Code.LOOKUP_PREPARATION_FORBIDDEN,
                                               "a request from a child with no route")
                key = slot
                if judge_key is not None and msg.request_id.startswith(judge_key + "-"):
                    key = judge_key
                # The hold is synced off the event loop, before its Granted
                # (``processes.durable``): other children are served meanwhile.
                with ctx.journal.unsynced():
                    grant = source.admit(slot=key, request_id=msg.request_id,
                                         round=msg.round, payload_digest=msg.payload_digest,
                                         rmax_units=msg.rmax)
                await durable(ctx.journal)
                if isinstance(grant, Permit):
                    keys[grant.permit_id] = key
                    await channel.reply(Granted(permit_id=grant.permit_id, hold=grant.hold_units))
                else:
                    if log is not None:
                        log.refused = grant.code
                    await channel.reply(Refused(code=grant.code))
            elif isinstance(msg, Consume):
                with ctx.journal.unsynced():  # synced before its Consumed, as the hold
                    source.consume(slot=keys.get(msg.permit_id, slot),
                                   permit_id=msg.permit_id, body_digest=msg.body_digest)
                await durable(ctx.journal)
                await channel.reply(Consumed())
                wait = timeout + IN_FLIGHT_ALLOWANCE_S
            elif isinstance(msg, Settle):
                # Deferred: the settlement rides with the next commit, which comes before
                # anything that reads it (the next hold, which may spend what it releases;
                # the slot's receipt; a stop). A crash first leaves the hold retained.
                with ctx.journal.deferred():
                    integrity = source.settle(
                        slot=keys.get(msg.permit_id, slot), permit_id=msg.permit_id,
                        kind=SettleKind(msg.outcome.value),
                        code=msg.code, usage=msg.usage.present() if msg.usage else None,
                        tier=msg.tier, cost_claim=msg.cost,
                    )
                if integrity is not None:
                    ctx.take_stop(integrity, slot)
                await channel.reply(Settled())
            elif isinstance(msg, Halt):
                # The child's guard stopped the run: close admission before answering.
                ctx.take_stop(child_code(msg.code, integrity=True) or Code.CHILD_CODE_FORBIDDEN,
                              slot)
                await channel.reply(Halted())
        except PermitIntegrityError as exc:
            ctx.take_stop(exc.code, slot)
            await channel.reply(Stop(code=exc.code))
            return exc.code


async def serve_probe(ctx: RunContext, handle: WorkerHandle, slot: str,
                      judge_key: str | None = None,
                      admit_after: AdmitGate | None = None,
                      admit_wait: float = 0.0) -> Terminal | Code:
    """Serve one probe child until its ``Terminal`` (returned) or a permit integrity
    violation (its code returned). ``judge_key``, ``admit_after``: see
    ``serve_permits``; ``admit_wait``: the longest ``admit_after`` may hold its first
    ``Admit`` (``RunContext.welcome``)."""
    await handle.accept_hello(ctx.welcome(ctx.probe_seconds, admit_wait=admit_wait),
                              timeout=ctx.probe_seconds)
    await handle.accept_ready(timeout=ctx.probe_seconds)
    return await serve_permits(ctx, handle.channel, slot, until=(Terminal,),
                               timeout=ctx.probe_seconds, judge_key=judge_key,
                               admit_after=admit_after)
