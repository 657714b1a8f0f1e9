"""A model-backed summariser for the compaction arms: the summary is written by a model.

efold never sends the request itself here. The caller supplies ``complete``: a function
that sends one chat request (through the guard, in the prep child) and returns the
model's reply text, or raises an ``EfoldError`` when the request failed. This module
only builds the request and turns the reply into a ``ModelSummary``, so it is fully
testable offline with a fake ``complete``.

The request (``summary_request``) is two messages: the fixed ``SUMMARY_INSTRUCTION`` as
the system message, and a user message holding the source. The source is serialised
with the deterministic summariser's conventions (``summariser.summary_entry``: owner
turns kept, assistant replies shortened, tool results reduced to their head and tail)
and bounded so the request stays small:

* the earlier summary, if the compacted head starts with one, comes first: a previous
  ``ModelSummary``'s text, or a deterministic ``Summary``'s rendering. It keeps at most
  half of ``max_source_chars``; beyond that only its last half is kept and the cut is
  stated in characters;
* the new messages fill the rest, newest first; the oldest that do not fit are cut whole
  (a contiguous run, never one skipped in the middle) and their count is stated.

So the source text is at most ``max_source_chars`` characters and the user message at
most ``max_source_chars + SOURCE_OVERHEAD_CHARS``.

The reply is stripped of surrounding whitespace; an empty reply is refused
(``lookup_empty_final_output``: the paid request returned no usable text). A reply over
``MODEL_SUMMARY_MAX_TOKENS`` (chars/4) is cut to that size and marked ``truncated``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from efold.corpus.forms import chars_to_tokens
from efold.corpus.model import Event
from efold.errors import Code
from efold.folds.errors import FoldError
from efold.folds.summariser import SummaryEntry, summary_entry
from efold.folds.summary import Summariser, SummaryLike

# ``complete(messages)``: send ``[{"role": "system" | "user", "content": ...}]`` as one
# chat request and return the model's reply text; raise an ``EfoldError`` on failure.
Complete = Callable[[list[dict[str, str]]], str]

MAX_SOURCE_CHARS: Final = 24_000
MODEL_SUMMARY_MAX_TOKENS: Final = 16_384
MODEL_SUMMARY_MAX_CHARS: Final = MODEL_SUMMARY_MAX_TOKENS * 4
# The fixed text around the source in the user message (headers and omission notes).
SOURCE_OVERHEAD_CHARS: Final = 512

MODEL_SUMMARY_OPENING: Final = (
    "The conversation before this point was compacted. Summary of the earlier "
    "conversation (written by a model from a serialised copy: owner turns kept, assistant "
    "replies shortened, tool results reduced to their head and tail):"
)

SUMMARY_INSTRUCTION: Final = (
    "You summarise the earlier part of a conversation between an owner and their "
    "assistant, so that the assistant can continue the work from your summary alone. "
    "Write a faithful summary. Keep every name, number, identifier, reference, date, "
    "amount, decision, rule and correction verbatim, exactly as written. When a value was "
    "corrected or superseded, give the current value and say which earlier value it "
    "replaced. Keep the owner's standing rules and instructions, open tasks and "
    "commitments. Never invent or guess anything that is not in the source. If an earlier "
    "summary is given, fold it in: your summary replaces both. Reply with the summary only."
)

EARLIER_SUMMARY_HEADER: Final = "Earlier summary (fold it into your summary):"
CONVERSATION_HEADER: Final = (
    "Conversation to summarise (oldest first; tool results reduced to their head and tail):"
)
NO_MESSAGES: Final = "(no new messages)"


@dataclass(frozen=True)
class ModelSummary:
    """A summary a model wrote, and the content-free facts about how it was made.

    ``elided`` (new messages cut whole from the source) and ``results_cut`` (tool results
    sent with their middle dropped) are cumulative over earlier summaries, like
    ``summariser.Summary``'s. ``truncated``: the reply exceeded
    ``MODEL_SUMMARY_MAX_CHARS`` and ``text`` is its head."""

    text: str
    elided: int
    results_cut: int
    truncated: bool = False

    def render(self) -> str:
        parts = [MODEL_SUMMARY_OPENING, self.text]
        if self.truncated:
            parts.append(f"[summary truncated at {MODEL_SUMMARY_MAX_CHARS} characters]")
        return "\n\n".join(parts)

    def tokens(self) -> int:
        return chars_to_tokens(len(self.render()))


@dataclass(frozen=True)
class SummaryRequest:
    """The chat request for one model summary and what its source bound cut."""

    messages: list[dict[str, str]]
    omitted_messages: int  # new messages cut whole, oldest first
    omitted_summary_chars: int  # characters cut from the head of the earlier summary
    results_cut: int  # sent tool results whose middle was dropped


def _earlier_text(previous: SummaryLike) -> str:
    return previous.text if isinstance(previous, ModelSummary) else previous.render()


def _newest_that_fit(entries: Sequence[SummaryEntry], budget: int) -> list[SummaryEntry]:
    """The longest run of newest entries whose texts (with separators) fit ``budget``."""
    kept: list[SummaryEntry] = []
    used = 0
    for entry in reversed(entries):
        size = len(entry.text) + 2
        if used + size > budget:
            break
        kept.append(entry)
        used += size
    kept.reverse()
    return kept


def summary_request(
    events: Sequence[Event],
    previous: SummaryLike | None,
    *,
    max_source_chars: int = MAX_SOURCE_CHARS,
) -> SummaryRequest:
    """The request asking a model to summarise ``events`` after ``previous`` (the bound
    and layout are in the module docstring)."""
    parts: list[str] = []
    omitted_summary_chars = 0
    budget = max_source_chars
    if previous is not None:
        earlier = _earlier_text(previous)
        allowance = max_source_chars // 2
        if len(earlier) > allowance:
            omitted_summary_chars = len(earlier) - allowance
            earlier = earlier[len(earlier) - allowance :]
        budget -= len(earlier)
        parts.append(EARLIER_SUMMARY_HEADER)
        if omitted_summary_chars:
            parts.append(f"[... the first {omitted_summary_chars} characters omitted ...]")
        parts.append(earlier + "\n")
    entries = [summary_entry(e) for e in events]
    kept = _newest_that_fit(entries, budget)
    omitted = len(entries) - len(kept)
    parts.append(CONVERSATION_HEADER)
    if omitted:
        parts.append(f"[{omitted} earlier messages omitted to keep this request small]")
    parts.append("\n\n".join(e.text for e in kept) if kept else NO_MESSAGES)
    return SummaryRequest(
        messages=[
            {"role": "system", "content": SUMMARY_INSTRUCTION},
            {"role": "user", "content": "\n".join(parts)},
        ],
        omitted_messages=omitted,
        omitted_summary_chars=omitted_summary_chars,
        results_cut=sum(1 for e in kept if e.cut),
    )


def model_summariser(complete: Complete, *, max_source_chars: int = MAX_SOURCE_CHARS) -> Summariser:
    """A ``Summariser`` whose summaries ``complete`` writes: one request per compaction
    (``summary_request``), its reply kept as a ``ModelSummary``. Errors ``complete``
    raises propagate unchanged."""
    if max_source_chars < 1:
        raise ValueError("max_source_chars must be positive")

    def summarise_with_model(events: Sequence[Event], previous: SummaryLike | None) -> ModelSummary:
        request = summary_request(events, previous, max_source_chars=max_source_chars)
        reply = complete(request.messages).strip()
        if not reply:
            raise FoldError(Code.LOOKUP_EMPTY_FINAL_OUTPUT, "the summariser model returned no text")
        return ModelSummary(
            text=reply[:MODEL_SUMMARY_MAX_CHARS],
            elided=(previous.elided if previous is not None else 0) + request.omitted_messages,
            results_cut=(previous.results_cut if previous is not None else 0) + request.results_cut,
            truncated=len(reply) > MODEL_SUMMARY_MAX_CHARS,
        )

    return summarise_with_model
