"""Pricing rules: integer cents throughout."""

from shop.config import BULK_DISCOUNT_PERCENT, BULK_THRESHOLD


def line_total(unit_cents, quantity):
    total = unit_cents * quantity
    if quantity >= BULK_THRESHOLD:
        total -= total * BULK_DISCOUNT_PERCENT // 100
    return total
