"""Live unit prices from the supplier's feed (needs SHOP_FEED_URL and the network)."""

import json
import os
import urllib.request


def fetch_prices():
    """The supplier's current prices: {sku: unit_cents}."""
    url = os.environ["SHOP_FEED_URL"]
    with urllib.request.urlopen(url, timeout=10) as response:
        return {sku: int(cents) for sku, cents in json.load(response).items()}
