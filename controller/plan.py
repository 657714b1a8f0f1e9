"""The plan: every slot of a registration, in schedule order, with its cost estimate.

No model call, no child process and no fold code: the plan is a pure function of the
registration, so ``plan`` and ``pilot`` always agree on it and its digest. Whether a
checkpoint is inventory-infeasible is not known here: it is learned from the checkpoint
a contained prep child builds (``efold.controller.feasibility``), and such slots get a
``skipped`` receipt.

Schedule (seeded, ``seeded-sha256-rank-v1``): per repeat, conversation/probe blocks
ordered by rank; inside each block all roles interleaved in ranked order. Concurrency
one, no spares, no substitution.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import msgspec

from efold.controller.campaign import Campaign, suite_items
from efold.controller.profiles import profile_rmax_units, route_of
from efold.controller.registration import Registration, rank_key, registration_sha256
from efold.errors import Code
from efold.folds.registry import calls_summariser, makes_opaque
from efold.protocol.records import Plan, PlannedSlot, schedule_digest

# Arms that need what a suite does not have are ineligible by plan: the ceiling arm needs
# a trace long enough to reach the 200k-token ceiling, which only the hard suites have
# (reference: "ceiling (e, hard only)"). The other cause of a skipped slot, a checkpoint
# whose first request exceeds the input envelope, is a preparation fact.
_HARD_ONLY_ARMS = frozenset({"ceiling"})


def slot_id(repeat: int, role: str, trace_id: str, probe_id: str) -> str:
    return f"r{repeat}.{role}.{trace_id}.{probe_id}"


def checkpoint_key(repeat: int, role: str, trace_id: str) -> str:
    return f"r{repeat}.{role}.{trace_id}"


def eligible(arm: str, suite: str) -> bool:
    return not (arm in _HARD_ONLY_ARMS and suite == "original")


# Who answers a provider-compaction arm's request offline (no summariser model): the
# faux provider on the Responses API (``guard.wire.faux.faux_compaction``).
FAUX_COMPACTOR: tuple[str, str] = ("faux", "openai-responses")


def opaque_maker(campaign: Campaign) -> tuple[str, str]:
    """The (provider, wire API) whose opaque items a provider-compaction arm of
    ``campaign`` would hold: its summariser route's, else the faux compactor's."""
    if campaign.summariser is None:
        return FAUX_COMPACTOR
    route = route_of(campaign.summariser)
    return route.provider, route.api


def ineligible_code(arm: str, campaign: Campaign) -> Code | None:
    """Why a slot of ``arm`` is inventory-infeasible by plan, or None: an arm the suite
    does not apply to (``inventory_infeasible``), or a provider-compaction arm whose
    opaque items the campaign's reader cannot consume, another provider or wire API
    (``inventory_opaque_reader``). Such slots are skipped and counted, never sent."""
    if not eligible(arm, campaign.suite):
        return Code.INVENTORY_INFEASIBLE
    if makes_opaque(arm):
        reader = route_of(campaign.reader)
        if opaque_maker(campaign) != (reader.provider, reader.api):
            return Code.INVENTORY_OPAQUE_READER
    return None


def build_plan(reg: Registration, categories: dict[tuple[str, str], str]) -> Plan:
    """``categories`` maps (trace_id, probe_id) to the probe's category."""
    c = reg.campaign
    seed = c.schedule_seed
    ineligible = {r.name: ineligible_code(r.arm, c) for r in c.roles}
    slots: list[PlannedSlot] = []
    for repeat in range(1, c.repeats + 1):
        blocks = [(t.trace_id, pid) for t in reg.selection for pid in t.probe_ids]
        blocks.sort(key=lambda b: rank_key(seed, str(repeat), *b))
        for trace_id, probe_id in blocks:
            roles = sorted(c.roles, key=lambda r: rank_key(seed, str(repeat), trace_id, probe_id, r.name))
            for role in roles:
                slots.append(PlannedSlot(
                    slot=slot_id(repeat, role.name, trace_id, probe_id),
                    role=role.name, arm=role.arm, suite=c.suite, trace_id=trace_id,
                    probe_id=probe_id, category=categories[(trace_id, probe_id)],
                    repeat=repeat,
                    eligible=ineligible[role.name] is None,
                    checkpoint=checkpoint_key(repeat, role.name, trace_id),
                ))
    schedule_sha = schedule_digest([s.slot for s in slots])
    return Plan(
        registration_sha256=registration_sha256(reg), campaign=c.name,
        roles=[r.name for r in c.roles], repeats=c.repeats, cap_units=reg.cap_units,
        rmax_units=reg.rmax_units, slots=slots, schedule_sha256=schedule_sha,
    )


