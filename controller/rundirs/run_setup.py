"""Opening a run: the setup ``pilot`` and ``preflight`` share, in one order.

``open_run`` does, each step complete before the next:
1. the plan (a pure function of the registration); an admitting run refuses a reader
   that is not faux (``lookup_pilot_real_route_unavailable``): the paid route is refused
   before this point, and a faux authorization is never minted for a real reader;
2. take the run lease (or run under the one the caller took as it claimed the
   directory: ``claimed``); open the journal; start epoch 1 (the lease carries it); the
   run's membership (``open_membership``): its cgroup, or process groups and why,
   journaled before any launch (``containment_unavailable`` where the campaign or a
   real run requires a cgroup and none can be made);
3. an admitting run consumes its authorization (faux: minted, burned in the faux
   registry, the pair verified): the consumption marker precedes every other file of
   the run and any launch;
4. the run context (``controller.rundirs.run_context``);
5. publish ``registration.json`` and ``plan.json``;
6. load the suite.

Leaving the block normally closes the journal, then releases the lease; an error or an
interruption that escapes it releases the lease and leaves the journal as it was.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from efold.boundary.case import Case
from efold.boundary.suite import case_item, cases_digest
from efold.controller.campaigns.campaign import (
    campaign_cases,
    campaign_items,
    prep_seconds,
    probe_seconds,
    route_kind,
)
from efold.controller.campaigns.judge_profile import judge_terms
from efold.controller.campaigns.plan import plan_for, smoke_cap_units, smoke_plan
from efold.controller.campaigns.profiles import caller_terms, route_of, watchdog_margin
from efold.controller.campaigns.registration import REGISTRATION_NAME, Registration
from efold.controller.campaigns.shards import ShardTicket, shard_plan
from efold.controller.campaigns.stops import StopPolicy
from efold.controller.errors import ControllerError
from efold.controller.processes.cgroup_mount import NoCgroup2, find_cgroup2
from efold.controller.processes.containment import ContainmentPolicy
from efold.controller.processes.launcher import DEFAULT_PROGRAM
from efold.controller.processes.run_cgroups import (
    CGROUP,
    PROCESS_GROUP,
    RunCgroups,
    membership_line,
    run_token,
)
from efold.controller.processes.template import Launcher, running_template
from efold.controller.processes.template_spawn import EarlyTemplate
from efold.controller.rundirs import authorize_run
from efold.controller.rundirs.aggregate import PLAN_NAME
from efold.controller.rundirs.authorize_run import RealGrant
from efold.controller.rundirs.chain import CONTINUED_BY, CONTINUES, mark_continued
from efold.controller.rundirs.permits import DurablePermitSource
from efold.controller.rundirs.run_context import (
    ANSWERS_NAME,
    JudgeRoute,
    RunContext,
    SummariserRoute,
)
from efold.corpus import corpus_digest
from efold.corpus.model import SuiteItem
from efold.digests import canonical_json, digest_of, sha256_hex
from efold.errors import Code, EfoldError
from efold.identity import current_identity
from efold.ipc.messages import BudgetGrant
from efold.protocol.records import ChainLink, Plan
from efold.protocol.tasks import RouteKind
from efold.registry import publish_exclusive
from efold.registry.authorization import AuthorizationDomain, verify_authorization
from efold.registry.burn import real_registry_root, registry_key
from efold.registry.files import fsync_dir
from efold.registry.journal import JournalReader, JournalWriter
from efold.registry.lease import Lease, acquire_lease


@dataclass(frozen=True)
class OpenRun:
    ctx: RunContext
    plan: Plan
    items: dict[str, SuiteItem]  # the registered suite and cases, by trace id
    cases: dict[str, Case]  # the registered boundary cases, by their item's trace id


@asynccontextmanager
async def open_run(reg: Registration, reg_bytes: bytes, run: Path, *, admitting: bool,
                   program: Sequence[str] | None = None, grant: RealGrant | None = None,
                   smoke: bool = False, keep_answers: bool = False,
                   launcher: Launcher = "template",
                   shard: ShardTicket | None = None,
                   process_group_ok: bool = False,
                   part: Plan | None = None,
                   continued: Lease | None = None, claimed: Lease | None = None,
                   early: EarlyTemplate | None = None) -> AsyncIterator[OpenRun]:
    """Open the claimed run directory ``run`` for one registration (see the module
    docstring for the order).

    ``admitting`` (``pilot``): the permit source admits the campaign's requests under
    its cap and budgets, the faux authorization is consumed first, and containment
    waits the campaign's grace. Not admitting (``preflight``): a zero cap refuses any
    request that could appear, no authorization is consumed, and containment keeps the
    launcher's default policy. ``program``: the child command line (None: the
    launcher's default). ``grant``: a real run's (``authorize_run.load_grant``): its
    authorization is consumed instead of a faux one, and its credentials go to the
    children that send. ``smoke``: the configured-process smoke (``plan.smoke_plan``)
    under its own cap. ``keep_answers``: the reader's answers are kept in the run's
    owner-only ``answers.jsonl``. ``launcher``: ``template`` forks the run's children from
    a fork-server template started here (the same program, ``controller.processes.template``),
    contained when the block ends; ``spawn`` starts each child as its own program.
    ``shard``: one shard of a cluster run (``controller.campaigns.shards``): the plan narrowed to
    the shard's checkpoints under the shard's part of the cap, and the shard's authorization
    consumed instead of a faux or real one (a real shard's ``grant`` carries only the
    credentials its node's environment holds). ``process_group_ok``: the operator's
    ``--process-group-containment``: a real run may fall back to process-group
    containment where no cgroup can be made (without it, it refuses:
    ``containment_unavailable``; the choice is journaled and reported). ``part``: the
    plan of a continuation or of a chosen part (``controller.rundirs.continuation``):
    its slots and cap instead of the registration's, its authorization bound to them; a
    continuation names itself in the run it continues (``chain.mark_continued``, under
    that run's lease) once its own plan is published, before any child starts.
    ``continued``: that run's lease, when the caller took it before claiming ``run`` (so
    that no other continuation can link first): used for the link, then released.
    ``claimed``: the run's own lease, when the caller took it as it claimed ``run``
    (the run runs under it, and it is released as one taken here would be).
    ``early``: a template the command started as it began (``template_spawn.EarlyTemplate``):
    the run's template if it fits, else discarded; the caller discards it too on every
    path out (a no-op once taken)."""
    campaign = reg.campaign
    if admitting:
        _check_route(reg, grant)
    plan, cap = _plan_and_cap(reg, smoke=smoke)
    if shard is not None:
        if smoke or not admitting or route_of_grant(grant) != shard.route:
            raise ValueError("a shard admits on its ticket's route, and is never a smoke")
        cap = shard.spec.cap_units
        plan = shard_plan(plan, shard.spec.mark, shard.spec.checkpoints, cap)
    if part is not None:
        if smoke or shard is not None or part.registration_sha256 != sha256_hex(reg_bytes):
            raise ValueError("a part is the registration's own plan, never a smoke's or "
                             "a shard's")
        plan, cap = part, part.cap_units
    plan_bytes = canonical_json(plan) + b"\n"
    with claimed if claimed is not None else acquire_lease(run) as lease:
        journal = JournalWriter(run, lease)
        epoch = journal.record_epoch(current_identity())
        lease.set_epoch(epoch)
        cgroups = open_membership(journal, campaign.containment,
                                  real=paid(grant), process_group_ok=process_group_ok)
        try:
            if admitting:
                # Through its module, so that whatever ``consume_*`` is at this moment runs.
                if shard is not None:
                    authorize_run.consume_shard(reg, reg_bytes, plan.schedule_sha256, lease,
                                                run_id=run.name, ticket=shard)
                elif grant is not None and grant.local:
                    authorize_run.consume_faux(reg, reg_bytes, plan.schedule_sha256, lease,
                                               run_id=run.name, cap_units=cap,
                                               domain=AuthorizationDomain.LOCAL)
                elif grant is not None:
                    authorize_run.consume_real(reg, reg_bytes, plan.schedule_sha256, lease,
                                               run_id=run.name, grant=grant, cap_units=cap)
                else:
                    authorize_run.consume_faux(reg, reg_bytes, plan.schedule_sha256, lease,
                                               run_id=run.name, cap_units=cap)
                terms = caller_terms(campaign.reader, campaign.budgets.max_requests)
                source = DurablePermitSource(
                    journal, epoch=epoch, cap_units=cap, rmax_units=terms.rmax_units,
                    max_requests=terms.max_requests, price=terms.price,
                    input_envelope=terms.input_envelope)
                budgets = BudgetGrant(max_requests=campaign.budgets.max_requests,
                                      meter_calls=campaign.budgets.lookup_calls,
                                      meter_bytes=campaign.budgets.lookup_bytes)
                containment = ContainmentPolicy(term_grace=campaign.deadlines.grace_seconds)
            else:
                source = DurablePermitSource(journal, epoch=epoch, cap_units=0, rmax_units=1,
                                             max_requests=1, price=lambda usage, tier: 0)
                budgets = BudgetGrant(max_requests=0, meter_calls=0, meter_bytes=0)
                containment = ContainmentPolicy()
            ctx = RunContext(
                run_dir=run, journal=journal, epoch=epoch, controller=lease.holder.identity(),
                registration_digest=sha256_hex(reg_bytes), plan_digest=sha256_hex(plan_bytes),
                # The registration's build, checked against the installed files when it
                # was loaded or computed: each worker runs only that code (its template's
                # pinned digest, or its own from disk, must equal it), never a build
                # edited since, and the tree is not hashed a second time here.
                build_digest=reg.digests.build, source=source, policy=StopPolicy(),
                budgets=budgets,
                prep_seconds=prep_seconds(campaign), probe_seconds=probe_seconds(campaign),
                containment=containment,
                program=DEFAULT_PROGRAM if program is None else program, cgroups=cgroups,
                # Only an admitting run sends: preflight's children never get a summariser route
                # (its cap is zero) or a credential.
                **(_real_route(reg, grant, run if keep_answers else None) if admitting else {}),
            )
            publish_exclusive(run, REGISTRATION_NAME, reg_bytes)
            publish_exclusive(run, PLAN_NAME, plan_bytes)
            if plan.link is not None:
                link_continuation(plan.link, run, journal, held=continued)
            cases = campaign_cases(campaign)
            items = {i.trace.header.trace_id: i for i in campaign_items(campaign, cases)}
            if cases and digest_of([corpus_digest(list(items.values())), cases_digest(cases)]) \
                    != reg.digests.corpus:
                raise ControllerError(Code.REGISTRATION_DIGEST_MISMATCH,
                                      "a boundary case changed since registration")
            async with _children_from(ctx, launcher, route_kind(campaign), early):
                yield OpenRun(ctx, plan, items,
                              {case_item(c).trace.header.trace_id: c for c in cases})
        finally:
            # Under the lease, however the run ended: the names published without their
            # own directory fsync (receipts, slot directories) are made durable, the
            # deferred rows (exit rows, settlements) committed, then the writer closed.
            # The probe phase's end did both already where it ended normally (and
            # raised there on failure); this is the backstop of every other end.
            _names_durable(run)
            journal.close()
            cgroups.close()  # the run's cgroup, if it is empty (what lives stays, seen)


def _names_durable(run: Path) -> None:
    for name in ("receipts", "slots"):
        with contextlib.suppress(EfoldError, OSError):  # absent, or the run is failing
            fsync_dir(run / name)


def link_continuation(link: ChainLink, run: Path, journal: JournalWriter, *,
                      held: Lease | None = None) -> None:
    """Under the continued run's lease (``held``, else taken here, and released either
    way): refuse a run continued meanwhile (``run_already_continued``) or changed since
    the continuation was planned (``chain_invalid``: its journal's digest moved, so the
    plan may be wrong), then name ``run`` as its continuation there; and record the link
    in ``run``'s own journal."""
    previous = Path(link.previous)
    with held or acquire_lease(previous) as lease:
        with JournalReader(previous) as reader:
            if reader.meta(CONTINUED_BY) is None and reader.digest() \
                    != link.previous_journal_sha256:
                raise ControllerError(Code.CHAIN_INVALID,
                                      f"{previous} changed since this continuation was "
                                      "planned: plan it again")
        mark_continued(previous, lease, run)
    journal.record_meta({CONTINUES: msgspec.json.encode(link).decode()})


