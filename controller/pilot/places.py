"""The places of the probe phase: ``concurrency`` of them, handed from slot to slot,
so that a slot's teardown overlaps the next slot's launch and its first admission,
which waits only for the slot's conclusion (docs/architecture.md, §4 "Orderings"); and
the task group children in flight run in, prep children's and probe children's alike."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc

from efold.errors import EfoldError


class Place:
    """A place for one child in flight, handed from slot to slot. What the slot that
    held it last (and every slot before that in the place) tells the next one:

    * ``admissible``: that slot is concluded (its receipt durable and the stops its
      verdict and its end as the stop policy sees it decided taken, at its child's
      ``DoneAck``) or ended; the next slot's first admission waits for it;
    * ``ended``: its teardown has ended (its child reaped, its leftovers checked, its
      exit row written, every stop its containment decided taken); the place is only
      handed on after it (``when_ended``), so a place holds at most two live children.

    Both set from the start for a place no slot has held."""

    def __init__(self, *, ended: bool = False) -> None:
        self.admissible = anyio.Event()
        self.ended = anyio.Event()
        # Invariant: empty once ``ended`` is set (each ran exactly once, in order).
        self._on_end: list[Callable[[], None]] = []
        if ended:
            self.end()

    def end(self) -> None:
        """The teardown has ended (so the slot is concluded too, if it ever was)."""
        self.admissible.set()
        self.ended.set()
        waiting, self._on_end = self._on_end, []
        for then in waiting:
            then()

    def when_ended(self, then: Callable[[], None]) -> None:
        """Call ``then`` once ``ended`` is set: now if it is."""
        if self.ended.is_set():
            then()
        else:
            self._on_end.append(then)


class Places:
    """The ``concurrency`` places of the probe phase. A slot takes one to launch; it
    hands a new one over, carrying its own ``admissible`` and ``ended``, as soon as it
    is under way (at its child's ``DoneAck``, or at concurrency 1 already at its first
    ``Admit``) and the slot before it in its place has ended. The next slot is
    launched, verified and restored while this one's teardown (and at concurrency 1
    its request) goes on; its first admission waits only for this one's conclusion
    (``serve_permits``' ``admit_after``; its watchdog paused and its child's exchange
    timeout longer meanwhile: ``RunContext.welcome``), not for its teardown. So the
    launch, the child's start, its restore and the slot before's teardown leave the
    critical path; every stop a slot's verdict decides is taken before anything more is
    admitted in its place, and a stop its teardown decides (a leftover process, a
    containment) before anything more is launched in it, and from the next admission
    on (docs/architecture.md, §4 "Orderings").

    Invariant: ``concurrency`` places circulate; a slot holds one from ``take`` until
    it hands one over (a new one, or the one it took if refused before its launch),
    exactly once."""

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
