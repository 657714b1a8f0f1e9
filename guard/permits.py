"""The permit protocol: the values that cross it and the interface a source implements.

The guard asks a *permit source* before it may spend:

    admit(AdmitRequest)            -> Permit | Refusal   (a hold exists iff a Permit)
    consume(Permit, body_digest)   -> None               (once, just before the send)
    settle(Permit, Settlement, UsageRecord | None, tier | None) -> None   (once)
    stop(Code)                     -> None               (sticky stop of the whole run)

All calls are synchronous: the guard runs inside the probe child, which has no event
loop. The durable source lives in the controller on the far side of lockstep IPC (the
child's implementation sends Admit/Consume/Settle and blocks for the reply), so every
value here is a small frozen msgspec Struct of ints and strings that travels as is.

Invariant: no value here can hold a request body, response text or credential. Usage
is an allowlist of numeric counts; a tier is one of a closed set or ``None`` (an
unknown tier is redacted to ``None`` and reported by its fixed code).

Outcome table (what settlement does to the hold):

=====================  =========================================  =========================
outcome                hold                                       run
=====================  =========================================  =========================
refused_pre_send       none for this request (never settled)      capacity/terminal refusals
                                                                  continue; policy stops
own_abort_after_send   retained as lost                           continues; slot terminal
settled                replaced by the actual catalog cost        continues
lost                   retained (incl. admitted, failed pre-send) continues; slot terminal
integrity_stop         retained                                   sticky stop of the run
=====================  =========================================  =========================
"""

from __future__ import annotations

import enum
from typing import Final, Protocol, runtime_checkable

import msgspec

from efold.errors import Code
from efold.guard.errors import GuardError

PERMIT_PROTOCOL_VERSION: Final = "efold-permit-v1"
# Every usage count must be an int in [0, USAGE_COUNT_LIMIT): a larger figure (a u64
# "-1" sentinel, 1e29) is invalid usage, refused before anything prices it. 2^53 keeps
# every count exact in any JSON reader and every priced partial far inside SQLite's i64.
USAGE_COUNT_LIMIT: Final = 2**53

# Refusal codes after which the probe run (and the campaign) may go on (docs/architecture.md §11).
CONTINUABLE_CODES: Final = frozenset({
    Code.NOT_ADMITTED_INPUT_ENVELOPE,
    Code.LOOKUP_REQUEST_LIMIT,
    Code.NOT_ADMITTED_CAP,
    Code.LOOKUP_STOPPED,
    Code.LOOKUP_SLOT_TERMINAL,
})

# Codes a guard on the far side of the protocol (a probe child) may report, in Settle
# or Terminal. Invariant: an explicit allowlist, so a code added later is refused as
# ``child_code_forbidden`` until someone decides a child may claim it.
CHILD_REPORTABLE_CODES: Final = CONTINUABLE_CODES | frozenset({
    # losses: the request may have cost money, the probe run is over
    Code.LOOKUP_RESPONSE_FAILED, Code.LOOKUP_STREAM_LOST, Code.LOOKUP_MISSING_USAGE,
    Code.LOOKUP_HTTP_STATUS, Code.LOOKUP_SEND_FAILED, Code.LOOKUP_REQUEST_DEADLINE,
    Code.LOOKUP_RESPONSE_TOO_LARGE,
    # integrity outcomes the guard decides from the response or its own checks
    Code.LOOKUP_UNKNOWN_TIER, Code.LOOKUP_INVALID_USAGE, Code.LOOKUP_USAGE_INPUT_ABOVE_ADMITTED,
    Code.LOOKUP_USAGE_OUTPUT_ABOVE_MAX, Code.LOOKUP_USAGE_REASONING_ABOVE_OUTPUT,
    Code.LOOKUP_USAGE_CACHE_ABOVE_INPUT, Code.LOOKUP_USAGE_INPUT_BELOW_PAYLOAD,
    Code.LOOKUP_COST_EXCEEDS_HOLD, Code.LOOKUP_RESPONSE_DUPLICATE_KEY,
    Code.LOOKUP_MODEL_SWITCH_FORBIDDEN, Code.LOOKUP_MODEL_UNREPORTED, Code.LOOKUP_BODY_MISMATCH, Code.LOOKUP_SEND_REENTERED,
    Code.LOOKUP_REDIRECT_FORBIDDEN, Code.LOOKUP_UNGUARDED_DISPATCH, Code.LOOKUP_ROUTE_MISMATCH,
    Code.LOOKUP_HOLD_MISMATCH, Code.LOOKUP_HOLD_UNVERIFIED, Code.LOOKUP_SETTLE_FAILED,
    Code.LOOKUP_STOP_FAILED,
    # policy violations of the caller's payload (refused before any hold)
    Code.LOOKUP_PAYLOAD_FORBIDDEN, Code.LOOKUP_OPTION_FORBIDDEN, Code.LOOKUP_TOOLS_FORBIDDEN,
    Code.LOOKUP_PROMPT_CACHE_KEY_FORBIDDEN, Code.LOOKUP_CACHE_ASSIGNMENT_INVALID,
    Code.LOOKUP_EXTERNAL_FETCH_FORBIDDEN, Code.LOOKUP_METHOD_FORBIDDEN,
    Code.LOOKUP_RETRY_PROFILE_FORBIDDEN, Code.LOOKUP_AUXILIARY_CALLERS_FORBIDDEN,
    Code.LOOKUP_NATIVE_IDENTITY_FORBIDDEN, Code.LOOKUP_PREPARATION_FORBIDDEN,
    # a reply the reader could not use
    Code.LOOKUP_EMPTY_FINAL_OUTPUT,
})


