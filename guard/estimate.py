"""The expected-cost scenario E of one slot, in exact arithmetic (no model call).

The registered scenario (reference, "Cap-gated pilot artifacts"): two lookups, half
the returned-byte budget, half cached input, three rounds of up to 300 output tokens
and 900 input allowance tokens per round, at the default service tier. It is a
planning figure, not measured usage, and not an invoice.

What the reference leaves open, decided here (and bound into the policy digest through
``EstimateScenario``):

- Rounds are requests of one growing conversation. Round ``k`` (1-based) sends
  ``initial + 900·k + Σ returned lookup tokens so far + Σ output of earlier rounds``
  input tokens: each round adds its 900-token allowance, every earlier round's output
  is replayed, and the returned lookup text stays in the conversation.
- Lookup ``j`` is issued by round ``j`` and its result first appears in round ``j+1``;
  the returned bytes (half of the 126,976-byte budget = 63,488) are split evenly
  between the two lookups and counted as one token per UTF-8 byte: the registered
  assumption "literal input tokens ≤ UTF-8 bytes", so E never undercounts them.
- ``initial`` is the reader-visible context of the first request in tokens; the
  scenario itself names none, so it defaults to 0 and a planner that knows the
  checkpoint's size may pass it.
- Half of each round's input is priced as cache reads and half as uncached input
  (exactly: no rounding until the end); output at the output rate; tier default ×1.
  Each round is priced at the catalog's input-size tier its whole input count reaches
  (cached half included), as settlement would price that request.
- The sum over rounds is rounded up to a whole unit once.

A request on its own (a summary, a compaction, a judge's scoring: ``request_scenario``)
is the same formula with one round, no lookup and no allowance: its input is the
``initial`` count the caller derives, none of it cached (it is the first request of its
own conversation, so no earlier one could have cached a prefix; never under), and its
output the caller's allowance. ``expected_request_units`` prices one such request.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from efold.guard.catalog import Catalog, CatalogEntry, bundled_catalog
from efold.guard.money import ceil_units, tier_multiplier


@dataclass(frozen=True)
class EstimateScenario:
    lookups: int = 2
    returned_byte_budget: int = 126_976
    returned_share: Fraction = Fraction(1, 2)
    cached_share: Fraction = Fraction(1, 2)
    rounds: int = 3
    output_tokens_per_round: int = 300
    input_allowance_per_round: int = 900
    tokens_per_returned_byte: int = 1
    tier: str = "default"


ASSUMED_SCENARIO: Final = EstimateScenario()


@dataclass(frozen=True)
class RoundUsage:
    """One round's expected tokens; ``cached`` is exact (half of ``input`` may be odd)."""

    input: int
    cached: Fraction
    output: int


def expected_rounds(
    initial_input_tokens: int = 0, scenario: EstimateScenario = ASSUMED_SCENARIO
) -> list[RoundUsage]:
    """The expected usage of each round of one slot."""
    if initial_input_tokens < 0:
        raise ValueError("initial_input_tokens must be >= 0")
    returned_tokens = (
        Fraction(scenario.returned_byte_budget) * scenario.returned_share
        * scenario.tokens_per_returned_byte
    )
    per_lookup = returned_tokens / scenario.lookups if scenario.lookups else Fraction(0)
    rounds: list[RoundUsage] = []
    for k in range(1, scenario.rounds + 1):
        delivered = min(k - 1, scenario.lookups) * per_lookup
        replayed = (k - 1) * scenario.output_tokens_per_round
        exact_input = (
            initial_input_tokens + scenario.input_allowance_per_round * k + delivered + replayed
        )
        # A token count is whole; a fractional lookup share rounds up (never under).
        tokens = ceil_units(Fraction(exact_input))
        rounds.append(RoundUsage(
            input=tokens,
            cached=tokens * scenario.cached_share,
            output=scenario.output_tokens_per_round,
        ))
    return rounds


def request_scenario(output_tokens: int, tier: str = "default") -> EstimateScenario:
    """The scenario of one request on its own: one round, no lookups, no per-round
    allowance, nothing cached, ``output_tokens`` of output."""
    if output_tokens < 0:
        raise ValueError("output_tokens must be >= 0")
    return EstimateScenario(lookups=0, rounds=1, output_tokens_per_round=output_tokens,
                            input_allowance_per_round=0, cached_share=Fraction(0), tier=tier)


def expected_cost_units(
    entry: CatalogEntry,
    initial_input_tokens: int = 0,
    scenario: EstimateScenario = ASSUMED_SCENARIO,
) -> int:
    """E for one slot, in whole units (rounded up once)."""
    total = Fraction(0)
    for r in expected_rounds(initial_input_tokens, scenario):
        rates = entry.rates_for_input(r.input)
        total += (r.input - r.cached) * rates["input"]
        total += r.cached * rates["cache_read"]
        total += r.output * rates["output"]
    return ceil_units(total * tier_multiplier(scenario.tier, service_tiers=entry.service_tiers))


def expected_slot_units(
    provider: str,
    model: str,
    *,
    initial_input_tokens: int = 0,
    catalog: Catalog | None = None,
    scenario: EstimateScenario = ASSUMED_SCENARIO,
) -> int:
    """E for one slot of a reader route, from the bundled catalog unless one is given."""
    entry = (catalog or bundled_catalog()).entry(provider, model)
    return expected_cost_units(entry, initial_input_tokens, scenario)


def expected_request_units(
    entry: CatalogEntry, *, input_tokens: int, output_tokens: int, tier: str = "default"
) -> int:
    """The expected cost of one request of ``entry``'s route with about ``input_tokens``
    input (none cached) and ``output_tokens`` output, in whole units (rounded up once):
    ``expected_cost_units`` over ``request_scenario``."""
    return expected_cost_units(entry, input_tokens, request_scenario(output_tokens, tier))
