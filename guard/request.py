"""The guarded request: the only way a probe run reaches a model.

``Guard(contract, catalog_entry, permit_source, transport).request(payload)`` runs,
for every request of one probe run (docs/architecture.md §5):

    entry latch → sticky stop / terminal checks → caller options → serialize, detach
    and allowlist → request limit → U_k → digest → admit → the granted hold equals our
    own Rmax (``lookup_hold_mismatch``) → re-serialize and compare with the admitted
    body (``lookup_body_mismatch``) → consume → ONE send → incremental parse, stopping
    at the terminal event → settle (→ stop)

and returns a ``GuardResult``; refusals and losses are results, not exceptions.
Exceptions escape only for faults that are nobody's rule: a permit source that fails
to admit (the IPC channel broke; the guard is then stopped), or a bug in a transport
(the request is first settled as lost).

Sticky state. Invariant: the fields below change only while ``_entry`` is held, so one
request at a time owns them; a second, overlapping entry never sends:

- ``_stopped``: after any policy violation or integrity outcome, every later request
  refuses ``lookup_stopped`` without asking for a hold;
- ``_terminal``: after a loss or own abort the probe run is over: later requests refuse
  ``lookup_slot_terminal`` without a hold (and without stopping the run);
- ``_admitted`` and ``_prior_output`` feed the request limit and U_k.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Mapping
from typing import Any

import msgspec

from efold.errors import Code, EfoldError
from efold.guard.accounting import input_budget
from efold.guard.catalog import CatalogEntry
from efold.guard.contract import INPUT_ENVELOPE, Contract
from efold.guard.errors import GuardError, OwnAbort, PolicyViolation, TransportFailure
from efold.guard.options import check_options
from efold.guard.permits import (
    AdmitRequest,
    OutcomeKind,
    Permit,
    PermitSource,
    Refusal,
    UsageRecord,
    is_permit_source,
)
from efold.guard.pricing import rmax_units
from efold.guard.settlement import (
    Decision,
    settle_http_status,
    settle_transport_failure,
    settle_wire,
)
from efold.guard.transport import Transport, WireRequest, WireResponse, mint_ticket
from efold.guard.wire.failure import ERROR_BODY_BYTES, HttpFailure, read_failure
from efold.guard.wire.formats import wire_format

DEFAULT_DEADLINE_S = 120.0
# Codes a failing consume may carry that mean "the permit itself is wrong", not "lost".
_INTEGRITY_CONSUME_CODES = frozenset({
    Code.LOOKUP_BODY_MISMATCH, Code.LOOKUP_SEND_REENTERED, Code.LOOKUP_PERMIT_INVALID,
    Code.LOOKUP_HOLD_UNVERIFIED,
})


class GuardResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one ``Guard.request``. ``output_items`` are the response's
    Responses-shaped output items (empty unless sent); everything else is content-free.
    ``stop_code``/``settle_code`` report a failure to *tell* the permit source (the
    original ``code`` is preserved)."""

    outcome: OutcomeKind
    code: Code | None = None
    round: int
    sent: bool = False
    status: str | None = None  # wire terminal when a 2xx response was parsed
    output_items: list[dict[str, Any]] = []
    usage: UsageRecord | None = None
    tier: str | None = None
    cost_units: int | None = None
    hold_units: int | None = None
    input_budget: int | None = None  # U_k, when computed
    http_status: int | None = None
    # A non-2xx answer's kind and sanitised excerpt (``guard.wire.failure``): evidence.
    http_failure: HttpFailure | None = None
    stop_code: Code | None = None
    settle_code: Code | None = None

    @property
    def ok(self) -> bool:
        """Settled: the reply may be used and the probe run may send another request."""
        return self.outcome is OutcomeKind.SETTLED


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _error_body(response: WireResponse) -> bytes:
    """At most ``ERROR_BODY_BYTES`` of a non-2xx body, read under the request's
    deadline like any body; whatever ends the read early leaves what came before it."""
    body = bytearray()
    try:
        for chunk in response.chunks():
            body += chunk
            if len(body) >= ERROR_BODY_BYTES:
                break
    except TransportFailure:
        pass
    return bytes(body[:ERROR_BODY_BYTES])


