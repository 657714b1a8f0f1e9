"""What a continuation of a run would run, and with what money: read-only.

A continuation is a *new* run linked to an old one, never the old one reopened: the old
run's registration, and of its plan exactly the slots without a terminal receipt, in the
old schedule order. This module works out that remainder and the cap it may spend,
from the old run's records alone, and refuses what must not be continued:

* a run whose lease a controller (or ``reap``) holds: ``lease_held``;
* a run that ``recover`` would not call reconciled (a process of it may be alive, a
  launch is unsettled): ``run_unreconciled``;
* a run whose journal still holds an open hold (money nobody has settled or retained):
  ``run_unreconciled`` too;
* a remainder the cap can no longer pay for: ``cap_below_rmax``, when what is left of the
  registration's cap after everything the run settled and retained is below Rmax.

Terminal receipts (never run again; a terminal receipt the journal recorded whose file
is gone since counts too: running it again would pay twice): ``completed`` (excluded ones included: they ran and
were scored as excluded), ``invalid`` (the model answered, invalidly: running it again
would pay twice for the same question) and ``skipped`` (inventory-infeasible: it would
be skipped again). Not terminal: ``unadmitted`` and ``incomplete`` receipts (refused
before a hold, or lost, aborted or capacity-refused after one), the slots a crashed
controller left in flight, and slots with no receipt at all.

Money: retained holds stay retained. A lost request's hold is never assumed refunded,
so the remaining cap is ``cap - settled - retained``, every caller's (reader,
summariser, judge), as the journal holds them, never the receipts.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from efold.controller.errors import ControllerError
from efold.controller.rundirs.aggregate import journal_money, read_run, run_records
from efold.controller.rundirs.recovery import observe
from efold.errors import Code
from efold.protocol.records import SlotStatus
from efold.registry.journal import JournalReader
from efold.registry.lease import LeaseState, probe_lease

__all__ = ["TERMINAL", "ContinuationPlan", "plan_continuation"]

TERMINAL = frozenset({SlotStatus.COMPLETED, SlotStatus.INVALID, SlotStatus.SKIPPED})


class ContinuationPlan(msgspec.Struct, frozen=True):
    """The remainder of ``run`` and the money it may spend (integer units).

    Invariant: ``remaining_cap_units == cap_units - settled_units - retained_units``,
    ``remaining_cap_units >= rmax_units``, and ``remaining`` lists exactly the planned
    slots without a terminal receipt, in the old schedule order."""

    run: str
    registration_sha256: str
    planned: int
    terminal: int
    remaining: list[str]
    cap_units: int
    settled_units: int
    retained_units: int
    remaining_cap_units: int
    rmax_units: int
    faux: bool  # the registered reader is faux: its money is faux units


def plan_continuation(run_dir: str | os.PathLike[str]) -> ContinuationPlan:
    """The continuation plan of ``run_dir``, or a refusal (``ControllerError``)."""
    run = Path(run_dir)
    lease = probe_lease(run)
    if lease.state is LeaseState.LIVE:
        raise ControllerError(Code.LEASE_HELD,
                              f"{run}: a controller (or reap) holds its lease: let it end, "
                              "then continue it")
    report = observe(run)
    if not report.reconciled:
        raise ControllerError(Code.RUN_UNRECONCILED,
                              f"{run}: {report.verdict}; `efold-controller recover {run}` "
                              "(then `reap`) first")
    plan, registration = run_records(run)
    view = read_run(run)  # refuses a receipt that fails its checks: nothing is guessed
    with JournalReader(run) as journal:
        money = journal_money(journal.rows("holds"))
        journaled = {r["slot"]: r["status"] for r in journal.rows("slot_status")}
    if money.open_units:
        raise ControllerError(Code.RUN_UNRECONCILED,
                              f"{run}: its journal holds {money.open_units} units in open "
                              "holds; `efold-controller recover` first")
    # A slot whose terminal receipt the journal recorded is done even if the file is gone
    # since (the aggregate shows that as damage): running it again would pay twice.
    finished = {r.slot for r in view.receipts if r.status in TERMINAL}
    finished.update(slot for slot in view.journaled_missing if journaled.get(slot) in TERMINAL)
    remaining = [s.slot for s in plan.slots if s.slot not in finished]
    left = registration.cap_units - money.settled_units - money.retained_units
    if left < registration.rmax_units:
        raise ControllerError(Code.CAP_BELOW_RMAX,
                              f"{run}: {left} units of the cap are left after what it "
                              f"settled and retained, below Rmax ({registration.rmax_units} "
                              "units): a continuation could not admit one request")
    return ContinuationPlan(
        run=str(run), registration_sha256=plan.registration_sha256,
        planned=len(plan.slots), terminal=len(plan.slots) - len(remaining),
        remaining=remaining, cap_units=registration.cap_units,
        settled_units=money.settled_units, retained_units=money.retained_units,
        remaining_cap_units=left, rmax_units=registration.rmax_units,
        faux=registration.campaign.reader.is_faux,
    )
