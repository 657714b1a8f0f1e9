"""What a continuation of a run would run, and with what money: read-only.

A continuation is a *new* run linked to an old one, never the old one reopened
(``controller.rundirs.chain``): the old run's registration, and of its registration's
plan exactly the slots no link of its chain has a terminal receipt for, in the schedule
order. This module works out that remainder (``plan_continuation``) and the plan a
continuation or a chosen part runs (``part_plan``), and refuses what must not be
continued:

* a run whose lease a controller (or ``reap``) holds: ``lease_held``;
* a run that already has a continuation: ``run_already_continued`` (a chain has no
  branches: continue its last link);
* a run that ``recover`` would not call reconciled (a process of it may be alive, a
  launch is unsettled, a receipt copy is missing that its journal can restore: ``reap``
  settles all three), or an earlier link of its chain with such a copy:
  ``run_unreconciled``;
* a remainder the cap can no longer pay for: ``cap_below_rmax``, when what is left of the
  registration's cap after everything the chain settled and retained is below Rmax.

Terminal receipts (never run again; a terminal receipt a journal recorded whose file is
gone since counts too: running it again would pay twice): ``completed`` (excluded ones
included: they ran and were scored as excluded), ``invalid`` (the model answered,
invalidly: running it again would pay twice for the same question) and ``skipped``
(inventory-infeasible: it would be skipped again). Not terminal: ``unadmitted`` and
``incomplete`` receipts (refused before a hold, or lost, aborted or capacity-refused
after one), the slots a crashed controller left in flight, and slots with no receipt.

Money: retained holds stay retained. A lost request's hold is never assumed refunded,
and a hold a crashed controller left open (reconciled: nothing alive can settle it now)
counts as retained at its full amount, as the aggregate counts it. So the remaining cap
is ``cap - settled - retained`` over every link of the chain,
every caller's (reader, summariser, judge), as the journals hold them, never the
receipts. Each link's cap is what its chain had left when it began, so no link, and no
chain, ever spends more than the registration's cap.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import msgspec

from efold.controller.campaigns.plan import plan_for
from efold.controller.campaigns.registration import (
    REGISTRATION_NAME,
    LoadedRegistration,
    load_registration,
)
from efold.controller.errors import ControllerError
from efold.controller.rundirs.aggregate import PLAN_NAME, journal_money, run_records
from efold.controller.rundirs.chain import TERMINAL, chain_links, continued_by, read_chain
from efold.controller.rundirs.cluster_run import is_cluster_run
from efold.controller.rundirs.receipt_copies import lost_copies
from efold.controller.rundirs.recovery import named, observe
from efold.controller.rundirs.suggest import suggest
from efold.errors import Code
from efold.protocol.records import ChainLink, Plan, schedule_digest
from efold.registry.journal import JOURNAL_NAME, JournalReader
from efold.registry.lease import LeaseState, probe_lease
from efold.report import MoneyFact

__all__ = ["TERMINAL", "ChosenRun", "ContinuationPlan", "choose_part", "choose_run",
           "part_plan", "plan_continuation", "refuse_no_run"]


class ContinuationPlan(msgspec.Struct, frozen=True):
    """The remainder of ``run``'s chain and the money it may spend (integer units).

    Invariant: ``remaining_cap_units == cap_units - settled_units - retained_units``,
    ``remaining_cap_units >= rmax_units``, and ``remaining`` lists exactly the planned
    slots no link has a terminal receipt for, in the schedule order."""

    run: str
    registration_sha256: str
    links: int  # the chain's links so far (``run`` is the last)
    planned: int  # the registration's whole plan
    terminal: int
    remaining: list[str]
    cap_units: int
    settled_units: int
    retained_units: int
    remaining_cap_units: int
    rmax_units: int
    faux: bool  # the registered reader is faux: its money is faux units
    link: ChainLink  # what the continuation's plan will carry


def plan_continuation(run_dir: str | os.PathLike[str], *,
                      holding: bool = False) -> ContinuationPlan:
    """The continuation plan of ``run_dir``, or a refusal (``ControllerError``).
    ``holding``: the caller holds ``run_dir``'s lease (``pilot --continue``, linking)."""
    run = Path(os.path.abspath(run_dir))
    refuse_no_run(run)
    if not holding and probe_lease(run).state is LeaseState.LIVE:
        raise ControllerError(Code.LEASE_HELD,
                              f"{run}: a controller (or reap) holds its lease: let it end, "
                              "then continue it")
    if is_cluster_run(run):
        raise ControllerError(Code.CHAIN_INVALID,
                              f"{run} is a cluster run: its slots ran in its shards' own "
                              "runs, and continuing one is not supported at this revision")
    if not (run / PLAN_NAME).is_file():
        raise ControllerError(Code.RUN_RECORDS_INVALID,
                              f"{run} has no {PLAN_NAME}: its controller ended before it "
                              "planned anything, so there is nothing to continue")
    after = continued_by(run)
    if after is not None:
        raise ControllerError(Code.RUN_ALREADY_CONTINUED,
                              f"{run} is already continued by {after}: continue the "
                              "chain's last link")
    report = observe(run, lease_ours=holding)
    if not report.reconciled:
        raise ControllerError(Code.RUN_UNRECONCILED,
                              f"{run}: {named(report.verdict, run)}")
    links = chain_links(run)
    _, registration = run_records(run)
    plan = plan_for(registration)
    view = read_chain(links)  # refuses a receipt that fails its checks: nothing guessed
    moneys = []
    # A slot whose terminal receipt a journal recorded is done even if the file is gone
    # since (the aggregate shows that as damage): running it again would pay twice.
    finished = {r.slot for r in view.receipts if r.status in TERMINAL}
    for link in links:
        with JournalReader(link) as journal:
            moneys.append(journal_money(journal.rows("holds")))
            if link != run:  # ``run``'s own were checked with its processes, above
                _refuse_lost_copies(link, journal.rows("receipts"))
            finished.update(row["slot"] for row in journal.rows("slot_status")
                            if row["status"] in TERMINAL
                            and row["slot"] in view.journaled_missing)
    # Every link is reconciled (the earlier ones were when they were continued): an
    # open hold is a crashed controller's, and nothing alive can settle it now.
    money = MoneyFact(settled_units=sum(m.settled_units for m in moneys),
                      retained_units=sum(m.retained_units + m.open_units for m in moneys),
                      open_units=0)
    remaining = [s.slot for s in plan.slots if s.slot not in finished]
    if not remaining:
        raise ControllerError(Code.NOTHING_TO_CONTINUE,
                              f"{run}: every slot of its plan has a terminal receipt in "
                              f"its chain of {len(links)}")
    left = registration.cap_units - money.settled_units - money.retained_units
    if left < registration.rmax_units:
        raise ControllerError(Code.CAP_BELOW_RMAX,
                              f"{run}: {left} units of the cap are left after what its "
                              f"chain settled and retained, below Rmax "
                              f"({registration.rmax_units} units): a continuation could "
                              "not admit one request")
    with JournalReader(run) as journal:
        digest = journal.digest()
    return ContinuationPlan(
        run=str(run), registration_sha256=plan.registration_sha256, links=len(links),
        planned=len(plan.slots), terminal=len(plan.slots) - len(remaining),
        remaining=remaining, cap_units=registration.cap_units,
        settled_units=money.settled_units, retained_units=money.retained_units,
        remaining_cap_units=left, rmax_units=registration.rmax_units,
        faux=registration.campaign.reader.is_faux,
        link=ChainLink(index=len(links) + 1, previous=str(run),
                       previous_journal_sha256=digest),
    )


