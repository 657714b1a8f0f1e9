import csv
from pathlib import Path

PRICES = Path(__file__).resolve().parents[1] / "data" / "prices.csv"


def test_prices_are_plausible_integer_cents():
    with PRICES.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows
    for row in rows:
        assert 0 < int(row["unit_cents"]) < 100_000, row["sku"]
