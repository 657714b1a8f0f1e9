"""What a wire parser makes of a response, and the raw-usage readers it uses.

Missing usage is not zero usage: a usage object that is absent or null reads as
``usage=None`` (settlement keeps the hold as lost), a present but malformed one
(non-integer or negative counts) as ``usage_invalid`` (an integrity stop). Only the
allowlisted numeric counts are read; nothing else of a raw usage object survives.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from efold.guard.permits import UsageRecord

# A tier value that is present but not a string: unknown by construction.
UNREADABLE_TIER: Final = "?"


class Terminal(enum.StrEnum):
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"  # settles (usage is valid); the reply may be cut short
    FAILED = "failed"  # response.failed / error event / error body
    NONE = "none"  # the stream ended without a terminal event


@dataclass
class WireOutcome:
    terminal: Terminal
    usage: UsageRecord | None = None
    usage_invalid: bool = False
    tier: str | None = None
    output_items: list[dict[str, Any]] = field(default_factory=list)
    malformed: bool = False  # an unreadable event or body: read as a lost stream


class WireParser(Protocol):
    def feed(self, chunk: bytes) -> None: ...

    def finish(self) -> WireOutcome: ...


class _Invalid(Exception):
    pass


def _count(value: Any, *, required: bool) -> int | None:
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Invalid
    return value


def _detail(details: Any, key: str) -> int | None:
    if details is None:
        return None
    if not isinstance(details, dict):
        raise _Invalid
    return _count(details.get(key), required=False)


def read_usage(raw: Any, *, chat: bool) -> tuple[UsageRecord | None, bool]:
    """``(usage, invalid)`` from a Responses (``chat=False``) or Chat usage object."""
    if raw is None:
        return None, False
    if not isinstance(raw, dict):
        return None, True
    if chat:
        keys = ("prompt_tokens", "completion_tokens", "prompt_tokens_details",
                "completion_tokens_details")
    else:
        keys = ("input_tokens", "output_tokens", "input_tokens_details",
                "output_tokens_details")
    inp, out, in_details, out_details = (raw.get(k) for k in keys)
    try:
        usage = UsageRecord(
            input=_count(inp, required=True) or 0,
            output=_count(out, required=True) or 0,
            cache_read=_detail(in_details, "cached_tokens"),
            cache_write=_detail(in_details, "cache_write_tokens"),
            reasoning=_detail(out_details, "reasoning_tokens"),
        )
    except _Invalid:
        return None, True
    return usage, False


def read_tier(container: Any) -> str | None:
    """The reported ``service_tier`` of a response/chunk object (``None`` if absent)."""
    if not isinstance(container, dict):
        return None
    tier = container.get("service_tier")
    if tier is None:
        return None
    return tier if isinstance(tier, str) else UNREADABLE_TIER