def _refuse_lost_copies(link: Path, receipt_rows: list[dict[str, Any]]) -> None:
    """``run_unreconciled`` while an earlier link of the chain has a receipt copy missing
    that its journal can restore: the chain's reports would read damaged."""
    lost = lost_copies(link, receipt_rows)
    if lost:
        raise ControllerError(Code.RUN_UNRECONCILED,
                              f"{link} (an earlier link of the chain): {len(lost)} receipt "
                              "copy(ies) missing, restorable from the journal; "
                              f"`{suggest('reap', link)}` first")


def refuse_no_run(run: Path) -> None:
    """``run_records_invalid`` unless ``run`` is a run directory (its journal), before
    anything (a lease included) is made in it."""
    if not (run / JOURNAL_NAME).is_file():
        raise ControllerError(Code.RUN_RECORDS_INVALID,
                              f"{run} is not a run directory (no {JOURNAL_NAME}): nothing "
                              "to continue")


_SLOTS = re.compile(r"([0-9]{1,9}):([0-9]{1,9})")
_CHUNK = re.compile(r"([0-9]{1,6})/([0-9]{1,6})")


def choose_part(plan: Plan, *, slots: str | None = None,
                chunk: str | None = None) -> tuple[str, set[str]] | None:
    """A part of the registration's whole ``plan`` chosen on purpose, as its name
    (``slots A:B``, ``chunk K/N``) and its slot ids, or None when none was chosen.

    ``slots`` ``A:B``: the schedule positions A to B-1, counted from 0 (a Python slice).
    ``chunk`` ``K/N``: the K-th of N groups of traces, in the order the schedule first
    asks of them, each group's size differing by at most one: whole traces, so a chunk
    prepares every checkpoint it needs and no other chunk needs it. ``ValueError`` for a
    part that is empty or malformed (the command says which option)."""
    if slots is not None:
        found = _SLOTS.fullmatch(slots)
        if found is None:
            raise ValueError("--slots A:B takes two schedule positions, from 0")
        start, stop = int(found[1]), int(found[2])
        if not 0 <= start < stop <= len(plan.slots):
            raise ValueError(f"--slots {slots}: the schedule has positions 0 to "
                             f"{len(plan.slots) - 1}; give A < B <= {len(plan.slots)}")
        return f"slots {start}:{stop}", {s.slot for s in plan.slots[start:stop]}
    if chunk is not None:
        found = _CHUNK.fullmatch(chunk)
        traces = list(dict.fromkeys(s.trace_id for s in plan.slots))
        if found is None or not 1 <= int(found[1]) <= int(found[2]) <= len(traces):
            raise ValueError(f"--chunk K/N takes 1 <= K <= N <= {len(traces)} (the plan's "
                             "traces)")
        k, n = int(found[1]), int(found[2])
        size, extra = divmod(len(traces), n)
        begin = (k - 1) * size + min(k - 1, extra)
        mine = set(traces[begin:begin + size + (1 if k <= extra else 0)])
        return f"chunk {k}/{n}", {s.slot for s in plan.slots if s.trace_id in mine}
    return None


