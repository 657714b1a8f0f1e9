"""The public API other teams import: its names and signatures are frozen."""

from shop.pricing import line_total


def cart_total(lines):
    """Total of a cart in cents; ``lines`` are (unit_cents, quantity) pairs."""
    return sum(line_total(unit, quantity) for unit, quantity in lines)
