"""The pilot: one registered campaign, end to end, under one writer.

Order (each step completes before the next; nothing is resumed or reused):
1. (the caller) claim a new run directory;
2. open the run (``controller.rundirs.run_setup.open_run``): take the run lease, open the
   journal, start epoch 1; consume the authorization (faux: minted, burned in the faux
   registry, pair verified) before any child starts; publish registration.json and
   plan.json into the run;
3. write reader-safe traces; one prep child per checkpoint (role × trace × repeat);
   verify each snapshot; learn from it whether the checkpoint is inventory-infeasible;
   compute evaluator-side evidence (availability, exclusions). No fold code ever runs
   in the controller;
4. one probe child per slot, launched in schedule order with up to ``concurrency``
   in flight, the durable permit source answering every one of them; one receipt per
   visited slot; the stop policies read each slot's end in schedule order;
5. aggregate: results.json, summary.md, report.html; release the lease.

On a local route (``inline_smoke``), steps 3 and 4 run twice, over consecutive parts of
the schedule: first its prefix up to the first eligible slot of every role (the inline
smoke, ``smoke_part``), then the rest, which is admitted only if the smoke passed (else
the sticky stop ``smoke_failed``). Admission order is the schedule's either way.

A stop closes admission: every later slot is still visited, in order, and receives an
``unadmitted`` receipt with the refusal's code (``lookup_stopped``; ``interrupted`` after
SIGINT/SIGTERM, ``controller.rundirs.interrupt``; ``not_admitted_cap`` once the cap refused)
without a child being launched, so the counts of a stopped run are complete and honest.
Only a controller that dies leaves slots unvisited (they stay in the plan's inventory,
never in the execution counts).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final, Literal

import anyio
import anyio.abc

from efold.boundary.case import Case
from efold.controller.campaigns.campaign import Campaign
from efold.controller.campaigns.feasibility import FirstRequest
from efold.controller.campaigns.plan import ineligible_code
from efold.controller.campaigns.profiles import route_of
from efold.controller.campaigns.registration import Registration
from efold.controller.campaigns.shards import ShardTicket
from efold.controller.campaigns.stops import InScheduleOrder, SlotEnd
from efold.controller.pilot.boundary_slots import CheckpointFacts, boundary_task, checkpoint_facts
from efold.controller.pilot.evidence import (
    Evidence,
    VisibleSize,
    checkpoint_evidence,
    transcript_size,
)
from efold.controller.pilot.judging import refused_receipt
from efold.controller.pilot.places import Place, Places, one_failure_task_group
from efold.controller.pilot.prep_launch import PrepCause
from efold.controller.pilot.preparation import (
    Preparation,
    Traces,
    checkpoints_of,
    prepare_checkpoints,
    publish_prep_inputs,
)
from efold.controller.pilot.receipts import receipts_durable
from efold.controller.pilot.reuse import Built, earlier_checkpoints
from efold.controller.pilot.slots import BoundarySlot, SlotResult, run_probe, write_slot_receipt
from efold.controller.processes.template import Launcher
from efold.controller.processes.template_spawn import EarlyTemplate
from efold.controller.rundirs.aggregate import run_reports
from efold.controller.rundirs.authorize_run import RealGrant
from efold.controller.rundirs.chain import read_linked
from efold.controller.rundirs.interrupt import Say, Signals, caught, interruptible, say
from efold.controller.rundirs.run_context import RunContext
from efold.controller.rundirs.run_setup import open_run
from efold.controller.rundirs.runroot import private_subdir
from efold.corpus.model import SuiteItem
from efold.errors import Code
from efold.folds.snapshot import RestoredCheckpoint
from efold.protocol.assignment import SnapshotRef
from efold.protocol.records import Exclusion, Plan, PlannedSlot, Receipt, SlotStatus
from efold.protocol.tasks import BoundaryTask, JudgeTask, ProbeTask
from efold.registry import publish_exclusive
from efold.registry.errors import RegistryError
from efold.registry.files import fsync_dir
from efold.registry.lease import Lease


@dataclass(frozen=True)
class PilotOutcome:
    run_dir: Path
    stop_code: Code | None
    receipts: list[Receipt]
    plan: Plan
    reports: dict[str, bytes]
    interrupted: int | None = None  # the signal that interrupted the run, if one did
    # Checkpoint -> why its prep child says the fold failed: shown to the operator,
    # never a decision (the refused slots carry the controller's own code).
    causes: dict[str, PrepCause] = field(default_factory=dict)
    # Checkpoint -> its first request, for each inventory-infeasible one (why its slots
    # were skipped, with the figures).
    infeasible: dict[str, FirstRequest] = field(default_factory=dict)
    # A continuation's checkpoints copied from an earlier link and verified, not built.
    reused: int = 0


@dataclass(frozen=True)
class Dispatch:
    """How a run reaches its reader: offline (no grant) or on the real route with the
    operator's grant; ``smoke``: the configured-process smoke (one slot per role, its
    own cap); ``keep_answers``: a real run's answers are kept in an owner-only private
    artifact of the run (``answers.jsonl``), outside every report; ``launcher``: how its
    children start (``controller.processes.template``: forked from a fork-server template, or
    each spawned); ``shard``: one shard of a cluster run (``controller.campaigns.shards``)."""

    grant: RealGrant | None = None
    smoke: bool = False
    keep_answers: bool = False
    launcher: Launcher = "template"
    shard: ShardTicket | None = None
    # A real run's operator passed --process-group-containment (``run_setup.open_run``).
    process_group_ok: bool = False
    # A continuation's or a chosen part's plan (``controller.rundirs.continuation``):
    # run instead of the registration's whole plan.
    part: Plan | None = None
    # The lease of the run a continuation continues, taken before its directory was
    # claimed (``run_setup.open_run``): no other continuation can link to it first.
    continued: Lease | None = None
    # The run's own lease, taken by the command as it claimed the directory
    # (``run_setup.open_run`` runs under it, and releases it).
    claimed: Lease | None = None
    # A template started as the command began (``template_spawn.EarlyTemplate``): the
    # run's, if it fits (``run_setup.open_run``).
    early: EarlyTemplate | None = None


OFFLINE: Final = Dispatch()  # the faux route


@dataclass(frozen=True)
class CheckpointDone:
    """A checkpoint whose prep child has ended: ``ready`` when its snapshot verified and
    every probe asked of it fits (its slots will be launched); else it failed or is
    inventory-infeasible (its slots are refused with the code their receipts carry)."""

    key: str
    role: str
    ready: bool
    elapsed_ms: int


Phase = Literal["prep", "probe", "smoke-prep", "smoke"]


@dataclass(frozen=True)
class ProgressEvent:
    """What a run reports as it goes, to whoever shows it (``controller.pilot.pilot_view``).

    ``phase`` is ``prep`` (one unit per checkpoint) or ``probe`` (one per planned slot),
    or, on a local route, first ``smoke-prep`` and ``smoke`` for the inline smoke's part
    of the schedule (``smoke_part``);
    ``done`` of ``total`` units are finished. Each phase opens with ``done == 0`` and
    ends with one event where ``done == total``. ``checkpoint`` / ``receipt``: the unit
    that just finished, when one did (a stop ends the prep phase without the rest).
    ``settled_units``: the run's settled spend so far (summaries and probes);
    ``retained_units``: what their closed holds retained without a settlement so far
    (``report.schema.RunMoney.retained``); ``cap_units``: the run's cap.

    Invariant: content-free, like the receipts it carries: ids, codes and numbers."""

    phase: Phase
    done: int
    total: int
    settled_units: int
    retained_units: int
    cap_units: int
    checkpoint: CheckpointDone | None = None
    receipt: Receipt | None = None


Progress = Callable[[ProgressEvent], None]


def _ignore(event: ProgressEvent) -> None:
    pass


async def execute(reg: Registration, reg_bytes: bytes, run: Path, *,
                  progress: Progress | None = None,
                  program: Sequence[str] | None = None,
                  dispatch: Dispatch = OFFLINE, tell: Say = say) -> PilotOutcome:
    """The pilot; ``tell`` says what an interruption does (``controller.rundirs.interrupt``)."""
    tick = progress or _ignore
    with caught(tell) as signals:
        return await _execute(reg, reg_bytes, run, tick, program, dispatch, signals)


async def _execute(reg: Registration, reg_bytes: bytes, run: Path, tick: Progress,
                   program: Sequence[str] | None, dispatch: Dispatch,
                   signals: Signals) -> PilotOutcome:
    async with open_run(reg, reg_bytes, run, admitting=True, program=program,
                        grant=dispatch.grant, smoke=dispatch.smoke,
                        keep_answers=dispatch.keep_answers,
                        launcher=dispatch.launcher, shard=dispatch.shard,
                        process_group_ok=dispatch.process_group_ok,
                        part=dispatch.part, continued=dispatch.continued,
                        claimed=dispatch.claimed, early=dispatch.early) as opened:
        ctx, plan, items, cases = opened.ctx, opened.plan, opened.items, opened.cases

        causes: dict[str, PrepCause] = {}
        infeasible: dict[str, FirstRequest] = {}
        reused: set[str] = set()

        async def body() -> tuple[list[Receipt], dict[str, bytes]]:
            facts: dict[str, CheckpointFacts] = {}
            preps: dict[str, Preparation] = {}
            evidence: dict[tuple[str, str], Evidence] = {}
            probing = _Probing(ctx, plan, items, reg, Boundary(
                cases, facts, real=dispatch.grant is not None))
            smoke = smoke_part(plan) if inline_smoke(dispatch) else range(0)
            traces = publish_prep_inputs(run, plan, items, eligible_only=True)
            built = earlier_checkpoints(plan.link, run)  # a continuation's, to reuse
            for part in (smoke, range(len(smoke), len(plan.slots))):
                if not part:  # no inline smoke, or a run that is all smoke
                    continue
                part_tick = tick if part is not smoke else _as_smoke(tick)
                ready, seen = await _prepare(ctx, plan, items, reg, part_tick, cases, facts,
                                             only=_checkpoints(plan, part) - preps.keys(),
                                             traces=traces, reuse=built)
                preps.update(ready)
                evidence.update(seen)
                await probing.run(part, preps, evidence, part_tick)
                if part is smoke and ctx.interrupted is None and not probing.passed(part):
                    ctx.take_stop(Code.SMOKE_FAILED, None)
            causes.update({key: p.result.cause for key, p in preps.items()
                           if p.result.cause is not None})
            infeasible.update({key: p.first_request for key, p in preps.items()
                               if p.first_request is not None and not p.first_request.fits})
            reused.update(key for key, p in preps.items() if p.result.reused)
            receipts = probing.finish()
            # -- aggregate ---------------------------------------------------------------
            reports = run_reports(read_linked(run))  # a link's: its chain's reports
            for name, data in reports.items():
                publish_exclusive(run, name, data)
            return receipts, reports

        receipts, reports = await interruptible(ctx, body, signals)
        stop = ctx.policy.stop_code or _admission_ended(ctx, receipts)
    return PilotOutcome(run, stop, receipts, plan, reports, ctx.interrupted, causes,
                        infeasible, len(reused))


async def _prepare(ctx: RunContext, plan: Plan, items: dict[str, SuiteItem],
                   reg: Registration, tick: Progress, cases: dict[str, Case],
                   facts: dict[str, CheckpointFacts], *, only: AbstractSet[str],
                   traces: Traces, reuse: Mapping[str, Built]
                   ) -> tuple[dict[str, Preparation], dict[tuple[str, str], Evidence]]:
    """One prep child per checkpoint in ``only`` that an eligible slot uses, and the
    evaluator-side evidence (availability, exclusions) of every probe the plan asks of
    a feasible one; for a boundary case's checkpoint, into ``facts``, what judging its
    slots needs of it."""
    evidence: dict[tuple[str, str], Evidence] = {}
    roles = {key: first.role for key, first in checkpoints_of(plan, eligible_only=True).items()}
    settled = retained = 0

    def prep_tick(done: int, total: int, ended: Preparation | None) -> None:
        nonlocal settled, retained
        finished = None
        if ended is not None:
            key = ended.result.key
            settled += ctx.source.ledger(key).settled_units
            retained += ctx.source.ledger(key).retained_units
            finished = CheckpointDone(key, roles[key], ended.feasible is True,
                                      ended.result.elapsed_ms)
        tick(ProgressEvent("prep", done, total, settled, retained, ctx.source.cap_units,
                           checkpoint=finished))

    transcripts: dict[str, VisibleSize] = {}  # trace id -> its full transcript's size
    # A local or real reader's provider counts each request's input: it decides pressure.
    provider_counts = not reg.campaign.reader.is_faux

    def on_prepared(key: str, first: PlannedSlot, restored: RestoredCheckpoint) -> None:
        if first.trace_id in cases:
            facts[key] = checkpoint_facts(restored.checkpoint)
        asked = {s.probe_id for s in plan.slots if s.checkpoint == key}
        # The plan's trace, never what the fold's data claims.
        wanted = [p for p in items[first.trace_id].probes.probes if p.id in asked]
        if first.trace_id not in transcripts:
            transcripts[first.trace_id] = transcript_size(items[first.trace_id].trace)
        # A required-recall case whose checkpoint shows its answer measures no recall.
        shown = first.trace_id in cases and cases[first.trace_id].shows_answer(
            restored.checkpoint)
        for pid, ev in checkpoint_evidence(reg.campaign.suite, restored, wanted,
                                           transcripts[first.trace_id],
                                           provider_counts=provider_counts).items():
            if shown and ev.excluded is None:
                ev = replace(ev, excluded=Exclusion.RECALL_ANSWER_VISIBLE)
            evidence[(key, pid)] = ev

    preps = await prepare_checkpoints(ctx, plan, items, reg, eligible_only=True, only=only,
                                      traces=traces, tick=prep_tick, on_prepared=on_prepared,
                                      reuse=reuse, cases=cases)
    return preps, evidence


@dataclass(frozen=True)
class Boundary:
    """A run's boundary cases (by their item's trace id), the facts of their prepared
    checkpoints (by checkpoint key), and whether the route is real."""

    cases: dict[str, Case]
    facts: dict[str, CheckpointFacts]
    real: bool


class _Probing:
    """The probe phase over the run's parts (a local route's inline smoke, then the
    rest; else the whole schedule as one part): one probe child per slot, launched in
    schedule order, up to the campaign's ``concurrency`` in flight at once; a slot whose
    admission is already closed when its turn to launch comes is visited without a
    launch. The stop policies read every slot's end in schedule order
    (``stops.InScheduleOrder``, one for the whole run: the parts are consecutive). A
    boundary case's slot runs the ``boundary`` body (``controller.pilot.boundary_slots``).

    Admission stays serialized in the single writer: every permit exchange of every
    child in flight is answered by the one durable permit source, on this one thread,
    and the cap rule counts every active hold, so T + Rmax <= C holds whatever N is.

    Invariant: ``receipts`` holds one receipt per visited schedule position."""

    def __init__(self, ctx: RunContext, plan: Plan, items: dict[str, SuiteItem],
                 reg: Registration, boundary: Boundary) -> None:
        self.ctx, self.plan, self.items, self.reg = ctx, plan, items, reg
        self.boundary = boundary
        self.receipts: dict[int, Receipt] = {}
        self.in_order = InScheduleOrder(ctx.policy)
        self.run_deadline: float | None = None  # set when the first slot is visited
        private_subdir(ctx.run_dir, "slots")
        private_subdir(ctx.run_dir, "receipts")

    async def run(self, part: range, preps: dict[str, Preparation],
                  evidence: dict[tuple[str, str], Evidence], tick: Progress) -> None:
        """Visit the schedule positions of ``part``, in order."""
        ctx, plan, campaign = self.ctx, self.plan, self.reg.campaign
        if self.run_deadline is None:  # ``deadlines.run_seconds`` counts the probe phase
            self.run_deadline = time.monotonic() + campaign.deadlines.run_seconds
        run_deadline = self.run_deadline
        start_slot = _slot_starter(ctx, self.items, self.reg, evidence, self.boundary)
        done = 0
        # The run's spend so far (every prep and every slot before this part).
        settled = sum(ctx.source.ledger(key).settled_units for key in preps) + sum(
            r.spend.settled_units for r in self.receipts.values())
        retained = sum(ctx.source.ledger(key).retained_units for key in preps) + sum(
            r.spend.retained_units for r in self.receipts.values())
        places = Places(campaign.concurrency)

        def visited(n: int, receipt: Receipt, end: SlotEnd | None) -> None:
            nonlocal settled, retained, done
            for at, code in self.in_order.finish(n, end):
                if code in (Code.LOOKUP_REPEATED_LOSS, Code.INVALID_SLOT_RATE):
                    ctx.take_stop(code, plan.slots[at].slot)
            self.receipts[n] = receipt
            done += 1
            settled += receipt.spend.settled_units
            retained += receipt.spend.retained_units
            tick(ProgressEvent("probe", done, len(part), settled, retained,
                               ctx.source.cap_units, receipt=receipt))

        async def launched(n: int, planned: PlannedSlot, snapshot: SnapshotRef,
                           place: Place) -> None:
            mine = Place()  # what this slot tells the next one in its place
            handed = concluded = False

            def give() -> None:
                nonlocal handed
                if not handed:
                    handed = True
                    places.hand_over(mine)

            def hand_over() -> None:
                """At the slot's first admission or its DoneAck: the place goes on
                once the slot before it in its place has ended (a place holds at most
                two live children), at once if it has; else at this slot's end."""
                place.when_ended(give)

            def conclude(receipt: Receipt, end: SlotEnd | None) -> None:
                """At the slot's DoneAck: its stops taken, the next may be admitted."""
                nonlocal concluded
                concluded = True
                visited(n, receipt, end)
                mine.admissible.set()

            try:
                result = await start_slot(n, planned, snapshot, place.admissible, hand_over,
                                          conclude)
                if not concluded:
                    visited(n, result.receipt, result.end)
            finally:
                with anyio.CancelScope(shield=True):
                    await place.ended.wait()  # teardowns end in order, in their place
                mine.end()
                give()

        tick(ProgressEvent("probe", 0, len(part), settled, retained, ctx.source.cap_units))
        async with one_failure_task_group() as in_flight:
            for n in part:
                planned = plan.slots[n]
                place = await places.take()  # in schedule order: a slot waits for a place
                snapshot = _admission(ctx, planned, preps.get(planned.checkpoint),
                                      run_deadline, campaign)
                if isinstance(snapshot, Code):  # refused: visited without a launch
                    places.hand_over(place)
                    visited(n, _refuse(ctx, planned, snapshot), None)
                    continue
                in_flight.start_soon(launched, n, planned, snapshot, place)

    def passed(self, part: range) -> bool:
        """The inline smoke's verdict: nothing stopped the run, and every eligible slot
        of the part completed, except one skipped as inventory-infeasible (a fact of its
        checkpoint, not of the route: a hard suite's native slots are); at least one
        completed, or the route was never proven."""
        statuses = [self.receipts[n].status for n in part if self.plan.slots[n].eligible]
        return (not self.ctx.policy.stopped and SlotStatus.COMPLETED in statuses
                and all(s in (SlotStatus.COMPLETED, SlotStatus.SKIPPED) for s in statuses))

    def finish(self) -> list[Receipt]:
        """The receipts in schedule order; journals why admission ended early, when no
        rule was broken (the report's status names it)."""
        ordered = [self.receipts[n] for n in sorted(self.receipts)]
        ended = _admission_ended(self.ctx, ordered)
        if ended is not None and self.ctx.policy.stop_code is None:
            self.ctx.journal.record_stop(epoch=self.ctx.epoch, code=ended.value, slot=None,
                                         sticky=False)
        # What waits deferred (the last exit rows) is durable before any reader of the
        # journal (the reports, the status) looks; so are the names of the receipts
        # and of the slots' directories (one directory fsync each, not one per slot).
        self.ctx.journal.commit_pending()
        receipts_durable(self.ctx.run_dir)
        fsync_dir(self.ctx.run_dir / "slots")
        return ordered