def route_of_grant(grant: RealGrant | None) -> RouteKind:
    """The route a run with ``grant`` dispatches on."""
    return "faux" if grant is None else "local" if grant.local else "real"


def paid(grant: RealGrant | None) -> bool:
    """Whether a run with ``grant`` can move money: a real route's, never a faux or a
    local one."""
    return grant is not None and not grant.local


def _check_route(reg: Registration, grant: RealGrant | None) -> None:
    """``lookup_pilot_real_route_unavailable`` unless ``grant`` fits the registration's
    route (``campaign.route_kind``): none for a faux campaign, the local grant for a
    local one (or an operator's: the paid route's ceremony may take a local model, as
    the model-server tests prove it on one), an operator's for a real one."""
    kind, given = route_kind(reg.campaign), route_of_grant(grant)
    if kind != given and (kind, given) != ("local", "real"):
        how = {"faux": "--faux", "local": "--local", "real": "--real with its authorization"}
        raise ControllerError(Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE,
                              f"this campaign's route is {kind}: run it with {how[kind]}")


def open_membership(journal: JournalWriter, wanted: str | None, *, real: bool,
                    process_group_ok: bool) -> RunCgroups:
    """The run's membership (``run_cgroups.RunCgroups``), journaled before any launch:
    cgroup v2 where a writable hierarchy exists, unless the campaign chose process
    groups. Refused (``containment_unavailable``, nothing launched) where the campaign
    requires cgroups, or a real run has none and its operator did not pass
    ``--process-group-containment``."""
    cgroups = RunCgroups.open(use_cgroups=wanted != PROCESS_GROUP, token=run_token(journal))
    try:
        refusal = containment_refusal(wanted, cgroups.mode, cgroups.detail, real=real,
                                      process_group_ok=process_group_ok)
        if refusal is not None:
            raise refusal
        cgroups.journal(journal, operator_allowed=process_group_ok)
    except BaseException:
        cgroups.close()
        raise
    return cgroups


