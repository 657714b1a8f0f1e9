"""Stop policies: when the run stops admitting work, and why.

Causes, in precedence order (the first recorded sticky cause is reported, except that
unreconciled containment outranks everything, docs/architecture.md §9):
- an integrity stop (sticky; closes admission for the rest of the run);
- two consecutive admitted provider-side losses (``lookup_repeated_loss``);
- strictly more than 10% invalid admitted slots (``invalid_slot_rate``);
- the cap: a request refused ``not_admitted_cap`` ends scheduling (spend never falls, so
  every later slot would be refused too).

With ``concurrency = N`` slots finish out of schedule order; the policy still reads them
in schedule order (``InScheduleOrder``): "two consecutive admitted losses" are two
admitted slots with no other admitted slot between them *in the schedule*, whatever
order they finished in, and the invalid rate is judged over the schedule's prefix of
finished slots. A rule broken at schedule position k therefore stops the run exactly
where a concurrency-1 run of the same slot ends would; only its effect can come later,
once every slot before k has finished (slots launched meanwhile, at most N - 1, run to
their end: admission is closed for them by the permit source's stop, never by a kill).
"""

from __future__ import annotations

import enum

from efold.errors import Code

REPEATED_LOSS_LIMIT = 2
INVALID_RATE_LIMIT_PERCENT = 10


class SlotEnd(enum.StrEnum):
    """How an admitted slot ended, as the stop policy sees it."""

    COMPLETED = "completed"
    INVALID = "invalid"
    LOST = "lost"  # provider-side loss: missing usage, failed response, lost stream
    OWN_ABORT = "own_abort"  # our own deadline/latency abort after send
    CAPACITY = "capacity"  # a later round refused for capacity: incomplete, not a loss


class StopPolicy:
    """Tracks the run-level stop rules over the slots the controller finishes.

    Invariant: once ``stop_code`` is set it never changes, except that
    ``unreconciled_containment`` replaces any other cause (absorbing safety stop).
    """

    def __init__(self) -> None:
        self.stop_code: Code | None = None
        self.admitted = 0
        self.invalid = 0
        # Invariant: counts consecutive admitted LOST slots; own aborts neither count
        # nor reset it; unadmitted/skipped slots are invisible to it.
        self.loss_streak = 0

    @property
    def stopped(self) -> bool:
        return self.stop_code is not None

    def stop(self, code: Code) -> None:
        if code is Code.UNRECONCILED_CONTAINMENT or self.stop_code is None:
            self.stop_code = code

    def slot_admitted_end(self, end: SlotEnd) -> Code | None:
        """Record an admitted slot's end; returns the stop code if this ends the run."""
        self.admitted += 1
        if end is SlotEnd.INVALID:
            self.invalid += 1
        if end is SlotEnd.LOST:
            self.loss_streak += 1
        elif end is not SlotEnd.OWN_ABORT:
            self.loss_streak = 0
        if self.loss_streak >= REPEATED_LOSS_LIMIT:
            self.stop(Code.LOOKUP_REPEATED_LOSS)
        elif self.invalid * 100 > INVALID_RATE_LIMIT_PERCENT * self.admitted:
            self.stop(Code.INVALID_SLOT_RATE)
        return self.stop_code


class InScheduleOrder:
    """The stop policy's view of slots that may finish out of order: each finished slot
    is held until every slot before it in the schedule has finished, then the policy
    reads them in schedule order (see the module docstring).

    Invariant: ``_finished`` holds exactly the finished slots after position ``_next``
    (the first slot still in flight, or not yet visited); everything before ``_next``
    has been read by the policy once, in order."""

    def __init__(self, policy: StopPolicy) -> None:
        self._policy = policy
        self._next = 0
        self._finished: dict[int, SlotEnd | None] = {}

    def finish(self, position: int, end: SlotEnd | None) -> list[tuple[int, Code]]:
        """Record the slot at schedule ``position`` as finished (``end`` None: it was
        never admitted, which the policy does not see). Returns, for every admitted
        slot the policy reads now, in schedule order, its position and the stop code
        the run has after it, when it has one."""
        if position < self._next or position in self._finished:
            raise ValueError(f"slot {position} finished twice")
        self._finished[position] = end
        read: list[tuple[int, Code]] = []
        while self._next in self._finished:
            ended, at = self._finished.pop(self._next), self._next
            self._next += 1
            if ended is not None:
                code = self._policy.slot_admitted_end(ended)
                if code is not None:
                    read.append((at, code))
        return read
