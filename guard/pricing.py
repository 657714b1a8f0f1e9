"""Catalog arithmetic: the cost of reported usage and the worst-case reservation Rmax.

    cost  = ceil( tier × Σ_class tokens_class × rate_class(input) )    (units)
    Rmax  = ceil( 2 × (I × max input-class rate + O × max output rate) )

``rate_class(input)`` is the catalog's input-size tier for the reported input (the
highest tier whose threshold the input strictly exceeds, cached input included, else
the base rates). In Rmax each maximum runs over the base and every tier an input
``<= I`` can reach (threshold ``< I``): a tier at or above I never raises the hold.

Reported input *includes* cache reads and writes, so uncached input is
``input − cache_read − cache_write``; reasoning is part of output and is never added
again. With the faux rates (2 / 10 / 0.1 / 2.5 USD/M) Rmax is exactly $3.92 =
78,400,000 units. The factor 2 in Rmax is the largest tier multiplier (priority, and
an absent tier), so any usage that passes settlement's checks (input <= U <= I,
output <= O) costs at most Rmax. It stays 2 for an entry without service tiers
(``service_tiers = false``, where an absent tier is x1): such a server may still
*report* ``priority``, which is priced as reported, so the hold must cover it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction

from efold.errors import Code
from efold.guard.catalog import Catalog, CatalogEntry, bundled_catalog, max_input_class_rate
from efold.guard.contract import INPUT_ENVELOPE, MAX_OUTPUT
from efold.guard.errors import GuardError
from efold.guard.money import MAX_TIER_MULTIPLIER, ceil_units, tier_multiplier

Pricer = Callable[[Mapping[str, int], "str | None"], int]


def exact_cost(entry: CatalogEntry, counts: Mapping[str, int], tier: str | None) -> Fraction:
    """The exact (unrounded) cost of usage counts, in units. Counts use the keys
    ``input``, ``output``, ``cache_read``, ``cache_write`` (``reasoning`` is ignored:
    it is inside ``output``). Raises ``lookup_unknown_tier`` / ``lookup_invalid_usage``."""
    multiplier = tier_multiplier(tier, service_tiers=entry.service_tiers)
    inp = _count(counts.get("input"))
    out = _count(counts.get("output"))
    cache_read = _count(counts.get("cache_read") or 0)
    cache_write = _count(counts.get("cache_write") or 0)
    uncached = inp - cache_read - cache_write
    if uncached < 0:
        raise GuardError(Code.LOOKUP_USAGE_CACHE_ABOVE_INPUT, "cache tokens above input")
    rates = entry.rates_for_input(inp)  # reported input already counts cached input
    base = (
        uncached * rates["input"]
        + cache_read * rates["cache_read"]
        + cache_write * rates["cache_write"]
        + out * rates["output"]
    )
    return base * multiplier


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise GuardError(Code.LOOKUP_INVALID_USAGE, "usage counts must be integers >= 0")
    return value


def price_units(entry: CatalogEntry, counts: Mapping[str, int], tier: str | None) -> int:
    """The cost of usage counts in whole units, rounded up once."""
    return ceil_units(exact_cost(entry, counts, tier))


def rmax_units(
    entry: CatalogEntry, input_envelope: int = INPUT_ENVELOPE, max_output: int = MAX_OUTPUT
) -> int:
    """The worst-case reservation of one request (the hold every admission takes)."""
    worst = entry.worst_rates_within(input_envelope)
    exact = MAX_TIER_MULTIPLIER * (
        input_envelope * max_input_class_rate(worst) + max_output * worst["output"]
    )
    return ceil_units(exact)


def rmax_for_reader(provider: str, model: str, catalog: Catalog | None = None) -> int:
    """Rmax for a reader route, from the bundled catalog unless one is given."""
    return rmax_units((catalog or bundled_catalog()).entry(provider, model))


def pricer_for(provider: str, model: str, catalog: Catalog | None = None) -> Pricer:
    """A ``(usage counts, tier) -> units`` function for the durable permit source."""
    entry = (catalog or bundled_catalog()).entry(provider, model)

    def price(counts: Mapping[str, int], tier: str | None) -> int:
        return price_units(entry, counts, tier)

    return price
