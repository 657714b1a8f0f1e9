"""Synthetic plans and receipts for the report tests (content-free, like the real ones)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from efold.corpus.model import Availability, Outcome
from efold.errors import Code
from efold.protocol.records import (
    Exclusion,
    Plan,
    PlannedSlot,
    Receipt,
    SlotSpend,
    SlotStatus,
    TokenCounts,
)

CATEGORIES = ["tool_identifier", "active_constraint", "superseded_current",
              "commitment_status", "artifact_status", "next_action", "abstention"]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def make_plan(roles: Sequence[str], traces: Sequence[str], probes: int, repeats: int,
              ineligible: Callable[[str, str], bool] = lambda role, trace: False,
              cap_units: int = 500_000_000) -> Plan:
    """Slots in a block order: repeat, trace, probe, then every role (interleaved)."""
    slots: list[PlannedSlot] = []
    for repeat in range(repeats):
        for trace in traces:
            for p in range(probes):
                for role in roles:
                    slots.append(PlannedSlot(
                        slot=f"s{len(slots):04d}", role=role, arm=role, suite="original",
                        trace_id=trace, probe_id=f"{trace}.p{p:02d}",
                        category=CATEGORIES[p % len(CATEGORIES)], repeat=repeat,
                        eligible=not ineligible(role, trace),
                        checkpoint=f"{role}.{trace}.r{repeat}",
                    ))
    return Plan(registration_sha256=sha("registration"), campaign="synthetic",
                roles=list(roles), repeats=repeats, cap_units=cap_units,
                rmax_units=78_400_000, slots=slots, schedule_sha256=sha("schedule"))


def receipt(slot: PlannedSlot, status: SlotStatus, *, outcome: Outcome | None = None,
            code: str | None = None, excluded: Exclusion | None = None,
            availability: Availability | None = Availability.PRESENT,
            spend: SlotSpend | None = None, **extra: Any) -> Receipt:
    admitted = status in (SlotStatus.COMPLETED, SlotStatus.INCOMPLETE, SlotStatus.INVALID)
    if spend is None:
        spend = (SlotSpend(requests=2, admitted=2, settled_units=1_000 + slot.repeat,
                       usage=TokenCounts(input=1200, cache_read=100, output=40, reasoning=10))
                 if admitted else SlotSpend())
    return Receipt(
        slot=slot.slot, role=slot.role, arm=slot.arm, trace_id=slot.trace_id,
        probe_id=slot.probe_id, category=slot.category, repeat=slot.repeat, status=status,
        code=code, outcome=outcome,
        correct=None if outcome is None else outcome is Outcome.CORRECT,
        availability=availability, excluded=excluded, spend=spend,
        answer_sha256=sha(f"answer {slot.slot}") if outcome is not None else None,
        checkpoint_sha256=sha(f"checkpoint {slot.checkpoint}"), elapsed_ms=42, **extra,
    )


def random_run(seed: int, roles: Sequence[str] = ("native", "cold-rebuild", "store"),
               traces: Sequence[str] = ("t1", "t2"), probes: int = 7,
               repeats: int = 2) -> tuple[Plan, list[Receipt]]:
    """A seeded run with every status, exclusions, missing slots and unknown usage."""
    rng = random.Random(seed)
    plan = make_plan(roles, traces, probes, repeats,
                     ineligible=lambda role, trace: role == roles[0] and trace == traces[-1])
    receipts = []
    for slot in plan.slots:
        if rng.random() < 0.1:
            continue  # missing / unvisited
        if not slot.eligible:
            receipts.append(receipt(slot, SlotStatus.SKIPPED, code=Code.INVENTORY_INFEASIBLE,
                                    availability=None))
            continue
        roll = rng.random()
        excluded = rng.choice(list(Exclusion)) if rng.random() < 0.08 else None
        availability = rng.choice([*Availability, None])
        if roll < 0.6:
            outcome = rng.choice([Outcome.CORRECT] * 4 + list(Outcome))
            receipts.append(receipt(slot, SlotStatus.COMPLETED, outcome=outcome,
                                    excluded=excluded, availability=availability))
        elif roll < 0.75:
            spend = SlotSpend(requests=1, admitted=1, retained_units=78_400_000,
                          usage_known=False)
            receipts.append(receipt(slot, SlotStatus.INCOMPLETE, code=Code.LOOKUP_WORKER_LOST,
                                    excluded=excluded, availability=availability,
                                    spend=spend))
        elif roll < 0.85:
            receipts.append(receipt(slot, SlotStatus.INVALID,
                                    code=Code.LOOKUP_EMPTY_FINAL_OUTPUT, excluded=excluded,
                                    availability=availability))
        else:
            receipts.append(receipt(slot, SlotStatus.UNADMITTED, code=Code.NOT_ADMITTED_CAP,
                                    availability=availability))
    return plan, receipts


# Tests reach the builders through fixtures: with importlib import mode a conftest is
# not importable as a module. Session scope: they are pure functions.
@pytest.fixture(scope="session")
def plan_factory() -> Callable[..., Plan]:
    return make_plan


@pytest.fixture(scope="session")
def receipt_factory() -> Callable[..., Receipt]:
    return receipt


@pytest.fixture(scope="session")
def run_factory() -> Callable[..., tuple[Plan, list[Receipt]]]:
    return random_run


@pytest.fixture
def synthetic_run() -> tuple[Plan, list[Receipt]]:
    return random_run(7)
