"""Apply one numbered data migration: python migrations/apply.py NNNN.

Each run applies the migration to data/ and appends it to migrations/ledger.txt. The
script does not consult the ledger: running a migration twice applies it twice.
"""

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRICES = ROOT / "data" / "prices.csv"
LEDGER = ROOT / "migrations" / "ledger.txt"


def prices_to_cents():
    """0004: unit prices from euros to integer cents."""
    with PRICES.open(newline="") as f:
        rows = list(csv.reader(f))
    body = [[sku, str(round(float(unit) * 100))] for sku, unit in rows[1:]]
    with PRICES.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([["sku", "unit_cents"], *body])
    return len(body)


MIGRATIONS = {"0004": ("prices-to-cents", prices_to_cents)}


def main():
    number = sys.argv[1]
    name, migrate = MIGRATIONS[number]
    count = migrate()
    with LEDGER.open("a") as f:
        f.write(f"{number} {name}\n")
    print(f"migration {number} applied: {count} prices converted to cents")
    print(f"ledger: {LEDGER.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
