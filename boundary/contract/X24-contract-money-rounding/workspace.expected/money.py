"""Tax rounding: tax_cents (the contract: contract.json; python verify.py)."""

from __future__ import annotations


def tax_cents(amount_cents: int, rate_bp: int) -> int:
    if amount_cents < 0 or rate_bp < 0:
        raise ValueError("amount and rate must be >= 0")
    quotient, remainder = divmod(amount_cents * rate_bp, 10_000)
    twice = 2 * remainder
    if twice > 10_000 or (twice == 10_000 and quotient % 2 == 1):
        quotient += 1
    return quotient
