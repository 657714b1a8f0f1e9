"""Build ``results-v1`` from the plan and the receipts (the aggregate command's library).

Counting rules (continuity reference, "Reading results" and "Pilot controller and
partial reports"):

- ``exact``: correct / completed eligible non-excluded slots.
- ``exact_with_failures``: the same, with failed feasible slots (eligible, non-excluded,
  admitted but incomplete or invalid) counted as wrong; their count is reported too.
- Skipped (inventory-infeasible) slots leave both numerator and denominator; unadmitted,
  missing and unvisited slots are coverage only, never reader failures; excluded slots
  are never scored as passes or failures.
- Planned and eligible describe the whole inventory; status counts describe visited
  slots only. A slot is eligible when the plan says so and it was not visited as
  ``skipped`` (``Observation.eligible``): infeasibility the prep children learn after the
  plan is frozen removes a slot from the eligible inventory just as a planned one does.
- The run's status (stop, interruption, containment, crash) comes from journal facts the
  caller reads (``report.status``), never from the receipts alone.
- Figures beside the counts (``docs/results-schema.md``): per-repeat rates and their spread,
  paired deltas with Newcombe's interval, every role against the native role, latency
  per slot over admitted slots, tool use of the roles that can look history up, and
  checkpoint sizes with their compression against native (``report.compression``) and
  the settled cost per correct answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from itertools import combinations
from typing import Literal

import msgspec

import efold
from efold.corpus.model import Availability, Category, Outcome
from efold.errors import Code
from efold.folds.probe_modes import NATIVE_ARMS
from efold.folds.registry import BUILTIN_ARMS
from efold.protocol.records import (
    DesignRecord,
    Exclusion,
    Plan,
    Receipt,
    SlotSpend,
    SlotStatus,
)
from efold.report.boundary_results import campaign_boundary
from efold.report.compression import role_compression
from efold.report.errors import ReportError
from efold.report.join import (
    METER_ABORT_CODES,
    Observation,
    check_id,
    check_model,
    join_receipts,
)
from efold.report.judge import judge_agreement, judge_spends
from efold.report.schema import (
    RESULTS_SCHEMA,
    Contrast,
    CostPerCorrect,
    DesignPair,
    Execution,
    FlipCount,
    HttpFailures,
    Latency,
    Money,
    PairedTally,
    RepeatSplit,
    Results,
    RoleResult,
    RunInfo,
    RunMoney,
    SlotRow,
    Spend,
    Tally,
    Tokens,
    ToolUse,
)
from efold.report.stats import (
    flip_count,
    nearest_rank,
    paired_counts,
    proportion,
    repeat_spread,
)
from efold.report.status import RunFacts, check_span, run_status

__all__ = [
    "COVERAGE_NOTE", "DESCRIPTIVE_NOTE", "FAUX_NOTE", "PROXY_NOTE", "UNKNOWN_USAGE_NOTE",
    "build_results", "money",
]

# The report's only sentences. Fixed text, chosen here, never built from inputs.
FAUX_NOTE = (
    "The reader is the faux extractive reader: its accuracy measures what the fold kept, "
    "not model quality."
)
DESCRIPTIVE_NOTE = (
    "Intervals and paired deltas are descriptive. They are not significance, power, "
    "model-quality or treatment-benefit claims."
)
COVERAGE_NOTE = (
    "Missing and unvisited slots are coverage only, never reader failures. Excluded "
    "slots are never scored as passes or failures."
)
PROXY_NOTE = (
    "Constraint and redaction probes also pass when the fold simply lost the source "
    "material. Read them next to the recall probes."
)
RouteName = Literal["faux", "local", "real"]  # ``RunInfo.route``
ProbeModeName = Literal["recall-only", "lookup-allowed-v1"]  # ``RunInfo.probe_mode``

# The summariser a role's summary requests went to when the campaign named no summariser
# model: efold's deterministic summariser, a stand-in (``RunInfo.summarisers``).
STAND_IN_SUMMARISER = "efold/deterministic-summariser"


# What wrote a ledger role's ledger when the campaign named no summariser model: efold's
# deterministic extractor (``folds.ledger``), a stand-in; with one, that model did.
STAND_IN_EXTRACTOR = "efold/deterministic-extractor"


def stand_in_roles(results: Results, stand_in: str = STAND_IN_SUMMARISER) -> list[str]:
    """The roles whose fold's model requests the deterministic ``stand_in`` answered."""
    if results.run is None:
        return []
    return [role for role, model in results.run.summarisers.items() if model == stand_in]


