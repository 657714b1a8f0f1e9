"""The money rules, written once: cap admission, permit states, settlement re-checks.

``PermitLedger`` is the only implementation of what a permit source decides (docs/architecture.md §5,
§9). The controller's durable source is a ledger over the run journal; the test-only
source (``efold.guard.testing``) is the same ledger over an in-memory store. A double
may *store* differently, never *decide* differently.

    T = Σ settled + Σ max(retained hold, known partial) + Σ active holds
    admit a request only if T + Rmax <= C          (equality admits)

Invariants:
- A hold is written to the store *before* its permit is returned (so before a child can
  hear of it); consumption likewise before it is acknowledged; settlement too.
- A permit is used once: consumed at most once, settled (closed) exactly once, only by
  the slot it was granted to.
- Nothing is admitted after a sticky stop; settlement stays legal.
- After a loss, an own abort or an integrity outcome the slot is terminal: its later
  requests refuse without a hold.
- Usage is checked (``usage_problem``) before it is priced, on every outcome that
  carries it, so a priced partial is always bounded by Rmax; a cost above the hold is
  an integrity stop on every outcome.
- Closing a permit never raises past the ledger except for a store failure: any other
  fault while deciding or recording settles the permit as an integrity stop
  (``lookup_settlement_fault``) with the whole hold retained.
"""

from __future__ import annotations

import enum
import functools
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from efold.errors import Code, EfoldError
from efold.guard.contract import INPUT_ENVELOPE, MAX_OUTPUT
from efold.guard.errors import GuardError
from efold.guard.money import TIER_MULTIPLIERS
from efold.guard.permits import Permit, Refusal, child_code
from efold.guard.pricing import Pricer
from efold.guard.usage import usage_problem


class SettleKind(enum.StrEnum):
    """How an admitted request ended, as the sending side claims it."""

    SETTLED = "settled"
    LOST = "lost"
    OWN_ABORT_AFTER_SEND = "own_abort_after_send"
    INTEGRITY_STOP = "integrity_stop"


class HoldState(enum.StrEnum):
    """A closed hold's state in the store (the journal's ``holds.state``)."""

    SETTLED = "settled"
    LOST = "lost"
    INTEGRITY = "integrity_stop"


class HoldStore(Protocol):
    """Where holds are written (the journal, or memory in tests). Each call is durable
    when it returns; a failure raises and the ledger state is left unchanged."""

    def record_hold(self, *, permit_id: str, epoch: int, slot: str, request_id: str,
                    round: int, payload_digest: str, hold_units: int) -> None: ...

    def record_consumption(self, permit_id: str, body_digest: str) -> None: ...

    def record_settlement(self, *, permit_id: str, state: str, outcome: str, code: str | None,
                          settled_units: int | None, partial_units: int | None,
                          usage: Mapping[str, int] | None, tier: str | None) -> None: ...


class PermitIntegrityError(GuardError):
    """A permit protocol violation (reuse, foreign permit, a smaller reservation...):
    the ledger has taken a sticky stop with ``code``."""


class _State(enum.Enum):
    ACTIVE = "active"
    CONSUMED = "consumed"
    CLOSED = "closed"


@dataclass
class _Permit:
    permit_id: str
    slot: str
    payload_digest: str
    hold_units: int
    # Invariant: ACTIVE -> CONSUMED -> CLOSED or ACTIVE -> CLOSED, never back.
    state: _State = _State.ACTIVE
    charged_units: int = 0  # what the permit counts in T once closed


@dataclass
class SlotLedger:
    """Per-slot money and status facts, content-free."""

    slot: str
    requests: int = 0  # admit calls seen (admitted or refused)
    admitted: int = 0
    settled_units: int = 0
    retained_units: int = 0
    usage: dict[str, int] = field(default_factory=dict)  # sums of checked usage only
    usage_known: bool = True  # False once any closed request had no trustworthy usage
    # The input tokens the provider reported for the slot's first closed request (its
    # round 1: the whole checkpoint and the question); None until one closed, or when
    # that one's usage was not trustworthy (``first_closed`` tells the two apart).
    first_input: int | None = None
    first_closed: bool = False
    terminal_code: Code | None = None  # set once the slot can admit no more
    lost: bool = False
    own_abort: bool = False
    capacity_refused: bool = False


