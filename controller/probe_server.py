"""The controller's side of one probe child's lockstep exchange (``efold-probe-v2``).

After ``Hello``/``Welcome`` and ``Ready``, the durable permit source answers every
``Admit``/``Consume``/``Settle`` (journal first, then the reply), a ``Halt`` from the
child's guard closes admission before it is answered, and the exchange ends at the
child's ``Terminal`` (returned, for judging) or at the first permit integrity violation
(answered ``Stop``; its code is returned). Every stop the exchange implies is taken
here, as it happens: admission must close before the child hears back, never only at
the slot's end.
"""

from __future__ import annotations

from efold.controller.launcher import WorkerHandle
from efold.controller.run_context import RunContext
from efold.errors import Code
from efold.guard.ledger import PermitIntegrityError, SettleKind
from efold.guard.permits import Permit, child_code
from efold.ipc.messages import (
    Admit,
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


async def serve_probe(ctx: RunContext, handle: WorkerHandle, slot: str) -> Terminal | Code:
    """Serve one probe child until its ``Terminal`` (returned) or a permit integrity
    violation (its code returned)."""
    channel = handle.channel
    await handle.accept_hello(ctx.welcome(ctx.probe_seconds), timeout=ctx.probe_seconds)
    await handle.accept_ready(timeout=ctx.probe_seconds)
    source = ctx.source
    while True:
        msg = await channel.receive(timeout=ctx.probe_seconds)
        try:
            if isinstance(msg, Admit):
                grant = source.admit(slot=slot, request_id=msg.request_id, round=msg.round,
                                     payload_digest=msg.payload_digest, rmax_units=msg.rmax)
                if isinstance(grant, Permit):
                    await channel.reply(Granted(permit_id=grant.permit_id, hold=grant.hold_units))
                else:
                    await channel.reply(Refused(code=grant.code))
            elif isinstance(msg, Consume):
                source.consume(slot=slot, permit_id=msg.permit_id, body_digest=msg.body_digest)
                await channel.reply(Consumed())
            elif isinstance(msg, Settle):
                integrity = source.settle(
                    slot=slot, permit_id=msg.permit_id, kind=SettleKind(msg.outcome.value),
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
            elif isinstance(msg, Terminal):
                return msg
        except PermitIntegrityError as exc:
            ctx.take_stop(exc.code, slot)
            await channel.reply(Stop(code=exc.code))
            return exc.code