def stand_in_lines(results: Results) -> list[str]:
    """What the reports say at the top where a stand-in, not a model, wrote what a role's
    fold summarised or extracted."""
    lines = []
    if roles := stand_in_roles(results):
        lines.append(
            f"Summaries by the stand-in for {', '.join(roles)}: efold's deterministic "
            "summariser answered their summary requests, so these scores do not measure "
            "these folds' summarising (give a summariser model: --summariser URL "
            "--summariser-model NAME).")
    if roles := stand_in_roles(results, STAND_IN_EXTRACTOR):
        lines.append(
            f"Ledgers by efold's deterministic extractor for {', '.join(roles)}: no "
            "summariser model was given, so these scores measure the extractor's "
            "selection, not a model's extraction (give one: --summariser URL "
            "--summariser-model NAME).")
    return lines


UNKNOWN_USAGE_NOTE = (
    "Some usage was never reported. Token counts are lower bounds, not totals."
)

# The built-in arms that offer the history lookup tools (``folds.arms``: store, pack).
LOOKUP_ARMS: frozenset[str] = frozenset(
    name for name, make in BUILTIN_ARMS.items() if getattr(make, "offers_lookup", False))

# 1 unit = 5e-8 USD, so one unit is five hundred-millionths of a dollar.
_USD_PER_UNIT_E8 = 5
_E8 = 100_000_000


def money(units: int) -> Money:
    """Integer units and the exact USD amount as a decimal string with 8 places."""
    if units < 0:
        raise ValueError("money units are never negative")
    whole, fraction = divmod(units * _USD_PER_UNIT_E8, _E8)
    return Money(units=units, usd=f"{whole}.{fraction:08d}")


def _ordered_categories(observations: Sequence[Observation]) -> list[str]:
    """Known categories in the corpus order, then any others as first planned."""
    planned: list[str] = []
    for obs in observations:
        if obs.planned.category not in planned:
            planned.append(obs.planned.category)
    known = [c.value for c in Category if c.value in planned]
    return known + [c for c in planned if c not in known]


def _execution(observations: Sequence[Observation]) -> Execution:
    statuses = [obs.status for obs in observations if obs.status is not None]
    completed = statuses.count(SlotStatus.COMPLETED)
    incomplete = statuses.count(SlotStatus.INCOMPLETE)
    invalid = statuses.count(SlotStatus.INVALID)
    return Execution(
        planned=len(observations),
        eligible=sum(obs.eligible for obs in observations),
        visited=len(statuses),
        skipped=statuses.count(SlotStatus.SKIPPED),
        unadmitted=statuses.count(SlotStatus.UNADMITTED),
        admitted=completed + incomplete + invalid,
        completed=completed,
        incomplete=incomplete,
        invalid=invalid,
        missing=sum(obs.eligible and obs.status is None and not obs.receipt_copy_missing
                    for obs in observations),
        receipt_copies_missing=sum(obs.receipt_copy_missing for obs in observations),
    )


def _flip(observations: Sequence[Observation]) -> FlipCount:
    groups: dict[tuple[str, str, str], list[tuple[int, bool]]] = {}
    for obs in observations:
        key = (obs.planned.suite, obs.planned.trace_id, obs.planned.probe_id)
        bucket = groups.setdefault(key, [])
        if obs.scored:
            bucket.append((obs.planned.repeat, obs.correct))
    return flip_count([correct for _, correct in sorted(group)] for group in groups.values())


