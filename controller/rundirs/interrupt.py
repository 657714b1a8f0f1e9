"""Operator interruption (SIGINT, SIGTERM) as a first-class end of a run.

While a run executes, both signals are received by a watcher task instead of raising
``KeyboardInterrupt`` at an arbitrary point. The first one interrupts the run
(``RunContext.interrupt``): admission closes with a journaled ``interrupted`` stop, the
launches in flight (one per place of ``concurrency``) are cancelled and their children
contained (shielded: nothing interrupts a containment), their slots are recorded with
the code ``interrupted``, every later slot is
visited without a launch, and the reports are written with an "interrupted" banner. A
repeated signal only says that the shutdown is under way: it never skips containment.

The process then exits 128 + the signal number (130 for SIGINT, 143 for SIGTERM), the
shells' convention for "ended by this signal".
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import anyio.abc

from efold.controller.rundirs.run_context import RunContext

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_T = TypeVar("_T")


def exit_status(signum: int) -> int:
    return 128 + signum


Say = Callable[[str], None]


def say(text: str) -> None:
    """The default way an interruption speaks to the operator: one line on stderr."""
    print(f"efold: {text}", file=sys.stderr, flush=True)


async def _watch(ctx: RunContext, tell: Say, *,
                 task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    with anyio.open_signal_receiver(*SIGNALS) as received:
        task_status.started()
        async for signum in received:
            if ctx.interrupt(signum):
                tell(f"{signal.Signals(signum).name}: admission closed; containing every "
                     "child in flight, then writing the reports")
            else:
                tell("still shutting down: the children in flight are being contained")


async def interruptible(ctx: RunContext, body: Callable[[], Awaitable[_T]],
                        tell: Say = say) -> _T:
    """Run ``body`` with the run's signals going to ``ctx.interrupt``; ``tell`` says
    what an interruption does (a progress view passes its own, which first stops its
    bar: a live bar would redraw over the lines).

    A signal that arrives while ``body`` runs synchronous work (receipts, reports) is
    still queued when the watcher closes; the receiver then re-raises it through the
    handler it restores. That handler is ``late`` (installed here first), so a repeat
    Ctrl-C never becomes a ``KeyboardInterrupt`` halfway through the run's ending."""

    def late(signum: int, frame: object) -> None:
        tell(f"{signal.Signals(signum).name} ignored: the run is already ending")

    previous = {signum: signal.signal(signum, late) for signum in SIGNALS}
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(_watch, ctx, tell)
            try:
                result = await body()
            finally:
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The watcher never fails; what failed is the body: its error, unwrapped, so a
        # refusal still reaches the command as the EfoldError (a fixed code, exit 2).
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return result
