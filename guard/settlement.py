"""Settlement: from what came back to an outcome kind, a code and a cost (DESIGN §5).

Pure functions, no I/O. The rules, in order:

1. A reported tier outside {default, flex, priority} is an integrity stop
   (``lookup_unknown_tier``) whatever else happened, failed responses included; the
   tier is redacted to ``None`` in the record. An absent tier prices at ×2.
2. A failed response / error event: lost (``lookup_response_failed``).
   No terminal event (stream cut, unreadable stream): lost (``lookup_stream_lost``).
3. A completed or incomplete response settles only with integer input ≥ 1 and
   output ≥ 0. No usage: lost (``lookup_missing_usage``). Malformed usage or zero
   input: integrity (``lookup_invalid_usage``).
4. Integrity stops that falsify the registered assumptions: input > U_k, output > O,
   reasoning > output, cache read + cache write > input, catalog cost > hold.
5. Otherwise settled: the hold is replaced by the catalog cost.

Lost and integrity outcomes still carry the independently priced *known partial* cost
when the reported usage can be priced (the controller retains max(hold, partial)).
"""

from __future__ import annotations

from dataclasses import dataclass

from efold.errors import Code
from efold.guard.catalog import CatalogEntry
from efold.guard.contract import Contract
from efold.guard.errors import GuardError, OwnAbort, TransportFailure
from efold.guard.money import TIER_MULTIPLIERS
from efold.guard.permits import OutcomeKind, Settlement, UsageRecord
from efold.guard.pricing import price_units
from efold.guard.wire.outcome import Terminal, WireOutcome

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


def _partial(entry: CatalogEntry, usage: UsageRecord | None, tier: str | None) -> int | None:
    if usage is None:
        return None
    try:
        return price_units(entry, usage.counts(), tier)
    except GuardError:
        return None  # e.g. cache above input: no meaningful partial


def settle_wire(
    outcome: WireOutcome,
    *,
    hold_units: int,
    input_budget: int,
    contract: Contract,
    entry: CatalogEntry,
) -> Decision:
    """Decide the outcome of a response that arrived with a 2xx status."""
    usage = outcome.usage
    tier = outcome.tier
    if tier is not None and tier not in TIER_MULTIPLIERS:
        return Decision(OutcomeKind.INTEGRITY_STOP, Code.LOOKUP_UNKNOWN_TIER,
                        _partial(entry, usage, None), usage, None)
    if outcome.terminal is Terminal.FAILED:
        return Decision(OutcomeKind.LOST, Code.LOOKUP_RESPONSE_FAILED,
                        _partial(entry, usage, tier), usage, tier)
    if outcome.terminal is Terminal.NONE:
        return Decision(OutcomeKind.LOST, Code.LOOKUP_STREAM_LOST,
                        _partial(entry, usage, tier), usage, tier)
    if outcome.usage_invalid:
        return Decision(OutcomeKind.INTEGRITY_STOP, Code.LOOKUP_INVALID_USAGE, None, None, tier)
    if usage is None:
        return Decision(OutcomeKind.LOST, Code.LOOKUP_MISSING_USAGE, None, None, tier)
    violation = usage_violation(usage, input_budget=input_budget, max_output=contract.max_output)
    if violation is not None:
        return Decision(OutcomeKind.INTEGRITY_STOP, violation, _partial(entry, usage, tier),
                        usage, tier)
    cost = price_units(entry, usage.counts(), tier)
    if cost > hold_units:
        return Decision(OutcomeKind.INTEGRITY_STOP, Code.LOOKUP_COST_EXCEEDS_HOLD, cost, usage,
                        tier)
    return Decision(OutcomeKind.SETTLED, None, cost, usage, tier)


def usage_violation(usage: UsageRecord, *, input_budget: int, max_output: int) -> Code | None:
    """The first registered-assumption check the reported usage fails, if any."""
    if usage.input < 1 or usage.output < 0:
        return Code.LOOKUP_INVALID_USAGE
    if usage.input > input_budget:
        return Code.LOOKUP_USAGE_INPUT_ABOVE_ADMITTED
    if usage.output > max_output:
        return Code.LOOKUP_USAGE_OUTPUT_ABOVE_MAX
    if (usage.reasoning or 0) > usage.output:
        return Code.LOOKUP_USAGE_REASONING_ABOVE_OUTPUT
    if (usage.cache_read or 0) + (usage.cache_write or 0) > usage.input:
        return Code.LOOKUP_USAGE_CACHE_ABOVE_INPUT
    return None


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