def _tally(observations: Sequence[Observation], category: str | None, repeats: int) -> Tally:
    scored = [obs for obs in observations if obs.scored]
    correct = sum(obs.correct for obs in scored)
    failed = sum(obs.failed_feasible for obs in observations)
    judged = [obs for obs in observations
              if obs.status is not None and obs.eligible and obs.excluded is None]
    availability = dict.fromkeys((a.value for a in Availability), 0)
    for obs in judged:
        if obs.availability is not None:
            availability[obs.availability.value] += 1
    outcomes = dict.fromkeys((o.value for o in Outcome), 0)
    for obs in scored:
        if obs.outcome is not None:  # always: join_receipts refuses an unscored completion
            outcomes[obs.outcome.value] += 1
    excluded = dict.fromkeys((e.value for e in Exclusion), 0)
    for obs in observations:
        if obs.excluded is not None:
            excluded[obs.excluded.value] += 1
    by_repeat = []
    for repeat in sorted({obs.planned.repeat for obs in observations}):
        mine = [obs for obs in scored if obs.planned.repeat == repeat]
        right = sum(obs.correct for obs in mine)
        by_repeat.append(RepeatSplit(repeat=repeat, correct=right, completed=len(mine),
                                     rate=right / len(mine) if mine else None))
    rates = [split.rate for split in by_repeat if split.rate is not None]
    return Tally(
        category=category,
        execution=_execution(observations),
        exact=proportion(correct, len(scored)),
        exact_with_failures=proportion(correct, len(scored) + failed),
        failed_feasible=failed,
        by_repeat=by_repeat,
        availability=availability,
        availability_unknown=sum(obs.availability is None for obs in judged),
        outcomes=outcomes,
        excluded=excluded,
        flip=_flip(observations) if repeats > 1 else None,
        repeat_spread=repeat_spread(rates) if repeats > 1 else None,
    )


def _admitted(obs: Observation) -> bool:
    return obs.status in (SlotStatus.COMPLETED, SlotStatus.INCOMPLETE, SlotStatus.INVALID)


def _latency(observations: Iterable[Observation], in_flight: frozenset[str]) -> Latency:
    """Nearest-rank median and p95 of ``elapsed_ms`` over admitted slots; a slot left
    in flight (its receipt derived, its time unmeasured) is not counted."""
    times = [obs.receipt.elapsed_ms for obs in observations
             if obs.receipt is not None and _admitted(obs) and obs.planned.slot not in in_flight]
    return Latency(slots=len(times), median_ms=nearest_rank(times, 50),
                   p95_ms=nearest_rank(times, 95))


def _tool_use(observations: Sequence[Observation]) -> ToolUse:
    scored = [obs for obs in observations if obs.scored]
    looked = [obs for obs in scored if obs.receipt is not None and obs.receipt.lookup_calls > 0]
    plain = [obs for obs in scored if obs not in looked]
    recoverable = [obs for obs in scored if obs.availability is Availability.RECOVERABLE]
    aborts = [obs.receipt.meter_abort for obs in observations
              if obs.receipt is not None and _admitted(obs) and obs.receipt.meter_abort]
    return ToolUse(
        completed=len(scored),
        with_lookup=len(looked),
        lookup_rate=len(looked) / len(scored) if scored else None,
        exact_with_lookup=proportion(sum(obs.correct for obs in looked), len(looked)),
        exact_without_lookup=proportion(sum(obs.correct for obs in plain), len(plain)),
        lookup_calls=sum(obs.receipt.lookup_calls for obs in scored if obs.receipt),
        bytes_read=sum(obs.receipt.lookup_bytes for obs in scored if obs.receipt),
        bytes_median=nearest_rank([obs.receipt.lookup_bytes for obs in looked if obs.receipt],
                                  50),
        recoverable=len(recoverable),
        recoveries=sum(obs.correct for obs in recoverable if obs in looked),
        meter_exhausted=len(aborts),
        meter_exhausted_by={code: aborts.count(code) for code in sorted(METER_ABORT_CODES)},
    )


def _offers_lookup(observations: Sequence[Observation], probe_mode: ProbeModeName | None) -> bool:
    """Whether a role's tool use is reported: its arm is a built-in lookup arm and the
    probe mode offered the lookup (recall-only never does; an unknown mode, results
    built before modes, did), or it made a lookup call (a fold that offers the tools)."""
    offered = probe_mode != "recall-only" and observations[0].planned.arm in LOOKUP_ARMS
    return offered or any(
        obs.receipt is not None and obs.receipt.lookup_calls > 0 for obs in observations)


