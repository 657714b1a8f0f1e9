"""The facts of one hard trace: names, identifiers, dates, amounts, the secret.

Every value comes from the seed's own PRNG stream, so seed N always yields the same
values; seeds of the same family (101, 109, 117, ...) get fresh names and values.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from efold.corpus import forms
from efold.corpus.families import PEOPLE, SURNAMES, Family
from efold.corpus.prng import SeededRandom

_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no I, O, 0, 1: unambiguous codes
_SECRET_ALPHABET = "abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
_SECRET_SYMBOLS = "#%!*"
_LETTERS = "ABDEFGHJLNPRSTUWY"


@dataclass(frozen=True)
class TraceValues:
    family: Family
    org: str
    vendors: tuple[str, str, str, str]  # main supplier, portal, carrier, specialist
    people: tuple[str, ...]
    topic: str
    phone: str
    postcode: str
    currency: str
    account_ref: str
    mid_ref: str
    booking_ref: str
    booking_decoy: str
    secret: str
    start: dt.date
    dates: tuple[dt.date, dt.date, dt.date]  # the date as set, moved once, moved twice
    amounts: tuple[int, int]  # cents: as quoted, as revised
    next_old_deadline: dt.date
    next_new_deadline: dt.date

    def date_text(self, day: dt.date) -> str:
        return forms.format_date(day.day, day.month, day.year)

    def amount_text(self, cents: int) -> str:
        return forms.format_amount(self.currency, cents)

    @property
    def portal(self) -> str:
        return f"{self.vendors[1]} supplier portal"


def _code(rng: SeededRandom, length: int) -> str:
    return "".join(rng.choice(_CODE_ALPHABET) for _ in range(length))


def _identifier(rng: SeededRandom, prefix: str) -> str:
    return f"{prefix}-{_code(rng, 4)}-{rng.between(100, 999)}"


def _secret(rng: SeededRandom) -> str:
    body = [rng.choice(_SECRET_ALPHABET) for _ in range(11)]
    body.insert(rng.between(2, 9), rng.choice(_SECRET_SYMBOLS))
    body.insert(rng.between(2, 10), str(rng.between(2, 9)))
    body.insert(rng.between(2, 11), rng.choice(_SECRET_SYMBOLS))
    return "".join(body)


def make_values(rng: SeededRandom, family: Family, cycle: int) -> TraceValues:
    surnames = rng.sample(SURNAMES, 4)
    kinds = family.vendor_kinds
    vendors = (
        f"{surnames[0]} {kinds[0]}", f"{surnames[1]} {kinds[1]}",
        f"{surnames[2]} {kinds[2]}", f"{surnames[3]} {kinds[3]}",
    )
    booking_group = _code(rng, 4)
    booking_digits = rng.sample(range(100, 1000), 2)
    start = dt.date(2031 + cycle, rng.between(2, 8), rng.between(1, 20))
    first = start + dt.timedelta(days=rng.between(42, 56))
    moved = first + dt.timedelta(days=rng.between(3, 9))
    moved_again = moved - dt.timedelta(days=rng.between(1, 2))
    quoted = rng.between(240, 960) * 500  # 1,200.00 to 4,800.00 in steps of 5.00
    revised = quoted + rng.choice((-1, 1)) * rng.between(6, 30) * 500
    return TraceValues(
        family=family,
        org=family.orgs[cycle % len(family.orgs)],
        vendors=vendors,
        people=tuple(rng.sample(PEOPLE, 6)),
        topic=rng.choice(family.topics),
        phone=f"07700 900{rng.between(100, 999)}",
        postcode=f"{rng.choice(_LETTERS)}{rng.choice('QXZ')}{rng.between(2, 9)} "
        f"{rng.between(2, 9)}{rng.choice(_LETTERS)}{rng.choice(_LETTERS)}",
        currency=rng.choice(("GBP", "EUR")),
        account_ref=_identifier(rng, "ACC"),
        mid_ref=_identifier(rng, family.mid_prefix),
        booking_ref=f"BK-{booking_group}-{booking_digits[1]}",
        booking_decoy=f"BK-{booking_group}-{booking_digits[0]}",
        secret=_secret(rng),
        start=start,
        dates=(first, moved, moved_again),
        amounts=(quoted, revised),
        next_old_deadline=start + dt.timedelta(days=rng.between(8, 12)),
        next_new_deadline=first - dt.timedelta(days=rng.between(10, 14)),
    )
