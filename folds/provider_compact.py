"""Provider compaction as a fold: the provider, not efold, compacts the older context.

Two arms, one fold (``ProviderCompactFold``), each naming its provider's endpoint
(``CompactionEndpoint``). Both have the ``compaction`` arm's boundary (the smallest
trigger, the same cut and the same 4,000-token recent tail: see ``compaction.py``), so
they differ from it, and from each other, only in who compacts the head:

* ``openai-compact``: the head (every message before the cut) becomes Responses input
  items (``request.message_items``), sent as **one** request to OpenAI's compaction
  endpoint (``guard.wire.compact_openai``: ``POST /responses/compact``). The reply's
  items (the owner messages the provider keeps verbatim, and exactly one opaque
  ``compaction`` item) are the opaque part.
* ``anthropic-compact``: the head becomes Messages ``messages``
  (``request.messages_conversation``), sent as **one** on-demand compaction request
  (``guard.wire.compact_anthropic``: ``POST /messages`` with ``compaction: {type:
  "summarize"}``, beta ``compact-2026-09-04``). The reply's one signed ``compaction``
  block is the opaque part. Its ``content`` is readable text, but efold treats the block
  as opaque all the same: it is signed for one provider, and a later request must send
  it back byte-exact; reading it would make availability depend on a provider's summary.

The opaque part becomes the checkpoint's ``OpaqueContext`` (``folds.opaque``:
digest-bound, marked with the provider and wire API that made it), the recent tail its
visible messages. A same-provider reader's first request starts with the opaque part
(``compact_openai.reader_input_items`` / ``compact_anthropic.reader_messages``), then
the tail, then the question. Any other reader cannot consume it: the plan marks its
slots inventory-infeasible (``inventory_opaque_reader``) and they are skipped and
counted, never sent.

Who sends the request is the caller's (``CompactCall``): in a prep child, one guarded,
paid request on the summariser route (``worker.compact_route.CompactRoute``, over the
child's permit session, through ``guard.compact.CompactGuard``); offline, the faux
provider's deterministic compaction (``guard.wire.faux``: ``faux_compaction``,
``faux_block_compaction``), whose opaque part is a digest, not content, and is marked
``faux``. What ``compact`` raises propagates, and nothing is built then. A reply that
is not the endpoint's documented shape (``CompactionEndpoint.check_reply``) is refused
(``fold_provider_compaction_invalid``): the guard settled the money already, the fold
refuses the content.

The receipt is content-free as every receipt: the ``CompactionStats`` of the one
compaction, where ``summary_tokens`` is the chars/4 estimate of the opaque items'
canonical JSON (the provider's own count is in the settled usage, not here).

Neither arm has run against the live service: their wire adapters are tested against
loopback servers reproducing the documented shapes (docs/folds.md §13).
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
from efold.folds.opaque import (
    ANTHROPIC_COMPACT_KIND,
    OPENAI_COMPACT_KIND,
    OpaqueContext,
    opaque_context,
    verify_opaque,
)
from efold.folds.request import checkpoint_to_request, message_items, messages_conversation
from efold.folds.transcript import reader_message, session_transcript
from efold.guard.wire.compact_anthropic import compaction_block
from efold.guard.wire.compact_openai import compaction_item, reader_input_items

# ``compact(head)``: send the head (in the endpoint's wire shape) to the compaction
# endpoint as one request and return the settled reply's output items; raise an
# ``EfoldError`` when the request did not settle.
CompactCall = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]

OPENAI_COMPACT_ARM: Final = "openai-compact"
ANTHROPIC_COMPACT_ARM: Final = "anthropic-compact"
PROVIDER_COMPACT_PRESSURE_TOKENS: Final = 150_000


@dataclass(frozen=True)
class ProviderCompacted:
    """A provider-compaction checkpoint: the visible part and the opaque part (None when
    the trigger was not reached and nothing was sent)."""

    checkpoint: Checkpoint
    opaque: OpaqueContext | None


def checked_reply(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI: the reply items when they are owner messages and exactly one compaction
    item; else ``fold_provider_compaction_invalid``."""
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


def checked_block_reply(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic: the reply when it is exactly one compaction block; else
    ``fold_provider_compaction_invalid``."""
    if len(items) != 1 or compaction_block(items[0]) is None:
        raise FoldError(Code.FOLD_PROVIDER_COMPACTION_INVALID,
                        f"reply holds {len(items)} blocks, not one compaction block")
    return items


def _responses_head(messages: list[ReaderMessage]) -> list[dict[str, Any]]:
    return [item for message in messages for item in message_items(message)]


@dataclass(frozen=True)
class CompactionEndpoint:
    """One provider's compaction endpoint, as a fold sees it: the arm that uses it, the
    opaque kind it makes, the one wire API that sends and reads it, the head in that
    API's shape, and the check of a settled reply."""

    arm: str
    kind: str
    api: str
    head: Callable[[list[ReaderMessage]], list[dict[str, Any]]]
    check_reply: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


OPENAI_COMPACT: Final = CompactionEndpoint(OPENAI_COMPACT_ARM, OPENAI_COMPACT_KIND,
                                           "openai-responses", _responses_head, checked_reply)
ANTHROPIC_COMPACT: Final = CompactionEndpoint(
    ANTHROPIC_COMPACT_ARM, ANTHROPIC_COMPACT_KIND, "anthropic-messages",
    messages_conversation, checked_block_reply)
ENDPOINTS: Final = {e.arm: e for e in (OPENAI_COMPACT, ANTHROPIC_COMPACT)}


class ProviderCompactFold:
    """A provider-compaction arm (see the module docstring). ``provider`` names the
    route that answers ``compact`` on the endpoint's API: with it, the only reader of
    its opaque items."""

    policy: CompactionPolicy = SMALLEST_TRIGGER

    def __init__(self, endpoint: CompactionEndpoint, compact: CompactCall, *,
                 provider: str) -> None:
        self.endpoint = endpoint
        self.name = endpoint.arm
        self._compact = compact
        self.provider = provider
        self.api = endpoint.api

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
        head = self.endpoint.head([reader_message(e) for e in transcript[:cut]])
        reply = self.endpoint.check_reply(self._compact(head))
        opaque = opaque_context(self.provider, self.api, self.endpoint.kind, reply)
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
            [pressure("compaction_tokens_before", before, PROVIDER_COMPACT_PRESSURE_TOKENS)],
            compactions=[] if stats is None else [stats],
        )


def reader_request(compacted: ProviderCompacted, question: str, *, model: str,
                   instructions: str) -> dict[str, Any]:
    """The first Responses payload of an ``openai-compact`` reader: the opaque items first
    (``reader_input_items``, after ``verify_opaque``), then the visible tail and the
    question exactly as ``request.checkpoint_to_request`` builds them."""
    payload = checkpoint_to_request(compacted.checkpoint, question, model=model,
                                    instructions=instructions)
    if compacted.opaque is None:
        return payload
    opaque = verify_opaque(compacted.opaque)
    return {**payload, "input": [*reader_input_items(opaque.items), *payload["input"]]}