def containment_refusal(wanted: str | None, mode: str, detail: str, *, real: bool,
                        process_group_ok: bool) -> ControllerError | None:
    """Why a run may not start in ``mode`` (``containment_unavailable``), or None."""
    if mode == CGROUP:
        return None
    if wanted == CGROUP:
        return ControllerError(Code.CONTAINMENT_UNAVAILABLE,
                               f"the campaign requires cgroup containment: {detail}")
    if real and not process_group_ok:
        return ControllerError(Code.CONTAINMENT_UNAVAILABLE,
                               f"a real run needs cgroup containment ({detail}); "
                               "--process-group-containment runs it without")
    return None


def check_containment(reg: Registration, *, real: bool = False,
                      process_group_ok: bool = False) -> str:
    """Before a run claims its directory: the refusal ``open_membership`` would give
    here (so a corrected retry, a real run's directory being bound by its
    authorization, is not ``run_root_exists``), else the line to show at run open
    (``membership_line``). The run's own status and report carry what it then got."""
    wanted = reg.campaign.containment
    found = find_cgroup2() if wanted != PROCESS_GROUP \
        else NoCgroup2("process-group containment chosen by the campaign")
    detail = found.reason if isinstance(found, NoCgroup2) else found.own
    refusal = containment_refusal(wanted, found.mode, detail, real=real,
                                  process_group_ok=process_group_ok)
    if refusal is not None:
        raise refusal
    return membership_line(found.mode, detail)


