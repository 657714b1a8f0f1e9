from shop.api import cart_total


def test_cart_total_adds_the_lines():
    assert cart_total([(250, 2), (100, 1)]) == 600
