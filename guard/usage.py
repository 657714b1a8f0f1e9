"""The checks every reported usage passes before anything prices it.

One function, used by the guard's settlement (against U_k, the admitted input budget)
and by the permit ledger's independent re-check (against the envelope I): a hostile or
broken provider's figures must never reach pricing, a journal column or a receipt
unless they are small, whole and consistent. Checked, in order:

1. only the allowlisted counts, each an ``int`` (never a bool) in
   ``[0, USAGE_COUNT_LIMIT)``: anything else is ``lookup_invalid_usage``;
2. input ≤ the limit (``lookup_usage_input_above_admitted``), output ≤ O
   (``lookup_usage_output_above_max``);
3. where the sent payload's size is known (the guard's settlement, not the ledger,
   which holds only its digest): input × ``MAX_BYTES_PER_INPUT_TOKEN`` ≥ the admitted
   payload's UTF-8 bytes (``lookup_usage_input_below_payload``; equality passes);
4. reasoning ≤ output, cache read + cache write ≤ input.

The lower bound (3). Tokenizers of English, code and JSON average about 3-5 bytes of
UTF-8 per token and very rarely exceed 8-10 (a long run of one repeated character);
multi-byte UTF-8 only lowers the ratio (a CJK character is 3 bytes and about one
token), and JSON escaping raises it at most sixfold for control characters
(``\u0001``). The payloads the allowlists admit carry no base64 (no images, files or
audio) and tool schemas are counted as the JSON sent. A provider also adds template
tokens to what it reports, never fewer. 64 bytes per token is so far past every real
tokenizer that a reported input below it is not a reading of this request: one input
token for a 48 KB request is a broken or hostile meter, and pricing it would settle
nearly nothing for a large request.

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
# The most UTF-8 bytes of a sent payload one reported input token may stand for (rule 3).
MAX_BYTES_PER_INPUT_TOKEN: Final = 64


def usage_count(value: object) -> int | None:
    """``value`` as a usage count, or ``None`` when it is not one: an ``int`` (never a
    bool) in ``[0, USAGE_COUNT_LIMIT)``."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value < USAGE_COUNT_LIMIT else None


def usage_problem(counts: Mapping[str, object], *, input_limit: int, max_output: int,
                  payload_bytes: int | None, settling: bool = False) -> Code | None:
    """The first rule ``counts`` breaks, or ``None``. ``counts`` holds the reported
    counts by name, absent ones left out (absent is never zero). ``payload_bytes`` is
    the admitted payload's size, or ``None`` where the caller never saw it (rule 3)."""
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
    if (inp is not None and payload_bytes is not None
            and inp * MAX_BYTES_PER_INPUT_TOKEN < payload_bytes):
        return Code.LOOKUP_USAGE_INPUT_BELOW_PAYLOAD
    if checked.get("reasoning", 0) > (out or 0):
        return Code.LOOKUP_USAGE_REASONING_ABOVE_OUTPUT
    if checked.get("cache_read", 0) + checked.get("cache_write", 0) > (inp or 0):
        return Code.LOOKUP_USAGE_CACHE_ABOVE_INPUT
    return None
