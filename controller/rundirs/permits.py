"""The durable permit source: the run's ``PermitLedger`` over the journal.

This is the only place money is admitted in a run. The rules themselves live once, in
``efold.guard.ledger``; here they are bound to the controller's journal, so every hold
and consumption is on disk before the child hears of it (a journal write is durable
when it returns, or, inside ``JournalWriter.unsynced``, once the caller has awaited
``controller.processes.durable``, as ``controller.pilot.probe_server`` does before its
``Granted`` and ``Consumed``; a settlement rides with the next commit:
docs/architecture.md), and the controller answers a child's ``Admit``/``Consume``/``Settle``
from this object alone.
"""

from __future__ import annotations

from efold.guard.contract import INPUT_ENVELOPE
from efold.guard.ledger import PermitLedger
from efold.guard.pricing import Pricer
from efold.registry.journal import JournalWriter


class DurablePermitSource(PermitLedger):
    """A ``PermitLedger`` whose store is the run journal (single writer, lease-checked)."""

    def __init__(self, journal: JournalWriter, *, epoch: int, cap_units: int, rmax_units: int,
                 max_requests: int, price: Pricer, input_envelope: int = INPUT_ENVELOPE) -> None:
        super().__init__(journal, epoch=epoch, cap_units=cap_units, rmax_units=rmax_units,
                         max_requests=max_requests, price=price, input_envelope=input_envelope)
