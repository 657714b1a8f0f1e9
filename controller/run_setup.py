"""Opening a run: the setup ``pilot`` and ``preflight`` share, in one order.

``open_run`` does, each step complete before the next:
1. the plan (a pure function of the registration); an admitting run refuses a reader
   that is not faux (``lookup_pilot_real_route_unavailable``): the paid route is refused
   before this point, and a faux authorization is never minted for a real reader;
2. take the run lease; open the journal; start epoch 1 (the lease carries it);
3. an admitting run consumes its authorization (faux: minted, burned in the faux
   registry, the pair verified): the consumption marker precedes every other file of
   the run and any launch;
4. the run context (``controller.run_context``);
5. publish ``registration.json`` and ``plan.json``;
6. load the suite.

Leaving the block normally closes the journal, then releases the lease; an error or an
interruption that escapes it releases the lease and leaves the journal as it was.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from efold.controller import authorize_run
from efold.controller.aggregate import PLAN_NAME
from efold.controller.containment import ContainmentPolicy
from efold.controller.errors import ControllerError
from efold.controller.launcher import DEFAULT_PROGRAM
from efold.controller.permits import DurablePermitSource
from efold.controller.plan import plan_for
from efold.controller.registration import REGISTRATION_NAME, Registration
from efold.controller.run_context import RunContext
from efold.controller.stops import StopPolicy
from efold.corpus import load_suite
from efold.corpus.model import SuiteItem
from efold.digests import build_digest, canonical_json, sha256_hex
from efold.errors import Code
from efold.guard import pricer_for
from efold.identity import current_identity
from efold.ipc.messages import BudgetGrant
from efold.protocol.records import Plan
from efold.registry import publish_exclusive
from efold.registry.journal import JournalWriter
from efold.registry.lease import acquire_lease


@dataclass(frozen=True)
class OpenRun:
    ctx: RunContext
    plan: Plan
    items: dict[str, SuiteItem]  # the registered suite, by trace id


@asynccontextmanager
async def open_run(reg: Registration, reg_bytes: bytes, run: Path, *, admitting: bool,
                   program: Sequence[str] | None = None) -> AsyncIterator[OpenRun]:
    """Open the claimed run directory ``run`` for one registration (see the module
    docstring for the order).

    ``admitting`` (``pilot``): the permit source admits the campaign's requests under
    its cap and budgets, the faux authorization is consumed first, and containment
    waits the campaign's grace. Not admitting (``preflight``): a zero cap refuses any
    request that could appear, no authorization is consumed, and containment keeps the
    launcher's default policy. ``program``: the child command line (None: the
    launcher's default)."""
    campaign = reg.campaign
    if admitting and campaign.reader.provider != "faux":
        raise ControllerError(Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE, "not a faux reader")
    plan = plan_for(reg)
    plan_bytes = canonical_json(plan) + b"\n"
    with acquire_lease(run) as lease:
        journal = JournalWriter(run, lease)
        epoch = journal.record_epoch(current_identity())
        lease.set_epoch(epoch)
        if admitting:
            # Through its module, so that whatever ``consume_faux`` is at this moment runs.
            authorize_run.consume_faux(reg, reg_bytes, plan.schedule_sha256, lease,
                                       run_id=run.name)
            source = DurablePermitSource(
                journal, epoch=epoch, cap_units=reg.cap_units, rmax_units=reg.rmax_units,
                max_requests=campaign.budgets.max_requests,
                price=pricer_for(campaign.reader.provider, campaign.reader.model))
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
            build_digest=build_digest(), source=source, policy=StopPolicy(), budgets=budgets,
            prep_seconds=campaign.deadlines.prep_seconds,
            probe_seconds=campaign.deadlines.probe_seconds, containment=containment,
            program=DEFAULT_PROGRAM if program is None else program,
        )
        publish_exclusive(run, REGISTRATION_NAME, reg_bytes)
        publish_exclusive(run, PLAN_NAME, plan_bytes)
        items = {i.trace.header.trace_id: i
                 for i in load_suite(campaign.suite, campaign.seeds or None)}
        yield OpenRun(ctx, plan, items)
        journal.close()
