"""Test support: the permit ledger over memory, behind the guard's permit protocol.

``TestOnlyPermitSource`` is what guard tests and the guard benchmark hand a ``Guard``.
It decides nothing itself: every call goes to a ``PermitLedger`` (the same rules the
controller's durable source runs), whose store is a list in memory instead of the
journal. It is branded test-only, ``assert_real_source`` refuses it, and it is not
exported from ``efold.guard``: import it from this module, in tests only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from efold.errors import Code
from efold.guard.catalog import CatalogEntry, bundled_catalog
from efold.guard.contract import MAX_REQUESTS
from efold.guard.ledger import PermitIntegrityError, PermitLedger, SettleKind
from efold.guard.permits import (
    AdmitRequest,
    OutcomeKind,
    Permit,
    Refusal,
    Settlement,
    UsageRecord,
)
from efold.guard.pricing import price_units, rmax_units

TEST_ONLY_BRAND: Final = "efold-guard-test-only-v1"
TEST_SLOT: Final = "test-slot"
UNLIMITED_CAP: Final = 2**62  # "no cap" for tests that are not about the cap


@dataclass
class PermitRecord:
    """One hold as the memory store saw it. Invariant: ids, digests, counts and codes."""

    permit_id: str
    request_id: str
    round: int
    payload_digest: str
    hold_units: int
    state: str = "active"
    body_digest: str | None = None
    settlement: Settlement | None = None  # what the guard claimed
    outcome: str | None = None  # what the ledger decided
    code: str | None = None
    settled_units: int | None = None
    partial_units: int | None = None
    usage: Mapping[str, int] | None = None  # as the ledger recorded it (checked)
    tier: str | None = None

    @property
    def charged_units(self) -> int:
        """What this permit counts in T right now."""
        if self.settled_units is not None:
            return self.settled_units
        return max(self.hold_units, self.partial_units or 0)


class MemoryHoldStore:
    """A ``HoldStore`` in memory: the journal's writes, kept as ``PermitRecord``s."""

    def __init__(self) -> None:
        self.records: list[PermitRecord] = []
        self._by_id: dict[str, PermitRecord] = {}

    def record(self, permit_id: str) -> PermitRecord:
        return self._by_id[permit_id]

    def record_hold(self, *, permit_id: str, epoch: int, slot: str, request_id: str,
                    round: int, payload_digest: str, hold_units: int) -> None:
        record = PermitRecord(permit_id, request_id, round, payload_digest, hold_units)
        self.records.append(record)
        self._by_id[permit_id] = record

    def record_consumption(self, permit_id: str, body_digest: str) -> None:
        record = self._by_id[permit_id]
        record.state, record.body_digest = "consumed", body_digest

    def record_settlement(self, *, permit_id: str, state: str, outcome: str, code: str | None,
                          settled_units: int | None, partial_units: int | None,
                          usage: Mapping[str, int] | None, tier: str | None) -> None:
        record = self._by_id[permit_id]
        record.state, record.outcome, record.code = state, outcome, code
        record.settled_units, record.partial_units = settled_units, partial_units
        record.usage = dict(usage) if usage is not None else None
        record.tier = tier


class TestOnlyPermitSource:
    """The guard's ``PermitSource`` over a memory-backed ``PermitLedger`` for one slot.

    ``entry`` prices and sizes holds (the bundled faux model by default); ``on_admit``
    (tests only) runs after a permit is granted and before it is returned, standing in
    for whatever may happen across IPC. Ledger violations surface as the
    ``PermitIntegrityError`` (a ``GuardError``) the durable source raises."""

    __test__ = False  # not a pytest test class
    brand: Final = TEST_ONLY_BRAND
    test_only: Final = True

    def __init__(self, cap_units: int | None = None, *, entry: CatalogEntry | None = None,
                 max_requests: int = MAX_REQUESTS,
                 on_admit: Callable[[AdmitRequest], None] | None = None) -> None:
        entry = entry or bundled_catalog().entry("faux", "faux-extractive-v1")
        self.store = MemoryHoldStore()
        self.ledger = PermitLedger(
            self.store, epoch=1, cap_units=UNLIMITED_CAP if cap_units is None else cap_units,
            rmax_units=rmax_units(entry), max_requests=max_requests,
            price=lambda counts, tier: price_units(entry, counts, tier),
        )
        self.on_admit = on_admit
        self.refusals: list[Code] = []
        self.stops: list[Code] = []  # codes the guard asked to stop with, in order
        self.calls: list[str] = []  # "admit" / "consume" / "settle" / "stop", in order
        self._lock = threading.Lock()  # the guard never calls concurrently; tests might

    @property
    def records(self) -> list[PermitRecord]:
        return self.store.records

    @property
    def stopped(self) -> Code | None:
        return self.ledger.sticky_code

    @property
    def total_units(self) -> int:
        return self.ledger.total_units

    def admit(self, request: AdmitRequest) -> Permit | Refusal:
        with self._lock:
            self.calls.append("admit")
            answer = self.ledger.admit(
                slot=TEST_SLOT, request_id=request.request_id, round=request.round,
                payload_digest=request.payload_digest, rmax_units=request.rmax_units)
            if isinstance(answer, Refusal):
                self.refusals.append(answer.code)
                return answer
        if self.on_admit is not None:
            self.on_admit(request)
        return answer

    def consume(self, permit: Permit, body_digest: str) -> None:
        with self._lock:
            self.calls.append("consume")
            self.ledger.consume(slot=TEST_SLOT, permit_id=permit.permit_id,
                                body_digest=body_digest)

    def settle(self, permit: Permit, outcome: Settlement, usage: UsageRecord | None,
               tier: str | None) -> None:
        with self._lock:
            self.calls.append("settle")
            if outcome.kind is OutcomeKind.REFUSED_PRE_SEND:
                # A granted permit cannot end "refused": the protocol's misuse, sticky.
                self.ledger.stop(Code.LOOKUP_PERMIT_INVALID)
                raise PermitIntegrityError(Code.LOOKUP_PERMIT_INVALID, "refused after a grant")
            kind = SettleKind(outcome.kind.value)
            self.ledger.settle(
                slot=TEST_SLOT, permit_id=permit.permit_id, kind=kind,
                code=outcome.code, usage=usage.counts() if usage is not None else None,
                tier=tier, cost_claim=outcome.cost_units if kind is SettleKind.SETTLED else None,
            )
            self.store.record(permit.permit_id).settlement = outcome

    def stop(self, code: Code) -> None:
        with self._lock:
            self.calls.append("stop")
            self.stops.append(code)
            self.ledger.stop(code)
