"""Compaction: replace the older part of a context by a summary, keep a recent tail.

Policies (reference "Replay and arms"):

* the smallest trigger (``compaction``, ``compaction-2``): window 32,000 tokens, ratio
  0.2, so a context of at least 6,400 estimated tokens compacts, keeping a 4,000-token
  recent tail;
* the ceiling (``ceiling``): the production default, compacting only at 200,000
  estimated tokens and keeping the production default 20,000-token tail.

The cut follows the reference harness: walk back from the newest message adding
estimated tokens until the tail allowance is reached, then cut at the first valid cut
point at or after that message. Valid cut points are owner and assistant messages,
never a tool result (which would orphan it from its call). The tail can therefore be
a little under the allowance. A context holding an earlier summary folds that summary
into the new one.

Who writes the summary is the caller's choice (``summary.Summariser``): the deterministic
offline summariser by default, or a model-backed one (``model_summary.py``). The cut, the
kept tail and the trigger do not depend on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from efold.corpus.forms import chars_to_tokens, estimate_tokens, message_chars
from efold.corpus.model import Event
from efold.folds.checkpoint import CompactionStats, ReaderMessage
from efold.folds.summariser import summarise
from efold.folds.summary import Summariser, SummaryLike
from efold.folds.transcript import reader_message

COMPACTION_WINDOW = 32_000
COMPACTION_RATIO_PERCENT = 20  # ratio 0.2, kept as an integer so the trigger is exact
SMALLEST_TRIGGER_TOKENS = COMPACTION_WINDOW * COMPACTION_RATIO_PERCENT // 100  # 6,400
KEEP_RECENT_TOKENS = 4_000
CEILING_TOKENS = 200_000
CEILING_KEEP_RECENT_TOKENS = 20_000

# A live context: trace events, at most one summary (always first).
ContextItem = Event | SummaryLike


@dataclass(frozen=True)
class CompactionPolicy:
    trigger_tokens: int
    keep_recent_tokens: int


SMALLEST_TRIGGER = CompactionPolicy(SMALLEST_TRIGGER_TOKENS, KEEP_RECENT_TOKENS)
CEILING = CompactionPolicy(CEILING_TOKENS, CEILING_KEEP_RECENT_TOKENS)


def summary_message(summary: SummaryLike) -> ReaderMessage:
    return ReaderMessage(role="user", content=summary.render())


def render_context(context: Sequence[ContextItem]) -> list[ReaderMessage]:
    return [
        reader_message(item) if isinstance(item, Event) else summary_message(item)
        for item in context
    ]


def context_tokens(context: Sequence[ContextItem]) -> int:
    return estimate_tokens(render_context(context))


def _is_cut_point(item: ContextItem) -> bool:
    return isinstance(item, Event) and item.role in ("user", "assistant")


def cut_index(context: Sequence[ContextItem], keep_recent_tokens: int) -> int:
    """Index of the first item of the kept tail (``len(context)`` keeps nothing)."""
    messages = render_context(context)
    chars = 0
    reached = 0
    for index in range(len(messages) - 1, -1, -1):
        chars += message_chars(messages[index])
        if chars_to_tokens(chars) >= keep_recent_tokens:
            reached = index
            break
    else:
        return 0  # the whole context fits in the tail: nothing to summarise
    for index in range(reached, len(context)):
        if _is_cut_point(context[index]):
            return index
    return len(context)


def compact(
    context: Sequence[ContextItem],
    policy: CompactionPolicy,
    stage: Literal["mid_trace", "probe"],
    *,
    force: bool = False,
    overhead_tokens: int = 0,
    summariser: Summariser = summarise,
) -> tuple[list[ContextItem], CompactionStats | None]:
    """Compact ``context`` if it reaches the policy's trigger (or ``force``: a manual,
    promptless compaction). Returns the new context and its stats, or the context
    unchanged and None when the trigger was not reached or nothing precedes the tail.

    ``overhead_tokens`` is what the harness adds to every request besides the messages
    (instructions, tool schemas): it counts toward the trigger and the reported sizes,
    as in the reference harness, whose estimate covers the whole request.

    ``summariser`` writes the summary (default: the deterministic ``summarise``); what it
    raises propagates, and nothing is compacted then."""
    before = context_tokens(context) + overhead_tokens
    if not force and before < policy.trigger_tokens:
        return list(context), None
    cut = cut_index(context, policy.keep_recent_tokens)
    if cut == 0:
        return list(context), None
    head = context[:cut]
    previous = next((item for item in head if not isinstance(item, Event)), None)
    summary = summariser([item for item in head if isinstance(item, Event)], previous)
    compacted: list[ContextItem] = [summary, *context[cut:]]
    stats = CompactionStats(
        stage=stage,
        trigger_tokens=policy.trigger_tokens,
        tokens_before=before,
        tokens_after=context_tokens(compacted) + overhead_tokens,
        summarised_messages=sum(1 for item in head if isinstance(item, Event)),
        kept_messages=len(context) - cut,
        summary_tokens=summary.tokens(),
        tool_results_cut=summary.results_cut - (previous.results_cut if previous else 0),
        summary_entries_elided=summary.elided - (previous.elided if previous else 0),
    )
    return compacted, stats
