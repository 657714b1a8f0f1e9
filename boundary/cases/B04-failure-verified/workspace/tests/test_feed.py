from shop.feed import fetch_prices


def test_fetch_prices():
    prices = fetch_prices()
    assert all(isinstance(cents, int) for cents in prices.values())
