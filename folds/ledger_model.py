"""The model extractor of the ``ledger-cold`` arm: a stage of the ledger written by a model.

One request per extraction (``extraction_request``): the fixed ``EXTRACTION_INSTRUCTION``
as the system message, and a user message holding the ledger so far and the stage's
selection. Each request is bounded by its **allowance** (the reference benchmark's
reservations: ``ALLOWANCE_TOKENS``, 128,000 input tokens for the first extraction and
64,000 for each later one), tightened by the route's input envelope (its catalog's
``context_window``); the guard admits a request by its bytes, each counted as up to one
token, so the source's bound is in bytes as the request carries them (UTF-8, JSON
escapes included: ``source_bytes``). Within it:

* the ledger so far comes first, at most a quarter of the source, its newest entries
  kept whole (the count of older ones left out is stated);
* then the selection's records, oldest first, each headed by its citation
  (``[record <id>] owner | assistant | tool result (<kind>), day N``): a record longer
  than ``RECORD_CHARS`` keeps its head and tail lines with the cut stated, and a record
  with no room left is not sent (``Found.unoffered`` counts it; the next record that
  fits still is).

A stage with no record to read sends nothing: an analysis-only stage, one operation. A
stage whose records all lack room (a window too small) sends nothing either, and is
degraded (``input_budget``).

The reply must be one JSON object, ``{"entries": [{"section", "record", "text"}]}`` and
no other field (one surrounding Markdown code fence is allowed), each entry in one of
the pack's sections, citing a record the request sent, its text one non-empty line of at
most ``ENTRY_CHARS`` characters that cites nothing itself (runs of whitespace become one
space, one leading bullet is dropped: every entry gets its own), at most ``MAX_ENTRIES``
of them. ``{"entries": []}`` is a valid analysis-only stage. Anything else degrades the
stage whole (``ledger.DEGRADATIONS``): no entry is salvaged, repaired or invented, and
the ledger stays the one before it.

Every appended entry cites its record the way every ledger entry does
(``checkpoint.cite``), so availability analysis reads a model's ledger as it reads the
deterministic one's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import msgspec

from efold.folds.checkpoint import CITATION_PATTERN, HistoryRecord, cite
from efold.folds.ledger import Extractor, Found, LedgerEntry
from efold.folds.model_summary import Complete
from efold.folds.summariser import head_lines, tail_lines
from efold.guard.accounting import H_INSTRUCTIONS, H_PER_INPUT_ITEM, H_PER_REQUEST

# Input tokens each extraction may use (the reference's 128k bootstrap, 64k incremental),
# and the output tokens it is priced at.
ALLOWANCE_TOKENS: Final = (128_000, 64_000, 64_000)
OUTPUT_TOKENS: Final = 4_096
RECORD_CHARS: Final = 4_000
RECORD_HEAD_CHARS: Final = 2_800
MAX_REPLY_CHARS: Final = 32_000
ENTRY_CHARS: Final = 400
MAX_ENTRIES: Final = 64

EXTRACTION_INSTRUCTION: Final = (
    "You keep the continuity ledger of an assistant whose conversation with its owner "
    "will be cut: after the cut the assistant sees only the ledger. Read the records "
    "below and write down what the assistant must still know from them: the owner's "
    "standing rules; corrections (the current value, and which value it replaced); "
    "identifiers with their exact values (numbers, references, codes, amounts, dates); "
    "commitments and the latest status of each artifact; open items. Copy every value "
    "verbatim. Never invent anything that is not in the records, and do not repeat an "
    "entry the ledger already has. Reply with one JSON object and nothing else: "
    '{"entries": [{"section": "rules" | "corrections" | "identifiers" | "commitments" | '
    '"open_items", "record": "<the id of the record it comes from>", "text": "<one '
    'line>"}]}. If the records hold nothing new, reply {"entries": []}.'
)
LEDGER_SO_FAR_HEADER: Final = "The ledger so far (do not repeat these entries):"
RECORDS_HEADER: Final = "Records to read (oldest first):"
NO_ENTRIES: Final = "(no entries yet)"

# The request's bytes besides the instruction and the source: the headers and notes of
# the user message and the payload's own framing (model, roles, limits).
OVERHEAD_BYTES: Final = 1_024


# The guard's framing allowance H of an extraction request at its largest (a Responses
# request: instructions and one input item; a chat request's two messages count less).
FRAMING_TOKENS: Final = H_PER_REQUEST + H_INSTRUCTIONS + 2 * H_PER_INPUT_ITEM


def request_tokens(number: int, envelope_tokens: int) -> int:
    """The input bound of extraction ``number`` on a route whose input envelope is
    ``envelope_tokens`` (U_k as the guard counts it: the payload's bytes plus H): its
    allowance, never over the envelope."""
    return min(ALLOWANCE_TOKENS[number - 1], envelope_tokens)


def _cost(text: str) -> int:
    """The bytes ``text`` takes in a request: UTF-8, JSON-escaped, without its quotes."""
    return len(msgspec.json.encode(text)) - 2


def source_bytes(number: int, envelope_tokens: int) -> int:
    """The source bound of extraction ``number`` (module docstring): its request's input
    bound, a byte a token, less the guard's framing allowance, the instruction and the
    overhead, so the request the guard counts never exceeds the bound."""
    return max(0, request_tokens(number, envelope_tokens) - FRAMING_TOKENS
               - _cost(EXTRACTION_INSTRUCTION) - OVERHEAD_BYTES)


# With no envelope given (an in-process call, a test), the allowance alone.
SOURCE_BYTES: Final = source_bytes(1, ALLOWANCE_TOKENS[0])


class _Item(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    section: Literal["rules", "corrections", "identifiers", "commitments", "open_items"]
    record: str
    text: str


class _Reply(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    entries: list[_Item]


@dataclass(frozen=True)
class ExtractionRequest:
    """The chat request of one extraction, and what its source bound left out."""

    messages: list[dict[str, str]]
    offered: list[HistoryRecord]  # the records it sends, in order
    unoffered: int  # records of the selection with no room left
    omitted_entries: int  # earlier entries left out of "the ledger so far"


def _record_text(record: HistoryRecord) -> str:
    who = {"user": "owner", "assistant": "assistant"}.get(record.role,
                                                         f"tool result ({record.kind})")
    text = record.text.rstrip()
    if len(text) > RECORD_CHARS:
        head = head_lines(text, RECORD_HEAD_CHARS)
        tail = tail_lines(text[len(head):], RECORD_CHARS - RECORD_HEAD_CHARS)
        text = (f"{head}\n[... {len(text) - len(head) - len(tail)} characters omitted ...]"
                f"\n{tail}")
    return f"{cite(record.id)} {who}, day {record.day}\n{text}"


def extraction_request(earlier: Sequence[LedgerEntry], chosen: list[HistoryRecord], *,
                       max_source_bytes: int = SOURCE_BYTES) -> ExtractionRequest:
    """The request asking a model for the entries of ``chosen`` after ``earlier`` (the
    bound and layout are in the module docstring)."""
    kept: list[str] = []
    used = 0
    for entry in reversed(earlier):
        cost = _cost(entry.text + "\n")
        if used + cost > max_source_bytes // 4:
            break
        kept.append(entry.text)
        used += cost
    kept.reverse()
    omitted_entries = len(earlier) - len(kept)
    parts = [LEDGER_SO_FAR_HEADER]
    if omitted_entries:
        parts.append(f"[{omitted_entries} older entries not shown]")
    parts.append("\n".join(kept) if kept else NO_ENTRIES)
    budget = max_source_bytes - used
    offered: list[HistoryRecord] = []
    texts: list[str] = []
    for record in chosen:
        text = _record_text(record)
        cost = _cost(text + "\n\n")
        if cost <= budget:
            offered.append(record)
            texts.append(text)
            budget -= cost
    unoffered = len(chosen) - len(offered)
    parts += ["", RECORDS_HEADER]
    if unoffered:
        parts.append(f"[{unoffered} records not sent: no room left in this request]")
    parts.append("\n\n".join(texts) if texts else "(no records)")
    return ExtractionRequest(
        messages=[{"role": "system", "content": EXTRACTION_INSTRUCTION},
                  {"role": "user", "content": "\n".join(parts)}],
        offered=offered, unoffered=unoffered, omitted_entries=omitted_entries)


def _unfenced(reply: str) -> str:
    """``reply`` without one surrounding Markdown code fence, if it has one."""
    if reply.startswith("```") and reply.endswith("```") and "\n" in reply:
        return reply[reply.index("\n") + 1:-3].strip()
    return reply


_BULLET: Final = re.compile(r"^[-*\u2022](\s+|$)")


def parse_entries(reply: str, offered: Sequence[HistoryRecord]) -> list[LedgerEntry] | str:
    """The entries of a model's reply, each citing its record; or why the stage
    degrades (a member of ``ledger.DEGRADATIONS``)."""
    reply = reply.strip().removeprefix("\ufeff").strip()
    if not reply:
        return "empty_output"
    if len(reply) > MAX_REPLY_CHARS:
        return "output_overrun"
    try:
        items = msgspec.json.decode(_unfenced(reply), type=_Reply).entries
    except msgspec.ValidationError:  # JSON, not the shape asked for
        return "validation"
    except (msgspec.DecodeError, RecursionError):  # not JSON
        return "provider_output"
    if len(items) > MAX_ENTRIES:
        return "validation"
    seq = {r.id: r.seq for r in offered}
    entries: list[LedgerEntry] = []
    for item in items:
        text = " ".join(item.text.split())
        text = _BULLET.sub("", text, count=1)
        if item.record not in seq or not text or len(text) > ENTRY_CHARS \
                or not text.isprintable() or CITATION_PATTERN.search(text):
            return "validation"
        entry = LedgerEntry(item.section, f"- {text} {cite(item.record)}", seq[item.record])
        if entry in entries:  # the same entry twice: not what was asked
            return "validation"
        entries.append(entry)
    return entries


def model_extractor(complete: Complete, *, max_source_bytes: int = SOURCE_BYTES
                    ) -> Extractor:
    """An ``Extractor`` whose stages ``complete`` writes: one request per extraction.
    Errors ``complete`` raises (a request that did not settle) propagate unchanged."""

    def extract_with_model(earlier: Sequence[LedgerEntry], chosen: list[HistoryRecord]) -> Found:
        if not chosen:  # nothing to read: no request
            return Found([], "model")
        request = extraction_request(earlier, chosen, max_source_bytes=max_source_bytes)
        if not request.offered:  # records to read, none fits: no request, a capacity stop
            return Found([], "model", degraded="input_budget", unoffered=request.unoffered)
        parsed = parse_entries(complete(request.messages), request.offered)
        if isinstance(parsed, str):
            return Found([], "model", degraded=parsed, unoffered=request.unoffered)
        return Found(parsed, "model", unoffered=request.unoffered)

    return extract_with_model
