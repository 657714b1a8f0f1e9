"""Provider compaction as a fold: the provider, not efold, compacts the older context.

``OpenAICompactFold`` (arm ``openai-compact``) has the ``compaction`` arm's boundary
(the smallest trigger, the same cut and the same 4,000-token recent tail: see
``compaction.py``), so the two arms differ only in who compacts the head:

* the head (every message before the cut) becomes Responses input items
  (``request.message_items``) and is sent as **one** request to the provider's
  compaction endpoint (``guard.wire.compact_openai``: ``POST /responses/compact``);
* the reply's items (the owner messages the provider keeps verbatim, and exactly one
  opaque ``compaction`` item) become the checkpoint's ``OpaqueContext``
  (``folds.opaque``: digest-bound, marked with the provider and wire API that made
  them), the recent tail its visible messages.

A same-provider reader's first request starts with the opaque items
(``compact_openai.reader_input_items``), then the tail, then the question. Any other
reader cannot consume them: the plan marks its slots inventory-infeasible
(``inventory_opaque_reader``) and they are skipped and counted, never sent.

Who sends the request is the caller's (``CompactCall``): in a prep child, one guarded,
paid request on the summariser route (``worker.compact_route.CompactRoute``, over the
child's permit session, through ``guard.compact.CompactGuard``); offline, the faux provider's
deterministic compaction (``guard.wire.faux.faux_compaction``), whose opaque item is a
digest, not content, and is marked ``faux``. What ``compact`` raises propagates, and
nothing is built then. A reply without exactly one compaction item, or with an item
that is neither an owner message nor a compaction, is refused
(``fold_provider_compaction_invalid``): the guard settled the money already, the fold
refuses the content.

The receipt is content-free as every receipt: the ``CompactionStats`` of the one
compaction, where ``summary_tokens`` is the chars/4 estimate of the opaque items'
canonical JSON (the provider's own count is in the settled usage, not here).

Anthropic: the Messages API offers server-side context management
(``context_management.edits``: ``clear_tool_uses_20250919`` and
``clear_thinking_20251015`` behind the beta header ``context-management-2025-06-27``;
a ``compact_20260112`` summarising edit is reported by third parties). efold's guard
speaks no Messages wire format yet (``guard.contract.WireApi``), so no Anthropic arm
exists here: see docs/folds.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from efold.corpus.forms import chars_to_tokens
from efold.digests import canonical_json
from efold.errors import Code
from efold.folds.checkpoint import BoundaryEvidence, Checkpoint, CompactionStats, ReaderMessage
from efold.folds.compaction import SMALLEST_TRIGGER, CompactionPolicy, context_tokens, cut_index
from efold.folds.errors import FoldError
from efold.folds.fold import TracePrefix, build_checkpoint, pressure
from efold.folds.opaque import OPENAI_COMPACT_KIND, OpaqueContext, opaque_context, verify_opaque
from efold.folds.request import checkpoint_to_request, message_items
from efold.folds.transcript import reader_message, session_transcript
from efold.guard.wire.compact_openai import compaction_item, reader_input_items

# ``compact(items)``: send the Responses input ``items`` to the compaction endpoint as
# one request and return the settled reply's output items; raise an ``EfoldError`` when
# the request did not settle.
CompactCall = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]

OPENAI_COMPACT_ARM: Final = "openai-compact"
OPENAI_COMPACT_PRESSURE_TOKENS: Final = 150_000


@dataclass(frozen=True)
class ProviderCompacted:
    """A provider-compaction checkpoint: the visible part and the opaque part (None when
    the trigger was not reached and nothing was sent)."""

    checkpoint: Checkpoint
    opaque: OpaqueContext | None


def checked_reply(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reply items when they are owner messages and exactly one compaction item;
    else ``fold_provider_compaction_invalid``."""
    compactions = 0
    for item in items:
        if compaction_item(item) is not None:
            compactions += 1
        elif not (item.get("type") == "message" and item.get("role") == "user"):
            raise FoldError(Code.FOLD_PROVIDER_COMPACTION_INVALID,
                            "reply item is neither an owner message nor a compaction")
    if compactions != 1:
        raise FoldError(Code.FOLD_PROVIDER_COMPACTION_INVALID,
                        f"reply holds {compactions} compaction items, not one")
    return items


class OpenAICompactFold:
    """The ``openai-compact`` arm (see the module docstring). ``provider`` and ``api``
    name the route that answers ``compact``: the only reader of its opaque items."""

    name = OPENAI_COMPACT_ARM
    policy: CompactionPolicy = SMALLEST_TRIGGER

    def __init__(self, compact: CompactCall, *, provider: str, api: str) -> None:
        self._compact = compact
        self.provider = provider
        self.api = api

    def build(self, prefix: TracePrefix) -> Checkpoint:
        compacted = self.build_compacted(prefix)
        return msgspec.structs.replace(compacted.checkpoint, opaque=compacted.opaque)

    def build_compacted(self, prefix: TracePrefix) -> ProviderCompacted:
        transcript = session_transcript(prefix.events)
        overhead = prefix.context_overhead_tokens
        before = context_tokens(transcript) + overhead
        cut = cut_index(transcript, self.policy.keep_recent_tokens)
        tail = [reader_message(e) for e in transcript[cut:]]
        if before < self.policy.trigger_tokens or cut == 0:
            return ProviderCompacted(self._checkpoint(prefix, [reader_message(e) for e in transcript],
                                                      before, None), None)
        head: list[dict[str, Any]] = []
        for event in transcript[:cut]:
            head.extend(message_items(reader_message(event)))
        reply = checked_reply(self._compact(head))
        opaque = opaque_context(self.provider, self.api, OPENAI_COMPACT_KIND, reply)
        opaque_tokens = chars_to_tokens(len(canonical_json(opaque.items)))
        stats = CompactionStats(
            stage="probe", trigger_tokens=self.policy.trigger_tokens, tokens_before=before,
            tokens_after=opaque_tokens + context_tokens(transcript[cut:]) + overhead,
            summarised_messages=cut, kept_messages=len(transcript) - cut,
            summary_tokens=opaque_tokens, tool_results_cut=0, summary_entries_elided=0)
        return ProviderCompacted(self._checkpoint(prefix, tail, before, stats), opaque)

    def _checkpoint(self, prefix: TracePrefix, messages: list[ReaderMessage], before: int,
                    stats: CompactionStats | None) -> Checkpoint:
        return build_checkpoint(
            self.name, prefix, messages, [],
            BoundaryEvidence(kind="compaction", verified=stats is not None),
            [pressure("compaction_tokens_before", before, OPENAI_COMPACT_PRESSURE_TOKENS)],
            compactions=[] if stats is None else [stats],
        )


def reader_request(compacted: ProviderCompacted, question: str, *, model: str,
                   instructions: str) -> dict[str, Any]:
    """The first Responses payload of a same-provider reader: the opaque items first
    (``reader_input_items``, after ``verify_opaque``), then the visible tail and the
    question exactly as ``request.checkpoint_to_request`` builds them."""
    payload = checkpoint_to_request(compacted.checkpoint, question, model=model,
                                    instructions=instructions)
    if compacted.opaque is None:
        return payload
    opaque = verify_opaque(compacted.opaque)
    return {**payload, "input": [*reader_input_items(opaque.items), *payload["input"]]}
