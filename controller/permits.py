"""The durable permit source: the controller's side of admit / consume / settle / stop.

This is the only place money is admitted. The rule (DESIGN §9):

    T = Σ settled + Σ max(retained hold, known partial) + Σ active holds
    admit a request only if T + Rmax <= C

Invariants:
- A hold is journaled (fsynced) *before* its permit is returned, so before the child can
  hear of it; consumption likewise before ``Consumed``; settlement before ``Settled``.
- A permit is used once: consumed at most once, settled at most once, and only by the
  slot (and epoch) it was granted to.
- After any integrity stop admission is closed for the rest of the run (sticky);
  settlement stays legal.
- After a loss the slot is terminal: its later requests refuse without a hold.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from efold.errors import Code, EfoldError
from efold.guard.permits import CONTINUABLE_CODES
from efold.registry.journal import (
    HOLD_INTEGRITY,
    HOLD_LOST,
    HOLD_SETTLED,
    JournalWriter,
)

# Pricing seam: (usage counts, service tier or None) -> cost in whole units, or raises
# an EfoldError (unknown tier...). Supplied from the guard's catalog.
Pricer = Callable[[Mapping[str, int], "str | None"], int]

# Stop codes only the controller may decide: a child that reports one (in Settle or
# Terminal) is not believed, and that claim is itself a protocol violation.
CONTROLLER_ONLY = frozenset({
    Code.UNRECONCILED_CONTAINMENT, Code.LOOKUP_WORKER_LOST, Code.LOOKUP_REPEATED_LOSS,
    Code.INVALID_SLOT_RATE, Code.LOOKUP_ARRIVAL_PERSIST_FAILED, Code.LOOKUP_PERMIT_INVALID,
})
MAX_OUTPUT_TOKENS = 128_000  # O, checked again here (the guard checks it first)


def child_code(code: Code | None, *, integrity: bool) -> Code | None:
    """A code a child reported, as the controller will record it. Guard codes pass
    (including the refusal codes the controller itself handed the child). A
    controller-only or foreign code, a continuable refusal code claimed as an integrity
    stop, or a missing code on an integrity stop becomes ``child_code_forbidden``."""
    if code is None:
        return Code.CHILD_CODE_FORBIDDEN if integrity else None
    if code in CONTROLLER_ONLY or not code.value.startswith(("lookup_", "not_admitted_")):
        return Code.CHILD_CODE_FORBIDDEN
    if integrity and code in CONTINUABLE_CODES:
        return Code.CHILD_CODE_FORBIDDEN
    return code


class SettleKind(enum.StrEnum):
    SETTLED = "settled"
    LOST = "lost"
    OWN_ABORT_AFTER_SEND = "own_abort_after_send"
    INTEGRITY_STOP = "integrity_stop"


@dataclass(frozen=True)
class Grant:
    permit_id: str
    hold_units: int


@dataclass(frozen=True)
class Refusal:
    code: Code


class _PermitState(enum.Enum):
    ACTIVE = "active"
    CONSUMED = "consumed"
    CLOSED = "closed"


@dataclass
class _Permit:
    permit_id: str
    slot: str
    payload_digest: str
    hold_units: int
    state: _PermitState = _PermitState.ACTIVE
    charged_units: int = 0  # what the permit counts in T once closed


@dataclass
class SlotLedger:
    """Per-slot money and status facts, content-free."""

    slot: str
    requests: int = 0  # admit calls seen (admitted or refused)
    admitted: int = 0
    settled_units: int = 0
    retained_units: int = 0
    usage: dict[str, int] = field(default_factory=dict)
    usage_known: bool = True
    terminal_code: Code | None = None  # set once the slot can admit no more
    lost: bool = False
    own_abort: bool = False
    capacity_refused: bool = False


class PermitIntegrityError(Exception):
    """A permit protocol violation: the run takes a sticky integrity stop."""

    def __init__(self, code: Code) -> None:
        super().__init__(code.value)
        self.code = code


class DurablePermitSource:
    def __init__(
        self,
        journal: JournalWriter,
        *,
        epoch: int,
        cap_units: int,
        rmax_units: int,
        max_requests: int,
        price: Pricer,
    ) -> None:
        self._journal = journal
        self._epoch = epoch
        self.cap_units = cap_units
        self.rmax_units = rmax_units
        self._max_requests = max_requests
        self._price = price
        self._permits: dict[str, _Permit] = {}
        self._slots: dict[str, SlotLedger] = {}
        # Invariant: == Σ charged (closed) + Σ hold (open), kept in step with _permits.
        self._total = 0
        self.sticky_code: Code | None = None
        self.cap_refused = False

    # -- totals --------------------------------------------------------------------

    @property
    def total_units(self) -> int:
        return self._total

    def ledger(self, slot: str) -> SlotLedger:
        return self._slots.setdefault(slot, SlotLedger(slot))

    def stop(self, code: Code) -> None:
        """A sticky stop: admission closes for the rest of the run."""
        if self.sticky_code is None or code is Code.UNRECONCILED_CONTAINMENT:
            self.sticky_code = code

    # -- the protocol --------------------------------------------------------------

    def admit(self, *, slot: str, request_id: str, round: int, payload_digest: str,
              rmax_units: int) -> Grant | Refusal:
        led = self.ledger(slot)
        led.requests += 1
        if self.sticky_code is not None:
            return Refusal(Code.LOOKUP_STOPPED)
        if led.terminal_code is not None:
            return Refusal(Code.LOOKUP_SLOT_TERMINAL)
        if led.admitted >= self._max_requests:
            return Refusal(Code.LOOKUP_REQUEST_LIMIT)
        if rmax_units != self.rmax_units:
            # The child's reservation must be the registered one, never smaller.
            raise PermitIntegrityError(Code.LOOKUP_ROUTE_MISMATCH)
        if self._total + self.rmax_units > self.cap_units:
            self.cap_refused = True
            led.capacity_refused = True
            return Refusal(Code.NOT_ADMITTED_CAP)
        permit_id = f"p{self._epoch}-{secrets.token_hex(8)}"
        self._journal.record_hold(
            permit_id=permit_id, epoch=self._epoch, slot=slot, request_id=request_id,
            round=round, payload_digest=payload_digest, hold_units=self.rmax_units,
        )
        self._permits[permit_id] = _Permit(permit_id, slot, payload_digest, self.rmax_units)
        self._total += self.rmax_units
        led.admitted += 1
        return Grant(permit_id, self.rmax_units)

    def _permit(self, slot: str, permit_id: str) -> _Permit:
        permit = self._permits.get(permit_id)
        if permit is None or permit.slot != slot:
            raise PermitIntegrityError(Code.LOOKUP_PERMIT_INVALID)
        return permit

    def consume(self, *, slot: str, permit_id: str, body_digest: str) -> None:
        permit = self._permit(slot, permit_id)
        if permit.state is not _PermitState.ACTIVE:
            raise PermitIntegrityError(Code.LOOKUP_PERMIT_INVALID)  # reuse
        if body_digest != permit.payload_digest:
            raise PermitIntegrityError(Code.LOOKUP_BODY_MISMATCH)
        self._journal.record_consumption(permit_id, body_digest)
        permit.state = _PermitState.CONSUMED

    def settle(self, *, slot: str, permit_id: str, kind: SettleKind, code: Code | None,
               usage: Mapping[str, int] | None, tier: str | None,
               cost_claim: int | None = None) -> Code | None:
        """Close a permit. Returns an integrity code when this settlement stops the run
        (the controller's independent re-check, or the child's own integrity_stop).
        ``code`` and ``cost_claim`` are the child's claims, checked, never trusted."""
        permit = self._permit(slot, permit_id)
        if permit.state is _PermitState.CLOSED:
            raise PermitIntegrityError(Code.LOOKUP_PERMIT_INVALID)  # settled twice
        if permit.state is _PermitState.ACTIVE and kind in (
                SettleKind.SETTLED, SettleKind.OWN_ABORT_AFTER_SEND):
            # "Sent" without a consumption: a request went out unguarded.
            raise PermitIntegrityError(Code.LOOKUP_UNGUARDED_DISPATCH)
        claimed = child_code(code, integrity=kind is SettleKind.INTEGRITY_STOP)
        return self._close(permit, kind, claimed, usage, tier, cost_claim)

    def _close(self, permit: _Permit, kind: SettleKind, code: Code | None,
               usage: Mapping[str, int] | None, tier: str | None,
               cost_claim: int | None) -> Code | None:
        permit_id = permit.permit_id
        led = self.ledger(permit.slot)
        integrity: Code | None = code if kind is SettleKind.INTEGRITY_STOP else None
        if code is Code.CHILD_CODE_FORBIDDEN:
            integrity = code
        cost: int | None = None
        if usage is not None:
            led.usage = _add(led.usage, usage)
            try:
                cost = self._price(usage, tier)
            except EfoldError as exc:  # unknown tier or invalid counts: integrity
                integrity = integrity or exc.code
        else:
            led.usage_known = False
        if kind is SettleKind.SETTLED and integrity is None:
            integrity = _check_settled(usage, cost, permit.hold_units, cost_claim)
        if kind is SettleKind.SETTLED and integrity is None:
            assert cost is not None
            state, charged, settled, partial = HOLD_SETTLED, cost, cost, None
            led.settled_units += cost
        else:
            # Lost, own abort or integrity: the hold is retained (or the known partial
            # cost, if larger: a reported cost above the hold is still counted).
            partial = cost
            charged = max(permit.hold_units, cost or 0)
            state = HOLD_INTEGRITY if integrity is not None else HOLD_LOST
            settled = None
            led.retained_units += charged
            led.terminal_code = integrity or code or Code.LOOKUP_SLOT_TERMINAL
            if kind is SettleKind.OWN_ABORT_AFTER_SEND:
                led.own_abort = True
            else:
                led.lost = True
        outcome = kind.value if integrity is None else SettleKind.INTEGRITY_STOP.value
        final_code = integrity or code
        self._journal.record_settlement(
            permit_id=permit_id, state=state, outcome=outcome,
            code=final_code.value if final_code is not None else None,
            settled_units=settled, partial_units=partial,
            usage=dict(usage) if usage is not None else None, tier=tier,
        )
        self._total += charged - permit.hold_units
        permit.state = _PermitState.CLOSED
        permit.charged_units = charged
        if integrity is not None:
            self.stop(integrity)
        return integrity

    def abandon_slot(self, slot: str, code: Code) -> int:
        """The slot's worker is gone (killed, disconnected, past the watchdog): every
        permit it still held is closed as lost, its hold retained (whether or not the
        request went out is unknown). ``code`` is the controller's own. Returns how many."""
        open_permits = [
            p for p in self._permits.values()
            if p.slot == slot and p.state is not _PermitState.CLOSED
        ]
        for permit in open_permits:
            self._close(permit, SettleKind.LOST, code, None, None, None)
        return len(open_permits)


def _add(total: Mapping[str, int], more: Mapping[str, int]) -> dict[str, int]:
    out = dict(total)
    for k, v in more.items():
        out[k] = out.get(k, 0) + int(v)
    return out


def _check_settled(usage: Mapping[str, int] | None, cost: int | None, hold: int,
                   cost_claim: int | None) -> Code | None:
    """The controller's own re-check of a settlement the child calls clean."""
    if usage is None or cost is None:
        return Code.LOOKUP_INVALID_USAGE
    inp, out = usage.get("input", 0), usage.get("output", 0)
    if inp < 1 or out < 0:
        return Code.LOOKUP_INVALID_USAGE
    if out > MAX_OUTPUT_TOKENS:
        return Code.LOOKUP_USAGE_OUTPUT_ABOVE_MAX
    if cost_claim is not None and cost_claim != cost:
        return Code.LOOKUP_COST_MISMATCH
    if usage.get("reasoning", 0) > out:
        return Code.LOOKUP_INVALID_USAGE
    if usage.get("cache_read", 0) + usage.get("cache_write", 0) > inp:
        return Code.LOOKUP_INVALID_USAGE
    if cost > hold:
        return Code.LOOKUP_COST_EXCEEDS_HOLD
    return None
