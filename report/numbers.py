"""How the reports print numbers: counts and token figures with thousands separators,
money as its exact decimal string with separators on the integer part only, signed
figures with a true minus sign, durations, wall times and UTC moments for people.

Invariant: formatting never rounds or converts money; ``usd`` only inserts commas into
the digits left of the point of the exact string ``report.results.money`` built, and
``brief`` only drops zeros after its last significant decimal, so the printed amount is
the stored amount. A faux reader's money is never shown as dollars: it is a count of
faux units wherever it is shown (``FAUX_MONEY``): it exercised the money path, nobody
paid it.
"""

from __future__ import annotations

import re

from efold.report.schema import Money, RunMoney

__all__ = [
    "FAUX_MONEY", "MINUS", "amount_text", "brief", "count", "duration_text", "milliseconds_text", "money_brief",
    "money_text", "money_unit", "signed", "spend_line", "usd", "utc_text",
]

FAUX_MONEY = "faux units, no money spent"

_USD = re.compile(r"(\d+)(\.\d+)?")
_UTC = re.compile(r"(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.\d+)?Z")


def count(value: int) -> str:
    """A count or token figure: ``1234567`` -> ``1,234,567``."""
    return f"{value:,}"


def usd(amount: str) -> str:
    """An exact decimal USD string with separators on its integer part:
    ``1234.50000000`` -> ``1,234.50000000``. Anything that is not a plain decimal is
    returned unchanged (never reformatted, never rounded)."""
    match = _USD.fullmatch(amount)
    if match is None:
        return amount
    whole, fraction = match.group(1), match.group(2) or ""
    return f"{int(whole):,}{fraction}"


def brief(amount: str) -> str:
    """An exact decimal without the zeros after its last significant decimal (at least
    two decimals kept), separators on its integer part: ``60.00000000`` -> ``60.00``,
    ``0.09217520`` -> ``0.0921752``. The same amount, never rounded."""
    text = usd(amount)
    if "." not in text:
        return text
    whole, fraction = text.split(".", 1)
    return f"{whole}.{fraction.rstrip('0').ljust(2, '0')}"


def money_text(value: Money, faux: bool) -> str:
    """``1,234.50000000 USD (24,690,000,000 units)``; a faux reader's as faux units:
    ``60.00 faux units (no money spent)``."""
    if faux:
        return f"{brief(value.usd)} faux units (no money spent)"
    return f"{usd(value.usd)} USD ({count(value.units)} units)"


def amount_text(value: Money, faux: bool) -> str:
    """An amount in a money column: the exact USD string, or a faux amount's ``brief``."""
    return brief(value.usd) if faux else usd(value.usd)


def money_unit(faux: bool) -> str:
    """A money column's unit: ``USD``, or ``faux units``."""
    return "faux units" if faux else "USD"


def money_brief(value: Money, faux: bool) -> str:
    """Money in a sentence: ``$0.0921752``, or ``0.0921752 faux units``."""
    return f"{brief(value.usd)} faux units" if faux else f"${brief(value.usd)}"


def spend_line(spent: RunMoney, cap: Money, faux: bool) -> str:
    """The run's money against its cap, every caller's, as its journal holds it:
    ``settled $0.00002570 + retained $0.02112000 of a $5.00000000 cap`` (``+ open $X``
    while holds are open); a faux reader's in faux units, without the dollar sign:
    ``settled 19.475556 + retained 0.00 of a 60.00 cap (faux units, no money spent)``.
    The one wording of spend wherever a run's spend is printed (reports, ``show``,
    ``runs``, the pilot's last lines)."""
    amount = brief if faux else usd
    sign = "" if faux else "$"
    parts = [f"settled {sign}{amount(spent.settled.usd)}",
             f"retained {sign}{amount(spent.retained.usd)}"]
    if spent.open.units:
        parts.append(f"open {sign}{amount(spent.open.usd)}")
    text = f"{' + '.join(parts)} of a {sign}{amount(cap.usd)} cap"
    return f"{text} ({FAUX_MONEY})" if faux else text


MINUS = "\u2212"  # a signed figure's minus sign (never a hyphen)


def signed(value: float, places: int = 1) -> str:
    """A signed figure: ``+12.5``, ``\u22123.1``; a value that rounds to zero is ``+0.0``
    (never a negative zero)."""
    text = f"{abs(value):,.{places}f}"
    negative = value < 0 and text.strip("0.,") != ""
    return f"{MINUS if negative else '+'}{text}"


def duration_text(seconds: float | None) -> str:
    """A duration for people: ``4.2 s`` under ten seconds, then whole seconds:
    ``42 s``, ``4 min 12 s``, ``2 h 0 min 5 s``; an em dash when unknown."""
    if seconds is None:
        return "\u2014"
    if seconds < 10:
        return f"{seconds:.1f} s"
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{count(hours)} h {minutes} min {secs} s"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def milliseconds_text(ms: int | None) -> str:
    """A wall time: ``1,234 ms`` under ten seconds, else seconds with one decimal
    (``12.3 s``); an em dash when unknown."""
    if ms is None:
        return "\u2014"
    return f"{count(ms)} ms" if ms < 10_000 else f"{ms / 1000:,.1f} s"


def utc_text(iso: str | None) -> str:
    """``2023-11-14T22:13:20.123Z`` -> ``2023-11-14 22:13:20 UTC`` (to the second); an
    em dash when unknown; anything else unchanged (never guessed at)."""
    if iso is None:
        return "\u2014"
    match = _UTC.fullmatch(iso)
    return f"{match.group(1)} {match.group(2)} UTC" if match else iso

