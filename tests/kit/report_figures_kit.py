"""The hand-built run the figures tests share (``tests/report/test_figures.py`` works
out every number it yields; ``test_render_figures.py`` checks how the reports print
them), and the journal facts of its run span."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from efold.corpus.model import Availability, Outcome
from efold.errors import Code
from efold.protocol.records import Plan, PlannedSlot, Receipt, SlotSpend, SlotStatus
from efold.report import RunFacts

C, INC, U = SlotStatus.COMPLETED, SlotStatus.INCOMPLETE, SlotStatus.UNADMITTED
RIGHT, WRONG = Outcome.CORRECT, Outcome.STALE
REC = Availability.RECOVERABLE
LOST = SlotSpend(requests=1, admitted=1, retained_units=78_400_000, usage_known=False)
CALLS, BYTES = Code.METER_CALLS_EXHAUSTED.value, Code.METER_BYTES_EXHAUSTED.value
# 2023-11-14T22:13:20.123456789Z, and 65.432 s later.
START_NS = 1_700_000_000_123_456_789
END_NS = START_NS + 65_432_000_000

Run = tuple[Plan, list[Receipt]]


def figures_run(plan_factory: Callable[..., Plan],
                receipt_factory: Callable[..., Receipt]) -> Run:
    """store, native, cold-rebuild; one trace, four probes (p00 tool_identifier, p01
    active_constraint, p02 superseded_current, p03 commitment_status), two repeats.
    native comes second, so "versus native" must turn the store contrast around."""
    plan = plan_factory(["store", "native", "cold-rebuild"], ["t1"], probes=4, repeats=2)
    slot: dict[tuple[str, int, str], PlannedSlot] = {
        (s.role, s.repeat, s.probe_id[-3:]): s for s in plan.slots}

    def r(role: str, repeat: int, probe: str, status: SlotStatus, outcome: Outcome | None,
          elapsed: int, **extra: Any) -> Receipt:
        made = receipt_factory(slot[role, repeat, probe], status, outcome=outcome, **extra)
        return msgspec.structs.replace(made, elapsed_ms=elapsed)

    receipts = [
        # store, repeat 0
        r("store", 0, "p00", C, RIGHT, 100, lookup_calls=2, lookup_bytes=1000,
          availability=REC),
        r("store", 0, "p01", C, WRONG, 300, lookup_calls=1, lookup_bytes=3000,
          meter_abort=BYTES, availability=REC),
        r("store", 0, "p02", C, RIGHT, 200),
        r("store", 0, "p03", INC, None, 900, code=Code.LOOKUP_WORKER_LOST, spend=LOST,
          lookup_calls=8, lookup_bytes=500, meter_abort=CALLS),
        # store, repeat 1
        r("store", 1, "p00", C, RIGHT, 400, lookup_calls=1, lookup_bytes=2000,
          availability=REC),
        r("store", 1, "p01", C, RIGHT, 100),
        r("store", 1, "p02", C, WRONG, 100),
        r("store", 1, "p03", U, None, 0, code=Code.NOT_ADMITTED_CAP),
        # native: 3/4 in repeat 0, 1/3 in repeat 1 (p03 missing)
        r("native", 0, "p00", C, RIGHT, 10),
        r("native", 0, "p01", C, WRONG, 20),
        r("native", 0, "p02", C, RIGHT, 30),
        r("native", 0, "p03", C, RIGHT, 40),
        r("native", 1, "p00", C, RIGHT, 50),
        r("native", 1, "p01", C, Outcome.ABSTAINED, 60),
        r("native", 1, "p02", C, WRONG, 70),
        # cold-rebuild: 2/4 then 1/4, every slot 5 ms
        *(r("cold-rebuild", repeat, probe, C, outcome, 5) for repeat, probe, outcome in [
            (0, "p00", WRONG), (0, "p01", WRONG), (0, "p02", RIGHT), (0, "p03", RIGHT),
            (1, "p00", RIGHT), (1, "p01", WRONG), (1, "p02", WRONG), (1, "p03", WRONG)]),
    ]
    return plan, receipts


def run_facts(**extra: Any) -> RunFacts:
    """Journal facts of a run released by its controller, from START_NS to END_NS."""
    fields: dict[str, Any] = {
        "sticky_stop": None, "stops": [], "launches": [], "containments": [],
        "in_flight": [], "controller": "released", "started_ns": START_NS, "ended_ns": END_NS,
    }
    fields.update(extra)
    return RunFacts(**fields)