def _plan_and_cap(reg: Registration, *, smoke: bool) -> tuple[Plan, int]:
    """The run's plan and cap: the registration's, or the smoke's (one slot per role
    under its own cap)."""
    plan = plan_for(reg)
    if not smoke:
        return plan, reg.cap_units
    cap = smoke_cap_units(reg)
    return smoke_plan(plan, cap), cap


def check_real_grant(reg: Registration, reg_bytes: bytes, run_dir: Path, grant: RealGrant,
                     *, smoke: bool = False, part: Plan | None = None) -> None:
    """Before a real run (``pilot --real``, ``smoke``) claims ``run_dir``: the refusals
    its consumption (``authorize_run.consume_real``, under the lease, step 3 of
    ``open_run``) would give on this authorization, in its order, with nothing written:
    the signature, domain and validity window, every binding (this registration, plan,
    cap and run directory), the account, and an id already burned
    (``authorization_consumed``). A refusal here leaves no run directory behind, so the
    corrected retry is not ``run_root_exists``. The consumption still checks it all
    again, under the lease, and is what burns it."""
    plan, cap = _plan_and_cap(reg, smoke=smoke) if part is None else (part, part.cap_units)
    expected = authorize_run.run_bindings(
        reg, reg_bytes, plan.schedule_sha256, run_dir, authorize_run.credential_binding(reg),
        cap_units=cap)
    verified = verify_authorization(grant.artifact, domain=AuthorizationDomain.REAL,
                                    trusted_keys=grant.trusted_keys, expected=expected,
                                    account_id=grant.account_id)
    entry = os.path.join(real_registry_root(),
                         registry_key(AuthorizationDomain.REAL, verified.authorization_id))
    if os.path.lexists(entry):
        raise ControllerError(Code.AUTHORIZATION_CONSUMED, "authorization id already used")


