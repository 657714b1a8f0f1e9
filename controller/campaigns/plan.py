"""The plan: every slot of a registration, in schedule order, with its cost estimate.

No model call, no child process and no fold code: the plan is a pure function of the
registration, so ``plan`` and ``pilot`` always agree on it and its digest. Whether a
checkpoint is inventory-infeasible is not known here: it is learned from the checkpoint
a contained prep child builds (``efold.controller.campaigns.feasibility``), and such slots get a
``skipped`` receipt.

Schedule (seeded, ``seeded-sha256-rank-v1``): per repeat, conversation/probe blocks
ordered by rank; inside each block all roles interleaved in ranked order. Concurrency
one, no spares, no substitution.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Final

import msgspec
from msgspec import UnsetType

from efold.controller.campaigns.campaign import Campaign, Role, campaign_items
from efold.controller.campaigns.profiles import (
    Profile,
    profile_catalog,
    profile_rmax_units,
    route_of,
)
from efold.controller.campaigns.registration import Registration, rank_key, registration_sha256
from efold.corpus.forms import chars_to_tokens
from efold.errors import Code
from efold.folds.ledger import LEDGER_EXTRACTIONS
from efold.folds.ledger_model import OUTPUT_TOKENS as EXTRACTION_OUTPUT_TOKENS
from efold.folds.ledger_model import request_tokens
from efold.folds.model_summary import MAX_SOURCE_CHARS, SOURCE_OVERHEAD_CHARS, SUMMARY_INSTRUCTION
from efold.folds.probe_modes import RECALL_ONLY, ProbeMode, checkpoint_namespace
from efold.folds.registry import calls_summariser, extracts_ledger, makes_opaque
from efold.guard.contract import INPUT_ENVELOPE
from efold.guard.estimate import (
    ASSUMED_SCENARIO,
    EstimateScenario,
    expected_request_units,
    expected_slot_units,
)
from efold.protocol.records import Plan, PlannedSlot, schedule_digest
from efold.worker.judge import JUDGE_INSTRUCTIONS, judge_document

# Arms that need what a suite does not have are ineligible by plan: the ceiling arm needs
# a trace long enough to reach the 200k-token ceiling, which only the hard suites have
# (reference: "ceiling (e, hard only)"). The other cause of a skipped slot, a checkpoint
# whose first request exceeds the input envelope, is a preparation fact.
_HARD_ONLY_ARMS = frozenset({"ceiling"})


def slot_id(repeat: int, role: str, trace_id: str, probe_id: str) -> str:
    return f"r{repeat}.{role}.{trace_id}.{probe_id}"


def checkpoint_key(repeat: int, role: str, trace_id: str,
                   probe_mode: ProbeMode | UnsetType = RECALL_ONLY) -> str:
    """A checkpoint's key: its mode's namespace (``folds.probe_modes``), so a
    lookup-allowed checkpoint and a recall-only one never share a key, then repeat, role
    and trace."""
    return f"{checkpoint_namespace(probe_mode)}r{repeat}.{role}.{trace_id}"


def eligible(arm: str, suite: str) -> bool:
    return not (arm in _HARD_ONLY_ARMS and suite == "original")


# Who answers a provider-compaction arm's request offline (no summariser model): the
# faux provider, on the arm's wire API (``guard.wire.faux``: ``faux_compaction`` on the
# Responses API, ``faux_block_compaction`` on the Messages API).
FAUX_COMPACTORS: dict[str, tuple[str, str]] = {
    "openai-compact": ("faux", "openai-responses"),
    "anthropic-compact": ("faux", "anthropic-messages"),
}


def opaque_maker(campaign: Campaign, arm: str) -> tuple[str, str]:
    """The (provider, wire API) whose opaque items the provider-compaction ``arm`` of
    ``campaign`` would hold: its summariser route's, else the faux compactor's."""
    if campaign.summariser is None:
        return FAUX_COMPACTORS[arm]
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
        if opaque_maker(campaign, arm) != (reader.provider, reader.api):
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
                    checkpoint=checkpoint_key(repeat, role.name, trace_id, c.probe_mode),
                ))
    schedule_sha = schedule_digest([s.slot for s in slots])
    return Plan(
        registration_sha256=registration_sha256(reg), campaign=c.name,
        roles=[r.name for r in c.roles], repeats=c.repeats, cap_units=reg.cap_units,
        rmax_units=reg.rmax_units, slots=slots, schedule_sha256=schedule_sha,
    )


def plan_for(reg: Registration) -> Plan:
    items = campaign_items(reg.campaign)
    categories = {
        (item.trace.header.trace_id, p.id): p.category.value
        for item in items for p in item.probes.probes
    }
    return build_plan(reg, categories)


class Estimate(msgspec.Struct, frozen=True):
    """Exact integer money (units of 5e-8 USD); no float on this path.

    E (``expected_units``) is the sum of named lines, each priced on its own route
    (``expected_lines``): ``reader`` always; ``summariser`` only with a summariser model
    and a role whose fold calls it; ``judge`` only with a judge. A line that does not
    apply is None, never zero."""

    eligible_slots: int
    skipped_slots: int
    expected_units_per_slot: int  # the reader line, per eligible slot
    expected_units: int  # E: the sum of the lines that apply
    rmax_units: int  # worst-case reservation of one request
    full_upfront_units: int  # 10 maximum reservations per eligible slot (comparison only)
    cap_units: int
    cap_minus_rmax_units: int
    cap_over_expected: str | None  # C/E as an exact decimal string (6 places), None if E = 0
    # No "admits nothing" flag: register refuses a cap below Rmax (cap_below_rmax), so
    # cap_minus_rmax_units is never negative for a registered campaign.
    reader_units: int = 0  # eligible slots x expected_units_per_slot
    summariser_units: int | None = None  # summary_requests x summary_units_per_request
    summary_checkpoints: int | None = None  # distinct eligible checkpoints that summarise
    summary_requests: int | None = None  # expected summary requests over them
    summary_units_per_request: int | None = None
    judge_units: int | None = None  # eligible slots x judge_units_per_slot
    judge_units_per_slot: int | None = None

    def expected_lines(self) -> dict[str, int]:
        """The lines of E that apply, in order; they sum to ``expected_units``."""
        lines = {"reader": self.reader_units, "summariser": self.summariser_units,
                 "judge": self.judge_units}
        return {name: units for name, units in lines.items() if units is not None}


class SummaryTerms(msgspec.Struct, frozen=True):
    """What the summariser line is computed from: the expected cost of one summary
    request on the summariser's route, and per checkpoint of every role whose fold calls
    the summariser (a role absent: none) its expected requests and their expected cost
    (the summary requests at ``units_per_request``; a ledger's extractions each at its
    own allowance)."""

    units_per_request: int
    requests_per_checkpoint: dict[str, int]
    units_per_checkpoint: dict[str, int]


def estimate(plan: Plan, expected_units_per_slot: int, max_requests: int,
             infeasible: AbstractSet[str] = frozenset(), *,
             summary: SummaryTerms | None = None,
             judge_units_per_slot: int | None = None) -> Estimate:
    """``infeasible``: checkpoints found inventory-infeasible by their prep children.

    - ``reader``: every eligible slot whose checkpoint is feasible x the reader's E.
    - ``summariser`` (``summary`` given and some role summarises): over every distinct
      checkpoint of a summarising role that an eligible-by-plan slot uses, its role's
      ``summary.units_per_checkpoint``. A checkpoint found infeasible
      still counts: the pilot builds every eligible checkpoint (paying its summaries)
      before it can know it does not fit.
    - ``judge`` (``judge_units_per_slot`` given): one judge request per slot the reader
      is asked (the reader line's slots) x ``judge_units_per_slot``."""
    n = sum(1 for s in plan.slots if s.eligible and s.checkpoint not in infeasible)
    reader = n * expected_units_per_slot
    summariser = checkpoints = requests = None
    if summary is not None and any(summary.requests_per_checkpoint.get(r, 0)
                                   for r in plan.roles):
        roles = {s.checkpoint: s.role for s in plan.slots
                 if s.eligible and summary.requests_per_checkpoint.get(s.role, 0)}
        checkpoints = len(roles)
        requests = sum(summary.requests_per_checkpoint[r] for r in roles.values())
        summariser = sum(summary.units_per_checkpoint[r] for r in roles.values())
    judge = None if judge_units_per_slot is None else n * judge_units_per_slot
    e = reader + (summariser or 0) + (judge or 0)
    ratio = None
    if e:
        scaled = plan.cap_units * 1_000_000 // e
        ratio = f"{scaled // 1_000_000}.{scaled % 1_000_000:06d}"
    return Estimate(
        eligible_slots=n, skipped_slots=len(plan.slots) - n,
        expected_units_per_slot=expected_units_per_slot, expected_units=e,
        rmax_units=plan.rmax_units, full_upfront_units=n * max_requests * plan.rmax_units,
        cap_units=plan.cap_units, cap_minus_rmax_units=plan.cap_units - plan.rmax_units,
        cap_over_expected=ratio, reader_units=reader, summariser_units=summariser,
        summary_checkpoints=checkpoints, summary_requests=requests,
        # Each request at one price only when every one is a summary request.
        summary_units_per_request=None if summary is None or requests is None
        or summariser != requests * summary.units_per_request
        else summary.units_per_request,
        judge_units=judge, judge_units_per_slot=judge_units_per_slot,
    )


# The summariser line's assumptions (E is a planning figure, not measured usage):
#
# Requests per checkpoint, from what each built-in fold does: ``compaction`` and
# ``ceiling`` compact once, at the probe (``folds.arms``); ``compaction-2`` twice (a
# forced compaction before the mid-trace turn, then one at the probe); a model summary
# is one request per compaction (``folds.model_summary.model_summariser``); a
# provider-compaction arm (``openai-compact``, ``anthropic-compact``) sends its head as
# one compaction request (``folds.provider_compact``); ``ledger-cold`` one per extraction
# (``folds.ledger_model``), three. Every compaction is assumed to
# happen (its trigger reached), so none is left out. A proxy fold's own calls, and any
# other fold that calls the summariser, are bounded only by ``summariser.max_requests``:
# counted at it. Never more than ``max_requests`` either way (the guard admits no more).
SUMMARY_REQUESTS_BY_ARM: Final[dict[str, int]] = {
    "compaction": 1, "compaction-2": 2, "ceiling": 1, "store-compaction": 1,
    "restart-switch-compact": 1,
    "ledger-cold": LEDGER_EXTRACTIONS,
    "openai-compact": 1,
    "anthropic-compact": 1,
}
# Input of one summary request: the model summary's request at its bound (the fixed
# instruction, at most ``MAX_SOURCE_CHARS`` of source and ``SOURCE_OVERHEAD_CHARS`` of
# headers), one token per character (as the reader scenario counts returned bytes: never
# under). The plan does not know a checkpoint's head, so a provider compaction's or a
# proxy's request is assumed the same size. A ledger's extractions are priced apart, each
# at its own input allowance with 4,096 output tokens (``folds.ledger_model``).
SUMMARY_INPUT_TOKENS: Final = (len(SUMMARY_INSTRUCTION) + MAX_SOURCE_CHARS
                               + SOURCE_OVERHEAD_CHARS)
# Output of one summary request: a third of the source bound's chars/4 size (2,000
# tokens: a summary keeping every value verbatim), never above the route's
# max_output_tokens.
SUMMARY_OUTPUT_TOKENS: Final = chars_to_tokens(MAX_SOURCE_CHARS) // 3


def summary_requests_per_checkpoint(role: Role, max_requests: int) -> int:
    """The expected summary requests of one checkpoint of ``role`` (0: its fold never
    calls the summariser); see ``SUMMARY_REQUESTS_BY_ARM``."""
    if not calls_summariser(role):
        return 0
    if role.proxy is not None:
        return max_requests
    return min(SUMMARY_REQUESTS_BY_ARM.get(role.arm, max_requests), max_requests)


def judge_input_tokens(rubric: list[str], scenario: EstimateScenario = ASSUMED_SCENARIO) -> int:
    """Input of one judge request: the fixed template and the JSON document's framing with
    the campaign's rubric (their UTF-8 bytes, one token each), the reader's answer at one
    round's output allowance, and as much again for the question and its expected
    values (a sentence and a few words)."""
    fixed = len(JUDGE_INSTRUCTIONS.encode()) + len(judge_document("", [], "", rubric).encode())
    return fixed + 2 * scenario.output_tokens_per_round


def _output_tokens(p: Profile, allowance: int) -> int:
    return allowance if p.max_output_tokens is None else min(allowance, p.max_output_tokens)


def plan_estimate(reg: Registration, plan: Plan,
                  infeasible: AbstractSet[str] = frozenset()) -> Estimate:
    """The plan's estimate: every line priced on its own route's catalog
    (``profile_catalog``) with ``guard.estimate``'s one formula."""
    c = reg.campaign
    reader = c.reader
    per_slot = expected_slot_units(reader.provider, reader.model,
                                   catalog=profile_catalog(reader))
    summary = None
    if c.summariser is not None:
        s = c.summariser
        entry = profile_catalog(s).entry(s.provider, s.model)
        per_request = expected_request_units(
            entry, input_tokens=SUMMARY_INPUT_TOKENS,
            output_tokens=_output_tokens(s, SUMMARY_OUTPUT_TOKENS))
        requests = {r.name: k for r in c.roles
                    if (k := summary_requests_per_checkpoint(r, s.max_requests))}
        envelope = entry.input_envelope(INPUT_ENVELOPE)
        # A ledger's three extractions, each at its allowance (ledger_model.request_tokens).
        ledger = sum(expected_request_units(
            entry, input_tokens=request_tokens(n, envelope),
            output_tokens=_output_tokens(s, EXTRACTION_OUTPUT_TOKENS))
            for n in range(1, LEDGER_EXTRACTIONS + 1))
        roles = {r.name: r for r in c.roles}
        summary = SummaryTerms(
            units_per_request=per_request, requests_per_checkpoint=requests,
            units_per_checkpoint={name: ledger if extracts_ledger(roles[name])
                                  else k * per_request for name, k in requests.items()})
    judge_units = None
    if c.judge is not None:
        j = c.judge
        entry = profile_catalog(j).entry(j.provider, j.model)
        # Output: one reader round's allowance (the scores object, any reasoning).
        judge_units = expected_request_units(
            entry, input_tokens=judge_input_tokens(j.rubric),
            output_tokens=_output_tokens(j, ASSUMED_SCENARIO.output_tokens_per_round))
    return estimate(plan, per_slot, c.budgets.max_requests, infeasible,
                    summary=summary, judge_units_per_slot=judge_units)


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
