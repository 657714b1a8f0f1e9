from shop.config import BULK_DISCOUNT_PERCENT, BULK_THRESHOLD
from shop.pricing import line_total


def test_small_quantities_pay_full_price():
    assert line_total(250, 2) == 500


def test_bulk_quantities_get_the_discount():
    total = 100 * BULK_THRESHOLD
    assert line_total(100, BULK_THRESHOLD) == total - total * BULK_DISCOUNT_PERCENT // 100


def test_totals_are_integer_cents():
    assert isinstance(line_total(333, 3), int)
