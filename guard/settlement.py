"""Settlement: from what came back to an outcome kind, a code and a cost (docs/architecture.md §5).

Pure functions, no I/O. The rules, in order (every integrity outcome is a sticky stop
of the run with the hold retained):

1. Integrity, on *every* outcome that reports it, failed and cut streams included:
   - a body or event in which an object repeats a key: ``lookup_response_duplicate_key``
     (nothing of it was read: no usage, no cost);
   - a tier outside {default, flex, priority}: ``lookup_unknown_tier`` (the tier is
     redacted to ``None`` in the record); an absent tier prices at ×2 when the catalog
     entry has service tiers, ×1 when it says it has none;
   - usage that is malformed, conflicting (a ``total_tokens`` that is not the sum of
     its parts included), out of range (not an int in [0, 2^53)) or breaks the
     registered assumptions (input > U_k, input × 64 < the admitted payload's bytes,
     output > O, reasoning > output, cache read + write > input):
     ``lookup_invalid_usage`` or the specific ``lookup_usage_*`` code, decided *before*
     anything is priced;
   - a model other than the contracted one or a dated snapshot the catalog lists for
     it, or two differing model readings: ``lookup_model_switch_forbidden``; a
     completed or incomplete response that names no model where its wire format always
     does: ``lookup_model_unreported``;
   - a catalog cost above the hold: ``lookup_cost_exceeds_hold``.
2. A failed response / error event: lost (``lookup_response_failed``). No terminal
   event (stream cut, unreadable stream): lost (``lookup_stream_lost``).
3. A completed or incomplete response settles only with integer input ≥ 1 and
   output ≥ 0; no usage: lost (``lookup_missing_usage``).
4. Otherwise settled: the hold is replaced by the catalog cost.

Lost and integrity outcomes carry the independently priced *known partial* cost when
the reported usage passed the checks (so it is bounded by Rmax); the controller retains
max(hold, partial).
"""

from __future__ import annotations

from dataclasses import dataclass

from efold.errors import Code
from efold.guard.catalog import CatalogEntry
from efold.guard.contract import Contract
from efold.guard.errors import OwnAbort, TransportFailure
from efold.guard.money import TIER_MULTIPLIERS
from efold.guard.permits import OutcomeKind, Settlement, UsageRecord
from efold.guard.pricing import price_units
from efold.guard.usage import usage_problem
from efold.guard.wire.outcome import StreamEnd, WireOutcome

_STOP_STATUSES = frozenset({401, 403, 429})  # account/credential/usage-limit faults


@dataclass(frozen=True)
class Decision:
    kind: OutcomeKind
    code: Code | None
    cost_units: int | None = None
    usage: UsageRecord | None = None
    tier: str | None = None  # as reported, or None when absent or unknown (redacted)
    http_status: int | None = None

    def settlement(self) -> Settlement:
        return Settlement(kind=self.kind, code=self.code, cost_units=self.cost_units,
                          http_status=self.http_status)


def settle_wire(
    outcome: WireOutcome,
    *,
    hold_units: int,
    input_budget: int,
    payload_bytes: int,
    contract: Contract,
    entry: CatalogEntry,
) -> Decision:
    """Decide the outcome of a response that arrived with a 2xx status to a request
    whose admitted payload was ``payload_bytes`` long."""
    if outcome.duplicate_key:
        return Decision(OutcomeKind.INTEGRITY_STOP, Code.LOOKUP_RESPONSE_DUPLICATE_KEY)
    usage = outcome.usage
    settling = outcome.terminal in (StreamEnd.COMPLETED, StreamEnd.INCOMPLETE)
    tier = outcome.tier if outcome.tier is None or outcome.tier in TIER_MULTIPLIERS else None
    problem: Code | None = Code.LOOKUP_INVALID_USAGE if outcome.usage_invalid else None
    if problem is None and usage is not None:
        problem = usage_problem(usage.counts(), input_limit=input_budget,
                                max_output=contract.max_output, payload_bytes=payload_bytes,
                                settling=settling)
    cost = price_units(entry, usage.counts(), tier) if usage is not None and not problem \
        else None
    checked = usage if problem is None else None
    integrity: Code | None = None
    if outcome.tier is not None and outcome.tier not in TIER_MULTIPLIERS:
        integrity = Code.LOOKUP_UNKNOWN_TIER
    elif problem is not None:
        integrity = problem
    elif outcome.model_conflict or (outcome.model is not None
                                    and not entry.accepts_model(outcome.model)):
        integrity = Code.LOOKUP_MODEL_SWITCH_FORBIDDEN
    elif settling and outcome.model is None and outcome.model_required:
        integrity = Code.LOOKUP_MODEL_UNREPORTED
    elif cost is not None and cost > hold_units:
        integrity = Code.LOOKUP_COST_EXCEEDS_HOLD
    if integrity is not None:
        return Decision(OutcomeKind.INTEGRITY_STOP, integrity, cost, checked, tier)
    if outcome.terminal is StreamEnd.FAILED:
        return Decision(OutcomeKind.LOST, Code.LOOKUP_RESPONSE_FAILED, cost, checked, tier)
    if outcome.terminal is StreamEnd.NONE:
        return Decision(OutcomeKind.LOST, Code.LOOKUP_STREAM_LOST, cost, checked, tier)
    if usage is None or cost is None:
        return Decision(OutcomeKind.LOST, Code.LOOKUP_MISSING_USAGE, None, None, tier)
    return Decision(OutcomeKind.SETTLED, None, cost, usage, tier)


def settle_http_status(status: int) -> Decision:
    """A non-2xx answer. Redirects and 401/403/429 stop the run (they would repeat for
    every slot, or mean the route is not what was registered); any other status loses
    this request and ends the probe run."""
    if 300 <= status < 400:
        return Decision(OutcomeKind.INTEGRITY_STOP, Code.LOOKUP_REDIRECT_FORBIDDEN,
                        http_status=status)
    if status in _STOP_STATUSES:
        return Decision(OutcomeKind.INTEGRITY_STOP, Code.LOOKUP_HTTP_STATUS, http_status=status)
    return Decision(OutcomeKind.LOST, Code.LOOKUP_HTTP_STATUS, http_status=status)


def settle_transport_failure(failure: TransportFailure) -> Decision:
    """The send failed: an own abort keeps the hold as an abort, anything else as lost."""
    if isinstance(failure, OwnAbort):
        return Decision(OutcomeKind.OWN_ABORT_AFTER_SEND, failure.code)
    return Decision(OutcomeKind.LOST, failure.code)
