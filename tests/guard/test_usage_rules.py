"""Every rule of ``guard.usage.usage_problem`` at its exact boundary: the reading at
equality passes, one unit past it stops with the rule's own code. Flipping a ``>`` to
``>=``, dropping a clause or moving a constant by one fails a test here (the usage
parsers' mutation pass, docs/reliability.md)."""

from __future__ import annotations

import pytest

from efold.errors import Code
from efold.guard.permits import USAGE_COUNT_LIMIT, UsageRecord
from efold.guard.usage import MAX_BYTES_PER_INPUT_TOKEN, usage_problem
from efold.guard.wire.outcome import UNREADABLE_TIER, read_tier, read_usage

LIMIT, MAX_OUT = 1_000, 100


def _problem(settling: bool = False, payload_bytes: int | None = None,
             **counts: object) -> Code | None:
    return usage_problem(counts, input_limit=LIMIT, max_output=MAX_OUT,
                         payload_bytes=payload_bytes, settling=settling)


@pytest.mark.parametrize(("counts", "expected"), [
    # input ≤ the admitted limit
    ({"input": LIMIT, "output": 1}, None),
    ({"input": LIMIT + 1, "output": 1}, Code.LOOKUP_USAGE_INPUT_ABOVE_ADMITTED),
    # output ≤ O
    ({"input": 10, "output": MAX_OUT}, None),
    ({"input": 10, "output": MAX_OUT + 1}, Code.LOOKUP_USAGE_OUTPUT_ABOVE_MAX),
    # reasoning ≤ output (an absent output reads as none: any reasoning is too much)
    ({"input": 10, "output": 5, "reasoning": 5}, None),
    ({"input": 10, "output": 5, "reasoning": 6}, Code.LOOKUP_USAGE_REASONING_ABOVE_OUTPUT),
    ({"input": 10, "reasoning": 0}, None),
    ({"input": 10, "reasoning": 1}, Code.LOOKUP_USAGE_REASONING_ABOVE_OUTPUT),
    # cache read + cache write ≤ input (an absent input reads as none)
    ({"input": 10, "output": 1, "cache_read": 6, "cache_write": 4}, None),
    ({"input": 10, "output": 1, "cache_read": 7, "cache_write": 4},
     Code.LOOKUP_USAGE_CACHE_ABOVE_INPUT),
    ({"input": 10, "output": 1, "cache_read": 11}, Code.LOOKUP_USAGE_CACHE_ABOVE_INPUT),
    ({"input": 10, "output": 1, "cache_write": 11}, Code.LOOKUP_USAGE_CACHE_ABOVE_INPUT),
    ({"output": 1, "cache_read": 0}, None),
    ({"output": 1, "cache_read": 1}, Code.LOOKUP_USAGE_CACHE_ABOVE_INPUT),
    ({"output": 1, "cache_write": 1}, Code.LOOKUP_USAGE_CACHE_ABOVE_INPUT),
    # counts: whole, never bool, within [0, 2^53), only the allowlisted names
    ({"input": 0, "output": 0}, None),
    ({"input": -1, "output": 1}, Code.LOOKUP_INVALID_USAGE),
    ({"input": USAGE_COUNT_LIMIT - 1}, Code.LOOKUP_USAGE_INPUT_ABOVE_ADMITTED),
    ({"input": USAGE_COUNT_LIMIT}, Code.LOOKUP_INVALID_USAGE),
    ({"input": True, "output": 1}, Code.LOOKUP_INVALID_USAGE),
    ({"input": 1.0, "output": 1}, Code.LOOKUP_INVALID_USAGE),
    ({"input": None, "output": 1}, Code.LOOKUP_INVALID_USAGE),
    ({"input": 1, "output": 1, "total": 2}, Code.LOOKUP_INVALID_USAGE),
])
def test_each_rule_passes_at_equality_and_stops_one_past(
        counts: dict[str, object], expected: Code | None) -> None:
    assert _problem(**counts) is expected


def test_a_settlement_needs_input_of_at_least_one_and_an_output() -> None:
    assert _problem(settling=True, input=1, output=0) is None
    assert _problem(settling=True, input=0, output=0) is Code.LOOKUP_INVALID_USAGE
    assert _problem(settling=True, output=0) is Code.LOOKUP_INVALID_USAGE
    assert _problem(settling=True, input=1) is Code.LOOKUP_INVALID_USAGE
    # outside a settlement (a known partial) absent counts are allowed, never zero
    assert _problem(input=0, output=0) is None
    assert _problem(output=3) is None
    assert _problem(input=3) is None


