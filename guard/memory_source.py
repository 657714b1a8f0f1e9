"""``TestOnlyPermitSource``: an in-memory, non-durable permit source for tests and the
benchmark. Branded test-only; ``assert_real_source`` refuses it.

It follows the durable source's rules so tests exercise the real protocol: cap
admission ``T + Rmax <= C`` with ``T = Σ settled + Σ max(retained hold, known partial)
+ Σ active holds``; single consumption with the admitted digest; single settlement;
sticky stops (settlement stays legal after a stop, admission never does).
Its records are content-free by construction (``PermitRecord`` holds ids, digests,
numbers and codes only).
"""

from __future__ import annotations

import enum
import itertools
import threading
from collections.abc import Callable
from typing import Final

import msgspec

from efold.errors import Code
from efold.guard.errors import GuardError
from efold.guard.permits import (
    AdmitRequest,
    OutcomeKind,
    Permit,
    Refusal,
    Settlement,
    UsageRecord,
)

TEST_ONLY_BRAND: Final = "efold-guard-test-only-v1"


class PermitState(enum.StrEnum):
    ACTIVE = "active"
    CONSUMED = "consumed"
    CLOSED = "closed"


class PermitRecord(msgspec.Struct):
    """One hold's history. Invariant: ids, digests, counts and codes only."""

    permit_id: str
    request_id: str
    round: int
    payload_digest: str
    hold_units: int
    state: PermitState = PermitState.ACTIVE
    body_digest: str | None = None
    settlement: Settlement | None = None
    usage: UsageRecord | None = None
    tier: str | None = None

    @property
    def charged_units(self) -> int:
        """What this permit counts in T right now."""
        if self.settlement is None:
            return self.hold_units
        if self.settlement.kind is OutcomeKind.SETTLED and self.settlement.cost_units is not None:
            return self.settlement.cost_units
        return max(self.hold_units, self.settlement.cost_units or 0)


class TestOnlyPermitSource:
    """In-memory permit source. ``on_admit`` (tests only) runs after a permit is granted
    and before it is returned, standing in for whatever may happen across IPC."""

    __test__ = False  # not a pytest test class
    brand: Final = TEST_ONLY_BRAND
    test_only: Final = True

    def __init__(
        self,
        cap_units: int | None = None,
        *,
        on_admit: Callable[[AdmitRequest], None] | None = None,
    ) -> None:
        self.cap_units = cap_units
        self.on_admit = on_admit
        self.records: list[PermitRecord] = []
        self.refusals: list[Code] = []
        self.stops: list[Code] = []
        self.calls: list[str] = []  # "admit" / "consume" / "settle" / "stop", in order
        self._by_id: dict[str, PermitRecord] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # the guard never calls concurrently; tests might

    @property
    def stopped(self) -> Code | None:
        return self.stops[0] if self.stops else None

    @property
    def total_units(self) -> int:
        return sum(r.charged_units for r in self.records)

    def admit(self, request: AdmitRequest) -> Permit | Refusal:
        with self._lock:
            self.calls.append("admit")
            if self.stops:
                return self._refuse(Code.LOOKUP_STOPPED)
            if self.cap_units is not None and self.total_units + request.rmax_units > self.cap_units:
                return self._refuse(Code.NOT_ADMITTED_CAP)
            record = PermitRecord(
                permit_id=f"test-permit-{next(self._ids)}",
                request_id=request.request_id,
                round=request.round,
                payload_digest=request.payload_digest,
                hold_units=request.rmax_units,
            )
            self.records.append(record)
            self._by_id[record.permit_id] = record
        if self.on_admit is not None:
            self.on_admit(request)
        return Permit(permit_id=record.permit_id, hold_units=record.hold_units)

    def _refuse(self, code: Code) -> Refusal:
        self.refusals.append(code)
        return Refusal(code=code)

    def _record(self, permit: Permit) -> PermitRecord:
        record = self._by_id.get(permit.permit_id)
        if record is None or record.hold_units != permit.hold_units:
            raise GuardError(Code.LOOKUP_PERMIT_INVALID, "unknown permit")
        return record

    def consume(self, permit: Permit, body_digest: str) -> None:
        with self._lock:
            self.calls.append("consume")
            record = self._record(permit)
            if record.state is not PermitState.ACTIVE:
                raise GuardError(Code.LOOKUP_SEND_REENTERED, "permit already consumed")
            if body_digest != record.payload_digest:
                raise GuardError(Code.LOOKUP_BODY_MISMATCH, "body differs from admitted")
            record.state = PermitState.CONSUMED
            record.body_digest = body_digest

    def settle(
        self, permit: Permit, outcome: Settlement, usage: UsageRecord | None, tier: str | None
    ) -> None:
        with self._lock:
            self.calls.append("settle")
            record = self._record(permit)
            if record.state is PermitState.CLOSED:
                raise GuardError(Code.LOOKUP_PERMIT_INVALID, "permit already settled")
            if outcome.kind is OutcomeKind.REFUSED_PRE_SEND:
                raise GuardError(Code.LOOKUP_PERMIT_INVALID, "an admitted request was refused")
            record.state = PermitState.CLOSED
            record.settlement = outcome
            record.usage = usage
            record.tier = tier
            if outcome.kind is OutcomeKind.INTEGRITY_STOP and outcome.code is not None:
                self.stops.append(outcome.code)

    def stop(self, code: Code) -> None:
        with self._lock:
            self.calls.append("stop")
            self.stops.append(code)