def inline_smoke(dispatch: Dispatch) -> bool:
    """A local route's run smokes inline (a paid one ran ``smoke`` first; a faux one
    needs none; a smoke or a shard is its own run)."""
    return (dispatch.grant is not None and dispatch.grant.local and not dispatch.smoke
            and dispatch.shard is None)


def smoke_part(plan: Plan) -> range:
    """The inline smoke: the schedule's first positions up to the first eligible slot of
    every role (the smoke's slots, ``plan.smoke_plan``; the schedule interleaves every
    role inside each block, so this is the first block or little more). Run first and
    alone, it is the run's own smoke: the rest is admitted only if it passed."""
    firsts: dict[str, int] = {}
    for n, s in enumerate(plan.slots):
        if s.eligible:
            firsts.setdefault(s.role, n)
    return range(max(firsts.values()) + 1 if firsts else 0)


def _checkpoints(plan: Plan, part: range) -> set[str]:
    return {plan.slots[n].checkpoint for n in part}


def _as_smoke(tick: Progress) -> Progress:
    """``tick`` with the inline smoke's phases named as such."""
    names: dict[str, Phase] = {"prep": "smoke-prep", "probe": "smoke"}

    def smoke_tick(event: ProgressEvent) -> None:
        tick(replace(event, phase=names.get(event.phase, event.phase)))

    return smoke_tick