def _encode(payload: Any) -> bytes:
    try:
        return msgspec.json.encode(payload)
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
        raise PolicyViolation(Code.LOOKUP_PAYLOAD_FORBIDDEN, "payload is not JSON") from exc


class Guard:
    """One probe run's guard. Not reusable across probe runs (its limits are per run)."""

    def __init__(
        self,
        contract: Contract,
        catalog_entry: CatalogEntry,
        permit_source: PermitSource,
        transport: Transport,
        *,
        run_id: str | None = None,
        deadline_s: float = DEFAULT_DEADLINE_S,
    ) -> None:
        if (catalog_entry.provider, catalog_entry.model) != (contract.provider, contract.model):
            raise GuardError(Code.LOOKUP_ROUTE_MISMATCH, "catalog entry is for another model")
        if contract.input_envelope != catalog_entry.input_envelope(INPUT_ENVELOPE):
            # I is the registered one, tightened by the model's context window: never wider
            # than the model takes, never narrower than the catalog says (Rmax follows I).
            raise GuardError(Code.LOOKUP_ROUTE_MISMATCH, "input envelope is not the model's")
        if getattr(transport, "route", None) != contract.base_url:
            raise GuardError(Code.LOOKUP_ROUTE_MISMATCH, "transport route differs from contract")
        if not is_permit_source(permit_source):
            raise GuardError(Code.LOOKUP_PERMIT_INVALID, "not a permit source")
        if deadline_s <= 0:
            raise ValueError("deadline_s must be > 0")
        self.contract = contract
        self.run_id = run_id or secrets.token_hex(8)
        self._entry_rates = catalog_entry
        self._source = permit_source
        self._transport = transport
        self._wire = wire_format(contract.api)
        self._deadline_s = deadline_s
        self.rmax_units = rmax_units(catalog_entry, contract.input_envelope, contract.max_output)
        self._entry = threading.Lock()
        self._admitted = 0
        self._prior_output = 0
        self._stopped: Code | None = None
        self._terminal: Code | None = None
        self._pending_stop: Code | None = None  # set by an overlapping entry

    # -- observable state ------------------------------------------------------------

    @property
    def admitted(self) -> int:
        return self._admitted

    @property
    def prior_output_tokens(self) -> int:
        return self._prior_output

    @property
    def stopped(self) -> Code | None:
        return self._stopped

    @property
    def terminal(self) -> Code | None:
        return self._terminal

    # -- the request -----------------------------------------------------------------

    def request(
        self, payload: Mapping[str, Any], options: Mapping[str, object] | None = None
    ) -> GuardResult:
        """Send ``payload`` (in the contract's wire format) at most once, under a permit."""
        if not self._entry.acquire(blocking=False):
            return self._overlapping_entry()
        try:
            return self._request(payload, options)
        finally:
            self._flush_pending_stop()
            self._entry.release()

    def _overlapping_entry(self) -> GuardResult:
        # Another request is in flight (another thread, or a callback re-entering).
        # Never send; stop the run. The stop is delivered by the in-flight request when
        # it ends, so the permit source is never called concurrently (IPC is lockstep).
        code = Code.LOOKUP_SEND_REENTERED
        self._stopped = self._stopped or code
        self._pending_stop = code
        if self._entry.acquire(blocking=False):  # it ended meanwhile: deliver it here
            try:
                self._flush_pending_stop()
            finally:
                self._entry.release()
        return GuardResult(outcome=OutcomeKind.INTEGRITY_STOP, code=code, round=0)

    def _flush_pending_stop(self) -> None:
        code, self._pending_stop = self._pending_stop, None
        if code is not None:
            self._tell_stop(code)

    def _refused(self, code: Code, round: int, **fields: Any) -> GuardResult:
        return GuardResult(outcome=OutcomeKind.REFUSED_PRE_SEND, code=code, round=round, **fields)

    def _request(self, payload: Mapping[str, Any], options: Mapping[str, object] | None
                 ) -> GuardResult:
        round = self._admitted + 1
        if self._stopped is not None:
            return self._refused(Code.LOOKUP_STOPPED, round)
        if self._terminal is not None:
            return self._refused(Code.LOOKUP_SLOT_TERMINAL, round)
        try:
            check_options(options)
            body = _encode(payload)
            # Check exactly what will be sent, detached from the caller's objects.
            shape = self._wire.check(msgspec.json.decode(body), self.contract,
                                     first_request=self._admitted == 0)
        except PolicyViolation as exc:
            self._stopped = exc.code
            return self._refused(exc.code, round, stop_code=self._tell_stop(exc.code))
        if round > self.contract.max_requests:
            return self._refused(Code.LOOKUP_REQUEST_LIMIT, round)
        budget = input_budget(len(body), self._prior_output, shape)
        if budget > self.contract.input_envelope:
            return self._refused(Code.NOT_ADMITTED_INPUT_ENVELOPE, round, input_budget=budget)
        digest = _sha256(body)
        request = AdmitRequest(request_id=f"{self.run_id}-r{round}", round=round,
                               payload_digest=digest, rmax_units=self.rmax_units)
        try:
            answer = self._source.admit(request)
        except BaseException:
            self._stopped = self._stopped or Code.LOOKUP_STOPPED
            raise
        if isinstance(answer, Refusal):
            if answer.code is Code.LOOKUP_STOPPED:
                self._stopped = answer.code
            elif answer.code is Code.LOOKUP_SLOT_TERMINAL:
                self._terminal = answer.code
            return self._refused(answer.code, round, input_budget=budget)
        if not isinstance(answer, Permit):
            self._stopped = Code.LOOKUP_PERMIT_INVALID
            raise GuardError(Code.LOOKUP_PERMIT_INVALID, "admit returned neither permit nor refusal")
        self._admitted = round
        return self._send(answer, payload, body, digest, budget, round)

    def _send(self, permit: Permit, payload: Mapping[str, Any], admitted: bytes, digest: str,
              budget: int, round: int) -> GuardResult:
        facts: dict[str, Any] = {"round": round, "input_budget": budget,
                                 "hold_units": permit.hold_units}
        if permit.hold_units != self.rmax_units:
            # Our own arithmetic, independent of the source: a hold that is not exactly
            # Rmax cannot be trusted to cover the worst case (nor be the registered one).
            return self._close(permit, Decision(OutcomeKind.INTEGRITY_STOP,
                                                Code.LOOKUP_HOLD_MISMATCH), facts)
        # Serialize again from the caller's object: a payload changed since it was
        # admitted (a hook, another thread) must not go out under this permit. Comparing
        # with the retained admitted bytes is the digest comparison without a second hash
        # (equal bytes have the admitted digest; it also rules out collisions).
        try:
            body = _encode(payload)
        except PolicyViolation:
            body = b""
        if body != admitted:
            return self._close(permit, Decision(OutcomeKind.INTEGRITY_STOP,
                                                Code.LOOKUP_BODY_MISMATCH), facts)
        try:
            self._source.consume(permit, digest)
        except EfoldError as exc:
            kind = (OutcomeKind.INTEGRITY_STOP if exc.code in _INTEGRITY_CONSUME_CODES
                    else OutcomeKind.LOST)  # admitted but never sent: conservatively lost
            return self._close(permit, Decision(kind, exc.code), facts)
        facts["sent"] = True
        try:
            # Built from the wire format only: its path, stream setting, credential
            # scheme and non-secret headers (from the admitted payload, decoded again).
            request = WireRequest(path=self._wire.path, body=body,
                                  stream=self._wire.streams(self.contract),
                                  deadline_s=self._deadline_s,
                                  headers=self._wire.headers(msgspec.json.decode(body)),
                                  auth=self._wire.auth)
            decision, status, items, failure = self._exchange(permit, request, budget)
        except Exception:
            self._close(permit, Decision(OutcomeKind.LOST, Code.LOOKUP_STREAM_LOST), facts)
            raise
        facts.update(status=status, output_items=items, http_failure=failure)
        return self._close(permit, decision, facts)

    def _exchange(self, permit: Permit, request: WireRequest, budget: int
                  ) -> tuple[Decision, str | None, list[dict[str, Any]], HttpFailure | None]:
        started = time.monotonic()
        try:
            response = self._transport.open(mint_ticket(permit.permit_id), request)
        except TransportFailure as exc:
            return settle_transport_failure(exc), None, [], None
        except GuardError as exc:  # a ticket refused (re-entered, unguarded): never sent
            return Decision(OutcomeKind.INTEGRITY_STOP, exc.code), None, [], None
        try:
            if not 200 <= response.status < 300:
                # Why, as evidence only (the status alone decides the outcome).
                failure = read_failure(response.status, _error_body(response), request.body)
                return settle_http_status(response.status), None, [], failure
            parser = self._wire.parser(request.stream)
            for chunk in response.chunks():
                parser.feed(chunk)
                if parser.done:
                    break  # settle on the terminal event; nothing after it is read
                if time.monotonic() - started > self._deadline_s:
                    raise OwnAbort(Code.LOOKUP_REQUEST_DEADLINE, "response past deadline")
            wire = parser.finish()
        except TransportFailure as exc:
            return settle_transport_failure(exc), None, [], None
        finally:
            response.close()
        decision = settle_wire(wire, hold_units=permit.hold_units, input_budget=budget,
                               payload_bytes=len(request.body), contract=self.contract,
                               entry=self._entry_rates)
        return decision, wire.terminal.value, wire.output_items, None

    def _close(self, permit: Permit, decision: Decision, facts: dict[str, Any]) -> GuardResult:
        """Settle the permit, update the sticky state, stop the run if the outcome says so."""
        settle_code: Code | None = None
        try:
            self._source.settle(permit, decision.settlement(), decision.usage, decision.tier)
        except EfoldError:
            settle_code = Code.LOOKUP_SETTLE_FAILED
        stop_code: Code | None = None
        if decision.kind is OutcomeKind.SETTLED and decision.usage is not None:
            self._prior_output += decision.usage.output
        elif decision.kind in (OutcomeKind.LOST, OutcomeKind.OWN_ABORT_AFTER_SEND):
            self._terminal = decision.code or Code.LOOKUP_SLOT_TERMINAL
        if decision.kind is OutcomeKind.INTEGRITY_STOP:
            code = decision.code or Code.LOOKUP_STOPPED
            self._stopped = self._stopped or code
            stop_code = self._tell_stop(code)
        elif settle_code is not None:
            # The source does not know how this request ended: nothing more may be admitted.
            self._stopped = self._stopped or settle_code
            stop_code = self._tell_stop(settle_code)
        if decision.kind is not OutcomeKind.SETTLED:
            facts.pop("output_items", None)  # a reply that did not settle is not usable
        return GuardResult(
            outcome=decision.kind, code=decision.code, usage=decision.usage, tier=decision.tier,
            cost_units=decision.cost_units, http_status=decision.http_status,
            stop_code=stop_code, settle_code=settle_code, **facts,
        )

    def _tell_stop(self, code: Code) -> Code | None:
        """Tell the source to stop the run; ``lookup_stop_failed`` if that failed."""
        try:
            self._source.stop(code)
        except EfoldError:
            return Code.LOOKUP_STOP_FAILED
        return None
