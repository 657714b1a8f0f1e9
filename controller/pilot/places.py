"""The places of the probe phase: ``concurrency`` of them, handed from slot to slot,
so that a slot's teardown overlaps the next slot's launch while the next slot's first
admission waits for it (docs/architecture.md, §4 "Orderings"); and the task group
children in flight run in, prep children's and probe children's alike."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc

from efold.errors import EfoldError


class Place:
    """A place for one child in flight, handed from slot to slot. ``ended`` is set once
    the teardown of the slot that held it last (and of every slot before that in the
    place) has ended: its child reaped, its leftovers checked, its exit row written,
    every stop its containment or its end decided taken. Set from the start for a
    place no slot has held."""

    def __init__(self, *, ended: bool = False) -> None:
        self.ended = anyio.Event()
        if ended:
            self.ended.set()


class Places:
    """The ``concurrency`` places of the probe phase. A slot takes one to launch; it
    hands a new one over, carrying the event of its own end, as soon as it is under
    way: at its child's ``DoneAck``, or at concurrency 1 already at its first ``Admit``
    (the slot before it in its place has ended: ``run_probe``'s ``hand_over``). The
    next slot is launched, verified and restored while this one's teardown (and at
    concurrency 1 its request) goes on, and its first admission waits for this one's
    end (``serve_permits``' ``admit_after``; its watchdog paused and its child's
    exchange timeout longer meanwhile: ``RunContext.welcome``). So every stop this slot's end or teardown decides is taken
    before anything more is admitted in its place, as when the next launch waited for
    it; the launch, the child's start and its snapshot's restore leave the critical
    path. A place so holds at most two live children: one under way or ending, one
    waiting for its first admission.

    Invariant: ``concurrency`` places circulate; a slot holds one from ``take`` until
    it hands one over (a new one early, or the one it took if refused before its
    launch), exactly once."""

    def __init__(self, concurrency: int) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[Place](concurrency)
        for _ in range(concurrency):
            self._send.send_nowait(Place(ended=True))

    async def take(self) -> Place:
        return await self._receive.receive()

    def hand_over(self, place: Place) -> None:
        """Hand ``place`` on to the next slot (each holder once: see the invariant)."""
        self._send.send_nowait(place)


@asynccontextmanager
async def one_failure_task_group() -> AsyncIterator[anyio.abc.TaskGroup]:
    """A task group whose failure leaves it as itself, not wrapped in an exception
    group: a journal failure in one slot (``RegistryError``) reaches the command as the
    refusal it is, after every other child in flight was cancelled and contained on its
    way out (``launcher.supervise``, shielded). Refusals of several tasks at once (the
    same planted link met by each prep in flight) leave as the first of them; anything
    else with them stays a group."""
    try:
        async with anyio.create_task_group() as group:
            yield group
    except BaseExceptionGroup as failed:
        if len(failed.exceptions) == 1:
            raise failed.exceptions[0] from None
        refusals, rest = failed.split(EfoldError)
        if refusals is not None and rest is None:
            raise _leaves(refusals)[0] from None
        raise


def _leaves(group: BaseExceptionGroup[EfoldError]) -> list[EfoldError]:
    return [leaf for exc in group.exceptions
            for leaf in (_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])]