# (position, slot, snapshot, the conclusion to admit after, the hand-over, the
# conclusion's report: ``slots.run_probe``)
SlotStarter = Callable[[int, PlannedSlot, SnapshotRef, anyio.Event, Callable[[], None],
                        Callable[[Receipt, SlotEnd | None], None]], Awaitable[SlotResult]]


def _slot_starter(ctx: RunContext, items: dict[str, SuiteItem], reg: Registration,
                  evidence: dict[tuple[str, str], Evidence], boundary: Boundary
                  ) -> SlotStarter:
    """How the slot at schedule position ``n`` is run once admitted: its task (the
    probe's question, or its boundary case), its cache key, then ``slots.run_probe``."""
    campaign = reg.campaign
    route = route_of(campaign.reader)
    judge = campaign.judge
    judge_route = route_of(judge) if judge is not None else None
    cache_token = secrets.token_hex(6)  # cache keys: printable ASCII, unique per slot
    probes = {(t, p.id): p for t, i in items.items() for p in i.probes.probes}
    roles = {r.name: r for r in campaign.roles}
    # A place is handed over at its slot's first admission (the next child's launch
    # overlapping this slot's request) at concurrency 1 only: one slot at a time leaves
    # the machine's other cores idle; with several under way the early launch competes
    # with them (docs/performance.md, round two, fourth step). The same on every
    # machine: what a run launches never depends on its core count.
    overlap_request = campaign.concurrency == 1

    async def start(n: int, planned: PlannedSlot, snapshot: SnapshotRef,
                    admit_after: anyio.Event, hand_over: Callable[[], None],
                    concluded: Callable[[Receipt, SlotEnd | None], None]) -> SlotResult:
        probe = probes[(planned.trace_id, planned.probe_id)]
        case = boundary.cases.get(planned.trace_id)
        task: ProbeTask | BoundaryTask
        slot_case = None
        if case is not None:
            task = boundary_task(case, route)
            slot_case = BoundarySlot(case, boundary.facts[planned.checkpoint], route,
                                     boundary.real)
        else:
            task = ProbeTask(
                question=probe.question, instructions=roles[planned.role].instructions,
                route=route, judge=None if judge is None or judge_route is None else
                JudgeTask(route=judge_route, rubric=list(judge.rubric),
                          pass_threshold=judge.pass_threshold, expected=list(probe.expected)))
        try:
            # Not fsynced one by one: nothing durable names a slot's directory before
            # the phase ends, when ``slots/`` is fsynced once (``_Probing.finish``).
            slot_dir = private_subdir(ctx.run_dir, "slots", planned.slot, durable=False)
        except RegistryError as exc:
            return _no_workspace(ctx, planned, exc.code)
        return await run_probe(
            ctx, planned=planned, probe=probe, slot_dir=slot_dir, snapshot=snapshot,
            cache_key=f"efold-{cache_token}-{n:06d}", task=task,
            evidence=evidence[(planned.checkpoint, planned.probe_id)], boundary=slot_case,
            admit_after=admit_after, hand_over=hand_over, concluded=concluded,
            overlap_request=overlap_request,
        )

    return start


