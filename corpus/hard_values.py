"""The facts of one hard trace: names, identifiers, dates, amounts, the secret, and the
decision, ranking and dependency the field categories ask about (``FieldValues``).

Every value comes from the seed's own PRNG streams, so seed N always yields the same
values; seeds of the same family (101, 109, 117, ...) get fresh names and values. The
field values come from their own stream (``make_values``'s ``field_rng``), so adding
them left every earlier value of a seed unchanged.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from efold.corpus import forms
from efold.corpus.families import PEOPLE, SURNAMES, Family
from efold.corpus.prng import SeededRandom

_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no I, O, 0, 1: unambiguous codes
_SECRET_ALPHABET = "abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
_SECRET_SYMBOLS = "#%!*"
_LETTERS = "ABDEFGHJLNPRSTUWY"
# (reason phrase, reason key): keys are pairwise disjoint words, so a rejected
# alternative's key never hides inside the chosen one's.
_REASONS = (
    ("the longer warranty", "warranty"), ("the shorter lead time", "lead time"),
    ("the lower running cost", "running cost"), ("the on-site support contract", "support contract"),
    ("the smaller footprint", "footprint"), ("the better references", "references"),
)
_TASK_VERBS = ("inspect", "order", "count", "photograph", "clean", "price")
HANDOVER_LABEL = "handover date"
SURVEY_LABEL = "access survey date"


@dataclass(frozen=True)
class FieldValues:
    """The decision, the owner's ranking, the dependency and the contradicting claim."""

    subject: str  # what was decided: "kiln shelves supplier"
    choice: str
    reason: tuple[str, str]  # (phrase, key) recorded with the decision
    rejected: str
    rejected_reason: tuple[str, str]
    tasks: tuple[str, str, str]  # the owner's ranking, most important first
    task_keys: tuple[str, str, str]  # the item each task names (what the scorer finds)
    loud_order: tuple[int, int, int]  # task indices in the order the louder request asks
    planned: dt.date  # the handover date as first planned
    survey: dt.date  # the date the handover now depends on
    lag: int  # days from the survey to the handover
    claimed: int  # cents: the contradicting amount of the continuation message

    @property
    def handover(self) -> dt.date:
        """The value that follows only from both facts."""
        return self.survey + dt.timedelta(days=self.lag)


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
    field: FieldValues

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


def _field_values(rng: SeededRandom, family: Family, vendors: tuple[str, ...],
                  start: dt.date, amounts: tuple[int, int], taken_dates: set[dt.date]) -> FieldValues:
    taken = {v.split(" ")[0] for v in vendors}
    choice, rejected = rng.sample([s for s in SURNAMES if s not in taken], 2)
    reason, rejected_reason = rng.sample(_REASONS, 2)
    plain = [i for i in family.items if re.fullmatch(r"[a-z ]+", i)]
    while True:  # no task key inside another, so first occurrences order the answer
        picked = rng.sample(plain, 4)
        if not any(a != b and a in b for a in picked for b in picked):
            break
    verbs = rng.sample(_TASK_VERBS, 3)
    keys = (picked[0], picked[1], picked[2])
    first = rng.between(1, 2)
    loud = (first, *(i for i in range(3) if i != first))
    while True:  # no other fact of the trace is dated on these days: only both facts give it
        survey = start + dt.timedelta(days=rng.between(30, 40))
        lag = rng.between(5, 12)
        planned = survey + dt.timedelta(days=lag + rng.choice((-1, 1)) * rng.between(3, 8))
        handover = survey + dt.timedelta(days=lag)
        if not {survey, planned, handover} & taken_dates:
            break
    claimed = amounts[1] + rng.choice((-1, 1)) * rng.between(4, 20) * 500
    if claimed in amounts or claimed <= 0:
        claimed = amounts[1] * 2 + 500
    return FieldValues(
        subject=f"{picked[3]} supplier",
        choice=f"{choice} {family.vendor_kinds[0]}",
        reason=reason,
        rejected=f"{rejected} {family.vendor_kinds[0]}",
        rejected_reason=rejected_reason,
        tasks=(f"{verbs[0]} the {keys[0]}", f"{verbs[1]} the {keys[1]}", f"{verbs[2]} the {keys[2]}"),
        task_keys=keys,
        loud_order=(loud[0], loud[1], loud[2]),
        planned=planned,
        survey=survey,
        lag=lag,
        claimed=claimed,
    )


def make_values(rng: SeededRandom, family: Family, cycle: int,
                field_rng: SeededRandom) -> TraceValues:
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
    # Drawn in the order the fields were always drawn in, so every earlier value stays.
    people = tuple(rng.sample(PEOPLE, 6))
    topic = rng.choice(family.topics)
    phone = f"07700 900{rng.between(100, 999)}"
    postcode = (f"{rng.choice(_LETTERS)}{rng.choice('QXZ')}{rng.between(2, 9)} "
                f"{rng.between(2, 9)}{rng.choice(_LETTERS)}{rng.choice(_LETTERS)}")
    currency = rng.choice(("GBP", "EUR"))
    account_ref = _identifier(rng, "ACC")
    mid_ref = _identifier(rng, family.mid_prefix)
    secret = _secret(rng)
    next_old = start + dt.timedelta(days=rng.between(8, 12))
    next_new = first - dt.timedelta(days=rng.between(10, 14))
    taken = {first, moved, moved_again, next_old, next_new}
    return TraceValues(
        family=family,
        org=family.orgs[cycle % len(family.orgs)],
        vendors=vendors,
        people=people,
        topic=topic,
        phone=phone,
        postcode=postcode,
        currency=currency,
        account_ref=account_ref,
        mid_ref=mid_ref,
        booking_ref=f"BK-{booking_group}-{booking_digits[1]}",
        booking_decoy=f"BK-{booking_group}-{booking_digits[0]}",
        secret=secret,
        start=start,
        dates=(first, moved, moved_again),
        amounts=(quoted, revised),
        next_old_deadline=next_old,
        next_new_deadline=next_new,
        field=_field_values(field_rng, family, vendors, start, (quoted, revised), taken),
    )
