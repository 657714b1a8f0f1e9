from shop.pricing import apply_percent_off


def test_percent_off_is_integer_cents_rounded_down():
    assert apply_percent_off(999, 15) == 850
    assert isinstance(apply_percent_off(999, 15), int)