def _spend(receipts: Sequence[Receipt]) -> Spend:
    return spend_of([receipt.spend for receipt in receipts])


def spend_of(spends: Sequence[SlotSpend]) -> Spend:
    """The spend over ``spends`` (one per slot or checkpoint)."""
    settled = sum(s.settled_units for s in spends)
    retained = sum(s.retained_units for s in spends)
    unknown = sum(not s.usage_known for s in spends)
    return Spend(
        slots=len(spends),
        requests=sum(s.requests for s in spends),
        admitted_requests=sum(s.admitted for s in spends),
        tokens=Tokens(
            input=sum(s.usage.input for s in spends),
            cache_read=sum(s.usage.cache_read for s in spends),
            cache_write=sum(s.usage.cache_write for s in spends),
            output=sum(s.usage.output for s in spends),
            reasoning=sum(s.usage.reasoning for s in spends),
        ),
        usage_known=unknown == 0,
        usage_unknown_slots=unknown,
        settled=money(settled),
        retained=money(retained),
        total=money(settled + retained),
    )


def _summariser_units(plan: Plan, spends: Sequence[SlotSpend] | Mapping[str, SlotSpend]
                      ) -> dict[str, int] | None:
    """Settled summariser units per role, from spends keyed by checkpoint (every key a
    planned checkpoint, whose role it names); None when spends were given without their
    checkpoints (they cannot be split by role). No spend at all is zero for every role."""
    if not isinstance(spends, Mapping):
        return None if spends else dict.fromkeys(plan.roles, 0)
    role_of = {slot.checkpoint: slot.role for slot in plan.slots}
    units = dict.fromkeys(plan.roles, 0)
    for key, spend in spends.items():
        if not isinstance(key, str) or key not in role_of:
            raise ReportError(Code.REPORT_INPUT_INVALID,
                              "summariser spend of a checkpoint the plan does not hold")
        units[role_of[key]] += spend.settled_units
    return units


