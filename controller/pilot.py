"""The pilot: one registered campaign, end to end, under one writer.

Order (each step completes before the next; nothing is resumed or reused):
1. claim a new run directory; take the run lease; open the journal; start epoch 1;
2. publish registration.json and plan.json into the run; consume the authorization
   (faux: minted, burned in the faux registry, pair verified) before any child starts;
3. write reader-safe traces; one prep child per checkpoint (role × trace × repeat);
   verify each snapshot; learn from it whether the checkpoint is inventory-infeasible;
   compute evaluator-side evidence (availability, exclusions). No fold code ever runs
   in the controller;
4. one probe child per slot in schedule order, the durable permit source answering;
   one receipt per visited slot; stop policies after every slot;
5. aggregate: results.json, summary.md, report.html; release the lease.

A stop closes admission: every later slot is still visited, in order, and receives an
``unadmitted`` receipt with the refusal's code (``lookup_stopped``; ``interrupted`` after
SIGINT/SIGTERM, ``controller.interrupt``; ``not_admitted_cap`` once the cap refused)
without a child being launched, so the counts of a stopped run are complete and honest.
Only a controller that dies leaves slots unvisited (they stay in the plan's inventory, never in the execution counts).
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import anyio

from efold.controller.aggregate import PLAN_NAME, read_run, run_reports
from efold.controller.containment import ContainmentPolicy
from efold.controller.errors import ControllerError
from efold.controller.interrupt import interruptible
from efold.controller.permits import DurablePermitSource
from efold.controller.plan import plan_for
from efold.controller.preparation import Preparation, Progress, prepare_checkpoints
from efold.controller.registration import REGISTRATION_NAME, Registration
from efold.controller.runroot import private_subdir
from efold.controller.slots import (
    Evidence,
    RunContext,
    refused_receipt,
    run_probe,
    write_slot_receipt,
)
from efold.controller.stops import StopPolicy
from efold.corpus.model import Availability, Probe, SuiteItem
from efold.digests import canonical_json, sha256_hex
from efold.errors import Code
from efold.folds.snapshot import RestoredCheckpoint
from efold.identity import current_identity
from efold.ipc.messages import BudgetGrant
from efold.protocol.records import Exclusion, Plan, PlannedSlot, Receipt
from efold.protocol.tasks import ProbeTask

# Pressure is required on long traces only (reference: "On long traces, each sample
# must also show the pressure its arm is designed to test").
_PRESSURE_SUITES = frozenset({"hard", "hard-distractors"})


@dataclass(frozen=True)
class PilotOutcome:
    run_dir: Path
    stop_code: Code | None
    receipts: list[Receipt]
    plan: Plan
    reports: dict[str, bytes]
    interrupted: int | None = None  # the signal that interrupted the run, if one did


def _publish(run: Path, name: str, data: bytes) -> None:
    from efold.registry import publish_exclusive

    publish_exclusive(run, name, data)


def _evidence(suite: str, restored: RestoredCheckpoint,
              probes: list[Probe]) -> dict[str, Evidence]:
    """Evaluator-side facts per probe for one checkpoint: availability (model-free) and
    the exclusions its fold receipt shows."""
    from efold.folds import probe_availability

    cp = restored.checkpoint
    receipt = cp.receipt
    excluded: Exclusion | None = None
    if not receipt.boundary.verified:
        excluded = Exclusion.BOUNDARY_UNVERIFIED
    elif suite in _PRESSURE_SUITES and not all(p.met for p in receipt.pressure):
        excluded = Exclusion.PRESSURE_UNVERIFIED
    elif cp.store is not None and (receipt.store is None or receipt.store.records == 0):
        excluded = Exclusion.STORE_DEGRADED
    store = restored.open_store()
    out: dict[str, Evidence] = {}
    try:
        for probe in probes:
            result = probe_availability(cp, probe, store=store)
            out[probe.id] = Evidence(Availability(result.availability.value), excluded,
                                     restored.manifest.content_digest)
    finally:
        if store is not None:
            store.close()
    return out


async def execute(reg: Registration, reg_bytes: bytes, run: Path, *,
                  progress: Progress | None = None,
                  program: tuple[str, ...] | None = None) -> PilotOutcome:
    from efold.controller.authorize_run import consume_faux
    from efold.corpus import load_suite
    from efold.digests import build_digest
    from efold.guard import pricer_for
    from efold.registry.journal import JournalWriter
    from efold.registry.lease import acquire_lease

    campaign = reg.campaign
    if campaign.reader.provider != "faux":
        # The paid route is refused before this point; never mint a faux authorization
        # for a real reader.
        raise ControllerError(Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE, "not a faux reader")
    plan = plan_for(reg)
    plan_bytes = canonical_json(plan) + b"\n"
    tick = progress or (lambda phase, done, total: None)
    with acquire_lease(run) as lease:
        journal = JournalWriter(run, lease)
        epoch = journal.record_epoch(current_identity())
        lease.set_epoch(epoch)
        # The consumption marker precedes every other file of the run and any launch.
        consume_faux(reg, reg_bytes, plan.schedule_sha256, lease, run_id=run.name)
        _publish(run, REGISTRATION_NAME, reg_bytes)
        _publish(run, PLAN_NAME, plan_bytes)

        items: dict[str, SuiteItem] = {
            i.trace.header.trace_id: i for i in load_suite(campaign.suite, campaign.seeds or None)
        }
        ctx = RunContext(
            run_dir=run, journal=journal, epoch=epoch, controller=lease.holder.identity(),
            registration_digest=sha256_hex(reg_bytes), plan_digest=sha256_hex(plan_bytes),
            build_digest=build_digest(),
            source=DurablePermitSource(
                journal, epoch=epoch, cap_units=reg.cap_units, rmax_units=reg.rmax_units,
                max_requests=campaign.budgets.max_requests,
                price=pricer_for(campaign.reader.provider, campaign.reader.model),
            ),
            policy=StopPolicy(),
            budgets=BudgetGrant(max_requests=campaign.budgets.max_requests,
                            meter_calls=campaign.budgets.lookup_calls,
                            meter_bytes=campaign.budgets.lookup_bytes),
            prep_seconds=campaign.deadlines.prep_seconds,
            probe_seconds=campaign.deadlines.probe_seconds,
            containment=ContainmentPolicy(term_grace=campaign.deadlines.grace_seconds),
            program=program,
        )

        async def body() -> tuple[list[Receipt], dict[str, bytes]]:
            preps, evidence = await _prepare(ctx, plan, items, reg, tick)
            receipts = await _probe_all(ctx, plan, items, preps, evidence, reg, tick)
            # -- aggregate ---------------------------------------------------------------
            reports = run_reports(read_run(run))
            for name, data in reports.items():
                _publish(run, name, data)
            return receipts, reports

        receipts, reports = await interruptible(ctx, body)
        stop = ctx.policy.stop_code or (
            Code.NOT_ADMITTED_CAP if ctx.source.cap_refused else None)
        journal.close()
    return PilotOutcome(run, stop, receipts, plan, reports, ctx.interrupted)


async def _prepare(ctx: RunContext, plan: Plan, items: dict[str, SuiteItem],
                   reg: Registration, tick: Progress
                   ) -> tuple[dict[str, Preparation], dict[tuple[str, str], Evidence]]:
    """One prep child per checkpoint an eligible slot uses, and the evaluator-side
    evidence (availability, exclusions) of every probe asked of a feasible one."""
    evidence: dict[tuple[str, str], Evidence] = {}

    def on_prepared(key: str, first: PlannedSlot, restored: RestoredCheckpoint) -> None:
        asked = {s.probe_id for s in plan.slots if s.checkpoint == key}
        # The plan's trace, never what the fold's data claims.
        wanted = [p for p in items[first.trace_id].probes.probes if p.id in asked]
        for pid, ev in _evidence(reg.campaign.suite, restored, wanted).items():
            evidence[(key, pid)] = ev

    preps = await prepare_checkpoints(ctx, plan, items, reg, eligible_only=True, tick=tick,
                                      on_prepared=on_prepared)
    return preps, evidence


async def _probe_all(ctx: RunContext, plan: Plan, items: dict[str, SuiteItem],
                     preps: dict[str, Preparation], evidence: dict[tuple[str, str], Evidence],
                     reg: Registration, tick: Progress) -> list[Receipt]:
    """One probe child per slot, in schedule order; a slot whose admission is already
    closed is visited without a launch. The stop policies run after every slot."""
    campaign, reader = reg.campaign, reg.campaign.reader
    run_deadline = time.monotonic() + campaign.deadlines.run_seconds
    cache_token = secrets.token_hex(6)  # cache keys: printable ASCII, unique per slot
    probes = {(t, p.id): p for t, i in items.items() for p in i.probes.probes}
    roles = {r.name: r for r in campaign.roles}
    private_subdir(ctx.run_dir, "slots")
    private_subdir(ctx.run_dir, "receipts")
    receipts: list[Receipt] = []
    for n, planned in enumerate(plan.slots):
        tick("probe", n, len(plan.slots))
        prepared = preps.get(planned.checkpoint)
        prep = prepared.result if prepared is not None else None
        refusal: Code | None = None
        if not planned.eligible or (prepared is not None and prepared.feasible is False):
            refusal = Code.INVENTORY_INFEASIBLE
        elif prep is not None and prep.snapshot is None:  # its checkpoint failed: why
            refusal = prep.code or Code.LOOKUP_PREPARATION_INVALID
        elif ctx.interrupted is not None:  # the operator ended the run
            refusal = Code.INTERRUPTED
        elif ctx.policy.stopped:  # admission is closed for the rest of the run
            refusal = Code.LOOKUP_STOPPED
        elif ctx.source.cap_refused:  # spend never falls: every later admit refuses
            refusal = Code.NOT_ADMITTED_CAP
        elif time.monotonic() > run_deadline:
            refusal = Code.RUN_DEADLINE
        elif prep is None:  # never prepared (admission closed during the preps)
            refusal = Code.LOOKUP_PREPARATION_INVALID
        if refusal is not None:
            receipt = refused_receipt(planned, refusal)
            write_slot_receipt(ctx, receipt)
            receipts.append(receipt)
            continue
        assert prep is not None and prep.snapshot is not None  # refused above otherwise
        probe = probes[(planned.trace_id, planned.probe_id)]
        task = ProbeTask(
            question=probe.question, instructions=roles[planned.role].instructions,
            provider=reader.provider, model=reader.model, api=reader.api,
            base_url=reader.base_url, effort=reader.effort,
        )
        done = await run_probe(
            ctx, planned=planned, probe=probe,
            slot_dir=private_subdir(ctx.run_dir, "slots", planned.slot),
            snapshot=prep.snapshot, cache_key=f"efold-{cache_token}-{n:06d}",
            task=task, evidence=evidence[(planned.checkpoint, planned.probe_id)],
        )
        receipts.append(done.receipt)
        if done.end is not None:
            code = ctx.policy.slot_admitted_end(done.end)
            if code in (Code.LOOKUP_REPEATED_LOSS, Code.INVALID_SLOT_RATE):
                ctx.record_stop(code, planned.slot)
    tick("probe", len(plan.slots), len(plan.slots))
    if ctx.source.cap_refused and ctx.policy.stop_code is None:
        ctx.journal.record_stop(epoch=ctx.epoch, code=Code.NOT_ADMITTED_CAP.value, slot=None,
                                sticky=False)
    return receipts


def run_pilot(reg: Registration, reg_bytes: bytes, run: Path, *,
              progress: Progress | None = None,
              program: tuple[str, ...] | None = None) -> PilotOutcome:
    """Synchronous entry: the async pilot on the trio backend."""
    previous = os.umask(0o077)  # everything the run writes is owner-only
    try:
        return anyio.run(
            lambda: execute(reg, reg_bytes, run, progress=progress, program=program),
            backend="trio",
        )
    finally:
        os.umask(previous)
