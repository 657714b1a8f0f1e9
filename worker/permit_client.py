"""The guard's permit source inside a child that sends (a probe child's reader, a prep
child's summariser): each call is one lockstep exchange with the controller's durable
source (``PermitSession``).

Before it lets a request go out (``consume``), the child reads its hold back from the
journal itself: a permit the controller granted but did not journal, journaled for
another slot (the assignment's: a probe's slot, a prep's checkpoint key), epoch, body or
amount, or no longer active, is ``lookup_hold_unverified`` and the guard never sends
(the pipe alone is not proof that money was reserved).
``stop`` is its own exchange (``Halt``), so the controller closes admission at once.
"""

from __future__ import annotations

from efold.errors import Code, EfoldError
from efold.guard.errors import GuardError
from efold.guard.permits import AdmitRequest, Permit, Refusal, Settlement, UsageRecord
from efold.ipc.messages import Granted, SettleOutcome, UsageReport
from efold.worker.session import PermitSession

_ACTIVE = "active"  # the journal's state of a granted, unconsumed hold


class SessionPermitSource:
    """A real (non-test) permit source: the holds live in the controller's journal."""

    def __init__(self, session: PermitSession, *, ledger_key: str | None = None) -> None:
        self._session = session
        # The journal's slot of this source's holds: the assignment's, or (the judge's
        # requests of a probe child, ``worker.judge``) ``<slot>#judge``.
        self._ledger_key = ledger_key or session.assignment.slot
        # Invariant: the first stop code the guard reported, kept for the body's end
        # (a probe's Terminal, a prep's failure).
        self.stop_code: Code | None = None

    def admit(self, request: AdmitRequest) -> Permit | Refusal:
        reply = self._session.admit(
            request_id=request.request_id, round=request.round,
            payload_digest=request.payload_digest, rmax=request.rmax_units,
        )
        if isinstance(reply, Granted):
            return Permit(permit_id=reply.permit_id, hold_units=reply.hold)
        return Refusal(code=reply.code)

    def consume(self, permit: Permit, body_digest: str) -> None:
        self._verify_hold(permit, body_digest)
        self._session.consume(permit_id=permit.permit_id, body_digest=body_digest)

    def _verify_hold(self, permit: Permit, body_digest: str) -> None:
        from efold.worker.run_journal import run_journal

        assignment = self._session.assignment
        try:
            row = run_journal(assignment.run_dir).hold(permit.permit_id)
        except EfoldError as exc:
            raise GuardError(Code.LOOKUP_HOLD_UNVERIFIED, exc.code.value) from exc
        if row is None or (row["slot"], row["epoch"], row["hold_units"], row["payload_digest"],
                           row["state"]) != (self._ledger_key, assignment.epoch,
                                             permit.hold_units, body_digest, _ACTIVE):
            raise GuardError(Code.LOOKUP_HOLD_UNVERIFIED, "not the journaled hold")

    def settle(self, permit: Permit, settlement: Settlement, usage: UsageRecord | None,
               tier: str | None) -> None:
        self._session.settle(
            permit_id=permit.permit_id,
            outcome=SettleOutcome(settlement.kind.value),
            code=settlement.code,
            usage=UsageReport(**usage.counts()) if usage is not None else None,
            tier=tier,
            cost=settlement.cost_units,
        )

    def stop(self, code: Code) -> None:
        if self.stop_code is None:
            self.stop_code = code
        self._session.halt(code)
