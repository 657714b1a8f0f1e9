"""The deterministic offline summariser (no model): the default of every compaction arm.

It stands in for "serialize the conversation, ask a model for a summary" and mimics the
reference harness's serializer, whose known property matters for the benchmark: it
keeps the **head and tail of each tool result** and drops the middle, so an identifier
in the middle of a long result is lost while one near its head survives.

What it keeps, per entry, in conversation order:

* owner turns and steers: the text, up to ``OWNER_CHARS`` characters (owner turns are
  short; rules, corrections and next actions survive whole);
* assistant replies: the first ``ASSISTANT_CHARS`` characters; a tool call becomes one
  line naming the tool;
* tool results: whole lines from the head up to ``TOOL_HEAD_CHARS`` characters and
  whole lines from the tail up to ``TOOL_TAIL_CHARS``, with the omitted size between.
  Lines are kept whole so a kept fact line is still a fact line; a single line longer
  than the allowance is cut by characters.

A later compaction folds the previous summary's entries in first (its oldest part),
each re-summarised with half the allowances (a summary of a summary loses more), so
``compaction-2`` compounds losses the way a second model summary would. If the
summary exceeds ``SUMMARY_BUDGET_TOKENS`` (chars/4), whole entries are elided,
oldest first, assistant entries before tool results before owner turns, and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from efold.corpus.forms import chars_to_tokens
from efold.corpus.model import Event
from efold.errors import Code
from efold.folds.errors import FoldError
from efold.folds.summary import SummaryLike

OWNER_CHARS = 1_200
ASSISTANT_CHARS = 400
TOOL_HEAD_CHARS = 480
TOOL_TAIL_CHARS = 240
SUMMARY_BUDGET_TOKENS = 16_384

SUMMARY_OPENING = (
    "The conversation before this point was compacted. Summary of the earlier "
    "conversation (deterministic offline summariser: owner turns kept, assistant replies "
    "shortened, tool results reduced to their head and tail):"
)

# Elision order: lower drops first.
_ELISION_RANK = {"assistant": 0, "tool": 1, "owner": 2}


def head_lines(text: str, limit: int) -> str:
    """The whole lines from the head of ``text`` within ``limit`` characters (its first
    ``limit`` characters when even the first line is longer)."""
    kept: list[str] = []
    used = 0
    for line in text.split("\n"):
        if used + len(line) > limit:
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(kept) if kept else text[:limit]


def tail_lines(text: str, limit: int) -> str:
    """The whole lines from the tail of ``text`` within ``limit`` characters."""
    kept: list[str] = []
    used = 0
    for line in reversed(text.split("\n")):
        if used + len(line) > limit:
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(reversed(kept)) if kept else text[-limit:]


@dataclass(frozen=True)
class SummaryEntry:
    """One summarised message: a header line, the kept head and (for a cut tool result)
    the kept tail of a text of ``total`` characters."""

    kind: str  # "owner" | "assistant" | "tool"
    header: str
    head: str
    tail: str | None = None  # set only when the middle was dropped
    total: int = 0

    @property
    def cut(self) -> bool:
        return self.tail is not None

    @property
    def text(self) -> str:
        if self.tail is None:
            return f"{self.header}\n{self.head}" if self.head else self.header
        omitted = self.total - len(self.head) - len(self.tail)
        return f"{self.header}\n{self.head}\n[... {omitted} characters omitted ...]\n{self.tail}"

    def resummarised(self) -> SummaryEntry:
        """This entry as a later compaction keeps it. A summary of a summary keeps half
        the head and tail of each result and half of each assistant reply (owner turns
        stay whole), so repeated compaction compounds its losses."""
        if self.kind == "assistant":
            return SummaryEntry(self.kind, self.header, self.head[: ASSISTANT_CHARS // 2], None, self.total)
        if self.kind != "tool":
            return self
        body = self.head if self.tail is None else self.head + "\n" + self.tail
        return _cut_tool(self.header, body, self.total, TOOL_HEAD_CHARS // 2, TOOL_TAIL_CHARS // 2)


def _cut_tool(header: str, text: str, total: int, head_chars: int, tail_chars: int) -> SummaryEntry:
    if len(text) <= head_chars + tail_chars:
        return SummaryEntry("tool", header, text, None, total)
    head = head_lines(text, head_chars)
    tail = tail_lines(text[len(head) :], tail_chars)
    return SummaryEntry("tool", header, head, tail, total)


@dataclass(frozen=True)
class Summary:
    """A rendered summary and the content-free facts about how it was made."""

    entries: tuple[SummaryEntry, ...]
    elided: int
    results_cut: int

    def render(self) -> str:
        return "\n\n".join([SUMMARY_OPENING, *(e.text for e in self.entries)])

    def tokens(self) -> int:
        return chars_to_tokens(len(self.render()))


def summary_entry(event: Event) -> SummaryEntry:
    """How this summariser keeps one event (the allowances of the module docstring). The
    model-backed summariser serialises its source with it too."""
    day = event.day
    if event.role == "user":
        label = "Owner (steer)" if event.steer else "Owner"
        return SummaryEntry("owner", f"[{label}, day {day}]", event.content[:OWNER_CHARS], None, len(event.content))
    if event.role == "assistant":
        if event.tool_calls and not event.content:
            names = ", ".join(call.function.name for call in event.tool_calls)
            return SummaryEntry("assistant", f"[Assistant called {names}, day {day}]", "", None, 0)
        head = event.content[:ASSISTANT_CHARS]
        return SummaryEntry("assistant", f"[Assistant, day {day}]", head, None, len(event.content))
    text = event.content
    tool = event.name or "tool"
    header = f"[Tool result {tool}, day {day}]"
    if len(text) > TOOL_HEAD_CHARS + TOOL_TAIL_CHARS:
        header = f"[Tool result {tool}, day {day}; head and tail of {len(text)} characters]"
    return _cut_tool(header, text, len(text), TOOL_HEAD_CHARS, TOOL_TAIL_CHARS)


def summarise(events: Sequence[Event], previous: SummaryLike | None = None) -> Summary:
    """Summarise ``events`` (in session order) after the entries of ``previous``, each
    re-summarised (``SummaryEntry.resummarised``).

    A ``Summariser`` (``summary.py``). ``previous`` must be a ``Summary``: a fold uses one
    summariser throughout, so a summary another summariser wrote is refused
    (``fold_input_invalid``), never silently dropped."""
    if previous is not None and not isinstance(previous, Summary):
        raise FoldError(
            Code.FOLD_INPUT_INVALID, "the deterministic summariser folds in only its own summaries"
        )
    carried = [e.resummarised() for e in previous.entries] if previous is not None else []
    fresh = [summary_entry(e) for e in events]
    entries = carried + fresh
    results_cut = (previous.results_cut if previous is not None else 0) + sum(1 for e in fresh if e.cut)
    elided = previous.elided if previous is not None else 0
    budget_chars = SUMMARY_BUDGET_TOKENS * 4
    total = len(SUMMARY_OPENING) + sum(len(e.text) + 2 for e in entries)
    if total > budget_chars:
        # Drop whole entries, cheapest kind first, oldest first within a kind.
        order = sorted(range(len(entries)), key=lambda i: (_ELISION_RANK[entries[i].kind], i))
        dropped: set[int] = set()
        for index in order:
            if total <= budget_chars:
                break
            dropped.add(index)
            total -= len(entries[index].text) + 2
        entries = [e for i, e in enumerate(entries) if i not in dropped]
        elided += len(dropped)
    return Summary(entries=tuple(entries), elided=elided, results_cut=results_cut)