def plan_for(reg: Registration) -> Plan:
    items = suite_items(reg.campaign)
    categories = {
        (item.trace.header.trace_id, p.id): p.category.value
        for item in items for p in item.probes.probes
    }
    return build_plan(reg, categories)


class Estimate(msgspec.Struct, frozen=True):
    """Exact integer money (units of 5e-8 USD); no float on this path."""

    eligible_slots: int
    skipped_slots: int
    expected_units_per_slot: int
    expected_units: int  # E: the expected scenario over every eligible slot
    rmax_units: int  # worst-case reservation of one request
    full_upfront_units: int  # 10 maximum reservations per eligible slot (comparison only)
    cap_units: int
    cap_minus_rmax_units: int
    cap_over_expected: str | None  # C/E as an exact decimal string (6 places), None if E = 0
    # No "admits nothing" flag: register refuses a cap below Rmax (cap_below_rmax), so
    # cap_minus_rmax_units is never negative for a registered campaign.


def estimate(plan: Plan, expected_units_per_slot: int, max_requests: int,
             infeasible: AbstractSet[str] = frozenset()) -> Estimate:
    """``infeasible``: checkpoints found inventory-infeasible by their prep children."""
    n = sum(1 for s in plan.slots if s.eligible and s.checkpoint not in infeasible)
    e = n * expected_units_per_slot
    ratio = None
    if e:
        scaled = plan.cap_units * 1_000_000 // e
        ratio = f"{scaled // 1_000_000}.{scaled % 1_000_000:06d}"
    return Estimate(
        eligible_slots=n, skipped_slots=len(plan.slots) - n,
        expected_units_per_slot=expected_units_per_slot, expected_units=e,
        rmax_units=plan.rmax_units, full_upfront_units=n * max_requests * plan.rmax_units,
        cap_units=plan.cap_units, cap_minus_rmax_units=plan.cap_units - plan.rmax_units,
        cap_over_expected=ratio,
    )


def smoke_plan(plan: Plan, cap_units: int) -> Plan:
    """The configured-process smoke of a plan: the first eligible slot of every role, in
    schedule order, under the smoke's own cap. Its schedule digest is its own, so an
    authorization for the smoke can never be consumed by the campaign run, nor the
    reverse."""
    firsts: dict[str, PlannedSlot] = {}
    for s in plan.slots:
        if s.eligible and s.role not in firsts:
            firsts[s.role] = s
    slots = [s for s in plan.slots if firsts.get(s.role) is s]
    return msgspec.structs.replace(
        plan, slots=slots, cap_units=cap_units, smoke=True,
        schedule_sha256=schedule_digest([s.slot for s in slots], smoke=True))


def smoke_cap_units(reg: Registration) -> int:
    """The smoke's cap: what one slot per role can reserve at most (every request of it
    at Rmax, plus every summary request of a role whose fold calls the summariser),
    never more than the campaign's cap."""
    c = reg.campaign
    worst = len(c.roles) * c.budgets.max_requests * reg.rmax_units
    if c.summariser is not None:
        summarising = sum(1 for r in c.roles if calls_summariser(r))
        worst += summarising * c.summariser.max_requests * profile_rmax_units(c.summariser)
    if c.judge is not None:  # 19-C: one judge request per slot
        worst += len(c.roles) * profile_rmax_units(c.judge)
    return min(worst, reg.cap_units)
