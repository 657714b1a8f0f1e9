"""Money: integer units, exact USD parsing, rates, tier multipliers and cost.

One unit is 5×10⁻⁸ USD (half a tenth of a micro-dollar). Every amount efold stores or
compares is an ``int`` count of units. No float ever enters a money path: USD strings
are parsed with ``decimal`` (exactly), per-token rates are ``Fraction``s, and only the
final figure is rounded.

Rounding rule: a cost is the exact rational sum of ``tokens × rate × tier`` over the
token classes, rounded **up** to a whole unit once (never per class). Rounding up can
only overstate spend, so a cap compared in units is never exceeded by rounding. A USD
amount given by an operator (a cap) must already be a whole number of units; anything
finer is refused rather than silently rounded.

Rates are USD per million tokens. A rate of ``r`` USD/M is ``20·r`` units per token
(10⁻⁶ / 5×10⁻⁸ = 20), so the faux rates 2 / 10 / 0.1 / 2.5 are 40 / 200 / 2 / 50
units per token.
"""

from __future__ import annotations

import decimal
from collections.abc import Mapping
from fractions import Fraction
from typing import Final

from efold.errors import Code
from efold.guard.errors import GuardError

USD_PER_UNIT: Final = decimal.Decimal("0.00000005")
UNITS_PER_USD: Final = 20_000_000
# Units per token for a rate of 1 USD per million tokens.
_UNITS_PER_TOKEN_PER_USD_PER_MILLION: Final = Fraction(UNITS_PER_USD, 1_000_000)

# Service tiers the provider may report. Invariant: closed; an unknown tier is an
# integrity stop, never priced. Absent (None) is priced at the maximum multiplier when
# the catalog entry's provider has service tiers (the default), at the base rate (x1)
# when the entry says it has none (``service_tiers = false``: a local server).
TIER_MULTIPLIERS: Final[Mapping[str, Fraction]] = {
    "default": Fraction(1),
    "flex": Fraction(1, 2),
    "priority": Fraction(2),
}
ABSENT_TIER_MULTIPLIER: Final = Fraction(2)
TIERLESS_ABSENT_TIER_MULTIPLIER: Final = Fraction(1)
MAX_TIER_MULTIPLIER: Final = max(*TIER_MULTIPLIERS.values(), ABSENT_TIER_MULTIPLIER)

TOKEN_CLASSES: Final = ("input", "cache_read", "cache_write", "output")


def parse_decimal(text: str | int | decimal.Decimal, what: str) -> decimal.Decimal:
    """Parse a non-negative finite decimal exactly. Floats are refused: they are not
    exact, and the point of this function is that nothing on a money path is."""
    if isinstance(text, bool) or not isinstance(text, str | int | decimal.Decimal):
        raise GuardError(Code.LOOKUP_INVALID_RATE, f"{what}: not a decimal string")
    try:
        value = decimal.Decimal(text.strip() if isinstance(text, str) else text)
    except decimal.InvalidOperation as exc:
        raise GuardError(Code.LOOKUP_INVALID_RATE, f"{what}: not a decimal") from exc
    if not value.is_finite() or value < 0:
        raise GuardError(Code.LOOKUP_INVALID_RATE, f"{what}: must be finite and >= 0")
    return value


def usd_to_units(usd: str | int | decimal.Decimal) -> int:
    """An exact USD amount (e.g. ``"25.00"``) as whole units. Refuses amounts that are
    not a whole number of units (finer than $0.00000005), negatives and floats."""
    value = parse_decimal(usd, "usd")
    units = value * UNITS_PER_USD
    if units != units.to_integral_value():
        raise GuardError(Code.LOOKUP_INVALID_RATE, "usd: finer than one unit (5e-8 USD)")
    return int(units)


def units_to_usd(units: int) -> str:
    """Units as an exact USD decimal string (no float), e.g. 78400000 -> ``"3.92"``."""
    value = decimal.Decimal(units) * USD_PER_UNIT
    text = format(value.normalize(), "f")
    return text


def rate_units_per_token(usd_per_million: decimal.Decimal) -> Fraction:
    """A catalog rate (USD per million tokens) as exact units per token."""
    return Fraction(usd_per_million) * _UNITS_PER_TOKEN_PER_USD_PER_MILLION


def ceil_units(amount: Fraction) -> int:
    """Round a non-negative exact amount of units up to a whole unit."""
    return -((-amount.numerator) // amount.denominator)


def tier_multiplier(tier: str | None, *, service_tiers: bool) -> Fraction:
    """The multiplier for a reported tier; ``None`` (absent) prices at the maximum when
    the provider has ``service_tiers``, else at x1 (a reported tier is priced as
    reported either way). An unknown tier raises ``lookup_unknown_tier``: it is never
    priced."""
    if tier is None:
        return ABSENT_TIER_MULTIPLIER if service_tiers else TIERLESS_ABSENT_TIER_MULTIPLIER
    found = TIER_MULTIPLIERS.get(tier)
    if found is None:
        raise GuardError(Code.LOOKUP_UNKNOWN_TIER, "unknown service tier")
    return found
