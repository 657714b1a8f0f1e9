"""Operator interruption (SIGINT, SIGTERM) as a first-class end of a run.

From before a run opens until after its lease is released, both signals are caught
(``caught``) instead of killing the controller or raising ``KeyboardInterrupt`` at an
arbitrary point (``pilot`` holds the lease from its claim, a moment before: a SIGTERM
there ends the process with nothing recorded or launched, and leaves a claim that
``prune`` removes); while the run executes, a watcher task receives them. The first one interrupts the run
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
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
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


class Signals:
    """SIGINT and SIGTERM for a run's whole life, from before it opens until after its
    lease is released (``caught``): never the default disposition there. A SIGTERM
    that killed the controller while its run opened (its fork-server template starting,
    before ``interruptible``) left the lease held by a dead process and a launch never
    seen to end: a shard whose keeper passed on its driver's death did exactly that.

    Until the run can be interrupted, a signal is kept, and ``interruptible`` acts on
    it first (the run then opens, admits nothing and ends ``interrupted``); once the
    run is ending, a signal is ignored with a word (a repeat Ctrl-C never becomes a
    ``KeyboardInterrupt`` halfway through the run's ending)."""

    def __init__(self, tell: Say) -> None:
        self.tell = tell
        self.kept: list[int] = []  # received before the watcher ran; it takes them
        self.ending = False  # the body has returned: a signal now changes nothing

    def _caught(self, signum: int, frame: object) -> None:
        if self.ending:
            self.tell(f"{signal.Signals(signum).name} ignored: the run is already ending")
        else:
            self.kept.append(signum)


@contextmanager
def caught(tell: Say = say) -> Iterator[Signals]:
    """The run's signals caught (``Signals``) for the block; the previous handlers
    restored after it."""
    signals = Signals(tell)
    previous = {signum: signal.signal(signum, signals._caught) for signum in SIGNALS}
    try:
        yield signals
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def ending(tell: Say = say) -> Iterator[None]:
    """SIGINT and SIGTERM ignored with a word for the block: a finished run saying how it
    ended (its summary, its report paths, the ``--json`` line scripts read last). Its
    reports are written and its processes contained; a late Ctrl-C must not cut that
    short into a bare ``interrupted``."""
    with caught(tell) as signals:
        signals.ending = True
        yield


def _interrupt(ctx: RunContext, signum: int, tell: Say) -> None:
    if ctx.interrupt(signum):
        tell(f"{signal.Signals(signum).name}: admission closed; containing every "
             "child in flight, then writing the reports")
    else:
        tell("still shutting down: the children in flight are being contained")


async def _watch(ctx: RunContext, signals: Signals, *,
                 task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    with anyio.open_signal_receiver(*SIGNALS) as received:
        task_status.started()
        while signals.kept:
            _interrupt(ctx, signals.kept.pop(0), signals.tell)
        async for signum in received:
            _interrupt(ctx, signum, signals.tell)


async def interruptible(ctx: RunContext, body: Callable[[], Awaitable[_T]],
                        signals: Signals) -> _T:
    """Run ``body`` with the run's signals going to ``ctx.interrupt``, those ``signals``
    kept while the run opened first; ``signals.tell`` says what an interruption does (a
    progress view passes its own, which first stops its bar: a live bar would redraw
    over the lines).

    A signal that arrives while ``body`` runs synchronous work (receipts, reports) is
    still queued when the watcher closes; the receiver then re-raises it through the
    handler it restores, ``signals``', which by then says the run is already ending."""
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(_watch, ctx, signals)
            try:
                result = await body()
            finally:
                signals.ending = True
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The watcher never fails; what failed is the body: its error, unwrapped, so a
        # refusal still reaches the command as the EfoldError (a fixed code, exit 2).
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    return result