def _cost_per_correct(role: RoleResult, summariser_units: int | None) -> CostPerCorrect:
    """Settled probe and summariser money over exact successes, floored to a unit."""
    correct = role.overall.exact.successes
    settled = None if summariser_units is None else role.spend.settled.units + summariser_units
    return CostPerCorrect(
        correct=correct, probe_settled=role.spend.settled,
        summariser_settled=None if summariser_units is None else money(summariser_units),
        settled=None if settled is None else money(settled),
        per_correct=None if settled is None or correct == 0 else money(settled // correct),
    )


def _with_compression_and_cost(plan: Plan, roles: list[RoleResult],
                               by_role: Mapping[str, Sequence[Observation]],
                               summariser: dict[str, int] | None) -> list[RoleResult]:
    """Each role's checkpoint sizes against the native role's, and its cost per correct
    answer (``report.compression``, ``CostPerCorrect``)."""
    arms = {slot.role: slot.arm for slot in plan.slots}
    native = next((role for role in plan.roles if arms[role] in NATIVE_ARMS), None)
    return [msgspec.structs.replace(
        result,
        compression=role_compression(result.role, by_role[result.role], native,
                                     by_role[native] if native is not None else []),
        cost_per_correct=_cost_per_correct(
            result, None if summariser is None else summariser[result.role]),
    ) for result in roles]


def _receipts(observations: Iterable[Observation]) -> list[Receipt]:
    return [obs.receipt for obs in observations if obs.receipt is not None]


def _http_failures(receipts: Iterable[Receipt]) -> list[HttpFailures]:
    """Slots ended by a non-2xx answer, by (status, kind), in that order."""
    counts: dict[tuple[int, str], int] = {}
    for receipt in receipts:
        if receipt.http is not None:
            key = (receipt.http.status, receipt.http.kind)
            counts[key] = counts.get(key, 0) + 1
    return [HttpFailures(status=status, kind=kind, slots=slots)
            for (status, kind), slots in sorted(counts.items())]


def _role_result(role: str, observations: Sequence[Observation], categories: Sequence[str],
                 repeats: int, in_flight: frozenset[str],
                 probe_mode: ProbeModeName | None) -> RoleResult:
    codes: dict[str, int] = {}
    for receipt in _receipts(observations):
        if receipt.code is not None:
            codes[receipt.code] = codes.get(receipt.code, 0) + 1
    present = [c for c in categories if any(o.planned.category == c for o in observations)]
    return RoleResult(
        role=role,
        arm=observations[0].planned.arm,  # join_receipts: every role has a slot
        overall=_tally(observations, None, repeats),
        categories=[
            _tally([o for o in observations if o.planned.category == category], category,
                   repeats)
            for category in present
        ],
        codes=codes,
        http_failures=_http_failures(_receipts(observations)),
        spend=_spend(_receipts(observations)),
        latency=_latency(observations, in_flight),
        tool_use=_tool_use(observations) if _offers_lookup(observations, probe_mode) else None,
        judge=judge_agreement(observations),  # 19-C: beside the headline, never it
    )


_PairKey = tuple[str, str, str, int]  # suite, trace, probe, repeat


def _paired_tally(pairs: Sequence[tuple[Observation, Observation]],
                  category: str | None) -> PairedTally:
    eligible = [(a, b) for a, b in pairs if a.eligible and b.eligible]

    def counted(obs: Observation) -> bool:
        return obs.scored or obs.failed_feasible

    return PairedTally(
        category=category,
        planned_pairs=len(pairs),
        eligible_pairs=len(eligible),
        completed=paired_counts(
            (a.correct, b.correct) for a, b in eligible if a.scored and b.scored
        ),
        # A failed feasible slot is wrong (obs.correct is False without a score).
        with_failures=paired_counts(
            (a.correct, b.correct) for a, b in eligible if counted(a) and counted(b)
        ),
    )


def _contrast(role_a: str, role_b: str, index: dict[str, dict[_PairKey, Observation]],
              categories: Sequence[str]) -> Contrast:
    a_slots, b_slots = index[role_a], index[role_b]
    pairs = [(a_slots[key], b_slots[key]) for key in a_slots if key in b_slots]
    present = [c for c in categories if any(a.planned.category == c for a, _ in pairs)]
    return Contrast(
        role_a=role_a,
        role_b=role_b,
        overall=_paired_tally(pairs, None),
        categories=[
            _paired_tally([(a, b) for a, b in pairs if a.planned.category == category],
                          category)
            for category in present
        ],
    )


def _versus_native(plan: Plan, contrasts: Sequence[Contrast],
                   index: dict[str, dict[_PairKey, Observation]],
                   categories: Sequence[str]) -> list[Contrast]:
    """Every other role against the first native role, oriented role - native."""
    arms = {slot.role: slot.arm for slot in plan.slots}
    native = next((role for role in plan.roles if arms[role] in NATIVE_ARMS), None)
    if native is None:
        return []
    ready = {(c.role_a, c.role_b): c for c in contrasts}
    return [ready.get((native, role)) or _contrast(native, role, index, categories)
            for role in plan.roles if role != native]


def _utc(ns: int) -> str:
    """Unix nanoseconds as UTC ISO-8601 with milliseconds, ``2031-03-14T09:26:53.589Z``
    (integer arithmetic: no float rounding of the timestamp)."""
    seconds, rest = divmod(ns, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{rest // 1_000_000:03d}Z"


def _run_info(plan: Plan, facts: RunFacts | None, reader: str | None,
              summarisers: Mapping[str, str], version: str,
              route: RouteName | None, probe_mode: ProbeModeName | None) -> RunInfo:
    check_id("efold version", version)
    if reader is not None:
        check_model("reader", reader)
    for role, model in summarisers.items():
        if role not in plan.roles:
            raise ReportError(Code.REPORT_INPUT_INVALID, "a summariser of an unplanned role")
        check_model("summariser", model)
    start = end = None
    if facts is not None:
        check_span(facts)
        start, end = facts.started_ns, facts.ended_ns
    return RunInfo(
        efold_version=version,
        campaign=plan.campaign,
        started_at=None if start is None else _utc(start),
        ended_at=None if end is None else _utc(end),
        duration_seconds=None if start is None or end is None else (end - start) / 1e9,
        reader=reader,
        summarisers={role: summarisers[role] for role in plan.roles if role in summarisers},
        route=route,
        probe_mode=probe_mode,
    )


def _slot_row(obs: Observation) -> SlotRow:
    planned, receipt = obs.planned, obs.receipt
    if obs.status is not None:
        status = obs.status.value
    elif obs.receipt_copy_missing:
        status = "receipt_missing"
    else:
        status = "missing" if obs.eligible else "unvisited"
    return SlotRow(
        slot=planned.slot,
        role=planned.role,
        trace_id=planned.trace_id,
        probe_id=planned.probe_id,
        category=planned.category,
        repeat=planned.repeat,
        eligible=obs.eligible,
        status=status,
        code=receipt.code if receipt else None,
        outcome=obs.outcome.value if obs.outcome else None,
        correct=receipt.correct if receipt else None,
        availability=obs.availability.value if obs.availability else None,
        http_status=receipt.http.status if receipt and receipt.http else None,
        http_kind=receipt.http.kind if receipt and receipt.http else None,
        excluded=obs.excluded.value if obs.excluded else None,
        checkpoint_sha256=receipt.checkpoint_sha256 if receipt else None,
        pressure_estimate_tokens=receipt.pressure_estimate_tokens if receipt else None,
        pressure_measured_tokens=receipt.pressure_measured_tokens if receipt else None,
        ledger=receipt.ledger if receipt else None,
        **_slot_tokens(receipt),
    )


def _slot_tokens(receipt: Receipt | None) -> dict[str, int]:
    """A receipt's known input and output tokens (none when its usage went missing)."""
    if receipt is None or not receipt.spend.usage_known or not receipt.spend.requests:
        return {}
    usage = receipt.spend.usage
    return {"input_tokens": usage.input, "output_tokens": usage.output}


def build_results(plan: Plan, receipts: Iterable[Receipt], *, faux: bool,
                  receipt_copies_missing: Iterable[str] = (),
                  run_facts: RunFacts | None = None, reader: str | None = None,
                  summariser_spends: Sequence[SlotSpend] | Mapping[str, SlotSpend] = (),
                  summarisers: Mapping[str, str] | None = None,
                  route: RouteName | None = None,
                  probe_mode: ProbeModeName | None = None,
                  design: Sequence[DesignRecord] = (),
                  efold_version: str | None = None, judge: str | None = None,
                  build: str | None = None) -> Results:
    """The content-free results of one run, complete or partial.

    ``faux`` says whether the registered reader is the faux extractive reader (the plan
    does not record it); when true the results say plainly that accuracy measures what
    the fold kept, not model quality. ``receipt_copies_missing`` lists slots the journal
    records as visited whose receipt file is gone: they are counted as such (and as
    missing when eligible), never given an invented status. ``run_facts``: what the
    journal and the run lease say about how the run went (``efold.controller.rundirs.aggregate``
    reads them); without them ``status`` is null and the reports say the status is
    unknown. ``reader``: the registered reader's ``provider/model``.
    ``summariser_spends``: per checkpoint, the spend of its summary requests; keyed by
    the planned checkpoint (``PlannedSlot.checkpoint``) they were made for, they are split
    by role into each role's cost per correct answer (unkeyed, that cost is null).
    ``route``: where the campaign's requests went (``RunInfo.route``); ``probe_mode``:
    the registration's probe mode (``RunInfo.probe_mode``). ``design``: the
    registration's declared comparisons (``Results.design``).
    ``summarisers``: role -> ``provider/model`` of the summariser model its fold asks
    (only roles that ask one). ``efold_version``: the version to report (default: this
    efold's). ``judge``: the registered judge's ``provider/model`` (19-C), when the
    campaign has one. ``build``: the registration's build digest, named by the boundary
    cases' compression incidents. Model ids and the version must be opaque ids, or the
    report refuses.

    Raises ``ReportError`` when the plan and receipts are not one consistent,
    content-free record (see ``report.join.join_receipts``).
    """
    observations = join_receipts(plan, receipts, receipt_copies_missing)
    categories = _ordered_categories(observations)
    by_role = {role: [o for o in observations if o.planned.role == role] for role in plan.roles}
    index = {
        role: {(o.planned.suite, o.planned.trace_id, o.planned.probe_id, o.planned.repeat): o
               for o in role_observations}
        for role, role_observations in by_role.items()
    }
    run_spend = _spend(_receipts(observations))
    in_flight = frozenset(run_facts.in_flight) if run_facts is not None else frozenset()
    contrasts = [_contrast(a, b, index, categories) for a, b in combinations(plan.roles, 2)]
    status = None if run_facts is None else run_status(run_facts, observations)
    run = _run_info(plan, run_facts, reader, summarisers or {},
                    efold.__version__ if efold_version is None else efold_version, route,
                    probe_mode)
    notes = [FAUX_NOTE] if faux else []
    notes += [DESCRIPTIVE_NOTE, COVERAGE_NOTE, PROXY_NOTE]
    if not run_spend.usage_known:
        notes.append(UNKNOWN_USAGE_NOTE)
    return Results(
        schema=RESULTS_SCHEMA,
        campaign=plan.campaign,
        registration_sha256=plan.registration_sha256,
        schedule_sha256=plan.schedule_sha256,
        reader_faux=faux,
        repeats=plan.repeats,
        roles=list(plan.roles),
        categories=categories,
        cap=money(plan.cap_units),
        rmax=money(plan.rmax_units),
        notes=notes,
        execution=_execution(observations),
        spend=run_spend,
        results=_with_compression_and_cost(
            plan, [_role_result(role, by_role[role], categories, plan.repeats, in_flight,
                                probe_mode)
                   for role in plan.roles], by_role, _summariser_units(plan, summariser_spends)),
        contrasts=contrasts,
        slots=[_slot_row(obs) for obs in observations],
        status=status,
        reader=reader,
        summariser_spend=spend_of(list(summariser_spends.values())
                                  if isinstance(summariser_spends, Mapping)
                                  else summariser_spends) if summariser_spends else None,
        run=run,
        latency=_latency(observations, in_flight),
        versus_native=_versus_native(plan, contrasts, index, categories),
        judge=judge, judge_spend=_judge_spend(observations, judge),
        money=None if run_facts is None else _run_money(run_facts),
        boundary=campaign_boundary(
            plan.roles, [_arm_of(plan, role) for role in plan.roles],
            _receipts(observations), build=build or "unknown",
            model=None if faux else reader),
        design=[_design_pair(record, index, categories) for record in design] or None,
    )


def _design_pair(record: DesignRecord, index: dict[str, dict[_PairKey, Observation]],
                 categories: Sequence[str]) -> DesignPair:
    """A declared comparison, read as the paired contrast treatment minus base."""
    if record.base not in index or record.treatment not in index:
        raise ReportError(Code.REPORT_INPUT_INVALID, "a design pair of an unplanned role")
    contrast = _contrast(record.base, record.treatment, index, categories)
    return DesignPair(base=record.base, treatment=record.treatment, differs=record.differs,
                      base_sha256=record.base_sha256,
                      treatment_sha256=record.treatment_sha256,
                      changed=list(record.changed), contrast=contrast.overall.completed)


def _run_money(facts: RunFacts) -> RunMoney | None:
    """The journal's money as the results show it (null when it was not read)."""
    m = facts.money
    if m is None:
        return None
    return RunMoney(settled=money(m.settled_units), retained=money(m.retained_units),
                    open=money(m.open_units),
                    charged=money(m.settled_units + m.retained_units + m.open_units))


def _arm_of(plan: Plan, role: str) -> str:
    return next((s.arm for s in plan.slots if s.role == role), role)


def _judge_spend(observations: Sequence[Observation], judge: str | None) -> Spend | None:
    """19-C: the judge's own spend line, when any receipt carries a judge record
    (``report.judge``); ``judge``, its ``provider/model``, is checked like the reader's."""
    if judge is not None:
        check_model("judge", judge)
    spends = judge_spends(observations)
    return spend_of(spends) if spends else None


def reader_label(results: Results) -> str:
    """How the reports name the reader: the faux extractive reader, or the real model
    the registration names."""
    if results.reader_faux:
        return "faux extractive"
    return f"real model {results.reader}" if results.reader else "registered model"
