"""A boundary case's fold regime: which span of its history a fold folds, and how.

A case's sidecar (``fold``) names its regime; ``fold_case`` builds the checkpoint its
continuation resumes from, with any fold (a built-in arm, a plugin, a command):

* **target** ``whole`` (the default): the fold folds the whole pre-fold session, as it
  folds every trace. ``oldest-safe-span``: the fold folds only the oldest span that
  closes cleanly (``safe_cut``); the rest of the session, the live work, is kept
  verbatim after the fold's output. A case whose session has no such span is invalid
  (``boundary_case_invalid``): its span would split a tool call from its result or cut
  into an unanswered turn.
* **mode** ``leaf`` (the default): one fold of that span. ``root``: a rebase, the
  leaf -> root lifecycle. First a **leaf** fold of the older sessions (every event
  before the span's last session), the old bundle; then the **root** fold of the whole
  span, offered the bundle's summary as its previous summary (``TracePrefix.prior``:
  the bundle's messages that are not a verbatim tail of the older sessions, and the id
  of the first event that tail kept). The fold may build on the bundle or rebuild
  from the source; the rebase is exact when the bundle's kept tail is exactly the
  newest events of the older sessions (``first_kept_id`` names the event it starts at)
  and its summary is offered intact. Each step is recorded in the checkpoint's receipt
  (``RebaseStats``, ``SpanStats``), so a report shows what the continuation resumed
  from, and ``folds_recorded`` counts the leaf's folds too.

The defaults (``leaf``, ``whole``) are exactly ``fold.build(prefix)``:
the checkpoint every campaign slot has always had.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from efold.corpus.model import Event
from efold.errors import Code
from efold.folds.checkpoint import (
    Checkpoint,
    FoldReceipt,
    ReaderMessage,
    RebaseStats,
    SpanStats,
    folds_recorded,
)
from efold.folds.errors import FoldError
from efold.folds.fold import Fold, PriorSummary, TracePrefix, build_receipt
from efold.folds.snapshot import content_digest
from efold.folds.transcript import reader_message

FoldMode = Literal["leaf", "root"]
FoldTarget = Literal["whole", "oldest-safe-span"]

def safe_cut(events: Sequence[Event]) -> int | None:
    """Where the oldest safe span ends: the index of the first kept event, or None when
    no cut is safe. A cut is safe before an owner turn (``user``, not a steer) that is
    not the first event, when the event before it is an assistant's answer without a
    tool call (the turn before is complete: no open obligation) and every tool call
    made before it has its result before it (no pair is split). Of the safe cuts, the
    newest: the span is everything before the newest owner turn that starts cleanly."""
    open_calls: set[str] = set()
    cut: int | None = None
    for i, event in enumerate(events):
        if (event.role == "user" and not event.steer and i > 0 and not open_calls
                and events[i - 1].role == "assistant" and not events[i - 1].tool_calls):
            cut = i
        for call in event.tool_calls or ():
            open_calls.add(call.id)
        if event.role == "tool" and event.tool_call_id is not None:
            open_calls.discard(event.tool_call_id)
    return cut


def older_sessions(events: Sequence[Event]) -> int | None:
    """The number of events before the last session (the leaf's span of a rebase): the
    events before the newest run of events of the last event's session; None when there
    are none."""
    cut = len(events)
    while cut > 0 and events[cut - 1].session == events[-1].session:
        cut -= 1
    return cut or None


def kept_tail(messages: Sequence[ReaderMessage], events: Sequence[Event]) -> int:
    """How many of ``messages`` are kept verbatim: the length of their longest suffix
    equal to the reader messages of the newest ``events``."""
    kept = 0
    while (kept < len(messages) and kept < len(events)
           and messages[-1 - kept] == reader_message(events[-1 - kept])):
        kept += 1
    return kept


def _invalid(detail: str) -> FoldError:
    return FoldError(Code.BOUNDARY_CASE_INVALID, detail)


def fold_case(fold: Fold, prefix: TracePrefix, *, mode: FoldMode = "leaf",
              target: FoldTarget = "whole") -> Checkpoint:
    """The checkpoint of ``prefix`` in the regime ``mode`` and ``target`` (module
    docstring)."""
    if mode == "leaf" and target == "whole":
        return fold.build(prefix)
    events = prefix.events
    cut = len(events)
    if target != "whole":
        found = safe_cut(events)
        if found is None:
            raise _invalid("fold.target oldest-safe-span: no span of the session closes "
                           "cleanly (every cut would split a tool call from its result or "
                           "an unanswered turn)")
        cut = found
    span = msgspec.structs.replace(prefix, events=list(events[:cut]))
    checkpoint = _rebase(fold, span) if mode == "root" else fold.build(span)
    if cut == len(events):
        return checkpoint
    return _with_tail(checkpoint, prefix, events[cut:], folded=cut)


def _rebase(fold: Fold, span: TracePrefix) -> Checkpoint:
    """The root fold of ``span``, offered the leaf fold of its older sessions."""
    older = older_sessions(span.events)
    if older is None:
        raise _invalid("fold.mode root: the folded span holds one session, so there is no "
                       "older bundle to rebase onto")
    old_events = span.events[:older]
    leaf = fold.build(msgspec.structs.replace(span, events=list(old_events)))
    kept = kept_tail(leaf.messages, old_events)
    summary = list(leaf.messages[: len(leaf.messages) - kept])
    first_kept = old_events[-kept].id if kept else None
    root_prefix = span
    if summary:
        root_prefix = msgspec.structs.replace(
            span, prior=PriorSummary(cycle=1, messages=summary, first_kept_id=first_kept))
    root = fold.build(root_prefix)
    stats = RebaseStats(leaf_events=older, leaf_checkpoint_sha256=content_digest(leaf),
                        leaf_folds=folds_recorded(leaf.receipt),
                        prior_messages=len(summary), first_kept_id=first_kept)
    return _with_receipt(root, msgspec.structs.replace(root.receipt, rebase=stats))


def _with_tail(checkpoint: Checkpoint, prefix: TracePrefix, tail: Sequence[Event], *,
               folded: int) -> Checkpoint:
    """``checkpoint`` followed by ``tail`` verbatim, its receipt recounted over the
    whole prefix (the fold's own evidence kept)."""
    messages = [*checkpoint.messages, *(reader_message(e) for e in tail)]
    r = checkpoint.receipt
    counted = build_receipt(arm=r.arm, prefix=prefix, messages=messages,
                            tools=checkpoint.tools, boundary=r.boundary, pressure=r.pressure,
                            projection=r.projection, compactions=r.compactions, pack=r.pack,
                            store=checkpoint.store)
    receipt = msgspec.structs.replace(
        counted, rebase=r.rebase, ledger=r.ledger,
        span=SpanStats(folded_events=folded, kept_events=len(tail), first_kept_id=tail[0].id))
    return _with_receipt(msgspec.structs.replace(checkpoint, messages=messages), receipt)


def _with_receipt(checkpoint: Checkpoint, receipt: FoldReceipt) -> Checkpoint:
    return msgspec.structs.replace(checkpoint, receipt=receipt)