def test_the_input_floor_holds_at_equality_and_only_where_the_payload_is_known() -> None:
    tokens = 10
    at_floor = tokens * MAX_BYTES_PER_INPUT_TOKEN
    assert _problem(payload_bytes=at_floor, input=tokens, output=1) is None
    assert _problem(payload_bytes=at_floor + 1, input=tokens, output=1) \
        is Code.LOOKUP_USAGE_INPUT_BELOW_PAYLOAD
    assert _problem(payload_bytes=at_floor + 1, input=tokens + 1, output=1) is None
    assert _problem(payload_bytes=None, input=1, output=1) is None  # the ledger's re-check
    assert _problem(payload_bytes=at_floor, output=1) is None  # no input read: no floor


def test_the_rules_are_checked_in_their_documented_order() -> None:
    """One reading breaking several rules gets the first one's code."""
    everything = {"input": LIMIT + 1, "output": MAX_OUT + 1, "reasoning": MAX_OUT + 2,
                  "cache_read": LIMIT + 2}
    assert _problem(**everything) is Code.LOOKUP_USAGE_INPUT_ABOVE_ADMITTED
    del everything["input"]
    assert _problem(**everything) is Code.LOOKUP_USAGE_OUTPUT_ABOVE_MAX
    assert _problem(payload_bytes=10**9, input=1, output=1, reasoning=2) \
        is Code.LOOKUP_USAGE_INPUT_BELOW_PAYLOAD
    assert _problem(input=1, output=1, reasoning=2, cache_read=2) \
        is Code.LOOKUP_USAGE_REASONING_ABOVE_OUTPUT


# -- the wire readings that feed those rules (guard/wire/outcome.py) ---------------------

CHAT = {"prompt_tokens": 10, "completion_tokens": 2}
RESPONSES = {"input_tokens": 10, "output_tokens": 2}


@pytest.mark.parametrize(("chat", "base"), [(True, CHAT), (False, RESPONSES)])
def test_a_missing_or_malformed_required_count_is_invalid_never_zero(
        chat: bool, base: dict[str, object]) -> None:
    usage, invalid = read_usage(dict(base), chat=chat)
    assert (usage, invalid) == (UsageRecord(input=10, output=2), False)
    for key in base:
        for bad in (None, "10", 1.5, True, -1):
            raw = {**base, key: bad}
            assert read_usage(raw, chat=chat) == (None, True), (key, bad)
        assert read_usage({k: v for k, v in base.items() if k != key}, chat=chat) \
            == (None, True), key
    assert read_usage(None, chat=chat) == (None, False)  # no usage object: missing
    for not_an_object in ([10, 2], "usage", 12):
        assert read_usage(not_an_object, chat=chat) == (None, True)


@pytest.mark.parametrize(("chat", "base", "details"), [
    (True, CHAT, ("prompt_tokens_details", "completion_tokens_details")),
    (False, RESPONSES, ("input_tokens_details", "output_tokens_details")),
])
def test_details_are_optional_but_never_malformed(
        chat: bool, base: dict[str, object], details: tuple[str, str]) -> None:
    inp, out = details
    raw = {**base, inp: {"cached_tokens": 4, "cache_write_tokens": 1},
           out: {"reasoning_tokens": 2}}
    usage, invalid = read_usage(raw, chat=chat)
    assert not invalid and usage == UsageRecord(input=10, output=2, cache_read=4,
                                                cache_write=1, reasoning=2)
    assert read_usage({**base, inp: {}}, chat=chat) == (UsageRecord(input=10, output=2), False)
    for bad in (5, [4], "x"):
        assert read_usage({**base, inp: bad}, chat=chat) == (None, True)
        assert read_usage({**base, out: bad}, chat=chat) == (None, True)
    assert read_usage({**base, out: {"reasoning_tokens": -1}}, chat=chat) == (None, True)


def test_a_tier_is_read_as_reported_and_anything_but_a_string_is_unreadable() -> None:
    assert read_tier({"service_tier": "flex"}) == "flex"
    assert read_tier({"service_tier": None}) is None
    assert read_tier({}) is None
    for bad in (5, ["flex"], {"tier": "flex"}, True):
        assert read_tier({"service_tier": bad}) == UNREADABLE_TIER
    for not_an_object in (None, ["service_tier"], "flex"):
        assert read_tier(not_an_object) is None