def part_plan(whole: Plan, keep: Collection[str], *, cap_units: int,
              link: ChainLink | None = None, part: str | None = None) -> Plan:
    """``whole`` (the registration's plan) narrowed to the slots in ``keep`` (schedule
    order kept) and to their roles (campaign order kept), under ``cap_units``, marked
    with its ``link`` and ``part`` (its schedule digest covers both)."""
    kept = set(keep)
    slots = [s for s in whole.slots if s.slot in kept]
    roles = {s.role for s in slots}
    return msgspec.structs.replace(
        whole, slots=slots, cap_units=cap_units, link=link, part=part,
        roles=[r for r in whole.roles if r in roles],
        schedule_sha256=schedule_digest([s.slot for s in slots], link=link, part=part))


class ChosenRun(msgspec.Struct, frozen=True):
    """What a run given ``--continue`` or a part is to run: the verified registration
    (``continue_run``'s own, re-derived as ``load_registration`` does) and its plan, or
    None for the registration's whole plan."""

    loaded: LoadedRegistration
    part: Plan | None


def choose_run(loaded: LoadedRegistration | None, *, continue_run: str | None,
               slots: str | None, chunk: str | None, holding: bool = False) -> ChosenRun:
    """The registration and plan of ``pilot`` (and ``authorize``) given ``--continue
    RUN`` (``loaded`` None: RUN's registration), ``--slots A:B`` or ``--chunk K/N``: a
    continuation runs its chain's remainder (of the chosen part, if one is), under the
    cap its chain has left; a first part, its part under the registration's cap.
    ``holding``: the caller holds RUN's lease (``plan_continuation``).
    ``ValueError`` for a malformed or empty part; refusals as ``plan_continuation``."""
    if continue_run is None:
        if loaded is None:
            raise ValueError("no registration and no run to continue")
        whole = plan_for(loaded.registration)
        chosen = choose_part(whole, slots=slots, chunk=chunk)
        if chosen is None:
            return ChosenRun(loaded, None)
        return ChosenRun(loaded, part_plan(whole, chosen[1], part=chosen[0],
                                           cap_units=loaded.registration.cap_units))
    cont = plan_continuation(continue_run, holding=holding)
    run = Path(cont.run)
    loaded = load_registration(run / REGISTRATION_NAME, cont.registration_sha256)
    whole = plan_for(loaded.registration)
    keep = set(cont.remaining)
    chosen = choose_part(whole, slots=slots, chunk=chunk)
    name: str | None = None
    if chosen is not None:
        name, ids = chosen
        keep &= ids
        if not keep:
            raise ControllerError(Code.NOTHING_TO_CONTINUE,
                                  f"{run}: every slot of {name} already has a terminal "
                                  "receipt in its chain")
    return ChosenRun(loaded, part_plan(whole, keep, cap_units=cont.remaining_cap_units,
                                       link=cont.link, part=name))