@dataclass(frozen=True)
class _Decision:
    state: HoldState
    outcome: SettleKind
    code: Code | None
    charged: int
    settled: int | None = None
    partial: int | None = None
    usage: Mapping[str, int] | None = None  # checked usage, else None
    tier: str | None = None  # a known tier as reported; None when absent or unknown


@dataclass(frozen=True)
class CallerTerms:
    """What the requests of one slot are held to: the reservation every admission takes
    (Rmax of the caller's route), the most requests it may make, how its usage is priced
    and the input envelope its reported usage is checked against. A run's probe slots
    share the reader's terms; a prep child that sends (the summariser of a compaction
    arm) is a caller of its own route (``PermitLedger.set_terms``)."""

    rmax_units: int
    max_requests: int
    price: Pricer
    input_envelope: int = INPUT_ENVELOPE


class PermitLedger:
    def __init__(self, store: HoldStore, *, epoch: int, cap_units: int, rmax_units: int,
                 max_requests: int, price: Pricer, input_envelope: int = INPUT_ENVELOPE,
                 max_output: int = MAX_OUTPUT) -> None:
        self._store = store
        self._epoch = epoch
        self.cap_units = cap_units
        self.rmax_units = rmax_units  # the default caller's (the reader's) Rmax
        self._default_terms = CallerTerms(rmax_units, max_requests, price, input_envelope)
        # Invariant: a slot's terms are set before its first admission and never change.
        self._terms: dict[str, CallerTerms] = {}
        self._max_output = max_output
        self._permits: dict[str, _Permit] = {}
        self._slots: dict[str, SlotLedger] = {}
        # Invariant: == Σ charged (closed) + Σ hold (open), kept in step with _permits.
        self._total = 0
        self.sticky_code: Code | None = None
        self.cap_refused = False

    # -- totals --------------------------------------------------------------------

    @property
    def total_units(self) -> int:
        """T: what the run has spent or may still spend."""
        return self._total

    def ledger(self, slot: str) -> SlotLedger:
        return self._slots.setdefault(slot, SlotLedger(slot))

    def set_terms(self, slot: str, terms: CallerTerms) -> None:
        """Hold ``slot`` to ``terms`` instead of the default caller's. Only before the
        slot's first admission: terms never change under an open request."""
        if slot in self._slots and self._slots[slot].requests:
            raise GuardError(Code.LOOKUP_ROUTE_MISMATCH, "terms set after the first request")
        self._terms[slot] = terms

    def terms(self, slot: str) -> CallerTerms:
        return self._terms.get(slot, self._default_terms)

    def open_permits(self, slot: str | None = None) -> list[str]:
        return [p.permit_id for p in self._permits.values()
                if p.state is not _State.CLOSED and (slot is None or p.slot == slot)]

    def stop(self, code: Code) -> None:
        """A sticky stop: admission closes for the rest of the run. The first code
        stays, except that unreconciled containment outranks every other."""
        if self.sticky_code is None or code is Code.UNRECONCILED_CONTAINMENT:
            self.sticky_code = code

    def _violation(self, code: Code, detail: str) -> PermitIntegrityError:
        self.stop(code)
        return PermitIntegrityError(code, detail)

    # -- the protocol --------------------------------------------------------------

    def admit(self, *, slot: str, request_id: str, round: int, payload_digest: str,
              rmax_units: int) -> Permit | Refusal:
        led = self.ledger(slot)
        terms = self.terms(slot)
        led.requests += 1
        if self.sticky_code is not None:
            return Refusal(code=Code.LOOKUP_STOPPED)
        if led.terminal_code is not None:
            return Refusal(code=Code.LOOKUP_SLOT_TERMINAL)
        if led.admitted >= terms.max_requests:
            return Refusal(code=Code.LOOKUP_REQUEST_LIMIT)
        if rmax_units != terms.rmax_units:
            # The sender's reservation must be the registered one, never smaller.
            raise self._violation(Code.LOOKUP_ROUTE_MISMATCH, "reservation is not Rmax")
        hold = terms.rmax_units
        if self._total + hold > self.cap_units:
            self.cap_refused = led.capacity_refused = True
            return Refusal(code=Code.NOT_ADMITTED_CAP)
        permit_id = f"p{self._epoch}-{secrets.token_hex(8)}"
        self._store.record_hold(
            permit_id=permit_id, epoch=self._epoch, slot=slot, request_id=request_id,
            round=round, payload_digest=payload_digest, hold_units=hold,
        )
        self._permits[permit_id] = _Permit(permit_id, slot, payload_digest, hold)
        self._total += hold
        led.admitted += 1
        return Permit(permit_id=permit_id, hold_units=hold)

    def _permit(self, slot: str, permit_id: str) -> _Permit:
        permit = self._permits.get(permit_id)
        if permit is None or permit.slot != slot:
            raise self._violation(Code.LOOKUP_PERMIT_INVALID, "unknown permit")
        return permit

    def consume(self, *, slot: str, permit_id: str, body_digest: str) -> None:
        permit = self._permit(slot, permit_id)
        if permit.state is not _State.ACTIVE:
            raise self._violation(Code.LOOKUP_PERMIT_INVALID, "permit reused")
        if body_digest != permit.payload_digest:
            raise self._violation(Code.LOOKUP_BODY_MISMATCH, "body differs from admitted")
        self._store.record_consumption(permit_id, body_digest)
        permit.state = _State.CONSUMED

    def settle(self, *, slot: str, permit_id: str, kind: SettleKind, code: Code | None,
               usage: Mapping[str, object] | None, tier: str | None,
               cost_claim: int | None = None) -> Code | None:
        """Close a permit. Returns the integrity code when this settlement stops the run
        (the ledger's own re-check, or the sender's integrity claim). ``kind``, ``code``,
        ``usage`` and ``cost_claim`` are the sender's claims: checked, never trusted."""
        permit = self._permit(slot, permit_id)
        if permit.state is _State.CLOSED:
            raise self._violation(Code.LOOKUP_PERMIT_INVALID, "permit settled twice")
        if permit.state is _State.ACTIVE and kind in (
                SettleKind.SETTLED, SettleKind.OWN_ABORT_AFTER_SEND):
            # "Sent" without a consumption: a request went out unguarded.
            raise self._violation(Code.LOOKUP_UNGUARDED_DISPATCH, "sent without consume")
        claimed = child_code(code, integrity=kind is SettleKind.INTEGRITY_STOP)
        return self._close(permit, lambda: self._decide(permit, kind, claimed, usage, tier,
                                                        cost_claim))

    def abandon_slot(self, slot: str, code: Code) -> int:
        """The slot's sender is gone (killed, disconnected, past its watchdog): every
        permit it still held is closed as lost, its hold retained (whether the request
        went out is unknown). ``code`` is the controller's own. Returns how many."""
        open_permits = [p for p in self._permits.values()
                        if p.slot == slot and p.state is not _State.CLOSED]
        for permit in open_permits:
            self._close(permit, functools.partial(
                _Decision, HoldState.LOST, SettleKind.LOST, code, permit.hold_units))
        return len(open_permits)

    # -- closing ---------------------------------------------------------------------

    def _decide(self, permit: _Permit, kind: SettleKind, claimed: Code | None,
                usage: Mapping[str, object] | None, tier: str | None,
                cost_claim: int | None) -> _Decision:
        """Pure: what closing ``permit`` with these claims means. No store, no state."""
        known_tier = tier if tier in TIER_MULTIPLIERS else None
        integrity = claimed if (kind is SettleKind.INTEGRITY_STOP
                                or claimed is Code.CHILD_CODE_FORBIDDEN) else None
        checked: dict[str, int] | None = None
        cost: int | None = None
        terms = self.terms(permit.slot)
        if usage is not None:
            # The ledger holds the payload's digest, not its size: the lower bound on
            # input is the guard's (settlement), which sent the bytes.
            problem = usage_problem(usage, input_limit=terms.input_envelope,
                                    max_output=self._max_output, payload_bytes=None,
                                    settling=kind is SettleKind.SETTLED)
            if problem is not None:
                integrity = integrity or problem
            else:
                checked = {k: v for k, v in usage.items() if isinstance(v, int)}
                try:
                    cost = terms.price(checked, tier)
                except EfoldError as exc:  # unknown tier: an integrity stop, unpriced
                    integrity = integrity or exc.code
        if kind is SettleKind.SETTLED and integrity is None:
            if cost is None:
                integrity = Code.LOOKUP_INVALID_USAGE  # "settled" with no usage
            elif cost_claim is not None and cost_claim != cost:
                integrity = Code.LOOKUP_COST_MISMATCH
        if cost is not None and cost > permit.hold_units:
            integrity = integrity or Code.LOOKUP_COST_EXCEEDS_HOLD
        if kind is SettleKind.SETTLED and integrity is None and cost is not None:
            return _Decision(HoldState.SETTLED, kind, None, cost, settled=cost,
                             usage=checked, tier=known_tier)
        # Lost, own abort or integrity: the hold is retained, or the known partial cost
        # if larger (only checked usage is priced, so the partial is bounded).
        charged = max(permit.hold_units, cost or 0)
        if integrity is not None:
            return _Decision(HoldState.INTEGRITY, SettleKind.INTEGRITY_STOP, integrity,
                             charged, partial=cost, usage=checked, tier=known_tier)
        return _Decision(HoldState.LOST, kind, claimed, charged, partial=cost, usage=checked,
                         tier=known_tier)

    def _close(self, permit: _Permit, decide: Callable[[], _Decision]) -> Code | None:
        try:
            decision = decide()
        except Exception:  # a fault in the rules: never a crash, never a silent loss
            decision = self._fault(permit)
        try:
            self._record(permit, decision)
        except EfoldError:
            raise  # the store failed: nothing more may be recorded; the run stops
        except Exception:  # a value the store cannot hold: record the fault instead
            decision = self._fault(permit)
            self._record(permit, decision)
        self._apply(permit, decision)
        return decision.code if decision.state is HoldState.INTEGRITY else None

    @staticmethod
    def _fault(permit: _Permit) -> _Decision:
        return _Decision(HoldState.INTEGRITY, SettleKind.INTEGRITY_STOP,
                         Code.LOOKUP_SETTLEMENT_FAULT, permit.hold_units)

    def _record(self, permit: _Permit, d: _Decision) -> None:
        self._store.record_settlement(
            permit_id=permit.permit_id, state=d.state.value, outcome=d.outcome.value,
            code=d.code.value if d.code is not None else None, settled_units=d.settled,
            partial_units=d.partial, usage=d.usage, tier=d.tier,
        )

    def _apply(self, permit: _Permit, d: _Decision) -> None:
        """The in-memory side of a recorded decision (cannot fail)."""
        led = self.ledger(permit.slot)
        if not led.first_closed:
            led.first_closed = True
            led.first_input = None if d.usage is None else d.usage.get("input")
        if d.usage is None:
            led.usage_known = False
        else:
            for k, v in d.usage.items():
                led.usage[k] = led.usage.get(k, 0) + v
        if d.state is HoldState.SETTLED:
            led.settled_units += d.charged
        else:
            led.retained_units += d.charged
            led.terminal_code = led.terminal_code or d.code or Code.LOOKUP_SLOT_TERMINAL
            if d.outcome is SettleKind.OWN_ABORT_AFTER_SEND:
                led.own_abort = True
            else:
                led.lost = True
        self._total += d.charged - permit.hold_units
        permit.state = _State.CLOSED
        permit.charged_units = d.charged
        if d.state is HoldState.INTEGRITY and d.code is not None:
            self.stop(d.code)

