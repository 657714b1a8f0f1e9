"""The checks every reported usage passes before anything prices it.

One function, used by the guard's settlement (against U_k, the admitted input budget)
and by the permit ledger's independent re-check (against the envelope I): a hostile or
broken provider's figures must never reach pricing, a journal column or a receipt
unless they are small, whole and consistent. Checked, in order:

1. only the allowlisted counts, each an ``int`` (never a bool) in
   ``[0, USAGE_COUNT_LIMIT)``: anything else is ``lookup_invalid_usage``;
2. input ≤ the limit (``lookup_usage_input_above_admitted``), output ≤ O
   (``lookup_usage_output_above_max``);
3. reasoning ≤ output, cache read + cache write ≤ input.

A settled outcome also needs input ≥ 1 and an output count (``require_settleable``).
Passing these bounds every priced cost by the reservation Rmax, so a known partial is
always a small, exact integer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from efold.errors import Code
from efold.guard.permits import USAGE_COUNT_LIMIT

USAGE_KEYS: Final = frozenset({"input", "output", "cache_read", "cache_write", "reasoning"})


def usage_count(value: object) -> int | None:
    """``value`` as a usage count, or ``None`` when it is not one: an ``int`` (never a
    bool) in ``[0, USAGE_COUNT_LIMIT)``."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value < USAGE_COUNT_LIMIT else None


def usage_problem(counts: Mapping[str, object], *, input_limit: int, max_output: int,
                  settling: bool = False) -> Code | None:
    """The first rule ``counts`` breaks, or ``None``. ``counts`` holds the reported
    counts by name, absent ones left out (absent is never zero)."""
    if set(counts) - USAGE_KEYS:
        return Code.LOOKUP_INVALID_USAGE
    checked: dict[str, int] = {}
    for key, value in counts.items():
        count = usage_count(value)
        if count is None:
            return Code.LOOKUP_INVALID_USAGE
        checked[key] = count
    inp, out = checked.get("input"), checked.get("output")
    if settling and (inp is None or out is None or inp < 1):
        return Code.LOOKUP_INVALID_USAGE
    if inp is not None and inp > input_limit:
        return Code.LOOKUP_USAGE_INPUT_ABOVE_ADMITTED
    if out is not None and out > max_output:
        return Code.LOOKUP_USAGE_OUTPUT_ABOVE_MAX
    if checked.get("reasoning", 0) > (out or 0):
        return Code.LOOKUP_USAGE_REASONING_ABOVE_OUTPUT
    if checked.get("cache_read", 0) + checked.get("cache_write", 0) > (inp or 0):
        return Code.LOOKUP_USAGE_CACHE_ABOVE_INPUT
    return None
