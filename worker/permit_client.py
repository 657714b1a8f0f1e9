"""The guard's permit source inside a probe child: each call is one lockstep exchange
with the controller's durable source (``ProbeSession``).

The guard's ``stop(code)`` has no message of its own in the protocol: the child reports
the code in ``Terminal`` (and in ``Settle`` when a hold exists), and the controller takes
the sticky stop. So ``stop`` only remembers the first code for the terminal message.
"""

from __future__ import annotations

from efold.errors import Code
from efold.guard.permits import AdmitRequest, Permit, Refusal, Settlement, UsageRecord
from efold.ipc.messages import Permit as PermitMessage
from efold.ipc.messages import SettleOutcome, Usage
from efold.worker.session import ProbeSession


class SessionPermitSource:
    """A real (non-test) permit source: the holds live in the controller's journal."""

    def __init__(self, session: ProbeSession) -> None:
        self._session = session
        # Invariant: the first stop code the guard reported, kept for Terminal.
        self.stop_code: Code | None = None

    def admit(self, request: AdmitRequest) -> Permit | Refusal:
        reply = self._session.admit(
            request_id=request.request_id, round=request.round,
            payload_digest=request.payload_digest, rmax=request.rmax_units,
        )
        if isinstance(reply, PermitMessage):
            return Permit(permit_id=reply.permit_id, hold_units=reply.hold)
        return Refusal(code=reply.code)

    def consume(self, permit: Permit, body_digest: str) -> None:
        self._session.consume(permit_id=permit.permit_id, body_digest=body_digest)

    def settle(self, permit: Permit, settlement: Settlement, usage: UsageRecord | None,
               tier: str | None) -> None:
        self._session.settle(
            permit_id=permit.permit_id,
            outcome=SettleOutcome(settlement.kind.value),
            code=settlement.code,
            usage=Usage(**usage.counts()) if usage is not None else None,
            tier=tier,
            cost=settlement.cost_units,
        )

    def stop(self, code: Code) -> None:
        if self.stop_code is None:
            self.stop_code = code