@asynccontextmanager
async def _children_from(ctx: RunContext, launcher: Launcher, routes: RouteKind,
                         early: EarlyTemplate | None) -> AsyncIterator[None]:
    """The block with the run's launcher set: a running template (``ctx.template``:
    ``early`` if it fits), preloading what ``routes`` need, contained and journaled at
    the end, or none (``spawn``)."""
    if launcher == "spawn":
        if early is not None:
            early.discard()
        yield
        return
    async with running_template(ctx.journal, ctx.epoch, program=ctx.program,
                                policy=ctx.containment, cgroups=ctx.cgroups,
                                routes=routes, early=early) as template:
        ctx.template = template
        try:
            yield
        finally:
            ctx.template = None


def _real_route(reg: Registration, grant: RealGrant | None,
                answers_in: Path | None) -> dict[str, Any]:
    """The run context's real-route fields: the reader's credential, the summariser's
    route (its terms and credential), the real routes' watchdog margins, and where kept
    answers go. Offline: the summariser may still be a model (its own route), the
    reader is faux."""
    campaign = reg.campaign
    summariser = None
    if campaign.summariser is not None:
        p = campaign.summariser
        summariser = SummariserRoute(route_of(p), caller_terms(p, p.max_requests),
                                     grant.credential(p) if grant is not None else None)
    return {
        "reader_credential": grant.credential(campaign.reader) if grant is not None else None,
        "summariser": summariser,
        "judge": None if campaign.judge is None else JudgeRoute(
            judge_terms(campaign.judge), tuple(campaign.judge.rubric),
            campaign.judge.pass_threshold),
        "probe_margin": watchdog_margin(campaign.reader),
        "prep_margin": watchdog_margin(campaign.summariser),
        "answers_file": answers_in / ANSWERS_NAME if answers_in is not None else None,
    }