def _no_workspace(ctx: RunContext, planned: PlannedSlot, code: Code) -> SlotResult:
    """A slot whose private directory could not be made (``slots/`` no longer writable,
    a name planted in it): it is refused before any launch, with the reason, and the
    run stops there (a sticky stop: every later slot would meet the same directory), so
    that the slots under way end as usual and the reports are written."""
    ctx.take_stop(code, planned.slot)
    return SlotResult(_refuse(ctx, planned, code), None)


def _refuse(ctx: RunContext, planned: PlannedSlot, code: Code) -> Receipt:
    """The receipt of a slot refused before any launch, written."""
    receipt = refused_receipt(planned, code)
    write_slot_receipt(ctx, receipt)
    return receipt


def _admission_ended(ctx: RunContext, receipts: Sequence[Receipt]) -> Code | None:
    """Why admission closed before the schedule ended, when no rule was broken: the cap
    refused (``not_admitted_cap``) or ``deadlines.run_seconds`` passed (``run_deadline``).
    Not sticky: such a run stops, it did not fail."""
    if ctx.source.cap_refused:
        return Code.NOT_ADMITTED_CAP
    if any(receipt.code == Code.RUN_DEADLINE for receipt in receipts):
        return Code.RUN_DEADLINE
    return None


def _admission(ctx: RunContext, planned: PlannedSlot, prepared: Preparation | None,
               run_deadline: float, campaign: Campaign) -> SnapshotRef | Code:
    """The verified snapshot a slot's probe child restores, or the code it is refused
    with before any launch (first cause first)."""
    prep = prepared.result if prepared is not None else None
    snapshot = prep.snapshot if prep is not None else None
    if not planned.eligible:
        return ineligible_code(planned.arm, campaign) or Code.INVENTORY_INFEASIBLE
    if prepared is not None and prepared.feasible is False:
        return Code.INVENTORY_INFEASIBLE
    if prep is not None and snapshot is None:  # its checkpoint failed: why
        return prep.code or Code.LOOKUP_PREPARATION_INVALID
    if ctx.interrupted is not None:  # the operator ended the run
        return Code.INTERRUPTED
    if ctx.policy.stopped:  # admission is closed for the rest of the run
        return Code.LOOKUP_STOPPED
    if ctx.source.cap_refused:  # spend never falls: every later admit refuses
        return Code.NOT_ADMITTED_CAP
    if time.monotonic() > run_deadline:
        return Code.RUN_DEADLINE
    if snapshot is None:  # never prepared (admission closed during the preps)
        return Code.LOOKUP_PREPARATION_INVALID
    return snapshot


def run_pilot(reg: Registration, reg_bytes: bytes, run: Path, *,
              progress: Progress | None = None,
              program: Sequence[str] | None = None,
              dispatch: Dispatch = OFFLINE, tell: Say = say) -> PilotOutcome:
    """Synchronous entry: the async pilot on the trio backend."""
    previous = os.umask(0o077)  # everything the run writes is owner-only
    try:
        return anyio.run(
            lambda: execute(reg, reg_bytes, run, progress=progress, program=program,
                            dispatch=dispatch, tell=tell),
            backend="trio",
        )
    finally:
        os.umask(previous)