def child_code(code: Code | None, *, integrity: bool) -> Code | None:
    """A code a child reported, as the controller records it: an allowlisted code
    passes; anything else, a continuable refusal code claimed as an integrity stop, or
    no code on an integrity stop becomes ``child_code_forbidden``."""
    if code is None:
        return Code.CHILD_CODE_FORBIDDEN if integrity else None
    if code not in CHILD_REPORTABLE_CODES or (integrity and code in CONTINUABLE_CODES):
        return Code.CHILD_CODE_FORBIDDEN
    return code


class OutcomeKind(enum.StrEnum):
    REFUSED_PRE_SEND = "refused_pre_send"
    OWN_ABORT_AFTER_SEND = "own_abort_after_send"
    SETTLED = "settled"
    LOST = "lost"
    INTEGRITY_STOP = "integrity_stop"


class AdmitRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Ask for a hold of ``rmax_units`` for one request of this probe run."""

    request_id: str  # unique per probe run, e.g. "<run_id>-r3"
    round: int  # 1-based request number within the probe run
    payload_digest: str  # sha256 hex of the exact body that will be sent
    rmax_units: int


class Permit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A granted hold. Opaque to the guard except for the amount it may cost."""

    permit_id: str
    hold_units: int


class Refusal(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """No hold: the request must not be sent."""

    code: Code


class UsageRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Provider-reported counts, exactly as reported. An optional detail the provider
    did not report stays ``None`` (absent), never 0. ``input`` includes cache reads and
    writes; ``reasoning`` is included in ``output``."""

    input: int
    output: int
    cache_read: int | None = None
    cache_write: int | None = None
    reasoning: int | None = None

    def counts(self) -> dict[str, int]:
        """The reported counts as a mapping, absent details omitted."""
        return {k: v for k, v in msgspec.structs.asdict(self).items() if v is not None}


class Settlement(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """What happened to an admitted request. ``cost_units`` is the actual cost when
    settled, else the independently priced known partial (``None`` when usage is
    missing or unpriceable). ``http_status`` is set when the provider answered
    with a status other than 2xx."""

    kind: OutcomeKind
    code: Code | None = None
    cost_units: int | None = None
    http_status: int | None = None


@runtime_checkable
class PermitSource(Protocol):
    """Where holds come from. Implementations: the controller's durable source (behind
    IPC) and, for tests only, ``TestOnlyPermitSource``.

    Contract for implementers: persist a hold before granting it; consume a permit at
    most once and only with the admitted digest; settle at most once; after ``stop``
    (or any integrity settlement) refuse admission with ``lookup_stopped`` forever;
    retain holds of lost and integrity outcomes. Failures raise an ``EfoldError``.
    """

    def admit(self, request: AdmitRequest) -> Permit | Refusal: ...

    def consume(self, permit: Permit, body_digest: str) -> None: ...

    def settle(
        self, permit: Permit, outcome: Settlement, usage: UsageRecord | None, tier: str | None
    ) -> None: ...

    def stop(self, code: Code) -> None: ...


# The protocol's methods, read once from its class.
_SOURCE_METHODS: Final = tuple(name for name, value in vars(PermitSource).items()
                               if callable(value) and not name.startswith("_"))


def is_permit_source(source: object) -> bool:
    """``isinstance(source, PermitSource)`` as the runtime check decides it (every method
    of the protocol present and not None), without its walk of the protocol's classes at
    every call (on Python 3.11 about 0.25 ms, twice in every worker)."""
    return all(getattr(source, name, None) is not None for name in _SOURCE_METHODS)


def assert_real_source(source: object) -> None:
    """Refuse a test-only (or not-a-source) object where a real permit source is
    required. A brand is not an authorization: the real route validates that
    separately; this only keeps the in-memory source off it."""
    if not is_permit_source(source):
        raise GuardError(Code.LOOKUP_PERMIT_INVALID, "not a permit source")
    if getattr(source, "test_only", False) is not False or str(
        getattr(source, "brand", "")
    ).endswith("test-only-v1"):
        raise GuardError(Code.LOOKUP_TEST_ONLY_SOURCE, "test-only permit source")
